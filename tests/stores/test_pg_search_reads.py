"""A search on PostgreSQL reads on one connection, its ranking from one read-only snapshot: a few
statements per search, and through connections killed before or between its steps, writes and
generation switches meanwhile, it answers as an uninterrupted search would, from one state of the
index and only from what the agent may read."""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from clawmem_core import MemoryIndex
from clawmem_core.store.postgres import KEYWORD_CACHE, PostgresBackend, PostgresStore
from clawmem_core.testing import HashEmbedder

from clawmem_core.store.base import ChunkRow, FileRow

from .conftest import chunk, file
from .test_index_backends import write

psycopg = pytest.importorskip("psycopg")

NOTES = {
    "MEMORY.md": "# Memory\n\nDana prefers green tea. 李伟喜欢喝咖啡。\n",
    **{f"memory/2026-01-{i:02d}.md": f"# Day {i}\n\nThe billing migration step {i} moved invoices to the new ledger. "
                                      f"部署账单迁移第{i}步。 Alice met Bob about the search latency.\n"
       for i in range(1, 25)},
}
QUERIES = ["billing migration ledger", "账单迁移", "Dana green tea", "search latency Alice"]


class Statements:
    """Counts the statements sent to the server (every ``execute`` of a psycopg cursor, the pool's
    connection checks included) by the thread that turned it on, while on (not those of a thread
    reading the rows' metadata in the background)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sent: list[str] = []
        self.on = False
        self.thread: int | None = None
        real = psycopg.Cursor.execute

        def execute(cur: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            if self.on and threading.get_ident() == self.thread:
                self.sent.append(str(query))
            return real(cur, query, *args, **kwargs)

        monkeypatch.setattr(psycopg.Cursor, "execute", execute)

    def during(self, fn: Callable[[], Any]) -> list[str]:
        self.sent, self.on, self.thread = [], True, threading.get_ident()
        try:
            fn()
        finally:
            self.on = False
        return self.sent


def _index(ws: Path, url: str, state: Path, agent: str = "reader", embedder: Any = "hash", **cfg: Any) -> MemoryIndex:
    return MemoryIndex(ws, agent_id=agent, config={"store": {"url": url}, **cfg},
                       embedder=HashEmbedder(dims=32) if embedder == "hash" else embedder, state_dir=state)


def _cut(url: str) -> None:
    """Drop every other connection of this database from the server side."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                     "WHERE datname = current_database() AND pid <> pg_backend_pid()")


def _same(a: list[tuple[str, float]], b: list[tuple[str, float]]) -> bool:
    return [i for i, _ in a] == [i for i, _ in b] and all(abs(x - y) < 1e-12 for (_, x), (_, y) in zip(a, b))


def _shown(hits: Any) -> list[tuple[str, int, int, float, str]]:
    return [(h.path, h.start_line, h.end_line, round(h.score, 9), h.snippet) for h in hits]


@pytest.fixture
def indexed(tmp_path: Path, pg_url: str) -> Iterator[tuple[MemoryIndex, Path]]:
    ws = write(tmp_path / "ws", NOTES)
    mem = _index(ws, pg_url, tmp_path / "s")
    mem.sync()
    for q in QUERIES:  # warm: the keyword statistics and the change journal
        mem.search(q)
    yield mem, ws
    mem.close()


@pytest.mark.parametrize("on_search", [False, True])
def test_a_warm_search_sends_a_few_statements(tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch,
                                              on_search: bool) -> None:
    ws = write(tmp_path / "ws", NOTES)
    counter = Statements(monkeypatch)
    with _index(ws, pg_url, tmp_path / "s", sync={"on_search": on_search}) as mem, \
            _index(ws, pg_url, tmp_path / "k", agent="kw", embedder=None, provider="none", sync={"on_search": on_search}) as kw:
        mem.sync()
        kw.sync()
        for q in QUERIES * 2:
            mem.search(q)
            kw.search(q)
        for q in QUERIES:
            hybrid = counter.during(lambda: mem.search(q))
            keyword = counter.during(lambda: kw.search(q))
            # hybrid: the counts before the search; then, in one snapshot (BEGIN ... COMMIT, one
            # round trip each way in pipeline mode), the keyword candidates with their paths, the
            # vector candidates with theirs, the texts of the chunks shown
            assert len(hybrid) <= 6, [x[:60] for x in hybrid]
            assert len(keyword) <= 5, [x[:60] for x in keyword]
            assert "" not in hybrid + keyword  # no connection check per checkout
            assert sum(s.startswith("BEGIN") for s in hybrid) == 1


@pytest.mark.parametrize("on_search", [False, True])
def test_a_repeated_keyword_search_sends_one_statement(tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch,
                                                       on_search: bool) -> None:
    """A keyword-only search the process has answered before at the agent's version: the checks
    before it read the version (one statement), and its ranking starts from that version: the
    keyword statistics, the rows they name and the chunks shown are the process's, so it sends
    nothing more (no snapshot at all); its answers are those of a search with nothing kept. A
    hybrid search sends its vector query (with the check of the version, in the snapshot it
    begins) and nothing of the keyword side."""
    ws = write(tmp_path / "ws", NOTES)
    counter = Statements(monkeypatch)
    with _index(ws, pg_url, tmp_path / "k", agent="kw1", embedder=None, provider="none",
                sync={"on_search": on_search}) as kw, \
            _index(ws, pg_url, tmp_path / "s", agent="hy1", sync={"on_search": on_search}) as mem:
        kw.sync()
        mem.sync()
        for q in QUERIES:
            kw.search(q)
            mem.search(q)
        got: dict[str, Any] = {}
        for q in QUERIES:
            keyword = counter.during(lambda: got.__setitem__(q, _shown(kw.search(q))))
            assert len(keyword) == 1 and keyword[0].startswith("SELECT a.generation, a.data_version"), keyword
            hybrid = counter.during(lambda: mem.search(q))
            assert not any("clawmem_postings" in x or "c.rid = ANY" in x or "hash, model, text" in x for x in hybrid)
            assert sum(x.startswith("BEGIN") for x in hybrid) <= 1 and len(hybrid) <= 5, [x[:60] for x in hybrid]
        for q in QUERIES:
            KEYWORD_CACHE.clear()  # nothing kept: every row, posting and text read from the tables
            assert _shown(kw.search(q)) == got[q] and got[q]


def _sync_elsewhere(ws: Path, url: str, state: Path, agent: str) -> None:
    """Sync ``ws`` as ``agent`` from another process."""
    import subprocess
    import sys

    script = (f"from clawmem_core import MemoryIndex\n"
              f"with MemoryIndex({str(ws)!r}, agent_id={agent!r}, config={{'provider': 'none', "
              f"'store': {{'url': {url!r}}}}}, state_dir={str(state)!r}) as m:\n"
              f"    assert m.sync().files_indexed == 1\n")
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120, cwd=Path(__file__).resolve().parents[2])


def test_a_write_between_a_searchs_checks_and_its_ranking(tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    """Another handle writes the agent after a search's checks read its version and before its
    ranking: a ranking the process answers in full is that of the version the checks read; one
    that needs a statement finds the version moved on and runs again, at the new one; either way
    one state of the index, and the next search sees the write."""
    from clawmem_core.index_parts.searching import SearchRunner

    ws = write(tmp_path / "ws", NOTES)
    cfg = {"sync": {"on_search": False}}
    with _index(ws, pg_url, tmp_path / "k", agent="race", embedder=None, provider="none", **cfg) as mem:
        mem.sync()
        day = ws / "memory" / "2026-01-05.md"
        warm, cold = "billing migration ledger", "search latency Alice"
        before = {q: _shown(mem.search(q)) for q in (warm, cold)}
        assert before[warm] == _shown(mem.search(warm))  # warm: answered by the process
        real = SearchRunner.ranked
        for k, q in enumerate((warm, cold)):
            if q == cold:
                before[q] = _shown(mem.search(q))
                KEYWORD_CACHE.clear()  # its ranking needs statements
            calls = [1]

            def write_then_rank(self: Any, *args: Any, _calls: list[int] = calls, _k: int = k) -> Any:
                if _calls:
                    _calls.pop()
                    day.write_text(f"# Day 5\n\nBilling migration ledger and search latency Alice, edit {_k}.\n",
                                   encoding="utf-8")
                    _sync_elsewhere(ws, pg_url, tmp_path / "o", "race")
                return real(self, *args)

            monkeypatch.setattr(SearchRunner, "ranked", write_then_rank)
            caplog.clear()
            with caplog.at_level(logging.INFO, logger="clawmem"):
                got = _shown(mem.search(q))
            monkeypatch.undo()
            assert ("searching again" in caplog.text) == (q == cold)
            after = _shown(mem.search(q))
            assert any(f"edit {k}" in snip for p, *_, snip in after if p == "memory/2026-01-05.md")
            if q == warm:
                assert got == before[q]  # the version the checks read
            else:
                assert got == after  # ran again at the new version


def test_a_search_with_a_shared_namespace_reads_both_in_one_snapshot(tmp_path: Path, pg_url: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    team = write(tmp_path / "team", {"MEMORY.md": "# Team\n\nThe deploy freeze starts on Fridays at noon.\n"})
    with _index(team, pg_url, tmp_path / "t", agent="team") as mem:
        mem.sync()
    ws = write(tmp_path / "ws", NOTES)
    counter = Statements(monkeypatch)
    with _index(ws, pg_url, tmp_path / "s", shared=["team"]) as mem:
        mem.sync()
        for q in QUERIES + ["deploy freeze Fridays"]:
            mem.search(q)
        got: list[Any] = []
        sent = counter.during(lambda: got.extend(mem.search("deploy freeze Fridays")))
        assert got[0].path == "@team/MEMORY.md" and got[0].namespace == "team"
        assert sum(s.startswith("BEGIN") for s in sent) == 1 and "" not in sent
        assert len(sent) <= 9, [x[:70] for x in sent]


@pytest.mark.parametrize("step", ["before", "keyword_search", "vector_search", "get_chunk_meta", "get_chunks",
                                  "vector_counts"])
def test_a_connection_killed_before_or_between_the_steps_of_a_search(
        indexed: tuple[MemoryIndex, Path], pg_url: str, monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    """Nothing changed meanwhile: the search carries on on a new connection (a new snapshot of the
    same version) and answers exactly as an uninterrupted one."""
    mem, _ = indexed
    queries = QUERIES[:2]  # English and Chinese
    before = {q: _shown(mem.search(q)) for q in queries}
    for q in queries:
        if step == "before":
            _cut(pg_url)
        else:
            cuts = [1]
            real = getattr(PostgresStore, step)

            def cut_then(self: PostgresStore, *args: Any, _real: Any = real, _cuts: list[int] = cuts) -> Any:
                if _cuts:
                    _cuts.pop()
                    _cut(pg_url)
                return _real(self, *args)

            monkeypatch.setattr(PostgresStore, step, cut_then)
        assert _shown(mem.search(q)) == before[q]
        monkeypatch.undo()


@pytest.mark.parametrize("change", ["write", "rebuild"])
def test_the_index_changing_while_a_search_lost_its_connection(
        indexed: tuple[MemoryIndex, Path], pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture, change: str) -> None:
    """Another process writes the agent (or switches it to a new generation) while a search's
    connection is lost between its keyword and vector reads: the search runs again, and answers
    from the new state alone (never keyword candidates of one state with texts of another)."""
    mem, ws = indexed
    q = "billing migration ledger"
    (ws / "memory" / "2026-01-03.md").write_text(
        "# Day 3\n\nThe billing migration ledger was rewritten by hand.\n", encoding="utf-8")
    other = _index(ws, pg_url, tmp_path / "other")
    cuts = [1]
    real = PostgresStore.vector_search

    def write_and_cut(self: PostgresStore, *args: Any) -> Any:
        if cuts:
            cuts.pop()
            # another writer, on its own thread and connection (a reading block is per thread)
            t = threading.Thread(target=lambda: other.sync(force=change == "rebuild"))
            t.start()
            t.join()
            _cut(pg_url)
        return real(self, *args)

    monkeypatch.setattr(PostgresStore, "vector_search", write_and_cut)
    gen = mem._store.data_version()[1][0]
    with caplog.at_level(logging.INFO, logger="clawmem"):
        got = _shown(mem.search(q))
    assert "searching again" in caplog.text
    assert (mem._store.data_version()[1][0] != gen) == (change == "rebuild")
    monkeypatch.undo()
    other.close()
    assert got == _shown(mem.search(q))
    day3 = [s for p, *_, s in got if p == "memory/2026-01-03.md"]
    assert day3 and all("rewritten by hand" in s for s in day3)


def test_a_search_whose_connection_keeps_failing_raises_a_store_error(
        indexed: tuple[MemoryIndex, Path], pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from clawmem_core.errors import StoreError

    mem, _ = indexed
    real = PostgresStore._vector_rows

    def always_cut(self: PostgresStore, conn: Any, *args: Any) -> Any:
        conn.execute("SELECT 1")  # its connection taken (a search takes one on its first statement), then lost
        _cut(pg_url)
        return real(self, conn, *args)

    monkeypatch.setattr(PostgresStore, "_vector_rows", always_cut)  # every attempt of the read
    with pytest.raises(StoreError) as err:
        mem.search("billing migration ledger")
    assert "terminat" in str(err.value) or "closed" in str(err.value)
    monkeypatch.undo()
    assert mem.search("billing migration ledger")  # and the next search is served again


def test_a_snapshot_older_than_the_keyword_statistics(pg_url: str) -> None:
    """Another thread brings the process's keyword statistics past the version a search's snapshot
    reads: that search still scores at its own version (as the server would), and the statistics
    stay right for the next searches."""
    KEYWORD_CACHE.clear()
    backend = PostgresBackend(pg_url, "snap")
    s = backend.open()
    s.replace_files([(file(f"memory/{i}.md", str(i)), [chunk(f"memory/{i}.md", 0, f"tea coffee note {i} " + "tea " * i)])
                     for i in range(6)])
    s.keyword_search(["tea", "coffee"], 10)
    old = s.keyword_search(["tea", "coffee"], 10)

    def write_and_search() -> None:
        w = backend.open()
        w.replace_files([(file("memory/new.md", "new"), [chunk("memory/new.md", 0, "tea tea tea coffee coffee")]),
                         (file("memory/0.md", "gone"), [])])
        w.keyword_search(["tea", "coffee"], 10)  # the statistics move on to the new version

    with s.reading(snapshot=True):
        version = s.data_version()
        t = threading.Thread(target=write_and_search)
        t.start()
        t.join()
        assert s.data_version() == version
        in_snapshot = s.keyword_search(["tea", "coffee"], 10)
        assert in_snapshot == old and _same(old, s._keyword_search_sql(backend.terms.query(["tea", "coffee"]), 10))
        assert s.term_hits(["tea", "coffee"]) == (6, [6, 6])
    new = s.keyword_search(["tea", "coffee"], 10)
    assert new != old and new[0][0].startswith("memory:memory/new.md")
    assert _same(new, s._keyword_search_sql(backend.terms.query(["tea", "coffee"]), 10))  # scored by the server
    assert s.term_hits(["tea", "coffee"]) == (6, [6, 6])


def test_reading_blocks_never_mix_agents(pg_url: str) -> None:
    """Two agents whose chunks have the same ids, read in one block (as a search with a shared
    namespace does): each answers with its own rows."""
    a = PostgresBackend(pg_url, "mix-a").open()
    b = PostgresBackend(pg_url, "mix-b").open()
    same = chunk("memory/x.md", 0, "shared words")
    a.replace_files([(file("memory/x.md", "a"), [same])])
    b.replace_files([(file("memory/x.md", "b"), [replace(same, text="shared words of b", start_line=5, end_line=5)])])
    for snapshot in (False, True):
        with a.reading(snapshot), b.reading(snapshot):
            assert a.keyword_search(["shared"], 10)[0][0] == same.id == b.keyword_search(["shared"], 10)[0][0]
            assert a.get_chunks([same.id])[same.id].text == "shared words"
            assert b.get_chunks([same.id])[same.id].text == "shared words of b"
            assert a.get_chunk_meta([same.id])[same.id][2] == 0 and b.get_chunk_meta([same.id])[same.id][2] == 5


def test_a_graph_search_in_a_snapshot_keeps_its_settings_to_itself(pg_url: str) -> None:
    """Through HNSW inside a search's snapshot: the same rows as outside one, and the query's
    settings (ef_search, iterative scan, no sorts) end with it, not with the snapshot."""
    import random

    rng = random.Random(3)
    rows = [ChunkRow(f"g{i}", "memory/v.md", "memory", i, i, f"h{i}", "m", "t", [rng.gauss(0, 1) for _ in range(16)])
            for i in range(300)]
    s = PostgresBackend(pg_url, "graph", exact_below=0, hnsw_visit_cost=0).open()
    s.replace_files([(FileRow("memory/v.md", "memory", "h", 1, 1), rows)])
    q = [rng.gauss(0, 1) for _ in range(16)]
    outside = s.vector_search(q, 20)
    assert len(outside) == 20
    with s.reading(snapshot=True):
        assert s.vector_search(q, 20) == outside
        conn = s.backend._reading().conn  # type: ignore[union-attr]
        got = conn.execute("SELECT current_setting('enable_sort'), current_setting('hnsw.ef_search', true), "
                           "current_setting('transaction_isolation')").fetchone()
        assert got[0] == "on" and got[1] != str(s.backend.hnsw_ef_search) and got[2] == "repeatable read"
        assert s.get_chunk_meta([outside[0][0]]) == {outside[0][0]: ("memory/v.md", "memory", int(outside[0][0][1:]),
                                                                     int(outside[0][0][1:]))}


def test_a_search_holds_one_connection_at_a_time(pg_url: str) -> None:
    """The checks before a search may sync (write) and a ranking may read what is not cached:
    through the block's own connection, so concurrent searches never each hold one connection
    while waiting for a second (a pool of one would stall here for its 30 s timeout)."""
    s = PostgresBackend(pg_url, "one", pool_size=1).open()
    with s.reading():
        assert not s.has_content()
        s.replace_files([(file("memory/a.md", "a"), [chunk("memory/a.md", 0, "green tea 绿茶")])])
        assert s.has_content() and list(s.file_states("memory")) == ["memory/a.md"]
        s.set_meta({"k": 1})
        assert s.get_meta() == {"k": 1}
    with s.reading(snapshot=True):
        hits = s.keyword_search(["绿茶"], 5)
        assert s.file_states("memory")["memory/a.md"][1] == "hash-a"
        assert s.get_meta() == {"k": 1} and s.cache_get("p", "m", "k", ["h"]) == {}
        assert s.get_chunks([hits[0][0]])[hits[0][0]].text == "green tea 绿茶"
        assert s.counts().chunks == 1


def test_chunks_by_id_are_read_once_per_snapshot(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Texts, line ranges and pending flags of chunks read by id in a snapshot answer the later
    reads of the same ids without a statement (only ids not seen yet are asked for); the answers
    are those of a read outside any block."""
    s = PostgresBackend(pg_url, "byid").open()
    rows = [chunk(f"memory/{i}.md", i, f"第{i}条笔记 note {i}") for i in range(4)]
    s.replace_files([(file(f"memory/{i}.md", str(i)), [replace(rows[i], pending=i % 2 == 1)]) for i in range(4)])
    ids = [r.id for r in rows]
    outside = (s.get_chunks(ids), s.get_chunk_meta(ids), s.pending_ids(ids))
    assert outside[0][ids[2]].text == "第2条笔记 note 2" and outside[2] == {ids[1], ids[3]}
    assert outside[1][ids[3]] == ("memory/3.md", "memory", 3, 3)
    counter = Statements(monkeypatch)
    with s.reading(snapshot=True):
        first = counter.during(lambda: s.get_chunks(ids[:2]))
        assert s.get_chunks(ids[:2]) == {i: outside[0][i] for i in ids[:2]}
        again = counter.during(lambda: (s.get_chunks(ids[:2]), s.get_chunk_meta(ids[:2]), s.pending_ids(ids[:2])))
        assert again == []
        rest = counter.during(lambda: s.get_chunk_meta(ids))  # the two not seen yet, by line range
        assert len(rest) == 1 and s.get_chunk_meta(ids) == outside[1] and s.pending_ids(ids) == outside[2]
        texts = counter.during(lambda: s.get_chunks(ids))  # texts of those two: one statement
        assert len(texts) == 1 and s.get_chunks(ids) == outside[0]
        assert s.get_chunks(["nope"]) == {} and s.get_chunk_meta([]) == {}
    assert any(x.startswith("BEGIN") for x in first)


def test_pending_flags_of_rows_named_from_the_process(pg_url: str) -> None:
    """Rows a warm keyword search names from what the process keeps (their ids, paths and lines,
    not their pending flags, which the vector phase changes): asked whether they are pending in
    the same snapshot, the answer is read, and is the table's."""
    KEYWORD_CACHE.clear()
    s = PostgresBackend(pg_url, "flags").open()
    rows = [replace(chunk(f"memory/{i}.md", i, f"绿茶 green tea note {i}"), pending=i % 2 == 1) for i in range(4)]
    s.replace_files([(file(f"memory/{i}.md", str(i)), [rows[i]]) for i in range(4)])
    truth = {r.id for r in rows if r.pending}
    ids = [i for i, _ in s.keyword_search(["green", "tea"], 10)]
    assert sorted(ids) == sorted(r.id for r in rows)
    for snapshot in (True, False):
        with s.reading(snapshot=snapshot):
            assert [i for i, _ in s.keyword_search(["green", "tea"], 10)] == ids
            assert s.pending_ids(ids) == truth and s.get_chunk_meta(ids)[rows[3].id] == ("memory/3.md", "memory", 3, 3)
    s.close()
