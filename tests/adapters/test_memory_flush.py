"""Pre-compaction memory flush in each framework: a conversation crossing the flush point leaves a dated
Markdown note that a later search finds; the memory_write tools."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator, Sequence

import pytest

pytest.importorskip("langchain")
pytest.importorskip("llama_index.core")

from langchain.agents import create_agent  # noqa: E402
from langchain_core.language_models import BaseChatModel  # noqa: E402
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.utils.function_calling import convert_to_openai_tool  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from llama_index.core.base.llms.types import ChatMessage, MessageRole  # noqa: E402
from llama_index.core.llms.mock import MockFunctionCallingLLM  # noqa: E402
from llama_index.core.memory import Memory  # noqa: E402

from clawmem_core import MemoryConfig, MemoryIndex  # noqa: E402
from clawmem_core.flush import SILENT_REPLY_TOKEN  # noqa: E402
from clawmem_core.tools import WRITE_ARGS_ACTION  # noqa: E402
from langchain_clawmem.memory_write import create_memory_write_tool as lc_write_tool  # noqa: E402
from langchain_clawmem.middleware import MemoryFlushMiddleware  # noqa: E402
from llama_index_clawmem.flush import ClawmemFlushBlock, archive_chat  # noqa: E402
from llama_index_clawmem.memory_write import create_memory_write_tool as li_write_tool  # noqa: E402

FILLER = "We walked through the quarterly roadmap, budget lines and hiring plans in some detail. " * 12
FACT = "remember: the Lisbon offsite is booked at Hotel Avenida for the 14th of May"


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[MemoryIndex]:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Memory\n\n- Dana prefers tea.\n", encoding="utf-8")
    index = MemoryIndex(ws, config=MemoryConfig(provider="none"), state_dir=tmp_path / "state")
    index.sync()
    yield index
    index.close()


def _today() -> str:
    return f"memory/{datetime.now():%Y-%m-%d}.md"


def _text(message: BaseMessage) -> str:
    return message.content if isinstance(message.content, str) else str(message.content)


class FlushingChatModel(BaseChatModel):
    """A scripted tool-calling chat model: on the flush prompt it calls ``memory_write`` with every user line
    that starts with ``remember:``, then answers ``NO_REPLY``; otherwise it acknowledges the user."""

    flush_turns: int = 0
    normal_turns: int = 0
    seen_tools: list = []

    @property
    def _llm_type(self) -> str:
        return "scripted-flush"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        names = [convert_to_openai_tool(t)["function"]["name"] for t in tools]
        return self.bind(tool_names=names)

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        self.seen_tools.append(tuple(kwargs.get("tool_names") or ()))
        last_user = max(i for i, m in enumerate(messages) if isinstance(m, HumanMessage))
        if "Pre-compaction memory flush" in _text(messages[last_user]):
            if not any(isinstance(m, ToolMessage) for m in messages[last_user + 1 :]):
                self.flush_turns += 1
                facts = [
                    "- " + line.split("remember:", 1)[1].strip()
                    for m in messages
                    if isinstance(m, HumanMessage)
                    for line in _text(m).splitlines()
                    if line.startswith("remember:")
                ]
                call = {"name": "memory_write", "args": {"text": "\n".join(facts)}, "id": f"flush_{self.flush_turns}", "type": "tool_call"}
                return ChatResult(generations=[ChatGeneration(message=AIMessage(content="", tool_calls=[call]))])
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content=SILENT_REPLY_TOKEN))])
        self.normal_turns += 1
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=f"Noted, turn {self.normal_turns}."))])


def _middleware(mem: MemoryIndex, **kwargs: Any) -> MemoryFlushMiddleware:
    # threshold = 3000 - 1000 - 1000 = 1000 tokens (about 4000 characters)
    return MemoryFlushMiddleware(mem, context_window=3000, reserve_tokens=1000, soft_threshold_tokens=1000, **kwargs)


# ------------------------------------------------------------------------------------------------------------
# LangChain
# ------------------------------------------------------------------------------------------------------------


def test_langchain_agent_flushes_once_and_the_note_is_searchable(mem: MemoryIndex) -> None:
    model = FlushingChatModel()
    flush = _middleware(mem)
    agent = create_agent(model, [], middleware=[flush], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t1"}}
    agent.invoke({"messages": [HumanMessage(f"{FACT}\n{FILLER}")]}, config)
    assert flush.flush_count == 0 and not (mem.workspace / _today()).exists()
    for _ in range(6):
        state = agent.invoke({"messages": [HumanMessage(FILLER)]}, config)
    assert flush.flush_count == 1 and model.flush_turns == 1  # once per cycle
    note = (mem.workspace / _today()).read_text(encoding="utf-8")
    assert "Lisbon offsite is booked at Hotel Avenida" in note
    hits = mem.search("Lisbon offsite Hotel Avenida")
    assert hits and hits[0].path == _today()
    # Silent: the flush turn left nothing in the conversation, and the flush turn only saw memory_write.
    texts = [_text(m) for m in state["messages"]]
    assert not any("Pre-compaction" in t or t == SILENT_REPLY_TOKEN for t in texts)
    assert not any(isinstance(m, ToolMessage) for m in state["messages"])
    assert ("memory_write",) in model.seen_tools
    assert all("memory_write" in names for names in model.seen_tools)  # exposed in normal turns too


def test_langchain_new_cycle_after_compaction_and_per_thread(mem: MemoryIndex) -> None:
    model = FlushingChatModel()
    flush = _middleware(mem)
    agent = create_agent(model, [], middleware=[flush])
    long_history = [HumanMessage(f"{FACT}\n{FILLER}"), AIMessage("ok"), HumanMessage(FILLER), AIMessage("ok"), HumanMessage(FILLER * 2)]
    agent.invoke({"messages": long_history})
    agent.invoke({"messages": long_history})
    assert flush.flush_count == 1
    # The history was compacted (it falls back below the flush point): a new cycle begins.
    agent.invoke({"messages": [HumanMessage("short summary of before")]})
    agent.invoke({"messages": long_history})
    assert flush.flush_count == 2
    # Explicit compaction also starts a new cycle; another thread has its own.
    flush.mark_compacted()
    agent.invoke({"messages": long_history})
    assert flush.flush_count == 3
    agent.invoke({"messages": long_history}, {"configurable": {"thread_id": "other"}})
    assert flush.flush_count == 4
    lines = [ln for ln in (mem.workspace / _today()).read_text(encoding="utf-8").splitlines() if "Lisbon" in ln]
    assert len(lines) == 4  # appended, never overwritten


def test_langchain_no_flush_when_read_only_or_below_threshold(mem: MemoryIndex) -> None:
    model = FlushingChatModel()
    read_only = _middleware(mem, read_only=True)
    agent = create_agent(model, [], middleware=[read_only])
    agent.invoke({"messages": [HumanMessage(f"{FACT}\n{FILLER * 5}")]})
    assert read_only.flush_count == 0 and model.flush_turns == 0
    small = _middleware(mem)
    create_agent(model, [], middleware=[small]).invoke({"messages": [HumanMessage(FACT)]})
    assert small.flush_count == 0
    assert not (mem.workspace / _today()).exists()


def test_langchain_hidden_tool_and_async_agent(mem: MemoryIndex) -> None:
    import asyncio

    model = FlushingChatModel()
    flush = _middleware(mem, expose_tool=False)
    agent = create_agent(model, [], middleware=[flush])
    asyncio.run(agent.ainvoke({"messages": [HumanMessage(f"{FACT}\n{FILLER * 5}")]}))
    assert flush.flush_count == 1
    assert ("memory_write",) in model.seen_tools and () in model.seen_tools  # normal turn: no memory_write
    assert mem.search("Lisbon Avenida")[0].path == _today()


def test_langchain_archive_with_model_slug(mem: MemoryIndex) -> None:
    slugger = GenericFakeChatModel(messages=iter([AIMessage("Lisbon Offsite Planning")]))
    flush = _middleware(mem, slug_model=slugger)
    messages = [HumanMessage("Where is the offsite?"), AIMessage("Hotel Avenida in Lisbon, 14 May."), ToolMessage("x", tool_call_id="1")]
    out = flush.archive({"messages": messages})
    assert out is not None and re.fullmatch(r"memory/\d{4}-\d{2}-\d{2}-lisbon-offsite-planning\.md", out["path"])
    text = (mem.workspace / out["path"]).read_text(encoding="utf-8")
    assert "User: Where is the offsite?" in text and "Assistant: Hotel Avenida in Lisbon, 14 May." in text
    assert mem.search("offsite Avenida Lisbon")[0].path == out["path"]
    # Without a slug model: a timestamp; nothing to archive gives None.
    plain = _middleware(mem).archive([HumanMessage("Dana likes green tea")])
    assert plain is not None and re.fullmatch(r"memory/\d{4}-\d{2}-\d{2}-\d{6}(-\d+)?\.md", plain["path"])
    assert _middleware(mem).archive([]) is None


def test_langchain_memory_write_tool(mem: MemoryIndex) -> None:
    tool = lc_write_tool(mem)
    assert tool.name == "memory_write"
    msg = tool.invoke({"name": "memory_write", "args": {"text": "- Priya owns the billing migration"}, "id": "c1", "type": "tool_call"})
    payload = json.loads(msg.content)
    assert payload == msg.artifact and payload["path"] == _today() and payload["startLine"] == payload["endLine"]
    assert mem.search("Priya billing migration")[0].path == _today()
    long_term = json.loads(tool.invoke({"text": "- Dana is vegetarian", "target": "long_term"}))
    assert long_term["path"] == "MEMORY.md" and long_term["startLine"] == 5
    assert json.loads(tool.invoke({"text": "   "})) == {"error": "note text is empty", "action": WRITE_ARGS_ACTION}
    bad = json.loads(tool.invoke({"text": "x", "target": "elsewhere"}))
    assert "disabled" not in bad and "target" in bad["error"] and bad["action"] == WRITE_ARGS_ACTION
    mem.close()
    closed = json.loads(tool.invoke({"text": "after close"}))
    assert closed["disabled"] is True


# ------------------------------------------------------------------------------------------------------------
# LlamaIndex
# ------------------------------------------------------------------------------------------------------------


def _li_messages(n: int) -> list[ChatMessage]:
    out = [ChatMessage(role=MessageRole.USER, content=f"{FACT}. {FILLER[:300]}")]
    out.append(ChatMessage(role=MessageRole.ASSISTANT, content="Noted the offsite."))
    for i in range(n):
        out.append(ChatMessage(role=MessageRole.USER, content=f"Question {i}: {FILLER[:300]}"))
        out.append(ChatMessage(role=MessageRole.ASSISTANT, content=f"Answer {i}."))
    return out


async def test_llama_index_memory_flush_writes_daily_note(mem: MemoryIndex) -> None:
    block = ClawmemFlushBlock(memory=mem)
    memory = Memory.from_defaults(
        session_id="dana", token_limit=400, chat_history_token_ratio=0.5, token_flush_size=100, memory_blocks=[block]
    )
    first_turn = _li_messages(0)
    await memory.aput_messages(first_turn)
    assert not (mem.workspace / _today()).exists()  # within the short-term limit: nothing flushed
    for message in _li_messages(6)[2:]:
        await memory.aput(message)
    assert block.written and block.written[0] == _today()
    note = (mem.workspace / _today()).read_text(encoding="utf-8")
    assert "User: remember: the Lisbon offsite is booked at Hotel Avenida" in note
    assert "## Conversation notes" in note
    hits = await mem.asearch("Lisbon offsite Hotel Avenida")
    assert hits and hits[0].path == _today()
    # The block injects nothing into the context.
    assert await block.aget(await memory.aget()) == ""


async def test_llama_index_flush_archive_mode_with_llm(mem: MemoryIndex) -> None:
    def respond(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        prompt = messages[-1].content or ""
        if prompt.startswith("Give a short slug"):
            return ChatMessage(role=MessageRole.ASSISTANT, content="offsite-plans")
        facts = re.findall(r"remember: ([^.\n]+)", prompt)
        return ChatMessage(role=MessageRole.ASSISTANT, content="\n".join(f"- {f}" for f in facts) or SILENT_REPLY_TOKEN)

    llm = MockFunctionCallingLLM(response_generator=respond)
    block = ClawmemFlushBlock(memory=mem, mode="archive", llm=llm)
    memory = Memory.from_defaults(
        session_id="s2", token_limit=400, chat_history_token_ratio=0.5, token_flush_size=100, memory_blocks=[block]
    )
    await memory.aput_messages(_li_messages(6))
    assert block.written, "the over-limit messages were flushed to the block"
    first = block.written[0]
    assert re.fullmatch(r"memory/\d{4}-\d{2}-\d{2}-offsite-plans\.md", first)
    text = (mem.workspace / first).read_text(encoding="utf-8")
    assert "- the Lisbon offsite is booked at Hotel Avenida for the 14th of May" in text
    assert "Question" not in text  # only the distilled memories
    assert (await mem.asearch("Lisbon Avenida offsite"))[0].path == first
    # A flush with nothing durable writes nothing.
    before = list(block.written)
    await block.aput([ChatMessage(role=MessageRole.USER, content="hello there")], from_short_term_memory=True)
    assert block.written == before


async def test_llama_index_archive_chat_and_write_tool(mem: MemoryIndex) -> None:
    path = await archive_chat(mem, _li_messages(1), slug="Dana Offsite")
    assert path is not None and path.endswith("-dana-offsite.md")
    assert (await mem.asearch("Hotel Avenida"))[0].path == path
    assert await archive_chat(mem, []) is None
    tool = li_write_tool(mem)
    assert tool.metadata.get_name() == "memory_write"
    out = tool.call(text="- Marco prefers Redis over Memcached")
    assert out.raw_output["path"] == _today() and json.loads(out.content) == out.raw_output
    assert mem.search("Marco Redis Memcached")[0].path == _today()
    aout = await tool.acall(text="- Priya is on leave in June", target="long_term")
    assert aout.raw_output["path"] == "MEMORY.md"
    bad = tool.call(text="x", target="nowhere")
    assert "disabled" not in bad.raw_output and "target" in bad.raw_output["error"]
    missing = tool.call()
    assert "disabled" not in missing.raw_output and "text" in missing.raw_output["error"]
