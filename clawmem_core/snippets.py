"""The snippet a search result shows: the part of its chunk that matched (SPEC 6).

A chunk holds up to about 1,600 characters; a result shows at most :data:`SNIPPET_MAX_CHARS`. When the
chunk is longer, the snippet is the run of whole lines that covers the most query terms (terms as the
keyword index sees them, so Chinese matches by character pairs), centred on the matching lines; a
line longer than the cap is cut around its matches, at a space or, in CJK text, between characters
(never inside a grapheme). An ellipsis marks each side where text was cut, and the snippet knows the
file lines it shows, for the citation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from .text import index_terms, fold_width
from .tuning import SNIPPET_CJK_CHAR_WEIGHT, SNIPPET_MAX_CHARS
from .tuning import SNIPPET_WORD_REACH as _WORD_REACH

__all__ = ["SNIPPET_MAX_CHARS", "ELLIPSIS", "Snippet", "build_snippet"]

ELLIPSIS = "…"
_SPACE = re.compile(r"\s")


@dataclass(frozen=True)
class Snippet:
    """Snippet text and the file lines it shows (``start_line``..``end_line``)."""

    text: str
    start_line: int
    end_line: int


def _weight(term: str) -> float:
    """A query term's weight: one CJK character says little, a character pair or a word more."""
    return SNIPPET_CJK_CHAR_WEIGHT if len(term) == 1 and ord(term) >= 0x2E80 else 1.0


def build_snippet(
    text: str,
    start_line: int,
    end_line: int,
    terms: Sequence[str],
    limit: int = SNIPPET_MAX_CHARS,
) -> Snippet:
    """The part of a chunk (``text``, file lines ``start_line``..``end_line``) to show for a query
    with keyword ``terms`` (:func:`clawmem_core.text.search_terms`), at most ``limit`` characters.

    A chunk that fits is shown whole. When the chunk's lines cannot be mapped one to one onto its
    line range (pieces of one long line, transcript lines), the snippet still shows the match but
    names the chunk's whole range."""
    if len(text) <= limit:
        return Snippet(text, start_line, end_line)
    lines = text.split("\n")
    exact = end_line - start_line + 1 == len(lines)
    weights = {t: _weight(t) for t in dict.fromkeys(t.lower() for t in terms if t.strip())}
    found = [set(index_terms(line)) & weights.keys() for line in lines]
    room = 2 * (len(ELLIPSIS) + 1)  # an ellipsis line before and after
    first, last = _best_span(lines, found, weights, limit - room)
    if last is None:  # one line longer than the cap holds the best match: cut inside it
        body, cut_start, cut_end = _cut_line(lines[first], weights, limit - room)
        body = (ELLIPSIS if cut_start else f"{ELLIPSIS}\n" if first > 0 else "") + body
        body += ELLIPSIS if cut_end else f"\n{ELLIPSIS}" if first < len(lines) - 1 else ""
        last = first
    else:
        body = "\n".join(lines[first : last + 1])
        if first > 0:
            body = f"{ELLIPSIS}\n{body}"
        if last < len(lines) - 1:
            body = f"{body}\n{ELLIPSIS}"
    if not exact:
        return Snippet(body, start_line, end_line)
    return Snippet(body, start_line + first, start_line + last)


def _best_span(
    lines: list[str], found: list[set[str]], weights: dict[str, float], budget: int
) -> tuple[int, int | None]:
    """The first and last line to show: the run of lines within ``budget`` characters covering the
    most term weight, trimmed to its matching lines and then widened around them for context.
    ``(i, None)`` when line ``i``, longer than the budget on its own, is the best match."""
    sizes = [len(line) + 1 for line in lines]  # with its newline
    best: tuple[float, int, int, int] | None = None  # (weight, occurrences, -first, last)
    j = -1
    total = 0
    for i in range(len(lines)):
        if j < i:
            j, total = i - 1, 0
        while j + 1 < len(lines) and total + sizes[j + 1] <= budget + 1:
            j += 1
            total += sizes[j]
        if j < i:  # line i alone is over the budget
            covered = found[i]
            key = (sum(weights[t] for t in covered), len(covered), -i, -1)
        else:
            covered = set().union(*found[i : j + 1])
            key = (sum(weights[t] for t in covered), sum(len(f) for f in found[i : j + 1]), -i, j)
        if best is None or key > best:
            best = key
        if j >= i:
            total -= sizes[i]
    assert best is not None
    score, _, neg_first, last = best
    first = -neg_first
    if last < 0:
        return first, None
    if score > 0:  # trim to the matching lines, then widen around them
        matching = [k for k in range(first, last + 1) if found[k]]
        first, last = matching[0], matching[-1]
    else:  # nothing matched (a vector hit): the chunk's beginning
        first = last = 0
    used = sum(sizes[first : last + 1])
    before, after = first - 1, last + 1
    grew = True
    while grew:
        grew = False
        if after < len(lines) and used + sizes[after] <= budget + 1:
            used += sizes[after]
            last, after, grew = after, after + 1, True
        if before >= 0 and used + sizes[before] <= budget + 1:
            used += sizes[before]
            first, before, grew = before, before - 1, True
    return first, last


def _cut_line(line: str, weights: dict[str, float], budget: int) -> tuple[str, bool, bool]:
    """At most ``budget`` characters of one long ``line`` around its best-matching stretch, and
    whether its start and its end were cut."""
    folded = fold_width(line)  # same length: fullwidth letters match their ASCII terms
    hits: list[tuple[int, str]] = []
    for term in weights:
        hits.extend((m.start(), term) for m in re.finditer(re.escape(term), folded, re.IGNORECASE))
    hits.sort()
    start = 0
    if hits:
        best = (-1.0, 0)
        j = 0
        for i, (pos, _) in enumerate(hits):  # the stretch of half the budget from each hit, by weight
            while j < len(hits) and hits[j][0] < pos + budget // 2:
                j += 1
            weight = sum(weights[t] for t in {t for _, t in hits[i:j]})
            if weight > best[0]:
                best = (weight, pos)
        start = max(0, best[1] - budget // 4)  # some context before the first match
    end = min(len(line), start + budget - 2 * len(ELLIPSIS))
    start = max(0, end - (budget - 2 * len(ELLIPSIS)))
    bounds = _graphemes(line)
    if start > 0:
        start = _boundary(line, start, bounds, forward=True)
    if end < len(line):
        end = _boundary(line, end, bounds, forward=False)
    return line[start:end], start > 0, end < len(line)


def _graphemes(line: str) -> set[int]:
    """The grapheme cluster boundaries of ``line`` (Unicode's user-perceived characters: an emoji
    sequence, a letter with its combining marks)."""
    import regex

    return {0, *(m.end() for m in regex.finditer(r"\X", line))}


def _boundary(line: str, at: int, bounds: set[int], *, forward: bool) -> int:
    """A cut near ``at``: at a space within reach (a word boundary), else at the nearest grapheme
    boundary; the start of a cut moves ``forward`` (into the kept text), its end moves back."""
    step = 1 if forward else -1
    i = at
    for _ in range(_WORD_REACH):
        if not 0 < i < len(line):
            break
        if _SPACE.match(line[i - 1] if forward else line[i]):
            return i
        i += step
    i = at
    while i not in bounds and 0 < i < len(line):
        i += step
    return i
