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
from langchain.agents.middleware import HumanInTheLoopMiddleware, SummarizationMiddleware  # noqa: E402
from langchain_core.language_models import BaseChatModel  # noqa: E402
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, RemoveMessage, ToolMessage  # noqa: E402
from langgraph.graph.message import REMOVE_ALL_MESSAGES  # noqa: E402
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
from langchain_clawmem.middleware import FLUSH_SOURCE, MemoryFlushMiddleware  # noqa: E402
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
    flush_inputs: list = []

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
                self.flush_inputs.append(list(messages))
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


def _middleware(mem: MemoryIndex, model: BaseChatModel, **kwargs: Any) -> MemoryFlushMiddleware:
    # threshold = 3000 - 1000 - 1000 = 1000 tokens (about 4000 characters)
    return MemoryFlushMiddleware(
        mem, model=model, context_window=3000, reserve_tokens=1000, soft_threshold_tokens=1000, **kwargs
    )


LONG_HISTORY = [HumanMessage(f"{FACT}\n{FILLER}"), AIMessage("ok"), HumanMessage(FILLER), AIMessage("ok"), HumanMessage(FILLER * 3)]


def _lisbon_lines(mem: MemoryIndex) -> list[str]:
    path = mem.workspace / _today()
    if not path.exists():
        return []
    return [ln for ln in path.read_text(encoding="utf-8").splitlines() if "Lisbon" in ln]


def test_langchain_agent_flushes_once_and_the_note_is_searchable(mem: MemoryIndex) -> None:
    model = FlushingChatModel()
    flush = _middleware(mem, model, expose_tool=True)
    agent = create_agent(model, [], middleware=[flush], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t1"}}
    agent.invoke({"messages": [HumanMessage(f"{FACT}\n{FILLER}")]}, config)
    assert model.flush_turns == 0 and not (mem.workspace / _today()).exists()
    for _ in range(6):
        state = agent.invoke({"messages": [HumanMessage(FILLER)]}, config)
    assert model.flush_turns == 1  # once per cycle
    note = (mem.workspace / _today()).read_text(encoding="utf-8")
    assert "Lisbon offsite is booked at Hotel Avenida" in note
    hits = mem.search("Lisbon offsite Hotel Avenida")
    assert hits and hits[0].path == _today()
    # Silent: the flush turn left nothing in the conversation, and the flush turn only saw memory_write.
    texts = [_text(m) for m in state["messages"]]
    assert not any("Pre-compaction" in t or t == SILENT_REPLY_TOKEN for t in texts)
    assert not any(isinstance(m, ToolMessage) for m in state["messages"])
    assert ("memory_write",) in model.seen_tools
    assert all("memory_write" in names for names in model.seen_tools)  # expose_tool=True: in normal turns too
    # The bookkeeping is agent state, checkpointed with the thread.
    assert state["memory_flush"] == {"compaction_count": 0, "flushed_at_compaction": 0}


def test_langchain_flush_bookkeeping_follows_the_thread_not_the_instance(mem: MemoryIndex) -> None:
    saver = InMemorySaver()
    config = {"configurable": {"thread_id": "shared"}}
    first_model = FlushingChatModel()
    first = create_agent(first_model, [], middleware=[_middleware(mem, first_model)], checkpointer=saver)
    first.invoke({"messages": LONG_HISTORY}, config)
    assert first_model.flush_turns == 1 and len(_lisbon_lines(mem)) == 1
    # A second worker (or the same service after a restart): new middleware and agent, same checkpointer.
    second_model = FlushingChatModel()
    second = create_agent(second_model, [], middleware=[_middleware(mem, second_model)], checkpointer=saver)
    second.invoke({"messages": [HumanMessage(FILLER)]}, config)
    assert second_model.flush_turns == 0 and len(_lisbon_lines(mem)) == 1  # no duplicate note
    # Another thread has its own cycle.
    second.invoke({"messages": LONG_HISTORY}, {"configurable": {"thread_id": "other"}})
    assert second_model.flush_turns == 1 and len(_lisbon_lines(mem)) == 2


def test_langchain_runs_without_checkpointer_do_not_share_a_cycle(mem: MemoryIndex) -> None:
    model = FlushingChatModel()
    agent = create_agent(model, [], middleware=[_middleware(mem, model)])
    agent.invoke({"messages": LONG_HISTORY})
    agent.invoke({"messages": LONG_HISTORY})  # an unrelated conversation: its own state, its own flush
    assert model.flush_turns == 2
    # The caller passing the returned state back continues that conversation's cycle.
    state = agent.invoke({"messages": LONG_HISTORY})
    state = agent.invoke({**state, "messages": [*state["messages"], HumanMessage(FILLER)]})
    assert model.flush_turns == 3


def test_langchain_new_cycle_after_compaction(mem: MemoryIndex) -> None:
    model = FlushingChatModel()
    agent = create_agent(model, [], middleware=[_middleware(mem, model)], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "c"}}
    agent.invoke({"messages": LONG_HISTORY}, config)
    agent.invoke({"messages": [HumanMessage(FILLER)]}, config)
    assert model.flush_turns == 1
    # The history was compacted (it falls back below the flush point): a new cycle begins.
    agent.update_state(config, {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), HumanMessage("short summary")]})
    state = agent.invoke({"messages": [HumanMessage("hi")]}, config)
    assert state["memory_flush"]["compaction_count"] == 1
    agent.invoke({"messages": LONG_HISTORY}, config)
    assert model.flush_turns == 2
    # Explicit compaction also starts a new cycle.
    agent.update_state(config, MemoryFlushMiddleware.compacted(agent.get_state(config).values))
    agent.invoke({"messages": [HumanMessage(FILLER)]}, config)
    assert model.flush_turns == 3
    assert len(_lisbon_lines(mem)) == 3  # appended, never overwritten


def test_langchain_flush_listed_before_summarization_sees_the_uncompacted_history(mem: MemoryIndex) -> None:
    model = FlushingChatModel()
    summarizer = GenericFakeChatModel(messages=iter([AIMessage("The user talked about plans.")] * 3))
    summarize = SummarizationMiddleware(summarizer, trigger=("tokens", 1200), keep=("messages", 2))
    agent = create_agent(model, [], middleware=[_middleware(mem, model), summarize], checkpointer=InMemorySaver())
    state = agent.invoke({"messages": LONG_HISTORY}, {"configurable": {"thread_id": "s"}})
    assert model.flush_turns == 1 and len(_lisbon_lines(mem)) == 1  # the fact from the first message
    assert not any(FACT in _text(m) for m in state["messages"])  # ...which the summary then replaced
    # Listed after SummarizationMiddleware, the flush only gets the summary and the kept messages.
    other = FlushingChatModel()
    summarizer2 = GenericFakeChatModel(messages=iter([AIMessage("The user talked about plans.")] * 3))
    late = create_agent(
        other, [], middleware=[SummarizationMiddleware(summarizer2, trigger=("tokens", 1200), keep=("messages", 2)), _middleware(mem, other)]
    )
    late.invoke({"messages": LONG_HISTORY})
    assert not any(FACT in _text(m) for seen in other.flush_inputs for m in seen)


def test_langchain_flush_is_an_internal_call_streams_can_filter(mem: MemoryIndex) -> None:
    model = FlushingChatModel()
    agent = create_agent(model, [], middleware=[_middleware(mem, model)], checkpointer=InMemorySaver())
    events = list(agent.stream({"messages": LONG_HISTORY}, {"configurable": {"thread_id": "st"}}, stream_mode="messages"))
    assert model.flush_turns == 1
    flush_events = [(m, meta) for m, meta in events if getattr(m, "tool_calls", None) or _text(m) == SILENT_REPLY_TOKEN]
    assert flush_events, "the flush turn's model calls are visible to callbacks"
    assert all(meta.get("lc_source") == FLUSH_SOURCE for _, meta in flush_events)
    answers = [m for m, meta in events if meta.get("lc_source") != FLUSH_SOURCE and isinstance(m, AIMessage)]
    assert [_text(m) for m in answers] == ["Noted, turn 1."]
    # LangChain's event stream (v3) leaves the tagged internal call out of run.messages.
    model2 = FlushingChatModel()
    agent2 = create_agent(model2, [], middleware=[_middleware(mem, model2)])
    streams = list(agent2.stream_events({"messages": LONG_HISTORY}, version="v3").messages)
    assert model2.flush_turns == 1
    assert [s.output_message.text for s in streams] == ["Noted, turn 1."]


def test_langchain_flush_writes_bypass_tool_middleware_as_documented(mem: MemoryIndex) -> None:
    model = FlushingChatModel()
    hitl = HumanInTheLoopMiddleware(interrupt_on={"memory_write": True})
    agent = create_agent(model, [], middleware=[_middleware(mem, model), hitl], checkpointer=InMemorySaver())
    state = agent.invoke({"messages": LONG_HISTORY}, {"configurable": {"thread_id": "h"}})
    assert "__interrupt__" not in state and len(_lisbon_lines(mem)) == 1


def test_langchain_no_flush_when_read_only_or_below_threshold(mem: MemoryIndex) -> None:
    model = FlushingChatModel()
    agent = create_agent(model, [], middleware=[_middleware(mem, model, read_only=True)])
    agent.invoke({"messages": [HumanMessage(f"{FACT}\n{FILLER * 5}")]})
    assert model.flush_turns == 0
    create_agent(model, [], middleware=[_middleware(mem, model)]).invoke({"messages": [HumanMessage(FACT)]})
    assert model.flush_turns == 0
    assert not (mem.workspace / _today()).exists()


def test_langchain_hidden_tool_and_async_agent(mem: MemoryIndex) -> None:
    import asyncio

    model = FlushingChatModel()
    agent = create_agent(model, [], middleware=[_middleware(mem, model, expose_tool=False)])
    state = asyncio.run(agent.ainvoke({"messages": [HumanMessage(f"{FACT}\n{FILLER * 5}")]}))
    assert model.flush_turns == 1 and state["memory_flush"]["flushed_at_compaction"] == 0
    assert ("memory_write",) in model.seen_tools and () in model.seen_tools  # normal turn: no memory_write
    assert mem.search("Lisbon Avenida")[0].path == _today()


def test_langchain_archive_with_model_slug(mem: MemoryIndex) -> None:
    slugger = GenericFakeChatModel(messages=iter([AIMessage("Lisbon Offsite Planning")]))
    flush = _middleware(mem, FlushingChatModel(), slug_model=slugger)
    messages = [HumanMessage("Where is the offsite?"), AIMessage("Hotel Avenida in Lisbon, 14 May."), ToolMessage("x", tool_call_id="1")]
    out = flush.archive({"messages": messages})
    assert out is not None and re.fullmatch(r"memory/\d{4}-\d{2}-\d{2}-lisbon-offsite-planning\.md", out["path"])
    text = (mem.workspace / out["path"]).read_text(encoding="utf-8")
    assert "User: Where is the offsite?" in text and "Assistant: Hotel Avenida in Lisbon, 14 May." in text
    assert mem.search("offsite Avenida Lisbon")[0].path == out["path"]
    # Without a slug model: a timestamp; nothing to archive gives None.
    plain = _middleware(mem, FlushingChatModel()).archive([HumanMessage("Dana likes green tea")])
    assert plain is not None and re.fullmatch(r"memory/\d{4}-\d{2}-\d{2}-\d{6}(-\d+)?\.md", plain["path"])
    assert _middleware(mem, FlushingChatModel()).archive([]) is None


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
