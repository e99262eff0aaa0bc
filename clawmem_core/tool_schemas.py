"""Pydantic argument schemas of the ``memory_search``, ``memory_get`` and ``memory_write`` tools, shared by the
LangChain and LlamaIndex adapters (both frameworks bring pydantic; the core itself never imports
this module)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["MemorySearchInput", "MemoryGetInput", "MemoryWriteInput"]


class MemorySearchInput(BaseModel):
    """Arguments of ``memory_search`` (camelCase on the wire, as OpenClaw names them)."""

    model_config = ConfigDict(populate_by_name=True)

    query: str = Field(description="What to recall: a question or keywords.")
    max_results: int | None = Field(
        default=None, ge=1, alias="maxResults", description="Maximum number of snippets to return (default 6)."
    )
    min_score: float | None = Field(
        default=None, ge=0, le=1, alias="minScore", description="Minimum relevance score from 0 to 1 (default 0.35)."
    )


class MemoryGetInput(BaseModel):
    """Arguments of ``memory_get``."""

    model_config = ConfigDict(populate_by_name=True)

    path: str = Field(description="Workspace-relative path: MEMORY.md or memory/....md, as memory_search returned it.")
    from_line: int | None = Field(default=None, alias="from", description="First line to read, 1-based.")
    lines: int | None = Field(default=None, description="Number of lines to read (default: to the end of the file).")


class MemoryWriteInput(BaseModel):
    """Arguments of ``memory_write``."""

    text: str = Field(description="The note to store, in Markdown (e.g. '- Dana prefers morning meetings').")
    target: Literal["daily", "long_term"] = Field(
        default="daily",
        description="'daily' appends to today's memory/YYYY-MM-DD.md; 'long_term' appends to MEMORY.md.",
    )
