"""The calibration background vectors of an embedder (the vectors of
:data:`~clawmem_core.calibration.BACKGROUND_TEXTS`, against which a calibrated fusion scores a
cosine): kept in memory, read from the embedding cache, or embedded once off the search's thread;
vectors embedded by a search are written to the cache by the next sync (a search never writes)."""

from __future__ import annotations

import logging
import math
import threading
from typing import Sequence

from ..embeddings.base import Embedder
from ..store.base import Store

log = logging.getLogger("clawmem")


def unit(v: Sequence[float]) -> list[float]:
    """``v`` scaled to length 1 (a zero vector as it is)."""
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v] if n > 0 else list(v)


class CalibrationVectors:
    """One index's calibration vectors, by embedder. ``use_cache``: read from and written to the
    embedding cache (``cache.enabled``)."""

    def __init__(self, use_cache: bool) -> None:
        self.use_cache = use_cache
        self._vecs: dict[str, list[list[float]]] = {}
        self._pending: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self._unsaved: dict[str, tuple[Embedder, dict[str, list[float]]]] = {}

    def get(self, emb: Embedder, seconds: float, store: Store) -> list[list[float]] | None:
        """The embedder's vectors of :data:`~clawmem_core.calibration.BACKGROUND_TEXTS` (the
        calibration of its cosine): from memory, from the embedding cache of ``store``, or embedded
        once (one call, on the first hybrid search; written to the embedding cache by the next sync,
        so later processes and rebuilds reuse them). ``None`` when they cannot be had within
        ``seconds`` or at all: the vector side then scores the raw cosine."""
        from ..calibration import BACKGROUND_TEXTS
        from ..chunking import sha256

        key = f"{emb.provider}\0{emb.model}\0{emb.provider_key}"
        hashes = [sha256(t) for t in BACKGROUND_TEXTS]
        use_cache = self.use_cache
        with self._lock:
            if key in self._vecs:
                return self._vecs[key]
            try:
                got = store.cache_get(emb.provider, emb.model, emb.provider_key, hashes) if use_cache else {}
            except Exception as exc:
                if store.is_corruption(exc):
                    raise  # the search recovers the index
                log.debug("cached calibration vectors unreadable: %s", exc)
                got = {}
            if all(h in got for h in hashes):
                vecs = [unit(got[h]) for h in hashes]
                self._vecs[key] = vecs
                return vecs
            pending = self._pending.get(key)
            if pending is None:
                pending = self._pending[key] = threading.Event()
                self._start(key, emb, hashes, use_cache, pending, BACKGROUND_TEXTS)
        pending.wait(max(0.0, seconds))
        with self._lock:
            return self._vecs.get(key)

    def _start(self, key: str, emb: Embedder, hashes: list[str], use_cache: bool, pending: threading.Event,
               texts: Sequence[str]) -> None:
        def work() -> None:
            try:
                raw = emb.embed_documents(list(texts))
                with self._lock:
                    self._vecs[key] = [unit(v) for v in raw]
                    if use_cache:  # written by the search that uses them, once it succeeded
                        self._unsaved[key] = (emb, dict(zip(hashes, raw)))
            except Exception as exc:
                log.warning("embedder calibration unavailable (%s): vector scores are raw cosines", exc)
            finally:
                with self._lock:
                    self._pending.pop(key, None)
                pending.set()

        threading.Thread(target=work, name="clawmem-calibration", daemon=True).start()

    def unsaved(self) -> bool:
        """Whether calibration vectors wait for a sync to cache them."""
        return bool(self._unsaved)

    def save(self, store: Store) -> None:
        """Cache calibration vectors embedded by an earlier search, in a sync (a search never
        writes to the index)."""
        if not self._unsaved:
            return
        with self._lock:
            pending, self._unsaved = self._unsaved, {}
        for emb, items in pending.values():
            try:
                store.cache_put(emb.provider, emb.model, emb.provider_key, items)
            except Exception as exc:  # kept in memory only
                log.debug("calibration vectors not cached: %s", exc)
