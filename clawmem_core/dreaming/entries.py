"""``MEMORY.md`` as a list of entries, and the shape of a promoted entry.

An entry is a heading line, a top-level list item with its continuation lines, or a paragraph; blank lines
separate entries and belong to none. A promoted entry is one list item::

    - The gateway stays on loopback. <!-- importance: 7 -->
      Source: memory/2026-11-20.md#L3-L4

(a merged entry may cite several sources, separated by ``; ``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Sequence

from ..text import weighted_length
from .sources import clean_text

__all__ = ["Entry", "SourceRef", "parse_entries", "is_heading", "format_entry", "entry_sources", "entry_body", "bound_text",
           "entry_triggers", "MAX_ENTRY_WEIGHT"]

_ITEM = re.compile(r"^(?:[-*+]\s|\d{1,3}[.)]\s)")
_HEADING = re.compile(r"^#{1,6}\s")
_SOURCE_LINE = re.compile(r"^\s*Source:\s*(.+?)\s*$", re.M)
_REF = re.compile(r"^(?P<path>[^\s#;]+)#L(?P<a>\d+)(?:-L(?P<b>\d+))?$")
_TRIGGER = re.compile(r"<!--\s*trigger:\s*([^>]*?)\s*-->")
#: A trigger phrase: letters, digits, spaces, hyphens and apostrophes (CJK too), 2 to 40 characters.
_TRIGGER_OK = re.compile(r"[\w][\w '\-]{1,39}")
#: The most an entry's text weighs (characters, CJK counted 4; about 160 tokens, OpenClaw's default).
MAX_ENTRY_WEIGHT = 640


@dataclass(frozen=True)
class SourceRef:
    path: str
    start: int
    end: int

    def __str__(self) -> str:
        return f"{self.path}#L{self.start}-L{self.end}"


@dataclass(frozen=True)
class Entry:
    """Entry ``id`` (``E1``...), its exact text and character span in the file."""

    id: str
    text: str
    start: int
    end: int


def parse_entries(text: str) -> list[Entry]:
    """The entries of ``text`` in order (see the module documentation)."""
    entries: list[Entry] = []
    offset = 0
    current_start: Optional[int] = None
    current_end = 0

    def close() -> None:
        nonlocal current_start
        if current_start is not None:
            entries.append(Entry(f"E{len(entries) + 1}", text[current_start:current_end], current_start, current_end))
        current_start = None

    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        if not body.strip():
            close()
        else:
            starts_new = bool(_HEADING.match(body) or _ITEM.match(body))
            if current_start is not None and (starts_new or _HEADING.match(text[current_start:current_end])):
                close()
            if current_start is None:
                current_start = offset
            current_end = offset + len(body)
        offset += len(line)
    close()
    return entries


def entry_sources(entry_text: str) -> list[SourceRef]:
    """The ``Source:`` references of an entry (empty when it cites none or one is malformed)."""
    refs: list[SourceRef] = []
    for line in _SOURCE_LINE.findall(entry_text):
        for part in line.split(";"):
            m = _REF.match(part.strip())
            if not m:
                return []
            a = int(m["a"])
            refs.append(SourceRef(m["path"], a, int(m["b"] or a)))
    return refs


def is_heading(entry: Entry) -> bool:
    """Whether ``entry`` is a heading line: part of the file's structure, never merged into or superseded."""
    return bool(_HEADING.match(entry.text))


def entry_body(entry_text: str) -> str:
    """An entry's text without its ``Source:`` lines, comments and list marker."""
    return clean_text(_SOURCE_LINE.sub("", entry_text))


def bound_text(text: str, limit: int = MAX_ENTRY_WEIGHT) -> str:
    """``text`` cut (marked ``…``) so its weighted length stays within ``limit``."""
    if weighted_length(text) <= limit:
        return text
    out = []
    used = 0
    for ch in text:
        w = 4 if weighted_length(ch) > 1 else 1
        if used + w > limit - 1:
            break
        out.append(ch)
        used += w
    return "".join(out).rstrip() + "…"


def format_entry(body: str, sources: Sequence[SourceRef], importance: int, triggers: Sequence[str] = ()) -> str:
    """A promoted entry: one list item, its trigger phrases (up to 3) and importance, then its ``Source:`` line."""
    refs = "; ".join(str(s) for s in sources)
    tags = [t for t in triggers if _TRIGGER_OK.fullmatch(t)][:3]
    trigger = f" <!-- trigger: {', '.join(tags)} -->" if tags else ""
    return f"- {body}{trigger} <!-- importance: {min(10, max(1, int(importance)))} -->\n  Source: {refs}"


def entry_triggers(entry_text: str) -> list[str]:
    """The ``<!-- trigger: a, b -->`` phrases of an entry (comma or semicolon separated)."""
    found = _TRIGGER.findall(entry_text)
    return [p.strip() for p in re.split(r"[,;]", found[-1]) if p.strip()] if found else []
