"""LangChain integration of clawmem: OpenClaw-style long-term memory for LangChain agents.

.. code-block:: python

    from clawmem_core import MemoryIndex
    from langchain_clawmem import ClawmemToolkit

    kit = ClawmemToolkit(memory=MemoryIndex("~/agent-workspace"))
    agent = create_agent(model, kit.get_tools(), system_prompt=kit.get_prompt())

A LangChain ``Embeddings`` can be given to ``MemoryIndex(..., embedder=...)`` directly.
"""

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
    "MemoryGetInput",
    "MemorySearchInput",
    "create_memory_get_tool",
    "create_memory_search_tool",
    "create_memory_tools",
    "memory_recall_prompt",
]
