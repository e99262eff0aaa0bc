"""``memory_get``: lines of a memory file, from the workspace, or from the index's copy (on a
replica, or in a shared namespace, whose own workspace is read when the store keeps no copies)."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..config import MemoryConfig
from ..errors import PathNotAllowedError, WorkspaceError
from ..read import read_memory_file
from ..results import ReadResult
from ..store.base import Store, store_deadline
from .namespaces import SharedNamespaces


class Reader:
    """The reads of one index."""

    def __init__(self, config: MemoryConfig, workspace: Path | None, namespaces: SharedNamespaces) -> None:
        self.config = config
        self.workspace = workspace
        self.namespaces = namespaces

    def read(self, path: str, from_line: int | None = None, lines: int | None = None) -> ReadResult:
        """See :meth:`~clawmem_core.index.MemoryIndex.read`."""
        if self.workspace is None or (isinstance(path, str) and path.strip().startswith("@") and self.config.shared):
            with store_deadline(time.monotonic() + self.config.query.timeout_ms / 1000.0):  # (see search)
                return self.read_indexed(path, from_line, lines)
        return read_memory_file(self.workspace, self.config.extra_paths, path, from_line, lines,
                                max_chars=self.config.read.max_chars)

    def read_indexed(self, path: Any, from_line: Any, lines: Any) -> ReadResult:
        """``read`` from the index's copy of a file: on a replica, or in a shared namespace."""
        from ..read import check_indexed_path, read_indexed_copy
        from ..store.shared import split_shared

        shown = check_indexed_path(path)
        ns, rel = split_shared(shown)
        if ns is not None and ns not in self.config.shared:
            raise PathNotAllowedError(f"path not allowed: {shown[:200]!r} (not a shared namespace of this agent)")
        view = self.namespaces.search_store()
        got = view.file_text("memory", shown)
        if got is None and ns is not None and ns in getattr(view, "shared", {}):
            # A store that keeps no copies (SQLite: the Markdown is local): the namespace's own
            # workspace, for a file its index holds, under the same rules as any memory_get.
            return self.read_namespace_workspace(view.shared[ns], ns, rel, from_line, lines)  # type: ignore[attr-defined]
        return read_indexed_copy(shown, got[0] if got else None, from_line, lines, max_chars=self.config.read.max_chars)

    def read_namespace_workspace(self, store: Store, ns: str, rel: str, from_line: Any, lines: Any) -> ReadResult:
        from ..store.shared import shared_prefix

        shown = shared_prefix(ns) + rel
        meta = store.get_meta() or {}
        workspace = meta.get("workspace")
        if rel not in store.file_states("memory") or not isinstance(workspace, str) or not workspace:
            return ReadResult(shown, "", 1, 0, 0, missing=True)  # not in the namespace's index: nothing to read
        if not os.path.isabs(workspace) or not os.path.isdir(workspace):
            raise WorkspaceError(f"the workspace of shared namespace {ns!r} is not on this machine; its notes are "
                                 "searchable but cannot be read here")
        got = read_memory_file(Path(workspace), [], rel, from_line, lines, max_chars=self.config.read.max_chars)
        return replace(got, path=shared_prefix(ns) + got.path)
