"""Memory middleware for ``langchain.agents.create_agent``: the memory tools and prompt, and the pre-compaction
memory flush.

.. code-block:: python

    from langchain.agents import create_agent
    from langchain.agents.middleware import SummarizationMiddleware
    from langchain_clawmem.middleware import ClawmemMiddleware, MemoryFlushMiddleware

    agent = create_agent(
        model,
        tools,
        system_prompt="You are Dana's assistant.",
        middleware=[
            ClawmemMiddleware(mem),                                  # memory_search / memory_get + Memory Recall
            MemoryFlushMiddleware(mem, model=model, context_window=128_000),
            SummarizationMiddleware(model, trigger=("tokens", 110_000)),
        ],
        checkpointer=checkpointer,
    )

**Order.** ``before_model`` hooks run in the order the middleware is listed, and all of them before any
``wrap_model_call``. List :class:`MemoryFlushMiddleware` *before* ``SummarizationMiddleware`` so the flush sees
the conversation before it is summarised; listed after, it only sees the summary and the kept messages.

**The flush.** Before a model call, when the estimated conversation size reaches ``context_window -
reserve_tokens - soft_threshold_tokens``, :class:`MemoryFlushMiddleware` runs one silent turn: the model is asked
to store durable memories with ``memory_write``; its tool calls are executed and none of these messages enter the
conversation. The call is tagged like ``SummarizationMiddleware``'s internal call (``metadata["lc_source"] ==
"memory_flush"`` plus LangChain's internal-call marker), so ``stream_mode="messages"`` consumers can drop it and
``stream_events(version="v3")``'s ``run.messages`` leaves it out. It runs at most once per compaction cycle; the
cycle counters live in the agent state (``memory_flush``), so they follow the thread through the checkpointer:
another worker or a restarted process on the same thread does not flush twice. A new cycle starts when the
conversation falls back below the flush point (it was compacted). Nothing runs when the workspace is read-only.

**Flush writes and tool middleware.** The flush executes ``memory_write`` itself, inside its ``before_model``
node, not through the agent's tool node: ``wrap_tool_call`` middleware (``HumanInTheLoopMiddleware``,
``ToolCallLimitMiddleware``, ``ToolRetryMiddleware``…) does not see these writes, and they are not counted
against tool-call limits. The flush can only append to today's ``memory/YYYY-MM-DD.md`` or ``MEMORY.md`` (no
other tool is executed during the flush). To review every write, pass ``read_only=True`` (no flush) and offer
``memory_write`` in normal turns (``ClawmemMiddleware(write=True)``), where tool middleware applies.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from datetime import datetime
from typing import Any, Awaitable, Callable, Iterable, Sequence

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from typing_extensions import NotRequired, TypedDict

from clawmem_core import MemoryIndex
from clawmem_core.flush import (
    DEFAULT_RESERVE_TOKENS,
    DEFAULT_SOFT_THRESHOLD_TOKENS,
    FlushCycleState,
    FlushPolicy,
    archive_conversation,
    estimate_messages_tokens,
    flush_prompt,
    flush_system_prompt,
    slug_prompt,
)
from clawmem_core.memory_write import MEMORY_WRITE_NAME
from clawmem_core.registry import MemoryResolver
from clawmem_core.tools import MEMORY_GET_NAME, MEMORY_SEARCH_NAME, citations_enabled

from clawmem_core.dreaming.schedule import MAX_TRIGGERED, TriggeredEntry, read_triggered
from .memory_write import create_memory_write_tool
from .session import session_key_of, user_of
from .tools import ALL_TOOLS, MemorySource, ToolName, amemory_for_call, create_memory_tools, memory_for_call, memory_recall_prompt

try:  # recent langchain 1.x: tag internal model calls so streams can leave them out
    from langchain.agents.middleware.internal_call_transformer import (
        InternalCallTransformer,
        internal_call_metadata,
    )

    _TRANSFORMERS: tuple[Any, ...] = (InternalCallTransformer,)
except ImportError:  # pragma: no cover - older langchain 1.x: the lc_source tag only

    def internal_call_metadata() -> dict[str, Any]:
        return {}

    _TRANSFORMERS = ()

__all__ = ["FLUSH_SOURCE", "ClawmemMiddleware", "FlushCounters", "MemoryFlushMiddleware", "MemoryFlushState"]

log = logging.getLogger("clawmem")

#: ``metadata["lc_source"]`` of the flush's model calls (``SummarizationMiddleware`` uses ``"summarization"``).
FLUSH_SOURCE = "memory_flush"
#: The agent-state key holding the flush counters.
STATE_KEY = "memory_flush"


# ----------------------------------------------------------------------------------------------------------------
# ClawmemMiddleware: tools, prompt, auto-recall
# ----------------------------------------------------------------------------------------------------------------


def _text(message: BaseMessage) -> str:
    text = message.text
    return text if isinstance(text, str) else str(text)


def _can_write(memory: MemoryIndex, asked: str) -> bool:
    """Whether ``memory_write`` can work over ``memory``: not on a replica (no workspace), where the
    tool is left out (and this is logged) rather than offered to fail on every call."""
    if getattr(memory, "replica", False):
        log.warning("%s: memory_write is left out: agent %r is served from a replica (no workspace to write to)",
                    asked, memory.agent_id)
        return False
    return True


def append_to_system_message(system: SystemMessage | None, section: str) -> SystemMessage:
    """``system`` with ``section`` appended: after a blank line for string content, as a new text block for
    content blocks (existing blocks, e.g. with ``cache_control``, are kept as they are)."""
    if system is None:
        return SystemMessage(content=section)
    content = system.content
    if isinstance(content, str):
        new_content: Any = f"{content}\n\n{section}" if content.strip() else section
    else:
        new_content = [*content, {"type": "text", "text": section}]
    return system.model_copy(update={"content": new_content})


class ClawmemMiddleware(AgentMiddleware):
    """Gives an agent clawmem memory: registers ``memory_search`` and ``memory_get`` (and ``memory_write`` with
    ``write=True``) and appends the Memory Recall section to the system message the agent already has.

    ``auto_recall=True`` also searches memory for the latest user message before each model call and appends the
    top ``recall_max_results`` snippets (a "Recalled memory" section, with citations unless citations are off).
    ``trigger_recall=True`` adds, without a search, up to 3 promoted ``MEMORY.md`` entries whose trigger phrases
    (``<!-- trigger: ... -->``) appear in the latest user message, in the same section.
    Nothing is added to the conversation state: the additions are made to each model request only.

    Auto-recall searches are recorded in the recall log under ``session_key``, else the LangGraph thread.

    ``memory`` may be a :class:`~clawmem_core.registry.MemoryResolver` instead of one index: one compiled graph
    then serves many users, each call's tools and recall acting on the memory of the user its runtime context or
    ``config["configurable"]`` names (the resolver's ``key``, e.g. ``user_id``); with recall on, a call naming no
    user, or a refused one, raises :class:`~clawmem_core.errors.ConfigError` (the tools answer an error payload).
    """

    def __init__(
        self,
        memory: MemorySource,
        *,
        include: Iterable[ToolName] = ALL_TOOLS,
        write: bool = False,
        auto_recall: bool = False,
        recall_max_results: int = 3,
        recall_min_score: float | None = None,
        session_key: str | None = None,
        trigger_recall: bool = False,
    ) -> None:
        super().__init__()
        if isinstance(recall_max_results, bool) or recall_max_results < 1:
            raise ValueError(f"recall_max_results must be at least 1, got {recall_max_results!r}")
        self.memory = memory
        self.auto_recall = auto_recall
        self.recall_max_results = recall_max_results
        self.recall_min_score = recall_min_score
        self.session_key = session_key
        self.trigger_recall = trigger_recall
        tools: list[BaseTool] = create_memory_tools(memory, include=include, session_key=session_key)
        if write and _can_write(memory, "ClawmemMiddleware(write=True)"):
            tools.append(create_memory_write_tool(memory))
        self.tools = tools

    def _section(self, request: ModelRequest) -> str:
        names = (MEMORY_SEARCH_NAME, MEMORY_GET_NAME)
        offered = [t for t in request.tools if isinstance(t, BaseTool) and t.name in names]
        if not offered:
            return ""
        return memory_recall_prompt(offered, citations=self.memory.config.citations).rstrip("\n")

    @staticmethod
    def _last_user_text(request: ModelRequest) -> str:
        last = next((m for m in reversed(request.messages) if isinstance(m, HumanMessage)), None)
        return _text(last).strip() if last is not None else ""

    def _query(self, request: ModelRequest) -> str:
        return self._last_user_text(request) if self.auto_recall else ""

    def _triggered(self, request: ModelRequest, mem: MemoryIndex) -> list[TriggeredEntry]:
        if not self.trigger_recall:
            return []
        message = self._last_user_text(request)
        try:
            return read_triggered(getattr(mem, "workspace", None), message, limit=MAX_TRIGGERED)
        except Exception as exc:  # best effort, as recall
            log.warning("trigger recall failed: %s", exc)
            return []

    def format_recall(self, hits: Sequence[Any], triggered: Sequence[TriggeredEntry] = ()) -> str:
        """The "Recalled memory" section for triggered entries and search hits (``""`` when there are none)."""
        cite = citations_enabled(self.memory.config.citations, self.session_key)
        pairs = [(e.text, e.citation) for e in triggered]
        seen = {c for _, c in pairs}
        pairs += [(h.snippet.strip(), h.citation) for h in hits if h.citation not in seen]
        if not pairs:
            return ""
        parts = [f"{text}\nSource: {citation}" if cite else text for text, citation in pairs]
        return "## Recalled memory\nNotes from memory that may be relevant to the latest message:\n\n" + "\n\n".join(parts)

    def _with_sections(self, request: ModelRequest, recalled: str) -> ModelRequest:
        sections = [s for s in (self._section(request), recalled) if s]
        if not sections:
            return request
        return request.override(system_message=append_to_system_message(request.system_message, "\n\n".join(sections)))

    def _recalls(self) -> bool:
        return self.auto_recall or self.trigger_recall

    def _recall(self, request: ModelRequest) -> str:
        if not self._recalls():
            return ""
        # a resolver's missing or refused user raises here: recall never falls back to other memory
        with memory_for_call(self.memory, request.runtime) as mem:
            return self._recall_in(request, mem)

    def _recall_in(self, request: ModelRequest, mem: MemoryIndex) -> str:
        triggered = self._triggered(request, mem)
        query = self._query(request)
        hits: Sequence[Any] = []
        if query:
            try:
                hits = mem.search(
                    query, max_results=self.recall_max_results, min_score=self.recall_min_score,
                    session_key=session_key_of(self.session_key, request.runtime),
                )
            except Exception as exc:  # recall is best effort: never break the agent's turn
                log.warning("memory recall failed: %s", exc)
        return self.format_recall(hits, triggered)

    async def _arecall(self, request: ModelRequest) -> str:
        if not self._recalls():
            return ""
        async with amemory_for_call(self.memory, request.runtime) as mem:
            triggered = self._triggered(request, mem)
            query = self._query(request)
            hits: Sequence[Any] = []
            if query:
                try:
                    hits = await mem.asearch(
                        query, max_results=self.recall_max_results, min_score=self.recall_min_score,
                        session_key=session_key_of(self.session_key, request.runtime),
                    )
                except Exception as exc:
                    log.warning("memory recall failed: %s", exc)
            return self.format_recall(hits, triggered)

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]) -> Any:
        return handler(self._with_sections(request, self._recall(request)))

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> Any:
        return await handler(self._with_sections(request, await self._arecall(request)))


# ----------------------------------------------------------------------------------------------------------------
# MemoryFlushMiddleware
# ----------------------------------------------------------------------------------------------------------------


class FlushCounters(TypedDict):
    """The flush bookkeeping of one conversation: compactions seen and the compaction at which the last flush
    ran (``None``: never)."""

    compaction_count: int
    flushed_at_compaction: int | None


class MemoryFlushState(AgentState):
    """Agent state with the flush counters (``memory_flush``), checkpointed with the thread. A caller without a
    checkpointer continues a conversation's cycle by passing the returned state back in."""

    memory_flush: NotRequired[FlushCounters]


def _flush_config() -> RunnableConfig:
    return {"metadata": {"lc_source": FLUSH_SOURCE, **internal_call_metadata()}, "tags": [FLUSH_SOURCE]}


class MemoryFlushMiddleware(AgentMiddleware[MemoryFlushState, Any]):
    """Runs the pre-compaction memory flush (SPEC 9) as a ``before_model`` hook and archives sessions.

    ``model`` (a chat model or a ``provider:model`` string) runs the flush turn, normally the agent's own model.
    ``context_window`` is the model's context size in tokens; ``reserve_tokens`` (default 20000) and
    ``soft_threshold_tokens`` (default 4000) place the flush point below it. ``max_flush_steps`` bounds the
    model calls of one flush turn. ``memory_write`` is used by the flush only; ``expose_tool=True`` also offers
    it to the model in normal turns (default ``False``: the agent's writes are what you give it, e.g.
    ``ClawmemMiddleware(write=True)``). ``prompt`` / ``system_prompt`` replace the flush texts. On a replica
    (no workspace) nothing is written: no flush runs and no tool is offered. See the module documentation for
    the order relative to ``SummarizationMiddleware`` and for tool middleware.

    ``memory`` may be a :class:`~clawmem_core.registry.MemoryResolver`: each flush then writes into the memory
    of the user the call's runtime context or ``config["configurable"]`` names, and a model call naming no user
    (or a refused one) raises :class:`~clawmem_core.errors.ConfigError`, as ``ClawmemMiddleware``'s recall does.
    """

    state_schema = MemoryFlushState
    transformers = _TRANSFORMERS

    def __init__(
        self,
        memory: MemorySource,
        *,
        model: str | BaseChatModel,
        context_window: int,
        reserve_tokens: int = DEFAULT_RESERVE_TOKENS,
        soft_threshold_tokens: int = DEFAULT_SOFT_THRESHOLD_TOKENS,
        max_flush_steps: int = 3,
        expose_tool: bool = False,
        prompt: str | None = None,
        system_prompt: str | None = None,
        slug_model: BaseChatModel | None = None,
        read_only: bool | None = None,
    ) -> None:
        super().__init__()
        if isinstance(model, str):
            from langchain.chat_models import init_chat_model

            model = init_chat_model(model)
        self.memory = memory
        self.model = model
        self.read_only = read_only
        self.policy = FlushPolicy(
            context_window,
            reserve_tokens=reserve_tokens,
            soft_threshold_tokens=soft_threshold_tokens,
            workspace=getattr(memory, "workspace", None),  # a resolver's: each user's, at each call
            read_only=True if getattr(memory, "replica", False) else read_only,  # a replica cannot write
        )
        self.max_flush_steps = max(1, int(max_flush_steps))
        self.prompt = prompt
        self.system_prompt = system_prompt
        self.slug_model = slug_model
        self.write_tool: BaseTool = create_memory_write_tool(memory)
        offered = expose_tool and _can_write(memory, "MemoryFlushMiddleware(expose_tool=True)")
        self.tools = [self.write_tool] if offered else []

    # -- state --------------------------------------------------------------------------------

    @staticmethod
    def counters(state: Any) -> FlushCycleState:
        """The compaction cycle recorded in an agent state."""
        return FlushCycleState.from_dict(dict(state).get(STATE_KEY))

    @staticmethod
    def compacted(state: Any) -> dict[str, Any]:
        """The state update that starts a new compaction cycle (e.g. after trimming the history yourself):
        ``agent.update_state(config, MemoryFlushMiddleware.compacted(agent.get_state(config).values))``."""
        cycle = MemoryFlushMiddleware.counters(state)
        cycle.mark_compacted()
        return {STATE_KEY: cycle.to_dict()}

    def policy_for(self, mem: MemoryIndex) -> FlushPolicy:
        """The flush policy over ``mem``, the index a call resolved to (its workspace, read-only on a replica)."""
        if mem is self.memory:
            return self.policy
        read_only = True if getattr(mem, "replica", False) else self.read_only
        return dataclasses.replace(self.policy, workspace=mem.workspace, read_only=read_only)

    def _decide(self, state: dict[str, Any], policy: FlushPolicy | None = None) -> tuple[bool, FlushCycleState, bool]:
        policy = policy or self.policy
        cycle = self.counters(state)
        used = estimate_messages_tokens(state.get("messages") or [])
        changed = False
        if cycle.flushed_this_cycle and used < policy.threshold:
            cycle.mark_compacted()  # the conversation shrank below the flush point: it was compacted
            changed = True
        due = policy.should_flush(used, cycle)
        if due:
            cycle.mark_flushed()  # once per cycle, even if the flush fails
        return due, cycle, changed or due

    # -- the flush turn -----------------------------------------------------------------------

    def _flush_messages(self, state: dict[str, Any]) -> list[BaseMessage]:
        now = datetime.now()
        system = self.system_prompt or flush_system_prompt(now)
        history = [m for m in state.get("messages") or [] if not isinstance(m, SystemMessage)]
        return [SystemMessage(content=system), *history, HumanMessage(content=self.prompt or flush_prompt(now))]

    @staticmethod
    def _refused(call: dict[str, Any]) -> ToolMessage:
        error = {"error": f"only {MEMORY_WRITE_NAME} is available during the memory flush"}
        return ToolMessage(
            content=json.dumps(error), tool_call_id=call.get("id") or "", name=call.get("name"), status="error", artifact=error
        )

    def run_flush(self, state: dict[str, Any]) -> list[BaseMessage]:
        """Run one silent flush turn over the state's messages; returns the turn's messages (added nowhere)."""
        model, config = self.model.bind_tools([self.write_tool]), _flush_config()
        messages = self._flush_messages(state)
        produced: list[BaseMessage] = []
        for _ in range(self.max_flush_steps):
            ai = model.invoke(messages, config=config)
            if not isinstance(ai, AIMessage):
                break
            produced.append(ai)
            if not ai.tool_calls:
                break
            results = [
                self.write_tool.invoke({**c, "type": "tool_call"}, config=config)
                if c.get("name") == MEMORY_WRITE_NAME
                else self._refused(c)
                for c in ai.tool_calls
            ]
            produced += results
            messages = [*messages, ai, *results]
        return produced

    async def arun_flush(self, state: dict[str, Any]) -> list[BaseMessage]:
        """Async twin of :meth:`run_flush`."""
        model, config = self.model.bind_tools([self.write_tool]), _flush_config()
        messages = self._flush_messages(state)
        produced: list[BaseMessage] = []
        for _ in range(self.max_flush_steps):
            ai = await model.ainvoke(messages, config=config)
            if not isinstance(ai, AIMessage):
                break
            produced.append(ai)
            if not ai.tool_calls:
                break
            results = [
                await self.write_tool.ainvoke({**c, "type": "tool_call"}, config=config)
                if c.get("name") == MEMORY_WRITE_NAME
                else self._refused(c)
                for c in ai.tool_calls
            ]
            produced += results
            messages = [*messages, ai, *results]
        return produced

    def before_model(self, state: MemoryFlushState, runtime: Any) -> dict[str, Any] | None:
        # a resolver's missing or refused user raises here: the flush never writes into other memory
        with memory_for_call(self.memory, runtime) as mem:
            due, cycle, changed = self._decide(dict(state), self.policy_for(mem))
            if due:
                try:
                    self.run_flush(dict(state))
                except Exception as exc:  # the flush must never break the user's turn
                    log.warning("memory flush failed: %s", exc)
        return {STATE_KEY: cycle.to_dict()} if changed else None

    async def abefore_model(self, state: MemoryFlushState, runtime: Any) -> dict[str, Any] | None:
        async with amemory_for_call(self.memory, runtime) as mem:
            due, cycle, changed = self._decide(dict(state), self.policy_for(mem))
            if due:
                try:
                    await self.arun_flush(dict(state))
                except Exception as exc:
                    log.warning("memory flush failed: %s", exc)
        return {STATE_KEY: cycle.to_dict()} if changed else None

    # -- session archive ----------------------------------------------------------------------

    def _slug_fn(self, model: BaseChatModel | None) -> Callable[[str], str | None] | None:
        if model is None:
            return None

        def ask(conversation: str) -> str | None:
            reply = model.invoke([HumanMessage(content=slug_prompt(conversation))], config=_flush_config())
            text = reply.text if isinstance(reply, BaseMessage) else str(reply)
            return text if isinstance(text, str) else None

        return ask

    def archive(
        self,
        messages: Sequence[Any] | dict[str, Any],
        *,
        slug: str | None = None,
        max_messages: int | None = 15,
        now: datetime | None = None,
        user: str | None = None,
    ) -> dict[str, Any] | None:
        """Save the recent conversation (messages, or an agent state with ``messages``) to
        ``memory/YYYY-MM-DD-<slug>.md`` and index it; returns ``{path, startLine, endLine}`` or ``None`` when
        there was nothing to save. The slug is ``slug``, else one from ``slug_model``, else a timestamp.
        With a resolver, into the memory of ``user`` (default: the user the current run names)."""
        if isinstance(messages, dict):
            messages = messages.get("messages", [])
        if isinstance(self.memory, MemoryResolver):
            with self.memory.resolve(user if user is not None else user_of(self.memory.key)) as mem:
                return self._archive(mem, list(messages), slug, max_messages, now)
        return self._archive(self.memory, list(messages), slug, max_messages, now)

    def _archive(
        self, mem: MemoryIndex, messages: list[Any], slug: str | None, max_messages: int | None, now: datetime | None
    ) -> dict[str, Any] | None:
        result = archive_conversation(
            mem, messages, slug=slug, slug_fn=self._slug_fn(self.slug_model), max_messages=max_messages, now=now
        )
        if result is None:
            return None
        return {"path": result.relative_to(mem.workspace), "startLine": result.start_line, "endLine": result.end_line}

    async def aarchive(self, messages: Sequence[Any] | dict[str, Any], **kwargs: Any) -> dict[str, Any] | None:
        """Async twin of :meth:`archive` (runs in a worker thread)."""
        import asyncio

        return await asyncio.to_thread(self.archive, messages, **kwargs)
