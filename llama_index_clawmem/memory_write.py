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
from clawmem_core.errors import ClawmemError
from clawmem_core.registry import MemoryResolver
from clawmem_core.memory_write import (
    MEMORY_WRITE_DESCRIPTION,
    MEMORY_WRITE_NAME,
    awrite_payload,
    write_payload,
)
from clawmem_core.tools import invalid_arguments_payload, validation_message
from clawmem_core.tool_schemas import MemoryWriteInput

from .tools import MemoryFunctionTool, per_user_functions, unresolved_payload
from .users import MemorySource

__all__ = ["MemoryWriteInput", "create_memory_write_tool"]


def _validated(kwargs: dict[str, Any]) -> MemoryWriteInput | dict[str, Any]:
    try:
        return MemoryWriteInput.model_validate(kwargs)
    except ValidationError as exc:
        return invalid_arguments_payload(MEMORY_WRITE_NAME, validation_message(exc))


def _write(memory: MemoryIndex, **kwargs: Any) -> dict[str, Any]:
    args = _validated(kwargs)
    if isinstance(args, dict):
        return args
    return write_payload(memory, args.text, args.target)


async def _awrite(memory: MemoryIndex, **kwargs: Any) -> dict[str, Any]:
    args = _validated(kwargs)
    if isinstance(args, dict):
        return args
    return await awrite_payload(memory, args.text, args.target)


def _unresolved(exc: ClawmemError, kwargs: dict[str, Any]) -> dict[str, Any]:
    return unresolved_payload(exc)


def create_memory_write_tool(memory: MemorySource) -> MemoryFunctionTool:
    """The ``memory_write`` tool over ``memory``: appends to ``memory/YYYY-MM-DD.md`` or ``MEMORY.md`` and
    indexes the note at once, so a later ``memory_search`` finds it. With a
    :class:`~clawmem_core.registry.MemoryResolver`, into the memory of the user the call names."""
    metadata = ToolMetadata(name=MEMORY_WRITE_NAME, description=MEMORY_WRITE_DESCRIPTION, fn_schema=MemoryWriteInput)
    if isinstance(memory, MemoryResolver):
        fn, async_fn = per_user_functions(memory, _write, _awrite, _unresolved)
        return MemoryFunctionTool(fn=fn, async_fn=async_fn, metadata=metadata)

    def memory_write(**kwargs: Any) -> dict[str, Any]:
        return _write(memory, **kwargs)

    async def amemory_write(**kwargs: Any) -> dict[str, Any]:
        return await _awrite(memory, **kwargs)

    return MemoryFunctionTool(fn=memory_write, async_fn=amemory_write, metadata=metadata)
