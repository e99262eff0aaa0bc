"""Races on the PostgreSQL store: the connection killed by the server before each statement of a
sync, in turn (an aimed hook, as ``tests/reliability/fs_race.py`` aims file swaps); on both
backends, two processes syncing one agent, and a shared namespace switching generations, inside
a search stopped at each point where a sync can replace what it has read (a hook again, never a
sleep). After each: every file group is wholly old or wholly new, a search shows one version
with its text, and the next sync finishes."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

from clawmem_core import MemoryIndex
from clawmem_core.errors import ClawmemError
from clawmem_core.testing import HashEmbedder

from .test_coordination import notes, worker

QUIET = {"sync": {"on_search": False, "on_session_start": False}}


class StatementKiller:
    """While installed, counts the statements this thread sends through psycopg and, before
    statement number ``at`` (0-based), terminates the server process of the connection about to
    send it (``pg_terminate_backend``, as a server restart or a network cut would)."""

    def __init__(self, url: str, at: int | None) -> None:
        import psycopg

        self.at = at
        self.count = 0
        self.fired = False
        self._admin = psycopg.connect(url, autocommit=True)
        self._thread = threading.get_ident()
        self._busy = False

    def before(self, conn: Any) -> None:
        if threading.get_ident() != self._thread or self._busy:
            return
        n, self.count = self.count, self.count + 1
        if n == self.at:
            self._busy = True
            try:
                self._admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
                self.fired = True
            finally:
                self._busy = False

    @classmethod
    @contextlib.contextmanager
    def installed(cls, monkeypatch: pytest.MonkeyPatch, url: str, at: int | None) -> Iterator["StatementKiller"]:
        import psycopg

        killer = cls(url, at)
        execute, executemany = psycopg.Cursor.execute, psycopg.Cursor.executemany

        def hooked_execute(self: Any, *args: Any, **kwargs: Any) -> Any:
            killer.before(self.connection)
            return execute(self, *args, **kwargs)

        def hooked_executemany(self: Any, *args: Any, **kwargs: Any) -> Any:
            killer.before(self.connection)
            return executemany(self, *args, **kwargs)

        with monkeypatch.context() as m:
            m.setattr(psycopg.Cursor, "execute", hooked_execute)
            m.setattr(psycopg.Cursor, "executemany", hooked_executemany)
            try:
                yield killer
            finally:
                killer._admin.close()


def _state(url: str, agent: str) -> dict[str, tuple[str, frozenset[tuple[int, int, str]]]]:
    """The agent's live index: path -> (file hash, its keyword chunks' (start, end, hash))."""
    import psycopg

    with psycopg.connect(url) as conn:
        files = conn.execute(
            "SELECT f.path, f.hash FROM clawmem_files AS f JOIN clawmem_agents AS a ON a.agent = f.agent "
            "AND a.generation = f.generation WHERE f.agent = %s", (agent,)).fetchall()
        chunks = conn.execute(
            "SELECT c.path, c.start_line, c.end_line, c.hash FROM clawmem_chunks AS c JOIN clawmem_agents AS a "
            "ON a.agent = c.agent AND a.generation = c.generation WHERE c.agent = %s AND c.part = 0", (agent,)).fetchall()
    by_path: dict[str, set[tuple[int, int, str]]] = {}
    for path, start, end, h in chunks:
        by_path.setdefault(path, set()).add((start, end, h))
    orphans = set(by_path) - {p for p, _ in files}
    assert not orphans, f"chunks without their file row: {sorted(orphans)}"
    return {p: (h, frozenset(by_path.get(p, ()))) for p, h in files}


def _pending_and_leftovers(url: str, agent: str) -> tuple[int, int]:
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE c.pending = 1 AND c.generation = a.generation), "
            "count(*) FILTER (WHERE c.generation <> a.generation) FROM clawmem_chunks AS c "
            "JOIN clawmem_agents AS a ON a.agent = c.agent WHERE c.agent = %s", (agent,)).fetchone()
    return int(row[0]), int(row[1])


def _before(ws: Path) -> None:
    notes(ws, 5, tag="v1")


def _after(ws: Path) -> None:
    """Two notes rewritten, one deleted, one added, MEMORY.md kept."""
    notes(ws / "tmp-v2", 5, tag="v2")
    for i in (1, 3):
        os.replace(ws / "tmp-v2" / "memory" / f"n{i:03d}.md", ws / "memory" / f"n{i:03d}.md")
    os.remove(ws / "memory" / "n004.md")
    os.replace(ws / "tmp-v2" / "memory" / "n000.md", ws / "memory" / "new.md")
    for p in sorted((ws / "tmp-v2").rglob("*"), reverse=True):
        p.unlink() if p.is_file() else p.rmdir()
    (ws / "tmp-v2").rmdir()


def _index(ws: Path, tmp: Path, url: str, agent: str, model: str = "hash-v1") -> MemoryIndex:
    return MemoryIndex(ws, agent_id=agent, config={"store": {"url": url}, **QUIET}, embedder=HashEmbedder(model=model),
                       state_dir=tmp / "state")


def _sweep(tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch, full: bool, step: int) -> int:
    """Kill the connection before statement 0, ``step``, 2*``step``... of a sync from the old
    notes to the new ones (``full``: also a model change, a new generation); returns the kills."""
    model = "hash-v2" if full else "hash-v1"
    refs = {}
    for name, make in (("old", _before), ("new", None)):
        ws = tmp_path / f"ref-{name}"
        _before(ws)
        if make is None:
            _after(ws)
        with _index(ws, tmp_path, pg_url, f"ref-{name}", model if name == "new" else "hash-v1") as mem:
            mem.sync()
        refs[name] = _state(pg_url, f"ref-{name}")
    at, kills = 0, 0
    while True:
        agent = f"k{at}"
        ws = tmp_path / agent
        _before(ws)
        with _index(ws, tmp_path, pg_url, agent) as mem:
            mem.sync()
        _after(ws)
        with _index(ws, tmp_path, pg_url, agent, model) as mem:
            with StatementKiller.installed(monkeypatch, pg_url, at) as killer:
                try:
                    mem.sync()
                except ClawmemError:
                    pass  # a typed error; anything else fails the test
            if not killer.fired:
                break  # past the last statement
            kills += 1
            got = _state(pg_url, agent)
            for path, entry in got.items():  # each file group wholly old or wholly new
                assert entry in (refs["old"].get(path), refs["new"].get(path)), (at, path)
            if full:  # a new generation is switched in whole, or not at all
                assert got in (refs["old"], refs["new"]), at
            mem.sync()  # the next sync finishes the job
            assert _state(pg_url, agent) == refs["new"], at
            assert _pending_and_leftovers(pg_url, agent) == (0, 0), at
            assert [r.path for r in mem.search("topic1xv2", min_score=0)][:1] == ["memory/n001.md"]
        at += step
    return kills


@pytest.mark.parametrize("full", [False, True], ids=["incremental", "model-change"])
def test_a_connection_killed_before_each_statement_of_a_sync(tmp_path: Path, pg_url: str,
                                                             monkeypatch: pytest.MonkeyPatch, full: bool,
                                                             request: pytest.FixtureRequest) -> None:
    stress = request.config.getoption("--run-stress", default=False) or os.environ.get("CLAWMEM_STRESS") == "1"
    kills = _sweep(tmp_path, pg_url, monkeypatch, full, step=1 if stress else 3)
    assert kills >= 5



class SearchWindow:
    """Runs an action inside a search at an exact point of its pipeline, once per :meth:`arm`: just
    before the search calls ``method`` of ``cls`` (the store class it reads through) in this
    thread. ``get_chunk_meta``: the candidate lists are read, their chunks' places not yet;
    ``get_chunks``: the results are ranked, their text not read yet. A sync run there replaces
    the chunks the search holds ids of, every time (no timing involved)."""

    #: The window -> the store method the search calls when it closes.
    METHODS = {"candidates": "get_chunk_meta", "text": "get_chunks"}

    def __init__(self, monkeypatch: pytest.MonkeyPatch, cls: type, window: str) -> None:
        self.fired = 0
        self._action: Any = None
        self._thread = threading.get_ident()
        real = getattr(cls, self.METHODS[window])

        def hooked(store: Any, *args: Any, **kwargs: Any) -> Any:
            action, self._action = self._action, None
            if action is not None and threading.get_ident() == self._thread:
                action()
                self.fired += 1
            return real(store, *args, **kwargs)

        monkeypatch.setattr(cls, self.METHODS[window], hooked)

    def arm(self, action: Any) -> None:
        self._action = action


def _run(procs: list[Any]) -> None:
    outs = [p.communicate(timeout=180) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]


def _one_version(hits: Any, path: str, i: int) -> list[str]:
    """The versions of note ``i`` that the results show, by their text."""
    return [t for t in ("v1", "v2") if any(r.path == path and f"topic{i}x{t}" in r.snippet for r in hits)]


@pytest.mark.parametrize("window", list(SearchWindow.METHODS))
def test_two_processes_sync_one_agent_while_a_third_searches(tmp_path: Path, store_config: dict[str, Any],
                                                             monkeypatch: pytest.MonkeyPatch, window: str) -> None:
    """Both backends: a search stops at ``window``, and two processes sync the agent from one
    version of the notes to the other there (v1 -> v2 -> v1 -> v2), to their end; the search then
    finds the note in exactly one version, with its text, and never fails. Before the fix, the
    search lost the note (candidates gone before their places were read) or returned it without
    text (the chunk gone before its text was read)."""
    n = 4
    ws = notes(tmp_path / "ws", n, tag="v1")
    state = tmp_path / "state"
    with MemoryIndex(ws, config={"store": store_config}, embedder=HashEmbedder(), state_dir=state) as mem:
        mem.sync()
    with MemoryIndex(ws, config={"store": store_config, **QUIET}, embedder=HashEmbedder(), state_dir=state) as mem:
        mem.search("topic0xv1", min_score=0)  # opened and warm: the hook sees only the searches below
        gate = SearchWindow(monkeypatch, type(mem._namespaces.search_store()), window)
        for rounds, tag in enumerate(("v2", "v1", "v2"), 1):
            i = rounds % n

            def sync_there(tag: str = tag) -> None:
                notes(ws, n, tag=tag)
                _run([worker(ws, state, store_config) for _ in range(2)])

            gate.arm(sync_there)
            hits = mem.search(f"topic{i}xv1 topic{i}xv2", max_results=4, min_score=0)
            assert gate.fired == rounds
            assert len(_one_version(hits, f"memory/n{i:03d}.md", i)) == 1, [(r.path, r.snippet[:40]) for r in hits]
            assert all(r.snippet for r in hits)
    with MemoryIndex(ws, config={"store": store_config}, embedder=HashEmbedder(), state_dir=state) as mem:
        assert mem.sync().files_indexed == 0 and mem.status().files == n + 1
        assert all(mem.search(f"topic{i}xv2", min_score=0)[0].path == f"memory/n{i:03d}.md" for i in range(n))


@pytest.mark.parametrize("window", list(SearchWindow.METHODS))
def test_a_shared_namespace_switching_generations_under_a_reader(tmp_path: Path, store_config: dict[str, Any],
                                                                 monkeypatch: pytest.MonkeyPatch, window: str) -> None:
    """Both backends: alice's search of the team's namespace stops at ``window``, and the team's
    process rebuilds its index there (a full reindex: a new generation on PostgreSQL, a swapped
    file on SQLite) from one version of the notes to the other, three times; each search finds
    the note in exactly one version, with its text, and each read returns one version."""
    from clawmem_core.store.shared import SharedView

    n = 4
    team = notes(tmp_path / "team", n, tag="v1")
    state = tmp_path / "state"
    cfg = {"store": store_config, **QUIET}
    with MemoryIndex(team, agent_id="team", config=cfg, embedder=HashEmbedder(), state_dir=state) as mem:
        mem.sync()
    alice_ws = tmp_path / "alice"
    alice_ws.mkdir()
    (alice_ws / "MEMORY.md").write_text("# Alice\n", encoding="utf-8")
    with MemoryIndex(alice_ws, agent_id="alice", config={**cfg, "shared": ["team"]}, embedder=HashEmbedder(),
                     state_dir=state) as alice:
        alice.search("topic3xv1", min_score=0)
        gate = SearchWindow(monkeypatch, SharedView, window)
        for rounds, tag in enumerate(("v2", "v1", "v2"), 1):

            def rebuild_there(tag: str = tag) -> None:
                notes(team, n, tag=tag)
                _run([worker(team, state, store_config, "--agent", "team", "--force")])

            gate.arm(rebuild_there)
            hits = alice.search("topic3xv1 topic3xv2", max_results=4, min_score=0)
            assert gate.fired == rounds
            assert len(_one_version(hits, "@team/memory/n003.md", 3)) == 1, [(r.path, r.snippet[:40]) for r in hits]
            assert all(r.snippet for r in hits)
            text = alice.read("@team/memory/n003.md").text
            assert ("topic3xv1" in text) != ("topic3xv2" in text)
        assert "topic3xv2" in alice.read("@team/memory/n003.md").text
        assert [r.path for r in alice.search("topic3xv2", max_results=1, min_score=0)] == ["@team/memory/n003.md"]
