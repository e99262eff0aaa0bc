"""A query's first use on PostgreSQL: once an agent's searches have read rows by rid a few times,
the ids, paths and lines of all its keyword rows are read (in the background, off the searches)
and kept with its keyword statistics (carried across writes), so a search naming rows it has not
named before reads no rows by rid; what they answer is the table's, after writes and deletes by
this handle or another, and their memory is bounded, counted and freed with the statistics."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from clawmem_core.store.base import ChunkRow
from clawmem_core.store.postgres import KEYWORD_CACHE, PostgresBackend, keyword_cache, keywords
from clawmem_core.store.postgres.keyword_cache import _META_ROW_BYTES

from .conftest import chunk, file
from .test_index_backends import write
from .test_pg_search_reads import NOTES, QUERIES, Statements, _index, _shown

psycopg = pytest.importorskip("psycopg")


def hexchunk(path: str, i: int, text: str, source: str = "memory") -> ChunkRow:
    """A chunk with an id as clawmem makes them (a SHA-256 in hex)."""
    cid = hashlib.sha256(f"{source}:{path}:{i}:{text}".encode()).hexdigest()
    return ChunkRow(cid, path, source, i, i + 2, f"h{i}", "m", text, None, False)


def _files(names: list[str], source: str = "memory") -> list[tuple[Any, list[ChunkRow]]]:
    return [(file(p, p, source=source), [hexchunk(p, 3 * k + j, f"绿茶 green tea {p} part {j} 账单迁移 ledger", source)
                                         for j in range(3)]) for k, p in enumerate(names)]


def _table(url: str, agent: str) -> dict[int, tuple[str, str, str, int, int]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT c.rid, c.id, c.path, c.source, c.start_line, c.end_line FROM clawmem_chunks AS c "
            "JOIN clawmem_agents AS a ON a.agent = c.agent AND a.generation = c.generation "
            "WHERE c.agent = %s AND c.part = 0", (agent,)).fetchall()
    return {int(r[0]): (r[1], r[2], r[3], int(r[4]), int(r[5])) for r in rows}


def _kept(s: Any) -> Any:
    stats = KEYWORD_CACHE.get(s._kw_key())
    assert stats is not None
    return stats


def _settled() -> None:
    """Wait for a load of rows' metadata started in the background, if any."""
    with keywords._META_LOADS:
        pass


def _with_meta(s: Any) -> Any:
    """The agent's statistics with their rows' metadata (read now)."""
    s._load_row_meta(_kept(s))
    stats = _kept(s)
    assert stats.meta is not None
    return stats


def test_row_metadata_kept_with_the_statistics_is_the_tables(pg_url: str) -> None:
    """Loaded with the statistics, then carried over writes and deletes (of this handle and of
    another): every row's id, path, source and lines are those of the table."""
    KEYWORD_CACHE.clear()
    s = PostgresBackend(pg_url, "meta-a").open()
    other = PostgresBackend(pg_url, "meta-a").open()
    s.replace_files(_files([f"memory/{i}.md" for i in range(6)]) + _files(["sessions/a.jsonl"], "sessions"))
    assert s.keyword_search(["green"], 50)
    stats = _with_meta(s)
    assert stats.row_meta(stats.rids.tolist()) == _table(pg_url, "meta-a") and len(stats.rids) == 21
    era = stats.era
    steps = [
        lambda: s.replace_files(_files(["memory/2.md", "memory/新的.md"])),  # replaced and added
        lambda: other.delete_files("memory", ["memory/4.md"]),  # deleted, by another handle
        lambda: other.replace_files(_files(["memory/0.md"]) + _files(["sessions/b.jsonl"], "sessions")),
    ]
    for step in steps:
        step()
        assert s.keyword_search(["绿茶"], 50)
        stats = _kept(s)
        assert stats.era == era  # carried to the new version, not read again
        assert stats.row_meta(stats.rids.tolist()) == _table(pg_url, "meta-a")
    for h in (s, other):
        h.close()


def test_a_first_use_reads_no_rows_by_rid(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Terms searched for the first time: their postings are read, not the rows they name (and
    the answer is the server's own scoring's)."""
    KEYWORD_CACHE.clear()
    s = PostgresBackend(pg_url, "meta-b").open()
    s.replace_files(_files([f"memory/{i}.md" for i in range(8)]))
    assert s.keyword_search(["part"], 5)  # the statistics loaded
    _with_meta(s)
    KEYWORD_CACHE._meta.clear()  # (not the rows kept one by one as searches read them)
    counter = Statements(monkeypatch)
    for terms in (["green", "tea"], ["账单"], ["ledger", "绿茶"]):
        got: list[Any] = []
        sent = counter.during(lambda: got.extend(s.keyword_search(terms, 10)))
        assert any("clawmem_postings" in x for x in sent)
        assert not any("c.rid = ANY" in x for x in sent), [x[:80] for x in sent]
        server = s._keyword_search_sql(s.backend.terms.query(terms), 10)
        assert [i for i, _ in got] == [i for i, _ in server] and got
        assert all(abs(a - b) < 1e-9 for (_, a), (_, b) in zip(got, server))
        meta = s.get_chunk_meta([i for i, _ in got])
        assert {i: m for i, m in meta.items()} == {v[0]: v[1:] for v in _table(pg_url, "meta-b").values()
                                                   if v[0] in meta}
    s.close()


def test_row_metadata_is_counted_and_freed_with_the_statistics(pg_url: str) -> None:
    KEYWORD_CACHE.clear()
    s = PostgresBackend(pg_url, "meta-c").open()
    s.replace_files(_files([f"memory/{i}.md" for i in range(10)]))
    assert s.keyword_search(["green"], 5)
    stats = _with_meta(s)
    assert stats.meta is not None and stats.meta.nbytes >= stats.rows * _META_ROW_BYTES
    assert KEYWORD_CACHE.meta_nbytes == stats.meta.nbytes and KEYWORD_CACHE.nbytes >= stats.nbytes
    s.backend.forget_cached()  # (the registry closing the agent)
    s.close()
    assert KEYWORD_CACHE.get(s._kw_key()) is None and KEYWORD_CACHE.nbytes == KEYWORD_CACHE.meta_nbytes == 0


def test_row_metadata_over_its_budget_goes_least_recently_searched_first(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past :data:`MAX_META_BYTES`, the agents searched least recently lose their rows' metadata
    (their rows are read by rid again, with the same answers); the one searched now keeps its."""
    KEYWORD_CACHE.clear()
    handles = [PostgresBackend(pg_url, f"meta-e{k}").open() for k in range(3)]
    for h in handles:
        h.replace_files(_files([f"memory/{i}.md" for i in range(10)]))
    answers = [h.keyword_search(["green"], 5) for h in handles]
    one = _with_meta(handles[0]).meta.nbytes  # type: ignore[union-attr]
    KEYWORD_CACHE.clear()
    monkeypatch.setattr(keyword_cache, "MAX_META_BYTES", 2 * one + one // 2)
    for h, want in zip(handles, answers):
        assert h.keyword_search(["green"], 5) == want
        _with_meta(h)
    assert [_kept(h).meta is None for h in handles] == [True, False, False]
    assert KEYWORD_CACHE.meta_nbytes == 2 * one
    counter = Statements(monkeypatch)
    sent = counter.during(lambda: handles[0].keyword_search(["tea"], 30))  # (rows not read before)
    assert any("c.rid = ANY" in x for x in sent)  # read by rid, as before
    assert handles[0].keyword_search(["tea"], 30) == handles[0]._keyword_search_sql(["tea"], 30)
    for h in handles:
        h.backend.forget_cached()
        h.close()
    assert KEYWORD_CACHE.meta_nbytes == 0


def test_ids_not_made_by_clawmem_are_read_by_rid(pg_url: str) -> None:
    """Rows whose ids are not SHA-256 in hex: nothing kept with the statistics, the rows named
    are read as before, with the same answers."""
    KEYWORD_CACHE.clear()
    s = PostgresBackend(pg_url, "meta-d").open()
    s.replace_files([(file(f"memory/{i}.md", str(i)), [chunk(f"memory/{i}.md", i, f"绿茶 green tea {i}")])
                     for i in range(4)])
    got = s.keyword_search(["green"], 10)
    s._load_row_meta(_kept(s))
    assert _kept(s).meta is None
    assert [i for i, _ in got] == [i for i, _ in s._keyword_search_sql(["green"], 10)] and len(got) == 4
    s.close()


def test_a_querys_first_search_sends_no_rows_statement(tmp_path: Path, pg_url: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Through ``MemoryIndex.search`` (keyword-only, the agent's statistics loaded): a query
    searched for the first time sends its postings' statement and the texts of the chunks shown,
    not the rows named; the answers are those of a search with nothing kept."""
    ws = write(tmp_path / "ws", NOTES)
    counter = Statements(monkeypatch)
    with _index(ws, pg_url, tmp_path / "k", agent="first-kw", embedder=None, provider="none") as kw:
        kw.sync()
        for q in ("moved", "invoices", "prefers"):  # the statistics loaded, rows read by rid twice
            kw.search(q)
        _settled()
        assert _kept(kw._store).meta is not None
        KEYWORD_CACHE._meta.clear()  # (not the rows kept one by one as searches read them)
        got = {}
        for q in QUERIES:
            sent = counter.during(lambda: got.__setitem__(q, _shown(kw.search(q))))
            assert not any("c.rid = ANY" in x for x in sent), [x[:80] for x in sent]
            assert len(sent) <= 6, [x[:80] for x in sent]
        for q in QUERIES:
            KEYWORD_CACHE.clear()
            assert _shown(kw.search(q)) == got[q] and got[q]


def test_the_rows_metadata_is_read_once_searches_read_rows_by_rid(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The statistics loaded read no rows' metadata (the agent's first search costs what it did);
    after :data:`META_AFTER_READS` searches that read rows by rid, it is read in the background,
    and the next first use reads none."""
    KEYWORD_CACHE.clear()
    s = PostgresBackend(pg_url, "meta-f").open()
    s.replace_files(_files([f"memory/{i}.md" for i in range(8)]))
    counter = Statements(monkeypatch)
    sent = counter.during(lambda: s.keyword_search(["green"], 5))
    assert not any("octet_length" in x for x in sent) and any("c.rid = ANY" in x for x in sent)
    for terms in (["tea"], ["ledger"], ["part"])[:keywords.META_AFTER_READS - 1]:
        _settled()
        assert _kept(s).meta is None
        KEYWORD_CACHE._meta.clear()  # (the rows kept one by one forgotten: read by rid again)
        s.keyword_search(terms, 5)
    _settled()
    assert _kept(s).meta is not None
    sent = counter.during(lambda: s.keyword_search(["绿茶"], 5))
    assert not any("c.rid = ANY" in x for x in sent)
    assert s.keyword_search(["绿茶"], 5) == s._keyword_search_sql(["绿茶"], 5)
    s.close()


def test_a_terms_first_use_reads_the_few_rows_above_the_postings_by_rid(pg_url: str,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The rows ``clawmem_postings`` does not hold yet (a sync that wrote too few to settle): a
    term's first use filters their terms by rid while they are few (not the index of terms, over
    every agent's rows: the planner cannot tell how few they are), through that index when many;
    the answers are the server's own scoring's either way."""
    KEYWORD_CACHE.clear()
    s = PostgresBackend(pg_url, "meta-g").open()
    s.replace_files(_files([f"memory/{i}.md" for i in range(8)]))  # (no settle: every row above)
    assert s.keyword_search(["part"], 5)
    counter = Statements(monkeypatch)
    for below, terms in ((keywords.BY_RID_BELOW, ["green", "账单"]), (10, ["ledger", "绿茶"])):
        monkeypatch.setattr(keywords, "BY_RID_BELOW", below)
        got: list[Any] = []
        sent = [x for x in counter.during(lambda: got.extend(s.keyword_search(terms, 30)))
                if "clawmem_postings" in x]
        assert len(sent) == 1 and ("terms @@" in sent[0]) == (below < 24), sent
        assert got == s._keyword_search_sql(s.backend.terms.query(terms), 30) and len(got) == 24
    s.close()


def test_pending_flags_of_rows_named_from_the_kept_metadata(pg_url: str) -> None:
    """Rows a search names from the metadata kept with the statistics: their pending flags (which
    the vector phase changes) are read, in a snapshot and outside one, and are the table's."""
    from dataclasses import replace

    KEYWORD_CACHE.clear()
    s = PostgresBackend(pg_url, "meta-h").open()
    items = _files([f"memory/{i}.md" for i in range(4)])
    items = [(f, [replace(r, pending=k % 2 == 1) for r in rows]) for k, (f, rows) in enumerate(items)]
    s.replace_files(items)
    truth = {r.id for _, rows in items for r in rows if r.pending}
    assert s.keyword_search(["green"], 20)
    _with_meta(s)
    KEYWORD_CACHE._meta.clear()
    for snapshot in (True, False):
        with s.reading(snapshot=snapshot):
            ids = [i for i, _ in s.keyword_search(["tea", "绿茶"], 20)]
            assert len(ids) == 12 and s.pending_ids(ids) == truth
            assert s.get_chunk_meta(ids) == {r.id: (r.path, r.source, r.start_line, r.end_line)
                                             for _, rows in items for r in rows}
    s.close()
