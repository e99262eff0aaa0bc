"""A running ``clawmem watch`` answers ``clawmem search`` and ``clawmem get`` for its index, over
a local Unix socket beside the index (``<state dir>/memory/<index name>.sock``, mode 0600).

A one-shot ``clawmem search`` pays for its interpreter's imports and for checking every memory
file (SPEC 6: it must see every edit that finished before it started). A watcher holds the index
open with its change journal (:mod:`clawmem_core.journal`): its sync reads the kernel's queue of
changes, which holds every edit that finished before the request was sent, and checks only the
files it names. So the command first asks the watcher, and the watcher runs the very command
function the CLI would run (same text, ``--json`` payload, errors and exit code), captured and
sent back. Where the journal cannot vouch for the files (no inotify, a network file system, an
overflow), the watcher's sync walks them, as the CLI would.

The client imports almost nothing (this module, ``json``, ``_socket``), sends what decides which
index and settings it would open (:func:`settings`: the workspace's real path, the agent, the
config file's content checksum, provider, model, store, shared namespaces, the environment that
chooses them, the code's own file) with the call's options, and answers only when a watcher
running on Linux, as the same user (``SO_PEERCRED``), with the same settings, accepts. Anything
else (no socket, a stale one, another user's, a refusal, a timeout, a malformed or oversized reply,
the watcher killed mid-request) and :func:`answer` returns ``None``: the CLI runs the command
itself, as before.

The server serves only on Linux (the peer's uid is checked with ``SO_PEERCRED``); one watcher per
socket (a lock file beside it, held while serving: a second watcher of the same index does not
serve, and never removes the first one's socket); a stale socket (its watcher gone) is replaced,
anything else found at its path (a file, a symlink) is left alone and nothing is served.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Callable, Sequence

#: Bumped when the request or the reply changes (a watcher of another version is not asked).
PROTOCOL = 1
#: Longest request and reply read (bytes): a request is a query and a few options.
MAX_REQUEST = 256 * 1024
MAX_REPLY = 64 * 1024 * 1024
#: Seconds the client waits for the connection and the watcher's acceptance, and the watcher
#: for a request to arrive.
CONNECT_TIMEOUT = 2.0
REQUEST_TIMEOUT = 5.0
#: Seconds the client waits for the answer once accepted (plus ``--wait``): a watcher that
#: takes longer is given up, and the command runs itself.
ANSWER_TIMEOUT = 300.0
#: Connections served at once (more are closed: their clients run the command themselves).
MAX_CLIENTS = 16
#: ``AF_UNIX`` socket paths are limited to 108 bytes with the final NUL on Linux.
_SUN_PATH_MAX = 107
#: Setting this to ``0`` makes the CLI run every command itself.
ENV_SWITCH = "CLAWMEM_CLI_WATCHER"

#: Per-call options of each command: (name, kind). Kinds: ``str?`` a string or null, ``str``,
#: ``int?`` (1 or more for ``line``), ``float?``, ``seconds``, ``bool``.
CALLS: dict[str, tuple[tuple[str, str], ...]] = {
    "search": (("query", "str?"), ("query_opt", "str?"), ("max_results", "int?"), ("min_score", "float?"),
               ("wait", "seconds"), ("json", "bool"), ("no_record", "bool")),
    "get": (("path", "str"), ("from_line", "line?"), ("lines", "line?"), ("json", "bool")),
}

_VALUE_OPTS = {"--workspace": "workspace", "-w": "workspace", "--agent": "agent", "--config": "config",
               "--provider": "provider", "--model": "model", "--store": "store", "--shared": "shared"}
_CALL_OPTS = {
    "search": {"--query": "query_opt", "--max-results": "max_results", "--min-score": "min_score", "--wait": "wait"},
    "get": {"--from": "from_line", "--lines": "lines"},
}
_FLAGS = {"search": {"--json": "json", "--no-record": "no_record"}, "get": {"--json": "json"}}
_DEFAULT_WAIT = 30.0  # clawmem_core.cli.DEFAULT_SEARCH_WAIT (a test checks they agree)


# -- what identifies the index and its settings --------------------------------------------------------------------


def _crc(data: bytes) -> int:
    import zlib

    return zlib.crc32(data)


def _env_fingerprint(environ: Any) -> list[list[Any]]:
    """The environment that can change which index or embedder a command uses (``CLAWMEM_*``,
    API keys and base URLs), as checksums (a key is never sent)."""
    out = []
    for name in sorted(environ):
        if name == ENV_SWITCH:
            continue
        if name.startswith("CLAWMEM_") or name.endswith(("_API_KEY", "_BASE_URL")):
            out.append([name, _crc(os.fsencode(environ[name]))])
    return out


def _code_stamp() -> list[Any]:
    """This installation of the code (a watcher started before an upgrade is not asked)."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        st = os.stat(os.path.join(here, "cli.py"))
    except OSError:
        return [here]
    return [here, st.st_size, st.st_mtime_ns]


def settings(workspace: str | None, *, agent: str | None = None, config: str | None = None,
             provider: str | None = None, model: str | None = None, store: str | None = None,
             shared: Sequence[str] | None = None, cwd: str | None = None,
             environ: Any = None) -> dict[str, Any] | None:
    """What decides the index a command opens and how (the CLI's common options, the config file's
    content, the environment), in a form two processes compare; ``None`` when the config file
    cannot be read (the command then reports it itself)."""
    env = os.environ if environ is None else environ
    ws = os.path.realpath(os.path.expanduser(workspace) if workspace is not None else (cwd or os.getcwd()))
    conf = None
    if config:
        path = os.path.expanduser(config)
        try:
            with open(path, "rb") as fh:
                data = fh.read(MAX_REQUEST + 1)
        except OSError:
            return None
        if len(data) > MAX_REQUEST:
            return None
        conf = [os.path.realpath(path), len(data), _crc(data)]
    names = [ns.strip() for value in shared or () for ns in value.split(",") if ns.strip()]
    return {"workspace": ws, "workspaceGiven": workspace is not None, "agent": agent, "config": conf,
            "provider": provider, "model": model, "store": _crc(store.encode()) if store else None,
            "shared": names or None, "env": _env_fingerprint(env), "code": _code_stamp()}


def _slug(name: str) -> str:
    """``re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-_")[:40] or "workspace"`` without ``re``."""
    out: list[str] = []
    for ch in name:
        if ch.isascii() and (ch.isalnum() or ch in "_-"):
            out.append(ch)
        elif not out or out[-1] != "\0":
            out.append("\0")
    return "".join(out).replace("\0", "-").strip("-_")[:40] or "workspace"


def _sha256_hex(data: bytes) -> str:
    try:
        from _sha256 import sha256  # type: ignore[import-not-found]  # built in: no OpenSSL to load
    except ImportError:
        from hashlib import sha256
    return sha256(data).hexdigest()


def index_name(workspace: str, agent: str | None) -> str:
    """The index's name (its SQLite file is ``<name>.sqlite``): the agent id, or the workspace's
    directory name and a hash of its real path (as :func:`clawmem_core.index.workspace_index_name`)."""
    if agent:
        return agent
    real = os.path.realpath(workspace)
    return f"{_slug(os.path.basename(real))}-{_sha256_hex(os.fsencode(real))[:12]}"


def socket_path(workspace: str, agent: str | None, environ: Any = None) -> str | None:
    """Where the watcher of this index listens: ``<state dir>/memory/<index name>.sock``, or a
    shorter name when that path is too long for a socket; ``None`` when even that is."""
    env = os.environ if environ is None else environ
    state = env.get("CLAWMEM_STATE_DIR")
    state = os.path.expanduser(state) if state else os.path.join(os.path.expanduser("~"), ".clawmem")
    folder = os.path.join(os.path.abspath(state), "memory")
    name = index_name(workspace, agent)
    for candidate in (name, "w-" + _sha256_hex(name.encode("utf-8", "surrogateescape"))[:16]):
        path = os.path.join(folder, candidate + ".sock")
        if len(os.fsencode(path)) <= _SUN_PATH_MAX:
            return path
    return None


# -- the client ----------------------------------------------------------------------------------------------------


def _parse(argv: Sequence[str]) -> tuple[str, dict[str, Any], dict[str, Any]] | None:
    """``(command, common options, call options)`` of a ``search`` or ``get`` command line, or
    ``None`` for anything else, or anything this strict reading is not sure argparse reads the
    same way (the CLI then parses it itself)."""
    common: dict[str, Any] = {}
    shared_before: list[str] = []
    shared_after: list[str] | None = None
    command: str | None = None
    call: dict[str, Any] = {}
    positional: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if command is None and not token.startswith("-"):
            if token not in CALLS:
                return None
            command = token
            continue
        if not token.startswith("-") or token == "-":
            if command is None:
                return None
            positional.append(token)
            continue
        # (``--opt=value``; a short option's ``-w=x`` means ``=x`` to argparse: left to it)
        name, eq, value = token.partition("=") if token.startswith("--") else (token, "", "")
        if command is not None and name in _FLAGS[command]:
            if eq:
                return None
            call[_FLAGS[command][name]] = True
            continue
        key = _VALUE_OPTS.get(name) or (_CALL_OPTS[command].get(name) if command else None)
        if key is None:
            return None  # --help, --version, an abbreviation, an unknown option, '--'
        if not eq:
            if i >= len(argv):
                return None
            value = argv[i]
            i += 1
            if value.startswith("-"):
                return None
        if key == "shared":
            if command is None:
                shared_before.append(value)
            else:
                shared_after = (shared_after or []) + [value]
        elif key in _VALUE_OPTS.values():
            common[key] = value
        else:
            call[key] = value
    if command is None:
        return None
    shared = shared_after if shared_after is not None else shared_before
    common["shared"] = shared or None
    try:
        if command == "search":
            if len(positional) > 1:
                return None
            out = {"query": positional[0] if positional else None, "query_opt": call.get("query_opt"),
                   "max_results": int(call["max_results"]) if "max_results" in call else None,
                   "min_score": float(call["min_score"]) if "min_score" in call else None,
                   "wait": float(call["wait"]) if "wait" in call else _DEFAULT_WAIT,
                   "json": bool(call.get("json")), "no_record": bool(call.get("no_record"))}
            if out["wait"] != out["wait"] or out["wait"] < 0:
                return None
        else:
            if len(positional) != 1:
                return None
            out = {"path": positional[0], "json": bool(call.get("json"))}
            for key in ("from_line", "lines"):
                out[key] = int(call[key]) if key in call else None
                if out[key] is not None and out[key] < 1:
                    return None
    except ValueError:
        return None
    return command, common, out


def _peer_uid(sock: Any) -> int:
    """The uid of the process at the other end of a connected Unix socket (Linux)."""
    import _socket

    cred = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)  # struct ucred: pid, uid, gid
    return int.from_bytes(cred[4:8], sys.byteorder)


def _next_line(sock: Any, limit: int, pending: bytes = b"") -> tuple[bytes, bytes]:
    """The next ``\\n``-terminated message (without it) after ``pending`` (bytes already received),
    and what was received after it; ValueError when longer than ``limit`` or cut."""
    chunks: list[bytes] = [pending] if pending else []
    data = pending
    size = 0
    while True:
        end = data.find(b"\n")
        if end >= 0:
            chunks[-1] = data[:end]
            return b"".join(chunks), data[end + 1:]
        size += len(data)
        if size > limit:
            raise ValueError("message too long")
        data = sock.recv(65536)
        if not data:
            raise ValueError("connection closed before the end of the message")
        chunks.append(data)


def _read_line(sock: Any, limit: int, pending: bytes = b"") -> bytes:
    """The one message left on ``sock`` (:func:`_next_line`); ValueError when more follows it."""
    line, rest = _next_line(sock, limit, pending)
    if rest:
        raise ValueError("data after the message")
    return line


def answer(argv: Sequence[str], *, environ: Any = None, stdout: Any = None, stderr: Any = None) -> int | None:
    """Have a running ``clawmem watch`` of the same index and settings answer this ``search`` or
    ``get`` command line: its output is written to ``stdout`` and ``stderr`` (default the
    process's) and its exit code returned. ``None`` (nothing written) whenever the command should
    run here: not such a command, no watcher, or anything wrong on the way."""
    env = os.environ if environ is None else environ
    if not sys.platform.startswith("linux") or env.get(ENV_SWITCH) == "0":
        return None
    try:
        got = _ask(argv, env)
    except Exception:  # whatever it is, the command runs by itself (nothing was written yet)
        return None
    if got is None:
        return None
    code, out, err = got
    (stdout or sys.stdout).write(out)
    (stdout or sys.stdout).flush()
    (stderr or sys.stderr).write(err)
    return code


def _ask(argv: Sequence[str], env: Any) -> tuple[int, str, str] | None:
    """The watcher's ``(exit code, stdout, stderr)`` for this command line, or ``None``."""
    parsed = _parse(argv)
    if parsed is None:
        return None
    command, common, call = parsed
    if common.get("workspace") is None and (common.get("store") or env.get("CLAWMEM_STORE_URL")):
        return None  # a replica: no watcher runs without a workspace
    sett = settings(common.get("workspace"), agent=common.get("agent"), config=common.get("config"),
                    provider=common.get("provider"), model=common.get("model"), store=common.get("store"),
                    shared=common.get("shared"), environ=env)
    if sett is None:
        return None
    path = socket_path(sett["workspace"], common.get("agent"), env)
    if path is None:
        return None
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if (st.st_mode & 0o170000) != 0o140000 or st.st_uid != os.getuid():  # a socket of ours, not a link
        return None
    import _socket

    request = json.dumps({"v": PROTOCOL, "command": command, "settings": sett, "call": call}).encode("ascii") + b"\n"
    if len(request) > MAX_REQUEST:
        return None
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(CONNECT_TIMEOUT)
        sock.connect(path)
        if _peer_uid(sock) != os.getuid():
            return None
        sock.sendall(request)
        ack, rest = _next_line(sock, 4096)
        accepted = json.loads(ack)
        if not isinstance(accepted, dict) or accepted.get("v") != PROTOCOL or accepted.get("ok") is not True:
            return None
        wait = call.get("wait") or 0.0
        sock.settimeout(ANSWER_TIMEOUT + wait if wait != float("inf") else None)
        reply = json.loads(_read_line(sock, MAX_REPLY, rest).decode("ascii"))
    except (OSError, ValueError):  # (UnicodeDecodeError and JSONDecodeError are ValueErrors)
        return None
    finally:
        sock.close()
    if not isinstance(reply, dict) or reply.get("v") != PROTOCOL:
        return None
    code, out, err = reply.get("code"), reply.get("out"), reply.get("err")
    if not isinstance(code, int) or isinstance(code, bool) or not isinstance(out, str) or not isinstance(err, str):
        return None
    return code, out, err


# -- the server ----------------------------------------------------------------------------------------------------

#: Runs one command: ``(command, call options) -> (exit code, stdout text, stderr text)``.
Handler = Callable[[str, dict[str, Any]], "tuple[int, str, str]"]


def _valid_call(command: Any, call: Any) -> bool:
    if command not in CALLS or not isinstance(call, dict) or set(call) != {name for name, _ in CALLS[command]}:
        return False
    for name, kind in CALLS[command]:
        value = call[name]
        if value is None and kind.endswith("?"):
            continue
        base = kind.rstrip("?")
        if base == "str":
            ok = isinstance(value, str)
        elif base in ("int", "line"):
            ok = isinstance(value, int) and not isinstance(value, bool) and (base == "int" or value >= 1)
        elif base == "float":
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        elif base == "seconds":
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0
        else:
            ok = isinstance(value, bool)
        if not ok:
            return False
    return True


class WatchServer:
    """The watcher's side: accepts connections on ``path`` in a background thread, one thread per
    connection (at most :data:`MAX_CLIENTS`), and runs the requests whose settings are
    ``settings`` (``also``: other settings accepted, e.g. the same workspace named by the current
    directory) through ``handler``, one at a time. Start it with :meth:`start`."""

    def __init__(self, path: str, settings: dict[str, Any], handler: Handler, *,
                 also: Sequence[dict[str, Any]] = (), request_timeout: float = REQUEST_TIMEOUT) -> None:
        import threading

        self.path = path
        self.accepted = [settings, *also]
        self.handler = handler
        self.request_timeout = request_timeout
        self._lock_fd: int | None = None
        self._sock: Any = None
        self._ino: int | None = None
        self._stop = threading.Event()
        self._work = threading.Lock()
        self._slots = threading.BoundedSemaphore(MAX_CLIENTS)
        self._thread: threading.Thread | None = None
        #: Requests answered, and connections refused or dropped (test and log figures).
        self.served = 0
        self.refused = 0

    @classmethod
    def start(cls, path: str | None, settings: dict[str, Any], handler: Handler,
              **kwargs: Any) -> "WatchServer | None":
        """A server listening on ``path``, or ``None`` (logged) when it cannot or must not serve:
        not Linux, no path, another watcher serves this index, something other than a stale
        socket of ours is at the path."""
        import logging

        log = logging.getLogger("clawmem")
        if not sys.platform.startswith("linux") or path is None:
            return None
        server = cls(path, settings, handler, **kwargs)
        try:
            why = server._bind()
        except OSError as exc:
            why = f"cannot listen on {path}: {exc}"
        if why is not None:
            server.close()
            log.info("clawmem watch: not answering CLI commands: %s", why)
            return None
        import threading

        server._thread = threading.Thread(target=server._accept_loop, name="clawmem-cli-socket", daemon=True)
        server._thread.start()
        return server

    def _bind(self) -> str | None:
        import fcntl
        import socket
        import stat

        folder = os.path.dirname(self.path)
        os.makedirs(folder, mode=0o700, exist_ok=True)
        fd = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return "another watcher of this index answers them"
        self._lock_fd = fd
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            pass
        else:  # whoever bound it is gone (we hold the lock): a socket of ours is stale
            if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.getuid():
                return f"{self.path} exists and is not a socket of this user's (left alone)"
            os.unlink(self.path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock = sock
        mask = os.umask(0o177)  # the socket file is born 0600
        try:
            sock.bind(self.path)
        finally:
            os.umask(mask)
        self._ino = os.lstat(self.path).st_ino
        sock.listen(MAX_CLIENTS)
        sock.settimeout(0.25)
        return None

    def close(self) -> None:
        """Stop accepting, wait for the request being answered, remove the socket (if it is still
        ours) and release the lock."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join()
        with self._work:
            pass
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._ino is not None:
            try:
                if os.lstat(self.path).st_ino == self._ino:
                    os.unlink(self.path)
            except OSError:
                pass
            self._ino = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _accept_loop(self) -> None:
        import socket
        import threading

        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except socket.timeout:
                continue
            except OSError:
                if self._stop.wait(0.25):
                    return
                continue
            if not self._slots.acquire(blocking=False):
                self.refused += 1
                conn.close()
                continue
            threading.Thread(target=self._connection, args=(conn,), name="clawmem-cli-request", daemon=True).start()

    def _connection(self, conn: Any) -> None:
        try:
            self._serve(conn)
        except Exception:  # a broken client or a failed answer: its CLI runs the command itself
            self.refused += 1
        finally:
            conn.close()
            self._slots.release()

    def _serve(self, conn: Any) -> None:
        conn.settimeout(self.request_timeout)
        if _peer_uid(conn) != os.getuid():
            self.refused += 1
            return
        raw = _read_line(conn, MAX_REQUEST)
        request = json.loads(raw.decode("ascii"))
        ok = (isinstance(request, dict) and request.get("v") == PROTOCOL and request.get("settings") in self.accepted
              and _valid_call(request.get("command"), request.get("call")))
        conn.sendall(json.dumps({"v": PROTOCOL, "ok": bool(ok)}).encode() + b"\n")
        if not ok or self._stop.is_set():
            self.refused += 1
            return
        with self._work:
            if self._stop.is_set():
                return  # closing: the connection drops, the CLI runs the command itself
            code, out, err = self.handler(request["command"], dict(request["call"]))
        reply = {"v": PROTOCOL, "code": code, "out": out, "err": err}
        self.served += 1
        conn.settimeout(30.0)
        conn.sendall(json.dumps(reply).encode("ascii") + b"\n")
