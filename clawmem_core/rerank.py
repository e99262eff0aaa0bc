"""The optional reranking stage: a second opinion on the order of the fused candidates.

A reranker sees the query and the texts of the best fused candidates (``query.rerank.candidates``,
before MMR and the cut to ``max_results``) and scores each. Its order is blended with the fused
order by position (:func:`blend_by_position`), so a weak reranker cannot throw out a strong exact
keyword hit, and a reranker that fails or runs out of time leaves the fused order as it was (the
search says ``reranked: false`` and why).

Rerankers: any object with ``rerank(query, texts) -> scores`` (:class:`Reranker`), a LangChain
``BaseDocumentCompressor`` (``CrossEncoderReranker``, ``FlashrankRerank``, ``CohereRerank``...), a
LlamaIndex ``BaseNodePostprocessor`` (``SentenceTransformerRerank``, ``LLMRerank``...), Voyage's
rerank API through the ``voyageai`` SDK (:class:`VoyageReranker`), or a local sentence-transformers
``CrossEncoder`` loaded from a directory (:class:`CrossEncoderReranker`, never downloads).
Frameworks and SDKs are imported only when such a reranker is built.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any, Callable, Sequence

from .errors import ConfigError
from .tuning import RERANK_BLEND_K as BLEND_K


class Reranker:
    """Scores texts for a query (higher is more relevant). Subclass and implement :meth:`rerank`
    (and :meth:`arerank` when there is a native async client)."""

    name: str = "custom"

    def rerank(self, query: str, texts: list[str]) -> list[float]:
        raise NotImplementedError

    async def arerank(self, query: str, texts: list[str]) -> list[float]:
        return await asyncio.to_thread(self.rerank, query, texts)


class FunctionReranker(Reranker):
    """A plain function ``(query, texts) -> scores``."""

    def __init__(self, fn: Callable[[str, list[str]], Sequence[float]], name: str | None = None) -> None:
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "function")

    def rerank(self, query: str, texts: list[str]) -> list[float]:
        return [float(s) for s in self.fn(query, texts)]


def _scores_from_order(n: int, order: Sequence[int]) -> list[float]:
    """Scores from an ordering of some of ``n`` items: the first scores highest; items the
    reranker dropped score below every kept one."""
    out = [-math.inf] * n
    for pos, i in enumerate(order):
        if 0 <= i < n and out[i] == -math.inf:
            out[i] = float(n - pos)
    return out


class LangChainCompressorReranker(Reranker):
    """A LangChain ``BaseDocumentCompressor``: its ``compress_documents`` order (documents it drops
    come last)."""

    def __init__(self, compressor: Any) -> None:
        self.compressor = compressor
        self.name = f"langchain:{type(compressor).__name__}"

    def _docs(self, texts: list[str]) -> list[Any]:
        from langchain_core.documents import Document

        return [Document(page_content=t, metadata={"clawmem_index": i}) for i, t in enumerate(texts)]

    @staticmethod
    def _order(out: Sequence[Any]) -> list[int]:
        return [int(d.metadata["clawmem_index"]) for d in out if "clawmem_index" in (d.metadata or {})]

    def rerank(self, query: str, texts: list[str]) -> list[float]:
        out = self.compressor.compress_documents(self._docs(texts), query)
        return _scores_from_order(len(texts), self._order(out))

    async def arerank(self, query: str, texts: list[str]) -> list[float]:
        out = await self.compressor.acompress_documents(self._docs(texts), query)
        return _scores_from_order(len(texts), self._order(out))


class LlamaIndexPostprocessorReranker(Reranker):
    """A LlamaIndex ``BaseNodePostprocessor``: its ``postprocess_nodes`` order (nodes it drops come
    last)."""

    def __init__(self, postprocessor: Any) -> None:
        self.postprocessor = postprocessor
        self.name = f"llama_index:{type(postprocessor).__name__}"

    def rerank(self, query: str, texts: list[str]) -> list[float]:
        from llama_index.core.schema import NodeWithScore, TextNode

        nodes = [NodeWithScore(node=TextNode(text=t, id_=f"clawmem-{i}"), score=0.0) for i, t in enumerate(texts)]
        out = self.postprocessor.postprocess_nodes(nodes, query_str=query)
        order = []
        for n in out:
            nid = n.node.node_id
            if nid.startswith("clawmem-") and nid[8:].isdigit():
                order.append(int(nid[8:]))
        return _scores_from_order(len(texts), order)


class VoyageReranker(Reranker):
    """Voyage's rerank API (``rerank-2.5`` by default) through the ``voyageai`` SDK."""

    def __init__(self, *, api_key: str, model: str = "rerank-2.5", base_url: str | None = None, timeout: float = 10.0) -> None:
        try:
            import voyageai
        except ImportError as exc:  # pragma: no cover - the extra is missing
            raise ConfigError("Voyage reranking needs the voyageai package (pip install 'clawmem[voyage]')") from exc
        self.model = model
        self.name = f"voyage:{model}"
        self.client = voyageai.Client(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0)

    def rerank(self, query: str, texts: list[str]) -> list[float]:
        res = self.client.rerank(query, texts, model=self.model)
        out = [-math.inf] * len(texts)
        for r in res.results:
            if 0 <= int(r.index) < len(texts):
                out[int(r.index)] = float(r.relevance_score)
        return out


class CrossEncoderReranker(Reranker):
    """A sentence-transformers ``CrossEncoder`` from a local model directory (no download)."""

    def __init__(self, model_path: str, *, batch_size: int = 16, max_length: int | None = 512) -> None:
        self.model_path = model_path
        self.name = f"cross-encoder:{model_path}"
        self.batch_size = batch_size
        self.max_length = max_length
        self._model: Any = None

    def load(self) -> Any:
        if self._model is None:
            try:
                from sentence_transformers import CrossEncoder
            except ImportError as exc:  # pragma: no cover - the extra is missing
                raise ConfigError("a local cross-encoder needs sentence-transformers (pip install 'clawmem[local]')") from exc
            self._model = CrossEncoder(self.model_path, max_length=self.max_length, local_files_only=True, device="cpu")
        return self._model

    def rerank(self, query: str, texts: list[str]) -> list[float]:
        scores = self.load().predict([(query, t) for t in texts], batch_size=self.batch_size, show_progress_bar=False)
        return [float(s) for s in scores]


def wrap_reranker(obj: Any) -> Reranker:
    """A :class:`Reranker` for ``obj``: a Reranker, a LangChain document compressor, a LlamaIndex
    node postprocessor, or a function ``(query, texts) -> scores``."""
    if isinstance(obj, Reranker):
        return obj
    if hasattr(obj, "compress_documents"):
        return LangChainCompressorReranker(obj)
    if hasattr(obj, "postprocess_nodes"):
        return LlamaIndexPostprocessorReranker(obj)
    if hasattr(obj, "rerank") and callable(obj.rerank):
        return FunctionReranker(obj.rerank, type(obj).__name__)
    if callable(obj):
        return FunctionReranker(obj)
    raise ConfigError(
        f"reranker must be a clawmem Reranker, a LangChain BaseDocumentCompressor, a LlamaIndex "
        f"BaseNodePostprocessor or a function (query, texts) -> scores; got {type(obj).__name__}"
    )


def blend_by_position(n: int, scores: Sequence[float], weight: float, k: int = BLEND_K) -> list[int]:
    """The new order of ``n`` items given in fused order, blending positions:
    ``(1 - weight) / (k + fused position) + weight / (k + reranker position)``. Scores that are
    not finite rank last for the reranker; ties keep the fused order."""
    if len(scores) != n:
        raise ValueError(f"reranker returned {len(scores)} scores for {n} texts")
    w = 0.0 if not math.isfinite(weight) else max(0.0, min(1.0, weight))
    key = [(-(s if isinstance(s, (int, float)) and math.isfinite(s) else -math.inf), i) for i, s in enumerate(scores)]
    rpos = [0] * n
    for pos, (_, i) in enumerate(sorted(key)):
        rpos[i] = pos + 1
    blended = [(1 - w) / (k + i + 1) + w / (k + rpos[i]) for i in range(n)]
    return sorted(range(n), key=lambda i: (-blended[i], i))


def create_reranker(provider: str | None, *, model: str | None = None, model_path: str | None = None,
                    api_key: str | None = None, base_url: str | None = None) -> Reranker | None:
    """A reranker from configuration (``query.rerank.provider``): ``"voyage"`` or ``"local"``."""
    if not provider:
        return None
    if provider == "voyage":
        import os

        key = api_key or os.environ.get("VOYAGE_API_KEY")
        if not key:
            raise ConfigError("query.rerank.provider 'voyage' needs an API key (VOYAGE_API_KEY or remote.api_key)")
        return VoyageReranker(api_key=key, model=model or "rerank-2.5", base_url=base_url)
    if provider == "local":
        if not model_path:
            raise ConfigError("query.rerank.provider 'local' needs query.rerank.model_path (a CrossEncoder directory)")
        return CrossEncoderReranker(model_path)
    raise ConfigError(f"query.rerank.provider must be 'voyage' or 'local', got {provider!r}")
