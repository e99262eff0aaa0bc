"""The embedder interface every provider, local model and framework bridge implements."""

from __future__ import annotations

import hashlib
import json
import math
import operator
from abc import ABC, abstractmethod
from typing import Any, Sequence

#: OpenClaw caps every chunk sent to an embedding model at 8000 UTF-8 bytes.
MAX_INPUT_BYTES = 8000


def provider_key_of(settings: dict[str, Any]) -> str:
    """SHA-256 of the JSON of the settings that change vectors (never include secrets)."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def sanitize(vector: Sequence[float], normalize: bool) -> list[float]:
    """Zero non-finite values; L2-normalise when asked (a zero vector stays zero)."""
    out = list(map(float, vector))
    if not math.isfinite(sum(out)):  # some value is inf or nan (or the sum overflowed)
        out = [v if math.isfinite(v) else 0.0 for v in out]
    if normalize:
        norm = math.sqrt(sum(map(operator.mul, out, out)))
        if norm > 0:
            out = [v / norm for v in out]
    return out


class Embedder(ABC):
    """Turns text into vectors.

    Subclasses set ``provider`` and ``model`` and implement :meth:`_embed_documents` and
    :meth:`_embed_query`; the public methods sanitise (and normalise when ``normalize`` is true).
    ``provider_key`` identifies every setting that changes vectors (base URL, dimensions...) and
    never an API key: it is part of the embedding cache key and of the index identity.
    """

    provider: str = "custom"
    model: str = ""
    #: L2-normalise vectors (OpenClaw does for local, gemini and ollama).
    normalize: bool = False
    #: Largest input the model takes, in UTF-8 bytes (capped at MAX_INPUT_BYTES by the indexer).
    max_input_bytes: int = 8192
    #: Seconds a query embedding may take before it is abandoned.
    query_timeout: float = 60.0
    #: Embed each chunk as windows of whole lines of at most this many UTF-8 bytes and score the
    #: chunk by its best window (``None``: the whole chunk, as OpenClaw does, split only past
    #: :attr:`input_limit`). Keyword search always sees whole chunks.
    window_bytes: int | None = None

    @property
    def provider_key(self) -> str:
        return provider_key_of({"provider": self.provider, "model": self.model})

    @property
    def input_limit(self) -> int:
        """Bytes a chunk may have before the indexer splits it (model limit, capped at 8000)."""
        return max(1, min(int(self.max_input_bytes), MAX_INPUT_BYTES))

    @property
    def embed_window(self) -> int:
        """Bytes of chunk text per vector: :attr:`window_bytes` within :attr:`input_limit`."""
        limit = self.input_limit
        return max(16, min(limit, int(self.window_bytes))) if self.window_bytes else limit

    # -- what subclasses implement ------------------------------------------------------------

    @abstractmethod
    def _embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed a batch of documents (chunks)."""

    @abstractmethod
    def _embed_query(self, text: str) -> list[float]:
        """Embed one search query."""

    async def _aembed_documents(self, texts: list[str]) -> list[list[float]]:
        import asyncio

        return await asyncio.to_thread(self._embed_documents, texts)

    async def _aembed_query(self, text: str) -> list[float]:
        import asyncio

        return await asyncio.to_thread(self._embed_query, text)

    # -- public, sanitised --------------------------------------------------------------------

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        texts = list(texts)
        if not texts:
            return []
        vectors = self._embed_documents(texts)
        self._check(vectors, len(texts))
        return [sanitize(v, self.normalize) for v in vectors]

    def embed_query(self, text: str) -> list[float]:
        return sanitize(self._embed_query(text), self.normalize)

    async def aembed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        texts = list(texts)
        if not texts:
            return []
        vectors = await self._aembed_documents(texts)
        self._check(vectors, len(texts))
        return [sanitize(v, self.normalize) for v in vectors]

    async def aembed_query(self, text: str) -> list[float]:
        return sanitize(await self._aembed_query(text), self.normalize)

    def close(self) -> None:
        """Release clients or models. Safe to call twice."""

    def _check(self, vectors: Any, expected: int) -> None:
        from ..errors import EmbeddingError

        if not isinstance(vectors, (list, tuple)) or len(vectors) != expected:
            got = len(vectors) if isinstance(vectors, (list, tuple)) else type(vectors).__name__
            raise EmbeddingError(f"{self.provider}: expected {expected} embeddings, got {got}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(provider={self.provider!r}, model={self.model!r})"
