"""The pre-compaction memory flush (SPEC 9), framework-free.

When a conversation nears its context limit, the agent gets one silent turn asking it to write durable memories
to ``memory/YYYY-MM-DD.md`` before older messages are compacted away. The flush runs when the estimated
conversation size reaches ``context_window - reserve_tokens - soft_threshold_tokens``, at most once per
compaction cycle, and never when the workspace is read-only.

This module holds the decision (:class:`FlushPolicy`, :class:`FlushCycleState`), the prompts, the token
estimate and the session-archive helper; the LangChain middleware and the LlamaIndex memory block drive them.

.. code-block:: python

    policy = FlushPolicy(context_window=128_000, workspace=mem.workspace)
    cycle = FlushCycleState()
    if policy.should_flush(estimate_messages_tokens(messages), cycle):
        ...  # one silent turn with flush_prompt() / flush_system_prompt() and the memory_write tool
        cycle.mark_flushed()
    ...
    cycle.mark_compacted()  # after the conversation was summarised or truncated
"""

from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

from .text import weighted_length

if TYPE_CHECKING:
    from .index import MemoryIndex
    from .writing import WriteResult

__all__ = [
    "DEFAULT_RESERVE_TOKENS",
    "DEFAULT_SOFT_THRESHOLD_TOKENS",
    "SILENT_REPLY_TOKEN",
    "FlushCycleState",
    "FlushPolicy",
    "archive_conversation",
    "estimate_messages_tokens",
    "estimate_tokens",
    "flush_prompt",
    "flush_system_prompt",
    "format_conversation",
    "is_silent_reply",
    "slug_prompt",
    "workspace_writable",
]

#: Tokens left between the flush point and the compaction point (OpenClaw's soft threshold).
DEFAULT_SOFT_THRESHOLD_TOKENS = 4000
#: Tokens kept free for the reply and the compaction summary (OpenClaw's reserve floor).
DEFAULT_RESERVE_TOKENS = 20_000
#: The reply that means "nothing to say": a flush turn that stored nothing answers with it.
SILENT_REPLY_TOKEN = "NO_REPLY"
#: Tokens counted for each message on top of its text (role and framing).
MESSAGE_OVERHEAD_TOKENS = 4


# --------------------------------------------------------------------------------------------------------------
# Token estimate
# --------------------------------------------------------------------------------------------------------------


def estimate_tokens(text: str) -> int:
    """Estimated tokens of ``text``: 4 characters a token, a CJK character a token on its own."""
    if not text:
        return 0
    return math.ceil(weighted_length(text) / 4)


def _message_text(message: Any) -> str:
    from .sessions import message_to_record

    if isinstance(message, str):
        return message
    record = message_to_record(message)
    parts: list[str] = []
    if record is not None:
        content = record["message"]["content"]
        if isinstance(content, str):
            parts.append(content)
        else:
            parts.extend(block["text"] for block in content)
    # Tool calls cost context too (LangChain ``tool_calls``, LlamaIndex tool-call blocks or kwargs).
    calls = message.get("tool_calls") if isinstance(message, dict) else getattr(message, "tool_calls", None)
    if calls:
        parts.append(repr(calls))
    return "\n".join(parts)


def estimate_messages_tokens(messages: Iterable[Any]) -> int:
    """Estimated tokens of a conversation: the text of each message (strings, LangChain messages, LlamaIndex
    ``ChatMessage`` or ``{"role", "content"}`` dicts) plus a small per-message overhead."""
    return sum(estimate_tokens(_message_text(m)) + MESSAGE_OVERHEAD_TOKENS for m in messages)


# --------------------------------------------------------------------------------------------------------------
# Policy and cycle
# --------------------------------------------------------------------------------------------------------------


def workspace_writable(workspace: str | os.PathLike[str]) -> bool:
    """Whether notes can be written: ``<workspace>/memory`` when it exists, else the workspace itself."""
    root = Path(workspace)
    memory_dir = root / "memory"
    target = memory_dir if memory_dir.is_dir() else root
    return target.is_dir() and os.access(target, os.W_OK | os.X_OK)


@dataclass
class FlushCycleState:
    """Where a conversation is in its compaction cycles: how many compactions happened and at which one the
    last flush ran (``None``: never). A flush runs at most once per compaction count. Thread-safe."""

    compaction_count: int = 0
    flushed_at_compaction: int | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def flushed_this_cycle(self) -> bool:
        return self.flushed_at_compaction == self.compaction_count

    def mark_flushed(self) -> None:
        """Record that this cycle's flush ran."""
        with self._lock:
            self.flushed_at_compaction = self.compaction_count

    def mark_compacted(self) -> None:
        """Start a new cycle: the conversation was compacted (summarised or truncated)."""
        with self._lock:
            self.compaction_count += 1

    def to_dict(self) -> dict[str, Any]:
        return {"compaction_count": self.compaction_count, "flushed_at_compaction": self.flushed_at_compaction}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> "FlushCycleState":
        data = data or {}
        flushed = data.get("flushed_at_compaction")
        return cls(int(data.get("compaction_count", 0)), None if flushed is None else int(flushed))


@dataclass
class FlushPolicy:
    """When to run the pre-compaction memory flush.

    ``threshold = context_window - reserve_tokens - soft_threshold_tokens`` (never below 0). A flush is due when
    the conversation's estimated tokens reach the threshold, the cycle has not flushed yet, and the workspace
    (``memory/`` when it exists) is writable. ``read_only=True`` skips flushes whatever the file permissions
    say (a sandbox that must not write); ``None`` checks ``workspace`` when one is given.
    """

    context_window: int
    reserve_tokens: int = DEFAULT_RESERVE_TOKENS
    soft_threshold_tokens: int = DEFAULT_SOFT_THRESHOLD_TOKENS
    workspace: str | os.PathLike[str] | None = None
    enabled: bool = True
    read_only: bool | None = None

    def __post_init__(self) -> None:
        for name in ("context_window", "reserve_tokens", "soft_threshold_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
        if self.context_window <= 0:
            raise ValueError(f"context_window must be positive, got {self.context_window!r}")

    @property
    def threshold(self) -> int:
        """Tokens at which the flush runs."""
        return max(0, self.context_window - self.reserve_tokens - self.soft_threshold_tokens)

    def writable(self) -> bool:
        if self.read_only is not None:
            return not self.read_only
        return True if self.workspace is None else workspace_writable(self.workspace)

    def should_flush(self, used_tokens: int, cycle_state: FlushCycleState | None = None) -> bool:
        """Whether to run the flush now for a conversation of ``used_tokens``."""
        if not self.enabled or used_tokens <= 0:
            return False
        threshold = self.threshold
        if threshold <= 0 or used_tokens < threshold:
            return False
        if cycle_state is not None and cycle_state.flushed_this_cycle:
            return False
        return self.writable()


# --------------------------------------------------------------------------------------------------------------
# Prompts
# --------------------------------------------------------------------------------------------------------------


def _day(now: datetime | None) -> str:
    return f"{(now or datetime.now()):%Y-%m-%d}"


def flush_prompt(now: datetime | None = None, *, tool_name: str = "memory_write") -> str:
    """The user message of the flush turn: store durable memories in today's ``memory/YYYY-MM-DD.md``,
    append-only, and reply ``NO_REPLY`` when there is nothing worth keeping."""
    day = _day(now)
    return " ".join(
        [
            "Pre-compaction memory flush.",
            f"Store durable memories now in memory/{day}.md (the memory/YYYY-MM-DD.md note of today)"
            f" using the {tool_name} tool.",
            "Keep only what will matter later: facts, decisions, preferences, people, open tasks and commitments.",
            f"Append only: memory/{day}.md may already hold entries; add new ones and never rewrite or remove them.",
            "Treat MEMORY.md and other workspace files as read-only during this turn.",
            "Write to the canonical daily file only; do not create variant file names.",
            f"If nothing is worth storing, reply with {SILENT_REPLY_TOKEN}.",
        ]
    )


def flush_system_prompt(now: datetime | None = None) -> str:
    """Extra system text of the flush turn."""
    day = _day(now)
    return " ".join(
        [
            "Pre-compaction memory flush turn.",
            "The conversation is about to be compacted and older messages will be lost;"
            " capture durable memories to disk first.",
            f"Write them to memory/{day}.md, appending only.",
            f"You may reply, but usually {SILENT_REPLY_TOKEN} is correct.",
        ]
    )


def is_silent_reply(text: str | None) -> bool:
    """Whether a reply is the silent token (possibly surrounded by whitespace or punctuation)."""
    if not text:
        return True
    return text.strip().strip(".!").strip() == SILENT_REPLY_TOKEN or text.strip().startswith(SILENT_REPLY_TOKEN)


def slug_prompt(conversation: str, max_chars: int = 4000) -> str:
    """The prompt asking a model for a short file-name slug describing ``conversation``."""
    return (
        "Give a short slug (1 to 4 lowercase words joined by hyphens, e.g. 'vendor-pitch') naming the topic of this "
        "conversation. Reply with the slug only.\n\n" + conversation[-max_chars:]
    )


# --------------------------------------------------------------------------------------------------------------
# Session archive
# --------------------------------------------------------------------------------------------------------------

_LABELS = {"user": "User", "assistant": "Assistant"}


def format_conversation(messages: Iterable[Any], *, max_messages: int | None = None) -> str:
    """``User: …`` / ``Assistant: …`` lines of the user and assistant text of a conversation (LangChain
    messages, LlamaIndex ``ChatMessage``, dicts or ``"role: text"`` strings). Empty messages (e.g. pure tool
    calls) and other roles are left out; each message keeps its own line breaks."""
    from .sessions import message_to_record

    lines: list[str] = []
    for message in messages:
        if isinstance(message, str):
            if message.strip():
                lines.append(message.strip())
            continue
        record = message_to_record(message)
        if record is None:
            continue
        label = _LABELS.get(record["message"]["role"])
        if label is None:
            continue
        content = record["message"]["content"]
        text = content if isinstance(content, str) else "\n".join(b["text"] for b in content)
        if text.strip() and not is_silent_reply(text):
            lines.append(f"{label}: {text.strip()}")
    if max_messages is not None:
        lines = lines[-max_messages:] if max_messages > 0 else []
    return "\n".join(lines)


def archive_conversation(
    mem: "MemoryIndex",
    messages: Iterable[Any] | str,
    *,
    slug: str | None = None,
    slug_fn: Callable[[str], str | None] | None = None,
    max_messages: int | None = 15,
    now: datetime | None = None,
) -> "WriteResult | None":
    """Save the recent conversation to ``memory/YYYY-MM-DD-<slug>.md`` and index it (``None`` when there is
    nothing to save).

    The slug is ``slug`` when given, else what ``slug_fn(conversation)`` returns (e.g. a model asked with
    :func:`slug_prompt`; failures and empty answers fall back), else the time ``HHMMSS``. Only the last
    ``max_messages`` user/assistant messages are kept (``None``: all). Secrets in the conversation are masked
    before it is written (:meth:`MemoryIndex.archive_session`).
    """
    text = messages if isinstance(messages, str) else format_conversation(messages, max_messages=max_messages)
    if not text.strip():
        return None
    chosen = slug
    if not chosen and slug_fn is not None:
        try:
            chosen = slug_fn(text)
        except Exception:  # a slug is a nicety: never lose the archive over it
            chosen = None
    if chosen:
        chosen = chosen.strip().splitlines()[0] if chosen.strip() else None
    return mem.archive_session(text, chosen or None, now=now)
