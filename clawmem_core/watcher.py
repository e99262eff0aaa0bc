"""File watcher: tells the index which memory files changed (SPEC 9, "on file change").

Built on ``watchfiles`` (the Rust ``notify`` crate). On Linux one inotify instance watches a whole tree with one
watch per directory and no file descriptor per file, so large trees do not exhaust descriptors the way OpenClaw's
chokidar watcher did. Two notifiers run in one background thread:

* a **recursive** one over directory targets (``memory/``, extra directories), reporting ``.md`` files;
* a **flat** (non-recursive) one over the parent directories of file targets (``MEMORY.md``, ``memory.md``, extra
  ``.md`` files), of the sessions directory, and of directory targets that do not exist yet.

A missing ``memory/`` is therefore noticed through a single non-recursive watch on the workspace; when it appears,
the recursive notifier is rebuilt to include it and the ``.md`` files already inside it are reported. Watching the
workspace recursively instead would also watch every ``node_modules``/``.venv`` directory under it.

Events are debounced: the callback runs once the tree has been quiet for ``debounce_ms`` (or at the latest
``max_wait_ms`` after the first unreported change), so a burst of writes gives one or a few callbacks. Exceptions
from the callback are logged and never stop the thread. When native watching fails (for example the inotify watch
limit), the watcher falls back to polling and logs a warning rather than giving up.

Start the watcher before the index's initial sync, so no edit falls between the two.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from .discovery import IGNORED_DIRS, ROOT_FILES

__all__ = ["MemoryWatcher", "DEFAULT_IGNORED_DIRS", "is_ignored", "workspace_watch_paths"]

log = logging.getLogger(__name__)

DEFAULT_IGNORED_DIRS = IGNORED_DIRS
_LONG_TERM_NAMES = ROOT_FILES
_ADDED, _MODIFIED, _DELETED = 1, 2, 3
_STEP_MS = 50  # how often the notifier checks for changes and for stop()
_IDLE_WAIT_MS = 250  # longest wait in the notifier when nothing is pending


def is_ignored(path: str | os.PathLike[str], ignored: Iterable[str] = DEFAULT_IGNORED_DIRS) -> bool:
    """True when a segment of ``path`` (case-insensitive) is an ignored directory name such as ``node_modules``."""
    names = {name.lower() for name in ignored}
    return any(part.lower() in names for part in Path(path).parts)


def workspace_watch_paths(
    workspace: str | os.PathLike[str], extra_paths: Iterable[str | os.PathLike[str]] = ()
) -> list[Path]:
    """What to watch for a workspace: ``MEMORY.md``, ``memory.md``, ``memory/`` and the extra paths.

    Extra paths may be absolute or workspace-relative; ``~`` and environment variables expand.
    """
    root = Path(os.path.abspath(os.path.expanduser(os.fspath(workspace))))
    paths = [root / name for name in _LONG_TERM_NAMES] + [root / "memory"]
    for raw in extra_paths:
        text = os.path.expandvars(os.path.expanduser(os.fspath(raw).strip()))
        if text:
            paths.append(Path(os.path.abspath(root / text)))
    return paths


@dataclass
class _Plan:
    """The resolved watch layout: which directories are watched how, and which names they report."""

    deep: list[Path] = field(default_factory=list)  # existing directory targets, watched recursively
    flat: dict[Path, set[str]] = field(default_factory=dict)  # dir -> file names to report
    pending_dirs: set[Path] = field(default_factory=set)  # directory targets that do not exist yet
    sessions: Path | None = None


def _is_file_target(path: Path) -> bool:
    if path.exists():
        return not path.is_dir()
    return path.suffix.lower() == ".md"


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


class MemoryWatcher:
    """Watch memory files in a background thread and call ``on_change(paths)`` after each burst of changes.

    ``paths``: directories (watched recursively for ``.md`` files) and single files (watched through their parent
    directory, filtered to that file). A path that does not exist yet is a file if it ends in ``.md``, else a
    directory, picked up when it appears. Symlinked targets are skipped. ``sessions_dir``: a transcripts directory
    whose ``*.jsonl`` files are reported too (not recursive), under ``sessions_dir`` as given (it may be a
    symlink to the real directory). Other reported paths are absolute and resolved; they are
    ``.md`` (or session ``.jsonl``) files that were added, modified or deleted, plus directories moved into or
    out of a watched tree as a whole.
    """

    def __init__(
        self,
        paths: Iterable[str | os.PathLike[str]],
        on_change: Callable[[set[Path]], None],
        debounce_ms: int = 1500,
        ignore: Iterable[str] = DEFAULT_IGNORED_DIRS,
        *,
        sessions_dir: str | os.PathLike[str] | None = None,
        max_wait_ms: int | None = None,
        force_polling: bool | None = None,
    ) -> None:
        if debounce_ms < 0:
            raise ValueError("debounce_ms must be >= 0")
        self._targets = [Path(os.path.abspath(os.path.expanduser(os.fspath(p)))) for p in paths]
        self._sessions_dir = (
            Path(os.path.abspath(os.path.expanduser(os.fspath(sessions_dir)))) if sessions_dir is not None else None
        )
        self._on_change = on_change
        self.debounce_ms = int(debounce_ms)
        self.max_wait_ms = int(max_wait_ms) if max_wait_ms is not None else max(4 * self.debounce_ms, 1000)
        self._ignored = frozenset(name.lower() for name in ignore)
        self._force_polling = force_polling
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._notifiers: dict[str, Any] = {}
        self._plan = _Plan()
        self._polling = False
        self.callback_count = 0
        self.error_count = 0

    @classmethod
    def for_workspace(
        cls,
        workspace: str | os.PathLike[str],
        on_change: Callable[[set[Path]], None],
        extra_paths: Iterable[str | os.PathLike[str]] = (),
        **kwargs: Any,
    ) -> "MemoryWatcher":
        """A watcher over ``MEMORY.md``, ``memory.md``, ``memory/`` and ``extra_paths`` of ``workspace``."""
        return cls(workspace_watch_paths(workspace, extra_paths), on_change, **kwargs)

    # ----------------------------------------------------------------------------------------------------------
    # Lifecycle
    # ----------------------------------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def polling(self) -> bool:
        """True when native watching failed and the watcher fell back to polling."""
        return self._polling

    @property
    def watched(self) -> dict[str, list[Path]]:
        """The directories currently watched: ``{"recursive": [...], "flat": [...]}``."""
        return {"recursive": list(self._plan.deep), "flat": sorted(self._plan.flat)}

    def start(self) -> "MemoryWatcher":
        """Register the watches (synchronously: changes made after this returns are seen) and start the thread."""
        if self.running:
            raise RuntimeError("watcher is already running")
        self._stop = threading.Event()
        self._plan = self._make_plan()
        self._build("deep")
        self._build("flat")
        self._thread = threading.Thread(target=self._run, name="clawmem-watcher", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stop watching and join the thread (it notices within ~50 ms, unless a callback is running)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        if thread is None or not thread.is_alive():
            self._close_all()
            self._thread = None

    close = stop

    def __enter__(self) -> "MemoryWatcher":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------------------------------------------------
    # Planning and notifiers
    # ----------------------------------------------------------------------------------------------------------

    def _make_plan(self) -> _Plan:
        plan = _Plan(sessions=None)
        deep: list[Path] = []
        for target in self._targets:
            if target.is_symlink():
                log.debug("memory watcher: skipping symlinked path %s", target)
                continue
            if _is_file_target(target):
                parent = Path(os.path.realpath(target.parent))
                if parent.is_dir():
                    plan.flat.setdefault(parent, set()).add(target.name)
                continue
            if target.is_dir():
                deep.append(Path(os.path.realpath(target)))
            else:
                plan.pending_dirs.add(target)
                parent = target.parent
                if parent.is_dir() and not parent.is_symlink():
                    plan.flat.setdefault(Path(os.path.realpath(parent)), set())
        # Drop roots nested inside other roots: one watch tree each.
        deep = sorted(set(deep), key=lambda p: len(p.parts))
        for root in deep:
            if not any(_inside(root, other) for other in plan.deep):
                plan.deep.append(root)
        # The sessions directory is the application's, not a workspace file: reached through a symlink, it is
        # watched at its real place (its transcripts are reported under the configured path, see ``_collect``).
        if self._sessions_dir is not None and self._sessions_dir.is_dir():
            plan.sessions = Path(os.path.realpath(self._sessions_dir))
            plan.flat.setdefault(plan.sessions, set())
        return plan

    def _build(self, kind: str) -> None:
        from watchfiles._rust_notify import RustNotify  # lazy: keeps ``import clawmem_core`` fast

        old = self._notifiers.pop(kind, None)
        if old is not None:
            old.close()
        roots = self._plan.deep if kind == "deep" else sorted(self._plan.flat)
        roots = [r for r in roots if r.is_dir()]
        if not roots:
            return
        recursive = kind == "deep"
        started = time.monotonic()
        force = bool(self._force_polling) or self._polling
        try:
            notifier = RustNotify([str(r) for r in roots], False, force, 300, recursive, True)
        except (OSError, RuntimeError) as exc:
            if force:
                raise
            log.warning("memory watcher: native watching failed (%s); falling back to polling", exc)
            self._polling = True
            notifier = RustNotify([str(r) for r in roots], False, True, max(300, self.debounce_ms // 2), recursive, True)
        self._notifiers[kind] = notifier
        # A large tree floods the kernel queue with events from notify's own walk; let it drain before
        # relying on the watch, or the first edits can be lost with the overflow.
        elapsed = time.monotonic() - started
        time.sleep(min(0.5, 0.02 + elapsed / 2))

    def _close_all(self) -> None:
        for notifier in self._notifiers.values():
            try:
                notifier.close()
            except Exception:  # pragma: no cover - closing never matters more than stopping
                pass
        self._notifiers.clear()

    # ----------------------------------------------------------------------------------------------------------
    # Filtering
    # ----------------------------------------------------------------------------------------------------------

    def _ignored_under(self, path: Path, root: Path) -> bool:
        try:
            rel = path.relative_to(root)
        except ValueError:
            return False
        return any(part.lower() in self._ignored for part in rel.parts)

    def _accept(self, change: int, path: Path) -> tuple[bool, bool]:
        """(report it?, does it change the watch layout?)."""
        plan = self._plan
        relayout = False
        if any(path == d or _inside(d, path) for d in plan.pending_dirs) and change == _ADDED:
            relayout = True
        if change == _DELETED and any(path == root or _inside(root, path) for root in plan.deep):
            relayout = True
        if change == _DELETED and path in plan.deep:
            return True, True  # a watched directory went away (moved or removed)
        for root in plan.deep:
            if _inside(path, root) and path != root:
                if self._ignored_under(path, root):
                    return False, relayout
                if path.suffix.lower() == ".md":
                    return True, relayout
                # A directory moved in or out as a whole gets one event for the directory only.
                if change == _ADDED and path.is_dir():
                    return True, relayout
                if change == _DELETED and "." not in path.name:
                    return True, relayout
                return False, relayout
        parent = path.parent
        if plan.sessions is not None and parent == plan.sessions and path.name.endswith(".jsonl"):
            return ".bak." not in path.name, relayout
        names = plan.flat.get(parent)
        if names and path.name in names:
            return True, relayout
        return False, relayout

    # ----------------------------------------------------------------------------------------------------------
    # The thread
    # ----------------------------------------------------------------------------------------------------------

    def _collect(self, raw: set[tuple[int, str]], pending: set[Path]) -> bool:
        relayout = False
        for change, name in raw:
            path = Path(name)
            report, changes_layout = self._accept(change, path)
            relayout = relayout or changes_layout
            if report:
                sessions = self._plan.sessions
                if sessions is not None and self._sessions_dir is not None and path.parent == sessions:
                    path = self._sessions_dir / path.name  # as the index lists it, even through a symlink
                pending.add(path)
                if change == _ADDED and path.suffix.lower() != ".md" and path.is_dir():
                    # Files written into a new directory before its watch was added raise no event.
                    self._scan_into(path, pending)
        return relayout

    def _scan_into(self, directory: Path, pending: set[Path]) -> None:
        for dirpath, dirnames, filenames in os.walk(directory):
            dirnames[:] = [d for d in dirnames if d.lower() not in self._ignored]
            pending.update(Path(dirpath) / f for f in filenames if f.lower().endswith(".md"))

    def _relayout(self, pending: set[Path]) -> None:
        # Keep what the current notifiers already hold (e.g. files deleted along with their directory),
        # judged by the current layout, before replacing them.
        for notifier in list(self._notifiers.values()):
            raw = notifier.watch(_STEP_MS, 10, 20, None)
            if isinstance(raw, set):
                self._collect(raw, pending)
        before = set(self._plan.deep)
        self._plan = self._make_plan()
        if set(self._plan.deep) != before or not self._notifiers.get("deep"):
            self._build("deep")
            # Files created in a new root before its watch existed: report what is there now.
            for root in set(self._plan.deep) - before:
                self._scan_into(root, pending)
        self._build("flat")

    def _fire(self, pending: set[Path]) -> None:
        self.callback_count += 1
        try:
            self._on_change(set(pending))
        except Exception:
            self.error_count += 1
            log.exception("memory watcher: on_change callback failed")

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            self._close_all()

    def _loop(self) -> None:
        pending: set[Path] = set()
        first = last = 0.0
        while not self._stop.is_set():
            try:
                now = time.monotonic()
                if pending:
                    deadline = min(last + self.debounce_ms / 1000, first + self.max_wait_ms / 1000)
                    wait_ms = int(max(1, min(_IDLE_WAIT_MS, (deadline - now) * 1000)))
                else:
                    wait_ms = _IDLE_WAIT_MS
                notifiers = list(self._notifiers.values())
                if not notifiers:
                    self._stop.wait(wait_ms / 1000)
                relayout = False
                got = False
                for notifier in notifiers:
                    raw = notifier.watch(_STEP_MS * 2, _STEP_MS, max(1, wait_ms // len(notifiers)), self._stop)
                    if raw == "stop":
                        return
                    if isinstance(raw, set) and raw:
                        before = len(pending)
                        relayout = self._collect(raw, pending) or relayout
                        got = got or len(pending) > before
                if relayout:
                    self._relayout(pending)
                    got = got or bool(pending)
                now = time.monotonic()
                if got:
                    if not first:
                        first = now
                    last = now
                if pending and (now - last >= self.debounce_ms / 1000 or now - first >= self.max_wait_ms / 1000):
                    batch, pending = pending, set()
                    first = last = 0.0
                    self._fire(batch)
            except Exception:
                self.error_count += 1
                log.exception("memory watcher: watching failed; rebuilding the watches")
                if self.error_count >= 3 and not self._polling:
                    log.warning("memory watcher: repeated failures; falling back to polling")
                    self._polling = True
                if self._stop.wait(1.0):
                    break
                try:
                    self._relayout(pending)
                except Exception:
                    log.exception("memory watcher: could not rebuild the watches")
