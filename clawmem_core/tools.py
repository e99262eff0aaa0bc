"""What the model sees (SPEC 10): tool names, descriptions, payloads and the Memory Recall
prompt section. Framework-free, so the LangChain and LlamaIndex adapters only translate."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any, Iterable, Literal, Sequence

from .discovery import printable_name
from .errors import (
    ClawmemError,
    ConfigError,
    EmbeddingError,
    EmbeddingQuotaError,
    InvalidQueryError,
    PathNotAllowedError,
    StoreError,
    WorkspaceError,
)

if TYPE_CHECKING:
    from .index import MemoryIndex

MEMORY_SEARCH_NAME = "memory_search"
MEMORY_GET_NAME = "memory_get"

#: The read tools an adapter builds, in their order.
ToolName = Literal["memory_search", "memory_get"]
ALL_TOOLS: tuple[ToolName, ...] = (MEMORY_SEARCH_NAME, MEMORY_GET_NAME)  # type: ignore[assignment]

MEMORY_SEARCH_DESCRIPTION = (
    "Mandatory recall step: semantically search MEMORY.md + memory/*.md (and optional session transcripts) "
    "before answering questions about prior work, decisions, dates, people, preferences, or todos; returns top "
    "snippets with path + lines. If response has disabled=true, memory retrieval is unavailable and should be "
    "surfaced to the user."
)
MEMORY_GET_DESCRIPTION = (
    "Safe snippet read from MEMORY.md or memory/*.md with optional from/lines; use after memory_search to pull "
    "only the needed lines and keep context small."
)

QUOTA_WARNING = "Memory search is unavailable because the embedding provider quota is exhausted."
QUOTA_ACTION = "Top up or switch embedding provider, then retry memory_search."
ERROR_WARNING = "Memory search is unavailable due to an embedding/provider error."
ERROR_ACTION = "Check embedding provider configuration and retry memory_search."
FAILURE_WARNING = "Memory search is unavailable: the memory index could not be read or updated (not a provider problem)."
FAILURE_ACTION = "Tell the user memory search failed with this error; `clawmem status` shows the index state."
ARGS_WARNING = "memory_search was called with invalid arguments."
ARGS_ACTION = "Fix the arguments (query text, maxResults >= 1, minScore between 0 and 1) and retry memory_search."
GET_ARGS_ACTION = ("Fix the arguments and retry memory_get: path is a workspace-relative MEMORY.md or memory/....md "
                   "path as memory_search returned it; from is the first line (1 or more); lines is how many (1 or "
                   "more).")
WRITE_ARGS_ACTION = ("Fix the arguments and retry memory_write: text is a non-empty Markdown note; target is 'daily' "
                     "or 'long_term'.")
_QUOTA_RE = re.compile(r"insufficient_quota|quota|429", re.IGNORECASE)

CitationsMode = Literal["auto", "on", "off"]


def citations_enabled(mode: CitationsMode, session_key: str | None = None) -> bool:
    """``on`` / ``off`` as said; ``auto`` cites in direct chats (a session key naming a group or
    channel turns citations off)."""
    if mode == "on":
        return True
    if mode == "off":
        return False
    if session_key:
        parts = re.split(r"[:/]", session_key.lower())
        if "group" in parts or "channel" in parts:
            return False
    return True


def coerce_numeric(value: Any) -> Any:
    """A number sent as a string (``"5"``, ``" 0.4 "``), as models often send them, as that number;
    anything else unchanged (the callee judges it). Applied to every numeric tool argument alike."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        return value
    return number if math.isfinite(number) else value


def search_payload(
    mem: "MemoryIndex",
    query: str,
    max_results: int | None = None,
    min_score: float | None = None,
    *,
    session_key: str | None = None,
) -> dict[str, Any]:
    """Run a search and return the ``memory_search`` payload; failures become the
    ``disabled/unavailable`` payload the model can read (never an exception)."""
    try:
        hits = mem.search(query, max_results=coerce_numeric(max_results), min_score=coerce_numeric(min_score),
                          session_key=session_key)
    except Exception as exc:  # the model must see the failure, not a crash
        return search_error_payload(exc)
    return format_search_payload(mem, hits, session_key=session_key)


async def asearch_payload(
    mem: "MemoryIndex",
    query: str,
    max_results: int | None = None,
    min_score: float | None = None,
    *,
    session_key: str | None = None,
) -> dict[str, Any]:
    """Async twin of :func:`search_payload`."""
    try:
        hits = await mem.asearch(query, max_results=coerce_numeric(max_results), min_score=coerce_numeric(min_score),
                                 session_key=session_key)
    except Exception as exc:
        return search_error_payload(exc)
    return format_search_payload(mem, hits, session_key=session_key)


def format_search_payload(mem: "MemoryIndex", hits: Sequence[Any], *, session_key: str | None = None) -> dict[str, Any]:
    cite = citations_enabled(mem.config.citations, session_key)
    results = []
    for h in hits:
        item = h.to_payload()
        if cite:
            item["snippet"] = f"{h.snippet.strip()}\n\nSource: {h.citation}"
        else:
            item["citation"] = None
        results.append(item)
    info = mem.provider_info()
    payload = {
        "results": results,
        "provider": info["provider"],
        "model": info["model"],
        "fallback": info["fallback"],
        "citations": mem.config.citations,
        "mode": info["mode"],
        **({"replica": True} if getattr(mem, "workspace", "") is None else {}),
        # How far the vectors are ({"done", "total"} chunks; null in keyword-only mode), and
        # whether changes on disk were not synced before answering.
        "vectors": getattr(hits, "vectors", None),
        "stale": bool(getattr(hits, "stale", False)),
    }
    made = getattr(hits, "info", None) or {}
    if made.get("degraded"):  # e.g. "embedding timeout": these results come from the keyword side
        payload["degraded"] = made["degraded"]
    if made.get("shared_unavailable"):  # shared namespaces searched as empty, and why
        payload["sharedUnavailable"] = made["shared_unavailable"]
    if "reranked" in made:
        payload["reranked"] = bool(made["reranked"])
        if made.get("rerank_error"):
            payload["rerank_error"] = made["rerank_error"]
    return payload


def search_error_payload(exc: BaseException) -> dict[str, Any]:
    """The payload of a failed ``memory_search``: invalid arguments, an unavailable provider
    (with OpenClaw's quota warning when the provider's quota is exhausted), or another failure
    (the index, a file), which names what failed and never blames the provider."""
    message = printable_name(str(exc) or type(exc).__name__)
    if is_argument_error(exc):
        return {"results": [], "error": message, "warning": ARGS_WARNING, "action": ARGS_ACTION}
    if not isinstance(exc, EmbeddingError):
        if not isinstance(exc, ClawmemError) and str(exc):
            message = f"{type(exc).__name__}: {message}"
        return {"results": [], "disabled": True, "unavailable": True, "error": message,
                "warning": FAILURE_WARNING, "action": FAILURE_ACTION}
    quota = isinstance(exc, EmbeddingQuotaError) or bool(_QUOTA_RE.search(message))
    return {
        "results": [],
        "disabled": True,
        "unavailable": True,
        "error": message,
        "warning": QUOTA_WARNING if quota else ERROR_WARNING,
        "action": QUOTA_ACTION if quota else ERROR_ACTION,
    }


def is_argument_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a mistake in the tool arguments (the model can fix it and retry), as opposed
    to memory being unavailable (a provider, store, configuration or workspace failure)."""
    if isinstance(exc, (InvalidQueryError, PathNotAllowedError)):
        return True
    if isinstance(exc, (EmbeddingError, StoreError, ConfigError, WorkspaceError, OSError)):
        return False
    return isinstance(exc, (ValueError, TypeError))


def validation_message(exc: Any) -> str:
    """One line naming each invalid argument of a pydantic ``ValidationError`` (read duck-typed, so
    this module imports no pydantic)."""
    try:
        errors = exc.errors()
    except Exception:  # noqa: BLE001 - not a ValidationError: its text is the message
        errors = None
    if not errors:
        return f"invalid arguments: {exc}"
    parts = [f"{'.'.join(str(p) for p in e.get('loc', ())) or 'input'}: {e.get('msg', 'invalid')}" for e in errors]
    return "invalid arguments: " + "; ".join(parts)


def select_tools(include: Iterable[str]) -> list[ToolName]:
    """The tool names of ``include`` in their given order, each once; an unknown name raises ``ValueError``."""
    wanted = list(dict.fromkeys(include))
    unknown = [n for n in wanted if n not in ALL_TOOLS]
    if unknown:
        raise ValueError(f"unknown memory tool(s): {unknown}; expected {list(ALL_TOOLS)}")
    return wanted  # type: ignore[return-value]


def invalid_arguments_payload(tool: str, message: str, path: Any = None) -> dict[str, Any]:
    """The payload of a tool call with invalid arguments: the error and what to fix, and no
    ``disabled`` (memory itself is available)."""
    if tool == MEMORY_SEARCH_NAME:
        return {"results": [], "error": message, "warning": ARGS_WARNING, "action": ARGS_ACTION}
    if tool == MEMORY_GET_NAME:
        return {"path": path if isinstance(path, str) else "", "text": "", "error": message, "action": GET_ARGS_ACTION}
    return {"error": message, "action": WRITE_ARGS_ACTION}


def _line_error(name: str, value: Any) -> str | None:
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None  # read() checks types and says what is wrong
    if value < 1:
        what = "the first line to read" if name == "from" else "the number of lines to read"
        return f"{name} must be 1 or more ({what}; lines are numbered from 1), got {value!r}"
    return None


def get_payload(mem: "MemoryIndex", path: Any, from_line: Any = None, lines: Any = None) -> dict[str, Any]:
    """Read lines and return the ``memory_get`` payload.

    A missing file adds ``missing: true``; a ``from`` past the end adds ``pastEnd: true`` (both with
    empty text). Invalid arguments (a refused path, ``from`` or ``lines`` below 1, a binary file)
    give ``{path, text: "", error, action}``; ``disabled: true`` only when memory is unavailable
    (the workspace or index cannot be read)."""
    shown = printable_name(path) if isinstance(path, str) else str(path)  # never a lone surrogate
    from_line, lines = coerce_numeric(from_line), coerce_numeric(lines)
    problem = _line_error("from", from_line) or _line_error("lines", lines)
    if problem:
        return invalid_arguments_payload(MEMORY_GET_NAME, problem, shown)
    try:
        result = mem.read(path, from_line=from_line, lines=lines)
    except Exception as exc:  # noqa: BLE001 - the model must see the failure, not a crash
        # an OS error's text names the absolute path: the model gets only its reason
        message = (exc.strerror or type(exc).__name__) if isinstance(exc, OSError) else (str(exc) or type(exc).__name__)
        message = printable_name(message)  # never a lone surrogate
        if is_argument_error(exc):
            return invalid_arguments_payload(MEMORY_GET_NAME, message, shown)
        return {"path": shown, "text": "", "disabled": True, "error": message}
    if looks_binary(result.text):
        return invalid_arguments_payload(
            MEMORY_GET_NAME, f"{result.path} is not a text file (binary content); read another file", result.path)
    payload = result.to_payload()
    if not result.missing and not result.text and result.total_lines and result.from_line > result.total_lines:
        payload["pastEnd"] = True
    return payload


def looks_binary(text: str) -> bool:
    """Whether read text is binary content rather than a note (NUL characters)."""
    return "\x00" in text


def memory_recall_prompt(
    *, has_search: bool = True, has_get: bool = True, citations: CitationsMode = "auto"
) -> list[str]:
    """The Memory Recall system-prompt section as lines (empty when neither tool is present);
    join with ``"\\n"``."""
    if not has_search and not has_get:
        return []
    lead = "Before answering anything about prior work, decisions, dates, people, preferences, or todos"
    if has_search and has_get:
        body = (f"{lead}: run memory_search on MEMORY.md + memory/*.md; then use memory_get to pull only the "
                "needed lines. If low confidence after search, say you checked.")
    elif has_search:
        body = (f"{lead}: run memory_search on MEMORY.md + memory/*.md and answer from the matching results. "
                "If low confidence after search, say you checked.")
    else:
        body = (f"{lead} that already point to a specific memory file or note: run memory_get to pull only the "
                "needed lines. If low confidence after reading them, say you checked.")
    if citations == "off":
        cite = ("Citations are disabled: do not mention file paths or line numbers in replies unless the user "
                "explicitly asks.")
    else:
        cite = "Citations: include Source: <path#line> when it helps the user verify memory snippets."
    return ["## Memory Recall", body, cite, ""]


def memory_recall_section(**kwargs: Any) -> str:
    """:func:`memory_recall_prompt` joined into one string."""
    return "\n".join(memory_recall_prompt(**kwargs))
