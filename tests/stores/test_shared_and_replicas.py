"""Shared read-only namespaces (SQLite and PostgreSQL) and replicas without the workspace
(PostgreSQL)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from clawmem_core import MemoryIndex
from clawmem_core.errors import ClawmemError, ConfigError, PathNotAllowedError, ReplicaError
from clawmem_core.memory_write import write_payload
from clawmem_core.testing import HashEmbedder
from clawmem_core.tools import get_payload, search_payload

from .test_index_backends import write


TEAM = {
    "MEMORY.md": "# Team\n\nThe deploy freeze starts on Fridays at noon.\n",
    "memory/2026-01-05.md": "- The staging database password rotates monthly.\n",
}


@pytest.fixture
def team_and_alice(tmp_path: Path, store_config: dict[str, Any]) -> tuple[Path, Path, dict[str, Any]]:
    """The team's workspace indexed under agent ``team`` (SQLite: its own index file in the same
    state directory; PostgreSQL: its rows in the same database), and alice's workspace."""
    team = write(tmp_path / "team", TEAM)
    alice = write(tmp_path / "alice", {"MEMORY.md": "# Alice\n\nAlice prefers green tea.\n"})
    with MemoryIndex(team, agent_id="team", config={"store": store_config}, embedder=HashEmbedder(),
                     state_dir=tmp_path / "s") as mem:
        mem.sync()
    return team, alice, store_config


def _alice(ws: Path, tmp_path: Path, store: dict[str, Any], shared: list[str] | None = None, **kw: Any) -> MemoryIndex:
    cfg = {"store": store, "shared": ["team"] if shared is None else shared}
    return MemoryIndex(ws, agent_id="alice", config=cfg, embedder=HashEmbedder(), state_dir=tmp_path / "s", **kw)


def _team_file(tmp_path: Path, store: dict[str, Any]) -> bytes | None:
    """The team's SQLite index file's bytes (None on PostgreSQL)."""
    return None if store else (tmp_path / "s" / "memory" / "team.sqlite").read_bytes()


def test_an_agent_searches_a_shared_namespace_read_only(tmp_path: Path, backend_kind: str,
                                                         team_and_alice: tuple[Path, Path, dict[str, Any]]) -> None:
    team, alice_ws, store = team_and_alice
    before = _team_file(tmp_path, store)
    with _alice(alice_ws, tmp_path, store) as alice:
        hits = alice.search("deploy freeze Fridays")
        assert hits[0].path == "@team/MEMORY.md" and hits[0].namespace == "team"
        assert hits[0].to_payload()["namespace"] == "team"
        assert "@team/MEMORY.md#L" in hits[0].citation
        own = alice.search("green tea")
        assert own[0].path == "MEMORY.md" and own[0].namespace is None
        # memory_get reads the namespace's file: PostgreSQL's copy (the payload says so), or on
        # SQLite (no copies) the team's workspace, for a file the team's index holds
        got = alice.read("@team/MEMORY.md", from_line=3, lines=1)
        assert got.text == "The deploy freeze starts on Fridays at noon." and got.path == "@team/MEMORY.md"
        assert got.from_index == (backend_kind == "postgres")
        assert get_payload(alice, "@team/MEMORY.md").get("fromIndex", False) == (backend_kind == "postgres")
        assert alice.read("@team/memory/none.md").missing
        # the team index is never written by alice's syncs
        alice.sync(force=True)
        assert alice.search("deploy freeze Fridays")[0].path == "@team/MEMORY.md"
    assert _team_file(tmp_path, store) == before
    with MemoryIndex(team, agent_id="team", config={"store": store}, embedder=HashEmbedder(),
                     state_dir=tmp_path / "s") as mem:
        assert mem.status().files == 2 and mem.sync().files_indexed == 0


HOSTILE_PATHS = [
    "@other/MEMORY.md",                      # not a shared namespace of alice
    "@bob/MEMORY.md",                        # an agent that exists, not listed in shared
    "@alice/MEMORY.md",                      # the agent's own id as a namespace
    "@team/../alice/MEMORY.md",
    "@team/../../etc/passwd.md",
    "@team/memory/../../alice/MEMORY.md",
    "@team/..\\alice\\MEMORY.md",
    "@team/x.txt",
    "@team/MEMORY.md/",
    "@t\u0435am/MEMORY.md",                   # Cyrillic e
    "@TEAM/MEMORY.md",
    "@team\u2044MEMORY.md",                   # fraction slash, not a slash
    "\uff20team/MEMORY.md",                   # fullwidth at sign
    "@team/MEMORY.md\x00.md",
]


@pytest.mark.parametrize("bad", HOSTILE_PATHS)
def test_hostile_namespace_paths_are_refused(tmp_path: Path, team_and_alice: tuple[Path, Path, dict[str, Any]],
                                             bad: str) -> None:
    team, alice_ws, store = team_and_alice
    write(tmp_path / "bob", {"MEMORY.md": "- Bob's private note\n"})
    with MemoryIndex(tmp_path / "bob", agent_id="bob", config={"store": store}, embedder=HashEmbedder(),
                     state_dir=tmp_path / "s") as bob:
        bob.sync()
    with _alice(alice_ws, tmp_path, store) as alice:
        try:
            got = alice.read(bad)
        except ClawmemError:
            return
        # not refused: then nothing but alice's own memory or an empty, missing read
        assert got.missing or got.text == "# Alice\n\nAlice prefers green tea.\n", got


@pytest.mark.parametrize("outside", ["../secret.md", "/abs"])
def test_a_shared_namespace_reads_only_what_its_index_holds(tmp_path: Path, outside: str,
                                                            team_and_alice: tuple[Path, Path, dict[str, Any]]) -> None:
    """A file in the team's workspace that the team's index does not hold (written after its
    sync, or reached by an absolute path) is not readable through the namespace."""
    team, alice_ws, store = team_and_alice
    (team / "memory" / "later.md").write_text("- written after the team's last sync\n", encoding="utf-8")
    (tmp_path / "secret.md").write_text("- outside every workspace\n", encoding="utf-8")
    target = str(tmp_path / "secret.md") if outside == "/abs" else outside
    with _alice(alice_ws, tmp_path, store) as alice:
        assert alice.read("@team/memory/later.md").missing
        try:
            got = alice.read("@team/" + target)
        except PathNotAllowedError:
            pass
        else:  # "@team//abs/path" is the namespace's relative path "abs/path": never indexed
            assert got.missing and not got.text
        with pytest.raises(PathNotAllowedError):
            alice.read(target)


def test_only_the_listed_namespaces_are_searched(tmp_path: Path, team_and_alice: tuple[Path, Path, dict[str, Any]]) -> None:
    _, alice_ws, store = team_and_alice
    write(tmp_path / "bob", {"MEMORY.md": "- Bob says the deploy freeze is a myth.\n"})
    with MemoryIndex(tmp_path / "bob", agent_id="bob", config={"store": store}, embedder=HashEmbedder(),
                     state_dir=tmp_path / "s") as bob:
        bob.sync()
    with _alice(alice_ws, tmp_path, store) as alice:
        paths = [h.path for h in alice.search("deploy freeze myth Fridays", min_score=0)]
        assert "@team/MEMORY.md" in paths and not any("bob" in p or "myth" in p for p in paths)
        assert all(p.startswith("@team/") or not p.startswith("@") for p in paths)
    # a look-alike name (Cyrillic e) is another namespace: nothing of the team's, and it says why
    with _alice(alice_ws, tmp_path, store, shared=["t\u0435am"]) as alice:
        hits = alice.search("deploy freeze Fridays", min_score=0)
        assert not any(h.path.startswith("@") for h in hits)
        assert "t\u0435am" in search_payload(alice, "deploy freeze")["sharedUnavailable"]


def test_without_shared_config_the_team_is_invisible(tmp_path: Path,
                                                     team_and_alice: tuple[Path, Path, dict[str, Any]]) -> None:
    _, alice_ws, store = team_and_alice
    with _alice(alice_ws, tmp_path, store, shared=[]) as alice:
        assert all(not h.path.startswith("@") for h in alice.search("deploy freeze Fridays", min_score=0))
        with pytest.raises(PathNotAllowedError):
            alice.read("@team/MEMORY.md")


def test_a_shared_namespace_not_indexed_yet_is_empty_with_a_reason(tmp_path: Path, store_config: dict[str, Any]) -> None:
    """Searched as empty (the agent's own memory still answers), the payload and status say why,
    and the namespace is picked up once its agent has indexed it."""
    alice_ws = write(tmp_path / "alice", {"MEMORY.md": "# Alice\n\nThe deploy freeze is on Fridays, says Alice.\n"})
    with _alice(alice_ws, tmp_path, store_config) as alice:
        payload = search_payload(alice, "deploy freeze")
        assert [r["path"] for r in payload["results"]] == ["MEMORY.md"]
        assert payload["sharedUnavailable"] == {"team": "not indexed yet: its agent has not indexed its workspace"}
        assert any("shared namespace 'team'" in i for i in alice.status().issues)
        assert alice.read("@team/MEMORY.md").missing
        if not store_config:
            assert not (tmp_path / "s" / "memory" / "team.sqlite").exists()  # never created by a reader
        team = write(tmp_path / "team", TEAM)
        with MemoryIndex(team, agent_id="team", config={"store": store_config}, embedder=HashEmbedder(),
                         state_dir=tmp_path / "s") as mem:
            mem.sync()
        payload = search_payload(alice, "deploy freeze Fridays noon")
        assert "@team/MEMORY.md" in [r["path"] for r in payload["results"]] and "sharedUnavailable" not in payload
        assert not any("shared namespace" in i for i in alice.status().issues)


def test_a_shared_namespace_rebuilt_by_its_owner_while_read(tmp_path: Path,
                                                           team_and_alice: tuple[Path, Path, dict[str, Any]]) -> None:
    """The team rebuilds its index (a full reindex, swapped in atomically) again and again while
    alice searches it: every search sees the old or the new team memory, never none, never an error."""
    import threading

    team, alice_ws, store = team_and_alice
    errors: list[BaseException] = []
    done = threading.Event()

    def rebuild() -> None:
        try:
            with MemoryIndex(team, agent_id="team", config={"store": store}, embedder=HashEmbedder(),
                             state_dir=tmp_path / "s") as mem:
                for i in range(4):
                    (team / "memory" / "2026-01-05.md").write_text(f"- rebuild {i}\n", encoding="utf-8")
                    mem.sync(force=True)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            done.set()

    with _alice(alice_ws, tmp_path, store) as alice:
        thread = threading.Thread(target=rebuild)
        thread.start()
        searches = 0
        while not done.is_set() or searches < 3:
            hits = alice.search("deploy freeze Fridays", min_score=0)
            assert hits and hits[0].path == "@team/MEMORY.md"
            assert alice.read("@team/MEMORY.md", from_line=3, lines=1).text.startswith("The deploy freeze")
            searches += 1
        thread.join()
        assert not errors, errors
        assert alice.read("@team/memory/2026-01-05.md").text == "- rebuild 3\n"
        assert alice.search("rebuild", min_score=0)[0].path == "@team/memory/2026-01-05.md"


def test_a_shared_sqlite_index_replaced_by_its_owner_is_reopened(tmp_path: Path) -> None:
    """The team's index file removed (set aside) and made again: alice's handle on the old file
    is dropped, the new one opened."""
    team, alice_ws, store = _team_and_alice_sqlite(tmp_path)
    index = tmp_path / "s" / "memory" / "team.sqlite"
    with _alice(alice_ws, tmp_path, store) as alice:
        assert alice.search("deploy freeze Fridays")[0].path == "@team/MEMORY.md"
        for suffix in ("", "-wal", "-shm"):
            if Path(f"{index}{suffix}").exists():
                os.remove(f"{index}{suffix}")
        assert not any(h.path.startswith("@") for h in alice.search("deploy freeze Fridays", min_score=0))
        (team / "MEMORY.md").write_text("# Team\n\nThe deploy freeze moved to Thursdays.\n", encoding="utf-8")
        with MemoryIndex(team, agent_id="team", embedder=HashEmbedder(), state_dir=tmp_path / "s") as mem:
            mem.sync()
        assert alice.search("deploy freeze Thursdays")[0].path == "@team/MEMORY.md"


def _team_and_alice_sqlite(tmp_path: Path) -> tuple[Path, Path, dict[str, Any]]:
    team = write(tmp_path / "team", TEAM)
    alice = write(tmp_path / "alice", {"MEMORY.md": "# Alice\n\nAlice prefers green tea.\n"})
    with MemoryIndex(team, agent_id="team", embedder=HashEmbedder(), state_dir=tmp_path / "s") as mem:
        mem.sync()
    return team, alice, {}


def test_a_shared_sqlite_namespace_needs_per_agent_index_files(tmp_path: Path) -> None:
    ws = write(tmp_path / "ws", {"MEMORY.md": "- x\n"})
    with MemoryIndex(ws, config={"shared": ["team"], "provider": "none", "store": {"path": str(tmp_path / "one.db")}},
                     state_dir=tmp_path / "s") as mem:
        with pytest.raises(ConfigError):
            mem.search("x")


def test_a_damaged_shared_sqlite_index_is_reported_not_rebuilt(tmp_path: Path) -> None:
    """A shared index that is not a SQLite file: alice's search answers from her own memory and
    says why; the file is neither set aside nor rewritten (it is not alice's)."""
    team, alice_ws, store = _team_and_alice_sqlite(tmp_path)
    index = tmp_path / "s" / "memory" / "team.sqlite"
    for suffix in ("-wal", "-shm"):
        if Path(f"{index}{suffix}").exists():
            os.remove(f"{index}{suffix}")
    index.write_bytes(b"not a database" * 100)
    with _alice(alice_ws, tmp_path, store) as alice:
        payload = search_payload(alice, "green tea")
        assert [r["path"] for r in payload["results"]] == ["MEMORY.md"]
        assert payload["sharedUnavailable"]["team"].startswith("its index cannot be read")
    assert index.read_bytes() == b"not a database" * 100


@pytest.fixture
def pg_team(tmp_path: Path, pg_url: str) -> tuple[Path, str]:
    team = write(tmp_path / "team", TEAM)
    with MemoryIndex(team, agent_id="team", config={"store": {"url": pg_url}}, embedder=HashEmbedder(),
                     state_dir=tmp_path / "s") as mem:
        mem.sync()
    return team, pg_url


def test_a_replica_serves_search_and_reads_without_the_workspace(tmp_path: Path, pg_team: tuple[Path, str]) -> None:
    team, url = pg_team
    cfg = {"store": {"url": url}}
    with MemoryIndex(None, agent_id="team", config=cfg, embedder=HashEmbedder(), state_dir=tmp_path / "r") as rep:
        assert rep.replica and rep.workspace is None
        payload = search_payload(rep, "staging database password")
        assert payload["replica"] is True
        assert payload["results"][0]["path"] == "memory/2026-01-05.md"
        got = get_payload(rep, "memory/2026-01-05.md")
        assert got["text"] == "- The staging database password rotates monthly.\n" and got["fromIndex"] is True
        assert get_payload(rep, "memory/missing.md")["missing"] is True
        for bad in ("../x.md", "/etc/passwd.md", "MEMORY.txt"):
            with pytest.raises(PathNotAllowedError):
                rep.read(bad)
        refused = write_payload(rep, "a new note")
        assert refused["disabled"] is True and "replica" in refused["error"]
        with pytest.raises(ReplicaError):
            rep.write("a new note")
        with pytest.raises(ReplicaError):
            rep.sync()
        st = rep.status()
        assert st.files == 2 and not st.dirty and "replica" in st.issues[0]
    # a change synced by the host with the files shows on the replica
    (team / "MEMORY.md").write_text("# Team\n\nThe deploy freeze moved to Thursdays.\n", encoding="utf-8")
    with MemoryIndex(team, agent_id="team", config=cfg, embedder=HashEmbedder(), state_dir=tmp_path / "s") as mem:
        mem.sync()
    with MemoryIndex(None, agent_id="team", config=cfg, embedder=HashEmbedder(), state_dir=tmp_path / "r") as rep:
        assert "Thursdays" in rep.read("MEMORY.md").text
        assert rep.search("deploy freeze moved to Thursdays", min_score=0)[0].path == "MEMORY.md"


def test_a_replica_needs_a_server_store(tmp_path: Path) -> None:
    from clawmem_core.errors import WorkspaceError

    with pytest.raises(WorkspaceError):
        MemoryIndex(None, state_dir=tmp_path)


def test_hnsw_above_the_exact_threshold(pg_url: str) -> None:
    import random

    from clawmem_core.store.base import ChunkRow, FileRow
    from clawmem_core.store.postgres import PostgresBackend

    rng = random.Random(3)

    def vec() -> list[float]:
        v = [rng.gauss(0, 1) for _ in range(16)]
        n = sum(x * x for x in v) ** 0.5
        return [x / n for x in v]

    rows = [ChunkRow(f"c{i}", "memory/v.md", "memory", i, i, f"h{i}", "m", f"text {i}", vec()) for i in range(300)]
    exact = PostgresBackend(pg_url, "vec", exact_below=10**9).open()
    exact.replace_files([(FileRow("memory/v.md", "memory", "h", 1, 1), rows)])
    with exact.backend.connection() as conn:
        assert conn.execute("SELECT to_regclass('clawmem_chunks_hnsw_half_16')").fetchone()[0] is None
    approx = PostgresBackend(pg_url, "vec", exact_below=100).open()
    approx.replace_files([(FileRow("memory/v.md", "memory", "h", 1, 1), rows)])  # crosses the threshold: builds HNSW
    with approx.backend.connection() as conn:
        assert conn.execute("SELECT to_regclass('clawmem_chunks_hnsw_half_16')").fetchone()[0] is not None
    other = PostgresBackend(pg_url, "other-agent", exact_below=100).open()
    other.replace_files([(FileRow("memory/o.md", "memory", "h", 1, 1),
                          [ChunkRow(f"o{i}", "memory/o.md", "memory", i, i, f"o{i}", "m", "x", vec()) for i in range(50)])])
    agree = 0
    for _ in range(20):
        q = vec()
        want = [i for i, _ in exact.vector_search(q, 5)]
        got = approx.vector_search(q, 5)
        assert all(i.startswith("c") for i, _ in got)  # never another agent's rows
        assert [s for _, s in got] == sorted((s for _, s in got), reverse=True)
        agree += len(set(want) & {i for i, _ in got})
    assert agree >= 0.9 * 20 * 5
    with approx.backend.connection() as conn:  # the searches went through the HNSW index
        conn.execute("SELECT pg_stat_force_next_flush()")
        scans = conn.execute("SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelname = 'clawmem_chunks_hnsw_half_16'")
        assert scans.fetchone()[0] >= 20


def test_a_shared_sqlite_index_damaged_under_an_open_reader(tmp_path: Path) -> None:
    """The team's index damaged (every page after the first overwritten) while alice holds it
    open: her searches keep answering from her own memory, her own index is not set aside, and
    the team's file is not touched by her."""
    team, alice_ws, store = _team_and_alice_sqlite(tmp_path)
    index = tmp_path / "s" / "memory" / "team.sqlite"
    with _alice(alice_ws, tmp_path, store) as alice:
        assert alice.search("deploy freeze Fridays")[0].path == "@team/MEMORY.md"
        data = bytearray(index.read_bytes())
        page = int.from_bytes(data[16:18], "big")
        data[page:] = b"\xa5" * (len(data) - page)
        index.write_bytes(bytes(data))
        damaged = index.read_bytes()
        for query in ("green tea", "deploy freeze Fridays", "staging database password", "Alice prefers"):
            hits = alice.search(query, min_score=0)
            assert all(not h.path.startswith("@") or h.path.startswith("@team/") for h in hits)
        assert alice.search("green tea")[0].path == "MEMORY.md"
        payload = search_payload(alice, "staging password rotates monthly")
        assert not payload.get("error")
        assert payload["sharedUnavailable"] == {"team": "its index cannot be read (see clawmem status)"}
        assert any("shared namespace 'team'" in i for i in alice.status().issues)
        assert alice.read("MEMORY.md").text.startswith("# Alice")
    assert index.read_bytes() == damaged
    assert not list((tmp_path / "s" / "memory").glob("alice.sqlite.corrupt-*"))


class _WithheldVectors(HashEmbedder):
    """Embeds queries at once and documents only once :attr:`released` is set: the agent's
    searches stay keyword-only meanwhile (its vector phase is slow, as under load)."""

    def __init__(self) -> None:
        import threading

        super().__init__()
        self.released = threading.Event()

    def _embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.released.wait(30)
        return super()._embed_documents(texts)


def _damage_after_first_page(index: Path) -> bytes:
    """Every page after the first overwritten in place (same inode, same size, same header)."""
    data = bytearray(index.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    data[page:] = b"\xa5" * (len(data) - page)
    index.write_bytes(bytes(data))
    return bytes(data)


@pytest.mark.parametrize("vectors", ["withheld", "made"])
@pytest.mark.parametrize("how", ["sync", "async"])
def test_a_shared_index_damaged_in_place_is_reported_whatever_path_the_search_takes(
        tmp_path: Path, vectors: str, how: str) -> None:
    """SQLite keeps serving the pages a connection cached while the file's header is unchanged,
    and the handle's own caches hold while ``PRAGMA data_version`` does: the team's index damaged
    in place behind alice's open handle was noticed only by a search that read an uncached page
    (the vector table, once alice's own vectors existed). A keyword-only search (her vector phase
    not done yet, as in a loaded run) answered from the damaged index and said nothing. Every
    search after the damage must report it the same way."""
    import asyncio

    from clawmem_core.tools import asearch_payload

    team, alice_ws, store = _team_and_alice_sqlite(tmp_path)
    index = tmp_path / "s" / "memory" / "team.sqlite"
    emb = _WithheldVectors()
    if vectors == "made":
        emb.released.set()
    cfg = {"store": store, "shared": ["team"]}
    with MemoryIndex(alice_ws, agent_id="alice", config=cfg, embedder=emb, state_dir=tmp_path / "s") as alice:
        try:
            if vectors == "made":
                alice.sync()
            hits = alice.search("staging database password")
            assert hits[0].path == "@team/memory/2026-01-05.md"
            done, total = hits.vectors["done"], hits.vectors["total"]  # type: ignore[index]
            assert (done, total) == ((total, total) if vectors == "made" else (0, total)) and total > 0
            damaged = _damage_after_first_page(index)
            for query in ("staging database password", "deploy freeze Fridays", "green tea", "the"):
                if how == "sync":
                    payload = search_payload(alice, query, min_score=0)
                else:
                    payload = asyncio.run(asearch_payload(alice, query, min_score=0))
                assert not payload.get("error")
                assert payload["sharedUnavailable"] == {"team": "its index cannot be read (see clawmem status)"}, query
                assert not any(r["path"].startswith("@") for r in payload["results"]), query
            assert any("shared namespace 'team'" in i for i in alice.status().issues)
        finally:
            emb.released.set()
    assert index.read_bytes() == damaged
    assert not list((tmp_path / "s" / "memory").glob("alice.sqlite.corrupt-*"))


def test_a_shared_index_its_owner_writes_is_followed_without_piling_up_handles(tmp_path: Path) -> None:
    """The owner's commits, and its checkpoints into the file alice holds open (the file changes on
    disk), are seen by alice's next search; the read-only handle reopens in place rather than being
    set aside each time."""
    import apsw

    team, alice_ws, store = _team_and_alice_sqlite(tmp_path)
    index = tmp_path / "s" / "memory" / "team.sqlite"
    with _alice(alice_ws, tmp_path, store) as alice:
        assert alice.search("deploy freeze Fridays")[0].path == "@team/MEMORY.md"
        handle = alice._namespaces.handles["team"]  # type: ignore[index]
        opens = handle._opens  # type: ignore[attr-defined]
        for day in ("Mondays", "Tuesdays", "Wednesdays"):
            (team / "MEMORY.md").write_text(f"# Team\n\nThe deploy freeze moved to {day}.\n", encoding="utf-8")
            with MemoryIndex(team, agent_id="team", embedder=HashEmbedder(), state_dir=tmp_path / "s") as mem:
                mem.sync()
            before = index.stat()
            checkpoint = apsw.Connection(str(index))  # the owner's checkpoint (automatic in a longer sync)
            checkpoint.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            checkpoint.close()
            assert index.stat().st_mtime_ns != before.st_mtime_ns  # the file alice holds open changed
            payload = search_payload(alice, f"deploy freeze {day}", min_score=0)
            assert payload["results"][0]["path"] == "@team/MEMORY.md"
            assert day in payload["results"][0]["snippet"]
            assert "sharedUnavailable" not in payload
        assert alice._namespaces.handles["team"] is handle and handle._opens == opens + 3  # type: ignore[index,attr-defined]
        assert len(alice._stores.retired) == 0
