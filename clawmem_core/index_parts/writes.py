"""Writes to the Markdown: a note appended to a daily file or ``MEMORY.md``, a conversation
archived to a new file; each indexed at once, an indexing failure reported in the result (the
write has happened: a caller must not write twice)."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..config import MemoryConfig
from ..errors import ClawmemError

if TYPE_CHECKING:
    from ..writing import WriteResult

log = logging.getLogger("clawmem")


class Writer:
    """The writes of one index. ``mark_dirty`` and ``sync`` (``sync(reason=...)``) are the
    index's."""

    def __init__(self, config: MemoryConfig, workspace: Path, mark_dirty: Callable[[], None],
                 sync: Callable[..., Any]) -> None:
        self.config = config
        self.workspace = workspace
        self._mark_dirty = mark_dirty
        self._sync = sync

    def write(self, text: str, target: str = "daily", *, now: datetime | None = None) -> "WriteResult":
        """See :meth:`~clawmem_core.index.MemoryIndex.write`."""
        from ..writing import append_note

        result = append_note(self.workspace, text, target, now=now,
                             max_note_chars=self.config.write.max_note_chars,
                             max_file_bytes=self.config.sync.max_file_bytes)
        return self.index_written(result)

    def archive_session(self, messages_text: str, slug: str | None = None, *,
                        now: datetime | None = None) -> "WriteResult":
        """See :meth:`~clawmem_core.index.MemoryIndex.archive_session`."""
        from ..writing import archive_session

        result = archive_session(self.workspace, messages_text, slug, now)
        return self.index_written(result)

    def index_written(self, result: "WriteResult") -> "WriteResult":
        """Sync after an append. The append has happened: an indexing failure (provider down, disk
        full, ...) is reported in the result, never raised, so a caller does not write twice."""
        self._mark_dirty()
        try:
            self._sync(reason="write")
        except Exception as exc:  # noqa: BLE001 - the write succeeded; its indexing is what failed
            from ..masking import mask_secrets

            error = mask_secrets(f"{type(exc).__name__}: {exc}" if not isinstance(exc, ClawmemError) else str(exc))
            log.warning("wrote %s but could not index it yet: %s", result.path, error)
            return replace(result, indexed=False, index_error=error)
        return result
