"""What a search syncs before it answers: a new index gets its keyword phase; an index in use gets
the changes made on disk when they are few (a small sync within a budget), else it answers stale
while a background sync catches up. From the second search or sync on, a kernel change journal
(:mod:`clawmem_core.journal`) vouches for the files, so a search with no change checks none, and a
sync (or a search's small sync) checks only the files the journal saw change."""

from __future__ import annotations

import logging
import os
import stat
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from ..config import MemoryConfig
from ..discovery import IGNORED_DIRS, ROOT_FILES, display_path, is_valid_name, list_memory_files, normalize_extra_paths
from ..errors import EmbeddingError, StoreError
from ..journal import ChangeJournal
from ..store.base import Store, StoreBusyError
from ..sync import Entry, Scan
from .namespaces import SharedNamespaces
from .stores import StoreHandles
from .syncing import Changes, SyncRunner

log = logging.getLogger("clawmem")


def changed_files(scan: Scan) -> int:
    """Files a scan found added, changed (by size, mtime, ctime or inode) or gone; files re-read
    only because they were modified close to the last scan (most likely unchanged) do not count."""
    n = sum(map(len, scan.gone.values()))
    for item, key in scan.todo:
        prev = scan.known[item.source].get(item.path)
        if prev is None or prev[2:] != key:
            n += 1
    return n


def _regular(path: str) -> bool:
    """A regular file, not a symlink (as discovery lists files)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def journal_items(workspace: Path, extra_paths: list[str], paths: Iterable[str]
                  ) -> tuple[list[Entry], list[str], list[str]] | None:
    """Of ``paths`` (absolute paths of ``.md`` files the change journal saw change), what
    discovery (:func:`~clawmem_core.discovery.memory_paths`) lists now, without a walk: the memory
    files among them, the display path of each of them (indexed ones not listed are gone), and
    the printable paths of those whose name is not valid UTF-8. ``None`` when that cannot be told
    from the paths alone (memory roots that overlap, where discovery lists a file under the first
    root that reaches it; a path under no root): the caller walks."""
    ws = os.path.abspath(workspace)
    roots: list[tuple[str, bool]] = []  # (absolute root, a directory walked)
    mem_dir = os.path.join(ws, "memory")
    if os.path.isdir(mem_dir) and not os.path.islink(mem_dir):
        roots.append((mem_dir, True))
    for p in normalize_extra_paths(Path(ws), extra_paths):
        if p.is_symlink():
            continue
        if p.is_dir():
            roots.append((str(p), True))
        elif p.is_file() and p.name.endswith(".md"):
            roots.append((str(p), False))
    reals = [os.path.realpath(ws) + os.sep + name for name in ROOT_FILES] + [os.path.realpath(r) for r, _ in roots]
    for i, a in enumerate(reals):
        for b in reals[i + 1:]:
            if a == b or b.startswith(a + os.sep) or a.startswith(b + os.sep):
                return None
    root_files: list[str] | None = None
    items: list[Entry] = []
    checked: list[str] = []
    bad: list[str] = []
    for path in sorted(set(os.path.abspath(p) for p in paths)):
        parent, name = os.path.split(path)
        shown: str | None = None
        listed = False
        if parent == ws and name in ROOT_FILES:
            if root_files is None:
                from ..discovery import _root_files

                root_files = _root_files(ws)
            shown, listed = name, name in root_files
        else:
            for root, is_dir in roots:
                if is_dir and path.startswith(root + os.sep):
                    rel = path[len(root) + 1:]
                    if any(part in IGNORED_DIRS for part in rel.split(os.sep)[:-1]):
                        return None  # never watched: the journal should not have named it
                    shown = display_path(Path(ws), Path(path))
                    listed = name.endswith(".md") and _regular(path)
                    break
                if not is_dir and path == root:
                    shown, listed = display_path(Path(ws), Path(path)), _regular(path)
                    break
        if shown is None:
            return None
        if not is_valid_name(shown):
            if listed:
                from ..discovery import printable_name

                bad.append(printable_name(shown))
            continue
        checked.append(shown)
        if listed:
            items.append((shown, path, "memory", False))
    return items, checked, bad


class FreshnessLimits:
    """The limits of a search's small sync, read when a search runs (the index's attributes of
    the same names: :attr:`~clawmem_core.index.MemoryIndex.fresh_max_files` and the others)."""

    fresh_max_files = 20
    fresh_max_bytes = 2_000_000
    fresh_budget = 2.0
    change_journal = True


class Freshness:
    """The freshness checks of one index's searches. ``limits``: an object with the attributes of
    :class:`FreshnessLimits`; ``sync``: a full sync (``sync(reason=..., vectors=...)``) for a new
    index; ``background``: starts a background sync (``background(vectors_only=...)``)."""

    def __init__(self, config: MemoryConfig, workspace: Path | None, limits: Any, stores: StoreHandles,
                 runner: SyncRunner, changes: Changes, namespaces: SharedNamespaces,
                 sync: Callable[..., Any], background: Callable[..., None]) -> None:
        self.config = config
        self.workspace = workspace
        self.limits = limits
        self.stores = stores
        self.runner = runner
        self.changes = changes
        self.namespaces = namespaces
        self._sync = sync
        self._background = background
        #: Kernel change notifications trusted by searches (started by the second search; see
        #: ``change_journal``).
        self.journal: ChangeJournal | None = None
        self._journal_tried = False
        self._checks = 0
        #: When a walk last found the index matching the Markdown: ``(search handle, its data
        #: version, the vector phase's handle, what that handle had seen of other writers)``.
        self.fresh_at: tuple[Store, Any, Store | None, Any] | None = None
        #: Syncs (and searches' small syncs) that checked only the files the journal saw change
        #: (a test and bench figure).
        self.journal_scans = 0
        runner.freshness = self

    def prepare_search(self) -> tuple[bool, bool]:
        """Sync what a search needs first; returns whether there is anything to search and whether
        the answer will be stale. A new index gets its keyword phase now (seconds), its vectors
        in the background. An index in use gets the changes made on disk when they are few
        (``fresh_max_files``, ``fresh_max_bytes``, within ``fresh_budget`` seconds);
        more, and the search answers from the index as it is (stale) while a background sync
        catches up."""
        if self.workspace is None:  # a replica: the index as the syncing host left it
            return self.namespaces.search_store().has_content(), False
        if not self.stores.store.has_content():
            if list_memory_files(self.workspace, self.config.extra_paths).files:
                self._sync(reason="search", vectors=False)  # first use: keywords before answering
            if not self.stores.store.has_content():
                return bool(self.config.shared) and self.namespaces.search_store().has_content(), False
            self._background(vectors_only=True)
            return True, False
        stale = self.freshen()
        self._background()
        return True, stale

    def trust_journal(self) -> bool:
        """Whether the index is known to match the Markdown without checking any file: the
        journal saw no change since it last did, nothing marked the index dirty, and no
        connection wrote to the index since (another process or instance may have written files'
        states older than the Markdown) but this index's own vector phase (which writes vectors,
        never a file's state). Call with the sync lock held."""
        journal = self.journal
        if journal is None:
            self._start_journal()
            return False
        if journal.changed() or self.changes.dirty:
            return False
        return self.matches_walk(self.stores.store.data_version())

    def _start_journal(self) -> None:
        """Start the change journal from the second check on (a search's or a sync's)."""
        if self.limits.change_journal and not self._journal_tried and self._checks >= 2 and self.workspace:
            self._journal_tried = True  # once: unavailable stays unavailable
            self.journal = ChangeJournal.start(self.workspace, self.config.extra_paths)

    def matches_walk(self, version: Any) -> bool:
        """Whether the search handle at ``version`` holds what the last walk (or journal scan)
        found matching the Markdown: nobody wrote since but this index's own vector phase (whose
        handle saw no other connection commit since)."""
        at = self.fresh_at
        store = self.stores.store
        if at is None or at[0] is not store:
            return False
        if at[1] == version:
            return True
        return at[2] is not None and at[2] is self.stores.vector_store and self.vector_mark()[1] == at[3]

    def before_sync(self) -> tuple[Store | None, Any]:
        """A sync's keyword phase begins (sync lock held): count it as a check (the journal
        starts from the second), and take the :meth:`vector_mark` its result will carry."""
        self._checks += 1
        if self.journal is None:
            self._start_journal()
        return self.vector_mark()

    def journal_scan(self) -> Scan | None:
        """A scan of only the files the change journal saw change since the index last matched
        the Markdown, or ``None`` when the journal cannot vouch for every other file (not
        running, overflowed, a directory came, went or was renamed, a change noticed that it may
        not have seen, another writer since): the caller walks. Call with the sync lock held."""
        journal = self.journal
        if journal is None or self.workspace is None or self.changes.blind or self.fresh_at is None:
            return None
        paths = journal.changed_paths()
        if paths is None:
            return None
        listed = journal_items(self.workspace, self.config.extra_paths, paths)
        if listed is None:
            return None
        runner = self.runner
        scan = runner.syncer.journal_scan(self.stores.store, lambda: runner.identity(runner.embedder.now().embedder),
                                          *listed)
        if scan is None or scan.store is not self.stores.store or not self.matches_walk(scan.version):
            return None  # (another connection wrote since: walk)
        self.journal_scans += 1
        return scan

    def vector_mark(self) -> tuple[Store | None, Any]:
        """The vector phase's handle and its token of other connections' commits (``(None,
        None)`` before the first vector phase). Read before the walk whose result it marks: a
        commit by anyone else after that moves it."""
        vstore = self.stores.vector_store
        if vstore is None:
            return None, None
        try:
            return vstore, vstore.others_version()
        except (StoreError, *vstore.driver_errors):  # closed or replaced meanwhile: not trusted
            return None, None

    def confirm_fresh(self, store: Store, version: Any, mark: tuple[Store | None, Any]) -> None:
        """The index (``store`` at ``version``) was found to match the Markdown by a walk started
        after the journal was last read, and after ``mark`` (:meth:`vector_mark`) was taken."""
        self.fresh_at = (store, version, *mark)
        if self.journal is not None:
            self.journal.confirm()

    def freshen(self) -> bool:
        """Sync the changes a search must see when they are small; True when the search will
        answer without some of them (stale)."""
        if not self.config.sync.on_search or self.config.sessions_enabled:
            return self.changes.dirty  # syncs on search are off, or transcripts wait for their deltas
        budget = self.limits.fresh_budget
        deadline = time.monotonic() + budget
        runner = self.runner
        if not runner.lock.acquire(timeout=budget):
            return True  # a long sync holds the index: answer from it as it is
        try:
            self._checks += 1
            if self.trust_journal():
                return False
            gen = self.changes.gen
            mark = self.vector_mark()
            scan = runner.unlocked_scan()
            if scan is not None and scan.clean:
                runner.nothing_changed(scan, "search", gen, time.perf_counter())
                self.confirm_fresh(scan.store, scan.version, mark)
                return False
            changed = changed_files(scan) if scan is not None else -1
            if changed == 0 and scan.items is None:  # type: ignore[union-attr]
                # only files written just before the last scan, each with the size, mtime, ctime
                # and inode it was indexed with: nothing to write (a sync re-reads them later)
                self.confirm_fresh(scan.store, scan.version, mark)  # type: ignore[union-attr]
                return False
            small = (
                scan is not None
                and changed <= self.limits.fresh_max_files
                and sum(key[0] for _, key in scan.todo) <= self.limits.fresh_max_bytes
                and time.monotonic() < deadline
            )
            if not small:
                self.changes.mark_dirty(journaled=True)
                return True
            try:
                with self.stores.process_lock(blocking=False):
                    report = runner.guarded(False, None, "search", scan=scan)
            except StoreBusyError:
                self.changes.mark_dirty(journaled=True)
                return True  # another process is syncing: it will bring these changes (and its write, a walk)
            except (StoreError, *self.stores.store.driver_errors) as exc:  # e.g. another writer holds the file
                log.warning("memory sync before a search failed; answering from the index: %s", exc)
                self.changes.mark_dirty()
                return True
            # The changed files' vectors too, if they come within the budget (the others are
            # the background sync's).
            paths = [item.path for item, _ in scan.todo]
            if paths and report.files_indexed:
                try:
                    runner.vectors(report, deadline=deadline, paths=paths, store=self.stores.writer_store())
                except EmbeddingError as exc:
                    log.warning("embedding the changed files failed: %s", exc)
            # (files skipped as unreadable are the state of the disk: a change to them is an event)
            store = self.stores.store
            self.confirm_fresh(store, store.data_version(), self.vector_mark())
            return False
        finally:
            runner.lock.release()

    def close(self) -> None:
        """Stop the change journal."""
        if self.journal is not None:
            self.journal.close()
