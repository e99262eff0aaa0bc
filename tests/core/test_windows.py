"""Embedding windows: a chunk longer than the embedder's window is embedded as windows of whole
lines; the vector side scores the chunk by its best window, keyword search keeps whole chunks."""

from __future__ import annotations

import hashlib
from pathlib import Path

import apsw
import pytest

from clawmem_core import MemoryConfig
from clawmem_core.chunking import Chunk, embedding_windows
from clawmem_core.search import Candidate, merge_hybrid
from clawmem_core.testing import HashEmbedder

from .conftest import IndexFactory, WorkspaceFactory

TOPICS = [
    "Caroline adopted a grey cat named Pixel from the shelter",
    "Melanie ran a charity marathon for the children's hospital",
    "Dana booked a train to Porto for the long weekend",
    "The billing service moved from Jenkins to GitHub Actions",
    "今天中午和同事玩成语接龙游戏，输给了 Priya。",
    "Anna is learning Japanese every morning with flash cards",
]


def _chunk(text: str, start: int = 1, end: int = 1) -> Chunk:
    return Chunk(start, end, text, hashlib.sha256(text.encode()).hexdigest())


def _note(n_lines: int = 30) -> str:
    return "# Journal\n\n" + "".join(f"- {TOPICS[i % len(TOPICS)]} (entry {i}).\n" for i in range(n_lines))


def _windowed(window: int = 200) -> HashEmbedder:
    emb = HashEmbedder()
    emb.window_bytes = window
    return emb


# -- embedding_windows ------------------------------------------------------------------------------


def test_a_chunk_that_fits_is_its_own_window() -> None:
    c = _chunk("short line\nanother\n")
    assert embedding_windows(c, 100) == [c]


def test_windows_pack_whole_lines_and_keep_the_chunk_range() -> None:
    lines = [f"line {i} " + "x" * 40 + "\n" for i in range(20)]  # 49 bytes each
    c = _chunk("".join(lines), 3, 22)
    windows = embedding_windows(c, 200)
    assert "".join(w.text for w in windows) == c.text
    assert all(len(w.text.encode()) <= 200 for w in windows)
    assert [len(w.text.splitlines()) for w in windows] == [4, 4, 4, 4, 4]  # 4 lines = 196 bytes
    assert all(w.text.endswith("\n") for w in windows)  # no line is cut
    assert all((w.start_line, w.end_line) == (3, 22) for w in windows)
    assert all(w.hash == hashlib.sha256(w.text.encode()).hexdigest() for w in windows)


def test_a_long_line_is_cut_after_sentences_then_between_words() -> None:
    sentences = ["This is sentence number %d of a long paragraph." % i for i in range(12)]
    c = _chunk(" ".join(sentences))
    windows = embedding_windows(c, 120)
    assert "".join(w.text for w in windows) == c.text
    assert all(len(w.text.encode()) <= 120 for w in windows)
    assert all(w.text.rstrip().endswith(".") for w in windows)  # cut after a sentence end
    one_word_run = "lorem ipsum dolor sit amet consectetur " * 10
    for w in embedding_windows(_chunk(one_word_run), 50):
        assert w.text == w.text.lstrip() and len(w.text.encode()) <= 50  # cut between words


def test_chinese_windows_cut_after_full_width_sentence_ends_never_inside_a_character() -> None:
    text = "我们今天讨论了数据管道的设计。" * 30  # one line, 45 bytes a sentence
    windows = embedding_windows(_chunk(text), 100)
    assert "".join(w.text for w in windows) == text
    for w in windows:
        assert len(w.text.encode()) <= 100
        assert w.text.endswith("。")
    assert len(windows) == 15


def test_whitespace_only_windows_are_dropped() -> None:
    text = "word " * 30 + "\n" + " " * 300 + "\n" + "end of note\n"
    windows = embedding_windows(_chunk(text), 100)
    assert all(w.text.strip() for w in windows)
    assert windows[-1].text.strip().endswith("end of note")


# -- merge ------------------------------------------------------------------------------------------


def _cand(cid: str, start: int, end: int, *, vector: float = 0.0, text: float = 0.0, kw: bool = False) -> Candidate:
    return Candidate(cid, "memory/a.md", "memory", start, end, "", vector, text, 0.0, kw)


def test_a_chunk_scores_its_best_window_and_keeps_the_keyword_row() -> None:
    windows = [_cand("w1", 1, 30, vector=0.2), _cand("w2", 1, 30, vector=0.8), _cand("w3", 1, 30, vector=0.5)]
    other = _cand("o", 31, 40, vector=0.6)
    keyword = [_cand("chunk", 1, 30, text=0.9, kw=True)]
    merged = {(c.start_line, c.end_line): c for c in merge_hybrid(windows + [other], keyword, 0.7, 0.3)}
    assert len(merged) == 2
    best = merged[(1, 30)]
    assert best.id == "chunk" and best.from_keyword  # the keyword row: its snippet is the chunk's
    assert best.vector_score == pytest.approx(0.8)
    assert best.score == pytest.approx(0.7 * 0.8 + 0.3 * 0.9)
    assert merged[(31, 40)].score == pytest.approx(0.7 * 0.6)


def test_vector_only_chunk_keeps_its_best_window() -> None:
    merged = merge_hybrid([_cand("w1", 5, 9, vector=0.3), _cand("w2", 5, 9, vector=0.7)], [], 1.0, 0.0)
    assert [(c.id, c.score) for c in merged] == [("w2", pytest.approx(0.7))]


# -- index and search ---------------------------------------------------------------------------


def test_long_chunk_is_one_keyword_row_and_several_vector_rows(make_workspace: WorkspaceFactory,
                                                                open_index: IndexFactory, state_dir: Path) -> None:
    ws = make_workspace({"MEMORY.md": _note(30)})
    emb = _windowed(200)
    mem = open_index(ws, embedder=emb)
    report = mem.sync()
    conn = apsw.Connection(str(next(state_dir.rglob("main.sqlite"))))
    rows = conn.execute("SELECT part, embedding IS NOT NULL FROM chunks").fetchall()
    chunks = [r for r in rows if r[0] == 0]
    windows = [r for r in rows if r[0] == 1]
    assert len(chunks) == report.chunks_indexed == mem.status().chunks
    assert len(windows) > 2 * len(chunks)
    assert all(has_vec for _, has_vec in windows)
    assert not any(has_vec for _, has_vec in chunks)  # every chunk here is longer than a window
    distinct = conn.execute("SELECT count(DISTINCT hash) FROM chunks WHERE part = 1").fetchall()[0][0]
    assert emb.texts_embedded == distinct  # a window shared by two overlapping chunks is embedded once
    fts_rows = conn.execute("SELECT count(*) FROM chunks_fts").fetchall()[0][0]
    assert fts_rows == len(chunks)


def test_vector_search_finds_a_chunk_by_one_of_its_windows(make_workspace: WorkspaceFactory,
                                                           open_index: IndexFactory) -> None:
    ws = make_workspace({"MEMORY.md": _note(30), "memory/other.md": "# Other\n\nNothing related here at all.\n"})
    vector_only = MemoryConfig.from_dict({"query": {"hybrid": {"enabled": False}}})
    mem = open_index(ws, embedder=_windowed(200), config=vector_only)
    mem.sync()
    hits = mem.search("grey cat Pixel shelter", min_score=0)
    assert hits[0].path == "MEMORY.md"
    # the snippet of a vector-only hit is the window that matched, not the start of the chunk
    assert "Pixel" in hits[0].snippet
    whole = mem.read("MEMORY.md").text
    assert hits[0].snippet != whole[: len(hits[0].snippet)]
    ranges = [(h.path, h.start_line, h.end_line) for h in hits]
    assert len(ranges) == len(set(ranges))  # one result per chunk, however many windows matched


def test_hybrid_result_combines_best_window_and_keyword_score(make_workspace: WorkspaceFactory,
                                                              open_index: IndexFactory) -> None:
    ws = make_workspace({"MEMORY.md": _note(30)})
    mem = open_index(ws, embedder=_windowed(200))
    mem.sync()
    hits = mem.search("marathon hospital", min_score=0)
    hit = hits[0]
    assert hit.vector_score is not None and hit.text_score is not None
    assert hit.vector_score > 0 and hit.text_score > 0
    vw, tw = mem.config.query.hybrid.weights
    # the fused score, times the query's confidence (capped at 1; README, "How scores are made")
    fused = vw * hit.vector_score + tw * hit.text_score
    assert hit.score == pytest.approx(min(1.0, fused * hits.info["confidence"]), abs=1e-3)
    assert hit.snippet.startswith("# Journal")  # on overlap the keyword (whole chunk) snippet


def test_window_size_is_part_of_the_index_identity(make_workspace: WorkspaceFactory,
                                                   open_index: IndexFactory) -> None:
    ws = make_workspace({"MEMORY.md": _note(30)})
    open_index(ws, embedder=_windowed(200)).sync()
    again = open_index(ws, embedder=_windowed(200))
    assert not again.needs_full_reindex()
    other = open_index(ws, embedder=_windowed(400))
    assert other.needs_full_reindex()
    assert other.sync().full is True


def test_whole_chunk_embedding_without_a_window(make_workspace: WorkspaceFactory, open_index: IndexFactory,
                                                state_dir: Path) -> None:
    ws = make_workspace({"MEMORY.md": _note(30)})
    emb = HashEmbedder()  # window_bytes None: whole chunks, as OpenClaw embeds them
    open_index(ws, embedder=emb).sync()
    conn = apsw.Connection(str(next(state_dir.rglob("main.sqlite"))))
    assert conn.execute("SELECT count(*) FROM chunks WHERE part = 1").fetchall()[0][0] == 0
    assert conn.execute("SELECT count(*) FROM chunks WHERE embedding IS NULL").fetchall()[0][0] == 0


def test_index_without_the_part_column_is_upgraded_and_rebuilt(make_workspace: WorkspaceFactory,
                                                               open_index: IndexFactory, state_dir: Path) -> None:
    ws = make_workspace({"MEMORY.md": _note(30)})
    first = open_index(ws, embedder=_windowed(200))
    first.sync()
    first.close()
    path = next(state_dir.rglob("main.sqlite"))
    conn = apsw.Connection(str(path))
    conn.execute("DELETE FROM chunks WHERE part = 1")
    conn.execute("DROP INDEX idx_chunks_windows")  # (an index of the window rows came later)
    conn.execute("ALTER TABLE chunks DROP COLUMN part")  # as written before windows existed
    conn.execute("UPDATE meta SET value = json_remove(value, '$.embed_window') WHERE key = 'memory_index_meta_v1'")
    conn.close()
    mem = open_index(ws, embedder=_windowed(200))
    assert mem.needs_full_reindex()
    assert mem.sync().full is True
    assert mem.search("grey cat Pixel", min_score=0)[0].path == "MEMORY.md"
    conn = apsw.Connection(str(path))
    assert conn.execute("SELECT count(*) FROM chunks WHERE part = 1").fetchall()[0][0] > 0


def test_vector_counts_count_chunks_not_windows_from_the_indexes(make_workspace: WorkspaceFactory,
                                                                 open_index: IndexFactory, state_dir: Path) -> None:
    """The vector counts come from indexes (no chunk row read but the pending ones) and equal a
    count of the rows: windows are not chunks. An index of an earlier release, without the
    windows' index, gets it on its next writable open, and is counted the slow way until then."""
    from clawmem_core.store.sqlite import SQLiteStore

    ws = make_workspace({"MEMORY.md": _note(30), "memory/2026-01-05.md": "今天和小明玩成语接龙游戏。\n" * 3})
    mem = open_index(ws, embedder=_windowed(200))
    db = next(state_dir.rglob("main.sqlite"))

    def counted(store: SQLiteStore) -> tuple[int, int, int]:
        store._vector_counts = None
        c = store.vector_counts()
        return c.done, c.total, c.pending_chars

    def by_rows() -> tuple[int, int, int]:
        conn = apsw.Connection(str(db))
        total, pending, chars = conn.execute(
            "SELECT count(*), sum(pending), coalesce(sum(CASE WHEN pending = 1 THEN length(text) END), 0) "
            "FROM chunks WHERE part = 0").fetchall()[0]
        conn.close()
        return total - pending, total, chars

    mem.sync(vectors=False)  # every chunk pending
    store = mem._store
    assert store.windows_index
    assert counted(store) == by_rows() and counted(store)[0] == 0
    mem.sync()  # windows written
    assert counted(store) == by_rows() and counted(store)[0] == counted(store)[1] > 0
    mem.close()
    conn = apsw.Connection(str(db))
    conn.execute("DROP INDEX idx_chunks_windows")
    conn.close()
    reader = SQLiteStore(db, read_only=True)  # a reader writes nothing: counted the slow way
    assert not reader.windows_index and counted(reader) == by_rows()
    reader.close()
    writer = SQLiteStore(db)
    assert writer.windows_index and counted(writer) == by_rows()
    writer.close()
    conn = apsw.Connection(str(db))
    assert conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'idx_chunks_windows'").fetchall()
    conn.close()
