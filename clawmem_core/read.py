"""``read`` / ``memory_get``: safe line reads from memory files (SPEC 7).

Allowed: ``MEMORY.md``, ``memory.md``, ``memory/**/*.md`` and ``.md`` files inside extra paths.
Refused, with :class:`PathNotAllowedError` and without reading anything: other files, ``..``
escapes, absolute paths outside memory, NUL bytes, symlinked files and symlinked directories
anywhere between the memory root and the file (checked component by component and by real path).
"""

from __future__ import annotations

import errno
import math
import os
import stat
from pathlib import Path

from .discovery import BAD_NAME_REASON, ROOT_FILES, display_path, is_valid_name, normalize_extra_paths, printable_name
from .errors import InvalidQueryError, PathNotAllowedError
from .results import ReadResult
from .safe_fs import UnsafeFileError, open_regular, read_lines

MAX_PATH_CHARS = 4096
#: Characters ``memory_get`` returns at most by default (``read.max_chars``).
DEFAULT_MAX_CHARS = 20_000


def _line_arg(value: object, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise InvalidQueryError(f"{name} must be an integer, got {value!r}")
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise InvalidQueryError(f"{name} must be an integer, got {value!r}")
        value = int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        try:  # "²" is a digit int() refuses; 5,000 digits are past int()'s limit
            value = int(value)
        except ValueError:
            raise InvalidQueryError(f"{name} must be an integer, got {value[:50]!r}") from None
    if not isinstance(value, int):
        raise InvalidQueryError(f"{name} must be an integer, got {value!r}")
    return value


def _refuse(path: str, why: str) -> PathNotAllowedError:
    shown = path if len(path) <= 200 else path[:200] + "..."
    return PathNotAllowedError(f"path not allowed: {shown!r} ({why}); memory_get reads only MEMORY.md, "
                               "memory.md, memory/**/*.md and .md files in extra paths")


def _symlink_between(root: Path, target: Path) -> str | None:
    """Why ``target`` may not be read below ``root``: ``"symlink"`` when a component from ``root``
    (exclusive) down to it is a symlink, another true reason (``"name too long"``,
    ``"permission denied"``) when a component cannot be looked at; None when nothing is in the way."""
    rel = target.relative_to(root)
    current = root
    for part in rel.parts:
        current = current / part
        try:
            if stat.S_ISLNK(os.lstat(current).st_mode):
                return "symlink"
        except (FileNotFoundError, NotADirectoryError):
            return None  # the rest does not exist: nothing to follow
        except OSError as exc:
            if exc.errno == errno.ENAMETOOLONG:
                return "name too long"
            if exc.errno in (errno.EACCES, errno.EPERM):
                return "permission denied"
            return exc.strerror or type(exc).__name__
    return None


def _path_text(path: object) -> str:
    """``path`` stripped, after the checks every path argument gets: a non-empty string with no
    NUL byte and at most :data:`MAX_PATH_CHARS` characters."""
    if not isinstance(path, str):
        raise PathNotAllowedError(f"path must be a string, got {type(path).__name__}")
    raw = path.strip()
    if not raw:
        raise PathNotAllowedError("path required")
    if "\x00" in raw:
        raise _refuse(raw.replace("\x00", "\\0"), "NUL byte")
    if len(raw) > MAX_PATH_CHARS:
        raise _refuse(raw, "too long")
    return raw


def _locate(workspace: Path, extra_paths: list[str], path: object) -> tuple[Path, Path, str]:
    """Check ``path`` against the memory rules; return ``(root, absolute path, display path)``:
    nothing below ``root`` may be a symlink."""
    raw = _path_text(path)
    if not is_valid_name(raw):  # lone surrogates: such a file is never indexed, nor echoed back
        raise _refuse(printable_name(raw), BAD_NAME_REASON)
    workspace = Path(os.path.abspath(workspace))
    candidate = Path(raw).expanduser()
    abs_path = Path(os.path.normpath(candidate if candidate.is_absolute() else workspace / candidate))
    if not abs_path.name.endswith(".md"):
        raise _refuse(raw, "not a .md file")

    root: Path | None = None
    rel = os.path.relpath(abs_path, workspace).replace(os.sep, "/")
    if not rel.startswith("../") and rel != ".." and not os.path.isabs(rel):
        if rel in ROOT_FILES:
            root = workspace
        elif rel.startswith("memory/"):
            root = workspace
    if root is None:
        for extra in normalize_extra_paths(workspace, extra_paths):
            try:
                if os.path.islink(extra):
                    continue
                if extra.is_dir() and (abs_path == extra or str(abs_path).startswith(str(extra) + os.sep)):
                    root = extra
                    break
            except OSError:
                continue
            if abs_path == extra and extra.name.endswith(".md"):
                root = extra.parent
                break
    if root is None:
        raise _refuse(raw, "outside memory")
    why = _symlink_between(root, abs_path)
    if why is not None:
        raise _refuse(raw, why)
    real_root = os.path.realpath(root)
    real = os.path.realpath(abs_path)
    if real != real_root and not real.startswith(real_root.rstrip(os.sep) + os.sep):
        raise _refuse(raw, "resolves outside memory")
    return root, abs_path, display_path(workspace, abs_path)


def resolve_memory_path(workspace: Path, extra_paths: list[str], path: object) -> tuple[Path, str]:
    """Check ``path`` against the memory rules; return ``(absolute path, display path)``."""
    _, abs_path, shown = _locate(workspace, extra_paths, path)
    return abs_path, shown


def read_memory_file(
    workspace: Path,
    extra_paths: list[str],
    path: object,
    from_line: object = None,
    lines: object = None,
    *,
    max_chars: int = DEFAULT_MAX_CHARS,
) -> ReadResult:
    """Read lines of a memory file. ``from_line`` is 1-based; both unset -> the whole file;
    past the end or a missing file -> empty text. At most ``max_chars`` characters are returned:
    a longer read is cut at a line boundary with ``truncated`` set and ``next_from`` the line to
    continue from. Only the lines asked for are decoded and kept (the file is streamed).

    The file is opened component by component from its memory root with ``O_NOFOLLOW`` directory
    descriptors, without following a symlink or blocking on a FIFO, so a directory or file
    swapped between the checks and the open is refused, never followed."""
    start_arg = _line_arg(from_line, "from_line")
    count_arg = _line_arg(lines, "lines")
    root, abs_path, shown = _locate(workspace, extra_paths, path)
    parts = abs_path.relative_to(root).parts
    try:
        fd = open_regular(root, parts)
    except FileNotFoundError:
        return ReadResult(shown, "", 1, 0, 0, missing=True)
    except UnsafeFileError as exc:
        raise _refuse(str(path), exc.reason) from None
    except OSError as exc:  # never a raw OS error, nor an absolute path, to the caller
        raise _refuse(str(path), exc.strerror or type(exc).__name__) from None
    try:
        whole = not start_arg and not count_arg
        start = 1 if whole else max(1, start_arg or 1)
        count = None if whole or not count_arg else max(1, count_arg)
        try:
            got = read_lines(fd, start, count, max(1, int(max_chars)), whole=whole)
        except OSError as exc:
            raise _refuse(str(path), exc.strerror or type(exc).__name__) from None
    finally:
        os.close(fd)
    if got.binary:
        raise _refuse(str(path), "binary content, not text")
    if not got.text and got.last < got.first:
        return ReadResult(shown, "", start, start - 1, got.total)
    return ReadResult(shown, got.text, got.first, got.last, got.total, truncated=got.truncated,
                      next_from=got.next_from)


def check_indexed_path(path: object) -> str:
    """A path as the index shows it (``MEMORY.md``, ``memory/x.md``...), checked by its text alone:
    a relative ``.md`` path without ``..``; the index is then asked for exactly that path."""
    raw = _path_text(path)
    if not is_valid_name(raw):  # lone surrogates: never an indexed path, and no driver can send them
        raise _refuse(printable_name(raw), BAD_NAME_REASON)
    if not raw.endswith(".md"):
        raise _refuse(raw, "not a .md file")
    parts = raw.replace("\\", "/").split("/")
    if raw.startswith("/") or any(p in ("..",) for p in parts) or (len(raw) > 1 and raw[1] == ":"):
        raise _refuse(raw, "outside memory")
    return "/".join(p for p in parts if p not in ("", "."))


def read_indexed_copy(shown: str, text: str | None, from_line: object = None, lines: object = None, *,
                      max_chars: int = DEFAULT_MAX_CHARS) -> ReadResult:
    """:func:`read_memory_file` over the index's copy of a file (``None``: not indexed), with the
    same character cap."""
    start_arg = _line_arg(from_line, "from_line")
    count_arg = _line_arg(lines, "lines")
    if text is None:
        return ReadResult(shown, "", 1, 0, 0, missing=True, from_index=True)
    got = slice_lines(shown, text, start_arg, count_arg)
    out, last, truncated = got.text, got.to_line, False
    if len(out) > max_chars:
        kept = out[: max(1, int(max_chars))].split("\n")
        if len(kept) > 1:
            kept.pop()  # cut at a line boundary
        out, last, truncated = "\n".join(kept), got.from_line + len(kept) - 1, True
    return ReadResult(got.path, out, got.from_line, last, got.total_lines, truncated=truncated,
                      next_from=(last + 1 if truncated and last < got.total_lines else None), from_index=True)


def slice_lines(shown: str, text: str, start_arg: int | None, count_arg: int | None) -> ReadResult:
    """Lines ``start_arg``.. (1-based, ``count_arg`` of them) of ``text``; both unset: all."""
    all_lines = text.split("\n")
    if all_lines and all_lines[-1] == "" and len(all_lines) > 1:
        all_lines.pop()  # a final newline does not start another line
    total = len(all_lines) if text else 0
    if not start_arg and not count_arg:
        return ReadResult(shown, text, 1, total, total)
    start = max(1, start_arg or 1)
    count = max(1, count_arg or total or 1)
    part = all_lines[start - 1 : start - 1 + count]
    if not part:
        return ReadResult(shown, "", start, start - 1, total)
    return ReadResult(shown, "\n".join(part), start, start + len(part) - 1, total)
