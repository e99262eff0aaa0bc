"""Pre-compaction memory flush for LangChain agents (``langchain.agents.create_agent`` middleware).

.. code-block:: python

    from langchain.agents import create_agent
    from langchain_clawmem.middleware import MemoryFlushMiddleware

    flush = MemoryFlushMiddleware(mem, context_window=128_000)
    agent = create_agent(model, tools, middleware=[flush])

Before each model call the middleware estimates the conversation size. When it reaches
``context_window - reserve_tokens - soft_threshold_tokens`` it first runs one silent turn: the model is asked
to store durable memories with the ``memory_write`` tool (which the middleware registers), the tool calls are
executed, and none of these messages enter the conversation. This happens at most once per compaction cycle
(per ``thread_id``); a new cycle starts when the conversation falls back below the threshold (a summarisation
compacted it) or when :meth:`MemoryFlushMiddleware.mark_compacted` is called. Nothing runs when the workspace
is read-only.

:meth:`MemoryFlushMiddleware.archive` saves a conversation to ``memory/YYYY-MM-DD-<slug>.md`` on request
(e.g. when the user starts a new session), with a slug from ``slug_model`` when one is given.
"""

from __future__ import annotations

import json
import logging
import threading
from datetime import datetime
from typing import Any, Awaitable, Callable, Sequence

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import BaseTool

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

from .memory_write import create_memory_write_tool

__all__ = ["MemoryFlushMiddleware"]

log = logging.getLogger("clawmem")

DEFAULT_THREAD = "default"


def _thread_id(request: ModelRequest) -> str:
    try:
        from langgraph.config import get_config

        configurable = get_config().get("configurable") or {}
        thread = configurable.get("thread_id")
    except Exception:  # outside a graph run
        thread = None
    return str(thread) if thread is not None else DEFAULT_THREAD


def _last_ai(response: Any) -> AIMessage | None:
    if isinstance(response, AIMessage):
        return response
    result = getattr(response, "result", None)
    if result is None:  # an extended response wrapping a ModelResponse
        inner = getattr(response, "model_response", None)
        result = getattr(inner, "result", None) or []
    return next((m for m in reversed(result) if isinstance(m, AIMessage)), None)


class MemoryFlushMiddleware(AgentMiddleware):
    """Runs the pre-compaction memory flush and archives sessions (SPEC 9).

    ``context_window`` is the model's context size in tokens; ``reserve_tokens`` (default 20000) and
    ``soft_threshold_tokens`` (default 4000) place the flush point below it. ``max_flush_steps`` bounds the
    model calls of one flush turn. ``expose_tool=False`` keeps ``memory_write`` out of the normal turns (it is
    still registered, for the flush turn). ``prompt`` / ``system_prompt`` replace the flush texts.
    """

    def __init__(
        self,
        memory: MemoryIndex,
        *,
        context_window: int,
        reserve_tokens: int = DEFAULT_RESERVE_TOKENS,
        soft_threshold_tokens: int = DEFAULT_SOFT_THRESHOLD_TOKENS,
        max_flush_steps: int = 3,
        expose_tool: bool = True,
        prompt: str | None = None,
        system_prompt: str | None = None,
        slug_model: BaseChatModel | None = None,
        read_only: bool | None = None,
    ) -> None:
        super().__init__()
        self.memory = memory
        self.policy = FlushPolicy(
            context_window,
            reserve_tokens=reserve_tokens,
            soft_threshold_tokens=soft_threshold_tokens,
            workspace=memory.workspace,
            read_only=read_only,
        )
        self.max_flush_steps = max(1, int(max_flush_steps))
        self.expose_tool = expose_tool
        self.prompt = prompt
        self.system_prompt = system_prompt
        self.slug_model = slug_model
        self.write_tool: BaseTool = create_memory_write_tool(memory)
        self.tools = [self.write_tool]
        self._cycles: dict[str, FlushCycleState] = {}
        self._lock = threading.Lock()
        #: Number of flush turns run (all threads).
        self.flush_count = 0

    # -- cycles -------------------------------------------------------------------------------

    def cycle(self, thread_id: str = DEFAULT_THREAD) -> FlushCycleState:
        """The compaction-cycle state of a thread."""
        with self._lock:
            return self._cycles.setdefault(str(thread_id), FlushCycleState())

    def mark_compacted(self, thread_id: str = DEFAULT_THREAD) -> None:
        """Start a new compaction cycle for a thread (after the conversation was compacted)."""
        self.cycle(thread_id).mark_compacted()

    # -- the flush ----------------------------------------------------------------------------

    def _due(self, request: ModelRequest) -> tuple[bool, FlushCycleState]:
        messages: list[Any] = list(request.messages)
        if request.system_message is not None:
            messages.insert(0, request.system_message)
        used = estimate_messages_tokens(messages)
        cycle = self.cycle(_thread_id(request))
        if cycle.flushed_this_cycle and used < self.policy.threshold:
            cycle.mark_compacted()  # the conversation shrank below the flush point: it was compacted
        return self.policy.should_flush(used, cycle), cycle

    def _flush_request(self, request: ModelRequest) -> ModelRequest:
        now = datetime.now()
        extra = self.system_prompt or flush_system_prompt(now)
        base = request.system_message.text if request.system_message is not None else ""
        system = SystemMessage(content=f"{base}\n\n{extra}" if base else extra)
        messages = [*request.messages, HumanMessage(content=self.prompt or flush_prompt(now))]
        return request.override(
            messages=messages, system_message=system, tools=[self.write_tool], tool_choice=None, response_format=None
        )

    def _call_tool(self, call: dict[str, Any]) -> ToolMessage:
        if call.get("name") != MEMORY_WRITE_NAME:
            error = {"error": f"only {MEMORY_WRITE_NAME} is available during the memory flush", "disabled": True}
            return ToolMessage(content=json.dumps(error), tool_call_id=call.get("id") or "", name=call.get("name"))
        return self.write_tool.invoke({**call, "type": "tool_call"})

    async def _acall_tool(self, call: dict[str, Any]) -> ToolMessage:
        if call.get("name") != MEMORY_WRITE_NAME:
            return self._call_tool(call)
        return await self.write_tool.ainvoke({**call, "type": "tool_call"})

    def _normal_request(self, request: ModelRequest) -> ModelRequest:
        if self.expose_tool:
            return request
        tools = [t for t in request.tools if t is not self.write_tool]
        return request.override(tools=tools) if len(tools) != len(request.tools) else request

    def run_flush(self, request: ModelRequest, handler: Callable[[ModelRequest], Any]) -> list[BaseMessage]:
        """Run one silent flush turn through ``handler``; returns the turn's messages (not added anywhere)."""
        flush = self._flush_request(request)
        produced: list[BaseMessage] = []
        for _ in range(self.max_flush_steps):
            ai = _last_ai(handler(flush))
            if ai is None:
                break
            produced.append(ai)
            if not ai.tool_calls:
                break
            results = [self._call_tool(call) for call in ai.tool_calls]
            produced += results
            flush = flush.override(messages=[*flush.messages, ai, *results])
        self.flush_count += 1
        return produced

    async def arun_flush(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[Any]]
    ) -> list[BaseMessage]:
        """Async twin of :meth:`run_flush`."""
        flush = self._flush_request(request)
        produced: list[BaseMessage] = []
        for _ in range(self.max_flush_steps):
            ai = _last_ai(await handler(flush))
            if ai is None:
                break
            produced.append(ai)
            if not ai.tool_calls:
                break
            results = [await self._acall_tool(call) for call in ai.tool_calls]
            produced += results
            flush = flush.override(messages=[*flush.messages, ai, *results])
        self.flush_count += 1
        return produced

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]) -> Any:
        due, cycle = self._due(request)
        if due:
            cycle.mark_flushed()  # once per cycle, even if the flush fails
            try:
                self.run_flush(request, handler)
            except Exception as exc:  # the flush must never break the user's turn
                log.warning("memory flush failed: %s", exc)
        return handler(self._normal_request(request))

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> Any:
        due, cycle = self._due(request)
        if due:
            cycle.mark_flushed()
            try:
                await self.arun_flush(request, handler)
            except Exception as exc:
                log.warning("memory flush failed: %s", exc)
        return await handler(self._normal_request(request))

    # -- session archive ----------------------------------------------------------------------

    def _slug_fn(self, model: BaseChatModel | None) -> Callable[[str], str | None] | None:
        if model is None:
            return None

        def ask(conversation: str) -> str | None:
            reply = model.invoke([HumanMessage(content=slug_prompt(conversation))])
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
    ) -> dict[str, Any] | None:
        """Save the recent conversation (messages, or an agent state with ``messages``) to
        ``memory/YYYY-MM-DD-<slug>.md`` and index it; returns ``{path, startLine, endLine}`` or ``None`` when
        there was nothing to save. The slug is ``slug``, else one from ``slug_model``, else a timestamp."""
        if isinstance(messages, dict):
            messages = messages.get("messages", [])
        result = archive_conversation(
            self.memory, list(messages), slug=slug, slug_fn=self._slug_fn(self.slug_model), max_messages=max_messages, now=now
        )
        if result is None:
            return None
        return {"path": result.relative_to(self.memory.workspace), "startLine": result.start_line, "endLine": result.end_line}

    async def aarchive(self, messages: Sequence[Any] | dict[str, Any], **kwargs: Any) -> dict[str, Any] | None:
        """Async twin of :meth:`archive` (runs in a worker thread)."""
        import asyncio

        return await asyncio.to_thread(self.archive, messages, **kwargs)
