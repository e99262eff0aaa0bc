"""The recall log of an index: what its searches gave the model, recorded per agent for dreaming
(:mod:`clawmem_core.dreaming`). On SQLite the log has a SQLite file of its own beside the index
(``<index file>.recall``): a commit to the index file by another connection would make the next
search walk the workspace (see :mod:`.freshness`). On PostgreSQL it is kept in the shared database,
in tables of its own that the index's data version does not follow. The log is opened on the first
recorded search and written in batches by its own thread: recording never fails nor slows a search."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

from ..config import MemoryConfig
from .stores import StoreHandles

if TYPE_CHECKING:
    from ..dreaming import RecallLog
    from ..dreaming.events import DreamStore

log = logging.getLogger("clawmem")

#: Events buffered before the log's thread writes them (one transaction).
BATCH_SIZE = 64
#: The log's thread writes what is buffered at least this often (seconds).
FLUSH_INTERVAL_S = 5.0


def recall_log_path(store_path: Path) -> Path:
    """The recall log's SQLite file of the index file ``store_path``."""
    return store_path.with_name(store_path.name + ".recall")


class RecallRecorder:
    """Records the final hits of the index's searches (when ``config.dreaming.record``), and opens
    the dream store (recall log and preimages) for promotion, status and rollback."""

    def __init__(self, config: MemoryConfig, agent_id: str, stores: StoreHandles, *,
                 now: Callable[[], float] = time.time) -> None:
        self.config = config
        self.agent_id = agent_id
        self.stores = stores
        self.now = now
        self._lock = threading.Lock()
        self._store: DreamStore | None = None
        self._log: RecallLog | None = None
        self._failed = False
        self._closed = False

    @property
    def enabled(self) -> bool:
        return bool(self.config.dreaming.record)

    def dream_store(self) -> "DreamStore":
        """The agent's dream store (opened on first use)."""
        with self._lock:
            if self._closed:
                from ..errors import StoreError

                raise StoreError("this MemoryIndex is closed")
            if self._store is None:
                self._store = self._open_store()
            return self._store

    def _open_store(self) -> "DreamStore":
        path = self.stores.store_path
        if path is not None:
            from ..dreaming.sqlite_store import SqliteDreamStore

            path.parent.mkdir(parents=True, exist_ok=True)
            return SqliteDreamStore(recall_log_path(path))
        from ..dreaming.pg_store import PostgresDreamStore

        return PostgresDreamStore(self.stores.backend.connection_pool())

    def recall_log(self) -> "RecallLog | None":
        """The log (opened on first use); ``None`` when recording is off or the log cannot open."""
        if not self.enabled or self._failed or self._closed:
            return None
        if self._log is not None:
            return self._log
        try:
            store = self.dream_store()
            from ..dreaming.recall_log import RecallLog, RetentionPolicy

            with self._lock:
                if self._log is None and not self._closed:
                    d = self.config.dreaming
                    self._log = RecallLog(store, batch_size=BATCH_SIZE, now=self.now, background=True,
                                          flush_interval_s=FLUSH_INTERVAL_S,
                                          retention=RetentionPolicy(d.max_age_days, d.max_events))
        except Exception as exc:  # the log is best effort: a search never fails for it
            self._failed = True
            log.warning("recall log unavailable, searches are not recorded: %s", exc)
            return None
        return self._log

    def record(self, query: str, hits: Iterable[Any], session_key: str | None, *, when: float | None = None) -> None:
        """Buffer one search's final hits (no I/O on the caller's thread). Never raises."""
        try:
            rlog = self.recall_log()
            if rlog is not None:
                rlog.record(self.agent_id, query, hits, session_key=session_key, when=when)
        except Exception as exc:
            log.warning("recall log: a search was not recorded: %s", exc)

    def flush(self) -> int:
        """Write what is buffered now (before reading the log); returns how many events were written."""
        rlog = self._log
        return rlog.flush() if rlog is not None else 0

    def close(self) -> None:
        """Write what is buffered and stop the log's thread (errors logged, never raised)."""
        with self._lock:
            self._closed = True
            rlog, self._log = self._log, None
            store, self._store = self._store, None
        if rlog is not None:
            try:
                rlog.close()
            except Exception as exc:
                log.warning("recall log: the last batch could not be written: %s", exc)
        if store is not None:
            try:
                store.close()
            except Exception:
                pass
