"""The PostgreSQL store's own HNSW build: ``store.vector.hnsw_build_memory`` (the build's
``maintenance_work_mem``), a build that fails or dies half-way, vectors too wide for a full-precision
index, and indexes built by earlier versions. Against the real embedded server."""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Any

import pytest

from clawmem_core.config import MemoryConfig
from clawmem_core.errors import ConfigError


def _vec(rng: random.Random, dims: int) -> list[float]:
    v = [rng.gauss(0, 1) for _ in range(dims)]
    n = sum(x * x for x in v) ** 0.5
    return [x / n for x in v]


def _rows(prefix: str, n: int, dims: int, seed: int) -> list[Any]:
    from clawmem_core.store.base import ChunkRow

    rng = random.Random(seed)
    return [ChunkRow(f"{prefix}{i}", "memory/v.md", "memory", i, i, f"{prefix}h{i}", "m", f"text {i}", _vec(rng, dims))
            for i in range(n)]


def _write(store: Any, rows: list[Any], path: str = "memory/v.md") -> None:
    from clawmem_core.store.base import FileRow

    store.replace_files([(FileRow(path, "memory", "h", 1, 1), rows)])


def _backend(url: str, agent: str = "a", **kw: Any) -> Any:
    from clawmem_core.store.postgres import PostgresBackend

    return PostgresBackend(url, agent, **kw)


def _one(conn: Any, sql: str, *args: Any) -> Any:
    return conn.execute(sql, args or None).fetchone()[0]


def _index_scans(conn: Any, name: str) -> int:
    conn.execute("SELECT pg_stat_force_next_flush()")
    return int(_one(conn, "SELECT coalesce(sum(idx_scan), 0) FROM pg_stat_user_indexes WHERE indexrelname = %s", name))


# -- the setting ---------------------------------------------------------------------------------


def test_hnsw_build_memory_config_default_forms_and_bad_values() -> None:
    assert MemoryConfig().store.vector.hnsw_build_memory == "256MB"
    for good in ("1GB", "64 mb", "65536kB", "1MB", "1TB"):
        cfg = MemoryConfig.from_dict({"store": {"vector": {"hnsw_build_memory": good}}})
        assert cfg.store.vector.hnsw_build_memory == good
    assert MemoryConfig.from_dict({"store": {"vector": {"hnswBuildMemory": "2GB"}}}).store.vector.hnsw_build_memory == "2GB"
    bad = (256, 256.0, "256", "256M", "0MB", "512kB", "3TB", "", "lots", True, None, ["1GB"],
           "1GB'; DROP TABLE clawmem_chunks; --", "-1GB", "1.5GB", "٢٥٦MB", "1e3MB")
    for value in bad:
        with pytest.raises(ConfigError, match="hnsw_build_memory"):
            MemoryConfig.from_dict({"store": {"vector": {"hnsw_build_memory": value}}})


def test_the_backend_refuses_a_bad_build_memory_too() -> None:
    pytest.importorskip("psycopg")
    with pytest.raises(ConfigError, match="hnsw_build_memory"):
        _backend("postgresql://u@localhost/x", hnsw_build_memory="64MB'; RESET ALL; --")


def test_a_bad_build_memory_is_refused_before_anything_changes(pg_url: str, tmp_path: Path) -> None:
    """The index is never opened: no table created in the database, the Markdown as it was."""
    from clawmem_core.index import MemoryIndex

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# notes\n\n- green tea 绿茶\n", encoding="utf-8")
    before = {p: p.read_bytes() for p in ws.rglob("*") if p.is_file()}
    cfg = {"store": {"url": pg_url, "vector": {"hnsw_build_memory": "half the server"}}, "provider": "none"}
    with pytest.raises(ConfigError, match="hnsw_build_memory"):
        MemoryIndex(ws, config=cfg, agent_id="bad", state_dir=tmp_path / "state")
    import psycopg

    with psycopg.connect(pg_url) as conn:
        assert _one(conn, "SELECT to_regclass('clawmem_chunks')") is None
    assert {p: p.read_bytes() for p in ws.rglob("*") if p.is_file()} == before


def test_the_index_passes_the_build_memory_to_the_store(pg_url: str, tmp_path: Path) -> None:
    from clawmem_core.index import MemoryIndex

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "MEMORY.md").write_text("# notes\n", encoding="utf-8")
    cfg = {"store": {"url": pg_url, "vector": {"hnsw_build_memory": "3GB"}}, "provider": "none"}
    mem = MemoryIndex(ws, config=cfg, agent_id="cfg", state_dir=tmp_path / "state")
    try:
        assert mem._store.backend.hnsw_build_memory_kb == 3 * 1024 * 1024  # type: ignore[attr-defined]
    finally:
        mem.close()


# -- the build runs with it -----------------------------------------------------------------------

_SPILL = "no longer fits into maintenance_work_mem"


def _build_with(url: str, memory: str, caplog: pytest.LogCaptureFixture) -> list[str]:
    """3,000 16-d vectors written by one agent (the build starts at 1,000): the server notices the
    build raised, the index built."""
    store = _backend(url, hnsw_build_memory=memory, exact_below=1000).open()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="clawmem"):
        _write(store, _rows("c", 3000, 16, seed=1))
    from clawmem_core.store.postgres import hnsw_index

    with store.backend.connection() as conn:
        assert hnsw_index(conn, 16) == "halfvec"
    return [r.getMessage() for r in caplog.records]


def test_the_build_runs_with_the_configured_memory_for_the_build_only(pg_url: str, pg_server: Any,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    """The server's own setting here is 1MB, too small for the graph of 3,000 vectors: pgvector
    says so when the build runs with it. With ``hnsw_build_memory`` 64MB the build runs in memory,
    and the server's setting is left as it was for every other connection."""
    from tests.conftest import drop_database, new_database

    import psycopg

    def server_default_1mb(url: str) -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"ALTER DATABASE {_one(conn, 'SELECT current_database()')} SET maintenance_work_mem = '1MB'")

    server_default_1mb(pg_url)
    spilled = _build_with(pg_url, "1MB", caplog)
    assert any(_SPILL in m for m in spilled), spilled  # the server's setting, as it was: too small

    other = new_database(pg_server)
    try:
        server_default_1mb(other)
        raised = _build_with(other, "64MB", caplog)
        assert not any(_SPILL in m for m in raised), raised
        with _backend(other).connection() as conn:  # pooled connections: the server's setting
            assert _one(conn, "SHOW maintenance_work_mem") == "1MB"
        with psycopg.connect(other) as conn:
            assert _one(conn, "SHOW maintenance_work_mem") == "1MB"
    finally:
        drop_database(pg_server, other)


def test_the_build_never_lowers_the_servers_setting(pg_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """``hnsw_build_memory`` below the server's setting leaves the server's (here 64MB): in memory."""
    assert not any(_SPILL in m for m in _build_with(pg_url, "1MB", caplog))


# -- builds that fail or die ----------------------------------------------------------------------


def test_a_failed_build_does_not_fail_the_write_and_is_tried_again(pg_url: str, monkeypatch: pytest.MonkeyPatch,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    """Another session holds a lock the build needs and the server gives up waiting: the rows are
    written, searches stay exact and correct, the failure is logged without the password, and a
    later write (after the retry delay) builds the index."""
    import psycopg

    from clawmem_core.store import postgres

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE {_one(conn, 'SELECT current_database()')} SET lock_timeout = '300ms'")
    store = _backend(pg_url, exact_below=100).open()
    truth = _backend(pg_url, exact_below=10**9).open()
    rows = _rows("c", 300, 16, seed=2)
    holder = psycopg.connect(pg_url)
    try:
        holder.execute("LOCK TABLE clawmem_chunks IN SHARE UPDATE EXCLUSIVE MODE")  # as a running build would
        with caplog.at_level(logging.WARNING, logger="clawmem"):
            _write(store, rows)  # no error: the rows are written
        assert any("could not build the HNSW index" in r.getMessage() for r in caplog.records)
        q = _vec(random.Random(7), 16)
        assert store.vector_search(q, 10) == truth.vector_search(q, 10)
        assert len(store.vector_search(q, 10)) == 10
    finally:
        holder.close()
    with store.backend.connection() as conn:
        assert postgres.hnsw_index(conn, 16) is None
    _write(store, rows)  # within the retry delay: not tried again
    with store.backend.connection() as conn:
        assert postgres.hnsw_index(conn, 16) is None
    monkeypatch.setattr(postgres.vectors, "_HNSW_RETRY_SECONDS", 0.0)
    _write(store, rows)
    with store.backend.connection() as conn:
        assert postgres.hnsw_index(conn, 16) == "halfvec"


def _leave_an_invalid_index(url: str) -> None:
    """Start the store's build on a connection of its own and cancel it mid-way, as if its process
    had died: CREATE INDEX CONCURRENTLY leaves its index behind, marked invalid."""
    import psycopg

    from clawmem_core.store.postgres import build_hnsw

    for timeout_ms in (200, 100, 50, 20, 10, 5, 2, 1):
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SET maintenance_work_mem = '1MB'")  # slow: built partly on disk
            conn.execute(f"SET statement_timeout = {timeout_ms}")
            try:
                build_hnsw(conn, 16)
            except psycopg.errors.QueryCanceled:
                pass
            conn.execute("SET statement_timeout = 0")
            valid = conn.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = "
                                 "to_regclass('clawmem_chunks_hnsw_half_16')").fetchone()
            if valid is not None and not valid[0]:
                return
            if valid is not None:
                conn.execute("DROP INDEX clawmem_chunks_hnsw_half_16")
    pytest.skip("the build always finished or never started before the timeout")


def test_an_index_left_invalid_by_a_dead_build_is_replaced(pg_url: str) -> None:
    from clawmem_core.store import postgres

    store = _backend(pg_url, exact_below=10**9).open()
    _write(store, _rows("c", 4000, 16, seed=3))
    _leave_an_invalid_index(pg_url)
    truth = _backend(pg_url, exact_below=10**9).open()
    approx = _backend(pg_url, exact_below=100).open()
    q = _vec(random.Random(8), 16)
    # the invalid index does not count: searches are exact meanwhile
    assert approx.vector_search(q, 10) == truth.vector_search(q, 10)
    _write(approx, _rows("d", 10, 16, seed=4), path="memory/w.md")  # the next write builds it again
    with approx.backend.connection() as conn:
        assert postgres.hnsw_index(conn, 16) == "halfvec"
        before = _index_scans(conn, "clawmem_chunks_hnsw_half_16")
    got = postgres.PostgresBackend(pg_url, "a", exact_below=100).open().vector_search(q, 10)
    assert len(got) == 10
    with approx.backend.connection() as conn:
        assert _index_scans(conn, "clawmem_chunks_hnsw_half_16") > before


def test_vectors_wider_than_2000_dims_are_indexed(pg_url: str) -> None:
    """3,072-d vectors (OpenAI's text-embedding-3-large): pgvector indexes ``vector`` up to 2,000
    dimensions, ``halfvec`` up to 4,000. Wider than that, the agent stays on exact search."""
    from clawmem_core.store import postgres

    store = _backend(pg_url, exact_below=50).open()
    truth = _backend(pg_url, exact_below=10**9).open()
    _write(store, _rows("c", 120, 3072, seed=5))
    with store.backend.connection() as conn:
        assert postgres.hnsw_index(conn, 3072) == "halfvec"
    q = _vec(random.Random(9), 3072)
    want = [i for i, _ in truth.vector_search(q, 5)]
    got = store.vector_search(q, 5)
    assert len(got) == 5 and len(set(want) & {i for i, _ in got}) >= 4
    wide = _backend(pg_url, "wide", exact_below=50).open()
    _write(wide, _rows("w", 60, 4096, seed=6), path="memory/wide.md")
    with store.backend.connection() as conn:
        assert postgres.hnsw_index(conn, 4096) is None
    q = _vec(random.Random(10), 4096)
    assert wide.vector_search(q, 5) == _backend(pg_url, "wide", exact_below=10**9).open().vector_search(q, 5)


def test_an_index_built_by_an_earlier_version_is_still_used(pg_url: str) -> None:
    """Earlier versions built a full-precision ``vector`` index: searches go through it, and no
    second index is built beside it."""
    from clawmem_core.store import postgres

    store = _backend(pg_url, exact_below=10**9).open()
    _write(store, _rows("c", 400, 16, seed=11))
    with store.backend.connection() as conn:
        conn.execute("CREATE INDEX clawmem_chunks_hnsw_16 ON clawmem_chunks "
                     "USING hnsw ((embedding::vector(16)) vector_cosine_ops) WHERE dims = 16")
    approx = _backend(pg_url, exact_below=100).open()
    _write(approx, _rows("d", 10, 16, seed=12), path="memory/w.md")
    with approx.backend.connection() as conn:
        assert postgres.hnsw_index(conn, 16) == "vector"
        assert _one(conn, "SELECT to_regclass('clawmem_chunks_hnsw_half_16')") is None
        before = _index_scans(conn, "clawmem_chunks_hnsw_16")
    truth = _backend(pg_url, exact_below=10**9).open()
    agree = 0
    for seed in range(10):
        q = _vec(random.Random(100 + seed), 16)
        agree += len({i for i, _ in truth.vector_search(q, 5)} & {i for i, _ in approx.vector_search(q, 5)})
    assert agree >= 45
    with approx.backend.connection() as conn:
        assert _index_scans(conn, "clawmem_chunks_hnsw_16") >= before + 10
