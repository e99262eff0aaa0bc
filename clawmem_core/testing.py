"""A deterministic embedder for tests and examples that must not download anything.

:class:`HashEmbedder` maps each word (and each CJK character pair) to a fixed direction with
the hashing trick, so texts sharing words get similar vectors. It is **not** a semantic model
and is never chosen automatically; use a real provider or a local model in production.
"""

from __future__ import annotations

import hashlib
import math

from .embeddings.base import Embedder
from .text import search_terms


class HashEmbedder(Embedder):
    """Bag-of-words vectors of ``dims`` dimensions via feature hashing (L2-normalised).

    ``calls`` counts ``_embed_documents`` batches and ``texts_embedded`` the texts, so tests can
    prove that a cached reindex embeds nothing.
    """

    provider = "hash"
    normalize = True

    def __init__(self, dims: int = 64, model: str = "hash-v1") -> None:
        self.dims = dims
        self.model = model
        self.calls = 0
        self.texts_embedded = 0
        self.query_calls = 0

    def _vector(self, text: str) -> list[float]:
        vec = [0.0] * self.dims
        for term in search_terms(text, stopwords=False):
            h = hashlib.blake2b(term.encode(), digest_size=8).digest()
            idx = int.from_bytes(h[:4], "little") % self.dims
            vec[idx] += 1.0 if h[4] & 1 else -1.0
        norm = math.sqrt(sum(v * v for v in vec))
        return [v / norm for v in vec] if norm else vec

    def _embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        self.texts_embedded += len(texts)
        return [self._vector(t) for t in texts]

    def _embed_query(self, text: str) -> list[float]:
        self.query_calls += 1
        return self._vector(text)


def best_line(text: str, question: str) -> tuple[int, str] | None:
    """The 0-based index and text of the line sharing the most query terms with ``question``
    (headings skipped; ``None`` when no line shares any). The scripted chat models of both
    adapters answer from it."""
    want = set(search_terms(question))
    scored = [
        (len(want & set(search_terms(line))), -i, i, line.strip())
        for i, line in enumerate(text.splitlines())
        if line.strip() and not line.lstrip().startswith("#")
    ]
    if not scored:
        return None
    score, _, index, line = max(scored)
    return (index, line) if score > 0 else None
