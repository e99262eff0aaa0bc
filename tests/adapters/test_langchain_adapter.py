"""The LangChain adapter: retriever, tools, prompt, embedder bridge and a full agent loop."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain_core")

from langchain_core.documents import Document  # noqa: E402
from langchain_core.embeddings import Embeddings  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402
from langchain_core.tools import StructuredTool  # noqa: E402
from langchain_core.utils.function_calling import convert_to_openai_tool  # noqa: E402

from clawmem_core import MemoryIndex  # noqa: E402
from clawmem_core.testing import HashEmbedder  # noqa: E402
from clawmem_core.tools import MEMORY_GET_DESCRIPTION, MEMORY_SEARCH_DESCRIPTION  # noqa: E402
from langchain_clawmem import (  # noqa: E402
    ClawmemRetriever,
    ClawmemToolkit,
    create_memory_get_tool,
    create_memory_search_tool,
    create_memory_tools,
    memory_recall_prompt,
)
from langchain_clawmem.testing import NOTHING_FOUND, ScriptedRecallChatModel  # noqa: E402

from .conftest import copy_workspace  # noqa: E402

QUERY = "Priya Marco Porto Redis"


class GatedAsyncEmbeddings(Embeddings):
    """A LangChain ``Embeddings`` whose async query path waits, without blocking the loop, until ``gate_at``
    query embeddings are in flight together (after :meth:`open_gate_at`); the sync query path is counted so a
    test can prove the async retriever never used it, and the most async calls ever in flight at once."""

    def __init__(self) -> None:
        self.inner = HashEmbedder()
        self.sync_queries = 0
        self.async_queries = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.gate_at = 0
        self.gate: asyncio.Event | None = None

    def open_gate_at(self, calls: int) -> None:
        self.gate_at, self.max_in_flight, self.gate = calls, 0, asyncio.Event()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        self.sync_queries += 1
        return self.inner.embed_query(text)

    async def aembed_query(self, text: str) -> list[float]:
        self.async_queries += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.gate is not None:
                if self.in_flight >= self.gate_at:
                    self.gate.set()
                await self.gate.wait()  # bounded by the search's own query.timeout_ms
            return self.inner.embed_query(text)
        finally:
            self.in_flight -= 1


@pytest.fixture(scope="module")
def lc_memory(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("lc")
    copy_workspace(tmp)
    emb = GatedAsyncEmbeddings()
    mem = MemoryIndex(tmp / "workspace", embedder=emb, state_dir=tmp / "state")
    mem.sync()
    yield mem, emb
    mem.close()


# -- retriever ---------------------------------------------------------------------------------


def test_retriever_documents_carry_chunk_id_and_metadata(keyword_memory: MemoryIndex) -> None:
    docs = ClawmemRetriever(memory=keyword_memory).invoke(QUERY)
    hits = keyword_memory.search(QUERY)
    assert [d.id for d in docs] == [h.id for h in hits] and all(d.id for d in docs)
    for doc, hit in zip(docs, hits):
        assert isinstance(doc, Document)
        assert doc.page_content == hit.snippet
        md = doc.metadata
        assert (md["path"], md["start_line"], md["end_line"], md["memory_source"]) == (hit.path, hit.start_line, hit.end_line, "memory")
        assert md["source"] == hit.path  # LangChain's convention: the file
        assert md["score"] == pytest.approx(hit.score)
        assert md["citation"] == hit.citation
    scores = [d.metadata["score"] for d in docs]
    assert scores == sorted(scores, reverse=True)


def test_retriever_k_at_construction_and_call_time(keyword_memory: MemoryIndex) -> None:
    everything = ClawmemRetriever(memory=keyword_memory).invoke(QUERY)
    assert len(everything) >= 4
    assert [d.id for d in ClawmemRetriever(memory=keyword_memory, k=2).invoke(QUERY)] == [d.id for d in everything[:2]]
    r = ClawmemRetriever(memory=keyword_memory, k=2)
    assert len(r.invoke(QUERY, k=4)) == 4
    assert len(r.invoke(QUERY, k=1)) == 1
    assert len(r.invoke(QUERY)) == 2  # the call-time k did not stick


def test_retriever_min_score_and_unknown_arguments(keyword_memory: MemoryIndex) -> None:
    r = ClawmemRetriever(memory=keyword_memory)
    strict = r.invoke(QUERY, min_score=0.5)
    assert strict and all(d.metadata["score"] >= 0.5 for d in strict)
    assert len(strict) < len(r.invoke(QUERY, min_score=0.0))
    with pytest.raises(TypeError, match="top_k"):
        r.invoke(QUERY, top_k=3)
    with pytest.raises(ValueError):
        ClawmemRetriever(memory=keyword_memory, k=0)


def test_retriever_empty_query_and_empty_index(keyword_memory: MemoryIndex, empty_memory: MemoryIndex) -> None:
    assert ClawmemRetriever(memory=keyword_memory).invoke("   ") == []
    assert ClawmemRetriever(memory=empty_memory, k=50).invoke("anything") == []


@pytest.mark.asyncio
async def test_retriever_async_awaits_the_embedder_without_blocking(lc_memory: Any) -> None:
    mem, emb = lc_memory
    r = ClawmemRetriever(memory=mem, k=3, min_score=0.0)
    sync_before, async_before = emb.sync_queries, emb.async_queries
    emb.open_gate_at(3)  # each query embedding waits until all three are in flight: only overlapping calls pass
    try:
        results = await asyncio.gather(*(r.ainvoke(q) for q in ("Porto train", "Redis incident", "jazz piano")))
    finally:
        emb.gate = None
    assert all(len(docs) == 3 for docs in results)
    assert emb.async_queries - async_before == 3 and emb.sync_queries == sync_before
    # the three query embeddings were awaited on the loop together: none blocked it (in a row: 1, after a timeout)
    assert emb.max_in_flight == 3
    same = await r.ainvoke("Porto train")
    assert [d.id for d in same] == [d.id for d in r.invoke("Porto train")]


def test_langchain_embeddings_accepted_as_embedder(lc_memory: Any) -> None:
    mem, emb = lc_memory
    info = mem.provider_info()
    assert info["provider"] == "langchain" and info["mode"] == "hybrid"
    before = emb.sync_queries
    docs = ClawmemRetriever(memory=mem, k=2, min_score=0.0).invoke("Porto train Santa Apolónia")
    assert docs[0].metadata["path"] == "memory/2026-11-19.md"
    assert emb.sync_queries == before + 1  # the query went through the LangChain embeddings
    assert docs[0].metadata["vector_score"] >= 0


# -- tools -------------------------------------------------------------------------------------


def _call(tool: Any, args: dict[str, Any]) -> ToolMessage:
    msg = tool.invoke({"type": "tool_call", "id": "c1", "name": tool.name, "args": args})
    assert isinstance(msg, ToolMessage)
    return msg


def test_tools_names_descriptions_and_wire_schema(keyword_memory: MemoryIndex) -> None:
    search, get = create_memory_tools(keyword_memory)
    assert isinstance(search, StructuredTool) and isinstance(get, StructuredTool)
    assert (search.name, search.description) == ("memory_search", MEMORY_SEARCH_DESCRIPTION)
    assert (get.name, get.description) == ("memory_get", MEMORY_GET_DESCRIPTION)
    s = convert_to_openai_tool(search)["function"]["parameters"]
    g = convert_to_openai_tool(get)["function"]["parameters"]
    assert set(s["properties"]) == {"query", "maxResults", "minScore"} and s["required"] == ["query"]
    assert set(g["properties"]) == {"path", "from", "lines"} and g["required"] == ["path"]


def test_memory_search_payload(keyword_memory: MemoryIndex) -> None:
    msg = _call(create_memory_search_tool(keyword_memory), {"query": "When is my weekly 1:1 with Marco?", "maxResults": 1})
    payload = json.loads(msg.content)
    assert payload == msg.artifact
    assert set(payload) >= {"results", "provider", "model", "fallback", "mode"}
    assert payload["mode"] == "fts-only" and payload["provider"] == "none"
    (hit,) = payload["results"]
    assert set(hit) == {"path", "startLine", "endLine", "score", "snippet", "source", "citation"}
    assert hit["path"] == "MEMORY.md" and (hit["startLine"], hit["endLine"]) == (1, 21)  # the chunk
    # the snippet shows the part that matched (Marco's line 19), and the citation names its lines
    assert "Marco (manager): weekly 1:1" in hit["snippet"]
    first, last = map(int, hit["citation"].removeprefix("MEMORY.md#L").split("-L"))
    assert 1 <= first <= 19 <= last <= 21
    assert hit["snippet"].endswith(f"Source: {hit['citation']}")


def test_memory_search_citations_off(tmp_path: Path) -> None:
    copy_workspace(tmp_path)
    mem = MemoryIndex(tmp_path / "workspace", config={"provider": "none", "citations": "off"}, state_dir=tmp_path / "s")
    with mem:
        payload = _call(create_memory_search_tool(mem), {"query": "Porto"}).artifact
        assert payload["results"] and all(r["citation"] is None and "Source:" not in r["snippet"] for r in payload["results"])
        prompt = ClawmemToolkit(memory=mem).get_prompt()
        assert "Citations are disabled" in prompt
        assert "Citations are disabled" in memory_recall_prompt(create_memory_tools(mem))


def test_memory_get_payload_and_refusals(keyword_memory: MemoryIndex) -> None:
    get = create_memory_get_tool(keyword_memory)
    ok = _call(get, {"path": "MEMORY.md", "from": 19, "lines": 1})
    assert json.loads(ok.content) == {
        "path": "MEMORY.md", "text": "- Marco (manager): weekly 1:1 on Thursdays at 15:00.", "from": 19, "lines": 1, "totalLines": 21,
    }
    assert ok.status == "success"
    for bad in ("../outside.md", "/etc/passwd", "memory/notes.txt"):
        payload = json.loads(_call(get, {"path": bad}).content)
        assert "disabled" not in payload and payload["text"] == "" and payload["path"] == bad and payload["error"]
        assert payload["action"]  # what to fix
    missing = json.loads(_call(get, {"path": "memory/2020-01-01.md"}).content)
    assert missing["text"] == "" and missing["missing"] is True and "disabled" not in missing


def test_invalid_arguments_become_payloads(keyword_memory: MemoryIndex) -> None:
    search, get = create_memory_tools(keyword_memory)
    bad_type = _call(search, {"query": "Porto", "maxResults": "lots"})
    payload = json.loads(bad_type.content)
    assert payload["results"] == [] and "disabled" not in payload and "maxResults" in payload["error"]
    assert bad_type.status == "error" and bad_type.artifact == payload
    bad_value = json.loads(_call(search, {"query": "Porto", "maxResults": 0}).content)
    assert "disabled" not in bad_value and "maxResults" in bad_value["error"] and bad_value["action"]
    missing = json.loads(_call(get, {"from": 3}).content)
    assert "disabled" not in missing and "path" in missing["error"] and missing["action"]


def test_search_provider_failure_is_a_payload(tmp_path: Path) -> None:
    class Broken(Embeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return HashEmbedder().embed_documents(texts)

        def embed_query(self, text: str) -> list[float]:
            raise RuntimeError("429 insufficient_quota")

    copy_workspace(tmp_path)
    with MemoryIndex(tmp_path / "workspace", embedder=Broken(), state_dir=tmp_path / "s") as mem:
        mem.sync()
        payload = _call(create_memory_search_tool(mem), {"query": "Porto"}).artifact
        assert payload["results"] == [] and payload["unavailable"] is True and payload["disabled"] is True
        assert "quota" in payload["warning"] and payload["action"]


@pytest.mark.asyncio
async def test_tools_async(keyword_memory: MemoryIndex) -> None:
    search, get = create_memory_tools(keyword_memory)
    s = await search.ainvoke({"type": "tool_call", "id": "a", "name": "memory_search", "args": {"query": "Porto"}})
    g = await get.ainvoke({"type": "tool_call", "id": "b", "name": "memory_get", "args": {"path": "MEMORY.md", "from": 9, "lines": 1}})
    assert s.artifact == _call(search, {"query": "Porto"}).artifact
    assert "jazz" in g.artifact["text"]


# -- prompt ------------------------------------------------------------------------------------


def test_memory_recall_prompt_variants(keyword_memory: MemoryIndex) -> None:
    both = memory_recall_prompt(create_memory_tools(keyword_memory))
    assert both.startswith("## Memory Recall\n")
    assert "run memory_search on MEMORY.md + memory/*.md; then use memory_get" in both
    assert "Citations: include Source: <path#line>" in both
    only_search = memory_recall_prompt(create_memory_tools(keyword_memory, include=["memory_search"]))
    assert "memory_search" in only_search and "memory_get" not in only_search
    only_get = memory_recall_prompt(["memory_get"])
    assert "memory_get" in only_get and "memory_search" not in only_get
    assert memory_recall_prompt([]) == ""
    assert memory_recall_prompt(citations="off") != both and "Citations are disabled" in memory_recall_prompt(citations="off")
    kit = ClawmemToolkit(memory=keyword_memory, include=("memory_search",))
    assert [t.name for t in kit.get_tools()] == ["memory_search"] and kit.get_prompt() == only_search
    with pytest.raises(ValueError):
        create_memory_tools(keyword_memory, include=["memory_write"])  # type: ignore[list-item]


# -- agent -------------------------------------------------------------------------------------


def _check_loop(messages: list[Any], fact: str) -> None:
    assert isinstance(messages[0], HumanMessage)
    calls = [c for m in messages if isinstance(m, AIMessage) for c in m.tool_calls]
    assert [c["name"] for c in calls] == ["memory_search", "memory_get"]
    results = [m for m in messages if isinstance(m, ToolMessage)]
    search_payload = json.loads(results[0].content)
    get_args = calls[1]["args"]
    assert any(r["path"] == get_args["path"] and r["startLine"] == get_args["from"] for r in search_payload["results"])
    assert fact in json.loads(results[1].content)["text"]
    assert fact in messages[-1].content and not messages[-1].tool_calls


def test_agent_full_loop(keyword_memory: MemoryIndex) -> None:
    langchain_agents = pytest.importorskip("langchain.agents")
    kit = ClawmemToolkit(memory=keyword_memory)
    agent = langchain_agents.create_agent(ScriptedRecallChatModel(), kit.get_tools(), system_prompt=kit.get_prompt())
    out = agent.invoke({"messages": [{"role": "user", "content": "When is my weekly 1:1 with Marco?"}]})
    _check_loop(out["messages"], "Thursdays at 15:00")
    assert "(Source: MEMORY.md#L19)" in out["messages"][-1].content


@pytest.mark.asyncio
async def test_agent_full_loop_async_chinese(hash_memory: MemoryIndex) -> None:
    langchain_agents = pytest.importorskip("langchain.agents")
    tools = create_memory_tools(hash_memory)
    agent = langchain_agents.create_agent(ScriptedRecallChatModel(), tools, system_prompt=memory_recall_prompt(tools))
    out = await agent.ainvoke({"messages": [{"role": "user", "content": "李伟建议把批处理任务迁移到哪里？"}]})
    _check_loop(out["messages"], "Dagster")


def test_scripted_model_says_it_checked_when_nothing_matches(keyword_memory: MemoryIndex) -> None:
    langchain_agents = pytest.importorskip("langchain.agents")
    agent = langchain_agents.create_agent(ScriptedRecallChatModel(), create_memory_tools(keyword_memory, include=["memory_search"]))
    out = agent.invoke({"messages": [{"role": "user", "content": "xylophone quasar"}]})
    assert out["messages"][-1].content == NOTHING_FOUND
    assert [m.name for m in out["messages"] if isinstance(m, ToolMessage)] == ["memory_search"]
