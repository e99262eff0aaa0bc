"""Safe file-system access: every reader and writer of memory files opens through here.

A file is opened below a trusted root directory one component at a time, each directory with
``O_NOFOLLOW | O_DIRECTORY`` relative to the descriptor of its parent, and the file itself with
``O_NOFOLLOW | O_NONBLOCK``; the open descriptor must be a regular file. So a symlink swapped in
for any component between a check and the open is refused, never followed, and a FIFO never
blocks. Reads are bounded: :func:`read_bounded` reads at most a limit, :class:`LineReader`
streams the lines asked for. :func:`decode` turns file bytes into text the same way for the sync
and for ``memory_get`` (BOMs, UTF-8, a detected legacy encoding; ``None`` for binary content).

On platforms without ``dir_fd`` support (Windows) the same rules are checked by path: components
are ``lstat``-ed before the open and the opened file is compared with the path afterwards.
"""

from __future__ import annotations

import codecs
import errno
import os
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

from .errors import PathNotAllowedError

__all__ = [
    "UnsafeFileError",
    "FileTooLargeError",
    "read_listed_file",
    "DirHandle",
    "open_dir",
    "open_regular",
    "read_bounded",
    "decode",
    "detect_encoding",
    "LineReader",
    "LineSlice",
    "read_lines",
    "BINARY_SNIFF_BYTES",
]

_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_BINARY = getattr(os, "O_BINARY", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
#: Whether directories can be walked by descriptor (POSIX); elsewhere paths are checked instead.
USE_DIR_FD = os.name == "posix" and bool(_O_NOFOLLOW and _O_DIRECTORY) and os.open in os.supports_dir_fd
#: A NUL byte within this many leading bytes marks a file as binary (UTF-16/32 with a BOM excepted).
BINARY_SNIFF_BYTES = 8192
_BLOCK = 1 << 16



class UnsafeFileError(PathNotAllowedError):
    """A file that must not be opened: a symlink, not a regular file, a name too long, no permission.

    ``reason`` is a short phrase (``"symlink"``, ``"not a regular file"``, ``"name too long"``,
    ``"permission denied"``...); the message names only the path as given, never an absolute path
    the caller did not pass."""

    def __init__(self, shown: str, reason: str) -> None:
        super().__init__(f"{shown}: {reason}")
        self.shown = shown
        self.reason = reason


class FileTooLargeError(UnsafeFileError):
    """A file over the size limit of a read (nothing of it was read)."""


def _reason(exc: OSError) -> str | None:
    """The true reason an open failed, or None when the file is simply missing."""
    code = exc.errno
    if code in (errno.ENOENT, errno.ENOTDIR):
        return None
    if code == errno.ELOOP:
        return "symlink"
    if code == errno.ENAMETOOLONG:
        return "name too long"
    if code in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if code in (errno.ENXIO, errno.EISDIR, errno.ENODEV, errno.EOPNOTSUPP, getattr(errno, "ENOTSUP", -1)):
        return "not a regular file"
    return exc.strerror or type(exc).__name__


def _is_symlink_at(name: str, dir_fd: int | None, path: Path) -> bool:
    try:
        if dir_fd is not None:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        else:
            st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISLNK(st.st_mode)


def _fail(exc: OSError, name: str, dir_fd: int | None, path: Path, shown: str) -> OSError | UnsafeFileError:
    """What to raise for a failed open: :class:`UnsafeFileError` with its true reason, or the
    ``FileNotFoundError`` of a missing file."""
    if exc.errno in (errno.ENOTDIR, errno.ELOOP) and _is_symlink_at(name, dir_fd, path):
        return UnsafeFileError(shown, "symlink")
    why = _reason(exc)
    if why is None:
        return FileNotFoundError(errno.ENOENT, "no such file", shown)
    return UnsafeFileError(shown, why)


class DirHandle:
    """An open directory to create or open files in: an ``O_NOFOLLOW`` descriptor on POSIX, a
    checked path elsewhere."""

    def __init__(self, path: Path, fd: int | None, shown: str) -> None:
        self.path = path
        self.fd = fd
        self.shown = shown

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def show(self, name: str) -> str:
        """How ``name`` in this directory is named in messages."""
        return f"{self.shown}/{name}" if self.shown else name

    def open_regular(self, name: str, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
        """Open ``name`` in this directory without following a symlink or blocking on a FIFO;
        the descriptor returned is a regular file. Raises :class:`UnsafeFileError`, or
        ``FileNotFoundError`` when the file is missing (and ``O_CREAT`` is not given)."""
        flags |= _O_NOFOLLOW | _O_NONBLOCK | _O_BINARY | _O_CLOEXEC
        shown = self.show(name)
        path = self.path / name
        if self.fd is None and _is_symlink_at(name, None, path):
            raise UnsafeFileError(shown, "symlink")
        try:
            fd = os.open(name, flags, mode, dir_fd=self.fd) if self.fd is not None else os.open(path, flags, mode)
        except OSError as exc:
            if exc.errno == errno.EEXIST:
                raise
            raise _fail(exc, name, self.fd, path, shown) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise UnsafeFileError(shown, "not a regular file")
            if self.fd is None:  # checked by path: the file opened must be the one at the path
                after = os.lstat(path)
                if (after.st_dev, after.st_ino) != (st.st_dev, st.st_ino):
                    raise UnsafeFileError(shown, "replaced while opening")
        except BaseException:
            os.close(fd)
            raise
        return fd

    def exists(self, name: str) -> bool:
        try:
            if self.fd is not None:
                os.stat(name, dir_fd=self.fd, follow_symlinks=False)
            else:
                os.lstat(self.path / name)
        except FileNotFoundError:
            return False
        except OSError:
            return True  # something is there, even if it cannot be looked at
        return True


@contextmanager
def open_dir(root: str | os.PathLike[str], parts: tuple[str, ...] | list[str] = (), *,
             create: bool = False, shown: str = "") -> Iterator[DirHandle]:
    """Open ``root/parts...`` refusing any symlinked component below ``root`` (``root`` itself is
    trusted), creating missing directories when ``create``. ``shown`` is how ``root`` is named in
    errors (``""``: only the parts are named). Raises :class:`UnsafeFileError`, or
    ``FileNotFoundError`` when a directory is missing."""
    root_path = Path(root)
    path = root_path
    names: list[str] = [shown] if shown else []
    if not USE_DIR_FD:
        for part in parts:
            path = path / part
            names.append(part)
            if _is_symlink_at(part, None, path):
                raise UnsafeFileError("/".join(names), "symlink")
            if create:
                try:
                    path.mkdir(exist_ok=True)
                except OSError as exc:
                    raise _fail(exc, part, None, path, "/".join(names)) from None
        if parts and not path.is_dir():
            raise FileNotFoundError(errno.ENOENT, "no such directory", "/".join(names))
        yield DirHandle(path, None, "/".join(names))
        return
    try:
        fd = os.open(root_path, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
    except OSError as exc:
        why = _reason(exc)
        if why is None:
            raise FileNotFoundError(errno.ENOENT, "no such directory", shown or ".") from None
        raise UnsafeFileError(shown or ".", why) from None
    try:
        for part in parts:
            path = path / part
            names.append(part)
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
                except OSError as exc:
                    raise _fail(exc, part, fd, path, "/".join(names)) from None
            try:
                child = os.open(part, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC, dir_fd=fd)
            except OSError as exc:
                raise _fail(exc, part, fd, path, "/".join(names)) from None
            os.close(fd)
            fd = child
        handle = DirHandle(path, fd, "/".join(names))
        fd = -1
        try:
            yield handle
        finally:
            handle.close()
    finally:
        if fd >= 0:
            os.close(fd)


def open_regular(root: str | os.PathLike[str], parts: tuple[str, ...] | list[str], flags: int = os.O_RDONLY, *,
                 shown: str = "") -> int:
    """Open the regular file ``root/parts...`` (walked component by component, nothing below
    ``root`` followed if it is a symlink, no blocking on a FIFO) and return its descriptor.
    Raises :class:`UnsafeFileError` with the true reason, or ``FileNotFoundError``."""
    if not parts:
        raise UnsafeFileError(shown or ".", "not a regular file")
    *dirs, name = parts
    with open_dir(root, tuple(dirs), shown=shown) as directory:
        return directory.open_regular(name, flags)


def read_bounded(fd: int, limit: int) -> bytes:
    """At most ``limit + 1`` bytes from ``fd`` (one more than the limit shows the file is over it)."""
    chunks: list[bytes] = []
    left = limit + 1
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# --------------------------------------------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------------------------------------------

_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),  # before UTF-16 LE: it starts with the same two bytes
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
_SAMPLE = 1 << 16
_NEAR = 0.1  # chaos within this of the best counts as an equally good fit


def bom_encoding(head: bytes) -> str | None:
    """The codec named by a byte-order mark at the start of ``head`` (``utf-8-sig``, ``utf-16``,
    ``utf-32``), else None."""
    for bom, name in _BOMS:
        if head.startswith(bom):
            return name
    return None


def detect_encoding(sample: bytes) -> str | None:
    """The legacy encoding ``charset-normalizer`` finds for ``sample`` (bytes that are not valid
    UTF-8), or None when it looks binary. Short Western samples fit several code pages about
    equally well; among the near-best, Windows-1252 (the commonest, a superset of Latin-1) wins."""
    from charset_normalizer import from_bytes

    matches = list(from_bytes(sample))
    if not matches:
        return None
    best = matches[0]
    for match in matches:
        if match.chaos <= best.chaos + _NEAR and (match.encoding == "cp1252" or "cp1252" in match.could_be_from_charset):
            return "cp1252"
    if best.encoding.replace("-", "_") in ("utf_8", "ascii"):
        return "cp1252"  # the sample alone looked like UTF-8: the commonest legacy encoding
    return best.encoding


def _sample_at(read_at: Callable[[int, int], bytes], bad: int) -> bytes:
    """What encoding detection looks at: the start of the file and the bytes around the first one
    that is not UTF-8 (the same bytes for the sync and for ``memory_get``)."""
    if bad < _SAMPLE:
        return read_at(0, 2 * _SAMPLE)
    return read_at(0, _SAMPLE) + b"\n" + read_at(bad - _SAMPLE // 2, _SAMPLE)


def decode(data: bytes) -> str | None:
    """Text of a memory file: by its BOM (UTF-8/16/32), else UTF-8, else a detected legacy
    encoding (``cp1252``, ``gb18030``...); ``None`` for binary content (a NUL byte near the start)."""
    codec = bom_encoding(data[:4])
    if codec is not None:
        return data.decode(codec, errors="replace")
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        legacy = detect_encoding(_sample_at(lambda off, n: data[off : off + n], exc.start))
    if legacy is None:
        return None
    return data.decode(legacy, errors="replace")


def _pread(fd: int, offset: int, size: int) -> bytes:
    if hasattr(os, "pread"):
        return os.pread(fd, size, offset)
    os.lseek(fd, offset, os.SEEK_SET)  # pragma: no cover - platforms without pread
    return os.read(fd, size)


class LineReader:
    """The lines of a memory file read from an open descriptor in bounded memory, decoded as
    :func:`decode` decodes the whole file (a first pass checks the encoding and counts the lines,
    a second streams the lines asked for). Lines are split on ``\\n``."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.binary = False
        self.encoding = "utf-8"
        #: Lines in the file (a final newline does not start another line), and whether it ends with one.
        self.total = 0
        self.final_newline = False
        head = _pread(fd, 0, BINARY_SNIFF_BYTES)
        codec = bom_encoding(head[:4])
        if codec is not None:
            self.encoding = codec
        elif b"\x00" in head:
            self.binary = True
            return
        if not self._survey():
            self._survey()  # again in the legacy encoding found

    def _blocks(self) -> Iterator[bytes]:
        offset = 0
        while True:
            block = _pread(self.fd, offset, _BLOCK)
            yield block
            if not block:
                return
            offset += len(block)

    def _survey(self) -> bool:
        """Count the lines; False when the file turned out not to be UTF-8 (the encoding is then
        the detected legacy one, or the file is binary)."""
        strict = self.encoding == "utf-8"
        decoder = codecs.getincrementaldecoder(self.encoding)(errors="strict" if strict else "replace")
        newlines = 0
        last = ""
        offset = 0
        for block in self._blocks():
            pending = len(decoder.getstate()[0]) if strict else 0
            try:
                text = decoder.decode(block, final=not block)
            except UnicodeDecodeError as exc:
                bad = max(0, offset - pending + exc.start)
                legacy = detect_encoding(_sample_at(lambda off, n: _pread(self.fd, max(0, off), n), bad))
                if legacy is None:
                    self.binary = True
                    return True
                self.encoding = legacy
                return False
            if text:
                newlines += text.count("\n")
                last = text[-1]
            offset += len(block)
        self.final_newline = last == "\n"
        self.total = newlines + (1 if last and last != "\n" else 0)
        return True

    def lines(self) -> Iterator[str]:
        """Every line of the file in order, the empty piece after a final newline included
        (nothing for binary content)."""
        if self.binary:
            return
        decoder = codecs.getincrementaldecoder(self.encoding)(errors="replace")
        rest = ""
        for block in self._blocks():
            text = decoder.decode(block, final=not block)
            if not text:
                continue
            parts = (rest + text).split("\n")
            rest = parts.pop()
            yield from parts
        yield rest


class LineSlice(NamedTuple):
    """Lines ``first``..``last`` of a file (1-based) and the ``total`` lines in it; ``truncated``
    when the text was cut at the character cap, with ``next_from`` the first line not (wholly)
    returned (None when none follows)."""

    text: str
    first: int
    last: int
    total: int
    truncated: bool
    next_from: int | None
    binary: bool


def read_lines(fd: int, start: int = 1, count: int | None = None, max_chars: int = 20_000,
               whole: bool = False) -> LineSlice:
    """Lines ``start``.. (``count`` of them, or to the end) of the open file ``fd``, at most
    ``max_chars`` characters of them, in bounded memory. ``whole``: the file's text as it is (a
    final newline kept) when it fits the cap. One line longer than the cap is cut, and reading
    goes on after it."""
    reader = LineReader(fd)
    if reader.binary:
        return LineSlice("", start, start - 1, 0, False, None, True)
    total = reader.total
    stop = total if count is None else min(total, start + count - 1)
    out: list[str] = []
    size = 0
    truncated = False
    next_from: int | None = None
    if start <= stop:
        for n, line in enumerate(reader.lines(), start=1):
            if n < start:
                continue
            if n > stop:
                break
            cost = len(line) + (1 if out else 0)
            if size + cost > max_chars:
                truncated = True
                if not out:  # one line longer than the cap: its start, then on after it
                    out.append(line[:max_chars])
                    next_from = n + 1 if n < stop else None
                else:
                    next_from = n
                break
            out.append(line)
            size += cost
    text = "\n".join(out)
    if whole and not truncated and reader.final_newline and out:
        text += "\n"
    return LineSlice(text, start, start + len(out) - 1, total, truncated, next_from, False)


def read_listed_file(abs_path: str, roots: list[str], limit: int, *, shown: str = "") -> bytes:
    """The bytes of a file the sync listed, opened safely from the deepest of ``roots`` that holds
    it (nothing below that root followed if it is a symlink, no FIFO, no device). Raises
    :class:`UnsafeFileError` (also when the file is larger than ``limit`` bytes, without reading
    it) or ``FileNotFoundError``."""
    shown = shown or os.path.basename(abs_path)
    root = max((r for r in roots if abs_path.startswith(r.rstrip(os.sep) + os.sep)), key=len, default=None)
    if root is None:
        raise UnsafeFileError(shown, "outside the memory roots")
    parts = abs_path[len(root.rstrip(os.sep)) + 1 :].split(os.sep)
    fd = open_regular(root, parts, shown=shown if len(parts) == 1 else "")
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise FileTooLargeError(shown, f"too large ({size} bytes, over the {limit}-byte limit)")
        data = read_bounded(fd, limit)
        if len(data) > limit:  # grew while being read
            raise FileTooLargeError(shown, f"too large (over the {limit}-byte limit)")
        return data
    finally:
        os.close(fd)
