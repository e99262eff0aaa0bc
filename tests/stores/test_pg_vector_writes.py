"""The PostgreSQL store's writes: the vector phase's one statement a batch, each chunk found by its unique key
(never by scanning the agent's pending rows), the vectors sent binary and stored as the text form
stored them, the embedding cache likewise."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import pytest

from clawmem_core.store.postgres import PostgresBackend
from clawmem_core.store.postgres.values import _vec

from .conftest import chunk, file


def pending(path: str, i: int, text: str) -> Any:
    return replace(chunk(path, i, text), pending=True)

psycopg = pytest.importorskip("psycopg")


def _index_reads(url: str, index: str | None = "clawmem_chunks_id") -> dict[str, tuple[int, int]]:
    """Scans and entries read of each index of the chunks table, once the store's connections
    have ended (a backend's statistics reach the shared view at its exit, soon after; waited for
    until ``index`` shows a scan, if given, and the figures stay the same)."""
    PostgresBackend.close_pools(url)
    last: dict[str, tuple[int, int]] = {}
    for _ in range(50):
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            got = {r[0]: (int(r[1]), int(r[2])) for r in conn.execute(
                "SELECT indexrelname, idx_scan, idx_tup_read FROM pg_stat_user_indexes WHERE relname = 'clawmem_chunks'")}
        if got == last and (index is None or got.get(index, (0, 0))[0]):
            return got
        last = got
        time.sleep(0.1)
    return last


def test_a_batch_of_vectors_finds_each_chunk_by_its_key_not_among_the_pending_rows(pg_url: str) -> None:
    backend = PostgresBackend(pg_url, "a")
    s = backend.open()
    n = 400
    rows = [pending(f"f{i}.md", i, f"note {i} about tea and lanterns 茶") for i in range(n)]
    s.replace_files([(file(f"f{i}.md", f"c{i}"), [rows[i]]) for i in range(n)])
    assert s.vector_counts().pending == n
    s.close()
    before = _index_reads(pg_url)
    s = PostgresBackend(pg_url, "a").open()
    done = 0
    for start in range(0, 64, 16):  # the statements of a vector phase, several times on one connection
        done += s.set_vectors([(r.id, [1.0, float(i), 0.5], []) for i, r in enumerate(rows[start:start + 16])])
    s.close()
    assert done == 64
    after = _index_reads(pg_url)
    # every chunk by the unique (agent, generation, id) index, the pending rows' index never read
    pending_read = after["clawmem_chunks_pending"][1] - before["clawmem_chunks_pending"][1]
    assert pending_read == 0, f"{pending_read} entries of the pending rows' index read to complete 64 chunks"
    s = PostgresBackend(pg_url, "a").open()
    assert s.vector_counts().pending == n - 64
    s.close()


def test_vectors_are_stored_as_their_text_form_stored_them(pg_url: str) -> None:
    s = PostgresBackend(pg_url, "a").open()
    vecs: list[Any] = [[0.1, -2.5, 3.0e-8, 1.0 / 3.0], [1e30, -0.0, 7.25, 2.0 ** -20]]
    rows = [pending("a.md", 1, "first 第一"), pending("a.md", 2, "second"), pending("a.md", 3, "windowed")]
    s.replace_files([(file("a.md"), rows)])
    window = replace(chunk("a.md", 4, "part of windowed", window=True), embedding=[0.5, 0.25, -1.0, 2.0])
    done = s.set_vectors([(rows[0].id, vecs[0], []), (rows[1].id, vecs[1], []), (rows[2].id, None, [window])])
    assert done == 3
    s.cache_put("p", "m", "k", {"h0": vecs[0], "h1": vecs[1]})
    with psycopg.connect(pg_url) as conn:
        for r, v in zip(rows, vecs):
            same, dims = conn.execute("SELECT embedding = %s::vector, dims FROM clawmem_chunks WHERE id = %s",
                                      (_vec(v), r.id)).fetchone()
            assert same and dims == 4
        assert conn.execute("SELECT embedding IS NULL, dims IS NULL, pending FROM clawmem_chunks WHERE id = %s",
                            (rows[2].id,)).fetchone() == (True, True, 0)
        assert conn.execute("SELECT embedding = %s::vector FROM clawmem_chunks WHERE id = %s",
                            (_vec(window.embedding), window.id)).fetchone() == (True,)
        for h, v in (("h0", vecs[0]), ("h1", vecs[1])):
            assert conn.execute("SELECT embedding = %s::vector, dims FROM clawmem_embedding_cache WHERE hash = %s",
                                (_vec(v), h)).fetchone() == (True, 4)
    got = s.cache_get("p", "m", "k", ["h0", "h1"])
    assert got["h0"][1] == -2.5 and got["h1"][2] == 7.25 and len(got["h1"]) == 4
    assert s.vector_search([0.1, -2.5, 0.0, 0.3], 1)[0][0] == rows[0].id
    # a chunk completed already (or replaced) is not written twice
    assert s.set_vectors([(rows[0].id, vecs[1], [])]) == 0
    s.close()


def test_a_refused_vector_leaves_the_whole_batch_pending(pg_url: str) -> None:
    """The batch is one statement: a vector the server refuses (NaN) leaves every chunk of it pending."""
    s = PostgresBackend(pg_url, "a").open()
    rows = [pending("a.md", 1, "one"), pending("a.md", 2, "two")]
    s.replace_files([(file("a.md"), rows)])
    from clawmem_core.errors import StoreError

    with pytest.raises(StoreError):
        s.set_vectors([(rows[0].id, [1.0, 2.0], []), (rows[1].id, [float("nan"), 1.0], [])])
    assert s.vector_counts().pending == 2
    assert s.set_vectors([(rows[0].id, [1.0, 2.0], []), (rows[1].id, [0.5, 1.0], [])]) == 2
    s.close()


def test_a_cache_write_leaves_the_commit_setting_as_it_was(pg_url: str) -> None:
    """The cache's own commit does not wait for the disk; nothing else is committed that way: not
    the connection's later transactions, nor a transaction the cache write runs inside."""
    s = PostgresBackend(pg_url, "a").open()
    s.cache_put("p", "m", "k", {"a": [1.0, 2.0]})
    with s._conn() as conn, conn.transaction():
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
    with s.writing():
        with s._conn() as conn, conn.transaction():
            s.cache_put("p", "m", "k", {"b": [3.0, 4.0]})  # on the same connection, inside its transaction
            assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
    assert s.cache_get("p", "m", "k", ["a", "b"]) == {"a": [1.0, 2.0], "b": [3.0, 4.0]}
    s.close()


def test_the_vector_phase_builds_the_graph_once_its_models_chunks_are_all_done(pg_url: str) -> None:
    """Past ``exact_below`` vectors the HNSW index is built when the vector phase has completed
    every chunk of its model (one build over them all, not a graph grown a vector at a time);
    a chunk of another model left pending does not hold it back. Searches are exact until then."""
    import random

    from clawmem_core.store.postgres.vectors import hnsw_index

    s = PostgresBackend(pg_url, "a", exact_below=50).open()
    rng = random.Random(5)
    rows = [pending(f"f{i}.md", i, f"heron {i} 鹭") for i in range(120)]
    other = replace(pending("g.md", 0, "another model's chunk"), model="other-model")
    s.replace_files([(file(f"f{i}.md", f"c{i}"), [rows[i]]) for i in range(120)] + [(file("g.md", "g"), [other])])
    vecs = {r.id: [rng.gauss(0, 1) for _ in range(8)] for r in rows}
    for start in range(0, 112, 16):  # 112 of 120 done: more than exact_below, 8 still to do
        s.set_vectors([(r.id, vecs[r.id], []) for r in rows[start:start + 16]])
        with psycopg.connect(pg_url) as conn:
            assert hnsw_index(conn, 8) is None
    truth = s.vector_search(vecs[rows[3].id], 5)
    assert truth[0][0] == rows[3].id
    s.set_vectors([(r.id, vecs[r.id], []) for r in rows[112:]])
    with psycopg.connect(pg_url) as conn:
        assert hnsw_index(conn, 8) == "halfvec"
    assert s.vector_counts().pending == 1  # the other model's chunk
    assert s.vector_search(vecs[rows[3].id], 5)[0][0] == rows[3].id
    s.close()


def test_binary_terms_and_vectors_are_the_values_their_literals_give(pg_url: str) -> None:
    """The keyword phase sends each chunk's terms (and a cached vector) binary: the server holds
    exactly what the text literals gave, for Chinese, quotes, backslashes and counts past 256."""
    from collections import Counter

    from clawmem_core.store.postgres.values import BinaryTsVector, BinaryVector, _tsvector, register_binary

    cases = [Counter({"茶": 3, "龙井": 1, "it's": 2, "a\\b": 1, "''": 1, "x" * 300: 1, "many": 300}),
             Counter({"one": 1}), Counter()]
    with psycopg.connect(pg_url) as conn:
        register_binary(conn)
        for counts in cases:
            got = conn.execute("SELECT %b::tsvector = %s::tsvector, %b::tsvector::text",
                               (BinaryTsVector(counts), _tsvector(counts), BinaryTsVector(counts))).fetchone()
            assert got[0], (counts, got[1])
        v = [0.1, -2.5, 1.0 / 3.0]
        assert conn.execute("SELECT %b::vector = %s::vector", (BinaryVector(v), _vec(v))).fetchone() == (True,)
    s = PostgresBackend(pg_url, "a").open()
    s.replace_files([(file("a.md"), [chunk("a.md", 1, "龙井茶 tea, it's tea", [0.5, 0.5])])])
    assert [h[0] for h in s.keyword_search(["龙井"], 5)] == [chunk("a.md", 1, "龙井茶 tea, it's tea").id]
    assert s.vector_search([0.5, 0.5], 1)[0][1] > 0.99
    s.close()


def test_the_keyword_phase_holds_each_rows_own_postings(pg_url: str) -> None:
    """The keyword phase's rows keep their values (terms, length, text without NUL, a vector where
    one is known, windows without terms), and the postings settle writes from what the handle held
    (numbered in one pass per write) name exactly the rows holding each term."""
    from collections import Counter

    from clawmem_core.store.postgres.values import _tsvector

    s = PostgresBackend(pg_url, "a").open()
    items = []
    for f in range(30):
        rows = [pending(f"f{f}.md", i, f"word{f * 10 + i} tea 茶叶 龙井 note {i}") for i in range(10)]
        items.append((file(f"f{f}.md", f"c{f}"), rows + [rows[0]]))  # an identical piece: one row
    odd = [chunk("odd.md", 1, "nul\x00inside 绿茶", [0.25, 0.5, 1.0]), chunk("odd.md", 2, "a window", window=True)]
    items.append((file("odd.md", "odd"), odd))
    s.replace_files(items)
    with psycopg.connect(pg_url) as conn:
        stored = {r[0]: r[1:] for r in conn.execute(
            "SELECT id, rid, terms = %s::tsvector, terms IS NULL, doc_len, text, part, pending, dims, "
            "embedding::text FROM clawmem_chunks WHERE id = %s OR id = %s OR id = %s",
            (_tsvector(Counter({"word0": 1, "tea": 1, "茶": 1, "叶": 1, "茶叶": 1, "龙": 1, "井": 1, "龙井": 1,
                                "note": 1, "0": 1})), items[0][1][0].id, odd[0].id, odd[1].id))}
        total = conn.execute("SELECT count(*) FROM clawmem_chunks").fetchone()[0]
    assert total == 30 * 10 + 2
    first = stored[items[0][1][0].id]
    assert first[1:] == (True, False, 10, items[0][1][0].text, 0, 1, None, None)
    nul = stored[odd[0].id]
    assert nul[4:] == ("nul\ufffdinside 绿茶", 0, 0, 3, "[0.25,0.5,1]")
    window = stored[odd[1].id]
    assert window[2:5] == (True, 0, "a window") and window[5] == 1
    # the postings held for the rows written (settled from what the client held): each term names its own rows
    s.settle()
    with psycopg.connect(pg_url) as conn:
        rid_of = {r[0]: r[1] for r in conn.execute("SELECT id, rid FROM clawmem_chunks")}
        packed = dict(conn.execute("SELECT term, rids FROM clawmem_postings WHERE term = ANY(%s)",
                                   (["word0", "word157", "word299", "绿茶"],)).fetchall())
    import numpy as np

    for term, cid in (("word0", items[0][1][0].id), ("word157", items[15][1][7].id),
                      ("word299", items[29][1][9].id), ("绿茶", odd[0].id)):
        assert np.frombuffer(packed[term], dtype=">i8").tolist() == [rid_of[cid]], term
    assert [h[0] for h in s.keyword_search(["word157"], 5)] == [items[15][1][7].id]
    s.close()



def test_replacing_files_reads_only_their_own_rows_in_a_never_analyzed_table(pg_url: str) -> None:
    """Each batch of a first sync deletes the rows of its files (none yet) before writing them: on a
    table never analyzed (an agent's first sync), that delete goes through the path index, never
    reading the agent's other rows (``path = ANY(...)`` went through the unique id index and read
    them all, batch after batch: the keyword phase grew with the square of the chunk count)."""
    s = PostgresBackend(pg_url, "a").open()
    n = 300
    s.replace_files([(file(f"f{i}.md", f"c{i}"), [pending(f"f{i}.md", i, f"note {i} 茶")]) for i in range(n)])
    s.close()
    before = _index_reads(pg_url, None)  # (a later flush of these only adds to the reads counted below)
    s = PostgresBackend(pg_url, "a").open()
    for b in range(8):  # batches of new files, and of files replaced, on one connection (prepared after five)
        new = [(file(f"g{b}-{i}.md", f"d{b}{i}"), [pending(f"g{b}-{i}.md", i, f"tea {b} {i} 龙井")]) for i in range(3)]
        again = [(file(f"f{b}.md", f"e{b}"), [pending(f"f{b}.md", 0, f"changed {b} 绿茶")])]
        s.replace_files(new + again)
    assert s.counts().chunks == n + 8 * 3
    s.close()
    after = _index_reads(pg_url, "clawmem_chunks_path")
    read = {k: after[k][1] - before.get(k, (0, 0))[1] for k in after}
    assert read["clawmem_chunks_id"] <= 8 * 4, read  # (reads of the agent's rows: 8 x 300 before)
    assert read["clawmem_chunks_path"] >= 8, read  # each replaced file's old row found by its path
    with psycopg.connect(pg_url) as conn:  # each replaced file holds its new row only
        assert conn.execute("SELECT count(*) FROM clawmem_chunks WHERE path = 'f3.md'").fetchone()[0] == 1
        assert conn.execute("SELECT text FROM clawmem_chunks WHERE path = 'f3.md'").fetchone()[0] == "changed 3 绿茶"
