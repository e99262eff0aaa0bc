"""The PostgreSQL store's in-process keyword statistics: the same answers as scoring in SQL, kept up
to date when any process writes the agent, never shared between agents, and through lost
connections."""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from clawmem_core.store.base import ChunkRow, FileRow
from clawmem_core.store.postgres import KEYWORD_CACHE, PostgresBackend, PostgresStore

pytest.importorskip("psycopg")

WORDS = ("alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega jazz coffee billing deploy "
         "migration 迁移 账单 咖啡").split()
QUERIES = [["alpha"], ["jazz", "coffee"], ["omega", "beta", "nothinghere"], ["迁移", "账单"], ["sigma", "sigma"],
           ["deploy migration"], ["zeta", "kappa", "lambda", "theta"]]


def _doc(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _file(store: PostgresStore, path: str, texts: list[str], agent_tag: str = "") -> None:
    chunks = [ChunkRow(f"{agent_tag}{path}:{i}:{hash(t) & 0xFFFFFF:x}", path, "memory", i + 1, i + 1, f"h{i}{len(t)}",
                       "m", t) for i, t in enumerate(texts)]
    store.replace_files([(FileRow(path, "memory", f"h-{path}-{len(texts)}", 1, 1), chunks)])


def _random_change(store: PostgresStore, rng: random.Random, paths: list[str], touch: bool = False) -> None:
    """One random write: a file's chunks replaced (60%), a file deleted (20%), or (``touch``) a version
    bump without keyword changes."""
    op = rng.random()
    p = rng.choice(paths)
    if op < 0.6:
        _file(store, p, [_doc(rng, rng.randint(1, 60)) for _ in range(rng.randint(1, 5))])
    elif op < 0.8:
        store.delete_files("memory", [p])
    elif touch:
        store.touch_files([FileRow(p, "memory", "x", 5, 5)])


def _in_sql(store: PostgresStore, terms: list[str], limit: int = 50) -> list[tuple[str, float]]:
    """The reference: every matching row scored by the server."""
    tokens = store.backend.terms.query(terms)
    return store._keyword_search_sql(tokens, limit) if tokens else []


def _same(a: list[tuple[str, float]], b: list[tuple[str, float]]) -> bool:
    return [i for i, _ in a] == [i for i, _ in b] and all(abs(x - y) < 1e-9 for (_, x), (_, y) in zip(a, b))


def _hits(store: PostgresStore, terms: list[str]) -> tuple[int, list[int]] | None:
    return store.term_hits(terms)


def _hits_in_sql(store: PostgresStore, terms: list[str]) -> tuple[int, list[int]]:
    import psycopg

    n = 0
    out = []
    with psycopg.connect(store.backend._url) as conn:
        gen = conn.execute("SELECT generation FROM clawmem_agents WHERE agent = %s", (store.agent,)).fetchone()[0]
        n = conn.execute("SELECT count(*) FROM clawmem_chunks WHERE agent = %s AND generation = %s AND part = 0",
                         (store.agent, gen)).fetchone()[0]
        for term in terms:
            toks = store.backend.terms.query([term])
            q = " & ".join(f"'{t}'" for t in toks)
            out.append(conn.execute("SELECT count(*) FROM clawmem_chunks WHERE agent = %s AND generation = %s "
                                    "AND part = 0 AND terms @@ %s::tsquery", (store.agent, gen, q)).fetchone()[0]
                       if toks else 0)
    return n, out


@pytest.fixture
def store(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> PostgresStore:
    from clawmem_core.store.postgres import postings

    monkeypatch.setattr(postings, "SETTLE_MIN_ROWS", 1, raising=False)  # every settle writes postings
    KEYWORD_CACHE.clear()
    s = PostgresBackend(pg_url, "kw").open()
    yield s
    s.close()


def _assert_answers_as_in_sql(store: PostgresStore, step: int) -> None:
    """Every query's keyword answers and term hits are those the rows give, scored in SQL."""
    for q in QUERIES:
        assert _same(store.keyword_search(q, 50), _in_sql(store, q)), (step, q)
    assert _hits(store, ["alpha", "deploy migration", "咖啡"]) == _hits_in_sql(store, ["alpha", "deploy migration", "咖啡"])


def test_cached_scores_follow_every_write(store: PostgresStore) -> None:
    """Random replaces and deletes between searches: each answer (the cached statistics carried
    to the new version) equals the server's scoring of the rows as they are."""
    rng = random.Random(5)
    paths = [f"memory/n{i}.md" for i in range(12)]
    for p in paths:
        _file(store, p, [_doc(rng, rng.randint(3, 40)) for _ in range(rng.randint(1, 4))])
    for step in range(40):
        _assert_answers_as_in_sql(store, step)
        _random_change(store, rng, paths, touch=True)
    stats = KEYWORD_CACHE.get((store.backend._url, "kw"))
    assert stats is not None and stats.terms  # the answers above came from the cache
    assert store.keyword_search(["jazz"], 50)  # not vacuous


def test_another_process_writing_the_agent_is_seen(store: PostgresStore, pg_url: str, tmp_path: Path) -> None:
    _file(store, "memory/a.md", ["the old espresso note", "jazz and coffee"])
    _file(store, "memory/b.md", ["coffee again, more coffee"])
    for _ in range(3):
        before = store.keyword_search(["coffee", "espresso"], 10)
    assert {i.split(":")[0] for i, _ in before} == {"memory/a.md", "memory/b.md"}
    script = textwrap.dedent(f"""
        from clawmem_core.store.base import ChunkRow, FileRow
        from clawmem_core.store.postgres import PostgresBackend
        s = PostgresBackend({pg_url!r}, "kw").open()
        s.replace_files([(FileRow("memory/a.md", "memory", "h2", 2, 2),
                          [ChunkRow("memory/a.md:new", "memory/a.md", "memory", 1, 1, "hn", "m", "zanzibar coffee")])])
        s.delete_files("memory", ["memory/b.md"])
        s.replace_files([(FileRow("memory/c.md", "memory", "h3", 3, 3),
                          [ChunkRow("memory/c.md:0", "memory/c.md", "memory", 1, 1, "hc", "m", "espresso espresso")])])
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
    after = store.keyword_search(["coffee", "espresso"], 10)
    assert [i for i, _ in after] == [i for i, _ in _in_sql(store, ["coffee", "espresso"], 10)]
    assert {i for i, _ in after} == {"memory/a.md:new", "memory/c.md:0"}
    assert [i for i, _ in store.keyword_search(["zanzibar"], 10)] == ["memory/a.md:new"]
    assert store.term_hits(["coffee", "espresso", "jazz"]) == (2, [1, 1, 0])


def test_one_agents_statistics_never_answer_for_another(pg_url: str) -> None:
    KEYWORD_CACHE.clear()
    a = PostgresBackend(pg_url, "agent-a").open()
    b = PostgresBackend(pg_url, "agent-b").open()
    _file(a, "memory/x.md", ["secret alpha alpha", "alpha beta", "beta gamma"], agent_tag="A:")
    _file(b, "memory/x.md", ["alpha", "delta delta"], agent_tag="B:")
    for _ in range(3):
        got_a = a.keyword_search(["alpha", "delta"], 10)
    got_b = b.keyword_search(["alpha", "delta"], 10)
    assert got_a and all(i.startswith("A:") for i, _ in got_a)
    assert got_b and all(i.startswith("B:") for i, _ in got_b)
    assert _same(got_b, _in_sql(b, ["alpha", "delta"], 10))
    assert b.keyword_search(["secret"], 10) == []
    assert a.term_hits(["alpha", "delta"]) == (3, [2, 0])
    assert b.term_hits(["alpha", "delta"]) == (2, [1, 1])
    # a shared-namespace handle on B, opened through A's backend, answers with B's rows
    ns = a.backend.open_namespace("agent-b")
    assert _same(ns.keyword_search(["alpha", "delta"], 10), got_b)
    # B's writes change B's answers only
    b.delete_files("memory", ["memory/x.md"])
    assert b.keyword_search(["alpha"], 10) == []
    assert _same(a.keyword_search(["alpha", "delta"], 10), got_a)


def test_a_lost_connection_recovers(store: PostgresStore, pg_url: str) -> None:
    import psycopg

    _file(store, "memory/a.md", ["jazz coffee", "coffee", "tea"])
    for _ in range(3):
        before = store.keyword_search(["coffee", "tea"], 10)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                     "WHERE datname = current_database() AND pid <> pg_backend_pid()")
    assert store.keyword_search(["coffee", "tea"], 10) == before
    _file(store, "memory/b.md", ["tea tea tea"])
    assert _same(store.keyword_search(["coffee", "tea"], 10), _in_sql(store, ["coffee", "tea"], 10))


def test_a_generation_switch_reloads(pg_url: str) -> None:
    KEYWORD_CACHE.clear()
    s = PostgresBackend(pg_url, "gen").open()
    _file(s, "memory/a.md", ["jazz coffee", "coffee"])
    for _ in range(3):
        s.keyword_search(["coffee"], 10)
    with s.rebuild() as tmp:
        _file(tmp, "memory/z.md", ["coffee in the new generation"])
    assert [i for i, _ in s.keyword_search(["coffee"], 10)] == ["memory/z.md:0:" + f"{hash('coffee in the new generation') & 0xFFFFFF:x}"]


def _segments(url: str, agent: str) -> dict[str, list[int]]:
    """Per term, the ``upto`` of each of its segments."""
    import psycopg

    with psycopg.connect(url) as conn:
        return dict(conn.execute("SELECT term, array_agg(upto) FROM clawmem_postings WHERE agent = %s GROUP BY term",
                                 (agent,)).fetchall())


def test_postings_written_at_sync_answer_as_the_rows(store: PostgresStore, pg_url: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Packed postings written at the end of syncs (segments, merged as they pile up, with rows
    deleted since left in them) give the same answers as the server's scoring of the rows, read
    cold (the cache emptied) or carried from version to version."""
    from clawmem_core.store.postgres import postings

    monkeypatch.setattr(postings, "MAX_POSTING_SEGMENTS", 4)
    monkeypatch.setattr(postings, "SETTLE_BATCH_ROWS", 5)  # a sync's rows in two segments
    rng = random.Random(11)
    paths = [f"memory/n{i}.md" for i in range(10)]
    for p in paths:
        _file(store, p, [_doc(rng, rng.randint(3, 40)) for _ in range(rng.randint(1, 4))])
    store.settle()
    assert _segments(pg_url, "kw")
    written: dict[str, set[int]] = {}
    for step in range(30):
        if rng.random() < 0.3:
            KEYWORD_CACHE.clear()  # the next searches read every term from the table
        _assert_answers_as_in_sql(store, step)
        _random_change(store, rng, paths)
        if rng.random() < 0.5:
            store.settle()
            segments = _segments(pg_url, "kw")
            assert max(len(u) for u in segments.values()) <= 4  # merged over MAX_POSTING_SEGMENTS
            for t, u in segments.items():
                written.setdefault(t, set()).update(u)
    assert max(len(u) for u in written.values()) > 4  # merges happened
    KEYWORD_CACHE.clear()
    for q in QUERIES:
        assert _same(store.keyword_search(q, 50), _in_sql(store, q)), q


def test_a_terms_first_search_reads_its_packed_postings(store: PostgresStore, pg_url: str) -> None:
    """After a sync's postings are written, a term's first search reads them, not the terms of
    every row holding it: with the rows' terms blanked behind the store's back (no new data
    version), the answer is still the one of before."""
    import psycopg

    rng = random.Random(3)
    for i in range(6):
        _file(store, f"memory/n{i}.md", [_doc(rng, 30) for _ in range(3)])
    store.settle()
    _file(store, "memory/late.md", ["alpha jazz written after the postings", "coffee"])  # read from its terms
    KEYWORD_CACHE.clear()
    expected = {tuple(q): store.keyword_search(q, 50) for q in QUERIES}  # read from the rows' terms
    assert all(_same(expected[tuple(q)], _in_sql(store, q)) for q in QUERIES[:4])
    KEYWORD_CACHE.clear()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        upto = conn.execute("SELECT upto FROM clawmem_postings WHERE agent = 'kw' AND term = ''").fetchone()[0]
        assert upto > 0
        conn.execute("UPDATE clawmem_chunks SET terms = NULL WHERE agent = 'kw' AND rid <= %s", (upto,))
    for q in QUERIES:
        assert store.keyword_search(q, 50) == expected[tuple(q)], q
    assert any(i.startswith("memory/late.md") for i, _ in store.keyword_search(["alpha"], 50))


def _postings(url: str, agent: str) -> dict[str, list[tuple[int, int]]]:
    """Per term (the empty one left out), its postings ``(rid, count)`` over every segment, by rid."""
    import numpy as np
    import psycopg

    out: dict[str, list[tuple[int, int]]] = {}
    with psycopg.connect(url) as conn:
        for term, rids, tfs in conn.execute("SELECT term, rids, tfs FROM clawmem_postings WHERE agent = %s "
                                            "AND term <> ''", (agent,)).fetchall():
            out.setdefault(term, []).extend(zip(np.frombuffer(rids, dtype=">i8").tolist(),
                                                np.frombuffer(tfs, dtype=">i2").tolist()))
    return {t: sorted(p) for t, p in out.items()}


def _sync_rows(store: PostgresStore, rng: random.Random) -> None:
    """Files written, one replaced and one deleted since (rows of the sync no longer there), one
    with a word of more than 256 occurrences (its count capped as the ``tsvector``'s positions are)."""
    for i in range(8):
        _file(store, f"memory/n{i}.md", [_doc(rng, rng.randint(3, 50)) for _ in range(rng.randint(1, 4))])
    _file(store, "memory/n2.md", [_doc(rng, 20), "账单 " * 300 + "alpha"])
    store.delete_files("memory", ["memory/n5.md"])


def test_postings_from_the_written_terms_are_the_servers(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The postings a sync writes from the term counts it computed for its rows are exactly those
    the server builds from the rows' terms (the same rows, counts and coverage), and they are not
    read back from the rows: with the rows' terms blanked behind the store's back before the sync
    settles, searches still find every row."""
    import psycopg

    from clawmem_core.store.postgres import postings

    monkeypatch.setattr(postings, "SETTLE_MIN_ROWS", 1)
    monkeypatch.setattr(postings, "SETTLE_BATCH_ROWS", 4)  # several segments
    KEYWORD_CACHE.clear()
    got = {}
    for agent, held in (("held", True), ("server", False)):
        s = PostgresBackend(pg_url, agent).open()
        try:
            _sync_rows(s, random.Random(5))
            if not held:
                s._held = None  # as a process that did not write them: the server reads their terms
            s.settle()
            got[agent] = _postings(pg_url, agent)
        finally:
            s.close()
    assert got["held"] and len(got["held"]) == len(got["server"])
    with psycopg.connect(pg_url) as conn:  # the same rows, written in the same order: rids in step
        base = {a: conn.execute("SELECT min(rid) FROM clawmem_chunks WHERE agent = %s", (a,)).fetchone()[0]
                for a in got}
        uptos = {a: conn.execute("SELECT upto - %s FROM clawmem_postings WHERE agent = %s AND term = ''",
                                 (base[a], a)).fetchone()[0] for a in got}
    assert uptos["held"] == uptos["server"]
    norm = {a: {t: [(r - base[a], n) for r, n in p] for t, p in got[a].items()} for a in got}
    assert norm["held"] == norm["server"]
    assert max(n for p in norm["held"].values() for _, n in p) == 256  # the capped count

    s = PostgresBackend(pg_url, "blank").open()
    try:
        _sync_rows(s, random.Random(5))
        expected = {tuple(q): _in_sql(s, q) for q in QUERIES}
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("UPDATE clawmem_chunks SET terms = NULL WHERE agent = 'blank'")
        s.settle()
        KEYWORD_CACHE.clear()
        for q in QUERIES:
            assert _same(s.keyword_search(q, 50), expected[tuple(q)]), q
    finally:
        s.close()


def test_a_rebuilds_postings_come_from_its_written_terms(store: PostgresStore, pg_url: str) -> None:
    """A full reindex writes a new generation through a handle of its own: once it is live, the
    sync's settle writes that generation's postings from what the rebuild held (the rows' terms,
    blanked behind the store's back, are not read), and searches answer as the server scores."""
    import psycopg

    rng = random.Random(4)
    _file(store, "memory/old.md", [_doc(rng, 20)])
    store.settle()
    with store.rebuild() as tmp:
        for i in range(5):
            _file(tmp, f"memory/r{i}.md", [_doc(rng, rng.randint(5, 40)) for _ in range(3)])
    expected = {tuple(q): _in_sql(store, q) for q in QUERIES}
    assert any(expected.values())
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE clawmem_chunks SET terms = NULL WHERE agent = 'kw'")
    store.settle()
    KEYWORD_CACHE.clear()
    for q in QUERIES:
        assert _same(store.keyword_search(q, 50), expected[tuple(q)]), q


def test_rows_another_handle_wrote_are_settled_from_their_terms(store: PostgresStore, pg_url: str) -> None:
    """Rows written by another handle (another process, or a sync killed before it settled) since
    the last postings: the sync that settles holds not all of them, so the server builds the
    postings from the rows' terms; the answers are the server's scoring of the rows."""
    rng = random.Random(8)
    _file(store, "memory/mine.md", [_doc(rng, 30) for _ in range(3)])
    other = PostgresBackend(pg_url, "kw").open()
    try:
        _file(other, "memory/theirs.md", [_doc(rng, 30) for _ in range(3)] + ["jazz only here"])
    finally:
        other.close()
    _file(store, "memory/mine2.md", [_doc(rng, 30)])
    store.settle()
    assert _segments(pg_url, "kw")
    KEYWORD_CACHE.clear()
    for q in QUERIES:
        assert _same(store.keyword_search(q, 50), _in_sql(store, q)), q
    assert any(i.startswith("memory/theirs.md") for i, _ in store.keyword_search(["jazz"], 50))


def test_several_agents_keep_their_hot_terms(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Agents searched in turn over the cache's budget evict each other's least recently used
    terms, not each other whole: an agent's hot term and row lengths stay while another agent's
    one-off terms come and go."""
    from clawmem_core.store.postgres import keyword_cache

    KEYWORD_CACHE.clear()
    a = PostgresBackend(pg_url, "hot-a").open()
    b = PostgresBackend(pg_url, "hot-b").open()
    _file(a, "memory/a.md", [f"hot filler{i}" for i in range(40)], agent_tag="A:")
    _file(b, "memory/b.md", [" ".join(f"cold{k}" for k in range(10) if (i + k) % 2 == 0) + f" pad{i}"
                             for i in range(40)], agent_tag="B:")
    # room for both agents' rows (their rids and lengths, and their positions by rid: each
    # agent's 40 rids are consecutive), A's hot term and three of B's one-off terms (as bytes,
    # and as rows plus postings for a cache that counts those)
    monkeypatch.setattr(keyword_cache, "MAX_CACHED_BYTES", 40 * (24 + 4) * 2 + 40 * 6 + 3 * 20 * 6, raising=False)
    monkeypatch.setattr(keyword_cache, "MAX_CACHED_POSTINGS", 40 * 3 + 3 * 20, raising=False)
    try:
        expected = _in_sql(a, ["hot"], 10)
        for k in range(10):
            assert _same(a.keyword_search(["hot"], 10), expected)
            held = KEYWORD_CACHE.get((pg_url, "hot-a"))
            assert b.keyword_search([f"cold{k}"], 50)
            assert KEYWORD_CACHE.get((pg_url, "hot-a")) is held, k  # A kept whole
            assert "hot" in held.terms, k
        stats_b = KEYWORD_CACHE.get((pg_url, "hot-b"))
        assert stats_b is not None and set(stats_b.terms) == {"cold7", "cold8", "cold9"}
        assert KEYWORD_CACHE.nbytes <= keyword_cache.MAX_CACHED_BYTES
    finally:
        a.close()
        b.close()


def test_postings_placed_by_a_lookup_as_by_a_binary_search() -> None:
    """A term's postings placed among the rows by the positions kept by rid of the agent's first
    rows (those dense enough), and above them by a binary search, give what a binary search over
    all the rows gives: the same positions and counts, rows the statistics do not hold left out
    (or, outside ``live_only``, the statistics found stale), rids below, between and above the
    rows' included; the rows of later syncs, after other agents' rows, do not widen the lookup."""
    import numpy as np

    from clawmem_core.store.postgres import keyword_cache
    from clawmem_core.store.postgres.keyword_cache import _KeywordStats, _StaleKeywords

    rng = np.random.default_rng(5)
    cases = [(np.sort(rng.choice(np.arange(10, 10 + span), rows, replace=False)), dense)
             for span, rows, dense in ((400, 300, 300), (1_000, 500, 500))]
    # a bulk of rows, then rows written after other agents' (far above): the bulk by lookup
    bulk = np.arange(1, 2_001)
    cases.append((np.concatenate([bulk, 9_000 + np.sort(rng.choice(500, 40, replace=False))]), 2_000))
    # sparse from the start: few rows by lookup
    cases.append((np.sort(rng.choice(np.arange(1, 100_000), 50, replace=False)), None))
    for rids, dense in cases:
        rids = rids.astype(np.int64)
        rows = len(rids)
        stats = _KeywordStats((1, 1), rids, rng.integers(1, 50, rows).astype(np.float64))
        if dense is not None:
            assert stats._dense == dense
        assert stats._at is not None and len(stats._at) <= keyword_cache._DENSE_SPAN * stats._dense
        assert stats.nbytes == rows * keyword_cache._ROW_BYTES + stats._at.nbytes
        by_search = _KeywordStats((1, 1), rids, stats.doc_len)
        by_search._at = None
        top = int(rids[-1])
        for k in range(40):
            held = rng.choice(rids, rng.integers(0, rows), replace=False)
            other = rng.integers(0, top + 40, k % 4)  # rows deleted since, below and above the rows'
            want = np.unique(np.concatenate([held, other]).astype(np.int64))
            tf = rng.integers(1, 9, len(want)).astype(np.int64)
            got, expected = stats.entry(want, tf, live_only=True), by_search.entry(want, tf, live_only=True)
            assert got[0].dtype == expected[0].dtype and got[1].dtype == expected[1].dtype
            assert got[0].tolist() == expected[0].tolist() and got[1].tolist() == expected[1].tolist()
            assert (rids[got[0]] == want[np.isin(want, rids)]).all()
            if np.isin(want, rids).all():
                assert stats.entry(want, tf)[0].tolist() == expected[0].tolist()
            else:
                with pytest.raises(_StaleKeywords):
                    stats.entry(want, tf)
                with pytest.raises(_StaleKeywords):
                    by_search.entry(want, tf)
    empty = _KeywordStats(None, np.zeros(0, dtype=np.int64), np.zeros(0))
    assert empty._at is None and empty.entry(np.array([3], dtype=np.int64), np.array([1]), live_only=True)[0].tolist() == []
