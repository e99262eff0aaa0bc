"""The status report of an index (``clawmem status``, ``MemoryIndex.status()``): counts, provider
and mode, vector and keyword state, cache, dirty, and the issues found. Creates no embedder."""

from __future__ import annotations

import math
import os
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

from ..config import MemoryConfig
from ..discovery import Discovery, list_memory_files, printable_name
from ..embeddings.base import Embedder
from ..results import IndexStatus
from ..sync import path_too_long, stat_key
from .embedder import EmbedderChoice
from .namespaces import SharedNamespaces
from .stores import StoreHandles
from .syncing import Changes


def utc_iso(timestamp: str | None) -> str | None:
    """A stored ``time.time()`` value (``repr``) as ISO 8601 UTC to the second; ``None`` when
    missing or unreadable."""
    try:
        value = float(timestamp) if timestamp else 0.0
    except ValueError:
        return None
    if not (math.isfinite(value) and value > 0):
        return None
    from datetime import timezone

    try:
        return datetime.fromtimestamp(value, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return None


class StatusReport:
    """Builds the status of one index."""

    def __init__(self, config: MemoryConfig, workspace: Path | None, agent_id: str, stores: StoreHandles,
                 embedder: EmbedderChoice, namespaces: SharedNamespaces, changes: Changes,
                 identity: Callable[[Embedder | None], dict[str, Any]]) -> None:
        self.config = config
        self.workspace = workspace
        self.agent_id = agent_id
        self.stores = stores
        self.embedder = embedder
        self.namespaces = namespaces
        self.changes = changes
        self.identity = identity

    def build(self) -> IndexStatus:
        """The status now (see :meth:`~clawmem_core.index.MemoryIndex.status`)."""
        store = self.stores.store
        counts = store.counts()
        meta = store.get_meta() or {}
        sel = self.embedder.selection
        if sel is not None:
            emb = sel.embedder
            provider, model = (emb.provider, emb.model) if emb else ("none", "fts-only")
        else:
            provider = meta.get("provider", self.config.provider)
            model = meta.get("model", self.config.effective_model)
        requested = sel.requested if sel else ("custom" if self.embedder.user_embedder is not None
                                               else self.config.provider)
        mode = "fts-only" if provider == "none" else ("vector" if not self.config.query.hybrid.enabled or not store.fts_available else "hybrid")
        vectors = None
        if provider != "none":
            vc = store.vector_counts()
            vectors = {"done": vc.done, "total": vc.total}
        issues = []
        replica = None
        if self.workspace is None:
            found = Discovery([], [])
            issues.append("replica: no workspace here; serving the index as the syncing process left it")
            replica = {"agent": self.agent_id, "workspace": printable_name(str(meta.get("workspace") or "")) or None,
                       "last_sync": utc_iso(store.get_value("last_scan"))}
        else:
            found = list_memory_files(self.workspace, self.config.extra_paths)
            if not (self.workspace / "memory").is_dir():
                issues.append(f"memory directory missing ({self.workspace / 'memory'})")
            if not found.files:
                issues.append(f"no memory files found in {self.workspace}")
            issues += [f"additional memory path missing ({p})" for p in found.missing_extra_paths]
            issues += [f"not indexed: {p} (file name is not valid UTF-8; rename it)" for p in found.bad_names]
            issues += [f"not indexed: {f.path} ({why})" for f in found.files
                       if (why := path_too_long(f.path, store.max_path_bytes))]
        if self.config.shared:
            self.namespaces.search_store()
            issues += [f"shared namespace {ns!r} searched as empty: {why[0]}"
                       for ns, why in self.namespaces.unavailable.items()]
        return IndexStatus(
            agent_id=self.agent_id,
            workspace=printable_name(str(self.workspace)) if self.workspace is not None else "",
            store_path=printable_name(self.stores.backend.location),
            files=counts.files,
            chunks=counts.chunks,
            by_source={s: {"files": f, "chunks": c} for s, (f, c) in counts.by_source.items()},
            provider=provider,
            requested_provider=requested,
            model=model,
            mode=mode,
            dirty=self.workspace is not None and self.changes.dirty and self.stale_on_disk(found),
            sources=list(self.config.sources),
            extra_paths=[printable_name(p) for p in self.config.extra_paths],
            vector={
                "enabled": self.config.store.vector.enabled,
                "available": store.vector_extension,
                "dims": store.vector_dims,
                "path": store.vector_path,
                "error": store.vector_error,
                "backend": store.vector_backend,
            },
            fts={"available": store.fts_available, "error": store.fts_error, "tokenizer": self.config.store.fts.tokenizer},
            cache={"enabled": self.config.cache.enabled, "entries": counts.cache_entries, "max_entries": self.config.cache.max_entries},
            fallback={"from": sel.fallback_from, "reason": sel.reason} if sel and sel.fallback_from else None,
            issues=[printable_name(i) for i in issues],  # a path with undecodable bytes stays printable
            files_on_disk=None if replica else len(found.files),
            vectors=vectors,
            replica=replica,
        )

    def stale_on_disk(self, found: Discovery) -> bool:
        """Whether the Markdown differs from the index (by path, size and mtime) or the index
        identity no longer matches the configuration; cheap, reads no file content."""
        store = self.stores.store
        meta = store.get_meta()
        if meta is None:
            return True
        sel = self.embedder.selection
        if sel is not None and any(meta.get(k) != v for k, v in self.identity(sel.embedder).items()):
            return True
        indexed = store.file_states("memory")
        files = [f for f in found.files if not path_too_long(f.path, store.max_path_bytes)]  # never indexed
        if len(indexed) != len(files):
            return True
        for f in files:
            try:
                st = os.stat(f.abs)
            except OSError:
                return True
            prev = indexed.get(f.path)
            if prev is None or prev[2:] != stat_key(st):
                return True
        return False
