"""The session key a search is recorded under (the recall log's ``session_key``), from what LangChain gives."""

from __future__ import annotations

from typing import Any

__all__ = ["current_thread_id", "session_key_of", "user_of"]


def current_thread_id() -> str | None:
    """The ``thread_id`` of the LangGraph run this code is part of (from the runnable config LangChain carries
    in a context variable), ``None`` outside one."""
    from langchain_core.runnables.config import var_child_runnable_config

    config = var_child_runnable_config.get() or {}
    thread = (config.get("configurable") or {}).get("thread_id")
    return str(thread) if thread not in (None, "") else None


def session_key_of(explicit: str | None, runtime: Any = None) -> str | None:
    """``explicit`` when given, else the LangGraph thread of ``runtime`` (``runtime.execution_info.thread_id``)
    or of the current run."""
    if explicit:
        return explicit
    info = getattr(runtime, "execution_info", None)
    thread = getattr(info, "thread_id", None)
    if thread:
        return str(thread)
    return current_thread_id()


def _from_context(context: Any, key: str) -> Any:
    if context is None:
        return None
    if isinstance(context, dict):
        return context.get(key)
    return getattr(context, key, None)


def user_of(key: str, runtime: Any = None) -> Any:
    """The value of ``key`` (e.g. ``"user_id"``) for the current call: from LangGraph's runtime context
    (``runtime.context``, else that of the current run), else from ``config["configurable"]``; ``None`` when
    neither names it."""
    from langchain_core.runnables.config import var_child_runnable_config

    if runtime is None:
        try:
            from langgraph.runtime import get_runtime

            runtime = get_runtime()
        except Exception:  # outside a LangGraph run (or no langgraph): only the config can name the user
            runtime = None
    found = _from_context(getattr(runtime, "context", None), key)
    if found is not None:
        return found
    config = var_child_runnable_config.get() or {}
    return (config.get("configurable") or {}).get(key)
