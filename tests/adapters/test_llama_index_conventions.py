"""LlamaIndex conventions through the framework's own machinery: ``Memory.from_defaults`` truncating the recall
block by priority and passing its ``session_id``, ``BaseToolSpec`` behaviour of ``ClawmemToolSpec``, node
metadata and relationships, and ``ToolOutput.is_error`` in a ``FunctionAgent`` run."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.agent.workflow import FunctionAgent, ToolCallResult  # noqa: E402
from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock  # noqa: E402
from llama_index.core.llms.mock import MockFunctionCallingLLM  # noqa: E402
from llama_index.core.memory import Memory  # noqa: E402
from llama_index.core.schema import MetadataMode, NodeRelationship  # noqa: E402
from llama_index.core.tools import ToolMetadata  # noqa: E402
from llama_index.core.utils import get_tokenizer  # noqa: E402

from clawmem_core import MemoryIndex  # noqa: E402
from clawmem_core.tool_schemas import MemorySearchInput  # noqa: E402
from llama_index_clawmem import ClawmemMemoryBlock, ClawmemRetriever, ClawmemToolSpec  # noqa: E402
from llama_index_clawmem.testing import ScriptedRecallLLM  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince20"),
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince211"),
]

QUESTION = "When is my weekly 1:1 with Marco?"
BROAD = "Priya Marco Porto Redis"


def _tokens(text: str) -> int:
    return len(get_tokenizer()(text))


def _recall_text(system: str) -> str:
    return system.split("<clawmem_recall>\n", 1)[1].split("\n</clawmem_recall>", 1)[0]


# -- 6. the recall block and Memory's budget ----------------------------------------------------------------------


async def test_memory_truncates_the_block_lowest_scoring_snippet_first(keyword_memory: MemoryIndex) -> None:
    hits = keyword_memory.search(BROAD, max_results=4, min_score=0.0)
    assert len(hits) == 4 and hits[0].score > hits[-1].score
    # max_tokens past the whole recall: only Memory's token_limit (its atruncate request) limits the block here.
    block = ClawmemMemoryBlock(memory=keyword_memory, max_results=4, min_score=0.0, max_tokens=10_000)
    assert block.priority > 0  # Memory may truncate it (priority 0 would never be truncated)
    full = await block.aget([ChatMessage(role=MessageRole.USER, content=BROAD)], session_id="dana")
    memory = Memory.from_defaults(session_id="dana", token_limit=_tokens(full) - 5, memory_blocks=[block])
    context = await memory.aget(input=BROAD)
    system = context[0].content
    assert context[0].role == MessageRole.SYSTEM
    assert hits[0].snippet.strip() in system and hits[1].snippet.strip() in system
    assert hits[-1].snippet.strip() not in system  # the lowest-scoring snippet went first
    assert _tokens(_recall_text(system)) <= _tokens(full) - 5
    # A budget too small for any snippet: the block is left out, the conversation still works.
    tiny = Memory.from_defaults(session_id="dana", token_limit=3, memory_blocks=[block])
    assert all("Source:" not in (m.content or "") for m in await tiny.aget(input=BROAD))


async def test_block_uses_the_session_id_memory_passes_for_citations(keyword_memory: MemoryIndex) -> None:
    block = ClawmemMemoryBlock(memory=keyword_memory, max_results=2)
    direct = await Memory.from_defaults(session_id="dana", memory_blocks=[block]).aget(input=QUESTION)
    assert "Source: MEMORY.md#L" in direct[0].content
    group = await Memory.from_defaults(session_id="agent:main:group:42", memory_blocks=[block]).aget(input=QUESTION)
    assert "Marco" in group[0].content and "Source:" not in group[0].content
    # An explicit session_key wins over Memory's session id.
    keyed = ClawmemMemoryBlock(memory=keyword_memory, max_results=2, session_key="dana")
    assert "Source:" in (await Memory.from_defaults(session_id="agent:main:group:42", memory_blocks=[keyed]).aget(input=QUESTION))[0].content


# -- 7. a real BaseToolSpec ---------------------------------------------------------------------------------------


def test_tool_spec_behaves_like_any_tool_spec(keyword_memory: MemoryIndex) -> None:
    spec = ClawmemToolSpec(keyword_memory)
    for name in ("memory_search", "amemory_search", "memory_get", "amemory_get"):
        assert getattr(spec, name).__doc__
    tools = spec.to_tool_list()
    assert [t.metadata.get_name() for t in tools] == ["memory_search", "memory_get"]
    assert tools[0].metadata.fn_schema is MemorySearchInput and "maxResults" in tools[0].metadata.fn_schema_str
    out = tools[0].call(query=QUESTION, maxResults=1)
    assert out.raw_output["results"][0]["path"] == "MEMORY.md" and not out.is_error
    only_get = spec.to_tool_list(spec_functions=["memory_get"])
    assert [t.metadata.get_name() for t in only_get] == ["memory_get"]
    assert only_get[0].call(path="MEMORY.md", **{"from": 19, "lines": 1}).raw_output["text"].startswith("- Marco")
    renamed = spec.to_tool_list(
        spec_functions=[("memory_search", "amemory_search")],
        func_to_metadata_mapping={"memory_search": ToolMetadata(name="recall", description="Search notes.", fn_schema=MemorySearchInput)},
    )
    assert [(t.metadata.name, t.metadata.description) for t in renamed] == [("recall", "Search notes.")]
    assert renamed[0].call(query="Porto").raw_output["results"]
    assert "## Memory Recall" in spec.recall_prompt() and "memory_get" not in spec.recall_prompt(["memory_search"])


async def test_tool_spec_async_list_drives_a_function_agent(keyword_memory: MemoryIndex) -> None:
    spec = ClawmemToolSpec(keyword_memory)
    tools = await spec.to_tool_list_async()
    assert (await tools[1].acall(path="MEMORY.md", **{"from": 19, "lines": 1})).raw_output["from"] == 19
    agent = FunctionAgent(tools=tools, llm=ScriptedRecallLLM(), system_prompt=spec.recall_prompt())
    answer = str(await agent.run(user_msg=QUESTION))
    assert "Thursdays at 15:00" in answer and "MEMORY.md#L" in answer


# -- 8. nodes and errors ------------------------------------------------------------------------------------------


def test_nodes_name_their_file(keyword_memory: MemoryIndex) -> None:
    nodes = ClawmemRetriever(keyword_memory).retrieve(BROAD)
    assert nodes
    for n in nodes:
        md = n.node.metadata
        path = md["path"]
        assert md["file_path"] == str(keyword_memory.workspace / path) and Path(md["file_path"]).is_file()
        assert md["file_name"] == Path(path).name and md["memory_source"] == "memory"
        assert n.node.ref_doc_id == path and n.node.source_node.node_id == path
        assert n.node.relationships[NodeRelationship.SOURCE].node_id == path
        llm_text = n.node.get_content(metadata_mode=MetadataMode.LLM)
        assert "file_path" not in llm_text and f"citation: {md['citation']}" in llm_text


async def test_error_payloads_set_is_error_in_an_agent_run(keyword_memory: MemoryIndex) -> None:
    def respond(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        if any(m.role == MessageRole.TOOL for m in messages):
            return ChatMessage(role=MessageRole.ASSISTANT, content="I could not read that file.")
        calls = [
            ToolCallBlock(tool_call_id="c1", tool_name="memory_get", tool_kwargs={"path": "../secrets.md"}),
            ToolCallBlock(tool_call_id="c2", tool_name="memory_search", tool_kwargs={"query": "Porto", "maxResults": 0}),
            ToolCallBlock(tool_call_id="c3", tool_name="memory_search", tool_kwargs={"query": "Porto"}),
        ]
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=calls)

    agent = FunctionAgent(tools=ClawmemToolSpec(keyword_memory).to_tool_list(), llm=MockFunctionCallingLLM(response_generator=respond))
    handler = agent.run(user_msg="read ../secrets.md")
    results = {}
    async for event in handler.stream_events():
        if isinstance(event, ToolCallResult):
            results[event.tool_id] = event.tool_output
    await handler
    assert results["c1"].is_error and "error" in results["c1"].raw_output
    assert results["c2"].is_error and "maxResults" in results["c2"].raw_output["error"]
    assert not results["c3"].is_error and results["c3"].raw_output["results"]
