"""Pydantic argument schemas of the ``memory_search``, ``memory_get`` and ``memory_write`` tools, shared by the
LangChain and LlamaIndex adapters (both frameworks bring pydantic; the core itself never imports
this module)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import InvalidQueryError
from .tools import (
    MEMORY_GET_DESCRIPTION,
    MEMORY_GET_NAME,
    MEMORY_SEARCH_DESCRIPTION,
    MEMORY_SEARCH_NAME,
    invalid_arguments_payload,
    search_error_payload,
    validation_message,
)

__all__ = ["MemorySearchInput", "MemoryGetInput", "MemoryWriteInput", "ToolSpec", "MEMORY_TOOL_SPECS",
           "parse_tool_arguments"]


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


@dataclass(frozen=True)
class ToolSpec:
    """What an adapter builds a read tool from: its name, the description the model reads, and its
    argument schema."""

    name: str
    description: str
    args_schema: type[BaseModel]


#: The read tools (``memory_search``, ``memory_get``) as both adapters build them.
MEMORY_TOOL_SPECS: dict[str, ToolSpec] = {
    MEMORY_SEARCH_NAME: ToolSpec(MEMORY_SEARCH_NAME, MEMORY_SEARCH_DESCRIPTION, MemorySearchInput),
    MEMORY_GET_NAME: ToolSpec(MEMORY_GET_NAME, MEMORY_GET_DESCRIPTION, MemoryGetInput),
}


def parse_tool_arguments(name: str, arguments: dict[str, Any]) -> BaseModel | dict[str, Any]:
    """The validated arguments of read tool ``name``, or the payload of a call with invalid arguments
    (``memory_search``: the search error payload; ``memory_get``: the path as given)."""
    try:
        return MEMORY_TOOL_SPECS[name].args_schema.model_validate(arguments)
    except ValidationError as exc:
        if name == MEMORY_SEARCH_NAME:
            return search_error_payload(InvalidQueryError(validation_message(exc)))
        return invalid_arguments_payload(name, validation_message(exc), arguments.get("path"))
