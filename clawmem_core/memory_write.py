"""The ``memory_write`` tool, framework-free: its name, description and payloads.

The LangChain and LlamaIndex adapters only translate. A write appends a note to today's
``memory/YYYY-MM-DD.md`` (or ``MEMORY.md``) and indexes it at once; failures come back as a payload the model
can read (``{"error": ..., "action": ...}`` for invalid arguments, ``{"error": ..., "disabled": true}`` when
memory cannot be written), never as an exception. A note that was appended but could not be indexed yet is a
success (``indexed: false`` and a warning): writing it again would store it twice.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from .tools import invalid_arguments_payload, is_argument_error

if TYPE_CHECKING:
    from .index import MemoryIndex

__all__ = [
    "MEMORY_WRITE_NAME",
    "MEMORY_WRITE_DESCRIPTION",
    "WRITE_TARGETS",
    "awrite_payload",
    "write_payload",
    "write_result_payload",
]

MEMORY_WRITE_NAME = "memory_write"
MEMORY_WRITE_DESCRIPTION = (
    "Store a durable memory as Markdown: appends the note to today's memory/YYYY-MM-DD.md (target='daily', the "
    "default) or to MEMORY.md (target='long_term', for lasting facts and preferences). Append-only: existing "
    "entries are never changed. Write short, self-contained notes (facts, decisions, preferences, people, todos); "
    "an overlong note is refused with the limit in the error. "
    "Returns the path and lines written; if the response has disabled=true, memory writing is unavailable. "
    "indexed=false means the note is saved but not searchable yet: do not write it again."
)
INDEX_PENDING_WARNING = (
    "The note was saved, but the memory index could not be updated yet, so it is not searchable until the next "
    "sync. Do not write it again."
)
WRITE_TARGETS = ("daily", "long_term")


def write_payload(mem: "MemoryIndex", text: Any, target: Any = "daily") -> dict[str, Any]:
    """Append ``text`` with :meth:`MemoryIndex.write` and return ``{path, startLine, endLine, indexed}`` (the
    path relative to the workspace; ``indexed: false`` with ``warning`` and ``indexError`` when the note was
    saved but indexing failed); ``{error, action}`` for invalid arguments (an empty note, an unknown target, a note
    over ``write.max_note_chars`` or one that would take its file past ``sync.max_file_bytes``, a note its file's
    legacy encoding cannot hold: nothing is written then), or ``{error, disabled: true}`` when memory cannot be
    written."""
    try:
        if not isinstance(text, str):
            raise TypeError(f"text must be a string, got {type(text).__name__}")
        if target not in WRITE_TARGETS:
            raise ValueError(f"unknown target {target!r}; use 'daily' or 'long_term'")
        result = mem.write(text, target=target)
    except Exception as exc:  # the model must see the failure, not a crash
        message = str(exc) or type(exc).__name__
        if is_argument_error(exc):
            return invalid_arguments_payload(MEMORY_WRITE_NAME, message)
        return {"error": message, "disabled": True}
    return write_result_payload(result, mem.workspace)


def write_result_payload(result: Any, workspace: Any) -> dict[str, Any]:
    """The payload of a write that happened (``result``: a :class:`~clawmem_core.writing.WriteResult`)."""
    payload: dict[str, Any] = {
        "path": result.relative_to(workspace),
        "startLine": result.start_line,
        "endLine": result.end_line,
        "indexed": result.indexed,
    }
    if not result.indexed:
        payload["warning"] = INDEX_PENDING_WARNING
        payload["indexError"] = result.index_error
    return payload


async def awrite_payload(mem: "MemoryIndex", text: Any, target: Any = "daily") -> dict[str, Any]:
    """Async twin of :func:`write_payload` (the write and its sync run in a worker thread)."""
    return await asyncio.to_thread(write_payload, mem, text, target)
