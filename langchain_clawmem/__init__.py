"""LangChain integration of clawmem: OpenClaw-style long-term memory for LangChain agents.

.. code-block:: python

    from clawmem_core import MemoryIndex
    from langchain_clawmem import ClawmemMiddleware

    mem = MemoryIndex("~/agent-workspace")
    agent = create_agent(model, tools, system_prompt="You are Dana's assistant.", middleware=[ClawmemMiddleware(mem)])

``ClawmemStore`` puts LangGraph's long-term memory store (``create_agent(store=...)``) on the same Markdown files.

A LangChain ``Embeddings`` can be given to ``MemoryIndex(..., embedder=...)`` directly.
"""

from .memory_write import MemoryWriteInput, create_memory_write_tool
from .retrievers import ClawmemRetriever
from .tools import (
    ClawmemToolkit,
    MemoryGetInput,
    MemorySearchInput,
    create_memory_get_tool,
    create_memory_search_tool,
    create_memory_tools,
    memory_recall_prompt,
)

__all__ = [
    "ClawmemMiddleware",
    "ClawmemRetriever",
    "ClawmemAgentsStore",
    "ClawmemStore",
    "ClawmemToolkit",
    "ConsolidationMiddleware",
    "MemoryFlushMiddleware",
    "MemoryGetInput",
    "MemorySearchInput",
    "MemoryWriteInput",
    "create_memory_get_tool",
    "create_memory_search_tool",
    "create_memory_tools",
    "create_memory_write_tool",
    "memory_recall_prompt",
]


def __getattr__(name: str) -> object:
    # The middleware needs ``langchain`` and the store ``langgraph``, not only langchain-core: import on use.
    if name in ("MemoryFlushMiddleware", "ClawmemMiddleware"):
        from . import middleware

        return getattr(middleware, name)
    if name == "ConsolidationMiddleware":
        from . import consolidation

        return consolidation.ConsolidationMiddleware
    if name in ("ClawmemStore", "ClawmemAgentsStore"):
        from . import store

        return getattr(store, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
