"""The LlamaIndex adapter: retriever, tools, memory block, embedder bridge and a full agent loop."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.agent.workflow import FunctionAgent, ToolCall, ToolCallResult  # noqa: E402
from llama_index.core.base.embeddings.base import BaseEmbedding  # noqa: E402
from llama_index.core.bridge.pydantic import PrivateAttr  # noqa: E402
from llama_index.core.llms import ChatMessage  # noqa: E402
from llama_index.core.llms.llm import ToolSelection  # noqa: E402
from llama_index.core.memory import Memory  # noqa: E402
from llama_index.core.schema import MetadataMode, NodeWithScore, TextNode  # noqa: E402
from llama_index.core.tools import FunctionTool  # noqa: E402
from llama_index.core.tools.calling import acall_tool_with_selection, call_tool_with_selection  # noqa: E402

from clawmem_core import MemoryIndex  # noqa: E402
from clawmem_core.testing import HashEmbedder  # noqa: E402
from clawmem_core.tools import MEMORY_GET_DESCRIPTION, MEMORY_SEARCH_DESCRIPTION  # noqa: E402
from llama_index_clawmem import (  # noqa: E402
    ClawmemMemoryBlock,
    ClawmemRetriever,
    ClawmemToolSpec,
    create_memory_tools,
    memory_recall_prompt,
)
from llama_index_clawmem.testing import NOTHING_FOUND, ScriptedRecallLLM  # noqa: E402

from .conftest import copy_workspace  # noqa: E402

QUERY = "Priya Marco Porto Redis"

# llama-index's workflow engine inspects agent instances with inspect.getmembers, which touches
# pydantic's deprecated attributes: upstream noise, not ours.
pytestmark = [
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince20"),
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince211"),
]


class GatedHashEmbedding(BaseEmbedding):
    """A LlamaIndex ``BaseEmbedding`` (feature hashing) whose async query path waits, without blocking the loop,
    until ``gate_at`` query embeddings are in flight together (``gate_at`` 0: no wait); sync and async query calls
    are counted, and the most async ones ever in flight at once."""

    gate_at: int = 0
    sync_queries: int = 0
    async_queries: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    _gate: Any = PrivateAttr(default=None)

    def open_gate_at(self, calls: int) -> None:
        self.gate_at, self.max_in_flight, self._gate = calls, 0, asyncio.Event()

    def _vec(self, text: str) -> list[float]:
        return HashEmbedder().embed_query(text)

    def _get_query_embedding(self, query: str) -> list[float]:
        self.sync_queries += 1
        return self._vec(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        self.async_queries += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self._gate is not None:
                if self.in_flight >= self.gate_at:
                    self._gate.set()
                await self._gate.wait()  # bounded by the search's own query.timeout_ms
            return self._vec(query)
        finally:
            self.in_flight -= 1

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._vec(text)


@pytest.fixture(scope="module")
def li_memory(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("li")
    copy_workspace(tmp)
    emb = GatedHashEmbedding(model_name="gated-hash")
    mem = MemoryIndex(tmp / "workspace", embedder=emb, state_dir=tmp / "state")
    mem.sync()
    yield mem, emb
    mem.close()


# -- retriever ---------------------------------------------------------------------------------


def test_retriever_nodes_carry_chunk_id_score_and_metadata(keyword_memory: MemoryIndex) -> None:
    nodes = ClawmemRetriever(keyword_memory).retrieve(QUERY)
    hits = keyword_memory.search(QUERY)
    assert len(nodes) == len(hits) >= 4
    for n, hit in zip(nodes, hits):
        assert isinstance(n, NodeWithScore) and isinstance(n.node, TextNode)
        assert n.node.node_id == hit.id and n.score == pytest.approx(hit.score)
        assert n.node.get_content() == hit.snippet
        md = n.node.metadata
        assert (md["path"], md["start_line"], md["end_line"], md["memory_source"]) == (hit.path, hit.start_line, hit.end_line, "memory")
        assert md["citation"] == hit.citation and md["score"] == pytest.approx(hit.score)
        llm_text = n.node.get_content(metadata_mode=MetadataMode.LLM)
        assert f"citation: {hit.citation}" in llm_text and "vector_score" not in llm_text


def test_retriever_top_k(keyword_memory: MemoryIndex) -> None:
    all_nodes = ClawmemRetriever(keyword_memory).retrieve(QUERY)
    two = ClawmemRetriever(keyword_memory, similarity_top_k=2).retrieve(QUERY)
    assert [n.node.node_id for n in two] == [n.node.node_id for n in all_nodes[:2]]
    files = keyword_memory.status().chunks
    larger = ClawmemRetriever(keyword_memory, similarity_top_k=files * 10, min_score=0.0).retrieve(QUERY)
    assert 0 < len(larger) <= files
    assert len({n.node.node_id for n in larger}) == len(larger)
    with pytest.raises(ValueError):
        ClawmemRetriever(keyword_memory, similarity_top_k=0)


def test_retriever_empty_index_and_empty_query(empty_memory: MemoryIndex, keyword_memory: MemoryIndex) -> None:
    assert ClawmemRetriever(empty_memory, similarity_top_k=100).retrieve("anything") == []
    assert ClawmemRetriever(keyword_memory).retrieve("  ") == []


@pytest.mark.asyncio
async def test_retriever_async_empty_index(empty_memory: MemoryIndex) -> None:
    assert await ClawmemRetriever(empty_memory, similarity_top_k=100).aretrieve("anything") == []


@pytest.mark.asyncio
async def test_retriever_async_is_really_async(li_memory: Any) -> None:
    mem, emb = li_memory
    r = ClawmemRetriever(mem, similarity_top_k=3, min_score=0.0)
    sync_before, async_before = emb.sync_queries, emb.async_queries
    emb.open_gate_at(3)  # each query embedding waits until all three are in flight: only overlapping calls pass
    try:
        results = await asyncio.gather(*(r.aretrieve(q) for q in ("Porto train", "Redis incident", "jazz piano")))
    finally:
        emb._gate = None
    assert all(len(nodes) == 3 for nodes in results)
    assert emb.async_queries - async_before == 3 and emb.sync_queries == sync_before
    assert emb.max_in_flight == 3  # awaited on the loop together, none blocked it (in a row: 1, after a timeout)
    sync_nodes = r.retrieve("Porto train")
    assert [n.node.node_id for n in results[0]] == [n.node.node_id for n in sync_nodes]


def test_llama_index_embedding_accepted(li_memory: Any) -> None:
    mem, emb = li_memory
    assert mem.provider_info()["provider"] == "llama_index" and mem.provider_info()["mode"] == "hybrid"
    before = emb.sync_queries
    nodes = ClawmemRetriever(mem, similarity_top_k=1, min_score=0.0).retrieve("Porto train Santa Apolónia")
    assert nodes[0].node.metadata["path"] == "memory/2026-11-19.md"
    assert emb.sync_queries == before + 1  # the query went through the LlamaIndex embedding


# -- tools -------------------------------------------------------------------------------------


def test_tools_metadata(keyword_memory: MemoryIndex) -> None:
    search, get = ClawmemToolSpec(keyword_memory).to_tool_list()
    assert isinstance(search, FunctionTool) and isinstance(get, FunctionTool)
    assert (search.metadata.name, search.metadata.description) == ("memory_search", MEMORY_SEARCH_DESCRIPTION)
    assert (get.metadata.name, get.metadata.description) == ("memory_get", MEMORY_GET_DESCRIPTION)
    s = search.metadata.get_parameters_dict()
    g = get.metadata.to_openai_tool()["function"]["parameters"]
    assert set(s["properties"]) == {"query", "maxResults", "minScore"} and s["required"] == ["query"]
    assert set(g["properties"]) == {"path", "from", "lines"} and g["required"] == ["path"]


def test_tool_call_as_an_agent_makes_it(keyword_memory: MemoryIndex) -> None:
    tools = create_memory_tools(keyword_memory)
    # what an LLM's tool call becomes in LlamaIndex: a ToolSelection with the wire argument names
    search_out = call_tool_with_selection(
        ToolSelection(tool_id="t1", tool_name="memory_search", tool_kwargs={"query": "Marco 1:1 Thursdays", "maxResults": 2}), tools
    )
    assert not search_out.is_error
    payload = json.loads(search_out.content)
    assert payload == search_out.raw_output
    assert payload["mode"] == "fts-only" and 1 <= len(payload["results"]) <= 2
    top = payload["results"][0]
    assert top["path"] == "MEMORY.md" and top["snippet"].endswith(f"Source: {top['citation']}")
    get_out = call_tool_with_selection(
        ToolSelection(tool_id="t2", tool_name="memory_get", tool_kwargs={"path": top["path"], "from": 19, "lines": 1}), tools
    )
    assert json.loads(get_out.content) == {
        "path": "MEMORY.md", "text": "- Marco (manager): weekly 1:1 on Thursdays at 15:00.", "from": 19, "lines": 1, "totalLines": 21,
    }


@pytest.mark.asyncio
async def test_tool_call_async_and_errors_as_payloads(keyword_memory: MemoryIndex) -> None:
    tools = create_memory_tools(keyword_memory)

    async def call(name: str, **kwargs: Any) -> dict[str, Any]:
        out = await acall_tool_with_selection(ToolSelection(tool_id="x", tool_name=name, tool_kwargs=kwargs), tools)
        payload = json.loads(out.content)  # the model reads a payload, never an exception
        assert out.is_error == ("error" in payload) and out.raw_output == payload
        return payload

    ok = await call("memory_search", query="Porto")
    assert [r["path"] for r in ok["results"]][:1] == ["memory/2026-11-05.md"]
    refused = await call("memory_get", path="../secrets.md")
    assert "disabled" not in refused and refused["text"] == "" and refused["error"] and refused["action"]
    bad = await call("memory_search", query="Porto", maxResults="many")
    assert bad["results"] == [] and "disabled" not in bad and "maxResults" in bad["error"]
    no_path = await call("memory_get", lines=2)
    assert "disabled" not in no_path and "path" in no_path["error"] and no_path["action"]
    assert (await call("memory_get", path="MEMORY.md", **{"from": 9, "lines": 1}))["text"].startswith("- Music: loves jazz")


def test_tools_on_an_empty_index(empty_memory: MemoryIndex) -> None:
    search, get = create_memory_tools(empty_memory)
    assert json.loads(search(query="anything").content)["results"] == []
    assert json.loads(get(path="MEMORY.md").content) == {"path": "MEMORY.md", "text": "", "from": 1, "lines": 0, "totalLines": 0, "missing": True}


def test_memory_recall_prompt_variants(keyword_memory: MemoryIndex) -> None:
    spec = ClawmemToolSpec(keyword_memory)
    both = memory_recall_prompt(spec.to_tool_list())
    assert both == spec.recall_prompt() and both.startswith("## Memory Recall\n")
    assert "then use memory_get to pull only the needed lines" in both
    only_search = spec.recall_prompt(["memory_search"])
    assert "memory_get" not in only_search and [t.metadata.name for t in spec.to_tool_list(["memory_search"])] == ["memory_search"]
    only_get = memory_recall_prompt(["memory_get"])
    assert "memory_search" not in only_get and "memory_get" in only_get
    assert "Citations are disabled" in memory_recall_prompt(citations="off")
    assert memory_recall_prompt([]) == ""


# -- memory block ------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_memory_block_recalls_into_the_context(keyword_memory: MemoryIndex) -> None:
    block = ClawmemMemoryBlock(memory=keyword_memory, max_results=2)
    memory = Memory.from_defaults(session_id="block-test", memory_blocks=[block])
    await memory.aput(ChatMessage(role="user", content="Any plans for the weekend?"))
    await memory.aput(ChatMessage(role="assistant", content="Tell me more."))
    messages = await memory.aget(input="Which train did I book to Porto?")
    system = messages[0]
    assert system.role.value == "system"
    text = system.content or ""
    assert "<clawmem_recall>" in text and "08:39 from Santa Apolónia" in text
    assert "Source: memory/2026-11-19.md#L1-L5" in text
    assert [m.content for m in messages[1:]] == ["Any plans for the weekend?", "Tell me more."]
    # the block is read-only: Markdown stays the source of truth
    await block.aput([ChatMessage(role="user", content="remember: I like tea")])
    assert "tea" not in await block.aget([ChatMessage(role="user", content="tea")])


@pytest.mark.asyncio
async def test_memory_block_no_query_and_failures(keyword_memory: MemoryIndex, tmp_path: Path) -> None:
    block = ClawmemMemoryBlock(memory=keyword_memory)
    assert await block.aget([]) == ""
    assert await block.aget([ChatMessage(role="assistant", content="Porto")]) == ""

    class Broken(BaseEmbedding):
        def _get_query_embedding(self, query: str) -> list[float]:
            raise RuntimeError("provider down")

        async def _aget_query_embedding(self, query: str) -> list[float]:
            raise RuntimeError("provider down")

        def _get_text_embedding(self, text: str) -> list[float]:
            return HashEmbedder().embed_query(text)

    copy_workspace(tmp_path)
    with MemoryIndex(tmp_path / "workspace", embedder=Broken(model_name="broken"), state_dir=tmp_path / "s") as mem:
        mem.sync()
        assert await ClawmemMemoryBlock(memory=mem).aget([ChatMessage(role="user", content="Porto")]) == ""
        search, _ = create_memory_tools(mem)
        payload = json.loads((await search.acall(query="Porto")).content)
        assert payload["unavailable"] is True and "provider down" in payload["error"]


# -- agent -------------------------------------------------------------------------------------


async def _run_agent(mem: MemoryIndex, question: str) -> tuple[list[Any], list[ToolCallResult], str]:
    spec = ClawmemToolSpec(mem)
    agent = FunctionAgent(tools=spec.to_tool_list(), llm=ScriptedRecallLLM(), system_prompt=spec.recall_prompt())
    handler = agent.run(user_msg=question)
    calls: list[Any] = []
    results: list[ToolCallResult] = []
    async for event in handler.stream_events():
        if isinstance(event, ToolCallResult):
            results.append(event)
        elif isinstance(event, ToolCall):
            calls.append(event)
    answer = await handler
    return calls, results, str(answer)


@pytest.mark.asyncio
async def test_agent_full_loop(keyword_memory: MemoryIndex) -> None:
    calls, results, answer = await _run_agent(keyword_memory, "When is my weekly 1:1 with Marco?")
    assert [r.tool_name for r in results] == ["memory_search", "memory_get"]
    search_payload = json.loads(results[0].tool_output.content)
    get_args = results[1].tool_kwargs
    assert any(r["path"] == get_args["path"] and r["startLine"] == get_args["from"] for r in search_payload["results"])
    assert "Thursdays at 15:00" in json.loads(results[1].tool_output.content)["text"]
    assert "Thursdays at 15:00" in answer and "MEMORY.md#L19" in answer


@pytest.mark.asyncio
async def test_agent_full_loop_hybrid_chinese(hash_memory: MemoryIndex) -> None:
    _, results, answer = await _run_agent(hash_memory, "李伟建议把批处理任务迁移到哪里？")
    assert [r.tool_name for r in results] == ["memory_search", "memory_get"]
    assert results[1].tool_kwargs["path"] == "memory/2026-11-12.md"
    assert "Dagster" in answer


@pytest.mark.asyncio
async def test_agent_says_it_checked_when_nothing_matches(keyword_memory: MemoryIndex) -> None:
    _, results, answer = await _run_agent(keyword_memory, "xylophone quasar")
    assert [r.tool_name for r in results] == ["memory_search"] and answer.strip() == NOTHING_FOUND
