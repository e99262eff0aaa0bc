"""The orchestration of a sync (the algorithms are :class:`~clawmem_core.sync.Syncer`'s): the keyword
phase under the sync locks (none taken when an unlocked scan finds nothing changed), the vector
phase on its own handle (one per process, and one process at a time through the backend's vector
lock), the fallback embedder on a provider failure, a damaged index set aside and rebuilt, and the
index's dirty state (changes noticed and not yet synced)."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
from typing import Any, Callable, Sequence

from ..config import MemoryConfig
from ..errors import ClawmemError, EmbeddingError, IndexingError
from ..embeddings.base import Embedder
from ..results import SyncReport
from ..store.base import Store, StoreBusyError
from ..sync import Listener, Scan, Syncer
from .embedder import EmbedderChoice
from .stores import StoreHandles

log = logging.getLogger("clawmem")


class Changes:
    """Whether the Markdown may have changed since the last sync. ``gen`` counts change notices:
    a sync clears only the notices it saw start."""

    def __init__(self) -> None:
        self.dirty = True
        self.gen = 0  # bumped by every change notice; a sync clears only what it saw
        #: Whether this process has synced (a sync's unlocked scan counts).
        self.synced_here = False

    def mark_dirty(self, *, journaled: bool = False) -> None:
        """A change notice; ``journaled``: of a change the change journal sees too (a watcher's
        event, a small sync put off), which a sync may then take from the journal. Any other (the
        caller's own ``mark_dirty()``) makes the next sync walk every file."""
        self.gen += 1
        self.dirty = True
        if not journaled:
            self.blind = True

    #: A change was noticed that the change journal may not have seen: the next sync walks.
    blind = False

    def synced(self, gen: int) -> None:
        """A sync that started at notice ``gen`` finished."""
        if self.gen == gen:  # a change noticed during this sync keeps the index dirty
            self.dirty = False
            self.blind = False
        self.synced_here = True


class SyncRunner:
    """Runs the two phases of a sync for one index. ``lock`` is the in-process sync lock (held
    by the keyword phase, a search's small sync, a recovery); ``after_sync`` runs with the writer
    at the end of each keyword phase (the calibration vectors' cache)."""

    #: Seconds between two tries of the vector lock while another process holds it.
    VECTOR_LOCK_POLL = 0.2

    def __init__(self, config: MemoryConfig, stores: StoreHandles, embedder: EmbedderChoice, syncer: Syncer,
                 identity: Callable[[Embedder | None], dict[str, Any]], changes: Changes,
                 after_sync: Callable[[Store], None] | None = None,
                 after_sync_due: Callable[[], bool] | None = None) -> None:
        self.config = config
        self.stores = stores
        self.embedder = embedder
        self.syncer = syncer
        self.identity = identity
        self.changes = changes
        self.after_sync = after_sync
        #: Whether ``after_sync`` has work even when no file changed.
        self.after_sync_due = after_sync_due
        self.lock = threading.Lock()
        #: The index's freshness checks (:class:`~.freshness.Freshness`, set by it): a sync the
        #: change journal vouches for checks only the files it saw change.
        self.freshness: Any = None

    def sync(self, force: bool, listener: Listener | None, reason: str, *, vectors: bool = True,
             vector_seconds: float | None = None, wait_for_others: bool = True) -> SyncReport:
        """Both phases (see :meth:`~clawmem_core.index.MemoryIndex.sync`)."""
        report = self.keywords(force, listener, reason)
        if vectors:
            deadline = None
            if vector_seconds is not None and math.isfinite(vector_seconds):
                deadline = time.monotonic() + max(0.0, vector_seconds)
            try:
                self.vectors(report, listener, deadline=deadline, wait_for_others=wait_for_others)
            except EmbeddingError as exc:
                if not self.embedder.activate_fallback(exc):
                    raise
                report = self.keywords(True, listener, "fallback")
                self.vectors(report, listener, deadline=deadline, wait_for_others=wait_for_others)
        else:
            report.vectors_pending = self.pending_vectors()
        return report

    def keywords(self, force: bool, listener: Listener | None, reason: str) -> SyncReport:
        """The keyword phase under the sync locks (nothing is locked when nothing changed)."""
        with self.lock:
            started, gen = time.perf_counter(), self.changes.gen
            fresh = self.freshness
            mark = fresh.before_sync() if fresh is not None and not force else None
            scan = None if force else self.unlocked_scan()
            if scan is not None and scan.clean:
                report = self.nothing_changed(scan, reason, gen, started)
                if mark is not None:
                    fresh.confirm_fresh(scan.store, scan.version, mark)
                if self.after_sync is not None and self.after_sync_due is not None and self.after_sync_due():
                    with self.stores.process_lock():  # what a search left to write (no file changed)
                        if self.config.cache.enabled:
                            self.after_sync(self.stores.writer_store())
                return report
            lock = self.stores.process_lock()
            with lock:
                report = self.guarded(force, listener, reason, scan=scan)
                if mark is not None:  # after this sync's own commits, before anyone else's (the lock is held)
                    mark = fresh.vector_mark()
            if mark is not None:  # the index now matches the files, as the journal read before it saw them
                store = self.stores.store
                fresh.confirm_fresh(store, store.data_version(), mark)
            return report

    def vectors(
        self,
        report: SyncReport,
        listener: Listener | None = None,
        *,
        blocking: bool = True,
        deadline: float | None = None,
        paths: Sequence[str] | None = None,
        store: Store | None = None,
        wait_for_others: bool = True,
    ) -> None:
        """The vector phase: embed pending chunks until none is left, the index closes, or
        ``deadline`` (``time.monotonic()``) passes. Runs on this process's vector handle, one at
        a time (``blocking=False``: skipped when another is running), and one process at a time
        (the backend's vector lock: waited for until ``deadline`` unless ``wait_for_others`` is
        false or ``blocking`` is; ``report.vectors_elsewhere`` when another process kept it), or
        on ``store`` when given (``paths`` then limits it to those files' chunks)."""
        emb = self.embedder.now().embedder
        if emb is None:
            return
        stores = self.stores
        if store is not None:
            self.syncer.fill_vectors(store, emb, report, listener, should_stop=lambda: stores.closing,
                                     deadline=deadline, paths=paths)
            report.vectors_pending = store.vector_counts().pending
            return
        if not stores.vector_lock.acquire(blocking=blocking):
            return
        try:
            vstore = stores.vector_handle()
            vstore.refresh()
            if not vstore.vector_counts().pending:
                report.vectors_pending = 0
                return
            if not (blocking and wait_for_others):
                wait: float | None = 0.0
            else:
                wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            with contextlib.ExitStack() as held:
                if self.take_vector_lock(held, wait):
                    self.syncer.fill_vectors(vstore, emb, report, listener, should_stop=lambda: stores.closing,
                                             deadline=deadline, paths=paths)
                else:
                    # Another process is embedding these chunks: left to it (embedding them here
                    # too would only race it over the same chunks, and count none as done).
                    report.vectors_elsewhere = True
                    log.info("another process is embedding the vectors of this index: left to it")
            report.vectors_pending = vstore.vector_counts().pending
        finally:
            stores.vector_lock.release()

    def take_vector_lock(self, held: contextlib.ExitStack, wait: float | None) -> bool:
        """Take the backend's vector lock into ``held`` within ``wait`` seconds (``None``: until
        it is free or the index closes); whether it was taken."""
        end = None if wait is None else time.monotonic() + wait
        while True:
            left = self.VECTOR_LOCK_POLL if end is None else min(self.VECTOR_LOCK_POLL, end - time.monotonic())
            try:
                held.enter_context(self.stores.backend.vector_lock(max(0.0, left)))
                return True
            except StoreBusyError:
                if self.stores.closing or (end is not None and time.monotonic() >= end):
                    return False

    def pending_vectors(self) -> int:
        """Chunks waiting for vectors (0 in keyword-only mode or before the embedder is chosen)."""
        sel = self.embedder.selection
        if sel is None or sel.embedder is None:
            return 0
        return self.stores.store.vector_counts().pending

    def guarded(self, force: bool, progress: Listener | None, reason: str,
                session_files: Sequence[str | os.PathLike[str]] = (), *, scan: Scan | None = None) -> SyncReport:
        """:meth:`locked` with storage failures turned into :class:`StoreError` and a damaged
        index set aside and rebuilt (both locks held)."""
        try:
            return self.locked(force, progress, reason, session_files, scan=scan)
        except Exception as exc:
            store = self.stores.writer or self.stores.store
            if store.is_corruption(exc):
                self.stores.recover(exc)
                return self.locked(True, progress, "recovery", session_files)
            err = store.write_error(exc)
            if err is not None:
                raise err from None
            if isinstance(exc, (ClawmemError, MemoryError)):  # out of memory is no bug of the files: as it is
                raise
            # Say what failed: never let an unexpected error pass for a provider problem or for
            # invalid tool arguments (a UnicodeError or a RecursionError is a ValueError or a bug here).
            from ..discovery import printable_name
            from ..masking import mask_secrets

            detail = mask_secrets(printable_name(f"{type(exc).__name__}: {exc}"))
            raise IndexingError(f"indexing the memory files failed: {detail}") from exc

    def locked(
        self,
        force: bool,
        progress: Listener | None,
        reason: str,
        session_files: Sequence[str | os.PathLike[str]] = (),
        *,
        scan: Scan | None = None,
    ) -> SyncReport:
        """The keyword phase proper (both locks held)."""
        gen = self.changes.gen
        writer = self.stores.writer_store()
        emb = self.embedder.now().embedder
        try:
            report = self.syncer.run(
                writer, self.stores.store, self.identity(emb), emb, force, progress, reason, session_files, scan=scan
            )
        except EmbeddingError as exc:
            if self.embedder.activate_fallback(exc):
                return self.locked(True, progress, "fallback")
            raise
        self.changes.synced(gen)
        if self.config.cache.enabled and self.after_sync is not None:
            self.after_sync(writer)
        return report

    def sessions(self, paths: Sequence[str | os.PathLike[str]]) -> SyncReport:
        """Re-index the named transcripts now, whatever their growth."""
        with self.lock:
            with self.stores.process_lock():
                return self.guarded(False, None, "post-compaction", paths)

    def unlocked_scan(self) -> Scan | None:
        """A scan before taking the locks, so that a sync with nothing to do takes no lock and
        writes nothing (see :meth:`Syncer.unlocked_scan`): of only the files the change journal
        saw change when it vouches for the others, else of every file."""
        if self.freshness is not None:
            scan = self.freshness.journal_scan()
            if scan is not None:
                return scan
        return self.syncer.unlocked_scan(self.stores.store, lambda: self.identity(self.embedder.now().embedder))

    def nothing_changed(self, scan: Scan, reason: str, gen: int, started: float) -> SyncReport:
        """The report of a sync whose unlocked scan found every file unchanged."""
        self.changes.synced(gen)
        return SyncReport(full=False, reason=reason, files_scanned=scan.scanned, files_unchanged=scan.unchanged,
                          files_skipped=self.syncer.skipped(scan), seconds=time.perf_counter() - started)

    def rebuild_damaged(self, exc: Exception, failed: Store) -> None:
        """``failed`` (the search handle) turned out damaged: set it aside and rebuild the index,
        unless another process already did."""
        with self.lock:
            with self.stores.process_lock():
                if self.stores.store is failed and not failed.superseded():
                    self.stores.recover(exc)
                    self.locked(True, None, "recovery")
                elif self.stores.store is failed:  # another process already set it aside and rebuilt it
                    self.stores.reopen(failed)
