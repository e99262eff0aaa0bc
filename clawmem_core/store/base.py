"""What an index store must do. The SQLite store implements it; a server-backed store
(PostgreSQL with pgvector) can plug in here without touching sync or search."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Iterable, Sequence


@dataclass(frozen=True)
class ChunkRow:
    """A chunk as stored: ``embedding`` is ``None`` in keyword-only mode, and for a chunk whose
    vectors are those of its windows. A ``window`` row holds one window's vector for the vector side
    only (not in keyword search); it shares its chunk's path and line range."""

    id: str
    path: str
    source: str
    start_line: int
    end_line: int
    hash: str
    model: str
    text: str
    embedding: Sequence[float] | None = None
    window: bool = False
    #: Written for keyword search, its vectors still to compute (the second phase of a sync).
    pending: bool = False


@dataclass(frozen=True)
class FileRow:
    path: str
    source: str
    hash: str
    mtime: int
    size: int


@dataclass(frozen=True)
class StoreCounts:
    files: int
    chunks: int
    by_source: dict[str, tuple[int, int]]  # source -> (files, chunks)
    cache_entries: int


@dataclass(frozen=True)
class VectorCounts:
    """Chunks with their vectors (``done``) of all chunks (``total``), and the characters of the
    chunks still waiting for theirs (the work left for the ETA)."""

    done: int
    total: int
    pending_chars: int = 0

    @property
    def pending(self) -> int:
        return self.total - self.done


class Store(ABC):
    """The derived index: files, chunks, keyword and vector search, embedding cache, meta."""

    #: Whether keyword (FTS) search works in this store.
    fts_available: bool
    #: Whether vector search runs inside the database (sqlite-vec); False means NumPy in process.
    vector_extension: bool

    @abstractmethod
    def get_meta(self) -> dict[str, Any] | None:
        """The index identity written by the last full index, or ``None`` for a new index."""

    @abstractmethod
    def set_meta(self, meta: dict[str, Any]) -> None: ...

    @abstractmethod
    def file_hashes(self, source: str) -> dict[str, str]:
        """``path -> hash`` of every indexed file of ``source`` (one query)."""

    @abstractmethod
    def replace_files(self, items: list[tuple[FileRow, list[ChunkRow]]]) -> None:
        """Atomically replace files' rows and all their chunks (keyword and vector rows too)."""

    def replace_file(self, file: FileRow, chunks: list[ChunkRow]) -> None:
        """Replace one file and its chunks."""
        self.replace_files([(file, chunks)])

    @abstractmethod
    def delete_files(self, source: str, paths: Iterable[str]) -> None:
        """Remove files and their chunks."""

    @abstractmethod
    def keyword_search(self, terms: list[str], limit: int) -> list[tuple[str, float]]:
        """``(chunk id, bm25 rank)`` best first; any term may match (rarer terms weigh more)."""

    @abstractmethod
    def vector_search(self, query: Sequence[float], limit: int) -> list[tuple[str, float]]:
        """``(chunk id, cosine similarity)`` best first."""

    @abstractmethod
    def get_chunk_meta(self, ids: Iterable[str]) -> dict[str, tuple[str, str, int, int]]:
        """``id -> (path, source, start_line, end_line)`` without the text."""

    @abstractmethod
    def get_chunks(self, ids: Iterable[str]) -> dict[str, ChunkRow]:
        """Chunk rows by id (without embeddings)."""

    @abstractmethod
    def cache_get(self, provider: str, model: str, provider_key: str, hashes: list[str]) -> dict[str, list[float]]:
        """Cached vectors for chunk hashes (only non-empty vectors count)."""

    @abstractmethod
    def cache_put(self, provider: str, model: str, provider_key: str, items: dict[str, Sequence[float]]) -> None: ...

    @abstractmethod
    def cache_prune(self, max_entries: int) -> int:
        """Evict the oldest entries beyond ``max_entries``; return how many were removed."""

    @abstractmethod
    def counts(self) -> StoreCounts: ...

    @abstractmethod
    def close(self) -> None: ...
