"""``memory_search`` and ``memory_get`` as LlamaIndex ``FunctionTool``s, and the Memory Recall prompt.

Each tool's output ``content`` is the SPEC payload as JSON and ``raw_output`` the payload dict.
Failures (provider errors, refused paths, invalid arguments) come back as payloads the model can
read, never as exceptions.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Iterable, Literal, Sequence

from llama_index.core.bridge.pydantic import ValidationError
from llama_index.core.tools import BaseTool, FunctionTool, ToolMetadata
from llama_index.core.tools.tool_spec.base import BaseToolSpec

from clawmem_core import InvalidQueryError, MemoryIndex
from clawmem_core.tool_schemas import MemoryGetInput, MemorySearchInput
from clawmem_core.tools import (
    MEMORY_GET_DESCRIPTION,
    MEMORY_GET_NAME,
    MEMORY_SEARCH_DESCRIPTION,
    MEMORY_SEARCH_NAME,
    CitationsMode,
    asearch_payload,
    get_payload,
    invalid_arguments_payload,
    memory_recall_section,
    search_error_payload,
    search_payload,
)

ToolName = Literal["memory_search", "memory_get"]
ALL_TOOLS: tuple[ToolName, ...] = (MEMORY_SEARCH_NAME, MEMORY_GET_NAME)  # type: ignore[assignment]


def _dumps(payload: Any) -> str:
    return json.dumps(payload, ensure_ascii=False)


def _invalid(exc: ValidationError) -> str:
    parts = [f"{'.'.join(str(p) for p in e.get('loc', ())) or 'input'}: {e.get('msg', 'invalid')}" for e in exc.errors()]
    return "invalid arguments: " + ("; ".join(parts) or str(exc))


def create_memory_search_tool(memory: MemoryIndex, *, session_key: str | None = None) -> FunctionTool:
    """The ``memory_search`` tool over ``memory`` (``acall`` awaits the async search)."""

    def memory_search(**kwargs: Any) -> dict[str, Any]:
        try:
            args = MemorySearchInput.model_validate(kwargs)
        except ValidationError as exc:
            return search_error_payload(InvalidQueryError(_invalid(exc)))
        return search_payload(memory, args.query, args.max_results, args.min_score, session_key=session_key)

    async def amemory_search(**kwargs: Any) -> dict[str, Any]:
        try:
            args = MemorySearchInput.model_validate(kwargs)
        except ValidationError as exc:
            return search_error_payload(InvalidQueryError(_invalid(exc)))
        return await asearch_payload(memory, args.query, args.max_results, args.min_score, session_key=session_key)

    return FunctionTool(
        fn=memory_search,
        async_fn=amemory_search,
        metadata=ToolMetadata(name=MEMORY_SEARCH_NAME, description=MEMORY_SEARCH_DESCRIPTION, fn_schema=MemorySearchInput),
        callback=_dumps,
        async_callback=_adumps,
    )


def create_memory_get_tool(memory: MemoryIndex) -> FunctionTool:
    """The ``memory_get`` tool over ``memory``: reads lines of ``MEMORY.md`` / ``memory/**/*.md``."""

    def memory_get(**kwargs: Any) -> dict[str, Any]:
        try:
            args = MemoryGetInput.model_validate(kwargs)
        except ValidationError as exc:
            path = kwargs.get("path")
            return invalid_arguments_payload(MEMORY_GET_NAME, _invalid(exc), path)
        return get_payload(memory, args.path, args.from_line, args.lines)

    async def amemory_get(**kwargs: Any) -> dict[str, Any]:
        return await asyncio.to_thread(memory_get, **kwargs)

    return FunctionTool(
        fn=memory_get,
        async_fn=amemory_get,
        metadata=ToolMetadata(name=MEMORY_GET_NAME, description=MEMORY_GET_DESCRIPTION, fn_schema=MemoryGetInput),
        callback=_dumps,
        async_callback=_adumps,
    )


async def _adumps(payload: Any) -> str:
    return _dumps(payload)


def create_memory_tools(
    memory: MemoryIndex, *, include: Iterable[ToolName] = ALL_TOOLS, session_key: str | None = None
) -> list[FunctionTool]:
    """``[memory_search, memory_get]`` (or the subset named in ``include``) over ``memory``."""
    wanted = list(dict.fromkeys(include))
    unknown = [n for n in wanted if n not in ALL_TOOLS]
    if unknown:
        raise ValueError(f"unknown memory tool(s): {unknown}; expected {list(ALL_TOOLS)}")
    return [
        create_memory_search_tool(memory, session_key=session_key) if n == MEMORY_SEARCH_NAME else create_memory_get_tool(memory)
        for n in wanted
    ]


def memory_recall_prompt(
    tools: Sequence[BaseTool | str] | None = None, *, citations: CitationsMode = "auto"
) -> str:
    """The Memory Recall system-prompt section for the given tools (both when ``None``).

    With only one of the two tools the wording changes; ``citations="off"`` asks the model not to
    cite paths. Returns ``""`` when neither tool is present.
    """
    names: set[str]
    if tools is None:
        names = set(ALL_TOOLS)
    else:
        names = {t if isinstance(t, str) else t.metadata.get_name() for t in tools}
    return memory_recall_section(
        has_search=MEMORY_SEARCH_NAME in names, has_get=MEMORY_GET_NAME in names, citations=citations
    )


class ClawmemToolSpec(BaseToolSpec):
    """The memory tools as a LlamaIndex tool spec.

    .. code-block:: python

        spec = ClawmemToolSpec(MemoryIndex("~/agent-workspace"))
        agent = FunctionAgent(tools=spec.to_tool_list(), llm=llm, system_prompt=spec.recall_prompt())
    """

    spec_functions = list(ALL_TOOLS)

    def __init__(self, memory: MemoryIndex, *, session_key: str | None = None) -> None:
        self.memory = memory
        self.session_key = session_key

    def to_tool_list(  # type: ignore[override]
        self, spec_functions: Sequence[ToolName] | None = None, func_to_metadata_mapping: Any = None
    ) -> list[FunctionTool]:
        """The tools named in ``spec_functions`` (default: both)."""
        include = list(spec_functions or self.spec_functions)
        return create_memory_tools(self.memory, include=include, session_key=self.session_key)  # type: ignore[arg-type]

    def recall_prompt(self, spec_functions: Sequence[ToolName] | None = None) -> str:
        """The Memory Recall section for these tools and the index's citations mode."""
        names: list[str] = [str(n) for n in (spec_functions or self.spec_functions)]
        return memory_recall_prompt(names, citations=self.memory.config.citations)
