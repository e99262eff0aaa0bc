"""The command line as a replica (a PostgreSQL store, no workspace) and the default agent id,
the same on both backends; against the real PostgreSQL server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clawmem_core import MemoryIndex
from clawmem_core.cli import main
from clawmem_core.errors import ClawmemError
from clawmem_core.index import workspace_index_name

from .test_index_backends import write

TEAM = {
    "MEMORY.md": "# Team\n\nThe deploy freeze starts on Fridays at noon.\n",
    "memory/2026-01-05.md": "- The staging database password rotates monthly.\n",
}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def replica_env(tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch,
                capsys: pytest.CaptureFixture[str]) -> tuple[Path, str]:
    """The team's workspace indexed into PostgreSQL by the CLI; then an empty directory (no
    workspace) as the current one, and a state directory that must stay empty."""
    monkeypatch.setenv("CLAWMEM_STATE_DIR", str(tmp_path / "state"))
    team = write(tmp_path / "team", TEAM)
    code, out, err = run(capsys, "--workspace", str(team), "--store", pg_url, "--agent", "team", "--provider", "none",
                         "index")
    assert code == 0, err
    assert f"(agent team, workspace {team})" in out
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    return team, pg_url


def test_a_cli_replica_searches_and_reads_from_the_store(replica_env: tuple[Path, str], tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    _, url = replica_env
    common = ["--store", url, "--agent", "team", "--provider", "none"]
    code, out, err = run(capsys, *common, "search", "staging database password")
    assert code == 0, err
    assert out.splitlines()[0].split(" ", 1)[1].startswith("memory/2026-01-05.md:1-")
    assert "replica of agent team" in err and "from the store" in err
    code, out, _ = run(capsys, *common, "search", "--json", "deploy freeze Fridays")
    payload = json.loads(out)
    assert code == 0 and payload["replica"] is True and payload["results"][0]["path"] == "MEMORY.md"
    # get: the store's copy, and it says so
    code, out, err = run(capsys, *common, "get", "MEMORY.md", "--from", "3", "--lines", "1")
    assert code == 0 and out == "The deploy freeze starts on Fridays at noon.\n"
    assert "store's copy" in err
    code, out, _ = run(capsys, *common, "get", "memory/2026-01-05.md", "--json")
    got = json.loads(out)
    assert code == 0 and got["fromIndex"] is True and got["text"] == TEAM["memory/2026-01-05.md"]
    code, _, err = run(capsys, *common, "get", "memory/none.md")
    assert code == 1 and "not exist in agent team's index" in err
    for bad in ("../team/MEMORY.md", "/etc/passwd", "MEMORY.txt"):
        code, out, err = run(capsys, *common, "get", bad)
        assert code == 1 and not out and "not allowed" in err
    code, out, _ = run(capsys, *common, "status")
    assert code == 0 and "Memory Search (agent team)" in out and "Workspace: none (a replica" in out
    assert "Indexed: 2 files" in out
    # the replica left nothing on this machine: no SQLite index, nothing in the current directory
    assert not (tmp_path / "state" / "memory").exists() and not any(Path(".").iterdir())


def test_a_cli_replica_refuses_writes(replica_env: tuple[Path, str], tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    team, url = replica_env
    common = ["--store", url, "--agent", "team", "--provider", "none"]
    for argv in (["write", "a note"], ["write", "--json", "a note"], ["index"], ["index", "--force"], ["watch"]):
        code, out, err = run(capsys, *common, *argv)
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == 1 and not out and len(lines) == 1, (argv, err)
        assert "needs --workspace" in lines[0] and "replica of agent 'team'" in lines[0]
    assert not (team / "memory" / "2026-01-05.md").read_text(encoding="utf-8").count("a note")
    assert sorted(p.name for p in (team / "memory").iterdir()) == ["2026-01-05.md"]
    # the same through a real process: the exit code a script sees
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]),
                                                                      os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-m", "clawmem_core.cli", *common, "write", "a note"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "needs --workspace" in proc.stderr and "Traceback" not in proc.stderr


def test_a_cli_replica_must_name_its_agent(replica_env: tuple[Path, str], capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    _, url = replica_env
    code, out, err = run(capsys, "--store", url, "--provider", "none", "search", "deploy")
    assert code == 1 and not out and "--agent ID" in err and "replica" in err
    # the store from the environment: the same
    monkeypatch.setenv("CLAWMEM_STORE_URL", url)
    code, _, err = run(capsys, "--provider", "none", "get", "MEMORY.md")
    assert code == 1 and "--agent ID" in err
    code, out, err = run(capsys, "--agent", "team", "--provider", "none", "get", "MEMORY.md")
    assert code == 0 and out.startswith("# Team") and "store's copy" in err
    # another agent's replica never reads the team's notes
    # (an agent the store does not hold: one error line, not an empty answer)
    for argv in (["search", "--json", "deploy freeze"], ["get", "MEMORY.md"], ["status"]):
        code, out, err = run(capsys, "--agent", "alice", "--provider", "none", *argv)
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == 1 and not out and len(lines) == 1 and "holds no index of this agent" in lines[0], (argv, err)


def test_the_default_agent_is_the_workspace_s_on_both_backends(tmp_path: Path, store_config: dict[str, Any],
                                                              backend_kind: str) -> None:
    """Without an agent id, each workspace is its own agent (derived from its real path), on
    PostgreSQL as on SQLite; an explicit agent id is kept as it is; a replica must name its agent."""
    a = write(tmp_path / "a", {"MEMORY.md": "- the boat is called Marlin\n"})
    b = write(tmp_path / "b", {"MEMORY.md": "- the cat is called Pixel\n"})
    cfg = {"store": store_config, "provider": "none"}
    with MemoryIndex(a, config=cfg, state_dir=tmp_path / "s") as ma, \
            MemoryIndex(b, config=cfg, state_dir=tmp_path / "s") as mb:
        assert ma.agent_id == workspace_index_name(a) and mb.agent_id == workspace_index_name(b)
        assert ma.status().agent_id == ma.agent_id
        assert [h.path for h in ma.search("Marlin")] == ["MEMORY.md"] and not mb.search("Marlin")
        assert [h.path for h in mb.search("Pixel")] == ["MEMORY.md"] and not ma.search("Pixel")
        assert ma.sessions_dir == tmp_path / "s" / "agents" / "main" / "sessions"  # OpenClaw's layout, unchanged
        if backend_kind == "sqlite":
            assert ma.store_path is not None and ma.store_path.name == f"{ma.agent_id}.sqlite"
    with MemoryIndex(a, agent_id="main", config=cfg, state_dir=tmp_path / "s") as explicit:
        assert explicit.agent_id == "main" and not explicit.search("Pixel")
        if backend_kind == "sqlite":
            assert explicit.store_path == tmp_path / "s" / "memory" / "main.sqlite"
    if backend_kind == "postgres":
        # the derived agent is what a replica names to serve the workspace's memory
        with MemoryIndex(None, agent_id=workspace_index_name(a), config=cfg, state_dir=tmp_path / "r") as rep:
            assert [h.path for h in rep.search("Marlin")] == ["MEMORY.md"]
        with MemoryIndex(None, agent_id="main", config=cfg, state_dir=tmp_path / "r") as main_rep:
            assert [h.path for h in main_rep.search("Marlin")] == ["MEMORY.md"]  # indexed above under "main"
            assert not main_rep.search("Pixel")
        with pytest.raises(ClawmemError, match="must name the agent"):
            MemoryIndex(None, config=cfg, state_dir=tmp_path / "r")


def test_a_cli_replica_serves_mcp(tmp_path: Path, pg_url: str) -> None:
    """`clawmem --store URL --agent team mcp` with no workspace: the tools answer from the store
    (no watcher: there are no files to watch); memory_write, which could only fail, is not offered."""
    pytest.importorskip("mcp")
    import asyncio

    from mcp import Client, StdioServerParameters

    url = pg_url
    team = write(tmp_path / "team", TEAM)
    with MemoryIndex(team, agent_id="team", config={"store": {"url": url}, "provider": "none"},
                     state_dir=tmp_path / "team-state") as mem:
        mem.sync()
    (tmp_path / "elsewhere").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["CLAWMEM_STATE_DIR"] = str(tmp_path / "state")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH")]))
    params = StdioServerParameters(command=sys.executable, env=env, cwd=str(tmp_path / "elsewhere"),
                                   args=["-m", "clawmem_core.cli", "--store", url, "--agent", "team", "--provider",
                                         "none", "mcp"])

    from mcp.shared.exceptions import MCPError

    async def session() -> tuple[set[str], dict[str, Any], dict[str, Any]]:
        async with Client(params, read_timeout_seconds=120) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            found = await client.call_tool("memory_search", {"query": "staging database password"})
            got = await client.call_tool("memory_get", {"path": "MEMORY.md", "from": 3, "lines": 1})
            with pytest.raises(MCPError, match="unknown tool 'memory_write'"):
                await client.call_tool("memory_write", {"text": "a note"})
            return tools, found.structured_content, got.structured_content

    tools, found, got = asyncio.run(session())
    assert tools == {"memory_search", "memory_get"}
    assert found["replica"] is True and found["results"][0]["path"] == "memory/2026-01-05.md"
    assert got["text"] == "The deploy freeze starts on Fridays at noon." and got["fromIndex"] is True
    assert not (tmp_path / "state" / "memory").exists()
