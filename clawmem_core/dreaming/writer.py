"""Applying decisions to ``MEMORY.md`` text: untouched entries stay byte for byte, a merge or supersede replaces
only its entry, additions go at the end. Entry text always comes from the candidate's live source (a merge's
text from the model, which :mod:`.validate` then requires the cited sources to hold)."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from .candidates import Candidate
from .decisions import Decision
from .entries import SourceRef, bound_text, entry_sources, format_entry, parse_entries
from .recall_log import normalize_text
from .sources import importance_of

__all__ = ["Composed", "compose", "candidate_entry", "write_atomic"]


@dataclass
class Composed:
    text: str
    added: list[str] = field(default_factory=list)
    merged: list[str] = field(default_factory=list)
    superseded: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)


def _ref(c: Candidate) -> SourceRef:
    return SourceRef(c.path, c.start, c.end)


def candidate_entry(c: Candidate) -> str:
    """The bounded, sourced entry of a candidate."""
    assert c.source is not None
    return format_entry(bound_text(c.source.text), [_ref(c)], c.importance, c.triggers)


def compose(prior: str, decisions: Sequence[Decision], candidates: dict[str, Candidate]) -> Composed:
    """The new ``MEMORY.md`` text for ``decisions`` (ids as in the prompt)."""
    entries = {e.id: e for e in parse_entries(prior)}
    replace: dict[str, str] = {}
    appended: list[str] = []
    out = Composed(prior)
    for d in decisions:
        c = candidates[d.candidate]
        if d.op == "skip":
            out.skipped.append((c.citation, f"model: {d.reason or 'skip'}"))
        elif d.op == "add":
            appended.append(candidate_entry(c))
            out.added.append(c.citation)
        elif d.op == "supersede":
            replace[str(d.entry)] = candidate_entry(c)
            out.superseded.append(f"{d.entry} <- {c.citation}")
        elif d.op == "merge":
            old = entries[str(d.entry)]
            refs = list(dict.fromkeys([_ref(c), *entry_sources(old.text)]))
            importance = max(c.importance, importance_of(old.text) or 1)
            replace[str(d.entry)] = format_entry(bound_text(normalize_text(str(d.text))), refs, importance)
            out.merged.append(f"{d.entry} + {c.citation}")
    pieces: list[str] = []
    position = 0
    for entry_id, entry in entries.items():
        if entry_id in replace:
            pieces.append(prior[position : entry.start])
            pieces.append(replace[entry_id])
            position = entry.end
    pieces.append(prior[position:])
    text = "".join(pieces)
    if appended:
        if text and not text.endswith("\n"):
            text += "\n"
        if text.strip() and not text.endswith("\n\n"):
            text += "\n"
        text += "\n\n".join(appended) + "\n"
    out.text = text
    return out


def write_atomic(path: Path, data: Optional[bytes]) -> None:
    """Replace ``path`` by ``data`` in one step (``None``: remove it)."""
    if data is None:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        return
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        except FileNotFoundError:
            os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
