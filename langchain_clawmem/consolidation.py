"""Memory consolidation ("dreaming") for LangChain agents: any chat model as the promotion model, and a
middleware that schedules consolidation in the background, off the request path.

.. code-block:: python

    from langchain.agents import create_agent
    from langchain_clawmem.consolidation import ConsolidationMiddleware
    from langchain_clawmem.middleware import ClawmemMiddleware

    consolidation = ConsolidationMiddleware(mem, model=model, every_n_turns=20, after_idle_seconds=900)
    agent = create_agent(model, tools, middleware=[ClawmemMiddleware(mem), consolidation])
    ...
    consolidation.close()  # on shutdown: cancels the idle timer, joins a running consolidation

After every ``every_n_turns`` agent runs (``after_agent``), and after ``after_idle_seconds`` without one, a
background thread runs ``clawmem_core.dreaming.promote(mem, model=..., apply=True)``: the recalled daily-note
lines that pass the gates are promoted into ``MEMORY.md`` (with the model's add / merge / supersede / skip
decisions, or append-only without a model or when its answer is rejected). The turn never waits for it and
never sees its errors; they are logged on the ``clawmem`` logger.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from langchain.agents.middleware import AgentMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage

from clawmem_core import MemoryIndex

from clawmem_core.dreaming.schedule import ConsolidationScheduler, ScheduledConsolidation, join_content

__all__ = ["CONSOLIDATION_SOURCE", "ConsolidationMiddleware", "chat_model_caller"]

#: ``metadata["lc_source"]`` of the promotion model's call.
CONSOLIDATION_SOURCE = "memory_consolidation"


def chat_model_caller(model: BaseChatModel) -> Callable[[str], str]:
    """``model`` as a promotion model: ``prompt -> answer text``, one tool-free call (the prompt as one user
    message; content blocks joined to text). Any runnable with ``invoke`` (a chat model, a bound one) works;
    a plain callable is returned as it is."""
    if not isinstance(model, BaseChatModel) and not callable(getattr(model, "invoke", None)):
        if callable(model):
            return model
        raise TypeError(f"{type(model).__name__} is not a LangChain chat model")

    def ask(prompt: str) -> str:
        config: Any = {"metadata": {"lc_source": CONSOLIDATION_SOURCE}, "tags": [CONSOLIDATION_SOURCE]}
        reply = model.invoke([HumanMessage(content=prompt)], config=config)
        return join_content(getattr(reply, "content", reply))

    ask.__qualname__ = f"chat_model_caller({type(model).__name__})"
    return ask


class ConsolidationMiddleware(ScheduledConsolidation, AgentMiddleware):
    """Schedules memory consolidation in the background every ``every_n_turns`` agent runs and/or after
    ``after_idle_seconds`` without one (see the module documentation).

    ``model``: a LangChain chat model (or a ``provider:model`` string, or a callable ``prompt -> text``) deciding
    add / merge / supersede / skip; ``None``: append-only. ``promote_options`` go to ``promote`` (``limit``,
    ``min_score``...). One consolidation runs at a time per index; busy, replica and failed runs are logged,
    never raised into the agent. Call :meth:`close` on shutdown.
    """

    def __init__(
        self,
        memory: MemoryIndex,
        *,
        model: BaseChatModel | str | Callable[[str], str] | None = None,
        every_n_turns: Optional[int] = None,
        after_idle_seconds: Optional[float] = None,
        promote_options: Optional[dict[str, Any]] = None,
        timer_factory: Any = None,
    ) -> None:
        super().__init__()
        if every_n_turns is None and after_idle_seconds is None:
            raise ValueError("give every_n_turns, after_idle_seconds or both")
        if isinstance(model, str):
            from langchain.chat_models import init_chat_model

            model = init_chat_model(model)
        self.memory = memory
        self.model = model
        extra = {"timer_factory": timer_factory} if timer_factory is not None else {}
        self.scheduler = ConsolidationScheduler(
            memory,
            model=chat_model_caller(model) if model is not None else None,  # type: ignore[arg-type]
            every_n_turns=every_n_turns,
            after_idle_seconds=after_idle_seconds,
            promote_options=promote_options,
            **extra,
        )
        self.tools = []

    def after_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        try:
            self.scheduler.turn_finished()
        except Exception as exc:  # scheduling must never break the turn
            import logging

            logging.getLogger("clawmem").warning("memory consolidation not scheduled: %s", exc)
        return None

    async def aafter_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return self.after_agent(state, runtime)

