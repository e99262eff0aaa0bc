"""The store's search path: in-process BM25 (``clawmem_core.store.bm25``, the same scores and order
as FTS5's ``bm25()``) used by a warm store, and candidate metadata, both dropped as soon as the
index changes."""

from __future__ import annotations

import random
from pathlib import Path

import apsw
import pytest

from clawmem_core.store import sqlite as store_mod
from clawmem_core.store.base import ChunkRow, FileRow
from clawmem_core.store import bm25 as bm25_mod
from clawmem_core.store.sqlite import writes as writes_mod
from clawmem_core.store.bm25 import Bm25Index, pack_postings, read_varint, unpack_postings, write_postings
from clawmem_core.store.sqlite import SQLiteStore
from clawmem_core.text import index_document, quote_fts, search_terms

WORDS = "alpha beta gamma delta running runs ran runner café cafe lamp notes_v2 Zeta 成语 接龙 游戏 今天".split()


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 40)))


def _fts_table(n: int = 600, seed: int = 3) -> apsw.Connection:
    """A contentless FTS5 table like the store's, with rows deleted (tombstones) and ties."""
    rng = random.Random(seed)
    conn = apsw.Connection(":memory:")
    tokenize = store_mod.FTS_TOKENIZERS["cjk"].replace('"', '""')
    conn.execute(f'CREATE VIRTUAL TABLE chunks_fts USING fts5(text, content="", contentless_delete=1, tokenize="{tokenize}")')
    for rid in range(1, n + 1):
        text = "alpha beta" if rid % 50 == 0 else _text(rng)  # identical rows: equal scores
        # two rare words: a query of them matches few rows (scored and cut among the matches alone)
        text += " quasar" * (rid % 97 == 0) + " pulsar" * (rid % 89 == 0)
        conn.execute("INSERT INTO chunks_fts(rowid, text) VALUES (?, ?)", (rid, index_document(text)))
    for rid in range(1, n + 1, 7):
        conn.execute("DELETE FROM chunks_fts WHERE rowid = ?", (rid,))
    return conn


def _fts5(conn: apsw.Connection, terms: list[str], limit: int) -> list[tuple[int, float]]:
    match = " OR ".join(quote_fts(t) for t in terms)
    sql = "SELECT rowid, bm25(chunks_fts) AS r FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY r LIMIT ?"
    return [(r, s) for r, s in conn.execute(sql, (match, limit))]


def _tokens(conn: apsw.Connection, terms: list[str]) -> list[str]:
    tok = conn.fts5_tokenizer("porter", ["unicode61", "remove_diacritics", "2", "tokenchars", "_"])
    return [tok(t.encode(), apsw.FTS5_TOKENIZE_QUERY, None, include_offsets=False)[0][0] for t in terms]


@pytest.mark.parametrize(
    "query",
    [
        "alpha",
        "alpha beta",
        "running runs ran runner",  # one stem, four phrases: counted four times, as FTS5 does
        "cafe café lamp",
        "notes_v2 zeta missing",
        "今天玩成语接龙游戏",
        "delta gamma beta alpha lamp cafe",
        "quasar pulsar",  # few rows match
        "quasar pulsar quasar",
    ],
)
@pytest.mark.parametrize("limit", [1, 5, 200, 1000])
def test_scores_and_order_equal_fts5_bm25(query: str, limit: int) -> None:
    conn = _fts_table()
    terms = search_terms(query)
    want = _fts5(conn, terms, limit)
    got = Bm25Index.load(conn, "chunks_fts").search(_tokens(conn, terms), limit)
    assert got == want  # the same doubles, the same rows, ties in the same order


def test_unknown_terms_match_nothing() -> None:
    conn = _fts_table(50)
    assert Bm25Index.load(conn, "chunks_fts").search(["zzz", "yyy"], 10) == []


def test_read_varint() -> None:
    assert read_varint(b"\x05") == (5, 1)
    assert read_varint(b"\x8a\x35") == (1333, 2)
    assert read_varint(b"\x00\x81\x00", 1) == (128, 3)
    assert read_varint(b"\xff" * 9) == (2**64 - 1, 9)


# -- the store ------------------------------------------------------------------------------------


def _chunks(path: str, texts: list[str]) -> tuple[FileRow, list[ChunkRow]]:
    rows = [ChunkRow(f"{path}#{i}", path, "memory", i + 1, i + 1, f"h{i}", "none", t) for i, t in enumerate(texts)]
    return FileRow(path, "memory", "x", 0, 0), rows


def _fts5_store(store: SQLiteStore, terms: list[str], limit: int) -> list[tuple[str, float]]:
    saved = store._kw_queries
    store._kw_queries = -10**9  # not warm: FTS5 answers
    try:
        return store.keyword_search(terms, limit)
    finally:
        store._kw_queries = saved


@pytest.fixture
def store(tmp_path: Path) -> SQLiteStore:
    rng = random.Random(7)
    s = SQLiteStore(tmp_path / "index.sqlite", vector_enabled=False)
    s.replace_files([_chunks(f"memory/n{i}.md", [_text(rng) for _ in range(5)]) for i in range(40)])
    return s


def _warm(store: SQLiteStore) -> None:
    for _ in range(store_mod._BM25_AFTER_QUERIES + 1):
        store.keyword_search(["alpha"], 5)


def test_warm_store_scores_in_process_with_the_same_results(store: SQLiteStore) -> None:
    _warm(store)
    for query in ("alpha beta", "running lamp", "成语 游戏", "cafe zeta notes_v2"):
        terms = search_terms(query)
        got = store.keyword_search(terms, 20)
        assert store._bm25 is not None  # served in process
        assert got == _fts5_store(store, terms, 20)


def test_a_write_from_another_connection_is_seen_at_once(store: SQLiteStore, tmp_path: Path) -> None:
    _warm(store)
    assert store.keyword_search(["quokka"], 5) == []
    other = SQLiteStore(tmp_path / "index.sqlite", vector_enabled=False)
    other.replace_files([_chunks("memory/new.md", ["a quokka on the lamp"])])
    other.close()
    assert [cid for cid, _ in store.keyword_search(["quokka"], 5)] == ["memory/new.md#0"]
    _warm(store)
    assert [cid for cid, _ in store.keyword_search(["quokka"], 5)] == ["memory/new.md#0"]
    store.delete_files("memory", ["memory/new.md"])  # this connection's own write
    assert store.keyword_search(["quokka"], 5) == []


def test_a_term_of_several_tokens_falls_back_to_fts5(tmp_path: Path) -> None:
    s = SQLiteStore(tmp_path / "tri.sqlite", vector_enabled=False, fts_tokenizer="trigram")
    s.replace_files([_chunks("memory/a.md", ["the lamplighter lit lamps", "no match here"])])
    for _ in range(store_mod._BM25_AFTER_QUERIES + 2):
        assert [cid for cid, _ in s.keyword_search(["lamp"], 5)] == ["memory/a.md#0"]
    assert s._bm25 is None


def test_candidate_metadata_follows_writes(store: SQLiteStore, tmp_path: Path) -> None:
    _warm(store)
    store.replace_files([_chunks("memory/m.md", ["quokka lamp"])])
    (cid, _), = store.keyword_search(["quokka"], 5)
    assert store.get_chunk_meta([cid]) == {cid: ("memory/m.md", "memory", 1, 1)}
    other = SQLiteStore(tmp_path / "index.sqlite", vector_enabled=False)
    moved = ChunkRow(cid, "memory/m.md", "memory", 7, 9, "h0", "none", "quokka lamp")
    other.replace_files([(FileRow("memory/m.md", "memory", "y", 0, 0), [moved])])
    other.close()
    assert store.get_chunk_meta([cid]) == {cid: ("memory/m.md", "memory", 7, 9)}


# -- packed postings ----------------------------------------------------------------------------


def _with_postings(conn: apsw.Connection) -> None:
    """The store's postings tables on a bare FTS5 table, written for its rows."""
    conn.execute("CREATE TABLE chunks_fts_postings (term TEXT PRIMARY KEY, n INTEGER NOT NULL, rows BLOB NOT NULL, "
                 "tfs BLOB NOT NULL)")
    conn.execute("CREATE TABLE chunks_fts_postings_upto (id INTEGER PRIMARY KEY, upto INTEGER NOT NULL)")
    conn.execute("INSERT INTO chunks_fts_postings_upto VALUES (0, 0)")
    assert write_postings(conn, "chunks_fts") > 0


@pytest.mark.parametrize(
    "query",
    ["alpha", "alpha beta", "running runs ran runner", "cafe café lamp", "今天玩成语接龙游戏",
     "delta gamma beta alpha lamp cafe", "quasar pulsar quasar"],
)
@pytest.mark.parametrize("limit", [1, 5, 1000])
def test_postings_with_rows_deleted_and_added_since_give_fts5s_scores(query: str, limit: int,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bm25_mod, "POSTINGS_MIN_INSTANCES", 2)  # most terms from the postings
    conn = _fts_table()
    _with_postings(conn)
    rng = random.Random(11)
    for rid in range(2, 600, 5):  # rows deleted below the watermark
        conn.execute("DELETE FROM chunks_fts WHERE rowid = ?", (rid,))
    for rid in range(601, 700):  # rows added above it, some deleted again
        conn.execute("INSERT INTO chunks_fts(rowid, text) VALUES (?, ?)", (rid, index_document(_text(rng))))
    for rid in range(603, 700, 9):
        conn.execute("DELETE FROM chunks_fts WHERE rowid = ?", (rid,))
    terms = search_terms(query)
    index = Bm25Index.load(conn, "chunks_fts")
    assert index.upto == 600
    got = index.search(_tokens(conn, terms), limit, [quote_fts(t) for t in terms])
    assert got == _fts5(conn, terms, limit)
    stored = {t for (t,) in conn.execute("SELECT term FROM chunks_fts_postings")}
    assert stored & set(_tokens(conn, terms))  # the postings were read, not only the vocabulary


def test_postings_round_trip_in_every_width() -> None:
    import numpy as np

    for top in (200, 60_000, 3_000_000_000, 2**40):
        rows = np.array([1, 2, 300, 300 + top], dtype=np.int64)
        tf = np.array([1, 255, 256, 70_000], dtype=np.int64)
        got_rows, got_tf = unpack_postings(*pack_postings(rows, tf))
        assert got_rows.tolist() == rows.tolist() and got_tf.tolist() == tf.tolist()


def _big_store(path: Path, files: int = 70, seed: int = 5) -> SQLiteStore:
    rng = random.Random(seed)
    s = SQLiteStore(path, vector_enabled=False)
    s.replace_files([_chunks(f"memory/n{i:03d}.md", [_text(rng) for _ in range(4)]) for i in range(files)])
    return s


def _upto(store: SQLiteStore) -> int:
    return store.conn.execute("SELECT upto FROM chunks_fts_postings_upto").fetchall()[0][0]


QUERIES = ("alpha beta", "running lamp", "成语 游戏", "cafe zeta notes_v2", "quokka lamp", "今天 quokka", "pulsar",
           "quasar pulsar lamp")


@pytest.fixture(autouse=True)
def postings_at_any_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """The indexes here are small: their syncs write postings as a large index's would."""
    monkeypatch.setattr(writes_mod, "SETTLE_MIN_INDEX_ROWS", 0)


@pytest.fixture
def rare_terms_stored(monkeypatch: pytest.MonkeyPatch) -> None:
    """Postings written for terms of two instances or more (the rare ones tell deleted rows apart:
    a common term's IDF is clamped)."""
    monkeypatch.setattr(bm25_mod, "POSTINGS_MIN_INSTANCES", 2)


def _assert_like_fts5(store: SQLiteStore) -> None:
    _warm(store)
    for query in QUERIES:
        terms = search_terms(query)
        got = store.keyword_search(terms, 300)
        assert store._bm25 is not None and store._bm25[1].upto is not None  # in process, from the postings
        assert got == _fts5_store(store, terms, 300)


def test_a_sync_writes_the_postings_once_enough_rows_wait(tmp_path: Path, rare_terms_stored: None) -> None:
    store = _big_store(tmp_path / "index.sqlite")
    assert _upto(store) == 0
    store.settle()
    top = store.conn.execute("SELECT max(rid) FROM chunks").fetchall()[0][0]
    assert _upto(store) == top == 280
    store.replace_files([_chunks("memory/new.md", ["quokka lamp"])])
    store.settle()  # one file more: left to the searches (read from FTS5 above the watermark)
    assert _upto(store) == 280
    _assert_like_fts5(store)
    assert [cid for cid, _ in store.keyword_search(["quokka"], 5)] == ["memory/new.md#0"]


def test_a_reused_row_id_never_gets_the_old_rows_postings(tmp_path: Path, rare_terms_stored: None) -> None:
    store = _big_store(tmp_path / "index.sqlite")
    store.replace_files([_chunks("memory/zz.md", ["pulsar pulsar pulsar lamp", "pulsar quasar"])])
    store.settle()
    assert _upto(store) == 282
    # the highest rows deleted: the new rows get their ids again, with other words
    store.replace_files([(FileRow("memory/zz.md", "memory", "y", 0, 0),
                          _chunks("memory/zz.md", ["quokka lamp", "quokka"])[1])])
    assert store.conn.execute("SELECT rid FROM chunks WHERE path = 'memory/zz.md' ORDER BY rid").fetchall() == [
        (281,), (282,)]
    assert _upto(store) == 280  # the trigger moved the watermark below the reused ids
    _assert_like_fts5(store)
    assert store.keyword_search(["pulsar"], 5) == []
    assert [cid for cid, _ in store.keyword_search(["quokka"], 5)] == ["memory/zz.md#1", "memory/zz.md#0"]


def test_deleted_rows_are_never_returned_from_the_postings(tmp_path: Path, rare_terms_stored: None) -> None:
    store = _big_store(tmp_path / "index.sqlite")
    store.replace_files([_chunks("memory/a.md", ["pulsar lamp pulsar"])])
    store.replace_files([_chunks("memory/b.md", ["pulsar"])])
    store.settle()
    store.delete_files("memory", ["memory/a.md"])
    _assert_like_fts5(store)
    assert [cid for cid, _ in store.keyword_search(["pulsar"], 5)] == ["memory/b.md#0"]


def test_an_index_without_postings_is_searched_and_converted(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    store = _big_store(path)
    with store._tx():  # as the code before the postings wrote it
        store.conn.execute("DROP TRIGGER chunks_fts_postings_reused")
        store.conn.execute("DROP TABLE chunks_fts_postings")
        store.conn.execute("DROP TABLE chunks_fts_postings_upto")
    store.settle()  # nothing to write into
    store.close()
    reader = SQLiteStore(path, vector_enabled=False, read_only=True)  # opens it as it is
    _warm(reader)
    for query in QUERIES:
        terms = search_terms(query)
        assert reader.keyword_search(terms, 50) == _fts5_store(reader, terms, 50)
    writer = SQLiteStore(path, vector_enabled=False)  # converted on its writable open
    assert _upto(writer) == 0
    _warm(writer)
    for query in QUERIES:  # no postings yet: FTS5's vocabulary
        terms = search_terms(query)
        assert writer.keyword_search(terms, 50) == _fts5_store(writer, terms, 50)
        assert writer._bm25 is not None and writer._bm25[1].upto is None
    writer.settle()
    assert _upto(writer) == 280
    _assert_like_fts5(writer)
    reader.close()
    writer.close()


_KILL_IN_SETTLE = """
import os, sys
from clawmem_core.store.sqlite import SQLiteStore, writes
writes.SETTLE_MIN_INDEX_ROWS = 0
store = SQLiteStore(sys.argv[1], vector_enabled=False)
def trace(cursor, sql, bindings):
    if sql.startswith(sys.argv[2]):
        os._exit(9)
    return True
store.conn.set_exec_trace(trace)
store.settle()
"""


@pytest.mark.parametrize("at", [
    "INSERT INTO temp",  # during the pass, postings written into the TEMP table
    "BEGIN IMMEDIATE",  # after the pass, before the write transaction
    "UPDATE",  # after the postings were copied in, before the watermark
])
def test_a_settle_killed_midway_leaves_the_index_as_it_was(tmp_path: Path, at: str) -> None:
    import os
    import subprocess
    import sys

    path = tmp_path / "index.sqlite"
    store = _big_store(path)
    store.close()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[2]),
                                                      os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", _KILL_IN_SETTLE, str(path), at], env=env, capture_output=True)
    assert proc.returncode == 9, proc.stderr
    store = SQLiteStore(path, vector_enabled=False)
    assert _upto(store) == 0
    assert store.conn.execute("SELECT count(*) FROM chunks_fts_postings").fetchall() == [(0,)]
    store.settle()
    _assert_like_fts5(store)


def _postings(store: SQLiteStore) -> list[tuple]:
    return store.conn.execute("SELECT term, n, rows, tfs FROM chunks_fts_postings ORDER BY term").fetchall()


@pytest.mark.parametrize("at", [
    "INSERT",  # during the pass (its first postings written)
    "BEGIN IMMEDIATE",  # after the pass, before the write transaction that would copy them in
])
def test_another_connection_commits_during_the_pass_and_the_settle_writes_nothing(
        tmp_path: Path, rare_terms_stored: None, monkeypatch: pytest.MonkeyPatch, at: str) -> None:
    monkeypatch.setattr(bm25_mod, "POSTINGS_BATCH", 2)  # the pass inserts as it goes
    monkeypatch.setattr(writes_mod, "SETTLE_MIN_ROWS", 1)
    path = tmp_path / "index.sqlite"
    store = _big_store(path)
    store.settle()
    assert _upto(store) == 280
    before = _postings(store)
    rng = random.Random(13)
    store.replace_files([_chunks("memory/more.md", [_text(rng) for _ in range(40)])])  # rows 281-320
    other = SQLiteStore(path, vector_enabled=False)  # another process's writer
    other.conn.setbusytimeout(100)  # it would wait this long for the write lock
    committed: list[BaseException | None] = []

    def trace(cursor: apsw.Cursor, sql: str, bindings: object) -> bool:
        if not committed and sql.startswith(at):
            try:
                other.delete_files("memory", ["memory/n001.md"])
                # the highest rows replaced: their ids given again to other words (were the postings
                # computed before copied in, the old rows' counts would attach to them)
                texts = ["今天 quokka pulsar 成语", "pulsar lamp"] + [_text(rng) for _ in range(38)]
                other.replace_files([(FileRow("memory/more.md", "memory", "y", 0, 0),
                                      _chunks("memory/more.md", texts)[1])])
                committed.append(None)
            except apsw.BusyError as exc:  # the settle held the write lock
                committed.append(exc)
        return True

    store.conn.set_exec_trace(trace)
    store.settle()
    store.conn.set_exec_trace(None)
    assert committed == [None]  # the other connection committed while the pass ran
    assert _upto(store) == 280 and _postings(store) == before  # computed on an older state: dropped
    assert not store.conn.execute("SELECT 1 FROM temp.sqlite_master WHERE name = 'chunks_fts_postings_staged'"
                                  ).fetchall()
    _assert_like_fts5(store)
    assert store.conn.execute("SELECT max(rid) FROM chunks").fetchall() == [(320,)]
    assert [cid for cid, _ in store.keyword_search(["quokka"], 5)] == ["memory/more.md#0"]
    store.settle()  # nothing written meanwhile: the postings are rewritten
    assert _upto(store) == 320 and _postings(store) != before
    _assert_like_fts5(store)
    other.close()


def test_a_rebuild_swaps_in_its_postings(tmp_path: Path, rare_terms_stored: None) -> None:
    store = SQLiteStore(tmp_path / "index.sqlite", vector_enabled=False)
    rng = random.Random(5)
    with store.rebuild() as tmp:
        tmp.replace_files([_chunks(f"memory/n{i:03d}.md", [_text(rng) for _ in range(4)]) for i in range(70)])
    assert _upto(store) == 280  # written in the new index before the swap
    store.settle()  # nothing left to write
    assert _upto(store) == 280
    _assert_like_fts5(store)


def test_a_small_index_gets_no_postings(tmp_path: Path, rare_terms_stored: None,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writes_mod, "SETTLE_MIN_INDEX_ROWS", 281)
    store = _big_store(tmp_path / "index.sqlite")  # 280 keyword rows
    store.settle()
    assert _upto(store) == 0
    assert store.conn.execute("SELECT count(*) FROM chunks_fts_postings").fetchall() == [(0,)]
    store.replace_files([_chunks("memory/new.md", ["quokka lamp"])])  # the 281st
    store.settle()
    assert _upto(store) == 281
    _assert_like_fts5(store)


@pytest.mark.parametrize("error", [apsw.FullError, apsw.IOError])
def test_a_full_temporary_directory_leaves_the_postings_as_they_were(
        tmp_path: Path, rare_terms_stored: None, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture, error: type) -> None:
    store = _big_store(tmp_path / "index.sqlite")
    store.settle()
    assert _upto(store) == 280
    store.replace_files([_chunks(f"memory/more{i}.md", ["quokka lamp 成语接龙", "pulsar"]) for i in range(40)])

    def full(conn: object, table: str) -> None:
        raise error("database or disk is full")

    monkeypatch.setattr(writes_mod, "SETTLE_MIN_ROWS", 16)  # the 80 rows above are enough
    monkeypatch.setattr(writes_mod, "stage_postings", full)
    with caplog.at_level("WARNING", logger="clawmem"):
        store.settle()  # no error: the sync that called it goes on
    assert "postings not rewritten" in caplog.text
    assert _upto(store) == 280 and store.conn.getautocommit()
    _assert_like_fts5(store)  # the rows above the watermark read from FTS5
    assert [cid for cid, _ in store.keyword_search(["quokka"], 50)][:1] == ["memory/more0.md#0"]
    monkeypatch.undo()
    monkeypatch.setattr(writes_mod, "SETTLE_MIN_INDEX_ROWS", 0)
    monkeypatch.setattr(bm25_mod, "POSTINGS_MIN_INSTANCES", 2)
    monkeypatch.setattr(writes_mod, "SETTLE_MIN_ROWS", 16)
    store.settle()
    assert _upto(store) == 360


def test_settle_on_an_empty_index_writes_nothing(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "index.sqlite", vector_enabled=False)
    store.settle()
    with store.rebuild():
        pass
    assert _upto(store) == 0
    assert store.keyword_search(["alpha"], 5) == []


@pytest.mark.parametrize("query", ["alpha beta gamma", "running lamp cafe", "今天 成语 delta"])
@pytest.mark.parametrize("limit", [1, 3, 20])
def test_most_rows_matching_cut_from_a_sample_gives_fts5s_rows(query: str, limit: int) -> None:
    conn = _fts_table(4000, seed=9)  # most rows match: the limit-th score bounded from a sample first
    terms = search_terms(query)
    assert Bm25Index.load(conn, "chunks_fts").search(_tokens(conn, terms), limit) == _fts5(conn, terms, limit)
