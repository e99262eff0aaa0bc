"""Which embedder an index uses: the one passed in (a clawmem, LangChain or LlamaIndex embedder),
else the configured provider (``auto``: the first one available), else keyword-only search; and
the switch to ``config.fallback`` when the provider fails during a sync. Created on first need,
never for an empty index or an empty query."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, replace
from typing import Any

from ..config import MemoryConfig
from ..embeddings.base import Embedder
from ..store.base import Store

log = logging.getLogger("clawmem")


@dataclass
class Selection:
    """The embedder chosen (``None``: keyword-only), the provider asked for, and why another was
    used instead (``fallback_from``, ``reason``)."""

    embedder: Embedder | None
    requested: str
    fallback_from: str | None = None
    reason: str | None = None


def wrap(obj: Any) -> Embedder:
    """A clawmem :class:`Embedder` for a clawmem, LangChain or LlamaIndex embedder."""
    if isinstance(obj, Embedder):
        return obj
    from ..embeddings.framework import wrap_embedder

    return wrap_embedder(obj)


class EmbedderChoice:
    """The embedder selection of one index. ``selection`` is ``None`` until first needed."""

    def __init__(self, config: MemoryConfig, user_embedder: Any = None, lock: Any = None) -> None:
        self.config = config
        self.user_embedder = user_embedder
        self.selection: Selection | None = None
        self._lock = lock if lock is not None else threading.RLock()
        self._fallback_used = False

    def now(self) -> Selection:
        """Create the embedder on first need (never for an empty index or an empty query)."""
        if self.selection is not None:
            return self.selection
        with self._lock:  # threads searching at once create one embedder
            if self.selection is not None:
                return self.selection
            return self._select()

    def _select(self) -> Selection:
        if self.user_embedder is not None:
            emb = wrap(self.user_embedder)
            self.selection = Selection(emb, requested=emb.provider)
        elif not self.config.enabled or self.config.provider == "none":
            self.selection = Selection(None, requested=self.config.provider, reason="keyword-only by configuration")
        else:
            try:
                from ..embeddings.registry import resolve_embedder
            except ImportError:  # providers not installed in this build
                if self.config.provider != "auto":
                    raise
                self.selection = Selection(None, "auto", reason="no embedding providers available")
                return self.selection
            sel = resolve_embedder(self.config)
            self.selection = Selection(sel.embedder, sel.requested, sel.fallback_from, sel.reason)
        return self.selection

    def activate_fallback(self, exc: Exception) -> bool:
        """Switch to ``config.fallback`` after ``exc`` from the provider in use (once, never away
        from an embedder passed in); whether it switched (the caller then reindexes)."""
        fb = self.config.fallback
        sel = self.selection
        if fb in ("none", "") or self._fallback_used or sel is None or self.user_embedder is not None:
            return False
        if sel.embedder is not None and sel.embedder.provider == fb:
            return False
        from ..embeddings.registry import create_provider

        try:
            emb = create_provider(fb, replace(self.config, model=""))
        except Exception as err:  # the fallback cannot start either: keep the first error
            log.warning("fallback provider %s unavailable: %s", fb, err)
            return False
        self._fallback_used = True
        old = sel.embedder.provider if sel.embedder else sel.requested
        self.selection = Selection(emb, sel.requested, fallback_from=old, reason=str(exc))
        log.warning("embedding provider %s failed (%s); switched to %s and reindexing", old, exc, fb)
        return True

    def mode(self, emb: Embedder | None, store: Store) -> str:
        """``fts-only``, ``vector`` or ``hybrid``."""
        if emb is None:
            return "fts-only"
        if not self.config.query.hybrid.enabled or not store.fts_available:
            return "vector"
        return "hybrid"

    def provider_info(self, store: Store) -> dict[str, Any]:
        """``provider``, ``model``, ``fallback`` and ``mode`` as the tool payload reports them."""
        sel = self.now()
        emb = sel.embedder
        fallback = None
        if sel.fallback_from:
            fallback = {"from": sel.fallback_from, "reason": sel.reason}
        return {
            "provider": emb.provider if emb else "none",
            "model": emb.model if emb else "fts-only",
            "fallback": fallback,
            "mode": self.mode(emb, store),
        }

    def close(self) -> None:
        """Close the embedder, if one was created."""
        if self.selection is not None and self.selection.embedder is not None:
            try:
                self.selection.embedder.close()
            except Exception as exc:
                log.warning("closing the embedder failed: %s", exc)
