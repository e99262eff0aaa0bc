"""``memory_search`` and ``memory_get`` as LangChain tools, and the Memory Recall prompt.

The tools return the SPEC payloads: the message content is the payload as JSON, the payload
itself is the tool message's ``artifact``. Failures (provider errors, refused paths, invalid
arguments) come back as payloads the model can read, never as exceptions: called with a tool call,
such a payload (one with an ``error``) is a ``ToolMessage`` with ``status="error"``, the payload
still its artifact.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence, Union, cast

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool, BaseToolkit, StructuredTool, ToolException
from pydantic import ConfigDict, ValidationError

from clawmem_core import InvalidQueryError, MemoryIndex
from clawmem_core.errors import ClawmemError
from clawmem_core.registry import MemoryResolver
from clawmem_core.tool_schemas import MEMORY_TOOL_SPECS, MemoryGetInput, MemorySearchInput
from clawmem_core.tools import (
    ALL_TOOLS,
    MEMORY_GET_NAME,
    MEMORY_SEARCH_NAME,
    CitationsMode,
    ToolName,
    asearch_payload,
    get_payload,
    invalid_arguments_payload,
    memory_recall_section,
    search_error_payload,
    search_payload,
    select_tools,
    validation_message,
)

from .session import session_key_of, user_of

#: What the tools and the middleware act on: one index, or a resolver naming the user's index per call.
MemorySource = Union[MemoryIndex, MemoryResolver]


@contextlib.contextmanager
def memory_for_call(memory: MemorySource, runtime: Any = None) -> Iterator[MemoryIndex]:
    """``memory`` itself, or the index a resolver names for the current call's user (a missing or refused
    user: :class:`~clawmem_core.errors.ConfigError`)."""
    if isinstance(memory, MemoryResolver):
        with memory.resolve(user_of(memory.key, runtime)) as mem:
            yield mem
    else:
        yield memory


@contextlib.asynccontextmanager
async def amemory_for_call(memory: MemorySource, runtime: Any = None) -> AsyncIterator[MemoryIndex]:
    """:func:`memory_for_call` for asyncio."""
    if isinstance(memory, MemoryResolver):
        async with memory.aresolve(user_of(memory.key, runtime)) as mem:
            yield mem
    else:
        yield memory

#: ``metadata`` key on our tools recording the index's citations mode.
CITATIONS_METADATA_KEY = "clawmem_citations"


def _loads(content: Any) -> dict[str, Any] | None:
    if not isinstance(content, str):
        return None
    try:
        data = json.loads(content)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


class PayloadError(ToolException):
    """A tool payload carrying an ``error``: raised inside the tool so that LangChain itself makes the result a
    ``ToolMessage`` with ``status="error"`` (callbacks see it so too); its content is the payload as JSON."""

    def __init__(self, payload: dict[str, Any]) -> None:
        super().__init__(json.dumps(payload, ensure_ascii=False))
        self.payload = payload


def tool_result(payload: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """``(content, artifact)`` of a payload; an error payload raises :class:`PayloadError`."""
    if payload.get("error"):
        raise PayloadError(payload)
    return json.dumps(payload, ensure_ascii=False), payload


def _error_content(exc: ToolException) -> str:
    return str(exc)


def error_status(output: Any) -> Any:
    """Keep the payload of an error tool message as its artifact (LangChain's error paths leave the artifact
    empty; the status is already ``"error"``)."""
    if not isinstance(output, ToolMessage):
        return output
    payload = output.artifact if isinstance(output.artifact, dict) else _loads(output.content)
    if payload is None or not payload.get("error"):
        return output
    output.status = "error"
    output.artifact = payload
    return output


class MemoryStructuredTool(StructuredTool):
    """A ``StructuredTool`` whose schema for the model is its ``args_schema`` as is, so the
    SPEC argument names (``maxResults``, ``minScore``, ``from``) reach the model; LangChain's
    default subset schema would use the Python field names (``from`` is a Python keyword).

    Called with a tool call, a payload with an ``error`` (a failed search, a refused path, invalid
    arguments) comes back as a ``ToolMessage`` with ``status="error"`` and the payload as artifact."""

    @property
    def tool_call_schema(self) -> Any:  # type: ignore[override]
        return self.args_schema

    def run(self, *args: Any, **kwargs: Any) -> Any:
        return error_status(super().run(*args, **kwargs))

    async def arun(self, *args: Any, **kwargs: Any) -> Any:
        return error_status(await super().arun(*args, **kwargs))


def _dumps(payload: dict[str, Any]) -> str:
    return json.dumps(payload, ensure_ascii=False)


def _structured_tool(
    name: str,
    memory: MemorySource,
    func: Callable[..., tuple[str, dict[str, Any]]],
    coroutine: Callable[..., Awaitable[tuple[str, dict[str, Any]]]],
    invalid: Callable[[ValidationError], str],
) -> MemoryStructuredTool:
    """Read tool ``name`` (the core's name, description and argument schema) over ``func`` / ``coroutine``."""
    spec = MEMORY_TOOL_SPECS[name]
    tool = MemoryStructuredTool.from_function(
        func=func,
        coroutine=coroutine,
        name=spec.name,
        description=spec.description,
        args_schema=spec.args_schema,
        response_format="content_and_artifact",
        handle_validation_error=invalid,
        handle_tool_error=_error_content,
        metadata={CITATIONS_METADATA_KEY: memory.config.citations},
    )
    return cast(MemoryStructuredTool, tool)


def create_memory_search_tool(memory: MemorySource, *, session_key: str | None = None) -> MemoryStructuredTool:
    """The ``memory_search`` tool over ``memory``.

    ``session_key`` (e.g. ``"agent:main:group:42"``) lets ``citations="auto"`` drop citations in
    group chats, as OpenClaw does; searches are recorded in the recall log under it (``None``: under the
    LangGraph thread the tool runs in, if any). ``memory`` may be a :class:`MemoryResolver`: each call then
    searches the memory of the user its context names (none or a refused one: an error payload).
    """

    def _search(query: str, max_results: int | None = None, min_score: float | None = None) -> tuple[str, dict[str, Any]]:
        try:
            with memory_for_call(memory) as mem:
                payload = search_payload(mem, query, max_results, min_score, session_key=session_key_of(session_key))
        except ClawmemError as exc:
            payload = search_error_payload(exc)
        return tool_result(payload)

    async def _asearch(
        query: str, max_results: int | None = None, min_score: float | None = None
    ) -> tuple[str, dict[str, Any]]:
        try:
            async with amemory_for_call(memory) as mem:
                payload = await asearch_payload(
                    mem, query, max_results, min_score, session_key=session_key_of(session_key)
                )
        except ClawmemError as exc:
            payload = search_error_payload(exc)
        return tool_result(payload)

    def _invalid(exc: ValidationError) -> str:
        return _dumps(search_error_payload(InvalidQueryError(validation_message(exc))))

    return _structured_tool(MEMORY_SEARCH_NAME, memory, _search, _asearch, _invalid)


def unresolved_payload(exc: ClawmemError, path: Any = None) -> dict[str, Any]:
    """The payload of a call whose user's memory could not be named (no user, a refused one)."""
    payload: dict[str, Any] = {"error": str(exc), "disabled": True}
    if path is not None:
        payload = {"path": path if isinstance(path, str) else "", "text": "", **payload}
    return payload


def create_memory_get_tool(memory: MemorySource) -> MemoryStructuredTool:
    """The ``memory_get`` tool over ``memory`` (an index, or a :class:`MemoryResolver` naming the user's per
    call): reads lines of ``MEMORY.md`` / ``memory/**/*.md``."""

    def _get(path: str, from_line: int | None = None, lines: int | None = None) -> tuple[str, dict[str, Any]]:
        try:
            with memory_for_call(memory) as mem:
                payload = get_payload(mem, path, from_line, lines)
        except ClawmemError as exc:
            payload = unresolved_payload(exc, path)
        return tool_result(payload)

    async def _aget(path: str, from_line: int | None = None, lines: int | None = None) -> tuple[str, dict[str, Any]]:
        import asyncio

        try:
            async with amemory_for_call(memory) as mem:
                payload = await asyncio.to_thread(get_payload, mem, path, from_line, lines)
        except ClawmemError as exc:
            payload = unresolved_payload(exc, path)
        return tool_result(payload)

    def _invalid(exc: ValidationError) -> str:
        return _dumps(invalid_arguments_payload(MEMORY_GET_NAME, validation_message(exc)))

    return _structured_tool(MEMORY_GET_NAME, memory, _get, _aget, _invalid)


def create_memory_tools(
    memory: MemorySource, *, include: Iterable[ToolName] = ALL_TOOLS, session_key: str | None = None
) -> list[BaseTool]:
    """``[memory_search, memory_get]`` (or the subset named in ``include``) over ``memory``: one index, or a
    :class:`~clawmem_core.registry.MemoryResolver` naming each call's user (see :func:`user_of`)."""
    tools: list[BaseTool] = []
    for name in select_tools(include):
        if name == MEMORY_SEARCH_NAME:
            tools.append(create_memory_search_tool(memory, session_key=session_key))
        else:
            tools.append(create_memory_get_tool(memory))
    return tools


def memory_recall_prompt(
    tools: Sequence[BaseTool | str] | None = None, *, citations: CitationsMode | None = None
) -> str:
    """The Memory Recall system-prompt section for the given tools (both when ``None``).

    With only one of the two tools the wording changes; ``citations="off"`` asks the model not to
    cite paths. ``citations`` defaults to the mode of the index the tools were made for.
    Returns ``""`` when neither tool is present.
    """
    names: set[str]
    if tools is None:
        names = set(ALL_TOOLS)
    else:
        names = {t if isinstance(t, str) else t.name for t in tools}
    if citations is None:
        modes = [
            (t.metadata or {}).get(CITATIONS_METADATA_KEY)
            for t in (tools or [])
            if isinstance(t, BaseTool)
        ]
        citations = next((m for m in modes if m), "auto")
    return memory_recall_section(
        has_search=MEMORY_SEARCH_NAME in names, has_get=MEMORY_GET_NAME in names, citations=citations
    )


class ClawmemToolkit(BaseToolkit):
    """The memory tools and their system-prompt section, for an agent built by hand.

    With ``create_agent``, prefer :class:`~langchain_clawmem.middleware.ClawmemMiddleware`: it registers the same
    tools and appends the section to the system prompt the agent already has.

    .. code-block:: python

        kit = ClawmemToolkit(memory=MemoryIndex("~/agent-workspace"))
        tools, section = kit.get_tools(), kit.get_prompt()

    ``memory`` may also be a :class:`~clawmem_core.registry.MemoryResolver`: each tool call then uses the
    memory of the user its LangGraph context or ``config["configurable"]`` names.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory: MemorySource
    include: tuple[ToolName, ...] = ALL_TOOLS
    session_key: str | None = None

    def get_tools(self) -> list[BaseTool]:
        """The tools, newly built over :attr:`memory`."""
        return create_memory_tools(self.memory, include=self.include, session_key=self.session_key)

    def get_prompt(self) -> str:
        """The Memory Recall section matching :attr:`include` and the index's citations mode."""
        return memory_recall_prompt(list(self.include), citations=self.memory.config.citations)
