"""``memory_write`` as a LlamaIndex ``FunctionTool``: append a durable note to the Markdown memory.

The tool output's ``content`` is the payload as JSON and ``raw_output`` the payload dict:
``{path, startLine, endLine}``; a payload with an ``error`` (``{error, action}`` for invalid arguments, ``{error,
disabled: true}`` when memory cannot be written) otherwise, never an exception; ``ToolOutput.is_error`` is then set.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.bridge.pydantic import ValidationError
from llama_index.core.tools import ToolMetadata

from clawmem_core import MemoryIndex
from clawmem_core.memory_write import (
    MEMORY_WRITE_DESCRIPTION,
    MEMORY_WRITE_NAME,
    awrite_payload,
    write_payload,
)
from clawmem_core.tools import invalid_arguments_payload, validation_message
from clawmem_core.tool_schemas import MemoryWriteInput

from .tools import MemoryFunctionTool

__all__ = ["MemoryWriteInput", "create_memory_write_tool"]


def _validated(kwargs: dict[str, Any]) -> MemoryWriteInput | dict[str, Any]:
    try:
        return MemoryWriteInput.model_validate(kwargs)
    except ValidationError as exc:
        return invalid_arguments_payload(MEMORY_WRITE_NAME, validation_message(exc))


def create_memory_write_tool(memory: MemoryIndex) -> MemoryFunctionTool:
    """The ``memory_write`` tool over ``memory``: appends to ``memory/YYYY-MM-DD.md`` or ``MEMORY.md`` and
    indexes the note at once, so a later ``memory_search`` finds it."""

    def memory_write(**kwargs: Any) -> dict[str, Any]:
        args = _validated(kwargs)
        if isinstance(args, dict):
            return args
        return write_payload(memory, args.text, args.target)

    async def amemory_write(**kwargs: Any) -> dict[str, Any]:
        args = _validated(kwargs)
        if isinstance(args, dict):
            return args
        return await awrite_payload(memory, args.text, args.target)

    return MemoryFunctionTool(
        fn=memory_write,
        async_fn=amemory_write,
        metadata=ToolMetadata(name=MEMORY_WRITE_NAME, description=MEMORY_WRITE_DESCRIPTION, fn_schema=MemoryWriteInput),
    )
