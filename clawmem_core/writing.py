"""Appending memory (SPEC 9): daily notes, ``MEMORY.md`` and session archives.

Writes only ever add: a note is appended to ``memory/YYYY-MM-DD.md`` or ``MEMORY.md``, a session archive is a new
file that never replaces an existing one. Appends are safe across threads and processes: the target is opened
with ``O_APPEND`` and an OS lock on the file itself is held while the file is inspected and written (``fcntl.flock``
on POSIX, ``msvcrt.locking`` on Windows), so concurrent writers never lose or interleave lines.

Locking the target file itself (rather than using the ``filelock`` package, which locks a separate ``.lock``
file) leaves no lock files in the user's memory folder, needs no dependency, and the lock vanishes with the
process that held it, so a crash never leaves a stale lock.

Files are opened through :mod:`clawmem_core.safe_fs`: the path is walked with ``O_NOFOLLOW`` directory
descriptors, so a symlink swapped in between the check and the write cannot redirect it outside the workspace, and
the target is opened non-blocking and must be a regular file (a FIFO is refused, never waited on). A note with a
NUL or other control character, or a lone surrogate, is refused before anything is created.
"""

from __future__ import annotations

import codecs
import os
import re
import sys
import textwrap
import unicodedata
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Iterator, Literal, Mapping

from .errors import ClawmemError, MemoryWriteError, PathNotAllowedError, WorkspaceError
from .safe_fs import DirHandle, LineReader, UnsafeFileError, bom_encoding, open_dir

__all__ = [
    "WriteResult",
    "InvalidNoteError",
    "NoteEncodingError",
    "NoteTooLargeError",
    "append_note",
    "archive_session",
    "daily_note_path",
    "remove_file",
    "replace_file",
    "sanitize_slug",
]

Target = Literal["daily", "long_term"]
MEMORY_DIR = "memory"
LONG_TERM_NAMES = ("MEMORY.md", "memory.md")

_WINDOWS_LOCK_OFFSET = 0x7FFFFFFE  # lock one byte far past any memory file, so readers are never blocked


class InvalidNoteError(ClawmemError, ValueError):
    """The note is empty or the write target is unknown."""


class NoteTooLargeError(InvalidNoteError):
    """The note is longer than ``write.max_note_chars``, or would take its file past ``sync.max_file_bytes`` (a
    larger file is not indexed at all). Nothing was written."""


class NoteEncodingError(InvalidNoteError):
    """The file is in a legacy encoding (cp1252, GB18030...) that cannot hold a character of the note: a note is
    appended in its file's own encoding, never mixed into it as UTF-8. Nothing was written."""


@dataclass(frozen=True)
class WriteResult:
    """Where a write landed: the absolute file path and the 1-based lines of the written text. The text is in
    the file whatever ``indexed`` says: ``indexed`` is False (with ``index_error``) when the index could not be
    updated afterwards; the next sync picks the note up, so it must not be written again."""

    path: Path
    start_line: int
    end_line: int
    indexed: bool = True
    index_error: str | None = None

    def relative_to(self, workspace: str | os.PathLike[str]) -> str:
        """The path relative to ``workspace`` with ``/`` separators."""
        return Path(os.path.relpath(self.path, os.path.realpath(workspace))).as_posix()


def _local(now: datetime | None) -> datetime:
    # A naive datetime is local time; an aware one is used in its own timezone.
    return now if now is not None else datetime.now()


def daily_note_path(workspace: str | os.PathLike[str], now: datetime | None = None) -> Path:
    """``<workspace>/memory/YYYY-MM-DD.md`` for the date of ``now`` (default: today, local time)."""
    return Path(workspace) / MEMORY_DIR / f"{_local(now):%Y-%m-%d}.md"


def sanitize_slug(slug: str | None, max_length: int = 60) -> str:
    """Lowercase ASCII ``[a-z0-9-]`` slug (accents stripped, other runs become ``-``); ``""`` if nothing is left."""
    if not slug:
        return ""
    ascii_text = unicodedata.normalize("NFKD", slug).encode("ascii", "ignore").decode("ascii")
    cleaned = re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")
    return cleaned[:max_length].rstrip("-")


# Control characters a note may not hold: a NUL makes the whole file read as binary (never indexed
# again), the others are invisible noise. Tab, newline, carriage return and form feed are text.
_CONTROL_RE = re.compile("[\x00-\x08\x0b\x0e-\x1f\x7f]")
_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def _check_characters(text: str) -> None:
    """Refuse what would make the note, or the file it joins, unreadable or unindexable."""
    bad = _CONTROL_RE.search(text)
    if bad:
        raise InvalidNoteError(f"note text contains the control character U+{ord(bad.group()):04X} at position "
                               f"{bad.start()}; remove it (a NUL would hide the whole memory file from search)")
    bad = _SURROGATE_RE.search(text)
    if bad:
        raise InvalidNoteError(f"note text contains a lone surrogate U+{ord(bad.group()):04X} at position "
                               f"{bad.start()}, which is not valid Unicode text")


def _clean_text(text: str) -> str:
    if not isinstance(text, str):
        raise TypeError(f"note text must be a str, got {type(text).__name__}")
    _check_characters(text)
    normalized = text.replace("\r\n", "\n").replace("\r", "\n")
    # Drop surrounding blank lines, trailing spaces and common indentation.
    lines = normalized.split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise InvalidNoteError("note text is empty")
    return textwrap.dedent("\n".join(line.rstrip() for line in lines))


# --------------------------------------------------------------------------------------------------------------
# Safe path resolution
# --------------------------------------------------------------------------------------------------------------


def _workspace_root(workspace: str | os.PathLike[str]) -> Path:
    root = Path(os.path.expanduser(os.fspath(workspace)))
    if not root.is_dir():
        raise WorkspaceError(f"workspace is missing or not a directory: {root}")
    return Path(os.path.realpath(root))


@contextmanager
def _open_dir(root: Path, parts: tuple[str, ...]) -> Iterator[DirHandle]:
    """Open (creating) ``root/parts...`` without following a symlinked component."""
    try:
        with open_dir(root, parts, create=True) as directory:
            yield directory
    except UnsafeFileError as exc:
        raise PathNotAllowedError(f"refusing to write to {exc.shown}: {exc.reason}") from None


def _open_target(directory: DirHandle, name: str, flags: int, mode: int = 0o644) -> int:
    """Open ``name`` for writing: a regular file only (no symlink followed, no blocking on a FIFO)."""
    try:
        return directory.open_regular(name, flags, mode)
    except UnsafeFileError as exc:
        raise PathNotAllowedError(f"refusing to write to {exc.shown}: {exc.reason}") from None


# --------------------------------------------------------------------------------------------------------------
# Locking
# --------------------------------------------------------------------------------------------------------------


@contextmanager
def _locked(fd: int) -> Iterator[None]:
    """Hold an exclusive OS lock on the open file ``fd`` (blocks until it is free)."""
    if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
        import msvcrt

        position = os.lseek(fd, 0, os.SEEK_CUR)
        os.lseek(fd, _WINDOWS_LOCK_OFFSET, os.SEEK_SET)
        while True:
            try:
                msvcrt.locking(fd, msvcrt.LK_LOCK, 1)  # retries for ~10 s, then raises
                break
            except OSError:
                continue
        try:
            os.lseek(fd, position, os.SEEK_SET)
            yield
        finally:
            os.lseek(fd, _WINDOWS_LOCK_OFFSET, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
    else:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _scan(fd: int, size: int) -> tuple[int, bytes]:
    """Newline count of the first ``size`` bytes of ``fd`` and its last two bytes."""
    count = 0
    tail = b""
    offset = 0
    while offset < size:
        chunk = _read_at(fd, offset, size)
        if not chunk:
            break
        count += chunk.count(b"\n")
        tail = (tail + chunk)[-2:]
        offset += len(chunk)
    return count, tail


def _read_at(fd: int, offset: int, size: int) -> bytes:
    if hasattr(os, "pread"):
        return os.pread(fd, min(1 << 20, size - offset), offset)
    os.lseek(fd, offset, os.SEEK_SET)  # pragma: no cover - platforms without pread
    return os.read(fd, min(1 << 20, size - offset))


# --------------------------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------------------------


def append_note(
    workspace: str | os.PathLike[str],
    text: str,
    target: Target = "daily",
    *,
    now: datetime | None = None,
    fsync: bool = True,
    max_note_chars: int | None = None,
    max_file_bytes: int | None = None,
) -> WriteResult:
    """Append ``text`` to today's daily note (``memory/YYYY-MM-DD.md``) or to ``MEMORY.md``.

    Never overwrites or truncates. A new daily file starts with a ``# YYYY-MM-DD`` heading. The note is separated
    from earlier content by a blank line and always ends with a newline, in the file's own encoding (UTF-8 for a
    new file). For ``long_term`` an existing ``MEMORY.md`` (else ``memory.md``) is used, else ``MEMORY.md`` is
    created. Safe against concurrent appends from other threads and processes. Raises :class:`InvalidNoteError`
    for an empty note or unknown target, :class:`NoteTooLargeError` for a note over ``max_note_chars`` characters
    or one that would take the file past ``max_file_bytes``, :class:`NoteEncodingError` for a note the file's
    legacy encoding cannot hold, :class:`PathNotAllowedError` for a symlinked target or parent,
    :class:`WorkspaceError` for a missing workspace. A refused note leaves the file as it was.
    """
    if target not in ("daily", "long_term"):
        raise InvalidNoteError(f"unknown target {target!r}; use 'daily' or 'long_term'")
    note = _clean_text(text)
    if max_note_chars is not None and len(note) > max_note_chars:
        raise NoteTooLargeError(f"the note is {len(note):,} characters, over the {max_note_chars:,}-character limit "
                                "(write.max_note_chars); nothing was written. Write a shorter note, or split it")
    root = _workspace_root(workspace)
    stamp = _local(now)
    if max_file_bytes is not None and len((f"# {stamp:%Y-%m-%d}\n\n" + note + "\n").encode("utf-8")) > max_file_bytes:
        raise NoteTooLargeError(f"the note is {len(note.encode('utf-8')):,} bytes, past the {max_file_bytes:,}-byte "
                                "limit of the files the index reads (sync.max_file_bytes); nothing was written. "
                                "Write a shorter note, or raise sync.max_file_bytes")
    parts: tuple[str, ...] = (MEMORY_DIR,) if target == "daily" else ()
    with _open_dir(root, parts) as directory:
        if target == "daily":
            name = f"{stamp:%Y-%m-%d}.md"
            heading = f"# {stamp:%Y-%m-%d}\n\n"
        else:
            name = next((n for n in LONG_TERM_NAMES if directory.exists(n)), LONG_TERM_NAMES[0])
            heading = ""
        fd = _open_target(directory, name, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            with _locked(fd):
                # Read the current end of the file under the lock (the append descriptor is write-only).
                size = os.fstat(fd).st_size
                lines_before, tail, codec = _scan_via(directory, name, size)
                if size == 0:
                    prefix = heading
                elif not tail.endswith("\n"):
                    prefix = "\n\n"  # finish the last line, then a blank line
                elif tail != "\n\n":
                    prefix = "\n"  # a blank line between notes
                else:
                    prefix = ""
                start = lines_before + prefix.count("\n") + 1
                try:
                    payload = (prefix + note + "\n").encode(codec)
                except UnicodeEncodeError as exc:
                    bad = exc.object[exc.start]
                    raise NoteEncodingError(
                        f"{directory.show(name)} is written in {codec}, which cannot hold {bad!r} (U+{ord(bad):04X}, "
                        f"at position {max(0, exc.start - len(prefix))} of the note); nothing was written, so the "
                        "file stays in one encoding. Write the note without such characters, or convert the file "
                        "to UTF-8 first") from None
                if max_file_bytes is not None and size + len(payload) > max_file_bytes:
                    raise NoteTooLargeError(
                        f"{directory.show(name)} would grow to {size + len(payload):,} bytes, past the "
                        f"{max_file_bytes:,}-byte limit of the files the index reads (sync.max_file_bytes), and the "
                        "whole file would drop out of search; nothing was written. Write a shorter note"
                        + (", or to the daily note (target='daily')" if target == "long_term" else "")
                        + ", or raise sync.max_file_bytes")
                try:
                    _write_all(fd, payload)
                    if fsync:
                        os.fsync(fd)
                except OSError as exc:  # full disk, I/O error: take back what part of the note was written
                    with suppress(OSError):
                        os.ftruncate(fd, size)
                    raise MemoryWriteError(exc.errno, f"cannot append to {directory.show(name)}: "
                                           f"{exc.strerror or exc}") from None
        finally:
            os.close(fd)
        end = start + note.count("\n")
        return WriteResult(path=directory.path / name, start_line=start, end_line=end)


# A file that starts with a UTF-16/32 byte-order mark is appended to in its own encoding (UTF-8 bytes
# would turn the note into noise when the file is read).
_WIDE_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


def _own_codec(fd: int) -> str:
    """The codec to append to a file without a UTF-16/32 byte-order mark in: the encoding the index and
    ``memory_get`` read it in (:class:`~clawmem_core.safe_fs.LineReader`), so UTF-8 unless the file is in a legacy
    encoding such as cp1252 or GB18030 (ASCII-compatible: a newline is one ``\\n`` byte, as the line count
    assumes)."""
    reader = LineReader(fd)
    if reader.binary or reader.encoding.replace("_", "-").lower() in ("utf-8", "utf-8-sig", "utf8", "ascii"):
        return "utf-8"
    return reader.encoding


def _scan_via(directory: DirHandle, name: str, size: int) -> tuple[int, str, str]:
    """The file's line count, its last two characters and the codec to append in."""
    if size == 0:
        return 0, "", "utf-8"
    fd = _open_target(directory, name, os.O_RDONLY)
    try:
        head = _read_at(fd, 0, min(size, 4))
        codec = next((c for bom, c in _WIDE_BOMS if head.startswith(bom)), None) if bom_encoding(head) else None
        if codec is None:
            count, tail = _scan(fd, size)
            return count, tail.decode("latin-1"), _own_codec(fd)
        decoder = codecs.getincrementaldecoder(codec)(errors="replace")
        count, last, offset = 0, "", len(next(bom for bom, c in _WIDE_BOMS if c == codec))
        while offset < size:
            chunk = _read_at(fd, offset, size)
            if not chunk:
                break
            text = decoder.decode(chunk)
            count += text.count("\n")
            last = (last + text)[-2:]
            offset += len(chunk)
        return count, last, codec
    finally:
        os.close(fd)


def archive_session(
    workspace: str | os.PathLike[str],
    messages_text: str,
    slug: str | None = None,
    now: datetime | None = None,
    *,
    metadata: Mapping[str, str] | None = None,
) -> WriteResult:
    """Save a conversation to a new ``memory/YYYY-MM-DD-<slug>.md`` file and return where it went.

    The slug is sanitised to ``[a-z0-9-]``; when none is left, the time ``HHMMSS`` is used. An existing file is
    never replaced: ``-2``, ``-3``… is appended instead. ``metadata`` (e.g. session key, id, source) is listed
    under the title. Returned lines cover the whole file.
    """
    body = _clean_text(messages_text)
    root = _workspace_root(workspace)
    stamp = _local(now)
    base = f"{stamp:%Y-%m-%d}-{sanitize_slug(slug) or f'{stamp:%H%M%S}'}"
    header = [f"# Session: {stamp:%Y-%m-%d %H:%M:%S}", ""]
    if metadata:
        header += [f"- **{key}**: {value}" for key, value in metadata.items()] + [""]
    header += ["## Conversation Summary", ""]
    content = "\n".join(header) + "\n" + body + "\n"
    with _open_dir(root, (MEMORY_DIR,)) as directory:
        for attempt in range(1, 10_000):
            name = f"{base}.md" if attempt == 1 else f"{base}-{attempt}.md"
            try:
                fd = _open_target(directory, name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                continue
            try:
                _write_all(fd, content.encode("utf-8"))
                os.fsync(fd)
            except OSError as exc:  # the archive is a new file of ours: a partial one is removed
                with suppress(OSError):
                    os.unlink(name, dir_fd=directory.fd) if directory.fd is not None else os.unlink(directory.path / name)
                raise MemoryWriteError(exc.errno, f"cannot write {directory.show(name)}: "
                                       f"{exc.strerror or exc}") from None
            finally:
                os.close(fd)
            return WriteResult(path=directory.path / name, start_line=1, end_line=content.count("\n"))
    raise FileExistsError(f"no free archive name for {base}")  # pragma: no cover


def _relative_parts(relpath: str) -> tuple[str, ...]:
    parts = tuple(relpath.split("/"))
    if not parts or parts[0] != MEMORY_DIR or len(parts) < 2:
        raise PathNotAllowedError(f"refusing to write outside memory/: {relpath!r}")
    for part in parts:
        if part in ("", ".", "..") or "\\" in part or "\x00" in part:
            raise PathNotAllowedError(f"refusing an unsafe path component {part!r} in {relpath!r}")
    if not parts[-1].endswith(".md"):
        raise PathNotAllowedError(f"refusing to write a file that is not .md: {relpath!r}")
    return parts


def replace_file(workspace: str | os.PathLike[str], relpath: str, content: str) -> Path:
    """Write ``content`` to ``<workspace>/<relpath>`` (a ``memory/**/*.md`` path with ``/`` separators), creating
    missing folders and replacing the file if it exists. The write is atomic (a temporary file in the same folder,
    then a rename), and no symlink is followed: a symlinked folder raises :class:`PathNotAllowedError`, a symlink at
    the file's name is replaced by the file rather than written through."""
    parts = _relative_parts(relpath)
    root = _workspace_root(workspace)
    data = content.encode("utf-8")
    with _open_dir(root, parts[:-1]) as directory:
        name = parts[-1]
        for attempt in range(100):
            temp = f".{name[:80]}.{os.getpid()}.{attempt}.tmp"
            try:
                fd = _open_target(directory, temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            except FileExistsError:
                continue
            break
        else:  # pragma: no cover
            raise FileExistsError(f"no free temporary name next to {relpath}")
        try:
            try:
                _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            if directory.fd is not None:
                os.replace(temp, name, src_dir_fd=directory.fd, dst_dir_fd=directory.fd)
            else:
                if os.path.islink(directory.path / name):
                    raise PathNotAllowedError(f"refusing to replace a symlink: {relpath}")
                os.replace(directory.path / temp, directory.path / name)
        except BaseException:
            try:
                if directory.fd is not None:
                    os.unlink(temp, dir_fd=directory.fd)
                else:
                    os.unlink(directory.path / temp)
            except OSError:
                pass
            raise
        return directory.path / name


def remove_file(workspace: str | os.PathLike[str], relpath: str) -> bool:
    """Delete the regular file ``<workspace>/<relpath>`` (a ``memory/**/*.md`` path); ``False`` when it does not
    exist. Never follows a symlink: a symlinked folder raises :class:`PathNotAllowedError`, and a name that is not
    a regular file (a symlink, a FIFO, a folder) is left alone and raises it too."""
    import stat as _stat

    parts = _relative_parts(relpath)
    root = _workspace_root(workspace)
    try:
        with open_dir(root, parts[:-1]) as directory:
            name = parts[-1]
            try:
                if directory.fd is not None:
                    st = os.stat(name, dir_fd=directory.fd, follow_symlinks=False)
                else:
                    st = os.lstat(directory.path / name)
            except FileNotFoundError:
                return False
            if not _stat.S_ISREG(st.st_mode):
                raise PathNotAllowedError(f"refusing to delete something that is not a regular file: {relpath}")
            if directory.fd is not None:
                os.unlink(name, dir_fd=directory.fd)
            else:
                os.unlink(directory.path / name)
            return True
    except FileNotFoundError:
        return False
