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

from .discovery import ROOT_FILES, display_path, normalize_extra_paths
from .errors import InvalidQueryError, PathNotAllowedError
from .results import ReadResult

MAX_PATH_CHARS = 4096


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
        value = int(value)
    if not isinstance(value, int):
        raise InvalidQueryError(f"{name} must be an integer, got {value!r}")
    return value


def _refuse(path: str, why: str) -> PathNotAllowedError:
    shown = path if len(path) <= 200 else path[:200] + "..."
    return PathNotAllowedError(f"path not allowed: {shown!r} ({why}); memory_get reads only MEMORY.md, "
                               "memory.md, memory/**/*.md and .md files in extra paths")


def _no_symlinks_between(root: Path, target: Path) -> bool:
    """True when no component from ``root`` (exclusive) down to ``target`` is a symlink."""
    rel = target.relative_to(root)
    current = root
    for part in rel.parts:
        current = current / part
        try:
            if stat.S_ISLNK(os.lstat(current).st_mode):
                return False
        except FileNotFoundError:
            return True  # the rest does not exist: nothing to follow
        except OSError:
            return False
    return True


def resolve_memory_path(workspace: Path, extra_paths: list[str], path: object) -> tuple[Path, str]:
    """Check ``path`` against the memory rules; return ``(absolute path, display path)``."""
    if not isinstance(path, str):
        raise PathNotAllowedError(f"path must be a string, got {type(path).__name__}")
    raw = path.strip()
    if not raw:
        raise PathNotAllowedError("path required")
    if "\x00" in raw:
        raise _refuse(raw.replace("\x00", "\\0"), "NUL byte")
    if len(raw) > MAX_PATH_CHARS:
        raise _refuse(raw, "too long")
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
            if os.path.islink(extra):
                continue
            if extra.is_dir() and (abs_path == extra or str(abs_path).startswith(str(extra) + os.sep)):
                root = extra
                break
            if abs_path == extra and extra.name.endswith(".md"):
                root = extra.parent
                break
    if root is None:
        raise _refuse(raw, "outside memory")
    if not _no_symlinks_between(root, abs_path):
        raise _refuse(raw, "symlink")
    real_root = os.path.realpath(root)
    real = os.path.realpath(abs_path)
    if real != real_root and not real.startswith(real_root.rstrip(os.sep) + os.sep):
        raise _refuse(raw, "resolves outside memory")
    return abs_path, display_path(workspace, abs_path)


def read_memory_file(
    workspace: Path,
    extra_paths: list[str],
    path: object,
    from_line: object = None,
    lines: object = None,
) -> ReadResult:
    """Read lines of a memory file. ``from_line`` is 1-based; both unset -> the whole file;
    past the end or a missing file -> empty text."""
    start_arg = _line_arg(from_line, "from_line")
    count_arg = _line_arg(lines, "lines")
    abs_path, shown = resolve_memory_path(workspace, extra_paths, path)
    try:
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        fd = os.open(abs_path, flags)
    except FileNotFoundError:
        return ReadResult(shown, "", 1, 0, 0, missing=True)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refuse(str(path), "symlink") from None
        if exc.errno in (errno.ENOTDIR,):
            return ReadResult(shown, "", 1, 0, 0, missing=True)
        raise
    try:
        # Checked before wrapping the descriptor: os.fdopen itself raises IsADirectoryError.
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _refuse(str(path), "not a regular file")
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as fh:
        text = fh.read().decode("utf-8", errors="replace")
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
