"""What an index store must do: everything sync and search need from one agent's index, so that
a second backend (PostgreSQL with pgvector) plugs in without a branch in either of them.

Two objects: a :class:`StoreBackend` says where one agent's index lives (it opens handles on it,
holds the lock that serialises syncs across processes, and sets a damaged index aside); a
:class:`Store` is an open handle (files, chunks, keyword and vector search, embedding cache,
meta, and an atomic full rebuild).
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ContextManager, Hashable, Iterable, Iterator, Sequence

from ..errors import ConfigError, StoreError

#: The longest agent id, in UTF-8 bytes: it names a SQLite index file (``<id>.sqlite``, and
#: ``<id>.sqlite.corrupt-<time>`` when set aside, within a file name's 255 bytes) and keys every
#: PostgreSQL row (where it shares a btree entry's 2,704 bytes with the path of a file).
MAX_AGENT_ID_BYTES = 200


def check_agent_id(agent_id: object, what: str = "agent_id", *, plain: bool = True) -> str:
    """``agent_id`` when it can name an index on every store, else :class:`ConfigError`: a
    non-empty string of valid Unicode (no lone surrogate), without ``/``, ``\\`` or NUL, not
    ``.`` or ``..``, of at most :data:`MAX_AGENT_ID_BYTES` UTF-8 bytes. The same rule on SQLite and
    PostgreSQL (``MemoryIndex`` applies it whatever the store); ids are otherwise exact strings (no
    normalisation, no case folding). ``plain=False``: only what a row key needs (a non-empty string
    of valid Unicode, within the length), as the PostgreSQL backend checks its own ids."""
    if not isinstance(agent_id, str) or not agent_id or (
        plain and (any(c in agent_id for c in "/\\\x00") or agent_id in (".", ".."))
    ):
        raise ConfigError(f"{what} must be a plain name, got {agent_id!r}")
    try:
        size = len(agent_id.encode("utf-8"))
    except UnicodeEncodeError:
        raise ConfigError(f"{what} must be valid Unicode text, got {agent_id!r} (it holds a lone surrogate, "
                          "e.g. an undecodable byte of a file name)") from None
    if size > MAX_AGENT_ID_BYTES:
        raise ConfigError(f"{what} is too long: {size} bytes in UTF-8, at most {MAX_AGENT_ID_BYTES} "
                          f"({agent_id[:40]!r}...)")
    return agent_id


class StoreUnreachableError(StoreError):
    """The store's server cannot be reached or refuses connections (down, restarting, a closed
    port): a search says so by its deadline instead of waiting for a connection. ``waited``: how
    long the call waited for a pooled connection before it tried a new one (0 when the server was
    already known to be down)."""

    def __init__(self, message: str, *, waited: float = 0.0) -> None:
        super().__init__(message)
        self.waited = waited


#: When the store calls of this context must have an answer (``time.monotonic()``), or ``None``.
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("clawmem_store_deadline", default=None)


@contextlib.contextmanager
def store_deadline(deadline: float | None) -> Iterator[None]:
    """Within the block (this thread or task, and the threads it hands work to with its context,
    as ``asyncio.to_thread`` does), a store waits for a connection at most until ``deadline``
    (``time.monotonic()``) before it checks whether its server can be reached at all. An earlier
    deadline already in force is kept."""
    outer = _DEADLINE.get()
    token = _DEADLINE.set(deadline if outer is None or (deadline is not None and deadline < outer) else outer)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def wait_left(longest: float) -> float:
    """How long a store may wait now (seconds, at least 0): ``longest``, or less when the
    :func:`store_deadline` in force comes sooner."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return longest
    return max(0.0, min(longest, deadline - time.monotonic()))


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
    """An indexed file; ``text`` is what was indexed (a store may keep it, to serve reads where
    the workspace is not on disk)."""

    path: str
    source: str
    hash: str
    mtime: int
    size: int
    text: str | None = field(default=None, repr=False, compare=False)
    #: The inode change time (ns) and inode number when the file was read: a same-size edit
    #: whose old mtime was put back (``cp -p``, ``rsync -t``, ``tar x``) still changes them.
    ctime: int = 0
    ino: int = 0


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


#: ``(path, hash, size, mtime, ctime, ino)`` of an indexed file.
FileState = tuple[str, str, int, int, int, int]


class CorruptIndexError(StoreError):
    """The index is damaged or is not a clawmem index (it can be rebuilt from the Markdown)."""


class MissingIndexError(StoreError):
    """Another agent's index, opened read-only as a shared namespace, does not exist (yet)."""


class StoreBusyError(StoreError):
    """Another process holds the index's sync lock (raised only by a lock taken without waiting)."""


class ReadInterrupted(StoreError):
    """A read in a :meth:`Store.reading` snapshot lost its connection after the index changed: the
    block's answers so far are of another state of the index than the next ones would be. Run the
    block again."""


class Store(ABC):
    """An open handle on one agent's derived index: files, chunks, keyword and vector search,
    embedding cache, meta."""

    #: Whether keyword (FTS) search works in this store.
    fts_available: bool = False
    fts_error: str | None = None
    #: Whether vector search runs inside the database; False means NumPy in process.
    vector_extension: bool = False
    vector_error: str | None = None
    #: Dimensions of the stored vectors (``None`` until the first vector is written).
    vector_dims: int | None = None
    #: Where the vector search code comes from (an extension file), for status.
    vector_path: str | None = None
    #: Exception types this backend's driver raises for storage failures (besides :class:`StoreError`).
    driver_errors: tuple[type[BaseException], ...] = ()
    #: The longest workspace-relative path (UTF-8 bytes) this store can key a file by, ``None``
    #: when any path fits: sync skips a file with a longer path and reports it, so that one file
    #: never fails the writes of the others.
    max_path_bytes: int | None = None
    #: The most pending chunks the vector phase writes in one transaction (it starts with fewer,
    #: and grows the group while groups are quick): more where a transaction costs much (a
    #: server's commit waits for its disk).
    vector_group_max: int = 16

    @property
    def vector_backend(self) -> str:
        """Name of the vector search in use (status)."""
        return "numpy"

    def reading(self, snapshot: bool = False) -> ContextManager[None]:
        """A block of reads in this thread (one search): a store may serve them on one connection
        and, with ``snapshot``, from one consistent state of the index (then a read may raise
        :class:`ReadInterrupted`). Nothing is written through this handle inside a snapshot."""
        return contextlib.nullcontext()

    # -- identity and bookkeeping -----------------------------------------------------------------

    @abstractmethod
    def get_meta(self) -> dict[str, Any] | None:
        """The index identity written by the last full index, or ``None`` for a new index."""

    @abstractmethod
    def set_meta(self, meta: dict[str, Any]) -> None: ...

    @abstractmethod
    def get_value(self, key: str) -> str | None:
        """A small bookkeeping value (not the index identity), e.g. ``last_scan``."""

    @abstractmethod
    def set_value(self, key: str, value: str) -> None: ...

    @abstractmethod
    def data_version(self) -> Hashable:
        """A token that changes whenever anything (this handle or another connection) commits to
        the index: what was read under one token is stale under another."""

    def others_version(self) -> Hashable:
        """A token that changes whenever another connection commits to the index and, where the
        backend can tell, stays as it is for this handle's own commits (by default
        :meth:`data_version`, which moves for both)."""
        return self.data_version()

    @abstractmethod
    def refresh(self) -> None:
        """Re-read what another connection may have changed (vector dimensions after a rebuild)."""

    # -- files and chunks -------------------------------------------------------------------------

    @abstractmethod
    def file_hashes(self, source: str) -> dict[str, str]:
        """``path -> hash`` of every indexed file of ``source`` (one query)."""

    @abstractmethod
    def file_states(self, source: str) -> dict[str, FileState]:
        """The ``(path, hash, size, mtime, ctime, ino)`` of each indexed file of ``source``, by path
        (one query)."""

    def file_states_of(self, source: str, paths: Iterable[str]) -> dict[str, FileState]:
        """:meth:`file_states` of only ``paths`` (those the index holds)."""
        states = self.file_states(source)
        return {p: states[p] for p in paths if p in states}

    def file_count(self, source: str) -> int:
        """How many files of ``source`` the index holds."""
        return len(self.file_states(source))

    @abstractmethod
    def replace_files(self, items: list[tuple[FileRow, list[ChunkRow]]]) -> None:
        """Atomically replace files' rows and all their chunks (keyword and vector rows too):
        readers see every file of the group old or every one new."""

    def replace_file(self, file: FileRow, chunks: list[ChunkRow]) -> None:
        """Replace one file and its chunks."""
        self.replace_files([(file, chunks)])

    @abstractmethod
    def touch_files(self, files: Sequence[FileRow]) -> None:
        """Record new sizes, mtimes, ctimes and inodes of files whose content did not change (one
        transaction)."""

    def touch_file(self, file: FileRow) -> None:
        """Record a new size and mtime for a file whose content did not change."""
        self.touch_files([file])

    @abstractmethod
    def delete_files(self, source: str, paths: Iterable[str]) -> None:
        """Remove files and their chunks."""

    @abstractmethod
    def has_content(self) -> bool:
        """Whether any chunk is indexed."""

    def file_text(self, source: str, path: str) -> tuple[str, int] | None:
        """The text of an indexed file as it was indexed, and its mtime in ms; ``None`` when the
        file is not indexed or the store keeps no copies of texts (SQLite: the Markdown is local)."""
        return None

    # -- vectors after keywords (two-phase sync) --------------------------------------------------

    @abstractmethod
    def pending_chunks(self, limit: int, after: int = 0, paths: Sequence[str] | None = None) -> list[tuple[int, ChunkRow]]:
        """Up to ``limit`` chunks written with ``pending=True`` that still wait for their vectors
        (only those of ``paths`` when given, at most 500 paths), in index order, each with its
        position (pass the last one as ``after`` for the next ones)."""

    @abstractmethod
    def set_vectors(self, items: Sequence[tuple[str, Sequence[float] | None, list[ChunkRow]]]) -> int:
        """Complete pending chunks in one transaction: ``(chunk id, its vector or None, its window
        rows)``. A chunk no longer pending (replaced or deleted meanwhile) is skipped. Returns how
        many were completed."""

    def pending_ids(self, ids: Iterable[str]) -> set[str]:
        """Those of these chunk ids that still wait for their vectors (search ranks them by their
        keywords while the vector phase is under way)."""
        return set()

    def writing(self) -> ContextManager[None]:
        """A block of this thread's calls (the vector phase is one) that a store may run without
        checking a connection before each: cheaper where each call would take a connection and
        check it first. Allowed inside a :meth:`reading` block, not inside a snapshot."""
        import contextlib

        return contextlib.nullcontext()

    @abstractmethod
    def vector_counts(self) -> VectorCounts:
        """Chunks with their vectors done, of all chunks (window rows not counted), and the
        characters of the pending ones."""

    # -- search -----------------------------------------------------------------------------------

    @abstractmethod
    def keyword_search(self, terms: list[str], limit: int) -> list[tuple[str, float]]:
        """``(chunk id, bm25 rank)`` best first (FTS5's sign: more negative is better); any term may
        match (rarer terms weigh more)."""

    def term_hits(self, terms: list[str]) -> tuple[int, list[int]] | None:
        """Rows of the keyword index and, for each term, how many rows hold it (BM25's document
        frequencies, for the calibrated keyword score); ``None`` when the store cannot tell (the
        search then scores keyword hits relative to the query's best one)."""
        return None

    @abstractmethod
    def vector_search(self, query: Sequence[float], limit: int) -> list[tuple[str, float]]:
        """``(chunk id, cosine similarity)`` best first."""

    def prepare_keyword_search(self, terms: list[str], limit: int) -> None:
        """Run :meth:`keyword_search` ahead of the search that will ask for it (while the query is
        being embedded), keeping the answer for that one call if the index is unchanged by then. A
        store that keeps nothing does nothing."""

    def prepare_vector_search(self, query: Sequence[float], limit: int) -> None:
        """Likewise for :meth:`vector_search`; called from another thread than the search's, so a
        store may only do here what needs neither its connection nor its lock."""

    @abstractmethod
    def get_chunk_meta(self, ids: Iterable[str]) -> dict[str, tuple[str, str, int, int]]:
        """``id -> (path, source, start_line, end_line)`` without the text."""

    @abstractmethod
    def get_chunks(self, ids: Iterable[str]) -> dict[str, ChunkRow]:
        """Chunk rows by id (without embeddings)."""

    # -- embedding cache --------------------------------------------------------------------------

    @abstractmethod
    def cache_get(self, provider: str, model: str, provider_key: str, hashes: list[str]) -> dict[str, list[float]]:
        """Cached vectors for chunk hashes (only non-empty vectors count)."""

    @abstractmethod
    def cache_put(self, provider: str, model: str, provider_key: str, items: dict[str, Sequence[float]]) -> None: ...

    @abstractmethod
    def cache_prune(self, max_entries: int) -> int:
        """Evict the oldest entries beyond ``max_entries``; return how many were removed. A cache
        shared by several agents (PostgreSQL) evicts only entries no agent uses, so that one
        agent's setting never costs another provider calls."""

    # -- generations ------------------------------------------------------------------------------

    @abstractmethod
    def rebuild(self) -> ContextManager["Store"]:
        """A new, empty generation of the index (with this one's embedding cache) to fill in the
        block; it replaces this one atomically when the block succeeds (readers see the old index
        or the new one, never a half-built one) and is thrown away when it fails."""

    @abstractmethod
    def remove_leftovers(self) -> int:
        """Remove what crashed rebuilds left behind (call only while holding the sync lock);
        returns how many pieces were removed."""

    def settle(self) -> None:
        """Work a store leaves to the end of a sync (called with the sync lock held, after the
        sync's writes): nothing by default."""

    def follow(self) -> None:
        """Catch up with changes made to the index behind this handle's back (a read-only handle
        whose file was rewritten in place reopens it); raises :class:`StoreError` when the index
        can no longer be read. Nothing to do by default."""

    def superseded(self) -> bool:
        """Whether the index this handle opened was replaced by another process (set aside as
        damaged and rebuilt): the handle should be reopened."""
        return False

    # -- errors -----------------------------------------------------------------------------------

    def is_corruption(self, exc: BaseException) -> bool:
        """Whether ``exc`` means the index is damaged (it is then set aside and rebuilt)."""
        return isinstance(exc, CorruptIndexError)

    def write_error(self, exc: BaseException) -> StoreError | None:
        """The clawmem error for a driver error met while writing (disk full, read-only...), or
        ``None`` when ``exc`` is none of those."""
        return None

    # -- status -----------------------------------------------------------------------------------

    @abstractmethod
    def counts(self) -> StoreCounts: ...

    @abstractmethod
    def close(self) -> None: ...


class StoreBackend(ABC):
    """Where one agent's index lives: opens :class:`Store` handles on it, holds the lock that
    serialises syncs across processes, and sets a damaged index aside."""

    #: How the index is shown to a person (status, errors); never holds a secret.
    location: str

    @abstractmethod
    def open(self) -> Store:
        """A new handle on the index (created if missing). Raises :class:`CorruptIndexError` when
        the index is damaged."""

    @abstractmethod
    def process_lock(self, blocking: bool = True) -> ContextManager[None]:
        """The lock serialising syncs of this index across processes and hosts. Without
        ``blocking``, raises :class:`StoreBusyError` at once when another process holds it."""

    def vector_lock(self, timeout: float | None = 0.0) -> ContextManager[None]:
        """The lock the vector phase of this index holds across processes and hosts: while one
        process embeds the pending chunks, another leaves them to it rather than embedding them a
        second time. Waits ``timeout`` seconds at most (``None``: as long as it takes), then raises
        :class:`StoreBusyError`. A backend without such a lock takes none."""
        return contextlib.nullcontext()

    def connection_pool(self) -> Any:
        """The pool of database connections this backend draws from, for tables kept beside the
        index in the same database (the recall log); ``None`` for a backend without one (SQLite)."""
        return None

    def forget_cached(self) -> None:
        """Drop what searches of this agent loaded that the process keeps beyond any handle
        (nothing by default: a SQLite index's caches belong to its handles)."""

    def open_namespace(self, agent_id: str) -> Store:
        """A read-only handle on another agent's index in the same store (a shared namespace)."""
        from ..errors import ConfigError

        raise ConfigError("shared namespaces (search.shared) need a PostgreSQL store (store.url)")

    @abstractmethod
    def set_aside(self, exc: BaseException) -> str:
        """Move a damaged index out of the way (call with the process lock held), so that
        :meth:`open` starts an empty one; returns where it went, for the log."""

