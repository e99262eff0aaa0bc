"""The checks every proposed ``MEMORY.md`` must pass before it touches the file.

* prior entries lost (not kept byte for byte) at most ``max_loss_fraction`` of them;
* every new or changed entry has the promoted shape, cites existing daily-note or transcript lines (never
  ``MEMORY.md``, ``DREAMS.md`` or another namespace) and those lines hold each sentence of its text;
* no control characters, no secrets (:func:`clawmem_core.masking.mask_secrets` would change it), nothing that
  :func:`.sources.junk_reason` rejects (injected recall, shell commands, score metadata, instructions);
* the file within ``max_chars`` (a file already over it may not grow).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from ..masking import mask_secrets
from ..text import weighted_length
from .entries import MAX_ENTRY_WEIGHT, entry_body, entry_sources, parse_entries
from .sources import SourceText, Workspace, junk_reason, match_form, read_source

__all__ = ["RewriteLimits", "check_rewrite", "check_entry"]

_SHAPE = re.compile(r"- (?P<body>[^\n]+?)(?: <!-- trigger: [\w '\-,]{2,130} -->)? <!-- importance: (?:10|[1-9]) -->"
                    r"\n  Source: [^\n]+")
_PIECES = re.compile(r"[.!?;。！？；…]+(?:\s|$)|…")


@dataclass(frozen=True)
class RewriteLimits:
    max_loss_fraction: float = 0.25
    #: The ``MEMORY.md`` budget in characters (OpenClaw's bootstrap file budget).
    max_chars: int = 20_000
    max_entry_weight: int = MAX_ENTRY_WEIGHT


def _control(text: str) -> bool:
    return any((unicodedata.category(ch) in ("Cc", "Cf") and ch not in "\n\t") or ch in "\u2028\u2029"
               for ch in text)


def check_entry(text: str, ws: Workspace, limits: RewriteLimits = RewriteLimits(),
                prior_bodies: Sequence[str] = ()) -> list[str]:
    """What is wrong with one new entry (empty: nothing). Each sentence of its text must be held by the lines it
    cites, or by an entry of the prior file (``prior_bodies``, in :func:`.sources.match_form`): a merge keeps the
    words of the entry it merges into."""
    head = text[:60].replace("\n", " ")
    if _control(text):
        return [f"entry {head!r}: holds control characters"]
    if not _SHAPE.fullmatch(text):
        return [f"entry {head!r}: not a promoted entry (one list item, importance, Source line)"]
    problems = []
    if mask_secrets(text) != text:
        problems.append(f"entry {head!r}: holds a secret")
    body = entry_body(text)
    if not body:
        problems.append(f"entry {head!r}: empty")
    if weighted_length(body) > limits.max_entry_weight:
        problems.append(f"entry {head!r}: longer than {limits.max_entry_weight}")
    junk = junk_reason(body)
    if junk:
        problems.append(f"entry {head!r}: {junk}")
    refs = entry_sources(text)
    if not refs:
        problems.append(f"entry {head!r}: cites no valid source")
    held: list[SourceText] = []
    for ref in refs:
        live = read_source(ws, ref.path, ref.start, ref.end)
        if isinstance(live, str):
            problems.append(f"entry {head!r}: source {ref} unusable: {live}")
        else:
            held.append(live)
    if held and body:
        evidence = " \n ".join([match_form(s.raw) for s in held] + list(prior_bodies))
        for piece in _PIECES.split(body):
            form = match_form(piece)
            if form and form not in evidence:
                problems.append(f"entry {head!r}: its sources do not hold {piece.strip()[:60]!r}")
                break
    return problems


def check_rewrite(prior: str, new: str, ws: Workspace, limits: RewriteLimits = RewriteLimits()) -> list[str]:
    """Every problem of replacing ``prior`` by ``new`` (empty: it may be written)."""
    problems: list[str] = []
    prior_entries = Counter(e.text for e in parse_entries(prior))
    new_entries = Counter(e.text for e in parse_entries(new))
    total = sum(prior_entries.values())
    added = list((new_entries - prior_entries).elements())
    added_forms = [match_form(entry_body(t)) for t in added]
    # a prior entry is kept when it is still there byte for byte, or when a new entry holds all of its text (a merge)
    lost = sum(1 for t in (prior_entries - new_entries).elements()
               if not (match_form(entry_body(t)) and any(match_form(entry_body(t)) in f for f in added_forms)))
    if total and lost / total > limits.max_loss_fraction:
        problems.append(f"{lost} of {total} prior entries lost (limit {limits.max_loss_fraction:.0%})")
    if len(new) > limits.max_chars and len(new) > len(prior):
        problems.append(f"MEMORY.md would hold {len(new)} characters (budget {limits.max_chars})")
    if _control(new.replace("\r", "")) and not _control(prior.replace("\r", "")):
        problems.append("the file would hold control characters")
    prior_bodies = [f for f in (match_form(entry_body(t)) for t in prior_entries) if f]
    for text in added:
        problems.extend(check_entry(text, ws, limits, prior_bodies))
    return problems
