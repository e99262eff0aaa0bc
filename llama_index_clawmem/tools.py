"""``memory_search`` and ``memory_get`` as LlamaIndex ``FunctionTool``s, and the Memory Recall prompt.

Each tool's output ``content`` is the SPEC payload as JSON and ``raw_output`` the payload dict.
Failures (provider errors, refused paths, invalid arguments) come back as payloads the model can
read, never as exceptions, with ``ToolOutput.is_error`` set.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Dict, Iterable, List, Optional, Sequence, Type

from llama_index.core.bridge.pydantic import BaseModel
from llama_index.core.tools import BaseTool, FunctionTool, ToolMetadata, ToolOutput
from llama_index.core.tools.tool_spec.base import SPEC_FUNCTION_TYPE, BaseToolSpec

from clawmem_core import MemoryIndex
from clawmem_core.tool_schemas import MEMORY_TOOL_SPECS, MemoryGetInput, MemorySearchInput, parse_tool_arguments
from clawmem_core.tools import (
    ALL_TOOLS,
    MEMORY_GET_NAME,
    MEMORY_SEARCH_NAME,
    CitationsMode,
    ToolName,
    asearch_payload,
    get_payload,
    memory_recall_section,
    search_payload,
    select_tools,
)


def _dumps(payload: Any) -> str:
    return json.dumps(payload, ensure_ascii=False)


def finish_output(output: ToolOutput) -> ToolOutput:
    """The payload as JSON content, and ``is_error`` set when the payload carries an ``error``."""
    payload = output.raw_output
    if not isinstance(payload, dict):
        return output
    return ToolOutput(
        content=_dumps(payload),
        tool_name=output.tool_name,
        raw_input=output.raw_input,
        raw_output=payload,
        is_error=bool(payload.get("error")),
    )


class MemoryFunctionTool(FunctionTool):
    """A ``FunctionTool`` returning a clawmem payload: ``content`` is the payload as JSON, ``raw_output`` the
    payload dict, and ``is_error`` is true when the payload has an ``error`` (invalid arguments, a refused path,
    an unavailable provider)."""

    def call(self, *args: Any, **kwargs: Any) -> ToolOutput:
        return finish_output(super().call(*args, **kwargs))

    async def acall(self, *args: Any, **kwargs: Any) -> ToolOutput:
        return finish_output(await super().acall(*args, **kwargs))


def _search_args(kwargs: dict[str, Any]) -> dict[str, Any] | MemorySearchInput:
    return parse_tool_arguments(MEMORY_SEARCH_NAME, kwargs)  # type: ignore[return-value]


def _get_args(kwargs: dict[str, Any]) -> dict[str, Any] | MemoryGetInput:
    return parse_tool_arguments(MEMORY_GET_NAME, kwargs)  # type: ignore[return-value]


def search_memory(memory: MemoryIndex, session_key: str | None = None, **kwargs: Any) -> dict[str, Any]:
    """The ``memory_search`` payload for raw tool arguments (validated; failures become payloads)."""
    args = _search_args(kwargs)
    if isinstance(args, dict):
        return args
    return search_payload(memory, args.query, args.max_results, args.min_score, session_key=session_key)


async def asearch_memory(memory: MemoryIndex, session_key: str | None = None, **kwargs: Any) -> dict[str, Any]:
    """Async twin of :func:`search_memory`."""
    args = _search_args(kwargs)
    if isinstance(args, dict):
        return args
    return await asearch_payload(memory, args.query, args.max_results, args.min_score, session_key=session_key)


def get_memory(memory: MemoryIndex, **kwargs: Any) -> dict[str, Any]:
    """The ``memory_get`` payload for raw tool arguments (validated; failures become payloads)."""
    args = _get_args(kwargs)
    if isinstance(args, dict):
        return args
    return get_payload(memory, args.path, args.from_line, args.lines)


def _metadata(name: str) -> ToolMetadata:
    """The ``ToolMetadata`` of read tool ``name``: the core's name, description and argument schema."""
    spec = MEMORY_TOOL_SPECS[name]
    return ToolMetadata(name=spec.name, description=spec.description, fn_schema=spec.args_schema)


def create_memory_search_tool(memory: MemoryIndex, *, session_key: str | None = None) -> MemoryFunctionTool:
    """The ``memory_search`` tool over ``memory`` (``acall`` awaits the async search)."""

    def memory_search(**kwargs: Any) -> dict[str, Any]:
        return search_memory(memory, session_key, **kwargs)

    async def amemory_search(**kwargs: Any) -> dict[str, Any]:
        return await asearch_memory(memory, session_key, **kwargs)

    return MemoryFunctionTool(fn=memory_search, async_fn=amemory_search, metadata=_metadata(MEMORY_SEARCH_NAME))


def create_memory_get_tool(memory: MemoryIndex) -> MemoryFunctionTool:
    """The ``memory_get`` tool over ``memory``: reads lines of ``MEMORY.md`` / ``memory/**/*.md``."""

    def memory_get(**kwargs: Any) -> dict[str, Any]:
        return get_memory(memory, **kwargs)

    async def amemory_get(**kwargs: Any) -> dict[str, Any]:
        return await asyncio.to_thread(get_memory, memory, **kwargs)

    return MemoryFunctionTool(fn=memory_get, async_fn=amemory_get, metadata=_metadata(MEMORY_GET_NAME))


def create_memory_tools(
    memory: MemoryIndex, *, include: Iterable[ToolName] = ALL_TOOLS, session_key: str | None = None
) -> list[FunctionTool]:
    """``[memory_search, memory_get]`` (or the subset named in ``include``) over ``memory``."""
    return [
        create_memory_search_tool(memory, session_key=session_key) if n == MEMORY_SEARCH_NAME else create_memory_get_tool(memory)
        for n in select_tools(include)
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


_SPEC_METADATA = {name: (spec.description, spec.args_schema) for name, spec in MEMORY_TOOL_SPECS.items()}


class ClawmemToolSpec(BaseToolSpec):
    """The memory tools as a LlamaIndex tool spec.

    .. code-block:: python

        spec = ClawmemToolSpec(MemoryIndex("~/agent-workspace"))
        agent = FunctionAgent(tools=spec.to_tool_list(), llm=llm, system_prompt=spec.recall_prompt())

    ``memory_search`` / ``memory_get`` (and their async twins ``amemory_search`` / ``amemory_get``) are the spec
    functions; ``to_tool_list`` takes names or ``(sync, async)`` tuples and ``func_to_metadata_mapping`` as for any
    tool spec. The tools' names, descriptions and argument schemas are the SPEC ones (``maxResults``, ``from``...);
    their output is the payload as JSON, with ``is_error`` set for an error payload.
    """

    spec_functions: List[SPEC_FUNCTION_TYPE] = [  # type: ignore[assignment]
        (MEMORY_SEARCH_NAME, "amemory_search"),
        (MEMORY_GET_NAME, "amemory_get"),
    ]

    def __init__(self, memory: MemoryIndex, *, session_key: str | None = None) -> None:
        self.memory = memory
        self.session_key = session_key

    def memory_search(self, **kwargs: Any) -> dict[str, Any]:
        """Search the memory files (MEMORY.md, memory/**/*.md) before answering questions about prior work,
        decisions, dates, people, preferences or todos. Arguments: ``query`` (text), optional ``maxResults``
        (at least 1) and ``minScore`` (0 to 1). Returns the top snippets with path and lines."""
        return search_memory(self.memory, self.session_key, **kwargs)

    async def amemory_search(self, **kwargs: Any) -> dict[str, Any]:
        """Async twin of :meth:`memory_search` (awaits the query embedding)."""
        return await asearch_memory(self.memory, self.session_key, **kwargs)

    def memory_get(self, **kwargs: Any) -> dict[str, Any]:
        """Read lines of MEMORY.md or memory/**/*.md: ``path`` as memory_search returned it, optional ``from``
        (first line, 1-based) and ``lines``. Use after memory_search to pull only the needed lines."""
        return get_memory(self.memory, **kwargs)

    async def amemory_get(self, **kwargs: Any) -> dict[str, Any]:
        """Async twin of :meth:`memory_get` (reads in a worker thread)."""
        return await asyncio.to_thread(get_memory, self.memory, **kwargs)

    def get_fn_schema_from_fn_name(
        self, fn_name: str, spec_functions: Optional[List[SPEC_FUNCTION_TYPE]] = None
    ) -> Optional[Type[BaseModel]]:
        entry = _SPEC_METADATA.get(fn_name[1:] if fn_name.startswith("a") and fn_name[1:] in _SPEC_METADATA else fn_name)
        return entry[1] if entry else None

    def get_metadata_from_fn_name(
        self, fn_name: str, spec_functions: Optional[List[SPEC_FUNCTION_TYPE]] = None
    ) -> Optional[ToolMetadata]:
        name = fn_name[1:] if fn_name.startswith("a") and fn_name[1:] in _SPEC_METADATA else fn_name
        entry = _SPEC_METADATA.get(name)
        if entry is None:
            return super().get_metadata_from_fn_name(fn_name, spec_functions)
        return ToolMetadata(name=name, description=entry[0], fn_schema=entry[1])

    def to_tool_list(  # type: ignore[override]
        self,
        spec_functions: Optional[List[SPEC_FUNCTION_TYPE]] = None,
        func_to_metadata_mapping: Optional[Dict[str, ToolMetadata]] = None,
    ) -> List[FunctionTool]:
        """The tools for ``spec_functions`` (default: both, each with its async twin), as ``BaseToolSpec``
        builds them, returning JSON payloads with ``is_error`` for errors."""
        tools = super().to_tool_list(spec_functions, func_to_metadata_mapping)
        return [MemoryFunctionTool(fn=t.fn, async_fn=t.async_fn, metadata=t.metadata) for t in tools]

    def recall_prompt(self, spec_functions: Optional[Sequence[SPEC_FUNCTION_TYPE]] = None) -> str:
        """The Memory Recall section for these tools and the index's citations mode."""
        names = [n if isinstance(n, str) else n[0] for n in (spec_functions or self.spec_functions)]
        names = [n[1:] if n.startswith("a") and n[1:] in _SPEC_METADATA else n for n in names]
        return memory_recall_prompt(names, citations=self.memory.config.citations)
