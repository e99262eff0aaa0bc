"""A thread holds at most one of the pool's connections at a time, and none while it is not
talking to the server (embedding): with a pool of one connection per process, a search that syncs
an edit and its vectors inside its block of reads, a vector phase in the background and searches
meanwhile all go on, never waiting on themselves or on an embedder."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

import pytest

from clawmem_core import MemoryIndex
from clawmem_core.store.postgres import PostgresBackend, PostgresStore
from clawmem_core.testing import HashEmbedder

from .conftest import chunk, file
from .test_index_backends import write

psycopg = pytest.importorskip("psycopg")
psycopg_pool = pytest.importorskip("psycopg_pool")


class Held:
    """Counts the pool's connections each thread holds. A thread asking a pool of one for a second
    connection would wait on itself: that fails at once. Any other wait is cut short (``wait``
    seconds) instead of the store's 30 s: a connection held while nothing runs on it shows as a
    failure, not as a slow test."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, wait: float = 10.0) -> None:
        self.now: Counter[int] = Counter()
        self.most = 0
        self.taken = 0
        self._lock = threading.Lock()
        get, put = psycopg_pool.ConnectionPool.getconn, psycopg_pool.ConnectionPool.putconn

        def getconn(pool: Any, timeout: float | None = None) -> Any:
            me = threading.get_ident()
            if self.now[me] and pool.max_size == 1:
                raise AssertionError("a second connection asked for by a thread holding the only one")
            conn = get(pool, timeout=min(timeout or wait, wait))
            with self._lock:
                self.now[me] += 1
                self.taken += 1
                self.most = max(self.most, self.now[me])
            return conn

        def putconn(pool: Any, conn: Any) -> None:
            with self._lock:
                self.now[threading.get_ident()] -= 1
            put(pool, conn)

        monkeypatch.setattr(psycopg_pool.ConnectionPool, "getconn", getconn)
        monkeypatch.setattr(psycopg_pool.ConnectionPool, "putconn", putconn)


@pytest.fixture
def one(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Held]:
    """Every backend of the test on a pool of one connection."""
    kw = dict(PostgresBackend.__init__.__kwdefaults__ or {})
    monkeypatch.setattr(PostgresBackend.__init__, "__kwdefaults__", {**kw, "pool_size": 1})
    PostgresBackend.close_pools(pg_url)
    yield Held(monkeypatch)
    PostgresBackend.close_pools(pg_url)


def _cut(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                     "WHERE datname = current_database() AND pid <> pg_backend_pid()")


def _pending_file(s: PostgresStore, i: int, text: str) -> None:
    s.replace_files([(file(f"memory/{i}.md", text), [replace(chunk(f"memory/{i}.md", 0, text), pending=True)])])


def test_a_writing_block_inside_a_block_of_reads(one: Held, pg_url: str) -> None:
    """The reads' connection goes back before the writes take one; reads inside the writing block
    run on its connection; the block of reads carries on after it."""
    s = PostgresBackend(pg_url, "w").open()
    with s.reading():
        assert not s.has_content()
        _pending_file(s, 1, "绿茶 green tea")
        _pending_file(s, 2, "乌龙茶 oolong")
        assert s.vector_counts().pending == 2
        with s.writing():
            rows = s.pending_chunks(10)
            assert s.has_content() and s.cache_get("p", "m", "k", ["h"]) == {}
            s.cache_put("p", "m", "k", {"h": [1.0, 0.0]})
            assert s.set_vectors([(r.id, [1.0, 0.0], []) for _, r in rows]) == 2
            with s.writing(), s.reading():  # nested blocks share the writing block's connection
                assert s.vector_counts().pending == 0
        assert s.vector_counts().done == 2 and s.cache_get("p", "m", "k", ["h"]) == {"h": [1.0, 0.0]}
    assert one.most == 1


def test_a_writing_block_holds_no_connection_between_its_statements(one: Held, pg_url: str) -> None:
    """While the vector phase's thread embeds (no statement running), another thread's search
    reads on the pool's only connection."""
    s = PostgresBackend(pg_url, "idle").open()
    _pending_file(s, 1, "第一条 first note")
    other = PostgresBackend(pg_url, "idle").open()
    between, done = threading.Event(), threading.Event()
    got: list[Any] = []

    def vector_phase() -> None:
        try:
            with s.writing():
                rows = s.pending_chunks(10)
                between.set()  # "embedding" now
                assert done.wait(30)
                got.append(s.set_vectors([(r.id, [0.5, 0.5], []) for _, r in rows]))
        except BaseException as exc:
            got.append(exc)
            between.set()

    t = threading.Thread(target=vector_phase)
    t.start()
    try:
        assert between.wait(30)
        with other.reading(snapshot=True):
            assert other.keyword_search(["first"], 5)
        with other.reading():
            assert other.vector_counts().pending == 1
    finally:
        done.set()
        t.join()
    assert got == [1]


def test_no_writing_inside_a_snapshot(one: Held, pg_url: str) -> None:
    """A snapshot's connection is in a read-only transaction: a write there (or a writing block, or
    a snapshot inside a writing block) is a mistake of the caller, told at once, not a second
    connection."""
    s = PostgresBackend(pg_url, "snap").open()
    _pending_file(s, 1, "部署 deploy")
    with s.reading(snapshot=True):
        assert s.keyword_search(["部署"], 5)
        with pytest.raises(RuntimeError, match="snapshot"):
            with s.writing():
                pass
        with pytest.raises(RuntimeError, match="snapshot"):
            s.set_value("k", "v")
        assert s.keyword_search(["deploy"], 5)  # the snapshot is still good
    with s.writing():
        with pytest.raises(RuntimeError, match="snapshot"):
            with s.reading(snapshot=True):
                pass
        s.set_value("k", "v")
    assert s.get_value("k") == "v" and one.most == 1


def test_a_killed_connection_inside_nested_blocks(one: Held, pg_url: str) -> None:
    """The connection is killed between the statements of a writing block opened inside a block of
    reads: the vector phase's calls run once more on a new connection, and the reads go on."""
    s = PostgresBackend(pg_url, "kill").open()
    _pending_file(s, 1, "第一条 first")
    _pending_file(s, 2, "第二条 second")
    with s.reading():
        assert s.has_content()
        with s.writing():
            rows = s.pending_chunks(10)
            _cut(pg_url)
            assert s.set_vectors([(rows[0][1].id, [1.0, 0.0], [])]) == 1
            _cut(pg_url)
            assert s.vector_counts().pending == 1
            _cut(pg_url)
            assert s.set_vectors([(rows[1][1].id, [0.0, 1.0], [])]) == 1
        _cut(pg_url)
        assert s.vector_counts().done == 2
    assert one.most == 1


NOTES = {"MEMORY.md": "# Memory\n\nDana prefers green tea. 李伟喜欢喝咖啡。\n",
         **{f"memory/2026-01-{i:02d}.md": f"# Day {i}\n\nThe billing migration step {i}. 部署账单迁移第{i}步。\n"
            for i in range(1, 13)}}


def test_a_search_syncing_an_edit_and_its_vectors_on_a_pool_of_one(one: Held, pg_url: str, tmp_path: Path) -> None:
    """The search syncs the edited file and embeds it inside its block of reads, then ranks in its
    snapshot: one connection at a time, and the edit's vectors are there."""
    ws = write(tmp_path / "ws", NOTES)
    with MemoryIndex(ws, agent_id="edit", config={"store": {"url": pg_url}}, embedder=HashEmbedder(dims=32),
                     state_dir=tmp_path / "s") as mem:
        mem.fresh_budget = 60.0
        mem.sync()
        mem.search("green tea")
        (ws / "memory" / "2026-01-05.md").write_text("# Day 5\n\n王芳在杭州喝龙井茶。 Wang Fang drinks longjing.\n",
                                                     encoding="utf-8")
        hits = mem.search("龙井茶")
        assert hits and hits[0].path == "memory/2026-01-05.md" and not hits.stale
        assert "龙井茶" in hits[0].snippet
        assert mem._store.pending_chunks(100, 0, ["memory/2026-01-05.md"]) == []  # embedded before answering
    assert one.most == 1


class _Gated(HashEmbedder):
    """Documents embedded in the background wait for the test (a slow model or API)."""

    def __init__(self) -> None:
        super().__init__(dims=32)
        self.gate = threading.Semaphore(0)
        self.waiting = threading.Event()

    def _embed_documents(self, texts: list[str]) -> list[list[float]]:
        if threading.current_thread().name == "clawmem-sync":
            self.waiting.set()
            assert self.gate.acquire(timeout=60)
        return super()._embed_documents(texts)


def test_searches_while_the_vector_phase_embeds_on_a_pool_of_one(one: Held, pg_url: str, tmp_path: Path) -> None:
    """The background vector phase waits inside its embedder; searches (keyword side, Chinese and
    English) are answered meanwhile on the pool's only connection, and the phase then completes."""
    ws = write(tmp_path / "ws", NOTES)
    emb = _Gated()
    with MemoryIndex(ws, agent_id="bg", config={"store": {"url": pg_url}}, embedder=emb,
                     state_dir=tmp_path / "s") as mem:
        mem.sync(vectors=False)
        try:
            assert mem.search("billing migration")  # starts the vector phase in the background
            assert emb.waiting.wait(30)
            for q in ["部署账单迁移", "Dana green tea", "李伟 咖啡"]:
                assert mem.search(q), q
        finally:
            emb.gate.release(1000)
        mem.sync()
        assert mem._store.vector_counts().pending == 0
    assert one.most == 1


def test_connections_killed_while_the_vector_phase_and_searches_share_a_pool_of_one(
        one: Held, pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every connection of the database is killed again and again while the background vector
    phase embeds group by group and searches (English and Chinese) come: the searches answer,
    the phase carries on over new connections, and every chunk ends with its vector."""
    monkeypatch.setattr(PostgresStore, "vector_group_max", 16)  # groups stay at 16 however quick
    many = {**NOTES, **{f"memory/notes/n{i:03d}.md": f"Note {i}: topic {i}. 第{i}个话题。\n" for i in range(120)}}
    ws = write(tmp_path / "ws", many)  # groups of 16 chunks: more groups than the loop below lets through
    emb = _Gated()
    with MemoryIndex(ws, agent_id="kill", config={"store": {"url": pg_url}}, embedder=emb,
                     state_dir=tmp_path / "s") as mem:
        mem.sync(vectors=False)
        total = mem._store.vector_counts().total
        try:
            assert mem.search("billing migration")  # starts the vector phase in the background
            for q in ["部署账单迁移", "Dana green tea", "李伟 咖啡"] * 2:
                assert emb.waiting.wait(30)
                emb.waiting.clear()
                _cut(pg_url)
                emb.gate.release()  # one group goes through, on a connection it has to take again
                assert mem.search(q), q
        finally:
            emb.gate.release(1000)
        if mem._background.thread is not None:
            mem._background.thread.join(60)
        mem.sync()
        counts = mem._store.vector_counts()
        assert counts.pending == 0 and counts.total == total
        assert mem.search("部署账单迁移").vectors == {"done": total, "total": total}
    assert one.most == 1
