"""Candidates for promotion: recalled daily-note and transcript lines, ranked by :mod:`.signals` and gated.

Every call reads the recall log afresh and re-reads each source from disk, so new recalls always change the
candidates (nothing is staged in between) and a note that changed (its content hash differs from the last
recall's) or was deleted is skipped with its reason.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable, Optional, Sequence

from ..masking import mask_secrets
from .entries import entry_sources, parse_entries
from .events import RecallEvent
from .signals import Signals, diversity, frequency, importance_multiplier, recency, recurrence, relevance, richness
from .sources import SourceText, Workspace, is_candidate_path, junk_reason, match_form, read_source

__all__ = ["Gates", "Candidate", "collect_candidates", "explain", "Explanation"]


_PHRASE = re.compile(r"[\w][\w '\-]{1,39}")


@dataclass(frozen=True)
class Gates:
    """All three must pass for a candidate to promote."""

    min_score: float = 0.5
    min_recall_count: int = 3
    min_unique_queries: int = 2


@dataclass
class Candidate:
    """One recalled line range of a daily note or transcript, with its signals and verdict."""

    id: str
    path: str
    start: int
    end: int
    recall_count: int
    unique_queries: int
    days: int
    first_ts: float
    last_ts: float
    signals: Signals
    queries: tuple[str, ...]
    source: Optional[SourceText] = None
    #: Failed gates ("score 0.41 < 0.5", ...).
    gate_failures: list[str] = field(default_factory=list)
    #: Why it is skipped although (or before) its gates were checked: source changed, deleted, junk, promoted.
    skip_reason: Optional[str] = None
    #: The live text could be checked against the recalled content hash.
    verified: bool = True

    @property
    def citation(self) -> str:
        return f"{self.path}#L{self.start}-L{self.end}"

    @property
    def score(self) -> float:
        return self.signals.score

    @property
    def promotable(self) -> bool:
        return not self.gate_failures and self.skip_reason is None and self.source is not None

    @property
    def triggers(self) -> list[str]:
        """Up to three trigger phrases: the shortest distinct recorded queries that are plain phrases (no
        masked secret, no punctuation), most recent first."""
        plain = [q for q in self.queries if "***" not in q and _PHRASE.fullmatch(q)]
        return sorted(plain, key=len)[:3]

    @property
    def importance(self) -> int:
        """The note's own importance, else one derived from the score (1..10)."""
        if self.source is not None and self.source.importance is not None:
            return self.source.importance
        return min(10, max(1, round(1 + 9 * min(1.0, self.score))))

    def reasons(self) -> list[str]:
        """Why it would or would not promote, in words."""
        out = [f"{self.citation}: score {self.score:.3f} ({', '.join(f'{k} {v}' for k, v in self.signals.as_dict().items())})",
               f"recalled {self.recall_count}x by {self.unique_queries} distinct queries over {self.days} day(s)"]
        out += [f"gate failed: {g}" for g in self.gate_failures]
        if self.skip_reason:
            out.append(f"skipped: {self.skip_reason}")
        if not self.verified:
            out.append("note: the recalled snippet was clipped, so only the line range could be checked")
        out.append("would promote" if self.promotable else "would not promote")
        return out


def _day(ts: float, tz: timezone) -> str:
    return datetime.fromtimestamp(ts, tz).strftime("%Y-%m-%d")


def _promoted_refs(memory_text: str) -> list[tuple[str, int, int]]:
    return [(r.path, r.start, r.end) for e in parse_entries(memory_text) for r in entry_sources(e.text)]


def collect_candidates(events: Iterable[RecallEvent], ws: Workspace, *, gates: Gates = Gates(),
                       now: Optional[float] = None, half_life_days: float = 14.0, memory_text: str = "",
                       tz: timezone = timezone.utc) -> list[Candidate]:
    """Every candidate of ``events`` (any agent's list: pass one agent's), best first, each with its verdict.
    ``memory_text`` is the current ``MEMORY.md``: lines it already cites, or text it already holds, are skipped."""
    now = time.time() if now is None else now
    groups: dict[tuple[str, int, int], list[RecallEvent]] = {}
    for event in events:
        if is_candidate_path(event.path):
            groups.setdefault((event.path, event.start_line, event.end_line), []).append(event)
    promoted = _promoted_refs(memory_text)
    memory_form = match_form(memory_text) if memory_text else ""
    out: list[Candidate] = []
    for (path, start, end), group in groups.items():
        group.sort(key=lambda e: e.ts)
        source = read_source(ws, path, start, end)
        live = source if isinstance(source, SourceText) else None
        signals = Signals(
            relevance=relevance([e.score for e in group]),
            frequency=frequency(len(group)),
            diversity=diversity(len({e.query_hash for e in group})),
            recency=recency((now - group[-1].ts) / 86400.0, half_life_days),
            recurrence=recurrence(len({_day(e.ts, tz) for e in group})),
            richness=richness(live.text) if live else 0.0,
            importance=importance_multiplier(live.importance if live else None),
        )
        queries = tuple(dict.fromkeys(e.query_text for e in reversed(group)))[:5]
        cand = Candidate("", path, start, end, len(group), len({e.query_hash for e in group}),
                         len({_day(e.ts, tz) for e in group}), group[0].ts, group[-1].ts, signals, queries, live)
        if signals.score < gates.min_score:
            cand.gate_failures.append(f"score {signals.score:.3f} < min_score {gates.min_score}")
        if len(group) < gates.min_recall_count:
            cand.gate_failures.append(f"recall count {len(group)} < min_recall_count {gates.min_recall_count}")
        if cand.unique_queries < gates.min_unique_queries:
            cand.gate_failures.append(
                f"unique queries {cand.unique_queries} < min_unique_queries {gates.min_unique_queries}")
        checked = [e for e in group if not e.clipped]
        if live is None:
            cand.skip_reason = str(source)
        elif checked and checked[-1].content_hash != live.hash:
            cand.skip_reason = "source changed since it was recalled (content hash differs)"
        else:
            cand.verified = bool(checked)
            junk = junk_reason(live.raw)
            if mask_secrets(live.text) != live.text:
                cand.skip_reason = "holds a secret"
            elif junk:
                cand.skip_reason = junk
            elif any(p == path and s <= end and start <= e for p, s, e in promoted):
                cand.skip_reason = "already promoted (MEMORY.md cites these lines)"
            elif memory_form and match_form(live.text) in memory_form:
                cand.skip_reason = "already in MEMORY.md"
        out.append(cand)
    out.sort(key=lambda c: (-c.score, c.path, c.start))
    kept: list[Candidate] = []
    for i, cand in enumerate(out, start=1):
        cand.id = f"C{i}"
        if cand.promotable:
            stronger = next((k for k in kept if k.path == cand.path and k.start <= cand.end and cand.start <= k.end), None)
            if stronger is not None:
                cand.skip_reason = f"overlaps the stronger candidate {stronger.id} ({stronger.citation})"
            else:
                kept.append(cand)
    return out


@dataclass(frozen=True)
class Explanation:
    """Why one candidate would or would not promote (``candidate`` ``None``: nothing matched)."""

    target: str
    candidate: Optional[Candidate]
    reasons: tuple[str, ...]

    @property
    def would_promote(self) -> bool:
        return self.candidate is not None and self.candidate.promotable


def explain(query_or_path: str, candidates: Sequence[Candidate]) -> list[Explanation]:
    """The explanation of each candidate matching ``query_or_path``: a path (``memory/...``, ``sessions/...``,
    optionally ``#Lx-Ly``) selects its candidates; other text selects candidates a recorded query contains, or
    whose live text contains it."""
    target = query_or_path.strip()
    path, _, lines = target.partition("#")
    if is_candidate_path(path) or path.endswith((".md", ".jsonl")):
        chosen = [c for c in candidates if c.path == path and (not lines or c.citation.endswith("#" + lines))]
    else:
        needle = target.lower()
        chosen = [c for c in candidates
                  if any(needle in q.lower() for q in c.queries)
                  or (c.source is not None and match_form(target) in match_form(c.source.text))]
    if not chosen:
        return [Explanation(target, None, (f"no recalled daily-note or transcript lines match {target!r}",))]
    return [Explanation(target, c, tuple(c.reasons())) for c in chosen]
