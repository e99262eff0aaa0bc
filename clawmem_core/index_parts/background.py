"""Work off the caller's thread: the background sync a search starts (never waited for), the
interval sync (``sync.interval_minutes``) and the file watchers (``watch``)."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..config import MemoryConfig
from ..results import SyncReport
from ..store.base import StoreBusyError
from .stores import StoreHandles
from .syncing import Changes, SyncRunner

if TYPE_CHECKING:
    from ..sessions import SessionDeltaTracker

log = logging.getLogger("clawmem")


class BackgroundWork:
    """The background threads of one index. ``sync`` is the index's full sync
    (``sync(reason=...)``), run by the watchers and the interval; ``lock`` guards the start of the
    background sync's thread."""

    def __init__(self, config: MemoryConfig, workspace: Path | None, sessions_dir: Path,
                 sessions: "SessionDeltaTracker", stores: StoreHandles, runner: SyncRunner, changes: Changes,
                 sync: Callable[..., SyncReport], lock: Any = None) -> None:
        self.config = config
        self.workspace = workspace
        self.sessions_dir = sessions_dir
        self.sessions = sessions
        self.stores = stores
        self.runner = runner
        self.changes = changes
        self._sync = sync
        self._lock = lock if lock is not None else threading.RLock()
        #: The background sync's thread (``None`` before the first).
        self.thread: threading.Thread | None = None
        self._session_warmed = False
        self.watchers: list[Any] = []
        self._interval_stop: threading.Event | None = None
        self._interval_thread: threading.Thread | None = None

    # -- the background sync a search starts ----------------------------------------------------

    def maybe_sync(self, *, vectors_only: bool = False) -> None:
        """Start a background sync when the index may be stale, or has chunks waiting for vectors;
        a search never waits for it."""
        if self.stores.closing or self.workspace is None:
            return  # closing, or a replica (which never syncs)
        if self.changes.synced_here:
            self._session_warmed = True  # this process has synced: the session is warm
        keywords = not vectors_only and (
            (self.config.sync.on_search and self.changes.dirty)
            or (self.config.sync.on_session_start and not self._session_warmed)
        )
        self._session_warmed = True
        # Vectors left pending (by a first search, a killed run, a search's small sync): after a
        # first search always, later only when searches may sync.
        vectors = (vectors_only or self.config.sync.on_search) and self.runner.pending_vectors() > 0
        if not keywords and not vectors:
            return
        with self._lock:
            if self.thread is not None and self.thread.is_alive():
                return
            self.thread = threading.Thread(target=self.run_sync, args=(keywords, vectors),
                                           name="clawmem-sync", daemon=True)
            self.thread.start()

    def run_sync(self, keywords: bool, vectors: bool) -> None:
        """The background sync: the keyword phase if nobody else syncs (rounds while changes keep
        coming), then the vector phase unless one runs already."""
        runner, changes = self.runner, self.changes
        try:
            if keywords and runner.lock.acquire(blocking=False):
                try:
                    try:
                        # Changes noticed while syncing are picked up by another round.
                        for _ in range(3):
                            started, gen = time.perf_counter(), changes.gen
                            scan = runner.unlocked_scan()
                            if scan is not None and scan.clean:  # nothing to write: no lock taken
                                runner.nothing_changed(scan, "search", gen, started)
                            else:
                                with self.stores.process_lock(blocking=False):
                                    runner.guarded(False, None, "search", scan=scan)
                            if not changes.dirty:
                                break
                    except StoreBusyError:
                        pass  # another process is syncing this index
                finally:
                    runner.lock.release()
            if not self.stores.closing and (vectors or keywords):
                runner.vectors(SyncReport(reason="background"), blocking=False)
        except Exception as exc:  # logged, never raised into the agent
            log.warning("background memory sync failed: %s", exc)

    # -- watch and interval -----------------------------------------------------------------------

    def watch(self, block: bool = False, on_sync: Callable[[SyncReport], Any] | None = None) -> Any:
        """Start a watcher (and the interval sync); see :meth:`~clawmem_core.index.MemoryIndex.watch`."""
        from ..watcher import MemoryWatcher

        def on_change(paths: set[Path]) -> None:
            sessions = [p for p in paths if p.suffix == ".jsonl"]
            for p in sessions:
                self.sessions.observe(p)
            if sessions and len(sessions) == len(paths) and not self.sessions.dirty_files:
                return  # transcripts grew, but not past the delta thresholds yet
            self.changes.mark_dirty(journaled=True)  # kernel events: the change journal has them too
            try:
                report = self._sync(reason="watch")
            except Exception as exc:  # logged, the watcher keeps running
                log.warning("memory sync after a file change failed: %s", exc)
                return
            if on_sync is not None and (report.files_indexed or report.files_deleted or report.vectors_completed):
                try:
                    on_sync(report)
                except Exception as exc:
                    log.warning("watch callback failed: %s", exc)

        watcher = MemoryWatcher.for_workspace(
            self.workspace,
            on_change,
            self.config.extra_paths,
            debounce_ms=self.config.sync.watch_debounce_ms,
            sessions_dir=self.sessions_dir if self.config.sessions_enabled else None,
        )
        watcher.start()
        self.watchers.append(watcher)
        self.start_interval_sync()
        if not block:
            return watcher
        try:
            while watcher.running:
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
        finally:
            watcher.stop()
        return watcher

    def start_interval_sync(self) -> None:
        """Sync every ``sync.interval_minutes`` (once started, until the index closes)."""
        minutes = self.config.sync.interval_minutes
        if not minutes or minutes <= 0 or self._interval_stop is not None:
            return
        stop = threading.Event()
        self._interval_stop = stop

        def loop() -> None:
            while not stop.wait(minutes * 60):
                try:
                    self._sync(reason="interval")
                except Exception as exc:
                    log.warning("interval memory sync failed: %s", exc)

        self._interval_thread = threading.Thread(target=loop, name="clawmem-interval", daemon=True)
        self._interval_thread.start()

    # -- closing ----------------------------------------------------------------------------------

    def stop_watchers(self) -> None:
        """Stop the watchers."""
        for w in self.watchers:
            w.stop()

    def stop(self) -> None:
        """Stop the interval sync and wait for the background threads (not from one of them)."""
        if self._interval_stop is not None:
            self._interval_stop.set()
        for t in (self.thread, self._interval_thread):
            if t is not None and t.is_alive() and t is not threading.current_thread():
                t.join()
