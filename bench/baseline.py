"""The textbook baseline: in-memory BM25 (``rank-bm25``, BM25Okapi, k1=1.5, b=0.75, epsilon=0.25) over the very
chunks clawmem indexed.

Tokenisation: text is lower-cased; runs of letters/digits become words (no stemming, no stop words); runs of
Chinese/Japanese/Korean characters become overlapping two-character pieces (a lone character stays a unigram).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from .metrics import Span

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_TOKEN = re.compile(rf"[{_CJK}]+|[^\W{_CJK}]+", re.UNICODE)
_IS_CJK = re.compile(rf"[{_CJK}]")

TOKENIZATION = (
    "lower-cased letter/digit words (no stemming, no stop words); CJK runs as overlapping character bigrams"
)


def tokenize(text: str) -> list[str]:
    out: list[str] = []
    for tok in _TOKEN.findall(text.lower()):
        if _IS_CJK.match(tok):
            if len(tok) == 1:
                out.append(tok)
            else:
                out.extend(tok[i : i + 2] for i in range(len(tok) - 1))
        else:
            out.append(tok)
    return out


@dataclass
class Chunk:
    path: str
    start_line: int
    end_line: int
    text: str


class BM25Baseline:
    """rank-bm25's ``BM25Okapi`` statistics (idf with its epsilon floor, document lengths, k1, b). Scores are
    computed through an inverted index built from those statistics: the same numbers as
    ``BM25Okapi.get_scores`` (checked by :meth:`check`), which loops over every document in Python for every
    query term and takes a minute on SciFact."""

    def __init__(self, chunks: Sequence[Chunk]) -> None:
        import numpy as np
        from rank_bm25 import BM25Okapi

        self._np = np
        self.chunks = list(chunks)
        corpus = [tokenize(c.text) for c in self.chunks]
        # rank-bm25 divides by zero on an empty corpus and dislikes empty documents.
        self.bm25 = BM25Okapi([toks or ["\u0000"] for toks in corpus]) if corpus else None
        self._post: dict[str, tuple] = {}
        if self.bm25 is not None:
            bm = self.bm25
            dl = np.asarray(bm.doc_len, dtype=np.float64)
            norm = bm.k1 * (1 - bm.b + bm.b * dl / bm.avgdl)
            acc: dict[str, tuple[list[int], list[float]]] = {}
            for i, freqs in enumerate(bm.doc_freqs):
                for term, tf in freqs.items():
                    ids, tfs = acc.setdefault(term, ([], []))
                    ids.append(i)
                    tfs.append(tf)
            for term, (ids, tfs) in acc.items():
                ia = np.asarray(ids, dtype=np.int64)
                ta = np.asarray(tfs, dtype=np.float64)
                self._post[term] = (ia, ta * (bm.k1 + 1) / (ta + norm[ia]))

    def scores(self, tokens: list[str]):
        np = self._np
        out = np.zeros(len(self.chunks))
        for q in tokens:  # like get_scores: a repeated query term counts again
            post = self._post.get(q)
            if post is not None:
                out[post[0]] += (self.bm25.idf.get(q) or 0) * post[1]
        return out

    def check(self, query: str) -> float:
        """Largest difference between these scores and ``BM25Okapi.get_scores`` for ``query``."""
        toks = tokenize(query)
        if self.bm25 is None or not toks:
            return 0.0
        return float(self._np.max(self._np.abs(self.scores(toks) - self._np.asarray(self.bm25.get_scores(toks)))))

    def search(self, query: str, k: int) -> list[Span]:
        if self.bm25 is None:
            return []
        toks = tokenize(query)
        if not toks:
            return []
        scores = self.scores(toks)
        k = min(k, int((scores > 0).sum()))
        if k <= 0:
            return []
        idx = self._np.argpartition(-scores, k - 1)[:k]
        idx = idx[self._np.argsort(-scores[idx], kind="stable")]
        return [Span(self.chunks[i].path, self.chunks[i].start_line, self.chunks[i].end_line) for i in idx]
