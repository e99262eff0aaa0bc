"""``memory_write`` as a LangChain tool: append a durable note to the Markdown memory.

The message content is the payload as JSON and the payload itself the tool message's ``artifact``:
``{path, startLine, endLine}``; a payload with an ``error`` (``{error, action}`` for invalid arguments, ``{error,
disabled: true}`` when memory cannot be written) otherwise, never an exception; with a tool call that is a
``ToolMessage`` with ``status="error"``.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from clawmem_core import MemoryIndex
from clawmem_core.memory_write import (
    MEMORY_WRITE_DESCRIPTION,
    MEMORY_WRITE_NAME,
    awrite_payload,
    write_payload,
)
from clawmem_core.tools import invalid_arguments_payload, validation_message
from clawmem_core.tool_schemas import MemoryWriteInput

from clawmem_core.errors import ClawmemError

from .tools import MemorySource, MemoryStructuredTool, _error_content, amemory_for_call, memory_for_call, tool_result, unresolved_payload

__all__ = ["MemoryWriteInput", "create_memory_write_tool"]


def _dumps(payload: dict[str, Any]) -> str:
    return json.dumps(payload, ensure_ascii=False)


def _invalid(exc: ValidationError) -> str:
    return _dumps(invalid_arguments_payload(MEMORY_WRITE_NAME, validation_message(exc)))


def create_memory_write_tool(memory: MemoryIndex | MemorySource) -> MemoryStructuredTool:
    """The ``memory_write`` tool over ``memory``: appends to ``memory/YYYY-MM-DD.md`` or ``MEMORY.md`` and
    indexes the note at once, so a later ``memory_search`` finds it. With a
    :class:`~clawmem_core.registry.MemoryResolver`, into the memory of the user the call names."""

    def _write(text: str, target: str = "daily") -> tuple[str, dict[str, Any]]:
        try:
            with memory_for_call(memory) as mem:
                payload = write_payload(mem, text, target)
        except ClawmemError as exc:
            payload = unresolved_payload(exc)
        return tool_result(payload)

    async def _awrite(text: str, target: str = "daily") -> tuple[str, dict[str, Any]]:
        try:
            async with amemory_for_call(memory) as mem:
                payload = await awrite_payload(mem, text, target)
        except ClawmemError as exc:
            payload = unresolved_payload(exc)
        return tool_result(payload)

    tool = MemoryStructuredTool.from_function(
        func=_write,
        coroutine=_awrite,
        name=MEMORY_WRITE_NAME,
        description=MEMORY_WRITE_DESCRIPTION,
        args_schema=MemoryWriteInput,
        response_format="content_and_artifact",
        handle_validation_error=_invalid,
        handle_tool_error=_error_content,
    )
    return tool  # type: ignore[return-value]
