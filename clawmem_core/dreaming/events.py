"""The rows of the recall log and of the preimage store, and the protocol every store implements."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Iterable, Optional, Protocol, Sequence

__all__ = ["RecallEvent", "Preimage", "DreamStore", "SCHEMA_VERSION"]

#: Version of the dreaming tables (kept in their own meta row, apart from the index's schema).
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class RecallEvent:
    """One search hit that reached the model: which lines, how it scored, for which (masked) query."""

    agent: str
    ts: float
    path: str
    start_line: int
    end_line: int
    content_hash: str
    score: float
    rank: int
    query_hash: str
    query_text: str
    session_key: Optional[str] = None
    #: The snippet was cut (``…``): its hash covers the shown part only.
    clipped: bool = False


@dataclass(frozen=True)
class Preimage:
    """A file as it was before a promotion changed it (``content`` ``None``: it did not exist)."""

    id: int
    agent: str
    ts: float
    path: str
    content: Optional[bytes]
    reason: str


class DreamStore(Protocol):
    """Where the recall log and the preimages live (SQLite file of the index, or the shared PostgreSQL)."""

    def add_events(self, events: Sequence[RecallEvent]) -> None:
        """Insert ``events`` in one transaction."""

    def prune(self, agent: str, before_ts: float, max_rows: int) -> int:
        """Delete the agent's events older than ``before_ts`` and all but its newest ``max_rows``."""

    def events(self, agent: str, since_ts: float = 0.0) -> Iterable[RecallEvent]:
        """The agent's events recorded at or after ``since_ts``, oldest first."""

    def count_events(self, agent: str) -> int: ...

    def save_preimage(self, agent: str, path: str, content: Optional[bytes], reason: str, ts: float) -> int: ...

    def latest_preimage(self, agent: str, path: str) -> Optional[Preimage]: ...

    def drop_preimage(self, preimage_id: int) -> None: ...

    def count_preimages(self, agent: str) -> int: ...

    def consolidation_lock(self, agent: str) -> AbstractContextManager[None]:
        """Held while one consolidation of ``agent`` runs; raises ``ConsolidationBusyError`` when taken."""

    def close(self) -> None: ...
