"""``memory_search`` and ``memory_get`` as LlamaIndex ``FunctionTool``s, and the Memory Recall prompt.

Each tool's output ``content`` is the SPEC payload as JSON and ``raw_output`` the payload dict.
Failures (provider errors, refused paths, invalid arguments) come back as payloads the model can
read, never as exceptions, with ``ToolOutput.is_error`` set.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from typing import Any, Awaitable, Callable, Dict, Iterable, List, Optional, Sequence, Type

from llama_index.core.bridge.pydantic import BaseModel
from llama_index.core.tools import BaseTool, FunctionTool, ToolMetadata, ToolOutput
from llama_index.core.tools.tool_spec.base import SPEC_FUNCTION_TYPE, BaseToolSpec

from clawmem_core import MemoryIndex
from clawmem_core.errors import ClawmemError
from clawmem_core.registry import MemoryResolver
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
    search_error_payload,
    search_payload,
    select_tools,
)

from .users import MemorySource, amemory_for_call, memory_for_call


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
    an unavailable provider, no user named for a per-user memory).

    A tool over a :class:`~clawmem_core.registry.MemoryResolver` declares a ``ctx: Context`` parameter, so an
    agent passes it the run's workflow ``Context`` (which names the user); called by hand without one, the user
    comes from :func:`~llama_index_clawmem.users.memory_user`."""

    def _with_ctx(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        if self.requires_context and self.ctx_param_name is not None and self.ctx_param_name not in kwargs:
            kwargs = {**kwargs, self.ctx_param_name: None}
        return kwargs

    def call(self, *args: Any, **kwargs: Any) -> ToolOutput:
        return finish_output(super().call(*args, **self._with_ctx(kwargs)))

    async def acall(self, *args: Any, **kwargs: Any) -> ToolOutput:
        return finish_output(await super().acall(*args, **self._with_ctx(kwargs)))


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


def unresolved_payload(exc: ClawmemError, path: Any = None) -> dict[str, Any]:
    """The payload of a call whose user's memory could not be named (no user, a refused one)."""
    payload: dict[str, Any] = {"error": str(exc), "disabled": True}
    if path is not None:
        payload = {"path": path if isinstance(path, str) else "", "text": "", **payload}
    return payload


def context_signature() -> inspect.Signature:
    """``(*, ctx: Context = None, **kwargs)``: the signature by which an agent passes a tool its run's ``Context``."""
    from llama_index.core.workflow import Context

    return inspect.Signature([
        inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Context),
        inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD),
    ])


def per_user_functions(
    memory: MemoryResolver,
    run: Callable[..., dict[str, Any]],
    arun: Callable[..., Awaitable[dict[str, Any]]],
    unresolved: Callable[[ClawmemError, dict[str, Any]], dict[str, Any]],
) -> tuple[Callable[..., dict[str, Any]], Callable[..., Awaitable[dict[str, Any]]]]:
    """``(fn, async_fn)`` running ``run(mem, **kwargs)`` / ``arun(mem, **kwargs)`` on the memory of the user the
    call names; a user that cannot be named gives ``unresolved(error, kwargs)``, nothing read."""

    def fn(ctx: Any = None, **kwargs: Any) -> dict[str, Any]:
        try:
            with memory_for_call(memory, ctx) as mem:
                return run(mem, **kwargs)
        except ClawmemError as exc:
            return unresolved(exc, kwargs)

    async def async_fn(ctx: Any = None, **kwargs: Any) -> dict[str, Any]:
        try:
            async with amemory_for_call(memory, ctx) as mem:
                return await arun(mem, **kwargs)
        except ClawmemError as exc:
            return unresolved(exc, kwargs)

    fn.__signature__ = async_fn.__signature__ = context_signature()  # type: ignore[attr-defined]
    return fn, async_fn


def _unresolved_search(exc: ClawmemError, kwargs: dict[str, Any]) -> dict[str, Any]:
    return search_error_payload(exc)


def _unresolved_get(exc: ClawmemError, kwargs: dict[str, Any]) -> dict[str, Any]:
    return unresolved_payload(exc, kwargs.get("path"))


def create_memory_search_tool(memory: MemorySource, *, session_key: str | None = None) -> MemoryFunctionTool:
    """The ``memory_search`` tool over ``memory`` (``acall`` awaits the async search). With a
    :class:`~clawmem_core.registry.MemoryResolver`, each call searches the memory of the user its workflow
    ``Context`` (or :func:`~llama_index_clawmem.users.memory_user`) names; none or a refused one: an error payload."""
    if isinstance(memory, MemoryResolver):
        fn, async_fn = per_user_functions(
            memory,
            lambda mem, **kw: search_memory(mem, session_key, **kw),
            lambda mem, **kw: asearch_memory(mem, session_key, **kw),
            _unresolved_search,
        )
        return MemoryFunctionTool(fn=fn, async_fn=async_fn, metadata=_metadata(MEMORY_SEARCH_NAME))

    def memory_search(**kwargs: Any) -> dict[str, Any]:
        return search_memory(memory, session_key, **kwargs)

    async def amemory_search(**kwargs: Any) -> dict[str, Any]:
        return await asearch_memory(memory, session_key, **kwargs)

    return MemoryFunctionTool(fn=memory_search, async_fn=amemory_search, metadata=_metadata(MEMORY_SEARCH_NAME))


def create_memory_get_tool(memory: MemorySource) -> MemoryFunctionTool:
    """The ``memory_get`` tool over ``memory`` (an index, or a resolver naming the user's per call): reads lines
    of ``MEMORY.md`` / ``memory/**/*.md``."""
    if isinstance(memory, MemoryResolver):
        fn, async_fn = per_user_functions(
            memory, get_memory, lambda mem, **kw: asyncio.to_thread(get_memory, mem, **kw), _unresolved_get
        )
        return MemoryFunctionTool(fn=fn, async_fn=async_fn, metadata=_metadata(MEMORY_GET_NAME))

    def memory_get(**kwargs: Any) -> dict[str, Any]:
        return get_memory(memory, **kwargs)

    async def amemory_get(**kwargs: Any) -> dict[str, Any]:
        return await asyncio.to_thread(get_memory, memory, **kwargs)

    return MemoryFunctionTool(fn=memory_get, async_fn=amemory_get, metadata=_metadata(MEMORY_GET_NAME))


def create_memory_tools(
    memory: MemorySource, *, include: Iterable[ToolName] = ALL_TOOLS, session_key: str | None = None
) -> list[FunctionTool]:
    """``[memory_search, memory_get]`` (or the subset named in ``include``) over ``memory``: one index, or a
    :class:`~clawmem_core.registry.MemoryResolver` naming each call's user (see :mod:`llama_index_clawmem.users`)."""
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
    their output is the payload as JSON, with ``is_error`` set for an error payload. ``memory`` may be a
    :class:`~clawmem_core.registry.MemoryResolver`: each call then uses the memory of the user the agent's
    workflow ``Context`` names (see :mod:`llama_index_clawmem.users`).
    """

    spec_functions: List[SPEC_FUNCTION_TYPE] = [  # type: ignore[assignment]
        (MEMORY_SEARCH_NAME, "amemory_search"),
        (MEMORY_GET_NAME, "amemory_get"),
    ]

    def __init__(self, memory: MemorySource, *, session_key: str | None = None) -> None:
        self.memory = memory
        self.session_key = session_key

    def memory_search(self, ctx: Any = None, **kwargs: Any) -> dict[str, Any]:
        """Search the memory files (MEMORY.md, memory/**/*.md) before answering questions about prior work,
        decisions, dates, people, preferences or todos. Arguments: ``query`` (text), optional ``maxResults``
        (at least 1) and ``minScore`` (0 to 1). Returns the top snippets with path and lines."""
        try:
            with memory_for_call(self.memory, ctx) as mem:
                return search_memory(mem, self.session_key, **kwargs)
        except ClawmemError as exc:
            return search_error_payload(exc)

    async def amemory_search(self, ctx: Any = None, **kwargs: Any) -> dict[str, Any]:
        """Async twin of :meth:`memory_search` (awaits the query embedding)."""
        try:
            async with amemory_for_call(self.memory, ctx) as mem:
                return await asearch_memory(mem, self.session_key, **kwargs)
        except ClawmemError as exc:
            return search_error_payload(exc)

    def memory_get(self, ctx: Any = None, **kwargs: Any) -> dict[str, Any]:
        """Read lines of MEMORY.md or memory/**/*.md: ``path`` as memory_search returned it, optional ``from``
        (first line, 1-based) and ``lines``. Use after memory_search to pull only the needed lines."""
        try:
            with memory_for_call(self.memory, ctx) as mem:
                return get_memory(mem, **kwargs)
        except ClawmemError as exc:
            return unresolved_payload(exc, kwargs.get("path"))

    async def amemory_get(self, ctx: Any = None, **kwargs: Any) -> dict[str, Any]:
        """Async twin of :meth:`memory_get` (reads in a worker thread)."""
        try:
            async with amemory_for_call(self.memory, ctx) as mem:
                return await asyncio.to_thread(get_memory, mem, **kwargs)
        except ClawmemError as exc:
            return unresolved_payload(exc, kwargs.get("path"))

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
        if not isinstance(self.memory, MemoryResolver):
            return [MemoryFunctionTool(fn=t.fn, async_fn=t.async_fn, metadata=t.metadata) for t in tools]
        return [MemoryFunctionTool(fn=_passing_ctx(t.fn), async_fn=_passing_ctx(t.async_fn), metadata=t.metadata)
                for t in tools]

    def recall_prompt(self, spec_functions: Optional[Sequence[SPEC_FUNCTION_TYPE]] = None) -> str:
        """The Memory Recall section for these tools and the index's citations mode."""
        names = [n if isinstance(n, str) else n[0] for n in (spec_functions or self.spec_functions)]
        names = [n[1:] if n.startswith("a") and n[1:] in _SPEC_METADATA else n for n in names]
        return memory_recall_prompt(names, citations=self.memory.config.citations)


def _passing_ctx(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (a spec method taking ``ctx``) with the signature by which an agent passes its run's ``Context``."""
    if inspect.iscoroutinefunction(fn):

        async def async_wrapped(ctx: Any = None, **kwargs: Any) -> Any:
            return await fn(ctx=ctx, **kwargs)

        wrapped: Callable[..., Any] = async_wrapped
    else:

        def sync_wrapped(ctx: Any = None, **kwargs: Any) -> Any:
            return fn(ctx=ctx, **kwargs)

        wrapped = sync_wrapped
    wrapped.__signature__ = context_signature()  # type: ignore[attr-defined]
    wrapped.__name__ = getattr(fn, "__name__", "memory_tool")
    return wrapped
