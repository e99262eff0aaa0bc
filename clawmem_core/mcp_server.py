"""``clawmem mcp``: the memory tools as a Model Context Protocol server (official ``mcp`` SDK).

``memory_search``, ``memory_get`` and ``memory_write`` are served with the argument schemas of
:mod:`clawmem_core.tool_schemas` and the payloads of :mod:`clawmem_core.tools` (the tool result's
structured content is the payload, its text content the payload as JSON). One long-lived
:class:`MemoryIndex` answers every call, with the watcher on, so the index stays fresh and a local
embedding model is loaded once. Transports: stdio (what desktop apps and IDEs spawn) and
streamable HTTP.

``memory_write`` is left out of the tool list on a replica (it could only fail there) and when the
server is read-only. Over HTTP the server is stateless (one JSON response per request, no sessions
a client could pile up), checks every request's ``Host`` and ``Origin`` against the allowed hosts
(loopback names and the bind address by default: no DNS rebinding), requires a bearer token when
tokens are given (and refuses to listen off loopback without them unless told ``insecure``), and
writes one access-log line per request: time, client, method, tool, outcome, duration; never the
arguments or a token.

Needs the ``mcp`` extra: ``pip install 'clawmem-py[mcp]'``; ``mcp`` 1.x (from 1.24, what
``langchain-mcp-adapters`` needs) and 2.x both work.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import hmac
import ipaddress
import json
import logging
import os
import re
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Iterable, Sequence
from urllib.parse import urlsplit

from .errors import ConfigError, MissingDependencyError
from .memory_write import MEMORY_WRITE_DESCRIPTION, MEMORY_WRITE_NAME, awrite_payload
from .tools import (
    MEMORY_GET_DESCRIPTION,
    MEMORY_GET_NAME,
    MEMORY_SEARCH_DESCRIPTION,
    MEMORY_SEARCH_NAME,
    asearch_payload,
    get_payload,
    invalid_arguments_payload,
    memory_recall_section,
    validation_message,
)

if TYPE_CHECKING:
    from .index import MemoryIndex

__all__ = [
    "SERVER_NAME", "DEFAULT_PORT", "MCP_REQUIREMENT", "TOKEN_ENV", "AccessToken", "create_server", "tool_definitions",
    "serve_stdio", "serve_http", "http_app", "served_tools", "load_tokens", "is_loopback", "allowed_hosts_for",
    "TokenFile", "check_agent_tokens",
]

SERVER_NAME = "clawmem"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
DEFAULT_HTTP_PATH = "/mcp"
#: The ``mcp`` releases this server runs on: 1.24 is the oldest ``langchain-mcp-adapters`` accepts,
#: 2.x is what ``llama-index-tools-mcp`` needs.
MCP_REQUIREMENT = "mcp>=1.24,<3"
#: The environment variable holding one accepted bearer token (beside or instead of a token file).
TOKEN_ENV = "CLAWMEM_MCP_TOKEN"
#: The shortest token accepted: a guessable token is no protection.
MIN_TOKEN_LENGTH = 16
#: Largest request body read (the SDK 2.x default; 1.x before 1.25 had no limit).
MAX_REQUEST_BODY = 4 * 1024 * 1024
_INSTALL = f"the MCP server needs the mcp extra: pip install 'clawmem-py[mcp]' ({MCP_REQUIREMENT})"
_ALL_TOOLS = (MEMORY_SEARCH_NAME, MEMORY_GET_NAME, MEMORY_WRITE_NAME)

access_log = logging.getLogger("clawmem.mcp.access")
#: The token of the HTTP request being answered (``None``: no tokens, or stdio).
_CALLER: "contextvars.ContextVar[AccessToken | None]" = contextvars.ContextVar("clawmem_mcp_caller", default=None)


def _mcp_version() -> tuple[int, ...] | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        text = version("mcp")
    except PackageNotFoundError:
        return None
    parts = []
    for piece in text.split(".")[:3]:
        digits = re.match(r"\d+", piece)
        if digits is None:
            break
        parts.append(int(digits.group()))
    return tuple(parts) or None


def _require_mcp() -> None:
    """Raise :class:`MissingDependencyError` with one line naming the ``mcp`` versions needed when
    the installed SDK is missing or outside :data:`MCP_REQUIREMENT`."""
    found = _mcp_version()
    if found is not None and not ((1, 24) <= found < (3,)):
        shown = ".".join(map(str, found))
        raise MissingDependencyError(f"the MCP server needs {MCP_REQUIREMENT}, found mcp {shown}: "
                                     f"pip install '{MCP_REQUIREMENT}'")
    try:
        import mcp  # noqa: F401
        from mcp.server.lowlevel import Server  # noqa: F401
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager  # noqa: F401
    except ImportError as exc:
        raise MissingDependencyError(f"{_INSTALL}; {exc}") from None


def _handlers_in_constructor() -> bool:
    """mcp 2.x takes the request handlers as ``Server(on_list_tools=..., on_call_tool=...)``; 1.x
    registers them with decorators."""
    import inspect

    from mcp.server.lowlevel import Server

    return "on_call_tool" in inspect.signature(Server.__init__).parameters


def tool_definitions() -> list[dict[str, Any]]:
    """``name``, ``description`` and JSON ``input_schema`` of the three tools, from the shared
    pydantic schemas (the same ones the LangChain and LlamaIndex adapters give their models)."""
    from .tool_schemas import MemoryGetInput, MemorySearchInput, MemoryWriteInput

    return [
        {"name": MEMORY_SEARCH_NAME, "description": MEMORY_SEARCH_DESCRIPTION,
         "input_schema": MemorySearchInput.model_json_schema(by_alias=True)},
        {"name": MEMORY_GET_NAME, "description": MEMORY_GET_DESCRIPTION,
         "input_schema": MemoryGetInput.model_json_schema(by_alias=True)},
        {"name": MEMORY_WRITE_NAME, "description": MEMORY_WRITE_DESCRIPTION,
         "input_schema": MemoryWriteInput.model_json_schema(by_alias=True)},
    ]


async def call_tool_payload(mem: "MemoryIndex", name: str, arguments: dict[str, Any] | None,
                            *, session_key: str | None = None) -> dict[str, Any]:
    """Validate ``arguments`` against the tool's schema and run it; the payload the model reads
    (invalid arguments become ``{error, action}``, never an exception)."""
    from pydantic import ValidationError

    from .tool_schemas import MemoryGetInput, MemorySearchInput, MemoryWriteInput

    args = dict(arguments or {})
    try:
        if name == MEMORY_SEARCH_NAME:
            search = MemorySearchInput.model_validate(args)
            return await asearch_payload(mem, search.query, search.max_results, search.min_score,
                                         session_key=session_key)
        if name == MEMORY_GET_NAME:
            get = MemoryGetInput.model_validate(args)
            return await asyncio.to_thread(get_payload, mem, get.path, get.from_line, get.lines)
        if name == MEMORY_WRITE_NAME:
            write = MemoryWriteInput.model_validate(args)
            return await awrite_payload(mem, write.text, write.target)
    except ValidationError as exc:
        return invalid_arguments_payload(name, validation_message(exc), args.get("path"))
    raise ValueError(f"unknown tool {name!r}; this server has {MEMORY_SEARCH_NAME}, {MEMORY_GET_NAME} and "
                     f"{MEMORY_WRITE_NAME}")


def served_tools(mem: "MemoryIndex", include: Iterable[str] = _ALL_TOOLS, *,
                 read_only: bool = False) -> tuple[str, ...]:
    """The tool names a server over ``mem`` offers: ``include`` less ``memory_write`` when
    ``read_only`` or when ``mem`` is a replica (no workspace: a write could only fail)."""
    writable = not read_only and not getattr(mem, "replica", False)
    return tuple(n for n in _ALL_TOOLS if n in set(include) and (writable or n != MEMORY_WRITE_NAME))


def create_server(mem: "MemoryIndex", *, session_key: str | None = None,
                  include: Iterable[str] = _ALL_TOOLS, read_only: bool = False) -> Any:
    """A low-level MCP ``Server`` offering the memory tools over ``mem`` (which the caller owns
    and closes). ``include`` leaves out tools; ``read_only=True`` (and a replica ``mem``) leaves out
    ``memory_write``. ``session_key`` (e.g. ``discord:group:42``) reaches every search, so the
    citation rules of group chats apply. The server's instructions are the Memory Recall prompt
    section."""
    _require_mcp()
    names = served_tools(mem, include, read_only=read_only)

    async def own_names() -> tuple[str, ...]:
        return names

    async def own_call(name: str, arguments: dict[str, Any] | None) -> dict[str, Any]:
        return await call_tool_payload(mem, name, arguments, session_key=session_key)

    return _build_server(own_names, own_call, citations=mem.config.citations,
                         has_search=MEMORY_SEARCH_NAME in names, has_get=MEMORY_GET_NAME in names)


def _build_server(names_now: Callable[[], Any], call: Callable[[str, dict[str, Any] | None], Any], *,
                  citations: Any, has_search: bool = True, has_get: bool = True) -> Any:
    """A low-level MCP ``Server`` whose tool list is ``await names_now()`` (asked per request: it
    may depend on the caller) and whose calls run ``await call(name, arguments)``."""
    import mcp.types as types
    from mcp.server.lowlevel import Server

    definitions = {d["name"]: types.Tool.model_validate({"name": d["name"], "description": d["description"],
                                                          "inputSchema": d["input_schema"]})
                   for d in tool_definitions()}
    modern = _handlers_in_constructor()

    def unknown(name: str, names: Sequence[str]) -> Exception:
        message = f"unknown tool {name!r}; this server has {', '.join(sorted(names))}"
        if modern:
            from mcp.shared.exceptions import MCPError
            from mcp.types.jsonrpc import INVALID_PARAMS

            return MCPError(INVALID_PARAMS, message)
        return ValueError(message)  # mcp 1.x answers it as an error result

    async def run_tool(name: str, arguments: dict[str, Any] | None) -> Any:
        names = await names_now()
        if name not in names:
            raise unknown(name, names)
        payload = await call(name, arguments)
        return types.CallToolResult.model_validate({
            "content": [{"type": "text", "text": json.dumps(payload, ensure_ascii=False)}],
            "structuredContent": payload,
            "isError": "error" in payload,
        })

    instructions = memory_recall_section(has_search=has_search, has_get=has_get, citations=citations)
    from . import __version__

    if modern:
        async def list_tools(ctx: Any, params: Any) -> Any:
            return types.ListToolsResult(tools=[definitions[n] for n in await names_now()])

        async def call_tool(ctx: Any, params: Any) -> Any:
            return await run_tool(params.name, params.arguments)

        return Server(SERVER_NAME, version=__version__, instructions=instructions or None,
                      on_list_tools=list_tools, on_call_tool=call_tool)

    server = Server(SERVER_NAME, version=__version__, instructions=instructions or None)

    @server.list_tools()  # type: ignore[misc,untyped-decorator]
    async def _list_tools() -> list[Any]:
        return [definitions[n] for n in await names_now()]

    @server.call_tool(validate_input=False)  # type: ignore[misc,untyped-decorator]
    async def _call_tool(name: str, arguments: dict[str, Any]) -> Any:  # the payload says what to fix
        return await run_tool(name, arguments)

    return server


def _warm(mem: "MemoryIndex") -> None:
    """Load the embedding model (a local model: seconds) so that the first call costs what the
    others do; a failure is the first search's to report."""
    try:
        from .registry import warm_up

        warm_up(mem.embedder)
    except Exception as exc:
        logging.getLogger("clawmem").warning("loading the embedding model at start failed: %s", exc)


def _start(mem: "MemoryIndex", watch: bool) -> threading.Thread:
    """Start the model's load (in a thread: the server answers meanwhile; a call that needs the
    model waits for it) and the watcher."""
    warm = threading.Thread(target=_warm, args=(mem,), name="clawmem-mcp-warm-up", daemon=True)
    warm.start()
    if watch:
        mem.watch()  # re-index on file changes while the server runs
    return warm


async def serve_stdio(mem: "MemoryIndex", *, watch: bool = True, read_only: bool = False,
                      session_key: str | None = None) -> None:
    """Serve over the process's stdin/stdout until the client closes them."""
    from mcp.server.stdio import stdio_server

    server = create_server(mem, read_only=read_only, session_key=session_key)
    _start(mem, watch)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


# --------------------------------------------------------------------------------------------------
# HTTP: who may call
# --------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class AccessToken:
    """One accepted bearer token: ``agent`` is the agent whose memory its caller sees (``None``:
    the server's own index), ``read_only`` leaves ``memory_write`` out for it, and ``shared`` names
    the shared namespaces its searches include (``None``: those of the server's configuration)."""

    token: str = dataclasses.field(repr=False)
    agent: str | None = None
    read_only: bool = False
    shared: tuple[str, ...] | None = None


def _check_token(token: Any, where: str, **grant: Any) -> AccessToken:
    if not isinstance(token, str):
        raise ConfigError(f"{where}: a token must be a string, got {type(token).__name__}")
    if token != token.strip() or any(c.isspace() or not c.isprintable() for c in token):
        raise ConfigError(f"{where}: a token must not hold spaces or control characters")
    if len(token) < MIN_TOKEN_LENGTH:
        raise ConfigError(f"{where}: a token must be at least {MIN_TOKEN_LENGTH} characters long (e.g. "
                          "python -c 'import secrets; print(secrets.token_urlsafe(32))')")
    return AccessToken(token, **grant)


def _grant(value: Any, where: str) -> dict[str, Any]:
    """The agent, read-only flag and shared namespaces one entry of a token object grants."""
    from .store.base import check_agent_id

    if isinstance(value, str):
        value = {"agent": value}
    if not isinstance(value, dict):
        raise ConfigError(f'{where}: expected an agent id or {{"agent": ID, "read_only": bool, "shared": [...]}}, '
                          f"got {type(value).__name__}")
    unknown = sorted(set(value) - {"agent", "read_only", "shared"})
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))} (agent, read_only, shared)")
    agent = value.get("agent")
    if not isinstance(agent, str) or not agent:
        raise ConfigError(f"{where}: \"agent\" must be an agent id (a non-empty string)")
    try:
        check_agent_id(agent)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    read_only = value.get("read_only", False)
    if not isinstance(read_only, bool):
        raise ConfigError(f'{where}: "read_only" must be true or false')
    shared = value.get("shared")
    if shared is not None:
        if not isinstance(shared, list) or not all(isinstance(n, str) and n.strip() for n in shared):
            raise ConfigError(f'{where}: "shared" must be a list of namespace names')
        shared = tuple(n.strip() for n in shared)
    return {"agent": agent, "read_only": read_only, "shared": shared}


def _file_tokens(path: str | os.PathLike[str]) -> list[AccessToken]:
    where = f"token file {os.fspath(path)}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where} cannot be read: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where} is not JSON (line {exc.lineno}): expected a list of token strings, "
                          'e.g. ["<token>", "<token>"], or an object mapping tokens to agents') from None
    if isinstance(data, dict):
        if not data:
            raise ConfigError(f"{where} maps no token")
        mode = os.stat(path).st_mode
        if mode & 0o077:
            raise ConfigError(f"{where} can be read by other users (mode {mode & 0o777:o}); "
                              f"chmod 600 {os.fspath(path)}")
        return [_check_token(token, f"{where}, entry {i + 1}", **_grant(value, f"{where}, entry {i + 1}"))
                for i, (token, value) in enumerate(data.items())]
    if not isinstance(data, list):
        kind = {str: "a string"}.get(type(data), type(data).__name__)
        raise ConfigError(f'{where} holds {kind}: expected a JSON list of token strings, e.g. ["<token>"], or an '
                          'object mapping tokens to agents, e.g. {"<token>": "alice"}')
    if not data:
        raise ConfigError(f"{where} lists no token")
    return [_check_token(t, f"{where}, entry {i + 1}") for i, t in enumerate(data)]


def load_tokens(path: str | os.PathLike[str] | None = None, *,
                env: dict[str, str] | None = None) -> tuple[AccessToken, ...]:
    """The accepted bearer tokens: those of the JSON file ``path`` and the one in
    ``$CLAWMEM_MCP_TOKEN`` (the server's own index). The file is a list of strings (e.g.
    ``["3kY…", "Qp9…"]``: every token sees the server's own index) or an object mapping each token
    to an agent id or to ``{"agent": ID, "read_only": bool, "shared": [namespaces]}`` (each caller
    sees only that agent's memory); an object file readable by group or others is refused. Any
    other shape is a :class:`ConfigError`; no message ever shows a token."""
    tokens: list[AccessToken] = []
    if path is not None:
        tokens += _file_tokens(path)
    value = (os.environ if env is None else env).get(TOKEN_ENV)
    if value:
        tokens.append(_check_token(value, f"${TOKEN_ENV}"))
    return tuple(tokens)


def _signature(path: str | os.PathLike[str]) -> tuple[int, ...] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino, st.st_mode)


class TokenFile:
    """The tokens of a token file, read again when the file changes (its mtime, size, inode or
    mode, looked at per request): a new file that cannot be used keeps the tokens in force and
    reports why through ``on_error`` (once per version of the file)."""

    def __init__(self, path: str | os.PathLike[str], *, env: dict[str, str] | None = None,
                 on_error: Callable[[str], None] | None = None,
                 check: Callable[[Sequence[AccessToken]], None] | None = None) -> None:
        self.path = os.fspath(path)
        self.check = check
        self.env = dict(os.environ if env is None else env)
        self.on_error = on_error or (lambda line: logging.getLogger("clawmem").error("%s", line))
        self._lock = threading.Lock()
        self._seen = _signature(self.path)
        self.tokens = self._load()

    def _load(self) -> tuple[AccessToken, ...]:
        tokens = load_tokens(self.path, env=self.env)
        if self.check is not None:
            self.check(tokens)
        return tokens

    def current(self) -> tuple[AccessToken, ...]:
        """The tokens in force now (the file read again if it changed)."""
        seen = _signature(self.path)
        if seen == self._seen:
            return self.tokens
        with self._lock:
            if seen != self._seen:
                self._seen = seen
                try:
                    self.tokens = self._load()
                except ConfigError as exc:
                    self.on_error(f"{exc}; the tokens read before stay in force")
        return self.tokens


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a bind address) is only reachable from this machine."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _host_form(name: str) -> str:
    """``name`` as it appears in a ``Host`` header (IPv6 in brackets), lower-case."""
    name = name.strip().lower().rstrip(".")
    if ":" in name and not name.startswith("["):
        return f"[{name}]"
    return name


def _split_host(value: str) -> tuple[str, str | None]:
    """``Host`` header (or ``--allowed-host``) value -> (host form, port or None)."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return value, None
        rest = value[end + 1:]
        return value[: end + 1], (rest[1:] if rest.startswith(":") else None)
    if value.count(":") == 1:
        name, port = value.split(":")
        return name.rstrip("."), port
    return _host_form(value), None


def allowed_hosts_for(host: str, extra: Sequence[str] = ()) -> tuple[str, ...]:
    """The ``Host`` values a server bound to ``host`` accepts: the loopback names, the bind
    address (unless it is a wildcard such as 0.0.0.0) and ``extra`` (``name`` for any port,
    ``name:port`` for one)."""
    names = ["127.0.0.1", "localhost", "[::1]"]
    bind = _host_form(host)
    if bind not in ("0.0.0.0", "[::]", "") and bind not in names:
        names.append(bind)
    for value in extra:
        name, port = _split_host(value)
        if not name or (port is not None and not port.isdigit()):
            raise ConfigError(f"allowed host {value!r} is not a host name, address or host:port")
        entry = f"{name}:{port}" if port else name
        if entry not in names:
            names.append(entry)
    return tuple(names)


class _Policy:
    """Host/Origin and bearer-token checks of one HTTP server."""

    def __init__(self, allowed_hosts: Sequence[str], tokens: "Sequence[AccessToken] | TokenFile") -> None:
        self.any_port = {h for h in allowed_hosts if _split_host(h)[1] is None}
        self.exact = {h for h in allowed_hosts if _split_host(h)[1] is not None}
        self._source = tokens

    def _tokens(self) -> Sequence[AccessToken]:
        return self._source.current() if isinstance(self._source, TokenFile) else self._source

    @property
    def needs_token(self) -> bool:
        return isinstance(self._source, TokenFile) or bool(self._source)

    def host_ok(self, value: str | None) -> bool:
        if not value:
            return False
        name, port = _split_host(value)
        return name in self.any_port or (port is not None and f"{name}:{port}" in self.exact)

    def origin_ok(self, value: str | None) -> bool:
        if value is None:
            return True  # not a browser (browsers send Origin on every cross-origin POST)
        try:
            parts = urlsplit(value.strip())
            port = parts.port
        except ValueError:
            return False
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return False
        host = _host_form(parts.hostname) + (f":{port}" if port is not None else "")
        return self.host_ok(host)

    def caller(self, header: str | None) -> AccessToken | None:
        """The accepted token ``header`` (``Bearer <token>``) presents, or ``None``."""
        scheme, _, value = (header or "").strip().partition(" ")
        presented = value.strip().encode("utf-8", "surrogateescape")
        found: AccessToken | None = None
        for accepted in self._tokens():  # every token is compared: the time says nothing about which matched
            if hmac.compare_digest(presented, accepted.token.encode("utf-8")) and found is None:
                found = accepted
        return found if scheme.lower() == "bearer" else None

    def token_ok(self, header: str | None) -> bool:
        return self.caller(header) is not None

    def sdk_settings(self) -> Any:
        """The same hosts as the SDK's own DNS-rebinding check (a second lock on the endpoint)."""
        from mcp.server.transport_security import TransportSecuritySettings

        hosts = [*self.exact, *self.any_port, *(f"{h}:*" for h in self.any_port)]
        origins = [f"{scheme}://{h}" for scheme in ("http", "https") for h in hosts]
        return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                         allowed_origins=origins)


_METHOD_RE = re.compile(r"[a-z][a-zA-Z/_]{0,63}")


def _describe(body: bytes) -> tuple[str, str | None]:
    """(JSON-RPC method, tool name) of a request body for the access log: only known tool names
    and method-shaped strings, never arguments or text the client chose freely."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return "-", None
    messages = data if isinstance(data, list) else [data]
    methods, tools = [], []
    for message in messages[:8]:
        if not isinstance(message, dict):
            continue
        method = message.get("method")
        methods.append(method if isinstance(method, str) and _METHOD_RE.fullmatch(method) else "?")
        params = message.get("params")
        if method == "tools/call" and isinstance(params, dict):
            name = params.get("name")
            tools.append(name if name in _ALL_TOOLS else "unknown-tool")
    return ",".join(methods) or "-", ",".join(tools) or None


def _outcome(status: int, body: bytes) -> str:
    if status >= 400:
        return "error"
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return "ok"
    replies = data if isinstance(data, list) else [data]
    if any(isinstance(r, dict) and "error" in r for r in replies):
        return "rpc-error"
    if any(isinstance(r, dict) and isinstance(r.get("result"), dict) and r["result"].get("isError") for r in replies):
        return "tool-error"
    return "ok"


class _Guard:
    """ASGI middleware in front of the MCP app: refuses a foreign ``Host`` or ``Origin`` (421 /
    403), a missing or wrong bearer token (401) and an oversized body (413), and logs one line per
    request."""

    def __init__(self, app: Any, policy: _Policy, log: Callable[[str], None],
                 max_body: int = MAX_REQUEST_BODY) -> None:
        self.app, self.policy, self.log, self.max_body = app, policy, log, max_body

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        client = scope.get("client")
        who = f"{client[0]}:{client[1]}" if client else "-"
        what = f"{scope.get('method', '-')} {scope.get('path', '-')}"

        async def refuse(status: int, reason: str, extra: dict[str, str] | None = None) -> None:
            body = json.dumps({"error": reason}).encode()
            head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            head += [(k.encode(), v.encode()) for k, v in (extra or {}).items()]
            await send({"type": "http.response.start", "status": status, "headers": head})
            await send({"type": "http.response.body", "body": body})
            self._line(started, who, what, None, f"refused {status} ({reason})")

        if not self.policy.host_ok(headers.get("host")):
            return await refuse(421, "this Host is not served here (clawmem mcp --allowed-host NAME)")
        if not self.policy.origin_ok(headers.get("origin")):
            return await refuse(403, "requests from this Origin are refused")
        caller = self.policy.caller(headers.get("authorization")) if self.policy.needs_token else None
        if self.policy.needs_token and caller is None:
            return await refuse(401, "a valid bearer token is required (Authorization: Bearer <token>)",
                                {"www-authenticate": 'Bearer realm="clawmem"'})
        if caller is not None and caller.agent is not None:
            what += f" agent={caller.agent}"  # the agent, never the token
        _CALLER.set(caller)  # the tools of this request act for this caller

        body = b""
        if scope.get("method") == "POST":
            declared = headers.get("content-length", "")
            if declared.isdigit() and int(declared) > self.max_body:
                return await refuse(413, f"request body over {self.max_body} bytes")
            chunks, size, more = [], 0, True
            while more:
                message = await receive()
                if message["type"] != "http.request":
                    return  # the client went away
                chunks.append(message.get("body", b""))
                size += len(chunks[-1])
                if size > self.max_body:
                    return await refuse(413, f"request body over {self.max_body} bytes")
                more = message.get("more_body", False)
            body = b"".join(chunks)
        method, tool = _describe(body) if body else ("-", None)
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if scope.get("method") == "POST" and not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        status, kept, keep = 500, bytearray(), tool is not None

        async def watch(message: dict[str, Any]) -> None:
            nonlocal status, keep
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body" and keep:
                kept.extend(message.get("body", b""))
                if len(kept) > self.max_body:  # the outcome is read from the status alone
                    keep = False
                    kept.clear()
            await send(message)

        outcome = "error"
        try:
            await self.app(scope, replay, watch)
            outcome = _outcome(status, bytes(kept))
        finally:
            label = f"{what} {method}" + (f" {tool}" if tool else "")
            self._line(started, who, label, status, outcome)

    def _line(self, started: float, who: str, what: str, status: int | None, outcome: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        took = (time.monotonic() - started) * 1000
        tail = f" {status}" if status is not None else ""
        try:
            self.log(f"{stamp} {who} {what} {outcome}{tail} {took:.0f}ms")
        except Exception:  # a broken log sink never breaks a call
            pass


def _default_log(line: str) -> None:
    access_log.info(line)


# --------------------------------------------------------------------------------------------------
# HTTP: the server
# --------------------------------------------------------------------------------------------------


class _Agents:
    """The indexes of the agents tokens map to: one :class:`~clawmem_core.registry.MemoryIndexes`
    per set of shared namespaces (usually one), over the server's store and configuration, sharing
    the server's embedder (one model in memory). ``workspaces_root``: each agent's Markdown is
    ``<root>/<agent>`` (SQLite needs it; on PostgreSQL without it every agent is a replica)."""

    def __init__(self, mem: "MemoryIndex", workspaces_root: str | os.PathLike[str] | None,
                 max_open: int = 100) -> None:
        self.mem, self.root, self.max_open = mem, workspaces_root, max_open
        self._lock = threading.Lock()
        self._registries: dict[tuple[str, ...] | None, Any] = {}

    def registry(self, shared: tuple[str, ...] | None) -> Any:
        from .registry import MemoryIndexes, SharedEmbedder

        with self._lock:
            found = self._registries.get(shared)
            if found is None:
                config = self.mem.config
                if shared is not None:
                    config = dataclasses.replace(config, shared=list(shared))
                emb = self.mem.embedder
                found = self._registries[shared] = MemoryIndexes(
                    config, workspace_root=self.root, max_open=self.max_open,
                    embedder=SharedEmbedder(emb) if emb is not None else None)
            return found

    def close(self) -> None:
        with self._lock:
            registries, self._registries = list(self._registries.values()), {}
        for registry in registries:
            registry.close()


def check_agent_tokens(mem: "MemoryIndex", tokens: Sequence[AccessToken],
                       workspaces_root: str | os.PathLike[str] | None) -> None:
    """A :class:`ConfigError` when tokens map to agents but their memory has nowhere to be: a
    SQLite store needs ``workspaces_root`` (one workspace per agent)."""
    from .index_parts.stores import store_url

    if any(t.agent is not None for t in tokens) and workspaces_root is None and not store_url(mem.config):
        raise ConfigError("the token file maps tokens to agents: give --workspaces-root DIR (each agent's "
                          "workspace is DIR/<agent>) or a PostgreSQL store (--store URL)")


def _multi_server(mem: "MemoryIndex", agents: _Agents, *, include: Iterable[str] = _ALL_TOOLS,
                  read_only: bool = False, session_key: str | None = None) -> Any:
    """The MCP server of :func:`http_app`: each request's tools act on the memory of the agent its
    token maps to (the server's own ``mem`` for a token without an agent)."""
    _require_mcp()

    @contextlib.asynccontextmanager
    async def memory() -> AsyncIterator[tuple["MemoryIndex", bool]]:
        caller = _CALLER.get()
        if caller is None or caller.agent is None:
            yield mem, read_only
            return
        async with agents.registry(caller.shared).alease(caller.agent) as own:
            yield own, read_only or caller.read_only

    async def names_now() -> tuple[str, ...]:
        async with memory() as (own, ro):
            return served_tools(own, include, read_only=ro)

    async def call(name: str, arguments: dict[str, Any] | None) -> dict[str, Any]:
        async with memory() as (own, _ro):
            return await call_tool_payload(own, name, arguments, session_key=session_key)

    return _build_server(names_now, call, citations=mem.config.citations)


def http_app(mem: "MemoryIndex", *, host: str = DEFAULT_HOST, path: str = DEFAULT_HTTP_PATH,
             tokens: "Sequence[AccessToken] | TokenFile" = (), allowed_hosts: Sequence[str] = (),
             read_only: bool = False, session_key: str | None = None, log: Callable[[str], None] | None = None,
             workspaces_root: str | os.PathLike[str] | None = None) -> Any:
    """The ASGI app of :func:`serve_http` (stateless streamable HTTP behind the Host/Origin,
    token and size checks). ``tokens`` may be a :class:`TokenFile` (read again when it changes)."""
    _require_mcp()
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from starlette.applications import Starlette
    from starlette.routing import Route

    policy = _Policy(allowed_hosts_for(host, allowed_hosts), tokens)
    agents = _Agents(mem, workspaces_root)
    # Stateless with JSON responses: no session outlives its request, so no client can fill a
    # session table (the SDK's stateful default keeps up to 10,000 for 30 minutes) and lock others out.
    manager = StreamableHTTPSessionManager(app=_multi_server(mem, agents, read_only=read_only, session_key=session_key),
                                           json_response=True, stateless=True, security_settings=policy.sdk_settings())

    class Endpoint:
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            await manager.handle_request(scope, receive, send)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        try:
            async with manager.run():
                yield
        finally:
            await asyncio.to_thread(agents.close)

    app = Starlette(routes=[Route(path, endpoint=Endpoint())], lifespan=lifespan)
    return _Guard(app, policy, log or _default_log)


async def serve_http(mem: "MemoryIndex", *, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
                     path: str = DEFAULT_HTTP_PATH, watch: bool = True,
                     on_ready: Callable[[str], None] | None = None,
                     tokens: "Sequence[AccessToken] | TokenFile" = (), allowed_hosts: Sequence[str] = (),
                     insecure: bool = False, read_only: bool = False, session_key: str | None = None,
                     log: Callable[[str], None] | None = None,
                     workspaces_root: str | os.PathLike[str] | None = None) -> None:
    """Serve streamable HTTP at ``http://host:port/path`` until cancelled; ``on_ready(url)`` is
    called once the port is listening. With ``tokens`` every request needs ``Authorization:
    Bearer <token>``; a host other than loopback without tokens is a :class:`ConfigError` unless
    ``insecure=True``. ``allowed_hosts`` adds ``Host`` names to the loopback names and the bind
    address. ``log`` receives the access-log lines (default: the ``clawmem.mcp.access`` logger).
    Tokens mapped to agents (see :func:`load_tokens`) each see that agent's memory, opened through
    a :class:`~clawmem_core.registry.MemoryIndexes` over ``mem``'s store and configuration, with
    each agent's workspace at ``workspaces_root/<agent>``."""
    current = tokens.current() if isinstance(tokens, TokenFile) else tokens
    check_agent_tokens(mem, current, workspaces_root)
    if not current and not insecure and not is_loopback(host):
        raise ConfigError(
            f"refusing to serve MCP on {host} without tokens: anyone who reaches this address could read and "
            f"write this memory. Give tokens (--tokens FILE, a JSON list, or ${TOKEN_ENV}), bind to "
            "127.0.0.1, or pass --insecure to serve without authentication anyway")
    import uvicorn

    app = http_app(mem, host=host, path=path, tokens=tokens, allowed_hosts=allowed_hosts, read_only=read_only,
                   session_key=session_key, log=log, workspaces_root=workspaces_root)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on", access_log=False,
                            proxy_headers=False)  # the access log names the real peer, not a header's claim
    web = uvicorn.Server(config)
    _start(mem, watch)
    task = asyncio.create_task(_serve(web))
    try:
        while not web.started:
            if task.done():
                await task
                raise OSError(f"the MCP HTTP server could not listen on {host}:{port} (is the port in use?)")
            await asyncio.sleep(0.05)
        if on_ready is not None:
            bound = port
            for listener in web.servers:  # port 0: the port the system chose
                for sock in listener.sockets:
                    bound = sock.getsockname()[1]
            on_ready(f"http://{_host_form(host)}:{bound}{path}")
        await task
    finally:
        web.should_exit = True
        if not task.done():
            await task


async def _serve(web: Any) -> None:
    try:
        await web.serve()
    except SystemExit:  # uvicorn exits when it cannot bind; the caller reports it
        pass
