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
from clawmem_core.store.bm25 import Bm25Index, read_varint
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
