"""LlamaIndex integration of clawmem: OpenClaw-style long-term memory for LlamaIndex agents.

.. code-block:: python

    from clawmem_core import MemoryIndex
    from llama_index_clawmem import ClawmemToolSpec

    spec = ClawmemToolSpec(MemoryIndex("~/agent-workspace"))
    agent = FunctionAgent(tools=spec.to_tool_list(), llm=llm, system_prompt=spec.recall_prompt())

A LlamaIndex ``BaseEmbedding`` can be given to ``MemoryIndex(..., embedder=...)`` directly. The tools, blocks
and retriever also take a :class:`~clawmem_core.registry.MemoryResolver` instead of one index: one agent then
serves many users, each call naming its user in the workflow ``Context`` or with :func:`memory_user`.
"""

from .consolidation import ClawmemConsolidationBlock
from .flush import ClawmemFlushBlock, archive_chat
from .memory import ClawmemMemoryBlock
from .memory_write import MemoryWriteInput, create_memory_write_tool
from .retrievers import ClawmemRetriever
from .tools import (
    ClawmemToolSpec,
    MemoryGetInput,
    MemorySearchInput,
    create_memory_get_tool,
    create_memory_search_tool,
    create_memory_tools,
    memory_recall_prompt,
)
from .users import MemorySource, memory_user

__all__ = [
    "ClawmemConsolidationBlock",
    "ClawmemFlushBlock",
    "ClawmemMemoryBlock",
    "ClawmemRetriever",
    "ClawmemToolSpec",
    "MemoryGetInput",
    "MemorySearchInput",
    "MemorySource",
    "MemoryWriteInput",
    "archive_chat",
    "create_memory_get_tool",
    "create_memory_search_tool",
    "create_memory_tools",
    "create_memory_write_tool",
    "memory_recall_prompt",
    "memory_user",
]
