"""Shared read-only namespaces and replicas without the workspace (PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

import pytest

from clawmem_core import MemoryIndex
from clawmem_core.errors import ClawmemError, PathNotAllowedError, ReplicaError
from clawmem_core.memory_write import write_payload
from clawmem_core.testing import HashEmbedder
from clawmem_core.tools import get_payload, search_payload

from .test_index_backends import write


@pytest.fixture
def team_and_alice(tmp_path: Path, pg_url: str) -> tuple[Path, Path, str]:
    team = write(tmp_path / "team", {
        "MEMORY.md": "# Team\n\nThe deploy freeze starts on Fridays at noon.\n",
        "memory/2026-01-05.md": "- The staging database password rotates monthly.\n",
    })
    alice = write(tmp_path / "alice", {"MEMORY.md": "# Alice\n\nAlice prefers green tea.\n"})
    with MemoryIndex(team, agent_id="team", config={"store": {"url": pg_url}}, embedder=HashEmbedder(),
                     state_dir=tmp_path / "s") as mem:
        mem.sync()
    return team, alice, pg_url


def test_an_agent_searches_a_shared_namespace_read_only(tmp_path: Path, team_and_alice: tuple[Path, Path, str]) -> None:
    team, alice_ws, url = team_and_alice
    cfg = {"store": {"url": url}, "shared": ["team"]}
    with MemoryIndex(alice_ws, agent_id="alice", config=cfg, embedder=HashEmbedder(), state_dir=tmp_path / "s") as alice:
        hits = alice.search("deploy freeze Fridays")
        assert hits[0].path == "@team/MEMORY.md" and hits[0].namespace == "team"
        assert hits[0].to_payload()["namespace"] == "team"
        assert "@team/MEMORY.md#L" in hits[0].citation
        own = alice.search("green tea")
        assert own[0].path == "MEMORY.md" and own[0].namespace is None
        # memory_get reads the namespace's copy; the payload says so
        got = alice.read("@team/MEMORY.md", from_line=3, lines=1)
        assert got.text == "The deploy freeze starts on Fridays at noon." and got.from_index
        assert get_payload(alice, "@team/MEMORY.md")["fromIndex"] is True
        assert alice.read("@team/memory/none.md").missing
        for bad in ("@other/MEMORY.md", "@team/../alice/MEMORY.md", "@team/x.txt"):
            with pytest.raises(PathNotAllowedError):
                alice.read(bad)
        # the team index is never written by alice's syncs
        alice.sync(force=True)
    with MemoryIndex(team, agent_id="team", config={"store": {"url": url}}, embedder=HashEmbedder(),
                     state_dir=tmp_path / "s") as mem:
        assert mem.status().files == 2 and mem.sync().files_indexed == 0


def test_without_shared_config_the_team_is_invisible(tmp_path: Path, team_and_alice: tuple[Path, Path, str]) -> None:
    _, alice_ws, url = team_and_alice
    with MemoryIndex(alice_ws, agent_id="alice", config={"store": {"url": url}}, embedder=HashEmbedder(),
                     state_dir=tmp_path / "s") as alice:
        assert all(not h.path.startswith("@") for h in alice.search("deploy freeze Fridays", min_score=0))
        with pytest.raises(PathNotAllowedError):
            alice.read("@team/MEMORY.md")


def test_shared_namespaces_need_a_server_store(tmp_path: Path) -> None:
    ws = write(tmp_path / "ws", {"MEMORY.md": "- x\n"})
    with MemoryIndex(ws, config={"shared": ["team"], "provider": "none"}, state_dir=tmp_path / "s") as mem:
        with pytest.raises(ClawmemError):
            mem.search("x")


def test_a_replica_serves_search_and_reads_without_the_workspace(tmp_path: Path,
                                                                  team_and_alice: tuple[Path, Path, str]) -> None:
    team, _, url = team_and_alice
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
        assert conn.execute("SELECT to_regclass('clawmem_chunks_hnsw_16')").fetchone()[0] is None
    approx = PostgresBackend(pg_url, "vec", exact_below=100).open()
    approx.replace_files([(FileRow("memory/v.md", "memory", "h", 1, 1), rows)])  # crosses the threshold: builds HNSW
    with approx.backend.connection() as conn:
        assert conn.execute("SELECT to_regclass('clawmem_chunks_hnsw_16')").fetchone()[0] is not None
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
        scans = conn.execute("SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelname = 'clawmem_chunks_hnsw_16'")
        assert scans.fetchone()[0] >= 20
