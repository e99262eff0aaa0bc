"""Which files are memory (SPEC 2).

``MEMORY.md``, ``memory.md``, ``memory/**/*.md`` and every extra path (a directory walked for
``.md`` files, or one ``.md`` file). Symlinks are skipped, ignored directories are not entered,
files reached twice are listed once (by real path). A file whose path is not valid UTF-8 (raw bytes
such as ``memory/bad\xff.md``, which Python holds as lone surrogates) is skipped and reported: such a
name cannot be stored in the index, shown in a JSON payload or printed.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from .text import encodes

IGNORED_DIRS = frozenset({".git", "node_modules", ".pnpm-store", ".venv", "venv", ".tox", "__pycache__"})
ROOT_FILES = ("MEMORY.md", "memory.md")


@dataclass(frozen=True)
class MemoryFile:
    """A Markdown file to index: its absolute path and its workspace-relative display path."""

    abs: str
    path: str

    @property
    def abs_path(self) -> Path:
        return Path(self.abs)


@dataclass
class Discovery:
    """The memory files found, the extra paths that do not exist, and the files skipped because
    their path is not valid UTF-8 (shown with ``\\xNN`` escapes; reported by ``status``)."""

    files: list[MemoryFile] = field(default_factory=list)
    missing_extra_paths: list[str] = field(default_factory=list)
    bad_names: list[str] = field(default_factory=list)


#: Why a file with such a name is not indexed (in sync reports and status issues).
BAD_NAME_REASON = "file name is not valid UTF-8"


def is_valid_name(path: str) -> bool:
    """False when ``path`` holds lone surrogates (undecodable bytes of a file name): it cannot be
    stored in SQLite, serialised to UTF-8 JSON or printed."""
    return encodes(path, "utf-8")


def printable_name(path: str) -> str:
    """``path`` with its undecodable bytes shown as ``\\xNN`` (other lone surrogates as ``\\udNNN``):
    safe to store, serialise and print, and readable by a person."""
    try:
        return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return path.encode("utf-8", "backslashreplace").decode("utf-8")


def split_bad_names(pairs: list[tuple[str, str]], bad: list[str] | None = None) -> list[tuple[str, str]]:
    """``(display path, absolute path)`` pairs whose display path is valid UTF-8; the printable
    form of the others is appended to ``bad``. One encode call for the common all-valid case."""
    if not pairs:
        return pairs
    try:
        "\n".join(p for p, _ in pairs).encode("utf-8")
        return pairs
    except UnicodeEncodeError:
        pass
    good = []
    for pair in pairs:
        if is_valid_name(pair[0]):
            good.append(pair)
        elif bad is not None:
            bad.append(printable_name(pair[0]))
    return good


def expand_path(raw: str, workspace: Path) -> Path:
    """Expand ``~`` and environment variables; resolve relative paths against the workspace."""
    p = Path(os.path.expandvars(os.path.expanduser(raw.strip())))
    if not p.is_absolute():
        p = workspace / p
    return Path(os.path.normpath(p))


def normalize_extra_paths(workspace: Path, extra_paths: list[str]) -> list[Path]:
    """Absolute, normalised, deduplicated extra paths (blank entries dropped)."""
    out: list[Path] = []
    for raw in extra_paths:
        if not raw or not raw.strip():
            continue
        p = expand_path(raw, workspace)
        if p not in out:
            out.append(p)
    return out


def display_path(workspace: Path, abs_path: Path) -> str:
    """Workspace-relative path with ``/`` separators (``../`` for files outside the workspace)."""
    return os.path.relpath(abs_path, workspace).replace(os.sep, "/")


#: A directory listing is reused only when the directory was last modified this long before the
#: listing began: a change within the same timestamp tick as the listing could keep its mtime.
_RACY_LISTING_NS = 2_000_000_000

#: Directory -> ((device, inode, mtime, ctime) before listing, its ``.md`` files, its subdirectories).
Listings = dict[str, tuple[tuple[int, int, int, int], list[str], list[tuple[str, str]]]]


def _list_dir(d: str) -> tuple[list[str], list[tuple[str, str]]] | None:
    """The ``.md`` files (sorted) and the subdirectories to enter (reverse-sorted) of ``d``."""
    try:
        entries = list(os.scandir(d))
    except OSError:
        return None
    files: list[str] = []
    subdirs: list[tuple[str, str]] = []
    for e in entries:
        name = e.name
        try:
            # Not following symlinks, a symlink is neither a file nor a directory.
            if name.endswith(".md") and e.is_file(follow_symlinks=False):
                files.append(name)
            elif e.is_dir(follow_symlinks=False) and name not in IGNORED_DIRS:
                subdirs.append((name, e.path))
        except OSError:
            continue
    files.sort()
    subdirs.sort(reverse=True)
    return files, subdirs


def _walk(root: str, listings: Listings | None = None) -> list[str]:
    """``.md`` files under ``root`` as paths relative to it (``/``-separated), sorted per
    directory; symlinks and ignored directories are not entered.

    With ``listings`` (kept by the caller between walks, updated here), a directory whose device,
    inode, mtime and ctime are those it had before its last listing is not listed again: adding,
    removing or renaming an entry changes a directory's mtime and ctime (putting the mtime back
    changes the ctime), and a listing taken within :data:`_RACY_LISTING_NS` of its last change
    is not reused."""
    found: list[str] = []
    stack = [(root, "")]
    seen: Listings = {}
    while stack:
        d, rel = stack.pop()
        listing = None
        if listings is not None:
            try:
                st = os.stat(d)
            except OSError:
                continue
            key = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
            kept = listings.get(d)
            if kept is not None and kept[0] == key:
                listing = kept[1], kept[2]
                seen[d] = kept
            else:
                began = time.time_ns()
                listing = _list_dir(d)
                if listing is not None and max(st.st_mtime_ns, st.st_ctime_ns) < began - _RACY_LISTING_NS:
                    seen[d] = (key, *listing)
        else:
            listing = _list_dir(d)
        if listing is None:
            continue
        files, subdirs = listing
        found.extend(map((rel).__add__, files) if rel else files)
        stack.extend((path, f"{rel}{name}/") for name, path in subdirs)
    if listings is not None:  # forget directories no longer under this root
        for d in [d for d in listings if d == root or d.startswith(root.rstrip(os.sep) + os.sep)]:
            if d not in seen:
                del listings[d]
        listings.update(seen)
    return found


def _root_files(ws: str) -> list[str]:
    """``MEMORY.md`` and ``memory.md`` when they are regular files, each file once: on a
    case-insensitive file system both names reach one file (same device and inode), listed under
    the name the directory holds."""
    found: list[str] = []
    seen: dict[tuple[int, int], int] = {}
    for name in ROOT_FILES:
        try:
            st = os.lstat(os.path.join(ws, name))
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen:
            try:
                listed = os.listdir(ws)
            except OSError:
                continue
            if name in listed and found[seen[key]] not in listed:
                found[seen[key]] = name
            continue
        seen[key] = len(found)
        found.append(name)
    return found


def _same_root(root: str, real_roots: dict[tuple[int, int], str]) -> str:
    """The real path of ``root``, or of an earlier root that is the same directory under another
    spelling (``Memory`` and ``memory`` on a case-insensitive file system)."""
    real = os.path.realpath(root)
    try:
        st = os.stat(real)
    except OSError:
        return real
    return real_roots.setdefault((st.st_dev, st.st_ino), real)


def list_memory_files(workspace: Path, extra_paths: list[str] | None = None) -> Discovery:
    """Every memory file of ``workspace`` in a stable order (SPEC 2)."""
    bad: list[str] = []
    pairs, missing = memory_paths(workspace, extra_paths, bad_names=bad)
    return Discovery([MemoryFile(a, p) for p, a in pairs], missing, bad)


def memory_paths(
    workspace: Path, extra_paths: list[str] | None = None, *, bad_names: list[str] | None = None,
    listings: Listings | None = None,
) -> tuple[list[tuple[str, str]], list[str]]:
    """What :func:`list_memory_files` finds, as ``(display path, absolute path)`` pairs (cheap
    for tens of thousands of files), and the extra paths that do not exist. Files whose path is not
    valid UTF-8 are left out; their printable paths are appended to ``bad_names``. ``listings``:
    directory listings kept between calls (see :func:`_walk`)."""
    workspace = Path(os.path.abspath(workspace))
    ws = str(workspace)
    missing: list[str] = []
    # (root directory, files relative to it); nothing below a root is a symlink, so a file's real
    # path is its root's real path plus its relative path (one realpath call per root).
    groups: list[tuple[str, list[str]]] = []
    groups.append((ws, _root_files(ws)))
    mem_dir = os.path.join(ws, "memory")
    if os.path.isdir(mem_dir) and not os.path.islink(mem_dir):
        groups.append((mem_dir, _walk(mem_dir, listings)))
    # MEMORY.md and memory/ never reach the same file: only extra paths need de-duplicating.
    dedupe_from = len(groups)
    seen_extra: set[Path] = set()
    for raw in extra_paths or []:
        if not raw or not raw.strip():
            continue
        p = expand_path(raw, workspace)
        if p in seen_extra:
            continue
        seen_extra.add(p)
        if p.is_symlink():
            continue
        if p.is_dir():
            groups.append((str(p), _walk(str(p), listings)))
        elif p.is_file():
            if p.name.endswith(".md"):
                groups.append((str(p.parent), [p.name]))
        else:
            missing.append(raw)
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    dedupe = len(groups) > dedupe_from
    real_roots: dict[tuple[int, int], str] = {}
    for root, rels in groups:
        if not rels:
            continue
        shown_root = display_path(workspace, Path(root))
        prefix = "" if shown_root == "." else shown_root + "/"
        base = root if root.endswith(("/", os.sep)) else root + os.sep  # os.path.join, without a call per file
        if dedupe:
            real_root = _same_root(root, real_roots) + "/"
            fresh = [rel for rel in rels if real_root + rel not in seen]
            seen.update(real_root + rel for rel in fresh)
            rels = fresh
        out.extend(zip(map(prefix.__add__, rels), map(base.__add__, rels)))
    return split_bad_names(out, bad_names), missing
