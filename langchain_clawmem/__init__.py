"""LangChain integration of clawmem: OpenClaw-style long-term memory for LangChain agents.

.. code-block:: python

    from clawmem_core import MemoryIndex
    from langchain_clawmem import ClawmemToolkit

    kit = ClawmemToolkit(memory=MemoryIndex("~/agent-workspace"))
    agent = create_agent(model, kit.get_tools(), system_prompt=kit.get_prompt())

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
    "ClawmemRetriever",
    "ClawmemToolkit",
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
    # The middleware needs the ``langchain`` package (agents), not only langchain-core: import on use.
    if name == "MemoryFlushMiddleware":
        from .middleware import MemoryFlushMiddleware

        return MemoryFlushMiddleware
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
