"""A change journal: kernel notifications (Linux inotify) of changes to the memory files, read
without waiting.

A search must see every change that finished before it started. Stat-ing every memory file per
search proves that, at a cost that grows with the workspace. The kernel queues an inotify event
inside the very system call that changes a file (a write, a rename, an unlink, a ``utime``), so a
non-blocking read of the queue at the start of a search holds every change that finished before
it: an empty queue (and no overflow) means nothing changed since the index was last checked
against the Markdown. The debounced :mod:`~clawmem_core.watcher` cannot answer this (its events
arrive after a delay); this journal is read synchronously, by the search itself.

It watches the directories discovery lists (``memory/`` and extra directories, recursively, minus
ignored directories and symlinks) and, through their parents, the targets themselves
(``MEMORY.md``, ``memory.md``, ``memory/``, each extra path; a target whose parent is missing,
through the nearest directory above it that exists, so that the parent's creation re-plans). It
names the memory files that changed (:meth:`ChangeJournal.changed_paths`), so that a sync reads
only those; a directory created, deleted or moved, a watch lost, or an overflowed queue re-plans
the watches, and the caller walks every file.
Changes it cannot see: edits through a hard link from outside the watched directories, writes
through a shared memory mapping (``mmap``), and edits made by another machine or a virtual
machine's host on a shared file system (NFS, SMB, FUSE, 9p, virtiofs...): it only starts where
every watched path is on a local file system
(:data:`LOCAL_FILE_SYSTEMS`). Unavailable (not Linux, a shared file system, no instances or watches
left, a forked child): :meth:`ChangeJournal.start` returns ``None`` and searches walk.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

from .discovery import IGNORED_DIRS, ROOT_FILES, normalize_extra_paths

log = logging.getLogger("clawmem")

# inotify(7) flags (kept here so that nothing is imported until a journal starts)
_MODIFY, _ATTRIB, _CLOSE_WRITE = 0x2, 0x4, 0x8
_MOVED_FROM, _MOVED_TO, _CREATE, _DELETE = 0x40, 0x80, 0x100, 0x200
_DELETE_SELF, _MOVE_SELF = 0x400, 0x800
_UNMOUNT, _Q_OVERFLOW, _IGNORED = 0x2000, 0x4000, 0x8000
_ONLYDIR, _DONT_FOLLOW, _ISDIR = 0x01000000, 0x02000000, 0x40000000
_CHANGES = _MODIFY | _ATTRIB | _CLOSE_WRITE | _MOVED_FROM | _MOVED_TO | _CREATE | _DELETE | _DELETE_SELF | _MOVE_SELF
_SELF = _DELETE_SELF | _MOVE_SELF | _UNMOUNT | _IGNORED


#: File systems whose every change is made through this kernel, so that inotify reports it (on a
#: network or FUSE file system, another machine's or process's edits may raise no event here).
LOCAL_FILE_SYSTEMS = frozenset({
    "ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "overlay", "zfs", "f2fs", "jfs", "reiserfs", "ramfs",
    "bcachefs", "nilfs2", "hfsplus", "vfat", "exfat", "ntfs3",
})


def file_system_type(path: str | os.PathLike[str], mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """The type of the file system holding ``path`` (its mount with the longest matching mount
    point), or ``None`` when it cannot be told."""
    real = os.path.realpath(path)
    best, fstype = -1, None
    try:
        with open(mountinfo, encoding="utf-8", errors="surrogateescape") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    for line in lines:
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5 or not right:
            continue
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        inside = real == point or point == "/" or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= best:  # a later mount over the same point hides the earlier one
            best, fstype = len(point), right.split()[0]
    return fstype


class _Watch:
    """What one watched directory reports: every ``.md`` file and subdirectory (``deep``), and/or
    the named targets it holds (``names``)."""

    __slots__ = ("path", "deep", "names")

    def __init__(self, path: str, deep: bool, names: set[str]) -> None:
        self.path = path
        self.deep = deep
        self.names = names


class ChangeJournal:
    """Kernel change notifications over a workspace's memory files (see the module docstring).

    :meth:`changed` reads the queue without waiting and says whether anything relevant happened
    since the last :meth:`confirm` (or whether the journal cannot vouch for it: closed, broken,
    overflowed, or unable to watch every target); the caller then walks the files and, once the
    index matches them, calls :meth:`confirm`. Not thread-safe: the caller serialises the calls.
    """

    def __init__(self, workspace: Path, extra_paths: list[str], inotify: Any) -> None:
        self._workspace = workspace
        self._extra_paths = list(extra_paths)
        self._inotify = inotify
        self._pid = os.getpid()
        self._watches: dict[int, _Watch] = {}
        #: Something relevant happened (or may have) since the last confirm.
        self._pending = True
        #: The memory files (absolute paths) that changed since the last confirm, or ``None`` when
        #: the journal cannot name them all (a directory came or went, a re-plan, an overflow).
        self._paths: set[str] | None = None
        #: Every target could be watched: False makes :meth:`changed` always True.
        self._complete = False
        self._broken = False
        #: How many times the watches were planned (a test and bench figure).
        self.plans = 0

    @classmethod
    def start(cls, workspace: Path, extra_paths: list[str]) -> "ChangeJournal | None":
        """A journal over ``workspace``, or ``None`` when the platform or the limits do not allow
        one (the caller then walks the files on every search)."""
        try:
            from inotify_simple import INotify
        except (ImportError, OSError, AttributeError):  # not Linux, or no inotify in this libc
            return None
        for path in [workspace, *normalize_extra_paths(workspace, extra_paths)]:
            while not os.path.exists(path) and os.path.dirname(path) != str(path):
                path = Path(os.path.dirname(path))  # a missing target: where it would be created
            kind = file_system_type(path)
            if kind not in LOCAL_FILE_SYSTEMS:
                log.debug("change journal not used: %s is on a %s file system", path, kind or "unknown")
                return None
        try:
            inotify = INotify(nonblocking=True)
        except (OSError, AttributeError) as exc:  # e.g. fs.inotify.max_user_instances reached
            log.debug("change journal unavailable: %s", exc)
            return None
        journal = cls(workspace, extra_paths, inotify)
        journal._plan()
        if journal._broken:
            journal.close()
            return None
        return journal

    @property
    def healthy(self) -> bool:
        """Whether the journal can vouch for the files (open, in this process, every target watched)."""
        return not self._broken and self._complete and os.getpid() == self._pid

    def changed_paths(self) -> set[str] | None:
        """Read the queue without waiting: the memory files (absolute paths, as the watched
        directories spell them) that may have changed since the last :meth:`confirm`, every other
        file being unchanged since; ``None`` when the journal cannot say which (closed, broken,
        overflowed, a directory created, deleted or renamed, a watch re-planned, a target
        unwatchable): the caller then walks every file."""
        if not self.changed():
            return set()
        if self._paths is None or not self.healthy:
            return None
        return set(self._paths)

    def changed(self) -> bool:
        """Read the queue without waiting: True when something relevant happened since the last
        :meth:`confirm`, or the journal cannot vouch for the files. Re-plans the watches when
        directories came or went, so that changes made after this call are queued."""
        if self._broken or os.getpid() != self._pid:
            return True
        try:
            events = self._inotify.read(timeout=0)
        except (OSError, ValueError) as exc:  # closed under us, or a read error: walk from now on
            log.warning("change journal stopped (%s): searches check every file", exc)
            self._broken = True
            return True
        replan = False
        paths = self._paths
        for wd, mask, _cookie, name in events:
            if mask & _Q_OVERFLOW:
                self._pending = replan = True
                continue
            watch = self._watches.get(wd)
            if watch is None:
                if mask & _IGNORED:
                    continue  # a watch removed by a re-plan
                self._pending = replan = True
                continue
            if mask & _SELF or not name:
                self._pending = replan = True
                continue
            if name in watch.names:  # a target itself (MEMORY.md, memory/, an extra path)
                self._pending = True
                if name.endswith(".md") and not mask & _ISDIR:
                    if paths is not None:
                        paths.add(os.path.join(watch.path, name))
                else:
                    replan = True
            elif watch.deep and (mask & _ISDIR or name.endswith(".md")):
                self._pending = True
                if mask & _ISDIR:
                    replan = True  # a directory came, went, or changed access
                elif paths is not None:
                    paths.add(os.path.join(watch.path, name))
        if replan:
            self._plan()  # (which forgets the paths: the caller walks)
        return self._pending or not self.healthy

    def confirm(self) -> None:
        """The index was found to match the files after the last :meth:`changed`: clear what it
        reported (changes since are still in the kernel's queue)."""
        self._pending = False
        self._paths = set()

    def close(self) -> None:
        try:
            self._inotify.close()
        except OSError:
            pass
        self._broken = True

    # -- planning ---------------------------------------------------------------------------------

    def _plan(self) -> None:
        """Watch every directory to watch now (adding a watch before listing a directory, so that a
        subdirectory created meanwhile raises an event), and drop the watches no longer needed."""
        self.plans += 1
        self._pending = True
        self._paths = None
        new: dict[int, _Watch] = {}
        complete = True
        ws = str(self._workspace)
        targets: list[tuple[str, bool]] = [(os.path.join(ws, n), False) for n in ROOT_FILES]
        targets.append((os.path.join(ws, "memory"), True))
        for p in normalize_extra_paths(self._workspace, self._extra_paths):
            targets.append((str(p), not p.name.endswith(".md")))
        try:
            for target, may_be_dir in targets:
                parent, name = os.path.split(target)
                if not self._add(new, parent, deep=False, names={name}, follow=True):
                    # Its parent is missing: watch the nearest directory above that exists, for
                    # the next missing one to appear (which re-plans: then the target is watched).
                    complete = self._add_ancestor(new, parent) and complete
                    continue
                if may_be_dir and os.path.isdir(target) and not os.path.islink(target):
                    complete = self._add_tree(new, target) and complete
        except OSError as exc:  # out of watches (fs.inotify.max_user_watches) or closed
            log.warning("change journal cannot watch the memory files (%s): searches check every file", exc)
            self._broken = True
            return
        for wd in set(self._watches) - set(new):
            try:
                self._inotify.rm_watch(wd)
            except OSError:
                pass
        self._watches = new
        self._complete = complete

    def _add(self, into: dict[int, _Watch], path: str, *, deep: bool, names: set[str] | None = None,
             follow: bool = False) -> bool:
        """Watch directory ``path`` (a symlink only when ``follow``: the workspace and the parents
        of the targets are reached as discovery reaches them; a directory to walk never is)."""
        try:
            wd = self._inotify.add_watch(path, _CHANGES | _ONLYDIR | (0 if follow else _DONT_FOLLOW))
        except OSError as exc:
            import errno

            if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.ELOOP):
                return False
            raise
        watch = into.get(wd)
        if watch is None:
            into[wd] = _Watch(path, deep, set(names or ()))
        else:
            watch.deep = watch.deep or deep
            watch.names |= names or set()
        return True

    def _add_ancestor(self, into: dict[int, _Watch], missing: str) -> bool:
        """Watch the nearest existing directory above ``missing`` for the name of the next
        directory down; whether that directory could be watched."""
        child = missing
        parent = os.path.dirname(child)
        while parent != child:
            if os.path.lexists(parent):
                if not os.path.isdir(parent) or not self._add(into, parent, deep=False,
                                                              names={os.path.basename(child)}, follow=True):
                    return False  # a file, or no access: the target cannot appear unseen... nor be watched
                return True
            child, parent = parent, os.path.dirname(parent)
        return False

    def _add_tree(self, into: dict[int, _Watch], root: str) -> bool:
        """Watch ``root`` and the directories under it discovery enters."""
        stack = [root]
        complete = True
        while stack:
            d = stack.pop()
            if not self._add(into, d, deep=True):
                complete = complete and d != root  # a subdirectory gone meanwhile was reported by its parent
                continue
            try:
                with os.scandir(d) as it:
                    for e in it:
                        try:
                            if e.is_dir(follow_symlinks=False) and e.name not in IGNORED_DIRS:
                                stack.append(e.path)
                        except OSError:
                            continue
            except OSError:
                continue
        return complete
