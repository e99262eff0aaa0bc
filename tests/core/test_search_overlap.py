"""A hybrid search runs its keyword side while the query is being embedded, and the vector scan on
the embedding's thread as soon as the query vector is there. What a store prepares ahead answers
exactly as the plain call would, once, and only while the index is unchanged."""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from clawmem_core import MemoryConfig
from clawmem_core.deadlines import LATE_CALLS, start_with_deadline
from clawmem_core.store.base import ChunkRow, FileRow
from clawmem_core.store.bm25 import _run_lengths
from clawmem_core.store.sqlite import SQLiteStore
from clawmem_core.store.sqlite import search as sqlite_search
from clawmem_core.testing import HashEmbedder

from .conftest import IndexFactory, WorkspaceFactory

WORDS = "alpha beta gamma delta lamp café quokka notes_v2 成语 接龙 游戏 今天 会议".split()
DIMS = 8


def _vector(rng: random.Random) -> list[float]:
    return [rng.uniform(-1, 1) for _ in range(DIMS)]


def _file(path: str, texts: list[str], rng: random.Random, vectors: bool = True) -> tuple[FileRow, list[ChunkRow]]:
    rows = [ChunkRow(f"{path}#{i}", path, "memory", i + 1, i + 1, f"h{i}", "m", t,
                     embedding=_vector(rng) if vectors else None) for i, t in enumerate(texts)]
    return FileRow(path, "memory", "x", 0, 0), rows


@pytest.fixture
def store(tmp_path: Path) -> SQLiteStore:
    rng = random.Random(11)
    s = SQLiteStore(tmp_path / "index.sqlite", vector_enabled=False)  # vectors from the in-memory matrix
    s.replace_files([_file(f"memory/n{i}.md", [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 30)))
                                               for _ in range(4)], rng) for i in range(30)])
    return s


def _other(tmp_path: Path) -> SQLiteStore:
    return SQLiteStore(tmp_path / "index.sqlite", vector_enabled=False)


# -- postings ---------------------------------------------------------------------------------------


def test_run_lengths_are_those_of_numpy_unique() -> None:
    rng = np.random.default_rng(5)
    for n in (0, 1, 2, 17, 1000):
        for inst in (np.sort(rng.integers(1, 50, n)), rng.integers(1, 50, n)):  # in order, and not
            rows, counts = _run_lengths(inst.astype(np.int64))
            want_rows, want_counts = np.unique(inst, return_counts=True)
            assert rows.tolist() == want_rows.tolist() and counts.tolist() == want_counts.tolist()


# -- the keyword side, run ahead --------------------------------------------------------------------


@pytest.mark.parametrize("terms", [["alpha", "lamp"], ["成语", "游戏", "会议"], ["quokka"], ["café", "notes_v2", "delta"]])
def test_a_keyword_search_run_ahead_answers_as_the_call_does(store: SQLiteStore, terms: list[str]) -> None:
    for _ in range(sqlite_search._BM25_AFTER_QUERIES + 2):  # FTS5 first, then the in-process scoring
        store.prepare_keyword_search(terms, 12)
        assert store._kw_ahead is not None
        ahead = store.keyword_search(terms, 12)
        assert store._kw_ahead is None  # used once
        assert ahead == store.keyword_search(terms, 12)  # the same as a search of its own


def test_a_keyword_search_run_ahead_is_not_used_for_other_arguments(store: SQLiteStore) -> None:
    store.prepare_keyword_search(["alpha"], 3)
    assert store.keyword_search(["alpha"], 20) == store.keyword_search(["alpha"], 20)
    assert len(store.keyword_search(["alpha"], 20)) > 3
    store.prepare_keyword_search(["alpha"], 3)
    assert store.keyword_search(["beta"], 3) == store.keyword_search(["beta"], 3) != store.keyword_search(["alpha"], 3)


def test_a_keyword_search_run_ahead_is_dropped_when_the_index_changed(store: SQLiteStore, tmp_path: Path) -> None:
    rng = random.Random(3)
    for _ in range(sqlite_search._BM25_AFTER_QUERIES + 2):
        store.keyword_search(["zebra"], 5)  # warm: scored in process
    store.prepare_keyword_search(["zebra"], 5)
    other = _other(tmp_path)  # another connection writes in between
    other.replace_files([_file("memory/new.md", ["a zebra on the lamp"], rng)])
    other.close()
    assert [cid for cid, _ in store.keyword_search(["zebra"], 5)] == ["memory/new.md#0"]
    store.prepare_keyword_search(["zebra"], 5)
    store.delete_files("memory", ["memory/new.md"])  # this connection's own write
    assert store.keyword_search(["zebra"], 5) == []


# -- the vector side, run ahead ---------------------------------------------------------------------


def _scan_elsewhere(store: SQLiteStore, query: list[float], limit: int) -> None:
    t = threading.Thread(target=store.prepare_vector_search, args=(query, limit))
    t.start()
    t.join()


def test_a_vector_scan_run_ahead_answers_as_the_call_does(store: SQLiteStore) -> None:
    rng = random.Random(8)
    for _ in range(4):  # the first searches build the matrix; a scan ahead needs it
        query = _vector(rng)
        _scan_elsewhere(store, query, 7)
        ahead = store.vector_search(query, 7)
        assert store._vec_ahead is None
        assert ahead == store.vector_search(query, 7) and len(ahead) == 7
    query = _vector(rng)
    _scan_elsewhere(store, query, 7)
    assert store._vec_ahead is not None and store._vec_ahead.result is not None
    other = _vector(rng)
    assert store.vector_search(other, 7) == store.vector_search(other, 7)  # another query: scanned again
    assert store._vec_ahead is None  # and the one ahead dropped


def test_a_vector_scan_run_ahead_is_dropped_when_the_index_changed(store: SQLiteStore, tmp_path: Path) -> None:
    rng = random.Random(9)
    query = _vector(rng)
    store.vector_search(query, 5)
    store.vector_search(query, 5)
    _scan_elsewhere(store, query, 5)  # scans the matrix of the index as it is now
    assert store._vec_ahead is not None and store._vec_ahead.result is not None
    other = _other(tmp_path)  # then another connection writes the query's own vector
    other.replace_files([_file("memory/new.md", ["the answer"], rng)])
    other.conn.execute("UPDATE chunks SET embedding = ? WHERE id = 'memory/new.md#0'",
                       (np.asarray(query, dtype=np.float32).tobytes(),))
    other.close()
    got = store.vector_search(query, 5)
    assert got[0][0] == "memory/new.md#0" and got[0][1] == pytest.approx(1.0)


def test_a_vector_scan_that_ends_after_the_matrix_was_replaced_is_not_used(store: SQLiteStore,
                                                                           tmp_path: Path) -> None:
    rng = random.Random(10)
    query = _vector(rng)
    store.vector_search(query, 5)
    store.vector_search(query, 5)
    before = store._matrix
    other = _other(tmp_path)
    other.replace_files([_file("memory/new.md", ["the answer"], rng)])
    other.conn.execute("UPDATE chunks SET embedding = ? WHERE id = 'memory/new.md#0'",
                       (np.asarray(query, dtype=np.float32).tobytes(),))
    other.close()
    assert store.vector_search(query, 5)[0][0] == "memory/new.md#0"  # the matrix read again
    late = sqlite_search._VectorScan(before, query, 5)  # a scan of the old matrix, handed over late
    late.result = sqlite_search._scan(before, np.asarray(query, dtype=np.float32), 5)
    late.done.set()
    store._vec_ahead = late
    assert store.vector_search(query, 5)[0][0] == "memory/new.md#0"


def test_a_vector_scan_ahead_without_a_matrix_does_nothing(tmp_path: Path) -> None:
    s = SQLiteStore(tmp_path / "empty.sqlite", vector_enabled=False)
    s.prepare_vector_search([1.0] * DIMS, 5)
    assert s._vec_ahead is None and s.vector_search([1.0] * DIMS, 5) == []


# -- the search: keyword side meanwhile ---------------------------------------------------------------

NOTES = {
    "MEMORY.md": "# Memory\n\nThe billing service runs on PostgreSQL 16 with Celery workers.\n",
    "memory/2026-01-05.md": "# Standup\n\nDeployed the billing migration; rolled back the invoice exporter.\n",
    "memory/2026-01-06.md": "# Notes\n\nPriya owns the on-call rotation and the Grafana dashboards.\n",
    "memory/2026-01-07.md": "# 周会\n\n决定下个月开始使用 GitHub Actions 部署，Jenkins 年底下线。\n",
}


class WatchingEmbedder(HashEmbedder):
    """Queries are embedded only once the store has been asked for the keyword candidates (or
    after ``patience`` seconds): whether it had been is recorded per query."""

    def __init__(self, asked: threading.Event, patience: float = 10.0, **kw: Any) -> None:
        super().__init__(**kw)
        self.asked = asked
        self.patience = patience
        self.seen: list[bool] = []

    def _embed_query(self, text: str) -> list[float]:
        self.seen.append(self.asked.wait(self.patience))
        return super()._embed_query(text)


@pytest.mark.parametrize("query", ["Grafana dashboards billing", "Jenkins 年底下线"])
def test_the_keyword_side_runs_while_the_query_is_embedded(make_workspace: WorkspaceFactory,
                                                           open_index: IndexFactory, query: str) -> None:
    asked = threading.Event()
    plain = open_index(make_workspace(NOTES), embedder=HashEmbedder(),
                       config=MemoryConfig.from_dict({"query": {"timeoutMs": 60_000}}))
    plain.sync()
    for name in ("prepare_keyword_search", "prepare_vector_search"):  # one side after the other, as before
        setattr(plain._stores.store, name, lambda *args: None)
    expected = [plain.search(query) for _ in range(4)]  # the first searches read differently (FTS5, sqlite-vec)
    plain.close()

    emb = WatchingEmbedder(asked)
    mem = open_index(make_workspace(NOTES), embedder=emb, config=MemoryConfig.from_dict({"query": {"timeoutMs": 60_000}}))
    mem.sync()
    store = mem._stores.store
    keyword_search = type(store).keyword_search

    def watched(self: SQLiteStore, terms: list[str], limit: int) -> list[tuple[str, float]]:
        asked.set()
        return keyword_search(self, terms, limit)

    type(store).keyword_search = watched  # type: ignore[method-assign]
    try:
        got = []
        for _ in range(4):
            asked.clear()
            got.append(mem.search(query))
    finally:
        type(store).keyword_search = keyword_search  # type: ignore[method-assign]
    assert emb.seen == [True] * 4  # the keyword candidates were asked for before the query vector was there
    assert all(hits.degraded is None for hits in got)
    assert [[(h.path, h.start_line, h.score, h.vector_score, h.text_score) for h in hits] for hits in got] == \
        [[(h.path, h.start_line, h.score, h.vector_score, h.text_score) for h in hits] for hits in expected]
    assert all(got)


# -- calls started with a deadline ------------------------------------------------------------------


def test_a_started_call_returns_at_once_and_hands_its_result_over_before_then_runs() -> None:
    gate, then_ran, order = threading.Event(), threading.Event(), []

    def then(value: int) -> None:
        order.append(("then", value))
        then_ran.set()
        raise RuntimeError("dropped")  # a preparation's error never reaches the caller

    pending = start_with_deadline(lambda: gate.wait(30) and 42, then=then)
    assert pending.wait(0) == (False, None)  # started, not finished: the caller went on
    gate.set()
    assert pending.wait(30) == (True, 42)
    assert then_ran.wait(30) and order == [("then", 42)]
    with pytest.raises(ZeroDivisionError):
        start_with_deadline(lambda: 1 / 0, then=then).wait(30)


def test_a_started_call_that_runs_out_of_time_is_remembered_as_late() -> None:
    owner, gate = object(), threading.Event()
    pending = LATE_CALLS.start(owner, lambda: gate.wait(30))
    assert not LATE_CALLS.busy(owner)  # not late until a wait for it runs out
    assert pending.wait(0.01) == (False, None)
    assert LATE_CALLS.busy(owner)
    gate.set()
    assert pending.wait(30) == (True, True)
