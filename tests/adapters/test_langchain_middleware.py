"""LangChain conventions through ``create_agent``: ``ClawmemMiddleware`` (tools, the Memory Recall section appended
to the user's own system message, auto-recall), ``source`` metadata, error tool messages and strict schemas."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain")

from langchain.agents import create_agent  # noqa: E402
from langchain_core.callbacks import BaseCallbackHandler  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langchain_core.utils.function_calling import convert_to_openai_tool  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402

from clawmem_core import MemoryIndex  # noqa: E402
from langchain_clawmem import (  # noqa: E402
    ClawmemMiddleware,
    ClawmemRetriever,
    create_memory_get_tool,
    create_memory_search_tool,
    create_memory_write_tool,
)
from langchain_clawmem.testing import ScriptedRecallChatModel  # noqa: E402

from .conftest import open_index  # noqa: E402
from .fakes import ScriptedToolModel, call  # noqa: E402

QUESTION = "When is my weekly 1:1 with Marco?"


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}."


def _system(model: ScriptedToolModel, index: int = 0) -> SystemMessage:
    first = model.calls[index][0]
    assert isinstance(first, SystemMessage)
    return first


# -- ClawmemMiddleware -----------------------------------------------------------------------------------------


def test_middleware_appends_recall_section_to_the_users_content_blocks(keyword_memory: MemoryIndex) -> None:
    model = ScriptedToolModel(script=[AIMessage("ok")])
    own = SystemMessage(content=[{"type": "text", "text": "You are Dana's assistant.", "cache_control": {"type": "ephemeral"}}])
    agent = create_agent(model, [get_weather], system_prompt=own, middleware=[ClawmemMiddleware(keyword_memory)])
    agent.invoke({"messages": [HumanMessage(QUESTION)]})
    blocks = _system(model).content
    assert isinstance(blocks, list) and blocks[0] == own.content[0]  # the user's block, cache_control kept
    assert blocks[1]["type"] == "text" and blocks[1]["text"].startswith("## Memory Recall")
    assert set(model.tools_seen[0]) == {"get_weather", "memory_search", "memory_get"}


def test_middleware_appends_to_a_string_prompt_and_can_add_memory_write(tmp_path: Path) -> None:
    mem = open_index(tmp_path)
    model = ScriptedToolModel(script=[AIMessage("ok")])
    agent = create_agent(model, [], system_prompt="You are Dana's assistant.", middleware=[ClawmemMiddleware(mem, write=True)])
    agent.invoke({"messages": [HumanMessage("hi")]})
    text = _system(model).content
    assert isinstance(text, str) and text.startswith("You are Dana's assistant.\n\n## Memory Recall")
    assert "memory_search" in text and "memory_get" in text
    assert set(model.tools_seen[0]) == {"memory_search", "memory_get", "memory_write"}
    # No prompt of the user's own: the section alone; the conversation state holds no system message.
    bare = ScriptedToolModel(script=[AIMessage("ok")])
    state = create_agent(bare, [], middleware=[ClawmemMiddleware(mem, include=["memory_search"])]).invoke(
        {"messages": [HumanMessage("hi")]}
    )
    assert _system(bare).content.startswith("## Memory Recall") and "memory_get" not in _system(bare).content
    assert not any(isinstance(m, SystemMessage) for m in state["messages"])
    mem.close()


def test_middleware_auto_recall_injects_top_snippets_for_the_latest_user_message(keyword_memory: MemoryIndex) -> None:
    model = ScriptedToolModel(script=[AIMessage("ok")])
    middleware = ClawmemMiddleware(keyword_memory, auto_recall=True, recall_max_results=2)
    agent = create_agent(model, [], system_prompt="Be brief.", middleware=[middleware], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "r"}}
    agent.invoke({"messages": [HumanMessage("What is the weather?")]}, config)
    agent.invoke({"messages": [HumanMessage(QUESTION)]}, config)
    top = keyword_memory.search(QUESTION, max_results=2)
    system = _system(model, 1).content
    assert "## Recalled memory" in system
    for hit in top:
        assert hit.snippet.strip() in system and f"Source: {hit.citation}" in system
    state = agent.get_state(config).values
    assert not any("Recalled memory" in str(m.content) for m in state["messages"])  # per request only
    with pytest.raises(ValueError):
        ClawmemMiddleware(keyword_memory, recall_max_results=0)


async def test_middleware_async_agent_answers_from_memory(keyword_memory: MemoryIndex) -> None:
    agent = create_agent(ScriptedRecallChatModel(), [], middleware=[ClawmemMiddleware(keyword_memory, auto_recall=True)])
    state = await agent.ainvoke({"messages": [HumanMessage(QUESTION)]})
    answer = state["messages"][-1]
    assert isinstance(answer, AIMessage) and "Source: MEMORY.md#L" in answer.text


# -- metadata, errors, schemas -----------------------------------------------------------------------------------


def test_documents_source_is_the_file_path(keyword_memory: MemoryIndex) -> None:
    docs = ClawmemRetriever(memory=keyword_memory).invoke("Priya Marco Porto Redis")
    assert docs
    for doc in docs:
        assert doc.metadata["source"] == doc.metadata["path"] and doc.metadata["source"].endswith(".md")
        assert doc.metadata["memory_source"] == "memory"


def test_error_payloads_are_error_tool_messages_in_the_agent(tmp_path: Path) -> None:
    mem = open_index(tmp_path)
    calls = [
        call("memory_search", {"query": "Marco", "maxResults": 0}, "c1"),
        call("memory_get", {"path": "../../etc/passwd"}, "c2"),
        call("memory_write", {"text": "x", "target": "nowhere"}, "c3"),
        call("memory_get", {"path": "MEMORY.md", "from": 1, "lines": 2}, "c4"),
        call("memory_search", {"query": 42}, "c5"),
    ]
    model = ScriptedToolModel(script=[AIMessage("", tool_calls=calls), AIMessage("done")])
    agent = create_agent(model, [], middleware=[ClawmemMiddleware(mem, write=True)])
    seen = ToolEnds()
    state = agent.invoke({"messages": [HumanMessage("go")]}, {"callbacks": [seen]})
    results = {m.tool_call_id: m for m in state["messages"] if isinstance(m, ToolMessage)}
    assert seen.statuses == {"c1": "error", "c2": "error", "c3": "error", "c4": "success", "c5": "error"}  # callbacks agree
    for bad in ("c1", "c2", "c3", "c5"):
        msg = results[bad]
        assert msg.status == "error", bad
        assert isinstance(msg.artifact, dict) and msg.artifact["error"], bad
        assert json.loads(msg.content) == msg.artifact
    assert "maxResults" in results["c1"].artifact["error"]
    assert results["c4"].status == "success" and results["c4"].artifact["text"]
    mem.close()


class ToolEnds(BaseCallbackHandler):
    """Records the status of each tool message as callbacks (tracers) receive it."""

    def __init__(self) -> None:
        self.statuses: dict[str, str] = {}

    def on_tool_end(self, output: Any, **kwargs: Any) -> None:
        if isinstance(output, ToolMessage):
            self.statuses[output.tool_call_id] = output.status


def _strict_ok(schema: dict[str, Any]) -> None:
    """OpenAI strict mode: every object lists all its properties as required and forbids others."""
    if schema.get("type") == "object" or "properties" in schema:
        assert schema.get("additionalProperties") is False, schema
        assert sorted(schema.get("required", [])) == sorted(schema.get("properties", {})), schema
        for sub in schema.get("properties", {}).values():
            _strict_ok(sub)
    for sub in schema.get("anyOf", []):
        _strict_ok(sub)


def test_schemas_have_bounds_and_are_valid_under_openai_strict_mode(keyword_memory: MemoryIndex) -> None:
    from openai.lib._pydantic import to_strict_json_schema

    tools = [create_memory_search_tool(keyword_memory), create_memory_get_tool(keyword_memory), create_memory_write_tool(keyword_memory)]
    for t in tools:
        strict = convert_to_openai_tool(t, strict=True)["function"]
        assert strict["strict"] is True
        _strict_ok(strict["parameters"])
        _strict_ok(to_strict_json_schema(t.args_schema))
    params = convert_to_openai_tool(tools[0])["function"]["parameters"]["properties"]
    integer = next(s for s in params["maxResults"]["anyOf"] if s.get("type") == "integer")
    assert integer["minimum"] == 1
    number = next(s for s in params["minScore"]["anyOf"] if s.get("type") == "number")
    assert (number["minimum"], number["maximum"]) == (0, 1)
