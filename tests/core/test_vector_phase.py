"""The vector phase on a real store: chunks written pending for keyword search get their vectors
(whole, or as windows), a chunk replaced meanwhile is left alone, and a stopped phase carries on
where it stopped."""

from __future__ import annotations

from pathlib import Path

import pytest

from clawmem_core.chunking import chunk_id, sha256
from clawmem_core.progress import SyncProgress
from clawmem_core.results import SyncReport
from clawmem_core.store.base import ChunkRow, FileRow
from clawmem_core.store.sqlite import SQLiteStore
from clawmem_core.testing import HashEmbedder
from clawmem_core.vectors import fill_vectors

MODEL = "hash-v1"


def _pending_file(i: int, texts: list[str]) -> tuple[FileRow, list[ChunkRow]]:
    path = f"memory/n{i:03d}.md"
    rows = []
    for k, text in enumerate(texts):
        h = sha256(text)
        rows.append(ChunkRow(chunk_id("memory", path, k + 1, k + 1, h, MODEL), path, "memory", k + 1, k + 1, h, MODEL,
                             text, None, pending=True))
    return FileRow(path, "memory", f"f{i}", 1, 2), rows


@pytest.fixture
def store(tmp_path: Path) -> SQLiteStore:
    s = SQLiteStore(tmp_path / "i.sqlite")
    yield s
    s.close()


def test_pending_chunks_are_searchable_by_keyword_then_get_vectors(store: SQLiteStore) -> None:
    store.replace_files([_pending_file(i, [f"walrus note {i}", f"蓝色的海象 {i}"]) for i in range(20)])
    counts = store.vector_counts()
    assert (counts.done, counts.total) == (0, 40) and counts.pending_chars > 0
    assert len(store.keyword_search(["walrus"], 100)) == 20
    assert store.vector_search(HashEmbedder().embed_query("walrus"), 5) == []
    emb = HashEmbedder()
    events: list[SyncProgress] = []
    report = SyncReport()
    result = fill_vectors(store, emb, listener=events.append, report=report, group_chunks=8)
    assert result.completed == 40 and not result.interrupted
    counts = store.vector_counts()
    assert (counts.done, counts.total, counts.pending_chars) == (40, 40, 0)
    assert report.embeddings_computed == 40 and emb.texts_embedded == 40
    hits = store.vector_search(emb.embed_query("walrus note 3"), 3)
    assert hits and store.get_chunks([hits[0][0]])[hits[0][0]].text == "walrus note 3"
    assert [e.done for e in events] == [0, 8, 16, 24, 32, 40]
    assert all(e.total == 40 and e.phase == "vectors" for e in events)
    # The cache took every vector: pending rows of the same texts need no embedding call.
    assert store.counts().cache_entries == 40


def test_long_chunks_get_window_rows(store: SQLiteStore) -> None:
    emb = HashEmbedder()
    emb.window_bytes = 64
    long_text = "\n".join(f"line {k} about the lighthouse keeper" for k in range(12))
    store.replace_files([_pending_file(0, [long_text])])
    fill_vectors(store, emb)
    rows = store.conn.execute("SELECT part, embedding IS NOT NULL, pending FROM chunks ORDER BY rid").fetchall()
    assert rows[0] == (0, 0, 0)  # the chunk itself: keyword row, no vector of its own
    assert len(rows) > 2 and all(r == (1, 1, 0) for r in rows[1:])
    assert store.vector_counts().done == 1
    assert len(store.keyword_search(["lighthouse"], 10)) == 1  # windows are not keyword rows


def test_a_chunk_replaced_meanwhile_is_left_alone(store: SQLiteStore) -> None:
    file, rows = _pending_file(0, ["old text about ferrets"])
    store.replace_files([(file, rows)])
    # The file changes while its vectors are computed: the old chunk is gone, its vectors too.
    store.replace_files([_pending_file(0, ["new text about otters"])])
    assert store.set_vectors([(rows[0].id, [1.0] * 64, [])]) == 0
    assert store.vector_counts().done == 0
    assert fill_vectors(store, HashEmbedder()).completed == 1


def test_stopping_keeps_what_was_done_and_the_next_run_carries_on(store: SQLiteStore) -> None:
    store.replace_files([_pending_file(i, [f"note {i} about tea"]) for i in range(30)])
    first = HashEmbedder()
    calls = iter(range(100))
    result = fill_vectors(store, first, group_chunks=5, should_stop=lambda: next(calls) >= 3)
    assert result.interrupted and result.completed == 15
    assert store.vector_counts().done == 15
    second = HashEmbedder()
    result = fill_vectors(store, second, group_chunks=5)
    assert result.completed == 15 and second.texts_embedded == 15


def test_deadline_on_a_deterministic_clock(store: SQLiteStore) -> None:
    store.replace_files([_pending_file(i, [f"note {i} about tea"]) for i in range(10)])
    now = [0.0]

    class Slow(HashEmbedder):
        def _embed_documents(self, texts: list[str]) -> list[list[float]]:
            now[0] += 1.0  # one second per call on the fake clock
            return super()._embed_documents(texts)

    result = fill_vectors(store, Slow(), group_chunks=2, deadline=2.5, clock=lambda: now[0])
    assert result.interrupted and result.completed == 6  # calls end at t=1, 2, 3; none starts after 2.5
    assert store.vector_counts().done == 6


def test_groups_grow_while_quick_up_to_the_stores_most_and_shrink_when_slow(store: SQLiteStore) -> None:
    """A store whose transactions cost much (``vector_group_max``) gets bigger groups while they
    are quick (each timed on the injected clock), and smaller ones again when they are slow."""
    store.replace_files([_pending_file(i, [f"heron note {i}"]) for i in range(300)])
    store.vector_group_max = 64  # type: ignore[misc]
    now = [0.0]
    slow_from = [10**9]

    class Timed(HashEmbedder):
        def _embed_documents(self, texts: list[str]) -> list[list[float]]:
            now[0] += 0.001 * len(texts) if self.texts_embedded < slow_from[0] else 0.1 * len(texts)
            return super()._embed_documents(texts)

    emb = Timed()
    slow_from[0] = 16 + 32 + 64 + 64  # from the fifth group on, a chunk takes 0.1 s
    events: list[SyncProgress] = []
    result = fill_vectors(store, emb, listener=events.append, clock=lambda: now[0])
    assert result.completed == 300
    groups = [b.done - a.done for a, b in zip(events, events[1:])]
    assert groups[:5] == [16, 32, 64, 64, 64]  # quick: doubled up to the store's most
    assert groups[5:7] == [32, 16] and groups[7:] == [12]  # slow: halved down to the first size
    # a group size the caller asks for stays as asked
    store.replace_files([_pending_file(i, [f"egret note {i}"]) for i in range(300, 340)])
    events.clear()
    fill_vectors(store, HashEmbedder(), listener=events.append, group_chunks=8, clock=lambda: 0.0)
    assert {b.done - a.done for a, b in zip(events, events[1:])} == {8}

