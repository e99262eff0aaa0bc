"""Session transcripts: OpenClaw JSONL parsing, secret masking, line maps and delta tracking (SPEC 8).

A transcript is one JSON record a line. Only ``type: "message"`` records whose ``message.role`` is ``user`` or
``assistant`` become content: one ``User: …`` / ``Assistant: …`` line each, whitespace collapsed, secrets masked.
``line_map[i]`` is the 1-based JSONL line of content line ``i + 1``, so search hits map back to the transcript.

LangChain and LlamaIndex histories become transcripts through :func:`messages_to_jsonl` (duck-typed: neither
framework is imported).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from .discovery import is_valid_name, printable_name

__all__ = [
    "SessionEntry",
    "SessionDeltaTracker",
    "DeltaState",
    "parse_transcript",
    "read_session_file",
    "mask_secrets",
    "remap_lines",
    "list_session_files",
    "session_display_path",
    "session_hash",
    "message_to_record",
    "messages_to_jsonl",
    "write_session_file",
    "chat_store_to_jsonl",
]


def _mask(text: str) -> str:
    # masking compiles its patterns on import: loaded by the first transcript parsed, not by every index
    from .masking import mask_secrets

    return mask_secrets(text)


def __getattr__(name: str) -> Any:
    if name == "mask_secrets":  # re-exported, loaded on first use
        from .masking import mask_secrets

        return mask_secrets
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

SESSIONS_PREFIX = "sessions"
_DELTA_READ_CHUNK = 64 * 1024

# --------------------------------------------------------------------------------------------------------------
# Transcript parsing
# --------------------------------------------------------------------------------------------------------------

_NEWLINES = re.compile(r"\s*\n+\s*")
_SPACES = re.compile(r"\s+")
#: Half of a surrogate pair: JSON can escape one (a JavaScript string cut inside an emoji), no text
#: encoding can hold it, so it becomes U+FFFD as undecodable bytes do.
_LONE_SURROGATES = re.compile("[\ud800-\udfff]")
_ROLE_LABELS = {"user": "User", "assistant": "Assistant"}


@dataclass(frozen=True)
class SessionEntry:
    """The indexable text of one transcript: one line per message and the JSONL line of each."""

    content: str
    line_map: tuple[int, ...]
    #: Lines that are not JSON (or nested too deeply to parse): skipped, counted here.
    skipped_lines: int = 0

    @property
    def hash(self) -> str:
        """SHA-256 of the content and its line map (OpenClaw's session file hash)."""
        return session_hash(self.content, self.line_map)

    @property
    def message_count(self) -> int:
        return len(self.line_map)


def _normalize(value: str) -> str:
    return _LONE_SURROGATES.sub("\ufffd", _SPACES.sub(" ", _NEWLINES.sub(" ", value)).strip())


def _extract_text(content: Any) -> str | None:
    if isinstance(content, str):
        return _normalize(content) or None
    if not isinstance(content, list):
        return None
    parts: list[str] = []
    for block in content:
        if not isinstance(block, dict) or block.get("type") != "text":
            continue
        text = block.get("text")
        if isinstance(text, str):
            normalized = _normalize(text)
            if normalized:
                parts.append(normalized)
    return " ".join(parts) if parts else None


def parse_transcript(text: str) -> SessionEntry:
    """Turn OpenClaw JSONL transcript text into a :class:`SessionEntry`.

    Blank lines, invalid JSON, non-message records, roles other than user/assistant and non-text blocks are
    skipped; invalid lines (including JSON nested too deeply for the parser) are counted in
    ``skipped_lines``. Secrets are masked with :func:`mask_secrets`.
    """
    collected: list[str] = []
    line_map: list[int] = []
    skipped = 0
    for index, line in enumerate(text.split("\n")):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: "[" * 1500 + "]" * 1500
            skipped += 1
            continue
        if not isinstance(record, dict) or record.get("type") != "message":
            continue
        message = record.get("message")
        if not isinstance(message, dict):
            continue
        label = _ROLE_LABELS.get(message.get("role")) if isinstance(message.get("role"), str) else None
        if label is None:
            continue
        extracted = _extract_text(message.get("content"))
        if not extracted:
            continue
        # Masking a PEM block can reintroduce newlines; one message must stay one line.
        safe = _normalize(_mask(extracted))
        collected.append(f"{label}: {safe}")
        line_map.append(index + 1)
    return SessionEntry(content="\n".join(collected), line_map=tuple(line_map), skipped_lines=skipped)


def read_session_file(path: str | os.PathLike[str]) -> SessionEntry:
    """Read and parse a transcript file (UTF-8, undecodable bytes replaced)."""
    with open(path, encoding="utf-8", errors="replace", newline="") as handle:
        return parse_transcript(handle.read())


def session_hash(content: str, line_map: Sequence[int]) -> str:
    """SHA-256 hex of ``content + "\\n" + ",".join(line_map)``, as OpenClaw hashes a session entry."""
    payload = content + "\n" + ",".join(str(n) for n in line_map)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def remap_lines(start: int, end: int, line_map: Sequence[int] | None) -> tuple[int, int]:
    """Map a chunk's 1-based content line range to JSONL line numbers; unchanged without a map or out of range."""
    if not line_map:
        return start, end
    new_start = line_map[start - 1] if 1 <= start <= len(line_map) else start
    new_end = line_map[end - 1] if 1 <= end <= len(line_map) else end
    return new_start, new_end


# --------------------------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------------------------

_ARCHIVE_NAME = re.compile(r"\.jsonl\.(?:reset|deleted)\.[^/\\]+$")


def list_session_files(
    sessions_dir: str | os.PathLike[str], *, include_archives: bool = False, bad_names: list[str] | None = None
) -> list[Path]:
    """Transcript files in ``sessions_dir``, sorted: regular ``*.jsonl`` files, not recursive.

    Symlinks, ``.bak.`` archives and ``sessions.json`` are skipped. With ``include_archives`` the
    ``*.jsonl.reset.<ts>`` / ``*.jsonl.deleted.<ts>`` archives of reset sessions are listed too. A missing
    directory gives ``[]``. A transcript whose name is not valid UTF-8 is left out and its display path (with
    ``\\xNN`` escapes) appended to ``bad_names``.
    """
    root = Path(sessions_dir)
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    found: list[Path] = []
    for entry in entries:
        name = entry.name
        if name == "sessions.json" or ".bak." in name:
            continue
        if not (name.endswith(".jsonl") or (include_archives and _ARCHIVE_NAME.search(name))):
            continue
        try:
            if entry.is_symlink() or not entry.is_file(follow_symlinks=False):
                continue
        except OSError:
            continue
        if not is_valid_name(name):
            if bad_names is not None:
                bad_names.append(printable_name(session_display_path(name)))
            continue
        found.append(root / name)
    return sorted(found)


def session_display_path(path: str | os.PathLike[str]) -> str:
    """The path a transcript shows in results: ``sessions/<basename>`` with forward slashes."""
    return f"{SESSIONS_PREFIX}/{os.path.basename(os.fspath(path))}"


# --------------------------------------------------------------------------------------------------------------
# Delta tracking (when a growing transcript is worth re-indexing)
# --------------------------------------------------------------------------------------------------------------


@dataclass
class DeltaState:
    """Growth of one transcript since it was last indexed."""

    last_size: int = 0
    pending_bytes: int = 0
    pending_messages: int = 0


def _count_newlines(path: Path, start: int, end: int) -> int:
    if end <= start:
        return 0
    from .safe_fs import UnsafeFileError, open_regular

    count = 0
    try:  # no symlink followed, no blocking on a FIFO swapped in since the stat
        fd = open_regular(os.path.dirname(path) or ".", (os.path.basename(path),))
    except UnsafeFileError:
        return 0
    with os.fdopen(fd, "rb") as handle:
        handle.seek(start)
        remaining = end - start
        while remaining > 0:
            chunk = handle.read(min(_DELTA_READ_CHUNK, remaining))
            if not chunk:
                break
            count += chunk.count(b"\n")
            remaining -= len(chunk)
    return count


class SessionDeltaTracker:
    """Counts bytes and newlines appended to each transcript and says when it needs re-indexing.

    OpenClaw's rules: a file becomes dirty when its pending bytes reach ``delta_bytes`` or its pending newlines
    reach ``delta_messages`` (a threshold of 0 means any growth). The pending counters then drop by the
    threshold. A file that shrank (rewritten or compacted) counts its whole new size and all its newlines.
    Newlines are only counted while the byte threshold is not yet reached. Thread-safe.
    """

    def __init__(self, delta_bytes: int = 100_000, delta_messages: int = 50) -> None:
        if delta_bytes < 0 or delta_messages < 0:
            raise ValueError("delta thresholds must be >= 0")
        self.delta_bytes = int(delta_bytes)
        self.delta_messages = int(delta_messages)
        self._states: dict[Path, DeltaState] = {}
        self._dirty: set[Path] = set()
        self._lock = threading.Lock()

    @staticmethod
    def _key(path: str | os.PathLike[str]) -> Path:
        # The real path: a transcript named through a symlinked sessions directory and the same file reported
        # by its real path are one file.
        return Path(os.path.realpath(os.fspath(path)))

    def state(self, path: str | os.PathLike[str]) -> DeltaState:
        """A copy of the counters for ``path`` (zeros if never seen)."""
        with self._lock:
            current = self._states.get(self._key(path), DeltaState())
            return DeltaState(current.last_size, current.pending_bytes, current.pending_messages)

    @property
    def dirty_files(self) -> set[Path]:
        """Files that crossed a threshold and have not been marked indexed since (real paths)."""
        with self._lock:
            return set(self._dirty)

    def is_dirty(self, path: str | os.PathLike[str]) -> bool:
        """Whether ``path`` (by its real path) crossed a threshold and was not marked indexed since."""
        key = self._key(path)
        with self._lock:
            return key in self._dirty

    def _should_count_messages(self, state: DeltaState) -> bool:
        return self.delta_messages > 0 and (self.delta_bytes <= 0 or state.pending_bytes < self.delta_bytes)

    def observe(self, path: str | os.PathLike[str]) -> bool:
        """Record the current size of ``path``; return True when it has just become dirty.

        A missing file returns False and changes nothing.
        """
        key = self._key(path)
        try:
            size = os.stat(key).st_size
        except OSError:
            return False
        with self._lock:
            state = self._states.setdefault(key, DeltaState())
            if size == state.last_size:
                return False
            try:
                if size < state.last_size:
                    state.last_size = size
                    state.pending_bytes += size
                    if self._should_count_messages(state):
                        state.pending_messages += _count_newlines(key, 0, size)
                else:
                    previous = state.last_size
                    state.pending_bytes += size - previous
                    if self._should_count_messages(state):
                        state.pending_messages += _count_newlines(key, previous, size)
                    state.last_size = size
            except OSError:
                return False
            bytes_hit = state.pending_bytes > 0 if self.delta_bytes <= 0 else state.pending_bytes >= self.delta_bytes
            messages_hit = (
                state.pending_messages > 0
                if self.delta_messages <= 0
                else state.pending_messages >= self.delta_messages
            )
            if not (bytes_hit or messages_hit):
                return False
            state.pending_bytes = max(0, state.pending_bytes - self.delta_bytes) if self.delta_bytes > 0 else 0
            state.pending_messages = (
                max(0, state.pending_messages - self.delta_messages) if self.delta_messages > 0 else 0
            )
            self._dirty.add(key)
            return True

    def mark_indexed(self, path: str | os.PathLike[str], size: int | None = None) -> None:
        """Reset the counters of ``path`` after it was indexed (``size``: the size indexed, else the current one)."""
        key = self._key(path)
        if size is None:
            try:
                size = os.stat(key).st_size
            except OSError:
                size = 0
        with self._lock:
            self._states[key] = DeltaState(last_size=size)
            self._dirty.discard(key)

    def forget(self, path: str | os.PathLike[str]) -> None:
        """Drop all state of ``path`` (a deleted transcript)."""
        key = self._key(path)
        with self._lock:
            self._states.pop(key, None)
            self._dirty.discard(key)


# --------------------------------------------------------------------------------------------------------------
# LangChain / LlamaIndex histories → OpenClaw JSONL (duck-typed)
# --------------------------------------------------------------------------------------------------------------

_ROLE_ALIASES = {
    "human": "user",
    "user": "user",
    "humanmessage": "user",
    "humanmessagechunk": "user",
    "ai": "assistant",
    "assistant": "assistant",
    "aimessage": "assistant",
    "aimessagechunk": "assistant",
    "chatbot": "assistant",
    "model": "assistant",
    "system": "system",
    "developer": "system",
    "systemmessage": "system",
    "systemmessagechunk": "system",
    "tool": "tool",
    "function": "tool",
    "toolmessage": "tool",
    "toolmessagechunk": "tool",
    "functionmessage": "tool",
}


def _role_of(message: Any) -> str | None:
    if isinstance(message, Mapping):
        raw = message.get("role", message.get("type"))
    else:
        raw = getattr(message, "role", None)  # LlamaIndex ChatMessage, LangChain ChatMessage
        if raw is None:
            raw = getattr(message, "type", None)  # LangChain BaseMessage
    value = getattr(raw, "value", raw)  # enums (LlamaIndex MessageRole)
    if not isinstance(value, str) or not value:
        return None
    return _ROLE_ALIASES.get(value.lower(), value.lower())


def _text_blocks(items: Iterable[Any]) -> list[dict[str, str]]:
    blocks: list[dict[str, str]] = []
    for item in items:
        if isinstance(item, str):
            blocks.append({"type": "text", "text": item})
        elif isinstance(item, Mapping):
            kind = item.get("type", item.get("block_type"))
            if kind == "text" and isinstance(item.get("text"), str):
                blocks.append({"type": "text", "text": item["text"]})
        else:
            kind = getattr(item, "block_type", getattr(item, "type", None))
            text = getattr(item, "text", None)
            if kind == "text" and isinstance(text, str):
                blocks.append({"type": "text", "text": text})
    return blocks


def _content_of(message: Any) -> str | list[dict[str, str]]:
    if isinstance(message, Mapping):
        content = message.get("content")
    else:
        blocks = getattr(message, "blocks", None)  # LlamaIndex ChatMessage
        if isinstance(blocks, (list, tuple)) and blocks:
            return _text_blocks(blocks)
        content = getattr(message, "content", None)
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        return _text_blocks(content)
    return str(content)


def message_to_record(message: Any) -> dict[str, Any] | None:
    """One chat message as an OpenClaw ``{"type": "message", "message": {...}}`` record.

    Accepts LangChain messages (``.type`` + ``.content``), LlamaIndex ``ChatMessage`` (``.role`` +
    ``.blocks``/``.content``) and plain dicts (``{"role", "content"}``). Only text blocks are kept. Returns None
    when no role can be found.
    """
    role = _role_of(message)
    if role is None:
        return None
    record: dict[str, Any] = {"type": "message"}
    message_id = message.get("id") if isinstance(message, Mapping) else getattr(message, "id", None)
    if isinstance(message_id, str) and message_id:
        record["id"] = message_id
    record["message"] = {"role": role, "content": _content_of(message)}
    return record


def messages_to_jsonl(messages: Iterable[Any]) -> str:
    """Serialise a chat history as OpenClaw JSONL text (one record a line, trailing newline).

    ``messages`` may also be an object with a ``messages`` attribute (a LangChain chat message history).
    """
    if not isinstance(messages, (list, tuple)) and hasattr(messages, "messages"):
        messages = messages.messages  # type: ignore[attr-defined]
    lines = []
    for message in messages:
        record = message_to_record(message)
        if record is not None:
            lines.append(json.dumps(record, ensure_ascii=False))
    return "".join(line + "\n" for line in lines)


def chat_store_to_jsonl(chat_store: Any) -> dict[str, str]:
    """JSONL text for every key of a LlamaIndex chat store (anything with ``get_keys()`` and ``get_messages(key)``)."""
    return {str(key): messages_to_jsonl(chat_store.get_messages(key)) for key in chat_store.get_keys()}


_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_-]+")


def write_session_file(sessions_dir: str | os.PathLike[str], session_id: str, messages: Iterable[Any]) -> Path:
    """Write a chat history to ``<sessions_dir>/<session_id>.jsonl`` atomically (temp file + rename).

    The session id is reduced to ``[A-Za-z0-9_-]``. The directory is created when missing.
    """
    name = _UNSAFE_NAME.sub("-", session_id).strip("-") or "session"
    directory = Path(sessions_dir)
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"{name}.jsonl"
    text = messages_to_jsonl(messages)
    import tempfile

    fd, tmp_name = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        os.replace(tmp_name, target)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except OSError:
            pass
        raise
    return target
