"""The deterministic ranking signals of a candidate, each in [0, 1], and their weighted score.

=================  ======  ==================================================================================
Signal             Weight  Definition
=================  ======  ==================================================================================
relevance          0.30    mean recall score of the candidate's events (scores are clamped to [0, 1])
frequency          0.24    ``1 - exp(-count / 5)``: saturates (3 recalls 0.45, 10 recalls 0.86)
query diversity    0.15    distinct query hashes / 5, capped at 1
recency            0.15    ``0.5 ** (days since the last recall / half_life_days)`` (14-day half-life)
recurrence         0.10    (distinct calendar days with a recall - 1) / 3, capped at 1: one day 0, four 1
richness           0.06    distinct content terms of the live text / 20, capped at 1 (terms as the keyword
                           index sees them: words, and CJK character pairs; single CJK characters, stopwords,
                           numbers and words under three letters are not counted)
=================  ======  ==================================================================================

The score is the weighted sum times the importance multiplier ``0.5 + N / 10`` for ``<!-- importance: N -->``
(5 neutral, 1 gives 0.6, 10 gives 1.5; missing: 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from ..text import STOPWORDS, search_terms

__all__ = ["Signals", "WEIGHTS", "relevance", "frequency", "diversity", "recency", "recurrence", "richness",
           "importance_multiplier"]

WEIGHTS = {"relevance": 0.30, "frequency": 0.24, "diversity": 0.15, "recency": 0.15, "recurrence": 0.10,
           "richness": 0.06}


def _unit(x: float) -> float:
    return 0.0 if not math.isfinite(x) else min(1.0, max(0.0, x))


def relevance(scores: list[float]) -> float:
    """Mean recall score."""
    return _unit(sum(scores) / len(scores)) if scores else 0.0


def frequency(count: int) -> float:
    """``1 - exp(-count / 5)``."""
    return _unit(1.0 - math.exp(-max(0, count) / 5.0))


def diversity(distinct_queries: int) -> float:
    """Distinct queries / 5, capped."""
    return _unit(distinct_queries / 5.0)


def recency(age_days: float, half_life_days: float = 14.0) -> float:
    """Half-life decay of the time since the last recall (a recall "in the future" counts as now)."""
    return _unit(0.5 ** (max(0.0, age_days) / max(1e-9, half_life_days)))


def recurrence(distinct_days: int) -> float:
    """(Distinct days - 1) / 3, capped."""
    return _unit((distinct_days - 1) / 3.0)


def content_terms(text: str) -> set[str]:
    """Distinct content terms of ``text`` (see the module documentation)."""
    out = set()
    for term in search_terms(text):
        if term in STOPWORDS or term.isdigit():
            continue
        if term.isascii() and len(term) < 3:
            continue
        if not term.isascii() and len(term) < 2:
            continue
        out.add(term)
    return out


def richness(text: str) -> float:
    """Distinct content terms / 20, capped."""
    return _unit(len(content_terms(text)) / 20.0)


def importance_multiplier(importance: Optional[int]) -> float:
    """``0.5 + N / 10`` (neutral 1.0 when ``None``)."""
    return 1.0 if importance is None else 0.5 + min(10, max(1, importance)) / 10.0


@dataclass(frozen=True)
class Signals:
    relevance: float
    frequency: float
    diversity: float
    recency: float
    recurrence: float
    richness: float
    importance: float = 1.0

    @property
    def base(self) -> float:
        """The weighted sum of the six signals."""
        return sum(WEIGHTS[name] * getattr(self, name) for name in WEIGHTS)

    @property
    def score(self) -> float:
        """The weighted sum times the importance multiplier."""
        return self.base * self.importance

    def as_dict(self) -> dict[str, float]:
        return {**{name: round(getattr(self, name), 4) for name in WEIGHTS}, "importance": self.importance,
                "score": round(self.score, 4)}
