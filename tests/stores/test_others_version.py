"""``Store.others_version()``: a token that moves when anyone but this handle commits to the index
(another handle of the process, another process, another host's index of the same agent) and
stays as it is through the handle's own commits. A search trusts the change journal through its
own vector phase with it, so a write by someone else must always move it: through interleaved
and concurrent writers, rolled-back transactions whose data versions are taken again by another
writer, connections killed mid-write, and agent ids of any form."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import pytest

from clawmem_core.errors import StoreError
from clawmem_core.store.base import Store

from .conftest import BackendFactory, chunk, file

ODD_AGENTS = ["main", "团队/记忆 'x'", "a\\b%_*?[]", "Team", "team"]


def _write(store: Store, i: int, text: str = "绿茶 green tea") -> None:
    """A file of one chunk, written for keyword search with its vector to come."""
    row = replace(chunk(f"memory/{i}.md", 0, f"{text} {i}"), pending=True)
    store.replace_files([(file(f"memory/{i}.md", f"{text} {i}"), [row])])


def _own_writes(store: Store) -> None:
    """One of each kind of write transaction a store handle makes."""
    _write(store, 1)
    _write(store, 2, "部署账单迁移")
    store.touch_files([file("memory/1.md", "绿茶 green tea 1", mtime=2000)])
    pending = store.pending_chunks(10)
    store.set_vectors([(r.id, [1.0, 0.5, 0.25], []) for _, r in pending])
    store.set_value("last_scan", "1")
    store.delete_files("memory", ["memory/2.md"])


def test_own_commits_keep_it_and_another_handles_move_it(make_backend: BackendFactory) -> None:
    mine = make_backend("main").open()
    other = make_backend("main").open()
    try:
        _write(mine, 0)
        mark, version = mine.others_version(), mine.data_version()
        _own_writes(mine)
        assert mine.data_version() != version  # the handle's own commits are commits
        assert mine.others_version() == mark  # but not another's
        _write(other, 7, "另一个写入者")
        moved = mine.others_version()
        assert moved != mark
        _write(mine, 8)
        assert mine.others_version() == moved
        other.delete_files("memory", ["memory/7.md"])
        assert mine.others_version() != moved
    finally:
        mine.close()
        other.close()


@pytest.fixture
def pg(backend_kind: str) -> None:
    if backend_kind != "postgres":
        pytest.skip("PostgreSQL only")


@pytest.mark.parametrize("agent", ODD_AGENTS)
def test_postgres_agents_of_any_name(pg: None, make_backend: BackendFactory, agent: str) -> None:
    """The token is the agent's: another agent's writes (even one whose name differs only by case
    or matches as a pattern) leave it, another handle on the same agent moves it."""
    mine = make_backend(agent).open()
    neighbours = [make_backend(a).open() for a in ODD_AGENTS if a != agent]
    same = make_backend(agent).open()
    _write(mine, 0)
    mark = mine.others_version()
    _own_writes(mine)
    for n in neighbours:
        _write(n, 3, "邻居")
    assert mine.others_version() == mark
    _write(same, 4)
    assert mine.others_version() != mark


@pytest.mark.parametrize("kept", [None, 4])
def test_postgres_concurrent_writers_are_always_seen(pg: None, make_backend: BackendFactory,
                                                     monkeypatch: pytest.MonkeyPatch, kept: int | None) -> None:
    """The handle's own writes run without pause in another thread (as the vector phase does while
    searches read the token): every write by another handle, once committed, has moved the token
    from every value read before it (also when the handle keeps few of its own versions)."""
    if kept is not None:
        monkeypatch.setattr("clawmem_core.store.postgres.writes._OWN_KEPT", kept)
    mine = make_backend("main").open()
    other = make_backend("main").open()
    _write(mine, 0)
    stop = threading.Event()
    errors: list[BaseException] = []

    def churn() -> None:
        i = 0
        try:
            while not stop.is_set():
                i += 1
                mine.set_value("tick", str(i))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    t = threading.Thread(target=churn)
    t.start()
    try:
        for i in range(40):
            seen = {mine.others_version() for _ in range(3)}
            other.set_value("other", str(i))
            assert mine.others_version() not in seen, i
    finally:
        stop.set()
        t.join()
    assert not errors
    still = mine.others_version()  # and with only its own writes since, it holds
    for i in range(5):
        mine.set_value("tick", f"again {i}")
    assert mine.others_version() == still


def _cut(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                     "WHERE datname = current_database() AND pid <> pg_backend_pid()")


def test_postgres_a_write_rolled_back_is_not_the_handles(pg: None, make_backend: BackendFactory, pg_url: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The handle's transaction has bumped the data version when its connection is killed: it
    rolls back, and the next writer (another handle) commits that very version. The token moves."""
    from clawmem_core.store.postgres import PostgresStore

    mine = make_backend("main").open()
    other = make_backend("main").open()
    _write(mine, 0)
    mark = mine.others_version()
    real = PostgresStore._chunk_values
    cuts = [1]

    def cut_then(self: PostgresStore, *args: Any) -> Any:
        if cuts and self is mine:  # inside the write transaction, after its version bump
            cuts.pop()
            _cut(pg_url)
        return real(self, *args)

    monkeypatch.setattr(PostgresStore, "_chunk_values", cut_then)
    with pytest.raises(StoreError):
        _write(mine, 1, "被中断的写入")
    monkeypatch.undo()
    assert mine.others_version() == mark  # nothing committed
    _write(other, 2, "另一个写入者")  # takes the version the killed transaction had
    assert mine.others_version() != mark
    assert set(mine.file_states("memory")) == {"memory/0.md", "memory/2.md"}


def test_postgres_a_commit_of_unknown_outcome_counts_as_anothers(pg: None, make_backend: BackendFactory, pg_url: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A vector write whose connection is lost as its result comes back may have committed: it is
    not counted as the handle's (a search walks once more), never the other way round. The
    vector phase's block carries on over a new connection."""
    import psycopg

    mine = make_backend("main").open()
    _write(mine, 0, "第一条 first")
    _write(mine, 1, "第二条 second")
    mark = mine.others_version()
    pending = [r for _, r in mine.pending_chunks(10)]
    real = psycopg.Connection.pipeline
    lost = [1]

    def pipeline_then_lose(conn: Any, *a: Any, **k: Any) -> Any:
        import contextlib

        @contextlib.contextmanager
        def run() -> Any:
            with real(conn, *a, **k) as p:
                yield p
            if lost and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                # committed; the connection goes before the caller hears of it
                lost.pop()
                conn.close()
                raise psycopg.OperationalError("the connection was lost")

        return run()

    with mine.writing():
        monkeypatch.setattr(psycopg.Connection, "pipeline", pipeline_then_lose)
        done = mine.set_vectors([(pending[0].id, [1.0, 0.0], [])])  # run again: nothing left to complete
        monkeypatch.undo()
        assert done == 0 and mine.vector_counts().done == 1
        after = mine.others_version()
        assert after != mark  # the commit it could not confirm is counted as another's
        mine.set_vectors([(pending[1].id, [0.0, 1.0], [])])
        assert mine.others_version() == after and mine.vector_counts().done == 2


def test_postgres_rows_set_aside_move_every_handles_token(pg: None, make_backend: BackendFactory) -> None:
    """A damaged index set aside (its rows dropped for a rebuild) is a change every other handle of
    the agent must see: their caches and their trust in the change journal rest on the token."""
    backend = make_backend("main")
    writer = backend.open()
    reader = make_backend("main").open()
    try:
        _write(writer, 0)
        mark, version = reader.others_version(), reader.data_version()
        backend.set_aside(StoreError("damaged"))
        assert reader.data_version() != version
        assert reader.others_version() != mark
        assert reader.keyword_search(["green"], 5) == []
    finally:
        writer.close()
        reader.close()
