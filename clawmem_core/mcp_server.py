"""``clawmem mcp``: the memory tools as a Model Context Protocol server (official ``mcp`` SDK).

``memory_search``, ``memory_get`` and ``memory_write`` are served with the argument schemas of
:mod:`clawmem_core.tool_schemas` and the payloads of :mod:`clawmem_core.tools` (the tool result's
structured content is the payload, its text content the payload as JSON). One long-lived
:class:`MemoryIndex` answers every call, with the watcher on, so the index stays fresh and a local
embedding model is loaded once. Transports: stdio (what desktop apps and IDEs spawn) and
streamable HTTP on a local port.

Needs the ``mcp`` extra: ``pip install 'clawmem-py[mcp]'``.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any, Callable

from .errors import MissingDependencyError
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
    from mcp.server.lowlevel import Server

    from .index import MemoryIndex

__all__ = ["SERVER_NAME", "DEFAULT_PORT", "create_server", "tool_definitions", "serve_stdio", "serve_http"]

SERVER_NAME = "clawmem"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
DEFAULT_HTTP_PATH = "/mcp"
_INSTALL = "the MCP server needs the mcp extra: pip install 'clawmem-py[mcp]'"


def _require_mcp() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError as exc:
        raise MissingDependencyError(f"{_INSTALL} ({exc})") from None


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


def create_server(mem: "MemoryIndex", *, session_key: str | None = None,
                  include: tuple[str, ...] = (MEMORY_SEARCH_NAME, MEMORY_GET_NAME, MEMORY_WRITE_NAME)) -> "Server[Any]":
    """A low-level MCP ``Server`` offering the memory tools over ``mem`` (which the caller owns
    and closes). ``include`` leaves out tools (e.g. no ``memory_write`` for a read-only client);
    the server's instructions are the Memory Recall prompt section."""
    _require_mcp()
    import mcp.types as types
    from mcp.server.lowlevel import Server
    from mcp.shared.exceptions import MCPError
    from mcp.types.jsonrpc import INVALID_PARAMS

    definitions = [d for d in tool_definitions() if d["name"] in include]
    tools = [types.Tool(name=d["name"], description=d["description"], input_schema=d["input_schema"])
             for d in definitions]
    names = {d["name"] for d in definitions}

    async def list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: Any) -> Any:
        if params.name not in names:
            raise MCPError(INVALID_PARAMS, f"unknown tool {params.name!r}; this server has {', '.join(sorted(names))}")
        payload = await call_tool_payload(mem, params.name, params.arguments, session_key=session_key)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(payload, ensure_ascii=False))],
            structured_content=payload,
            is_error="error" in payload,
        )

    instructions = memory_recall_section(
        has_search=MEMORY_SEARCH_NAME in names, has_get=MEMORY_GET_NAME in names, citations=mem.config.citations)
    from . import __version__

    return Server(SERVER_NAME, version=__version__, instructions=instructions or None,
                  on_list_tools=list_tools, on_call_tool=call_tool)


def _start(mem: "MemoryIndex", watch: bool) -> None:
    if watch:
        mem.watch()  # re-index on file changes while the server runs


async def serve_stdio(mem: "MemoryIndex", *, watch: bool = True) -> None:
    """Serve over the process's stdin/stdout until the client closes them."""
    from mcp.server.stdio import stdio_server

    server = create_server(mem)
    _start(mem, watch)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


async def serve_http(mem: "MemoryIndex", *, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
                     path: str = DEFAULT_HTTP_PATH, watch: bool = True,
                     on_ready: Callable[[str], None] | None = None) -> None:
    """Serve streamable HTTP at ``http://host:port/path`` until cancelled. Loopback hosts get the
    SDK's DNS-rebinding protection; ``on_ready(url)`` is called once the port is listening."""
    import uvicorn

    server = create_server(mem)
    app = server.streamable_http_app(streamable_http_path=path, host=host)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
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
            on_ready(f"http://{host}:{bound}{path}")
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
