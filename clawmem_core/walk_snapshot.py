"""The walk a new process inherits: what the last ``clawmem search`` of a SQLite index found (its
directory listings, and the indexed state of every memory file when it found nothing changed), kept
beside the index (``<index file>.walk``).

A one-shot search must still see every edit that finished before it started (SPEC 6), so it still
stats every memory file; what it no longer does is list every directory, read every file's state from
the index, and compare them file by file in Python. Each part is trusted only where it provably still
holds:

- a directory's listing while the directory's device, inode, mtime and ctime are those recorded before
  it was listed (adding, removing or renaming an entry changes them; a listing taken within two seconds
  of the directory's last change is never kept: see :func:`clawmem_core.discovery._walk`);
- the indexed files' ``(size, mtime, ctime, inode)``, in the order the walk lists the files, recorded
  from a scan that found every file unchanged, while the index file and its write-ahead log have the
  size, mtime, ctime and inode they had then (a commit changes one of them), recorded only when both
  were last changed more than two seconds before (so that a later commit cannot fall in the same
  timestamp tick). A search that lists the same files and stats the same keys, in one comparison of
  two lists, has nothing to sync: the scan's own test (same key as indexed, older than the last scan)
  held for every file when they were recorded, and a file edited since has another ctime.

Anything else (another workspace or extra paths, another index, a file listed or stat-ed differently,
an unreadable or foreign snapshot) and the search scans as before. The file is a cache: deleting it
costs one slower search.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Hashable, Sequence

if TYPE_CHECKING:
    from .store.base import Store

#: A :class:`~clawmem_core.sync.Syncer`, a :class:`~clawmem_core.sync.Scan` and one of its entries
#: ``(path, absolute path, source, deferred)`` (the sync module imports this one, not the reverse).
Syncer = Any
Scan = Any
Entry = tuple[str, str, str, bool]

#: Bumped when the recorded layout changes (a file of another format is ignored).
FORMAT = 1
#: An index signature is recorded only when its files were last changed this long before (nanoseconds).
_RACY_NS = 2_000_000_000

Signature = tuple[Any, ...]

#: The clock the settling rule reads (nanoseconds since the epoch).
now_ns = time.time_ns


def snapshot_path(store_path: str | os.PathLike[str]) -> Path:
    """Where the walk of the index at ``store_path`` is kept."""
    return Path(os.fspath(store_path) + ".walk")


def index_signature(store_path: str | os.PathLike[str]) -> Signature:
    """``(device, inode, size, mtime, ctime)`` of the index file and of its write-ahead log (``None``
    for a log that does not exist or is empty, as each connection's open leaves it): it changes with
    every commit to the index."""
    out: list[Any] = []
    for suffix in ("", "-wal"):
        try:
            st = os.stat(os.fspath(store_path) + suffix)
        except FileNotFoundError:
            out.append(None)
            continue
        if suffix and not st.st_size:
            out.append(None)
            continue
        out.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return tuple(out)


def _settled(sig: Signature, now: int) -> bool:
    """Every file of ``sig`` was last changed more than :data:`_RACY_NS` before ``now``."""
    return all(part is None or max(part[3], part[4]) < now - _RACY_NS for part in sig)


def _listed(items: Sequence[Entry]) -> bytes:
    """A digest of the files listed, in order. Display paths: each absolute path is its root (the
    workspace or an extra path, both in the header) and the same relative path."""
    h = hashlib.blake2b(digest_size=20)
    h.update("\0".join([item[0] for item in items]).encode("utf-8", "surrogateescape"))
    return h.digest()


def stat_keys(items: Sequence[Entry]) -> list[int] | None:
    """Each file's :func:`~clawmem_core.sync.stat_key`, flattened in the order of ``items``; ``None``
    when one cannot be stat-ed."""
    out: list[int] = []
    add = out.extend
    stat = os.stat
    try:
        for item in items:
            st = stat(item[1])
            add((st.st_size, int(st.st_mtime * 1000), st.st_ctime_ns, st.st_ino))
    except OSError:
        return None
    return out


class WalkSnapshot:
    """The recorded walk of one index, for one workspace and its extra paths. Attach it to a
    :class:`~clawmem_core.sync.Syncer` with :meth:`restore`; :meth:`record` writes what changed."""

    def __init__(self, store_path: str | os.PathLike[str], workspace: str | os.PathLike[str],
                 extra_paths: Sequence[str]) -> None:
        self.path = snapshot_path(store_path)
        self.store_path = os.fspath(store_path)
        self.header = (FORMAT, os.path.abspath(os.fspath(workspace)), tuple(extra_paths))
        #: The listings and the unchanged state, as loaded (written again only when they change).
        self._listings: dict[str, Any] = {}
        self._state: tuple[Any, ...] | None = None
        #: A clean scan's state, not yet recorded: (store, version, listed digest, keys).
        self._pending: tuple[Any, ...] | None = None
        #: Whether a scan found the recorded state out of date.
        self._stale = False
        self._syncer: Syncer | None = None

    def restore(self, syncer: Syncer) -> None:
        """Give ``syncer`` the recorded listings (each checked against its directory by the walk) and
        this snapshot (its unlocked scans ask :meth:`clean_scan` first and report to :meth:`observe`)."""
        self._syncer = syncer
        syncer.walk = self
        try:
            data = marshal.loads(self.path.read_bytes())
            if not isinstance(data, dict) or data.get("header") != self.header:
                return
            listings, state = data["listings"], data["state"]
        except (OSError, EOFError, ValueError, TypeError, KeyError):
            return
        if isinstance(listings, dict):
            self._listings = listings
            for d, kept in listings.items():
                syncer._listings.setdefault(d, kept)
        if isinstance(state, tuple) and len(state) == 3:
            self._state = state

    def clean_scan(self, store: Store, items: list[Entry]) -> tuple[Hashable, float] | None:
        """``(the index's data version, time.time() before the first stat)`` of a scan finding
        nothing changed, when the files listed and their stat keys are those recorded and the index
        has not changed since; ``None`` when this cannot tell (then the caller scans)."""
        if self._state is None:
            return None
        sig, listed, keys = self._state
        version = store.data_version()  # first: a commit after it moves it, one before it the signature
        self._stale = True
        if index_signature(self.store_path) != tuple(sig) or _listed(items) != listed:
            return None
        started = time.time()
        if stat_keys(items) != keys:
            return None
        self._stale = False
        return version, started

    def observe(self, store: Store, items: list[Entry], scan: Scan) -> None:
        """A full unlocked scan of ``items`` just ran: keep its state if it found nothing changed."""
        if not scan.clean or scan.store is not store:
            return
        known = scan.known.get("memory", {})
        if any(item[2] != "memory" for item in items) or len(known) != len(items):
            return
        try:
            keys = [k for item in items for k in known[item[0]][2:]]
        except KeyError:
            return
        if any(not isinstance(k, int) for k in keys):  # an index row from before ctime and inode
            return
        self._pending = (store, scan.version, _listed(items), keys)

    def record(self, store: Store) -> bool:
        """Write what the syncer now knows of the walk, when it differs from what was loaded; whether
        the file was written. Best effort: a failure to write leaves the next search slower."""
        syncer = self._syncer
        listings = dict(syncer._listings) if syncer is not None else {}
        state = self._state
        if self._pending is not None:
            pstore, version, listed, keys = self._pending
            self._pending = None
            sig = index_signature(self.store_path)
            # after the signature: a commit in between moves the version
            current: Hashable = store.data_version() if pstore is store else None
            if pstore is store and current == version and _settled(sig, now_ns()):
                state = (sig, listed, keys)
            else:
                state = None
        elif self._stale:
            state = None
        if listings == self._listings and state == self._state:
            return False
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_bytes(marshal.dumps({"header": self.header, "listings": listings, "state": state}))
            os.replace(tmp, self.path)
        except (OSError, ValueError):
            try:
                tmp.unlink()
            except OSError:
                pass
            return False
        self._listings, self._state = listings, state
        return True
