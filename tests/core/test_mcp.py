"""``clawmem mcp``: the memory tools served over MCP, checked with the SDK's own client: in-process,
over stdio (a spawned ``clawmem mcp``) and over streamable HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

from clawmem_core import MemoryIndex  # noqa: E402
from clawmem_core.mcp_server import call_tool_payload, create_server, serve_http, tool_definitions  # noqa: E402
from clawmem_core.tool_schemas import MemoryGetInput, MemorySearchInput, MemoryWriteInput  # noqa: E402
from clawmem_core.tools import GET_ARGS_ACTION, MEMORY_SEARCH_DESCRIPTION, search_payload  # noqa: E402

from .conftest import SAMPLE_FILES, IndexFactory, WorkspaceFactory, keyword_only, tree_digest  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
ZH = {"memory/2026-02-01.md": "# 周会\n\n今天讨论了成语接龙游戏的上线计划。\n王芳负责测试。\n"}


def payload_of(result: Any) -> dict[str, Any]:
    """The structured payload, checked against the JSON text a text-only client reads."""
    [block] = result.content
    assert json.loads(block.text) == result.structured_content
    return result.structured_content


@pytest.fixture
def mem(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> MemoryIndex:
    return open_index(make_workspace(SAMPLE_FILES | ZH), embedder="hash")


@pytest.mark.asyncio
async def test_tools_are_listed_with_the_shared_schemas(mem: MemoryIndex) -> None:
    async with Client(create_server(mem)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == {"memory_search", "memory_get", "memory_write"}
    assert tools["memory_search"].input_schema == MemorySearchInput.model_json_schema(by_alias=True)
    assert tools["memory_get"].input_schema == MemoryGetInput.model_json_schema(by_alias=True)
    assert tools["memory_write"].input_schema == MemoryWriteInput.model_json_schema(by_alias=True)
    assert set(tools["memory_search"].input_schema["properties"]) == {"query", "maxResults", "minScore"}
    assert set(tools["memory_get"].input_schema["properties"]) == {"path", "from", "lines"}
    assert tools["memory_search"].description == MEMORY_SEARCH_DESCRIPTION
    assert [d["name"] for d in tool_definitions()] == ["memory_search", "memory_get", "memory_write"]


@pytest.mark.asyncio
async def test_search_get_write_in_process_have_the_tool_payloads(mem: MemoryIndex) -> None:
    async with Client(create_server(mem)) as client:
        assert "## Memory Recall" in (client.instructions or "")
        mem.sync()  # vectors complete: a first search answers by keyword while they are computed
        result = await client.call_tool("memory_search", {"query": "kubernetes", "maxResults": 3})
        assert not result.is_error
        payload = payload_of(result)
        assert payload == search_payload(mem, "kubernetes", 3)  # the same payload as the other tool layers
        assert payload["results"][0]["path"] == "memory/2026-01-05.md"

        zh = payload_of(await client.call_tool("memory_search", {"query": "成语接龙"}))
        assert zh["results"][0]["path"] == "memory/2026-02-01.md"

        got = payload_of(await client.call_tool("memory_get", {"path": "MEMORY.md", "from": 3, "lines": 1}))
        assert got == {"path": "MEMORY.md", "text": "I like jazz music and espresso.", "from": 3, "lines": 1,
                       "totalLines": 4}

        wrote = payload_of(await client.call_tool("memory_write", {"text": "- Priya owns the billing migration"}))
        assert wrote["path"].startswith("memory/") and wrote["startLine"] >= 1
        found = payload_of(await client.call_tool("memory_search", {"query": "Priya billing migration"}))
        assert found["results"][0]["path"] == wrote["path"]
        assert "Priya owns the billing migration" in (mem.workspace / wrote["path"]).read_text(encoding="utf-8")


@pytest.mark.asyncio
@pytest.mark.parametrize("name, arguments, named", [
    ("memory_search", {"query": "jazz", "maxResults": "lots"}, "maxResults"),
    ("memory_search", {"maxResults": 2}, "query"),
    ("memory_search", {"query": "jazz", "maxResults": 0}, "maxResults"),  # the schema bounds it (minimum 1), so the error names the wire argument
    ("memory_get", {"path": "MEMORY.md", "from": 0}, "from"),
    ("memory_get", {"lines": 2}, "path"),
    ("memory_get", {"path": "../outside.md"}, "outside"),
    ("memory_write", {"text": "x", "target": "elsewhere"}, "target"),
    ("memory_write", {"text": "   "}, "empty"),
])
async def test_argument_mistakes_say_what_to_fix(mem: MemoryIndex, name: str, arguments: dict[str, Any],
                                                 named: str) -> None:
    before = tree_digest(mem.workspace)
    async with Client(create_server(mem)) as client:
        result = await client.call_tool(name, arguments)
    payload = payload_of(result)
    assert result.is_error and named in payload["error"]
    assert "disabled" not in payload and payload["action"]  # memory is available: fix the call and retry
    assert tree_digest(mem.workspace) == before


@pytest.mark.asyncio
async def test_unavailable_memory_is_disabled(mem: MemoryIndex) -> None:
    server = create_server(mem)
    mem.close()
    async with Client(server) as client:
        payload = payload_of(await client.call_tool("memory_get", {"path": "MEMORY.md"}))
        assert payload["disabled"] is True and "closed" in payload["error"]
        assert payload_of(await client.call_tool("memory_search", {"query": "jazz"}))["disabled"] is True


@pytest.mark.asyncio
async def test_read_only_server_leaves_out_memory_write(mem: MemoryIndex) -> None:
    async with Client(create_server(mem, include=("memory_search", "memory_get"))) as client:
        assert {t.name for t in (await client.list_tools()).tools} == {"memory_search", "memory_get"}
        before = tree_digest(mem.workspace)
        with pytest.raises(MCPError, match="unknown tool 'memory_write'"):
            await client.call_tool("memory_write", {"text": "- sneaky"})
    assert tree_digest(mem.workspace) == before


@pytest.mark.asyncio
async def test_unknown_tool_is_refused(mem: MemoryIndex) -> None:
    with pytest.raises(ValueError, match="unknown tool"):
        await call_tool_payload(mem, "memory_delete", {})


def _subprocess_env(state: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["CLAWMEM_STATE_DIR"] = str(state)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


@pytest.mark.asyncio
async def test_stdio_server_in_a_subprocess(make_workspace: WorkspaceFactory, tmp_path: Path) -> None:
    ws = make_workspace(SAMPLE_FILES | ZH)
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "clawmem_core.cli", "--workspace", str(ws), "mcp"],
        env=_subprocess_env(tmp_path / "stdio-state"), cwd=str(tmp_path))
    async with Client(params, read_timeout_seconds=120) as client:
        assert {t.name for t in (await client.list_tools()).tools} == {"memory_search", "memory_get", "memory_write"}
        first = payload_of(await client.call_tool("memory_search", {"query": "espresso"}))
        assert first["mode"] == "fts-only" and first["results"][0]["path"] == "MEMORY.md"
        wrote = payload_of(await client.call_tool("memory_write", {"text": "- 王芳 prefers tea", "target": "long_term"}))
        assert wrote["path"] == "MEMORY.md"
        # an edit made outside the server: the watcher (or the search's own freshness check) picks it up
        (ws / "memory" / "2026-03-09.md").write_text("# Trip\n\nBooked the Lisbon offsite venue.\n", encoding="utf-8")
        deadline = time.monotonic() + 30
        while True:
            hits = payload_of(await client.call_tool("memory_search", {"query": "Lisbon offsite"}))["results"]
            if hits or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.3)
        assert hits and hits[0]["path"] == "memory/2026-03-09.md"
    assert "王芳 prefers tea" in (ws / "MEMORY.md").read_text(encoding="utf-8")


@pytest.mark.asyncio
async def test_streamable_http_server(mem: MemoryIndex) -> None:
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve_http(mem, port=0, watch=False, on_ready=ready.set_result))
    try:
        url = await asyncio.wait_for(ready, 30)
        assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp")
        async with Client(url) as client:
            payload = payload_of(await client.call_tool("memory_search", {"query": "jazz espresso"}))
            assert payload["results"][0]["path"] == "MEMORY.md"
            got = payload_of(await client.call_tool("memory_get", {"path": "memory/2026-02-01.md", "from": 3}))
            assert got["text"].startswith("今天讨论了成语接龙游戏")
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


@pytest.mark.asyncio
async def test_http_port_in_use_is_a_clear_error(mem: MemoryIndex) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(OSError, match="port in use"):
            await asyncio.wait_for(serve_http(mem, port=port, watch=False), 30)


def test_keyword_only_server_needs_no_provider(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    mem = open_index(make_workspace(SAMPLE_FILES), embedder=None, config=keyword_only())
    payload = asyncio.run(call_tool_payload(mem, "memory_search", {"query": "vim"}))
    assert payload["mode"] == "fts-only" and payload["results"][0]["path"] == "MEMORY.md"


@pytest.mark.asyncio
async def test_memory_search_over_mcp_is_recorded_with_the_server_s_session_key(mem: MemoryIndex) -> None:
    """What ``memory_search`` gave the model over MCP lands in the agent's recall log (dreaming), with the
    session key the server answers for; ``memory_get`` and ``memory_write`` record nothing."""
    async with Client(create_server(mem, session_key="discord:dm:42")) as client:
        en = payload_of(await client.call_tool("memory_search", {"query": "kubernetes"}))
        zh = payload_of(await client.call_tool("memory_search", {"query": "成语接龙"}))
        await client.call_tool("memory_get", {"path": "MEMORY.md"})
    mem._recall.flush()
    events = list(mem._recall.dream_store().events(mem.agent_id))
    assert en["results"] and zh["results"]
    assert [(e.query_text, e.path, e.session_key) for e in events if e.rank == 1] == [
        ("kubernetes", en["results"][0]["path"], "discord:dm:42"),
        ("成语接龙", "memory/2026-02-01.md", "discord:dm:42"),
    ]
    assert len(events) == len(en["results"]) + len(zh["results"])
