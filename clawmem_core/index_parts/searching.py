"""The orchestration of a search (the ranking itself is :func:`~clawmem_core.search.rank`): the
freshness checks first, the query embedding within ``query.timeout_ms`` (else keyword results,
``info["degraded"]``), every read of the ranking from one snapshot of the index, the calibration
background vectors, the reranker, the shared namespaces' tags, and a damaged index rebuilt."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..config import MemoryConfig
from ..embeddings.base import Embedder
from ..results import SearchHits
from ..search import LATE_CALLS, MAX_QUERY_EMBED_CHARS, check_args, query_terms, rank
from ..store.base import CorruptIndexError, ReadInterrupted, store_deadline
from ..tuning import CANDIDATE_POOL
from .calibration_vectors import CalibrationVectors
from .embedder import EmbedderChoice
from .freshness import Freshness
from .namespaces import SharedNamespaces
from .stores import StoreHandles
from .syncing import SyncRunner

log = logging.getLogger("clawmem")


def vectors_incomplete(vectors: dict[str, int] | None) -> bool:
    """Some chunks still wait for their vectors: search is hybrid where vectors exist, and ranks
    the others by their keywords (:func:`~clawmem_core.search.merge_partial`)."""
    return vectors is not None and vectors["done"] < vectors["total"]


def no_vectors(vectors: dict[str, int] | None) -> bool:
    """No chunk has its vector yet (keyword-only mode, or the vector phase not started): the
    query is not embedded."""
    return vectors is None or vectors["done"] == 0


class Reranker:
    """The reranking stage (``query.rerank``): an object passed in, else one built from the
    configuration on first use."""

    def __init__(self, config: MemoryConfig, reranker: Any = None) -> None:
        self.config = config
        self._reranker = None
        if reranker is not None:
            from ..rerank import wrap_reranker

            self._reranker = wrap_reranker(reranker)
        self._built = reranker is not None

    def get(self) -> Any:
        """The reranker in effect (``None`` when reranking is off)."""
        rc = self.config.query.rerank
        if rc.enabled is False:
            return None
        if not self._built:
            self._built = True
            if rc.provider:
                from ..rerank import create_reranker

                self._reranker = create_reranker(rc.provider, model=rc.model, model_path=rc.model_path,
                                                 api_key=self.config.remote.api_key if rc.provider == "voyage" else None,
                                                 base_url=rc.base_url)
        return self._reranker


class SearchRunner:
    """Runs the searches of one index."""

    def __init__(self, config: MemoryConfig, workspace: Path | None, sessions_dir: Path, stores: StoreHandles,
                 embedder: EmbedderChoice, freshness: Freshness, runner: SyncRunner, namespaces: SharedNamespaces,
                 calibration: CalibrationVectors, reranker: Reranker) -> None:
        self.config = config
        self.workspace = workspace
        self.sessions_dir = sessions_dir
        self.stores = stores
        self.embedder = embedder
        self.freshness = freshness
        self.runner = runner
        self.namespaces = namespaces
        self.calibration = calibration
        self.reranker = reranker

    def check_args(self, query: Any, max_results: Any, min_score: Any) -> tuple[str, int, float]:
        """The arguments checked and defaulted (see :func:`~clawmem_core.search.check_args`)."""
        return check_args(query, max_results, min_score, self.config.query)

    def search(self, query: str, max_results: int | None = None, min_score: float | None = None) -> SearchHits:
        """See :meth:`~clawmem_core.index.MemoryIndex.search`."""
        q, k, ms = self.check_args(query, max_results, min_score)
        if not q:
            return SearchHits()
        store = self.stores.store
        # a store whose server is down says so by the query's deadline (no wait for a connection)
        with store_deadline(time.monotonic() + self.config.query.timeout_ms / 1000.0):
            try:
                return self.search_once(q, k, ms, min_score is not None)
            except Exception as exc:  # damaged while in use: rebuild, answer
                if not store.is_corruption(exc) or isinstance(exc, CorruptIndexError):
                    raise
                self.runner.rebuild_damaged(exc, store)
                return self.search_once(q, k, ms, min_score is not None)

    def search_once(self, q: str, k: int, ms: float, explicit: bool = False) -> SearchHits:
        with self.stores.store.reading():  # the checks before a search: one connection
            ready, stale = self.freshness.prepare_search()
            if not ready:
                return SearchHits()
            emb = self.embedder.now().embedder
            vectors = self.vector_state(emb)
        keyword_only = emb is None or no_vectors(vectors)
        deadline = time.monotonic() + self.config.query.timeout_ms / 1000.0
        qvec = None
        degraded = None
        if emb is not None and not keyword_only:
            if LATE_CALLS.busy(emb):  # an earlier query's embedding ran out of time and still runs
                degraded = "embedding timeout"
                log.info("an earlier query embedding is still running: keyword results only")
            else:
                ok, qvec = self.embed_beside_keywords(emb, q, deadline)
                if not ok:
                    degraded = "embedding timeout"
                    log.warning("query embedding took longer than query.timeout_ms (%d ms): keyword results only",
                                self.config.query.timeout_ms)
        return self.ranked(q, qvec, k, ms, keyword_only, stale, vectors, emb, explicit, deadline, degraded)

    def embed_beside_keywords(self, emb: Embedder, q: str, deadline: float) -> tuple[bool, Any]:
        """The query's embedding (``(False, None)`` past ``deadline``), with the keyword side of
        the search run meanwhile, and the vector side on the embedding's thread as soon as it is
        done: each store keeps what it prepared for the ranking that follows, which uses it if the
        index has not changed in between (see :meth:`~clawmem_core.store.base.Store.prepare_keyword_search`)."""
        store = self.namespaces.search_store()
        pending = LATE_CALLS.start(emb, lambda: emb.embed_query(q[:MAX_QUERY_EMBED_CHARS]),
                                   then=lambda qvec: store.prepare_vector_search(qvec, CANDIDATE_POOL))
        if self.config.query.hybrid.enabled:
            store.prepare_keyword_search(query_terms(q), CANDIDATE_POOL)
        return pending.wait(deadline - time.monotonic())

    async def asearch(self, query: str, max_results: int | None = None, min_score: float | None = None) -> SearchHits:
        """See :meth:`~clawmem_core.index.MemoryIndex.asearch`."""
        import asyncio

        q, k, ms = self.check_args(query, max_results, min_score)
        if not q:
            return SearchHits()
        store = self.stores.store
        explicit = min_score is not None
        with store_deadline(time.monotonic() + self.config.query.timeout_ms / 1000.0):  # (see search)
            try:
                return await self.asearch_once(q, k, ms, explicit)
            except Exception as exc:  # damaged while in use: rebuild, answer
                if not store.is_corruption(exc) or isinstance(exc, CorruptIndexError):
                    raise
                await asyncio.to_thread(self.runner.rebuild_damaged, exc, store)
                return await self.asearch_once(q, k, ms, explicit)

    async def asearch_once(self, q: str, k: int, ms: float, explicit: bool = False) -> SearchHits:
        import asyncio

        ready, stale = await asyncio.to_thread(self.freshness.prepare_search)
        if not ready:
            return SearchHits()
        emb = self.embedder.now().embedder
        vectors = await asyncio.to_thread(self.vector_state, emb)
        keyword_only = emb is None or no_vectors(vectors)
        deadline = time.monotonic() + self.config.query.timeout_ms / 1000.0
        qvec = None
        degraded = None
        if emb is not None and not keyword_only:
            try:
                qvec = await asyncio.wait_for(emb.aembed_query(q[:MAX_QUERY_EMBED_CHARS]), deadline - time.monotonic())
            except asyncio.TimeoutError:
                degraded = "embedding timeout"
                log.warning("query embedding took longer than query.timeout_ms (%d ms): keyword results only",
                            self.config.query.timeout_ms)
        return await asyncio.to_thread(self.ranked, q, qvec, k, ms, keyword_only, stale, vectors, emb, explicit,
                                       deadline, degraded)

    def ranked(self, q: str, qvec: list[float] | None, k: int, ms: float, keyword_only: bool, stale: bool,
               vectors: dict[str, int] | None, emb: Embedder | None, explicit: bool = False,
               deadline: float | None = None, degraded: str | None = None) -> SearchHits:
        # Every read of the ranking from one state of the index (one snapshot, one connection);
        # run again if the store lost that state midway after the index changed.
        for attempt in range(2):
            try:
                with self.namespaces.search_store().reading(snapshot=True):
                    return self.ranked_once(q, qvec, k, ms, keyword_only, stale, vectors, emb, explicit, deadline,
                                            degraded)
            except ReadInterrupted:
                if attempt:
                    raise
                log.info("the index changed while a search lost its connection: searching again")
        raise AssertionError("unreachable")

    def ranked_once(self, q: str, qvec: list[float] | None, k: int, ms: float, keyword_only: bool, stale: bool,
                    vectors: dict[str, int] | None, emb: Embedder | None, explicit: bool = False,
                    deadline: float | None = None, degraded: str | None = None) -> SearchHits:
        partial = vectors_incomplete(vectors)
        hits = self.rank(q, qvec, k, ms, keyword_only=keyword_only or qvec is None, explicit=explicit, deadline=deadline,
                         partial=partial)
        if not keyword_only and qvec is not None and not partial:
            now = self.vector_state(emb)
            if vectors_incomplete(now):  # a full reindex switched in while this search ran
                vectors = now
                hits = self.rank(q, qvec, k, ms, keyword_only=False, explicit=explicit, deadline=deadline,
                                 partial=True)
        out = SearchHits(hits, stale=stale, vectors=vectors, info=getattr(hits, "info", None))
        if degraded:
            out.info["degraded"] = degraded
        return out

    def vector_state(self, emb: Embedder | None) -> dict[str, int] | None:
        """``{"done", "total"}`` chunks with vectors (``None`` in keyword-only mode)."""
        if emb is None:
            return None
        counts = self.stores.store.vector_counts()
        return {"done": counts.done, "total": counts.total}

    def rank(self, query: str, qvec: list[float] | None, k: int, min_score: float, *,
             keyword_only: bool | None = None, explicit: bool = False, deadline: float | None = None,
             partial: bool = False) -> SearchHits:
        emb = self.embedder.now().embedder
        if keyword_only is None:
            keyword_only = emb is None
        background = None
        if emb is not None and qvec is not None and not keyword_only and self.config.query.hybrid.fusion == "calibrated":
            left = self.config.query.timeout_ms / 1000.0 if deadline is None else deadline - time.monotonic()
            background = self.calibration.get(emb, left, self.stores.store)
        hits = rank(self.namespaces.search_store(), self.config.query, query, qvec, k, min_score,
                    keyword_only=keyword_only, mtime_of=self.mtime_of, background=background,
                    explicit_min_score=explicit, reranker=self.reranker.get(), deadline=deadline,
                    vectors_partial=partial)
        if not self.config.shared:
            return hits
        from ..store.shared import split_shared

        info = dict(hits.info)
        unavailable = self.namespaces.unavailable
        if unavailable:  # searched as empty: say which and why
            info["shared_unavailable"] = {ns: why[1] for ns, why in unavailable.items()}
        return SearchHits((replace(h, namespace=split_shared(h.path)[0]) if h.path.startswith("@") else h for h in hits),
                          stale=hits.stale, vectors=hits.vectors, info=info)

    def mtime_of(self, path: str, source: str) -> float | None:
        """A hit's file's mtime (for the recency decay): from the file, or from the index for a
        replica and a shared namespace."""
        if self.workspace is None or path.startswith("@"):
            from ..search import is_evergreen
            from ..store.shared import split_shared

            if path.startswith("@") and is_evergreen(split_shared(path)[1], source):
                return None
            state = self.namespaces.search_store().file_states(source).get(path)
            return state[3] / 1000 if state else None
        from ..sessions import SESSIONS_PREFIX

        if source == "sessions" and path.startswith(SESSIONS_PREFIX + "/"):
            target = self.sessions_dir / path[len(SESSIONS_PREFIX) + 1 :]
        else:
            target = self.workspace / path
        try:
            return os.stat(target).st_mtime
        except OSError:
            return None
