"""HNSW search settings of the PostgreSQL store: ``store.vector.hnsw_ef_search`` and pgvector's
iterative scan, on an agent that holds a small share of a shared HNSW index."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from clawmem_core.config import MemoryConfig
from clawmem_core.errors import ConfigError


def test_hnsw_ef_search_config_default_and_bounds() -> None:
    assert MemoryConfig().store.vector.hnsw_ef_search == 600
    assert MemoryConfig.from_dict({"store": {"vector": {"hnsw_ef_search": 40}}}).store.vector.hnsw_ef_search == 40
    assert MemoryConfig.from_dict({"store": {"vector": {"hnsw_ef_search": 1000.0}}}).store.vector.hnsw_ef_search == 1000
    for bad in (0, -5, 1001, 40.5, "200", True, None):
        with pytest.raises(ConfigError, match="hnsw_ef_search"):
            MemoryConfig.from_dict({"store": {"vector": {"hnsw_ef_search": bad}}})


def test_iterative_scan_value_is_checked() -> None:
    pytest.importorskip("psycopg")
    from clawmem_core.store.postgres import PostgresBackend

    with pytest.raises(ConfigError, match="iterative"):
        PostgresBackend("postgresql://u@localhost/x", "a", hnsw_iterative_scan="relaxed_order; DROP TABLE x")


def _fill(url: str) -> None:
    """2,040 random 16-d vectors in one HNSW index: agent ``big`` holds 1,300, ``mid`` 700 (a third
    of the index), ``tiny`` 40 (2%)."""
    from clawmem_core.store.base import ChunkRow, FileRow
    from clawmem_core.store.postgres import PostgresBackend

    rng = random.Random(5)

    def vec() -> list[float]:
        v = [rng.gauss(0, 1) for _ in range(16)]
        n = sum(x * x for x in v) ** 0.5
        return [x / n for x in v]

    for agent, n in (("big", 1300), ("mid", 700), ("tiny", 40)):
        rows = [ChunkRow(f"{agent}{i}", "memory/v.md", "memory", i, i, f"h{i}", "m", "t", vec()) for i in range(n)]
        PostgresBackend(url, agent, exact_below=0).open().replace_files([(FileRow("memory/v.md", "memory", "h", 1, 1), rows)])
    from clawmem_core.store.postgres import hnsw_index

    with PostgresBackend(url, "big").connection() as conn:
        assert hnsw_index(conn, 16) == "halfvec"


def _open(url: str, agent: str, **kw: Any) -> Any:
    from clawmem_core.store.postgres import PostgresBackend

    return PostgresBackend(url, agent, exact_below=0, **kw).open()


def _queries() -> list[list[float]]:
    rng = random.Random(9)
    return [[rng.gauss(0, 1) for _ in range(16)] for _ in range(10)]


def test_ef_search_reaches_the_query_and_iterative_scan_fills_a_filtered_agent(pg_url: str) -> None:
    _fill(pg_url)
    queries = _queries()
    # Without iterative scan, HNSW returns ef_search candidates of the whole index and the
    # agent filter keeps about a third of them: with ef_search 10 queries get fewer than 10 rows...
    narrow = _open(pg_url, "mid", hnsw_ef_search=10, hnsw_iterative_scan="off")
    assert sum(len(narrow.vector_search(q, 10)) for q in queries) < 70
    # ...and with ef_search 1000 (half the index) every query gets its 10.
    wide = _open(pg_url, "mid", hnsw_ef_search=1000, hnsw_iterative_scan="off")
    assert all(len(wide.vector_search(q, 10)) == 10 for q in queries)
    # The default (relaxed iterative scan) fills the agent's results at a small ef_search too,
    # and they are its own rows.
    default = _open(pg_url, "mid", hnsw_ef_search=10)
    assert default.backend.hnsw_iterative_scan == "relaxed_order"
    for q in queries:
        got = default.vector_search(q, 10)
        assert len(got) == 10 and all(i.startswith("mid") for i, _ in got)


def test_an_agent_with_a_small_share_of_the_index_is_searched_exactly(pg_url: str) -> None:
    """A filtered graph walk for an agent with 2% of the index visits ~50 entries per row it
    returns: exact search over the agent's rows is cheaper, and exact."""
    _fill(pg_url)
    queries = _queries()
    from clawmem_core.store.postgres import PostgresBackend

    truth = PostgresBackend(pg_url, "tiny", exact_below=10**9).open()
    # Forced through HNSW without iterative scan, the 2% agent gets almost nothing back...
    forced = _open(pg_url, "tiny", hnsw_ef_search=10, hnsw_iterative_scan="off", hnsw_visit_cost=0)
    assert sum(len(forced.vector_search(q, 10)) for q in queries) < 50
    # ...while the store's own choice (same settings otherwise) answers exactly.
    chosen = _open(pg_url, "tiny", hnsw_ef_search=10, hnsw_iterative_scan="off")
    for q in queries:
        assert chosen.vector_search(q, 10) == truth.vector_search(q, 10)
    # The big agent (64% of the index) stays on the graph walk: with these narrow settings some of
    # its 10 candidates are other agents' rows, filtered out (an exact search would give 10 each).
    big = _open(pg_url, "big", hnsw_ef_search=10, hnsw_iterative_scan="off")
    assert sum(len(big.vector_search(q, 10)) for q in queries) < 100


def test_the_index_passes_hnsw_ef_search_to_the_store(pg_url: str, tmp_path: Path) -> None:
    from clawmem_core.index import MemoryIndex

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "MEMORY.md").write_text("# notes\n", encoding="utf-8")
    cfg = {"store": {"url": pg_url, "vector": {"hnsw_ef_search": 64}}, "provider": "none"}
    mem = MemoryIndex(ws, config=cfg, agent_id="cfg", state_dir=tmp_path / "state")
    try:
        assert mem._store.backend.hnsw_ef_search == 64  # type: ignore[attr-defined]
    finally:
        mem.close()
