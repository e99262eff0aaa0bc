"""Scoring rules (see the data README): LoCoMo hit@k / recall@k over covered gold lines, BEIR nDCG@10 and
recall@100 with documents ranked by their best chunk, and latency percentiles."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence


@dataclass(frozen=True)
class Span:
    """One returned result: a line range of a file."""

    path: str
    start_line: int
    end_line: int

    def covers(self, path: str, line: int) -> bool:
        return self.path == path and self.start_line <= line <= self.end_line


def covered_gold(results: Sequence[Span], gold: Sequence[tuple[str, int]], k: int) -> int:
    """How many gold ``(path, line)`` pairs the top ``k`` results cover."""
    top = results[:k]
    return sum(1 for path, line in gold if any(r.covers(path, line) for r in top))


def hit_at(results: Sequence[Span], gold: Sequence[tuple[str, int]], k: int) -> float:
    return 1.0 if gold and covered_gold(results, gold, k) > 0 else 0.0


def recall_at(results: Sequence[Span], gold: Sequence[tuple[str, int]], k: int) -> float:
    return covered_gold(results, gold, k) / len(gold) if gold else 0.0


def rank_documents(results: Iterable[Span]) -> list[str]:
    """Documents in the order of their best (first-returned) chunk."""
    seen: dict[str, None] = {}
    for r in results:
        if r.path not in seen:
            seen[r.path] = None
    return list(seen)


def ndcg_at(ranked_docs: Sequence[str], relevant: set[str], k: int = 10) -> float:
    """Binary-relevance nDCG@k (BEIR's qrels here are all grade 1)."""
    if not relevant:
        return 0.0
    dcg = sum(1.0 / math.log2(i + 2) for i, d in enumerate(ranked_docs[:k]) if d in relevant)
    idcg = sum(1.0 / math.log2(i + 2) for i in range(min(len(relevant), k)))
    return dcg / idcg


def doc_recall_at(ranked_docs: Sequence[str], relevant: set[str], k: int = 100) -> float:
    if not relevant:
        return 0.0
    return len(relevant.intersection(ranked_docs[:k])) / len(relevant)


def percentile(values: Sequence[float], p: float) -> float:
    """Linear-interpolated percentile (``p`` in 0..100); NaN for no values."""
    if not values:
        return float("nan")
    xs = sorted(values)
    if len(xs) == 1:
        return xs[0]
    pos = (len(xs) - 1) * p / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def mean(values: Iterable[float]) -> float:
    xs = list(values)
    return sum(xs) / len(xs) if xs else float("nan")
