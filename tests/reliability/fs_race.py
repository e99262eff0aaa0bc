"""A file-system race harness: swap files, directories, symlinks and FIFOs at exact points of
discovery, reading and writing, deterministically.

Points are reached through the real system calls: ``os.open`` (every open of a component, whole
path or ``dir_fd``-relative) and ``os.scandir`` (a directory listed by discovery). :class:`Races`
wraps both for the duration of a test; an action registered with :meth:`Races.at` runs once,
just before the matching call, so the code under test meets the swapped file at that moment.
Nothing else is mocked: the files, links and FIFOs are real.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

Action = Callable[[], None]


def swap_for_symlink(path: Path, target: Path) -> Action:
    """Move ``path`` aside and put a symlink to ``target`` in its place."""

    def run() -> None:
        os.rename(path, path.with_name(path.name + ".orig"))
        os.symlink(target, path, target_is_directory=target.is_dir())

    return run


def swap_for_fifo(path: Path) -> Action:
    """Move ``path`` aside (if present) and put a FIFO in its place."""

    def run() -> None:
        if os.path.lexists(path):
            os.rename(path, path.with_name(path.name + ".orig"))
        os.mkfifo(path)

    return run


class _Listing:
    """What ``os.scandir`` returns, already read (so the action runs after the listing)."""

    def __init__(self, entries: list[os.DirEntry[str]]) -> None:
        self._entries = iter(entries)

    def __iter__(self) -> Iterator[os.DirEntry[str]]:
        return self

    def __next__(self) -> os.DirEntry[str]:
        return next(self._entries)

    def __enter__(self) -> "_Listing":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def close(self) -> None:
        return None


class Races:
    """Run actions at the moment a named component is opened (``"open"``) or a named directory
    has been listed (``"listed"``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._pending: list[tuple[str, str, Action]] = []
        self.fired: list[tuple[str, str]] = []
        real_open = os.open
        real_scandir = os.scandir

        def open_hook(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
            self._fire("open", os.fspath(path))
            if dir_fd is None:
                return real_open(path, flags, mode)
            return real_open(path, flags, mode, dir_fd=dir_fd)

        def scandir_hook(path: Any = ".") -> Any:
            with real_scandir(path) as it:
                entries = list(it)
            self._fire("listed", os.fspath(path))
            return _Listing(entries)

        monkeypatch.setattr(os, "open", open_hook)
        monkeypatch.setattr(os, "scandir", scandir_hook)

    def at(self, point: str, where: str | Path, action: Action) -> "Races":
        """Run ``action`` once: just before the first open of a path with the component ``where``
        among its components (``point="open"``), or just after the directory ``where`` (a path)
        is listed (``point="listed"``)."""
        assert point in ("open", "listed")
        self._pending.append((point, os.path.abspath(where) if point == "listed" else str(where), action))
        return self

    def _fire(self, point: str, path: str) -> None:
        if not self._pending:
            return
        parts = path.replace(os.sep, "/").split("/")
        for i, (p, component, action) in enumerate(self._pending):
            hit = component in parts if p == "open" else os.path.abspath(path) == component
            if p == point and hit:
                del self._pending[i]
                self.fired.append((point, component))
                action()
                return

    @property
    def all_fired(self) -> bool:
        return not self._pending


def run_bounded(fn: Callable[[], Any], fifo: Path | None = None, timeout: float = 20.0) -> Any:
    """Run ``fn`` in a thread and return its result (or raise its exception). When it is still
    running after ``timeout`` it is blocked (on a FIFO): the FIFO is opened read-write to release
    it and the test fails."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:  # handed to the test thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        if fifo is not None and os.path.exists(fifo):
            fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # a reader and a writer: releases either side
            os.close(fd)
        thread.join(timeout)
        pytest.fail(f"blocked for {timeout:.0f} s (on a FIFO?)")
    if "error" in box:
        raise box["error"]
    return box.get("result")
