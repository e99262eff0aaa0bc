"""Where an index lives and its open handles: the backend (SQLite file or PostgreSQL URL), the
search handle, the writer and the vector phase's handles, opening them (a replica never creates
an index), and setting a damaged index aside so that the next sync rebuilds it from the Markdown."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any, Iterable

from ..config import MemoryConfig
from ..errors import ConfigError, StoreError
from ..store.base import CorruptIndexError, MissingIndexError, Store, StoreBackend

log = logging.getLogger("clawmem")


def store_url(config: MemoryConfig) -> str | None:
    """The PostgreSQL URL of the index (``store.url`` or ``$CLAWMEM_STORE_URL``); ``None``: SQLite."""
    return config.store.url or os.environ.get("CLAWMEM_STORE_URL") or None


def resolve_store_path(config: MemoryConfig, state_dir: Path, workspace: Path | None, name: str) -> Path:
    """The SQLite index file of agent ``name``."""
    if config.store.path:
        raw = config.store.path.replace("{agent_id}", name).replace("{agentId}", name)
        p = Path(os.path.expandvars(os.path.expanduser(raw)))
        return p if p.is_absolute() else workspace / p  # type: ignore[operator]
    return state_dir / "memory" / f"{name}.sqlite"


class StoreHandles:
    """The index's backend and handles. ``store`` serves searches and reads; ``writer`` (opened on
    the first sync) writes; ``vector_store`` is the vector phase's own handle (guarded by
    ``vector_lock``); handles replaced while another thread may still use them are ``retired`` and
    closed with the index."""

    def __init__(self, config: MemoryConfig, agent_id: str, workspace: Path | None, state_dir: Path) -> None:
        self.config = config
        self.agent_id = agent_id
        self.workspace = workspace
        self.state_dir = state_dir
        #: The SQLite index file (``None`` when the index is in PostgreSQL).
        self.store_path: Path | None = None if store_url(config) else self.resolve_path()
        self.writer: Store | None = None
        self.retired: list[Store] = []
        #: One vector phase at a time in this process, on its own store handle.
        self.vector_lock = threading.Lock()
        self.vector_store: Store | None = None
        #: Set when the index closes: long work (a vector phase, a wait for a lock) stops.
        self.closing = False
        self.backend: StoreBackend = self._new_backend()
        self.store: Store = self.open_store()

    def resolve_path(self, name: str | None = None) -> Path:
        """The SQLite index file of agent ``name`` (default: this one's)."""
        return resolve_store_path(self.config, self.state_dir, self.workspace, name or self.agent_id)

    def _new_backend(self) -> StoreBackend:
        url = store_url(self.config)
        if url:
            from ..store.postgres import PostgresBackend, is_postgres_url

            if not is_postgres_url(url):
                raise ConfigError("CLAWMEM_STORE_URL must be a postgresql:// URL")
            return PostgresBackend(
                url,
                self.agent_id,
                fts_tokenizer=self.config.store.fts.tokenizer,
                exact_below=self.config.store.vector.exact_below,
                hnsw_ef_search=self.config.store.vector.hnsw_ef_search,
                hnsw_build_memory=self.config.store.vector.hnsw_build_memory,
                # unset: the backend's own default
                **({"pool_size": self.config.store.pool_size} if self.config.store.pool_size else {}),
            )
        from ..store.sqlite import SQLiteBackend

        return SQLiteBackend(
            self.store_path,
            vector_enabled=self.config.store.vector.enabled,
            extension_path=self.config.store.vector.extension_path,
            fts_tokenizer=self.config.store.fts.tokenizer,
            namespace_path=self.resolve_path,
        )

    def new_store(self) -> Store:
        """A new handle on the index."""
        if self.workspace is None:  # a replica reads the agent's index; it never creates one
            store = self.backend.open_namespace(self.agent_id)
            if store.get_meta() is None:
                store.close()
                raise MissingIndexError(f"replica of agent {self.agent_id!r}: {self.backend.location} holds no index "
                                        "of this agent (check --agent; its workspace must be synced to the store first)")
            return store
        return self.backend.open()

    def open_store(self) -> Store:
        """A new handle; a damaged index is set aside first (unless another process did)."""
        try:
            return self.new_store()
        except CorruptIndexError as exc:
            with self.process_lock():
                try:  # another process may have replaced it meanwhile
                    return self.new_store()
                except CorruptIndexError:
                    self.set_aside(exc)
            return self.new_store()

    def process_lock(self, blocking: bool = True) -> Any:
        """The backend's lock of writers across processes."""
        return self.backend.process_lock(blocking)

    def writer_store(self) -> Store:
        """The writing handle, opened on first use."""
        if self.writer is None:
            self.writer = self.new_store()
        return self.writer

    def set_aside(self, exc: Exception) -> None:
        """Keep a damaged index aside (call with the process lock held); the next sync rebuilds
        it from the Markdown."""
        kept = self.backend.set_aside(exc)
        log.warning("%s; moved it to %s and rebuilding the index from the Markdown", exc, kept)

    def recover(self, exc: Exception) -> None:
        """The live index turned out damaged while in use: set it aside and reopen an empty one
        (call with both sync locks held)."""
        if self.writer is not None:
            self.writer.close()
        self.writer = None
        # the reader may be in use by a search in another thread: retired, closed with the index
        self.retired.append(self.store)
        if not isinstance(exc, CorruptIndexError):
            exc = CorruptIndexError(f"index {self.backend.location} is corrupt: {exc}")
        try:
            self.set_aside(exc)
        except OSError as err:
            raise StoreError(f"{exc}; cannot move it aside: {err.strerror or err}") from None
        self.store = self.new_store()

    def reopen(self, failed: Store) -> None:
        """Another process already set ``failed`` aside and rebuilt the index: follow it."""
        self.retired.append(failed)
        self.store = self.new_store()

    def vector_handle(self) -> Store:
        """The vector phase's handle, reopened when its index was replaced (call with
        ``vector_lock`` held)."""
        vstore = self.vector_store
        if vstore is None or vstore.superseded():
            if vstore is not None:
                self.retired.append(vstore)
            vstore = self.vector_store = self.new_store()
        return vstore

    def close(self, others: Iterable[Store] = ()) -> None:
        """Close every handle, and ``others`` after the search handle (the vector phase's once a
        running one ends)."""
        self.store.close()
        for store in others:
            store.close()
        for store in self.retired:
            store.close()
        if self.writer is not None:
            self.writer.close()
        with self.vector_lock:  # a vector phase run by a watcher or a caller's thread ends first
            if self.vector_store is not None:
                self.vector_store.close()
