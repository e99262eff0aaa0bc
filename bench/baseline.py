"""The textbook baseline: in-memory BM25 (``rank-bm25``, BM25Okapi, k1=1.5, b=0.75) over the very chunks clawmem
indexed.

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
    def __init__(self, chunks: Sequence[Chunk]) -> None:
        from rank_bm25 import BM25Okapi

        import numpy as np

        self._np = np
        self.chunks = list(chunks)
        corpus = [tokenize(c.text) for c in self.chunks]
        # rank-bm25 divides by zero on an empty corpus and dislikes empty documents.
        self._bm25 = BM25Okapi([toks or ["\u0000"] for toks in corpus]) if corpus else None

    def search(self, query: str, k: int) -> list[Span]:
        if self._bm25 is None:
            return []
        toks = tokenize(query)
        if not toks:
            return []
        scores = self._np.asarray(self._bm25.get_scores(toks))
        k = min(k, int((scores > 0).sum()))
        if k <= 0:
            return []
        idx = self._np.argpartition(-scores, k - 1)[:k]
        idx = idx[self._np.argsort(-scores[idx], kind="stable")]
        return [Span(self.chunks[i].path, self.chunks[i].start_line, self.chunks[i].end_line) for i in idx]
