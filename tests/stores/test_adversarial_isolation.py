"""Adversarial isolation on both backends: hostile agent ids, namespace names and paths, through
``search``, ``read``, ``search.shared``, the tool payloads, the LangChain and LlamaIndex tools and
the MCP server. Agent A never sees B's data nor a namespace it was not given."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from clawmem_core import MemoryIndex
from clawmem_core.errors import ConfigError, PathNotAllowedError
from clawmem_core.testing import HashEmbedder
from clawmem_core.tools import get_payload, search_payload

from .test_index_backends import write

#: Agent ids a deployment may derive from user input: SQL and LIKE / glob metacharacters, case and
#: look-alike variants of "team", trailing spaces and dots, CJK, a long id.
HOSTILE_AGENTS = ["team", "Team", "team ", "team.", "t\u0435am", "t_am", "te%", "%", "*", "[st]eam",
                  "x'; DROP TABLE clawmem_chunks; --", "...", "代理人", "b" * 200]


def secret(i: int) -> str:
    return f"zqsecret{i}word"


@pytest.fixture
def agents(tmp_path: Path, store_config: dict[str, Any]) -> Iterator[dict[str, MemoryIndex]]:
    """One workspace per hostile agent id, each with its own secret; alice shares "team"."""
    out: dict[str, MemoryIndex] = {}
    cfg = {"store": store_config, "provider": "none"}
    try:
        for i, agent in enumerate(HOSTILE_AGENTS):
            ws = write(tmp_path / f"ws{i}", {
                "MEMORY.md": f"# Notes of {i}\n\nThe code is {secret(i)} 机密{i}号.\n",
                f"memory/only-{i}.md": f"- private {secret(i)}\n",
            })
            out[agent] = MemoryIndex(ws, agent_id=agent, config=cfg, state_dir=tmp_path / "state")
            out[agent].sync()
        ws = write(tmp_path / "alice", {"MEMORY.md": "# Alice\n\nAlice drinks green tea.\n"})
        out["alice"] = MemoryIndex(ws, agent_id="alice", config={**cfg, "shared": ["team"]}, state_dir=tmp_path / "state")
        yield out
    finally:
        for mem in out.values():
            mem.close()


def _all_text(payload: Any) -> str:
    return json.dumps(payload, ensure_ascii=False)


def test_hostile_agent_ids_see_only_their_own_notes(agents: dict[str, MemoryIndex]) -> None:
    for i, agent in enumerate(HOSTILE_AGENTS):
        mem = agents[agent]
        assert {r.path for r in mem.search(secret(i), min_score=0)} == {"MEMORY.md", f"memory/only-{i}.md"}, agent
        assert secret(i) in mem.read("MEMORY.md").text
        others = [secret(j) for j in range(len(HOSTILE_AGENTS)) if j != i]
        for q in [*others, "zqsecret%", "zqsecret_", "zqsecret*", "%", "_", "机密", "code is"]:
            for r in mem.search(q, max_results=50, min_score=0):
                assert r.path in ("MEMORY.md", f"memory/only-{i}.md") and not any(s in r.snippet for s in others), (agent, q)
        for j in range(len(HOSTILE_AGENTS)):
            if j != i:
                assert mem.read(f"memory/only-{j}.md").missing, (agent, j)
        assert mem.status().files == 2


def test_bad_agent_ids_and_namespace_names_are_config_errors(tmp_path: Path, store_config: dict[str, Any]) -> None:
    ws = write(tmp_path / "ws", {"MEMORY.md": "- x\n"})
    for bad in ("", ".", "..", "a/b", "../team", "a\\b", "a\x00b"):
        with pytest.raises(ConfigError):
            MemoryIndex(ws, agent_id=bad, config={"store": store_config, "provider": "none"}, state_dir=tmp_path / "s")
        with pytest.raises(ConfigError):
            MemoryIndex(ws, agent_id="ok", config={"store": store_config, "provider": "none", "shared": [bad]},
                        state_dir=tmp_path / "s")


def test_a_namespace_name_matches_exactly(agents: dict[str, MemoryIndex], tmp_path: Path,
                                          store_config: dict[str, Any]) -> None:
    """A namespace that is a variant, a pattern or a prefix of "team" gives that agent's notes
    (when such an agent exists) and never the team's."""
    team_secret = secret(HOSTILE_AGENTS.index("team"))
    ws = write(tmp_path / "carol", {"MEMORY.md": "# Carol\n"})
    for name in ["Team", "team ", "team.", "t\u0435am", "t_am", "te%", "%", "*", "[st]eam", "tea", "teamx", "te", "alice"]:
        cfg = {"store": store_config, "provider": "none", "shared": [name]}
        with MemoryIndex(ws, agent_id="carol", config=cfg, state_dir=tmp_path / "state") as carol:
            found = search_payload(carol, "zqsecret code", max_results=50, min_score=0)
            assert team_secret not in _all_text(found), name
            assert all(r["path"].startswith(f"@{name}/") for r in found["results"]), name
            if name in HOSTILE_AGENTS:  # an existing agent: its own notes, under its own name
                k = HOSTILE_AGENTS.index(name)
                assert secret(k) in _all_text(found)
                assert secret(k) in carol.read(f"@{name}/MEMORY.md").text
            else:
                assert not found["results"] and name in found.get("sharedUnavailable", {}), name
            got = get_payload(carol, "@team/MEMORY.md")
            assert team_secret not in _all_text(got) and got.get("error"), name


#: ``memory_get`` paths aimed past alice's grant of "team" (the only agent she may read).
HOSTILE_PATHS = ["@Team/MEMORY.md", "@team /MEMORY.md", "@team./MEMORY.md", "@t\u0435am/MEMORY.md", "@t_am/MEMORY.md",
                 "@te%/MEMORY.md", "@%/MEMORY.md", "@*/MEMORY.md", "@[st]eam/MEMORY.md", "@team/../Team/MEMORY.md",
                 "@team/memory/../../Team/MEMORY.md", "@team/..\\Team\\MEMORY.md", "@/MEMORY.md", "@@team/MEMORY.md",
                 "@team/@Team/MEMORY.md", "@team//etc/passwd.md", "@team/memory/only-1.md", "@team/memory/only-%.md",
                 "@team/memory/only-_.md", "@team/memory/\udcff.md", "@team/MEMORY.md\x00", "@team/" + "m" * 5000 + ".md",
                 "@team/MEMORY.md/../../../alice/MEMORY.md", "@alice/MEMORY.md", "memory/only-0.md",
                 "/etc/passwd", "@team/C:/x.md", "@team/memory/代理人.md", "@\uff54eam/MEMORY.md"]


def _langchain_get(mem: MemoryIndex) -> Callable[[dict[str, Any]], dict[str, Any]]:
    pytest.importorskip("langchain_core")
    from langchain_clawmem import create_memory_get_tool

    tool = create_memory_get_tool(mem)

    def call(args: dict[str, Any]) -> dict[str, Any]:
        msg = tool.invoke({"type": "tool_call", "id": "c1", "name": tool.name, "args": args})
        return json.loads(msg.content)  # type: ignore[no-any-return]
    return call


def _llama_get(mem: MemoryIndex) -> Callable[[dict[str, Any]], dict[str, Any]]:
    pytest.importorskip("llama_index.core")
    from llama_index.core.tools import ToolSelection, call_tool_with_selection

    from llama_index_clawmem import create_memory_tools

    tools = create_memory_tools(mem)

    def call(args: dict[str, Any]) -> dict[str, Any]:
        out = call_tool_with_selection(ToolSelection(tool_id="x", tool_name="memory_get", tool_kwargs=args), tools)
        return json.loads(out.content)  # type: ignore[no-any-return]
    return call


def _mcp_get(mem: MemoryIndex) -> Callable[[dict[str, Any]], dict[str, Any]]:
    pytest.importorskip("mcp")
    from clawmem_core.mcp_server import call_tool_payload

    def call(args: dict[str, Any]) -> dict[str, Any]:
        return asyncio.run(call_tool_payload(mem, "memory_get", args))
    return call


def test_hostile_memory_get_paths_read_only_what_the_agent_may(agents: dict[str, MemoryIndex]) -> None:
    alice = agents["alice"]
    team_i = HOSTILE_AGENTS.index("team")
    assert secret(team_i) in alice.read("@team/MEMORY.md").text  # the grant works
    assert secret(team_i) in get_payload(alice, "@team/memory/only-0.md")["text"]
    forbidden = [secret(j) for j in range(len(HOSTILE_AGENTS)) if j != team_i]
    callers = {"read": None, "payload": lambda a: get_payload(alice, a["path"], a.get("from"), a.get("lines")),
               "langchain": _langchain_get(alice), "llama_index": _llama_get(alice), "mcp": _mcp_get(alice)}
    for path in HOSTILE_PATHS:
        for name, call in callers.items():
            if call is None:
                try:
                    text = alice.read(path).text
                except PathNotAllowedError:
                    continue
            else:
                got = call({"path": path, "from": 1, "lines": 50})
                assert not got.get("disabled"), (name, path, got)  # a refusal, never "memory unavailable"
                text = _all_text(got)
            assert not any(s in text for s in forbidden), (name, path)
            assert "root:" not in text, (name, path)


def test_glob_characters_in_an_agent_id_touch_no_other_agents_files(tmp_path: Path) -> None:
    """SQLite: a sync removes its own crashed rebuilds (``<agent>.sqlite.tmp-*``); an agent id
    ``*`` or ``[ab]ob`` must not remove another agent's rebuild in progress (before: the agent id
    was used as a glob pattern and bob's temporary index was deleted)."""
    state = tmp_path / "state"
    bob_ws = write(tmp_path / "bob", {"MEMORY.md": "- bob's note\n"})
    with MemoryIndex(bob_ws, agent_id="bob", config={"provider": "none"}, state_dir=state) as bob:
        bob.sync()
    folder = state / "memory"
    theirs = [folder / "bob.sqlite.tmp-0123456789ab", folder / "bob.sqlite.corrupt-20260101T000000000000"]
    for p in theirs:
        p.write_bytes(b"bob's rebuild in progress")
    for agent in ("*", "[ab]ob", "b?b", "bo*"):
        ws = write(tmp_path / f"w{len(agent)}{agent.strip('*[]?')}", {"MEMORY.md": "- a note\n"})
        (folder / f"{agent}.sqlite.tmp-deadbeef0000").write_bytes(b"a crashed rebuild of this agent")
        with MemoryIndex(ws, agent_id=agent, config={"provider": "none"}, state_dir=state) as mem:
            mem.sync(force=True)
        assert all(p.exists() for p in theirs), agent
        assert not (folder / f"{agent}.sqlite.tmp-deadbeef0000").exists()  # its own leftover is removed
    assert sorted(os.listdir(folder)).count("bob.sqlite") == 1
