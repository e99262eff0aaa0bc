"""The SQLite store's backend: one index file per agent, syncs serialised by a file lock."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Callable, Iterator

from ...errors import ConfigError
from ..base import StoreBackend, StoreBusyError, check_agent_id
from .schema import quarantine_index
from .store import SQLiteOptions, SQLiteStore


class SQLiteBackend(StoreBackend):
    """One SQLite index file per agent; syncs are serialised by a ``<file>.lock`` file lock."""

    def __init__(self, path: str | os.PathLike[str], *,
                 namespace_path: Callable[[str], str | os.PathLike[str]] | None = None, **options: Any) -> None:
        """``options``: those of :class:`SQLiteOptions` (``vector_enabled``, ``extension_path``,
        ``fts_tokenizer``), for every file this backend opens."""
        self.path = Path(path)
        self.location = str(self.path)
        self._options = SQLiteOptions(**options)
        self._namespace_path = namespace_path

    def open(self) -> SQLiteStore:
        return self._options.open(self.path)

    def namespace_path(self, agent_id: str) -> Path:
        """Where another agent's index file is (the same state directory and ``store.path``)."""
        if self._namespace_path is None:
            raise ConfigError("shared namespaces need to know where other agents' index files are")
        path = Path(self._namespace_path(agent_id))
        if os.path.abspath(path) == os.path.abspath(self.path):
            raise ConfigError(f"shared namespace {agent_id!r} resolves to this agent's own index file {self.path}: "
                              "store.path must contain {agent_id} for shared namespaces")
        return path

    def open_namespace(self, agent_id: str) -> SQLiteStore:
        """Another agent's index file, opened read-only (never created or written); raises
        :class:`MissingIndexError` when it does not exist yet."""
        check_agent_id(agent_id, "a shared namespace (an agent id)")
        return self._options.open(self.namespace_path(agent_id), read_only=True)

    @contextlib.contextmanager
    def process_lock(self, blocking: bool = True) -> Iterator[None]:
        from filelock import FileLock, Timeout

        lock = FileLock(str(self.path) + ".lock", timeout=600)
        try:
            lock.acquire(timeout=None if blocking else 0)
        except Timeout:
            raise StoreBusyError(f"another process is syncing the index {self.path}") from None
        try:
            yield
        finally:
            lock.release()

    @contextlib.contextmanager
    def vector_lock(self, timeout: float | None = 0.0) -> Iterator[None]:
        from filelock import FileLock, Timeout

        lock = FileLock(str(self.path) + ".vectors.lock")
        try:
            lock.acquire(timeout=-1 if timeout is None else max(0.0, timeout))
        except Timeout:
            raise StoreBusyError(f"another process is embedding the vectors of the index {self.path}") from None
        try:
            yield
        finally:
            lock.release()

    def set_aside(self, exc: BaseException) -> str:
        return quarantine_index(self.path).name
