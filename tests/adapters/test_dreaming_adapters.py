"""Dreaming through the adapters: LangChain chat models and LlamaIndex LLMs as the promotion model, consolidation
scheduled off the request path, every search surface recorded in the recall log (with its session), clawmem's
injected recall recognised as such, and trigger recall. Real index, real files, scripted models (no key)."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import pytest

pytest.importorskip("langchain")
pytest.importorskip("llama_index.core")

from langchain.agents import create_agent  # noqa: E402
from langchain_core.language_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from llama_index.core.base.llms.types import (  # noqa: E402
    ChatMessage,
    ChatResponse,
    CompletionResponse,
    LLMMetadata,
    MessageRole,
    TextBlock,
)
from llama_index.core.llms import CustomLLM, MockLLM  # noqa: E402
from llama_index.core.memory import Memory  # noqa: E402

from clawmem_core import MemoryConfig, MemoryIndex  # noqa: E402
from clawmem_core.dreaming import has_injected, open_store, promote, status, strip_injected  # noqa: E402
from clawmem_core.dreaming.events import RecallEvent  # noqa: E402
from clawmem_core.index_parts.recall import recall_log_path  # noqa: E402
from langchain_clawmem import ClawmemRetriever as LcRetriever  # noqa: E402
from langchain_clawmem import ClawmemStore  # noqa: E402
from langchain_clawmem.consolidation import ConsolidationMiddleware, chat_model_caller  # noqa: E402
from langchain_clawmem.middleware import ClawmemMiddleware  # noqa: E402
from llama_index_clawmem import ClawmemMemoryBlock, ClawmemToolSpec  # noqa: E402
from llama_index_clawmem import ClawmemRetriever as LiRetriever  # noqa: E402
from llama_index_clawmem.consolidation import ClawmemConsolidationBlock, consolidation_scheduler, llm_caller  # noqa: E402

from .fakes import ScriptedToolModel, call  # noqa: E402

REPO = Path(__file__).resolve().parents[2]

NOTES = {
    "memory/2026-11-02.md": "- The home gateway listens on loopback only, for network safety.\n",
    "memory/2026-11-03.md": "- Dana prefers oat milk in her coffee and tea.\n",
    "memory/2026-11-04.md": "网关只在本机回环地址上监听，保证家庭网络安全。\n",
}
PERSON = ("# Memory\n\n- Dana's cat is called Miso.\n- 用户喜欢简洁的回答。\n"
          "- The home gateway listens on all interfaces.\n- Dana drinks her coffee black.\n")
GATEWAY = ("gateway loopback", "loopback network safety")
PROMOTED_GATEWAY = "Source: memory/2026-11-02.md#L1-L1"


def make_mem(tmp_path: Path, memory_text: str | bytes = PERSON, **dreaming: Any) -> MemoryIndex:
    root = tmp_path / "ws"
    for rel, text in NOTES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    data = memory_text if isinstance(memory_text, bytes) else memory_text.encode("utf-8")
    (root / "MEMORY.md").write_bytes(data)
    gates = {"min_score": 0.0, "min_recall_count": 2, "min_unique_queries": 2, **dreaming}
    cfg = MemoryConfig.from_dict({"provider": "none", "dreaming": gates})
    mem = MemoryIndex(root, config=cfg, state_dir=tmp_path / "state")
    mem.sync()
    return mem


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[MemoryIndex]:
    m = make_mem(tmp_path)
    yield m
    m.close()


def memory_md(mem: MemoryIndex) -> str:
    return (Path(mem.workspace) / "MEMORY.md").read_text(encoding="utf-8")


def events(mem: MemoryIndex) -> list[RecallEvent]:
    """The agent's recall log as written (``status`` flushes what the index buffered)."""
    status(mem)
    store = open_store(recall_log_path(Path(mem.store_path)))
    try:
        return list(store.events(mem.agent_id))
    finally:
        store.close()


def recall_gateway(mem: MemoryIndex) -> None:
    for q in GATEWAY:
        assert mem.search(q, max_results=1)[0].path == "memory/2026-11-02.md"


def _ids(prompt: str) -> dict[str, Any]:
    return json.loads(prompt[prompt.index("\n{\n") + 1 :])


def _cid(prompt: str, needle: str) -> str:
    return next(c["id"] for c in _ids(prompt)["candidates"] if needle in c["text"])


def _eid(prompt: str, needle: str) -> str:
    return next(e["id"] for e in _ids(prompt)["entries"] if needle in e["text"])


def decisions(op: str) -> Callable[[str], str]:
    """A scripted answer deciding ``op`` for the gateway candidate against the prompt's own ids."""

    def answer(prompt: str) -> str:
        c = _cid(prompt, "loopback")
        d: dict[str, Any] = {"op": op, "candidate": c}
        if op == "merge":
            d.update(entry=_eid(prompt, "all interfaces"),
                     text="The home gateway listens on all interfaces. The home gateway listens on loopback only, "
                          "for network safety.")
        elif op == "supersede":
            d["entry"] = _eid(prompt, "all interfaces")
        elif op == "skip":
            d["reason"] = "not durable"
        return json.dumps({"decisions": [d]})

    return answer


# ---------------------------------------------------------------------------------------------------------------
# 1. Any LangChain chat model / LlamaIndex LLM as the promotion model
# ---------------------------------------------------------------------------------------------------------------


class PromptScriptedChatModel(GenericFakeChatModel):
    """A LangChain chat model whose answer is a function of the prompt (list content when ``blocks``)."""

    answer: Any = None
    blocks: bool = False
    seen: list = []

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        from langchain_core.outputs import ChatGeneration, ChatResult

        self.seen.append((list(messages), kwargs))
        text = self.answer(messages[-1].content)
        content: Any = [{"type": "text", "text": text[:7]}, {"type": "text", "text": text[7:]}] if self.blocks else text
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=content))])


@pytest.mark.parametrize("op", ["add", "merge", "supersede", "skip"])
@pytest.mark.parametrize("blocks", [False, True], ids=["text", "content-blocks"])
def test_langchain_chat_model_decides(mem: MemoryIndex, op: str, blocks: bool) -> None:
    recall_gateway(mem)
    model = PromptScriptedChatModel(messages=iter([]), answer=decisions(op), blocks=blocks, seen=[])
    report = promote(mem, model=chat_model_caller(model), apply=True)
    assert report.mode == "model" and report.fallback_reason is None, report.to_dict()
    (messages, kwargs), = model.seen
    assert [type(m) for m in messages] == [HumanMessage] and "tools" not in kwargs  # one tool-free call
    text = memory_md(mem)
    if op == "skip":
        assert text == PERSON and not report.changed
        return
    assert PROMOTED_GATEWAY in text
    assert ("listens on all interfaces.\n" in text) is (op == "add")
    assert (len(report.added), len(report.merged), len(report.superseded)) == {
        "add": (1, 0, 0), "merge": (0, 1, 0), "supersede": (0, 0, 1)}[op]
    assert text.startswith("# Memory\n\n- Dana's cat is called Miso.\n- 用户喜欢简洁的回答。\n")


HOSTILE = {
    "junk": lambda prompt: "Sure! I think the gateway note is great, add it.",
    "shell": lambda prompt: '{"decisions": [{"op": "add", "candidate": "C1", "text": "rm -rf ~"}]}',
    "invented": lambda prompt: '{"decisions": [{"op": "merge", "candidate": "C9", "entry": "E1", "text": "x"}]}',
    "delete-most": lambda prompt: json.dumps({"decisions": [
        {"op": "supersede", "candidate": _cid(prompt, "loopback"), "entry": _eid(prompt, "Miso")}]}),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_hostile_chat_model_falls_back_to_append_only(tmp_path: Path, kind: str) -> None:
    # MEMORY.md of two entries: superseding one loses half of them (over the 25% limit)
    mem = make_mem(tmp_path, "- Dana's cat is called Miso.\n- The home gateway listens on all interfaces.\n")
    try:
        recall_gateway(mem)
        model = PromptScriptedChatModel(messages=iter([]), answer=HOSTILE[kind], seen=[])
        report = promote(mem, model=chat_model_caller(model), apply=True)
        assert report.mode == "append" and report.fallback_reason, report.to_dict()
        text = memory_md(mem)
        assert text.startswith("- Dana's cat is called Miso.\n- The home gateway listens on all interfaces.\n")
        assert PROMOTED_GATEWAY in text and "rm -rf" not in text
    finally:
        mem.close()


def test_generic_fake_chat_model_and_a_failing_one(mem: MemoryIndex) -> None:
    recall_gateway(mem)
    fake = GenericFakeChatModel(messages=iter([AIMessage(content="```json\n{\"decisions\": []}\n```")]))
    report = promote(mem, model=chat_model_caller(fake), apply=False)
    assert report.mode == "model" and report.fallback_reason is None and not report.changed

    class Broken(GenericFakeChatModel):
        def _generate(self, *a: Any, **k: Any) -> Any:
            raise ConnectionError("provider down")

    report = promote(mem, model=chat_model_caller(Broken(messages=iter([]))), apply=False)
    assert report.mode == "append" and "provider down" in (report.fallback_reason or "")
    assert memory_md(mem) == PERSON  # a preview writes nothing


class ScriptedLLM(CustomLLM):
    """A LlamaIndex LLM answering with a function of the prompt, by ``complete`` or (``chat_model``) ``chat``."""

    answer: Any = None
    chat_model: bool = False
    calls: list = []

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(is_chat_model=self.chat_model)

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self.calls.append(("complete", prompt))
        return CompletionResponse(text=self.answer(prompt))

    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        raise NotImplementedError

    def chat(self, messages: Any, **kwargs: Any) -> ChatResponse:
        self.calls.append(("chat", messages))
        text = self.answer(messages[-1].content)
        blocks = [TextBlock(text=text[:5]), TextBlock(text=text[5:])]
        return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, blocks=blocks))


@pytest.mark.parametrize("op", ["add", "merge", "supersede", "skip"])
@pytest.mark.parametrize("chat_model", [False, True], ids=["complete", "chat"])
def test_llama_index_llm_decides(mem: MemoryIndex, op: str, chat_model: bool) -> None:
    recall_gateway(mem)
    llm = ScriptedLLM(answer=decisions(op), chat_model=chat_model, calls=[])
    report = promote(mem, model=llm_caller(llm), apply=True)
    assert report.mode == "model" and report.fallback_reason is None, report.to_dict()
    assert [c[0] for c in llm.calls] == ["chat" if chat_model else "complete"]
    assert (PROMOTED_GATEWAY in memory_md(mem)) is (op != "skip")


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_hostile_llama_index_llm_falls_back(tmp_path: Path, kind: str) -> None:
    mem = make_mem(tmp_path, "- Dana's cat is called Miso.\n- The home gateway listens on all interfaces.\n")
    try:
        recall_gateway(mem)
        report = promote(mem, model=llm_caller(ScriptedLLM(answer=HOSTILE[kind], calls=[])), apply=True)
        assert report.mode == "append" and report.fallback_reason
        assert memory_md(mem).startswith("- Dana's cat is called Miso.\n- The home gateway listens on all interfaces.\n")
    finally:
        mem.close()


def test_mock_llm_echo_is_junk_and_falls_back(mem: MemoryIndex) -> None:
    recall_gateway(mem)
    report = promote(mem, model=llm_caller(MockLLM()), apply=True)  # MockLLM echoes the prompt: not decisions
    assert report.mode == "append" and report.fallback_reason and PROMOTED_GATEWAY in memory_md(mem)


def test_a_chat_model_given_as_is_has_its_content_blocks_joined(mem: MemoryIndex) -> None:
    recall_gateway(mem)
    model = PromptScriptedChatModel(messages=iter([]), answer=decisions("add"), blocks=True, seen=[])
    report = promote(mem, model=model, apply=False)  # the core calls .invoke itself
    assert report.mode == "model" and report.fallback_reason is None and report.added


def test_the_packages_export_the_schedulers() -> None:
    import langchain_clawmem
    import llama_index_clawmem

    assert langchain_clawmem.ConsolidationMiddleware is ConsolidationMiddleware
    assert llama_index_clawmem.ClawmemConsolidationBlock is ClawmemConsolidationBlock


def test_a_non_model_is_refused() -> None:
    with pytest.raises(TypeError):
        chat_model_caller(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        llm_caller(42)


# ---------------------------------------------------------------------------------------------------------------
# 2. Consolidation scheduled off the request path
# ---------------------------------------------------------------------------------------------------------------


def _agent(mem: MemoryIndex, *extra: Any) -> Any:
    model = ScriptedToolModel(script=[AIMessage(content="ok") for _ in range(20)])  # a new message each turn
    return create_agent(model, [], middleware=[ClawmemMiddleware(mem, auto_recall=True, recall_max_results=1), *extra],
                        checkpointer=InMemorySaver())


def test_langchain_consolidation_every_n_turns(mem: MemoryIndex) -> None:
    dreaming = ConsolidationMiddleware(mem, every_n_turns=3)
    agent = _agent(mem, dreaming)
    config = {"configurable": {"thread_id": "t1"}}
    for turn, question in enumerate(["gateway loopback?", "loopback network safety?", "anything else?"], 1):
        state = agent.invoke({"messages": [HumanMessage(question)]}, config)
        assert state["messages"][-1].content == "ok"  # the reply is the model's, unaffected
        dreaming.wait()
        if turn < 3:  # the gates already pass after turn 2: still nothing before the third turn
            assert dreaming.scheduler.runs == 0 and memory_md(mem) == PERSON
    assert dreaming.scheduler.runs == 1
    assert dreaming.scheduler.last_error is None and dreaming.scheduler.last_report.applied
    text = memory_md(mem)
    assert text.startswith(PERSON) and PROMOTED_GATEWAY in text
    assert "Deep Sleep" in (Path(mem.workspace) / "DREAMS.md").read_text(encoding="utf-8")
    dreaming.close()
    assert not dreaming.scheduler.turn_finished()  # closed: nothing more is scheduled


def test_langchain_consolidation_uses_the_chat_model(mem: MemoryIndex) -> None:
    model = PromptScriptedChatModel(messages=iter([]), answer=decisions("supersede"), seen=[])
    dreaming = ConsolidationMiddleware(mem, model=model, every_n_turns=2)
    agent = _agent(mem, dreaming)
    for q in ("gateway loopback?", "loopback network safety?"):
        agent.invoke({"messages": [HumanMessage(q)]}, {"configurable": {"thread_id": "t2"}})
    dreaming.close()
    assert dreaming.scheduler.last_report.mode == "model"
    assert "all interfaces" not in memory_md(mem) and PROMOTED_GATEWAY in memory_md(mem)


def test_a_failing_consolidation_is_logged_and_the_agent_is_fine(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    bad = b"- caf\xe9 au lait\n"  # MEMORY.md not UTF-8: promotion raises
    mem = make_mem(tmp_path, bad)
    try:
        dreaming = ConsolidationMiddleware(mem, every_n_turns=1)
        agent = _agent(mem, dreaming)
        with caplog.at_level(logging.WARNING, logger="clawmem"):
            state = agent.invoke({"messages": [HumanMessage("gateway loopback?")]}, {"configurable": {"thread_id": "x"}})
            dreaming.close()
        assert state["messages"][-1].content == "ok"
        assert dreaming.scheduler.runs == 1 and dreaming.scheduler.last_error is not None
        assert any("memory consolidation failed" in r.getMessage() for r in caplog.records)
        assert (Path(mem.workspace) / "MEMORY.md").read_bytes() == bad
    finally:
        mem.close()


async def test_langchain_consolidation_async_agent(mem: MemoryIndex) -> None:
    dreaming = ConsolidationMiddleware(mem, every_n_turns=2)
    agent = _agent(mem, dreaming)
    for q in GATEWAY:
        state = await agent.ainvoke({"messages": [HumanMessage(q)]}, {"configurable": {"thread_id": "a"}})
        assert state["messages"][-1].content == "ok"
    dreaming.close()
    assert PROMOTED_GATEWAY in memory_md(mem)


class Gate:
    """A promotion model that blocks until released (a slow consolidation)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, prompt: str) -> str:
        self.entered.set()
        assert self.release.wait(30)
        return "junk"


def test_one_consolidation_at_a_time_per_index(mem: MemoryIndex) -> None:
    recall_gateway(mem)
    gate = Gate()
    first = ConsolidationMiddleware(mem, model=gate, every_n_turns=1)
    second = ConsolidationMiddleware(mem, every_n_turns=1)
    assert first.consolidate_now()
    assert gate.entered.wait(30)
    assert not first.consolidate_now() and not second.consolidate_now()  # one is running for this index
    gate.release.set()
    first.close()
    second.close()
    assert first.scheduler.runs == 1 and second.scheduler.runs == 0
    assert first.scheduler.last_report.mode == "append"  # junk fell back
    assert PROMOTED_GATEWAY in memory_md(mem)


def test_the_turn_does_not_wait_for_the_consolidation(mem: MemoryIndex) -> None:
    recall_gateway(mem)
    gate = Gate()
    dreaming = ConsolidationMiddleware(mem, model=gate, every_n_turns=1)
    state = _agent(mem, dreaming).invoke({"messages": [HumanMessage("hello")]}, {"configurable": {"thread_id": "w"}})
    assert state["messages"][-1].content == "ok"  # answered while the consolidation is still blocked
    assert gate.entered.wait(30) and not dreaming.wait(0) and memory_md(mem) == PERSON
    gate.release.set()
    dreaming.close()
    assert PROMOTED_GATEWAY in memory_md(mem)


def test_busy_elsewhere_is_logged_not_raised(mem: MemoryIndex, caplog: pytest.LogCaptureFixture) -> None:
    recall_gateway(mem)
    status(mem)
    store = open_store(recall_log_path(Path(mem.store_path)))
    try:
        with store.consolidation_lock(mem.agent_id), caplog.at_level(logging.INFO, logger="clawmem"):
            dreaming = ConsolidationMiddleware(mem, every_n_turns=1)
            assert dreaming.consolidate_now()
            dreaming.close()
    finally:
        store.close()
    assert dreaming.scheduler.last_error is None and dreaming.scheduler.last_report is None
    assert any("consolidation skipped" in r.getMessage() for r in caplog.records)
    assert memory_md(mem) == PERSON


class FakeTimer:
    """An idle timer the test fires by hand."""

    made: list["FakeTimer"] = []

    def __init__(self, seconds: float, fn: Callable[[], None]) -> None:
        self.seconds, self.fn, self.cancelled, self.started = seconds, fn, False, False
        FakeTimer.made.append(self)

    def start(self) -> None:
        self.started = True

    def cancel(self) -> None:
        self.cancelled = True

    def fire(self) -> None:
        if not self.cancelled:
            self.fn()


def test_consolidation_after_idle(mem: MemoryIndex) -> None:
    FakeTimer.made = []
    dreaming = ConsolidationMiddleware(mem, after_idle_seconds=600, timer_factory=FakeTimer)
    agent = _agent(mem, dreaming)
    for q in GATEWAY:
        agent.invoke({"messages": [HumanMessage(q)]}, {"configurable": {"thread_id": "idle"}})
    first, second = FakeTimer.made
    assert first.cancelled and second.started and not second.cancelled and second.seconds == 600
    first.fire()  # a timer re-armed by a later turn does nothing
    assert dreaming.scheduler.runs == 0 and memory_md(mem) == PERSON
    second.fire()
    dreaming.wait()
    assert dreaming.scheduler.runs == 1 and PROMOTED_GATEWAY in memory_md(mem)
    agent.invoke({"messages": [HumanMessage("again")]}, {"configurable": {"thread_id": "idle"}})
    dreaming.close()
    assert FakeTimer.made[-1].cancelled  # close cancels the armed timer


def test_middleware_needs_a_schedule(mem: MemoryIndex) -> None:
    with pytest.raises(ValueError):
        ConsolidationMiddleware(mem)
    with pytest.raises(ValueError):
        ConsolidationMiddleware(mem, every_n_turns=0)


async def _llama_turn(memory: Memory, text: str) -> list[ChatMessage]:
    await memory.aput(ChatMessage(role=MessageRole.USER, content=text))
    got = await memory.aget()
    await memory.aput(ChatMessage(role=MessageRole.ASSISTANT, content="ok"))
    return got


async def test_llama_index_consolidation_block_every_n_turns(mem: MemoryIndex) -> None:
    llm = ScriptedLLM(answer=decisions("add"), calls=[])
    dreaming = ClawmemConsolidationBlock(memory=mem, llm=llm, every_n_turns=2)
    memory = Memory.from_defaults(session_id="s1", memory_blocks=[ClawmemMemoryBlock(memory=mem, max_results=1), dreaming])
    for turn, q in enumerate([*GATEWAY, "and then?"], 1):
        got = await _llama_turn(memory, q)
        assert "</clawmem_consolidation>" not in str(got[0].content)  # the block injects nothing
        dreaming.wait()
        if turn < 3:  # turn 2 is counted as finished when turn 3 begins
            assert dreaming.scheduler.runs == 0 and memory_md(mem) == PERSON
    dreaming.close()
    assert dreaming.scheduler.runs == 1 and dreaming.scheduler.last_report.mode == "model"
    assert PROMOTED_GATEWAY in memory_md(mem)


def test_llama_index_scheduler_outside_memory(mem: MemoryIndex, caplog: pytest.LogCaptureFixture) -> None:
    recall_gateway(mem)

    def boom(prompt: str) -> str:
        raise RuntimeError("model down")

    sched = consolidation_scheduler(mem, llm=boom, every_n_turns=1)
    assert sched.turn_finished()
    sched.close()
    assert sched.last_report.mode == "append" and "model down" in sched.last_report.fallback_reason
    assert PROMOTED_GATEWAY in memory_md(mem)


# ---------------------------------------------------------------------------------------------------------------
# 3. Every adapter surface that reaches the model records its searches, with the session
# ---------------------------------------------------------------------------------------------------------------


def test_langchain_retriever_records(mem: MemoryIndex) -> None:
    LcRetriever(memory=mem, k=1, session_key="agent:main:dm:1").invoke("gateway loopback")
    (e,) = events(mem)
    assert (e.path, e.session_key, e.rank) == ("memory/2026-11-02.md", "agent:main:dm:1", 1)


def test_langchain_retriever_as_an_agent_tool_records_under_the_thread(mem: MemoryIndex) -> None:
    from langchain_core.tools import create_retriever_tool

    tool = create_retriever_tool(LcRetriever(memory=mem, k=1), "notes", "Search the notes.")
    model = ScriptedToolModel(script=[
        AIMessage(content="", tool_calls=[call("notes", {"query": "gateway loopback"}, "c1")]),
        AIMessage(content="done"),
    ])
    create_agent(model, [tool], checkpointer=InMemorySaver()).invoke(
        {"messages": [HumanMessage("q")]}, {"configurable": {"thread_id": "rt-1"}})
    assert [(e.path, e.session_key) for e in events(mem)] == [("memory/2026-11-02.md", "rt-1")]


def test_langchain_middleware_auto_recall_records_under_the_thread(mem: MemoryIndex) -> None:
    agent = _agent(mem)
    agent.invoke({"messages": [HumanMessage("网关 回环地址")]}, {"configurable": {"thread_id": "thread-7"}})
    (e,) = events(mem)
    assert (e.path, e.session_key) == ("memory/2026-11-04.md", "thread-7")


def test_langchain_tools_record_under_the_thread(mem: MemoryIndex) -> None:
    model = ScriptedToolModel(script=[
        AIMessage(content="", tool_calls=[call("memory_search", {"query": "oat milk coffee"}, "c1")]),
        AIMessage(content="done"),
    ])
    agent = create_agent(model, [], middleware=[ClawmemMiddleware(mem)], checkpointer=InMemorySaver())
    agent.invoke({"messages": [HumanMessage("what milk?")]}, {"configurable": {"thread_id": "tools-1"}})
    found = events(mem)
    assert found and {(e.path, e.session_key) for e in found} == {("memory/2026-11-03.md", "tools-1")}


def test_clawmem_store_records_only_the_items_it_returns(mem: MemoryIndex) -> None:
    store = ClawmemStore(mem)
    store.put(("prefs",), "milk", {"text": "Dana prefers oat milk"})
    store.put(("prefs",), "tea", {"text": "Dana likes green tea"})
    mem.sync()
    before = len(events(mem))
    items = store.search(("prefs",), query="oat milk", limit=1)
    assert [i.key for i in items] == ["milk"]
    new = events(mem)[before:]
    assert len(new) == 1 and new[0].path == "memory/prefs/milk.md"
    # the daily note about oat milk matched the store's internal search, but was not returned: not recorded
    assert all(e.path != "memory/2026-11-03.md" for e in new)


def test_agents_store_records_each_agents_returned_items_in_its_own_log(tmp_path: Path) -> None:
    from langchain_clawmem import ClawmemAgentsStore

    main, other = make_mem(tmp_path / "a"), make_mem(tmp_path / "b")
    try:
        store = ClawmemAgentsStore({"main": main, "other": other})
        store.put(("main", "prefs"), "milk", {"text": "Dana prefers oat milk, always oat milk"})
        store.put(("other", "prefs"), "tea", {"text": "Dana likes oat milk in green tea"})
        main.sync()
        other.sync()
        items = store.search((), query="oat milk", limit=1)
        assert [i.namespace[0] for i in items] == ["main"]
        assert [e.path for e in events(main)] == ["memory/prefs/milk.md"] and events(other) == []
    finally:
        main.close()
        other.close()


def test_llama_index_retriever_and_tools_record(mem: MemoryIndex) -> None:
    LiRetriever(mem, similarity_top_k=1, session_key="li-1").retrieve("gateway loopback")
    tool = ClawmemToolSpec(mem, session_key="li-2").to_tool_list()[0]
    assert not tool.call(query="oat milk coffee", maxResults=1).is_error
    keys = [(e.path, e.session_key) for e in events(mem)]
    assert keys == [("memory/2026-11-02.md", "li-1"), ("memory/2026-11-03.md", "li-2")]


async def test_llama_index_block_records_under_the_memory_session(mem: MemoryIndex) -> None:
    memory = Memory.from_defaults(session_id="sess-9", memory_blocks=[ClawmemMemoryBlock(memory=mem, max_results=1)])
    await _llama_turn(memory, "gateway loopback")
    (e,) = events(mem)
    assert (e.path, e.session_key) == ("memory/2026-11-02.md", "sess-9")


def test_internal_searches_are_not_recorded(tmp_path: Path) -> None:
    mem = make_mem(tmp_path, record=False)
    try:
        LcRetriever(memory=mem).invoke("gateway loopback")
        assert events(mem) == [] and status(mem)["recording"] is False
    finally:
        mem.close()


async def test_injected_recall_is_recognised_in_a_transcript(mem: MemoryIndex) -> None:
    """What the LangChain auto-recall and the LlamaIndex block inject carries the dreaming package's markers, so
    a transcript quoting it is never learned again."""
    (Path(mem.workspace) / "MEMORY.md").write_text(TRIGGERED, encoding="utf-8")
    model = ScriptedToolModel(script=[AIMessage(content="ok")])
    agent = create_agent(model, [], middleware=[ClawmemMiddleware(mem, auto_recall=True, trigger_recall=True)])
    agent.invoke({"messages": [HumanMessage("is the gateway on loopback?")]})
    system = model.calls[0][0].content
    section = system[system.index("## Recalled memory"):]
    assert "Source: memory/2026-11-02.md#L1-L1" in section and "Source: MEMORY.md#L" in section
    assert has_injected(section) and strip_injected(section).strip() == ""
    assert strip_injected(section.replace("\n", " ")).strip() == ""  # a transcript line with newlines collapsed

    memory = Memory.from_defaults(session_id="s", memory_blocks=[ClawmemMemoryBlock(memory=mem, trigger_recall=True)])
    got = await _llama_turn(memory, "is the gateway on loopback?")
    injected = "".join(b.text for b in got[0].blocks if isinstance(b, TextBlock))
    assert "<clawmem_recall>" in injected and "loopback" in injected
    assert has_injected(injected) and "loopback" not in strip_injected(injected)


# ---------------------------------------------------------------------------------------------------------------
# 4. Trigger recall
# ---------------------------------------------------------------------------------------------------------------

TRIGGERED = (
    "# Memory\n\n"
    "- The home gateway listens on loopback only. <!-- trigger: gateway, home network --> <!-- importance: 7 -->\n"
    "  Source: memory/2026-11-02.md#L1-L1\n"
    "- 网关只在本机回环地址上监听。 <!-- trigger: 网关, 回环 --> <!-- importance: 7 -->\n"
    "  Source: memory/2026-11-04.md#L1-L1\n"
    "- Dana prefers oat milk. <!-- trigger: oat milk --> <!-- importance: 5 -->\n"
    "  Source: memory/2026-11-03.md#L1-L1\n"
    "- A person's note about the gateway. <!-- trigger: gateway -->\n"
)


def _system_for(mem: MemoryIndex, message: str, **kwargs: Any) -> str:
    model = ScriptedToolModel(script=[AIMessage(content="ok")])
    agent = create_agent(model, [], middleware=[ClawmemMiddleware(mem, **kwargs)])
    agent.invoke({"messages": [HumanMessage(message)]})
    return str(model.calls[0][0].content)


@pytest.mark.parametrize("message, expected, absent", [
    ("Is the Gateway up?", "The home gateway listens on loopback only.\nSource: MEMORY.md#L3-L4", "oat milk"),
    ("今晚网关还正常吗？", "网关只在本机回环地址上监听。\nSource: MEMORY.md#L5-L6", "home gateway"),
])
def test_trigger_recall_langchain(mem: MemoryIndex, message: str, expected: str, absent: str) -> None:
    (Path(mem.workspace) / "MEMORY.md").write_text(TRIGGERED, encoding="utf-8")
    system = _system_for(mem, message, trigger_recall=True)
    assert expected in system and absent not in system
    assert "A person's note" not in system  # not a promoted entry (no Source line)
    assert events(mem) == []  # no search ran
    assert "Recalled memory" not in _system_for(mem, message)  # off by default


def test_trigger_recall_whole_words_and_at_most_three(mem: MemoryIndex) -> None:
    text = TRIGGERED + "".join(
        f"- Fact {i} about the router. <!-- trigger: router --> <!-- importance: 5 -->\n"
        f"  Source: memory/2026-11-02.md#L1-L1\n" for i in range(5))
    (Path(mem.workspace) / "MEMORY.md").write_text(text, encoding="utf-8")
    assert "Recalled memory" not in _system_for(mem, "gateways and routers?", trigger_recall=True)
    system = _system_for(mem, "the router and the gateway", trigger_recall=True)
    assert system.count("Source: MEMORY.md#L") == 3


@pytest.mark.parametrize("message, expected", [
    ("Is the gateway up?", "The home gateway listens on loopback only.\nSource: MEMORY.md#L3-L4\n"),
    ("回环地址可以改吗", "网关只在本机回环地址上监听。\nSource: MEMORY.md#L5-L6\n"),
])
async def test_trigger_recall_llama_index(mem: MemoryIndex, message: str, expected: str) -> None:
    (Path(mem.workspace) / "MEMORY.md").write_text(TRIGGERED, encoding="utf-8")
    memory = Memory.from_defaults(session_id="s", memory_blocks=[ClawmemMemoryBlock(memory=mem, trigger_recall=True)])
    got = await _llama_turn(memory, message)
    injected = "".join(b.text for b in got[0].blocks if isinstance(b, TextBlock))
    assert injected.startswith("<memory>\n<clawmem_recall>\n" + expected)  # first, before the search hits
    plain = Memory.from_defaults(session_id="s2", memory_blocks=[ClawmemMemoryBlock(memory=mem)])
    got = await _llama_turn(plain, message)
    assert expected.split("\n")[1] not in "".join(b.text for b in got[0].blocks if isinstance(b, TextBlock))

