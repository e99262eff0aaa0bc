"""Memory consolidation ("dreaming") for LlamaIndex: any ``LLM`` as the promotion model, and a memory block
that schedules consolidation in the background, off the request path.

.. code-block:: python

    from llama_index.core.memory import Memory
    from llama_index_clawmem import ClawmemMemoryBlock
    from llama_index_clawmem.consolidation import ClawmemConsolidationBlock

    dreaming = ClawmemConsolidationBlock(memory=mem, llm=llm, every_n_turns=20, after_idle_seconds=900)
    memory = Memory.from_defaults(session_id="dana", memory_blocks=[ClawmemMemoryBlock(memory=mem), dreaming])
    agent = FunctionAgent(tools=tools, llm=llm)
    await agent.run("...", memory=memory)
    ...
    dreaming.close()  # on shutdown: cancels the idle timer, joins a running consolidation

The block injects nothing. A turn begins each time ``Memory`` is read with a new user message last (the start
of an agent run) and is counted as finished when the next one begins; every ``every_n_turns`` finished turns,
and after ``after_idle_seconds`` without one, a background thread runs
``clawmem_core.dreaming.promote(mem, model=..., apply=True)``. Outside a ``Memory``,
:class:`ConsolidationScheduler` (``turn_finished()`` after each run) does the same. Errors are logged on the
``clawmem`` logger, never raised into the agent.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, List, Optional

from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock
from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr
from llama_index.core.llms.llm import LLM
from llama_index.core.memory.memory import BaseMemoryBlock

from clawmem_core import MemoryIndex

from clawmem_core.dreaming.schedule import ConsolidationScheduler, ScheduledConsolidation, join_content

__all__ = ["ClawmemConsolidationBlock", "ConsolidationScheduler", "llm_caller", "consolidation_scheduler"]

log = logging.getLogger("clawmem")


def llm_caller(llm: Any) -> Callable[[str], str]:
    """``llm`` as a promotion model: ``prompt -> answer text``, one tool-free call (``chat`` with one user
    message for a chat model, else ``complete``; content blocks joined to text). A plain callable is returned
    as it is."""
    if not isinstance(llm, LLM):
        if callable(llm):
            return llm  # type: ignore[no-any-return]
        raise TypeError(f"{type(llm).__name__} is not a LlamaIndex LLM")

    def ask(prompt: str) -> str:
        if llm.metadata.is_chat_model:
            reply = llm.chat([ChatMessage(role=MessageRole.USER, content=prompt)])
            blocks = [b.text for b in reply.message.blocks if isinstance(b, TextBlock)]
            return "".join(blocks) if blocks else join_content(reply.message.content)
        return join_content(llm.complete(prompt).text)

    ask.__qualname__ = f"llm_caller({type(llm).__name__})"
    return ask


def consolidation_scheduler(memory: MemoryIndex, *, llm: Any = None, every_n_turns: Optional[int] = None,
                            after_idle_seconds: Optional[float] = None,
                            promote_options: Optional[dict[str, Any]] = None, **kwargs: Any) -> ConsolidationScheduler:
    """A :class:`ConsolidationScheduler` over ``memory`` with ``llm`` (a LlamaIndex ``LLM``, a callable or
    ``None`` for append-only) as the promotion model; call ``turn_finished()`` after each agent run."""
    return ConsolidationScheduler(memory, model=llm_caller(llm) if llm is not None else None,
                                  every_n_turns=every_n_turns, after_idle_seconds=after_idle_seconds,
                                  promote_options=promote_options, **kwargs)


class ClawmemConsolidationBlock(ScheduledConsolidation, BaseMemoryBlock[str]):
    """A ``Memory`` block that schedules consolidation (see the module documentation); it injects nothing and
    stores nothing. ``llm``: the promotion model (``None``: append-only). Call :meth:`close` on shutdown."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str = Field(default="clawmem_consolidation", description="The name of the memory block.")
    priority: int = Field(default=1)
    memory: MemoryIndex = Field(description="The clawmem index to consolidate.")
    llm: Any = Field(default=None, exclude=True, description="The promotion model (None: append-only).")
    every_n_turns: Optional[int] = Field(default=None, description="Consolidate every N turns.")
    after_idle_seconds: Optional[float] = Field(default=None, description="Consolidate after this idle time.")
    promote_options: Optional[dict] = Field(default=None, description="Options for promote (limit, gates...).")
    timer_factory: Any = Field(default=None, exclude=True, description="Makes the idle timer (tests).")
    accept_short_term_memory: bool = Field(default=False)
    _scheduler: Optional[ConsolidationScheduler] = PrivateAttr(default=None)
    _last_turn: Any = PrivateAttr(default=None)

    def model_post_init(self, __context: Any) -> None:
        if self.every_n_turns is None and self.after_idle_seconds is None:
            raise ValueError("give every_n_turns, after_idle_seconds or both")
        extra = {"timer_factory": self.timer_factory} if self.timer_factory is not None else {}
        self._scheduler = consolidation_scheduler(
            self.memory, llm=self.llm, every_n_turns=self.every_n_turns, after_idle_seconds=self.after_idle_seconds,
            promote_options=self.promote_options, **extra)

    @property
    def scheduler(self) -> ConsolidationScheduler:
        assert self._scheduler is not None
        return self._scheduler

    def _new_turn(self, messages: Optional[List[ChatMessage]]) -> tuple[bool, bool]:
        """(a new turn began, one had begun before it)."""
        if not messages or messages[-1].role != MessageRole.USER:
            return False, False
        key = (sum(m.role == MessageRole.USER for m in messages), messages[-1].content)
        if key == self._last_turn:
            return False, False
        previous, self._last_turn = self._last_turn, key
        return True, previous is not None

    async def _aget(self, messages: Optional[List[ChatMessage]] = None, **block_kwargs: Any) -> str:
        try:
            started, previous = self._new_turn(messages)
            if started and previous:
                self.scheduler.turn_finished()  # the previous turn ended when this one began
            elif started:
                self.scheduler.activity()
        except Exception as exc:  # scheduling must never break the turn
            log.warning("memory consolidation not scheduled: %s", exc)
        return ""

    async def _aput(self, messages: List[ChatMessage]) -> None:
        return None

