"""The SQLite store: one file per agent holding files, chunks, FTS5 keywords, sqlite-vec vectors,
the embedding cache and the index identity (meta).

It uses ``apsw``, which bundles a recent SQLite with FTS5 and can load extensions on every
platform (many Python builds' ``sqlite3`` cannot). When sqlite-vec cannot load, vectors are still
stored and searched with NumPy in process.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import json
import logging
import math
import os
import threading
import time
import uuid
from array import array
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

import apsw

from ..errors import ConfigError, StoreError
from ..text import index_document, quote_fts
from .base import (ChunkRow, CorruptIndexError, FileRow, FileState, MissingIndexError, Store, StoreBackend,
                   StoreBusyError, StoreCounts, VectorCounts, check_agent_id)
from .bm25 import Bm25Index, StaleStatistics, read_varint

log = logging.getLogger("clawmem")

SCHEMA_VERSION = 1
META_KEY = "memory_index_meta_v1"
#: FTS5 tokenizer per ``store.fts.tokenizer`` setting.
FTS_TOKENIZERS = {
    "cjk": "porter unicode61 remove_diacritics 2 tokenchars '_'",
    "unicode61": "unicode61",
    "trigram": "trigram case_sensitive 0",
}
#: Queries served by sqlite-vec before the process keeps a NumPy matrix of the vectors.
_MATRIX_AFTER_QUERIES = 2
#: Keyword queries served by FTS5's bm25() on an unchanged index before the process scores them
#: itself (:class:`~.bm25.Bm25Index`, same scores): a short-lived process or an index that changes
#: between searches never pays for reading the statistics.
_BM25_AFTER_QUERIES = 2
#: Candidate metadata kept between the candidate lists and :meth:`SQLiteStore.get_chunk_meta`.
_META_MEMO_MAX = 20_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files (
    path TEXT NOT NULL, source TEXT NOT NULL DEFAULT 'memory', hash TEXT NOT NULL,
    mtime INTEGER NOT NULL, size INTEGER NOT NULL, ctime INTEGER NOT NULL DEFAULT 0,
    ino INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (source, path));
CREATE TABLE IF NOT EXISTS chunks (
    rid INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, path TEXT NOT NULL,
    source TEXT NOT NULL DEFAULT 'memory', start_line INTEGER NOT NULL, end_line INTEGER NOT NULL,
    hash TEXT NOT NULL, model TEXT NOT NULL, text TEXT NOT NULL, embedding BLOB,
    updated_at INTEGER NOT NULL, part INTEGER NOT NULL DEFAULT 0, pending INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS idx_chunks_path ON chunks (source, path);
CREATE TABLE IF NOT EXISTS embedding_cache (
    provider TEXT NOT NULL, model TEXT NOT NULL, provider_key TEXT NOT NULL, hash TEXT NOT NULL,
    embedding BLOB NOT NULL, dims INTEGER NOT NULL, updated_at INTEGER NOT NULL,
    PRIMARY KEY (provider, model, provider_key, hash));
CREATE INDEX IF NOT EXISTS idx_embedding_cache_updated_at ON embedding_cache (updated_at);
"""
#: Tables and indexes of :data:`_SCHEMA`, and columns added to it since the first schema.
_SCHEMA_OBJECTS = {"meta", "files", "chunks", "embedding_cache", "idx_chunks_path", "idx_embedding_cache_updated_at",
                   "idx_chunks_pending"}
_ADDED_COLUMNS = {
    "chunks": {
        "part": "INTEGER NOT NULL DEFAULT 0",  # 1 = a window row (vector side only)
        "pending": "INTEGER NOT NULL DEFAULT 0",  # 1 = keyword row written, vectors not yet (two-phase sync)
    },
    "files": {"ctime": "INTEGER NOT NULL DEFAULT 0", "ino": "INTEGER NOT NULL DEFAULT 0"},
}


#: Columns each table must have; an index file without them was written by something else.
_COLUMNS = {
    "meta": {"key", "value"},
    "files": {"path", "source", "hash", "mtime", "size"},
    "chunks": {"rid", "id", "path", "source", "start_line", "end_line", "hash", "model", "text", "embedding", "updated_at"},
    "embedding_cache": {"provider", "model", "provider_key", "hash", "embedding", "dims", "updated_at"},
}
#: Damaged index files kept aside (``<name>.corrupt-<timestamp>``) for inspection.
KEEP_CORRUPT = 2


class VectorTableError(StoreError):
    """sqlite-vec failed on ``chunks_vec``: its pages are damaged (the index is rebuilt)."""


@contextlib.contextmanager
def _vec_errors() -> Iterator[None]:
    """sqlite-vec reports damaged shadow-table pages as plain SQL errors ("vectors blob read
    error", "could not read validity bitmap", ...): they mean a damaged index."""
    try:
        yield
    except apsw.SQLError as exc:
        raise VectorTableError(f"the vector table of the index is damaged: {exc}") from None


def _check_file_header(path: Path) -> None:
    """Cheap checks of an existing index file before SQLite opens it: the SQLite magic string,
    and a file at least as long as its header says (a truncated copy or a half-written file)."""
    try:
        size = os.stat(path).st_size
    except OSError:
        return
    if size == 0 or path.is_dir():
        return
    with open(path, "rb") as f:
        head = f.read(100)
    if len(head) < 100 or not head.startswith(b"SQLite format 3\x00"):
        raise CorruptIndexError(f"index {path} is not a SQLite database (damaged or overwritten)")
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    wal = Path(f"{path}-wal")
    wal_pending = wal.exists() and wal.stat().st_size > 0  # recovery may still grow the file
    if head[24:28] == head[92:96] and pages and pages * page_size > size and not wal_pending:
        raise CorruptIndexError(f"index {path} is truncated ({size} bytes, its header says {pages * page_size})")


def quarantine_index(path: Path) -> Path:
    """Move a damaged index aside as ``<name>.corrupt-<timestamp>`` (its WAL and shared-memory
    files are dropped) and keep only the newest :data:`KEEP_CORRUPT` such copies."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f"{time.time() % 1:.6f}"[1:].replace(".", "")
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    os.replace(path, target)
    for suffix in ("-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(f"{path}{suffix}")
    old = sorted(path.parent.glob(f"{glob.escape(path.name)}.corrupt-*"), key=lambda p: p.name)
    for p in old[:-KEEP_CORRUPT]:
        with contextlib.suppress(OSError):
            os.remove(p)
    return target


def _sqlite_vec_path() -> str:
    """Where the ``sqlite-vec`` package keeps its loadable extension, found without importing
    the package (its module imports the stdlib ``sqlite3`` and NumPy, ~0.2 s on a cold start)."""
    import importlib.util

    spec = importlib.util.find_spec("sqlite_vec")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("sqlite-vec is not installed")
    return os.path.join(list(spec.submodule_search_locations)[0], "vec0")


def _blob(vec: Sequence[float]) -> bytes:
    return array("f", vec).tobytes()


def _unblob(blob: bytes) -> list[float]:
    a = array("f")
    a.frombytes(blob)
    return a.tolist()


def _now_ms() -> int:
    return int(time.time() * 1000)


_F = TypeVar("_F", bound=Callable[..., Any])


def _locked(method: _F, *, follow: bool = True) -> _F:
    """Run a store method holding the store's lock: one apsw connection serves one thread at a
    time, and the caches it keeps (BM25 statistics, vector matrix, candidate metadata) change
    with it. A read-only handle first follows its file (see :meth:`SQLiteStore._follow_file`)."""

    @functools.wraps(method)
    def run(self: "SQLiteStore", *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            if follow and self.read_only:
                self._follow_file()
            return method(self, *args, **kwargs)

    return run  # type: ignore[return-value]


class SQLiteStore(Store):
    """A SQLite index file. Open it with :meth:`open`; :meth:`rebuild` builds a new index beside
    it and swaps it in atomically."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        vector_enabled: bool = True,
        extension_path: str | None = None,
        fts_tokenizer: str = "cjk",
        read_only: bool = False,
    ) -> None:
        self.path = Path(path)
        #: Opened read-only (another agent's index searched as a shared namespace): this handle
        #: never creates, converts or writes the file.
        self.read_only = read_only
        self.vector_enabled = vector_enabled
        self.extension_path = extension_path
        self.fts_tokenizer = fts_tokenizer
        self.fts_available = False
        self.fts_error: str | None = None
        self.vector_extension = False
        self.vector_error: str | None = None
        self.vector_dims: int | None = None
        #: ``chunks_vec`` exists and matches the chunks' vectors (a writer without sqlite-vec could
        #: not keep it up to date, or never created it): only then does sqlite-vec answer.
        self.vector_table_ok = False
        self._conn: apsw.Connection | None = None
        self.file_id: tuple[int, int] | None = None
        #: The file's identity, size and times when this handle opened it (see :meth:`_follow_file`).
        self._file_sig: tuple[int, ...] | None = None
        #: How many times this handle (re)opened its file: part of every cache's key.
        self._opens = 0
        self._writes = 0
        self._vec_queries = 0
        self._matrix: tuple[Any, list[str], Any, Any] | None = None
        self._seen_token: Any = None
        self._bm25: tuple[Any, Bm25Index] | None = None
        self._kw_token: Any = None
        self._hits_cache: tuple[Any, int, dict[str, int]] | None = None
        self._kw_queries = 0
        self._query_tokenizer: Any = None
        self._meta_memo: tuple[Any, dict[str, tuple[str, str, int, int]]] = (None, {})
        self._vector_counts: tuple[Any, VectorCounts] | None = None
        #: Guards the connection and the caches (a ``MemoryIndex`` is shared by threads).
        self._lock = threading.RLock()
        self._open()

    # -- connection ---------------------------------------------------------------------------

    @property
    def conn(self) -> apsw.Connection:
        if self._conn is None:
            raise StoreError(f"index {self.path} is closed")
        return self._conn

    def _open(self, attempt: int = 0) -> None:
        from ..discovery import is_valid_name, printable_name

        if not is_valid_name(str(self.path)):  # SQLite takes file names as UTF-8 text only
            raise StoreError(f"cannot open the index {printable_name(str(self.path))}: its path is not valid UTF-8; "
                             "set store.path or CLAWMEM_STATE_DIR to a directory whose name is")
        if self.read_only:
            if not self.path.is_file():
                raise MissingIndexError(f"no index at {self.path} (its agent has not indexed its workspace yet)")
        else:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot create the index directory {self.path.parent}: {exc.strerror or exc}") from None
        _check_file_header(self.path)
        self._opens += 1
        self._file_sig = self._current_sig()  # before any page is read: a later change is seen
        try:
            if self.read_only:  # never creates the file, never writes to it
                conn = apsw.Connection(str(self.path), flags=apsw.SQLITE_OPEN_READONLY)
            else:
                conn = apsw.Connection(str(self.path))
            self.file_id = self.current_file_id()
            conn.setbusytimeout(10_000)
            self._conn = conn
            self._load_vector_extension()
            if self.read_only:
                conn.execute("PRAGMA query_only=1")
            else:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
            version = conn.execute("PRAGMA user_version").fetchall()[0][0]
            if version not in (0, SCHEMA_VERSION):
                raise StoreError(f"index {self.path} has schema version {version}; this clawmem writes {SCHEMA_VERSION}")
            columns = self._check_columns()
            # Opening an index that is complete writes nothing: no write lock to wait for, and
            # long-lived readers in other processes keep their caches.
            names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
            complete = version == SCHEMA_VERSION and _SCHEMA_OBJECTS <= names and all(
                set(cols) <= columns.get(table, set()) for table, cols in _ADDED_COLUMNS.items()
            )
            if not complete and self.read_only:
                raise StoreError(f"index {self.path} is not a complete clawmem index of this version; its agent "
                                 "brings it up to date on its next sync")
            if not complete:
                with self._tx():
                    conn.execute(_SCHEMA)
                    self._add_missing_columns()
                    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            self._ensure_fts("chunks_fts" in names or self.read_only)
            self._read_vector_state()
            conn.execute("SELECT key, value FROM meta").fetchall()  # a damaged meta page fails here, not later
        except (apsw.CorruptError, apsw.NotADBError) as exc:
            self.close()
            raise CorruptIndexError(f"index {self.path} is corrupt: {exc}") from None
        except apsw.BusyError:
            # Another process is creating or converting the same file (its first open): SQLite
            # can answer BUSY here without waiting on the busy handler. Try again for a while.
            self.close()
            if attempt >= _OPEN_ATTEMPTS:
                raise StoreError(f"cannot open index {self.path}: another process keeps it locked") from None
            time.sleep(min(0.05 * 2 ** attempt, 1.0))
            self._open(attempt + 1)
        except apsw.Error as exc:
            self.close()
            unwritable = not os.access(self.path.parent, os.W_OK) or (self.path.exists() and not os.access(self.path, os.W_OK))
            if unwritable and not self.read_only:
                raise StoreError(
                    f"cannot open index {self.path}: the state directory {self.path.parent} is read-only or not "
                    f"writable (set state_dir or CLAWMEM_STATE_DIR to a writable directory)"
                ) from None
            raise StoreError(f"cannot open index {self.path}: {exc}") from None
        except StoreError:
            self.close()
            raise

    driver_errors = (apsw.Error,)

    @property
    def vector_backend(self) -> str:
        return "sqlite-vec" if self.vector_extension else "numpy"

    def superseded(self) -> bool:
        """The file at :attr:`path` is no longer the one this handle opened."""
        return self.file_id != self.current_file_id()

    def is_corruption(self, exc: BaseException) -> bool:
        return isinstance(exc, (apsw.CorruptError, apsw.NotADBError, CorruptIndexError, VectorTableError))

    def write_error(self, exc: BaseException) -> StoreError | None:
        if isinstance(exc, apsw.FullError):
            return StoreError(f"disk full: cannot write the index {self.path}; the previous index is unchanged")
        if isinstance(exc, (apsw.ReadOnlyError, apsw.CantOpenError, apsw.PermissionsError, apsw.IOError)):
            return StoreError(f"cannot write the index {self.path}: {exc}")
        return None

    def remove_leftovers(self) -> int:
        return remove_stale_temp_files(self.path)

    @_locked
    def data_version(self) -> Any:
        """``PRAGMA data_version`` (changes when another connection commits) and this handle's
        own commits."""
        return self._data_token()

    @_locked
    def others_version(self) -> Any:
        """``PRAGMA data_version`` alone: it moves when another connection commits, never for
        this handle's own commits."""
        return (self.conn.execute("PRAGMA data_version").fetchall()[0][0], self._opens)

    def _current_sig(self) -> tuple[int, ...] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def _follow_file(self) -> None:
        """Reopen a read-only handle whose file changed since it opened it (call holding the
        lock). SQLite trusts the pages it cached while the file's change counter (or WAL index) is
        unchanged, and so do this handle's caches while ``PRAGMA data_version`` is: a file rewritten
        in place behind SQLite's back (damaged, restored from a backup) would keep answering from
        what was read before, and damage would be seen only by a search that happens to read an
        uncached page. A new connection reads the file as it is now, and a damaged one fails here,
        whatever the search reads. The owner's own checkpoints change the file too: the reopen
        then costs an open, no more."""
        if self._conn is None or self._file_sig == self._current_sig():
            return
        log.debug("index %s changed on disk since it was opened: reopening it", self.path)
        self._close_conn()
        self._open()

    @_locked
    def follow(self) -> None:
        """See the index file as it is now (a read-only handle reopens a file changed since it
        opened it, raising :class:`CorruptIndexError` when it can no longer be read)."""

    def current_file_id(self) -> tuple[int, int] | None:
        """Device and inode of the file now at :attr:`path` (changes when it is replaced)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_dev, st.st_ino)

    def _check_columns(self) -> dict[str, set[str]]:
        """The columns of each table (empty for a missing table); a table without clawmem's
        columns means a file that is not a clawmem index."""
        out = {}
        for table, want in _COLUMNS.items():
            have = {row[1] for row in self.conn.execute(f"PRAGMA table_info({table})")}
            if have and not want <= have:
                missing = ", ".join(sorted(want - have))
                raise CorruptIndexError(f"index {self.path} is not a clawmem index (table {table} lacks {missing})")
            out[table] = have
        return out

    def _add_missing_columns(self) -> None:
        """Columns added since the first schema (an older index gets them), and their indexes."""
        for table, cols in _ADDED_COLUMNS.items():
            have = {row[1] for row in self.conn.execute(f"PRAGMA table_info({table})")}
            for name, decl in cols.items():
                if name not in have:
                    self.conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {decl}")
        self.conn.execute("CREATE INDEX IF NOT EXISTS idx_chunks_pending ON chunks (pending, rid)")

    def _load_vector_extension(self) -> None:
        if not self.vector_enabled:
            self.vector_error = "disabled by store.vector.enabled"
            return
        try:
            path = self.extension_path
            if not path:
                path = _sqlite_vec_path()
            self.conn.enable_load_extension(True)
            self.conn.load_extension(path)
            self.conn.enable_load_extension(False)
            self.vector_extension = True
            self.vector_path = path
        except Exception as exc:  # missing wheel, wrong platform, load failure
            self.vector_error = str(exc) or type(exc).__name__

    def _ensure_fts(self, exists: bool) -> None:
        tokenize = FTS_TOKENIZERS[self.fts_tokenizer].replace('"', '""')
        try:
            if exists:
                self.conn.execute("SELECT rowid FROM chunks_fts WHERE 0").fetchall()  # FTS5 loads
            else:
                self.conn.execute(
                    f'CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(text, content="", '
                    f'contentless_delete=1, tokenize="{tokenize}")'
                )
            self.fts_available = True
        except (apsw.CorruptError, apsw.NotADBError, apsw.BusyError):
            raise  # damaged (its config page, say) or locked: not "FTS5 missing"
        except apsw.Error as exc:
            self.fts_available = False
            self.fts_error = str(exc)

    def _read_vector_state(self) -> None:
        """Read the vector dimensions and whether ``chunks_vec`` can answer (:attr:`vector_table_ok`)."""
        dims, stale, table = self.conn.execute(
            "SELECT (SELECT value FROM meta WHERE key='vector_dims'), "
            "(SELECT value FROM meta WHERE key='vector_table_stale'), "
            "EXISTS (SELECT 1 FROM sqlite_master WHERE name='chunks_vec')"
        ).fetchall()[0]
        self.vector_dims = int(dims) if dims else None
        self.vector_table_ok = bool(table) and not stale

    def _fill_vector_table(self, dims: int) -> None:
        """(Re)create ``chunks_vec`` from the chunks' vectors (inside a transaction)."""
        with _vec_errors():
            self.conn.execute("DROP TABLE IF EXISTS chunks_vec")
        self.conn.execute(f"CREATE VIRTUAL TABLE chunks_vec USING vec0(embedding float[{int(dims)}] distance_metric=cosine)")
        self.conn.execute(
            "INSERT INTO chunks_vec(rowid, embedding) SELECT rid, embedding FROM chunks "
            "WHERE embedding IS NOT NULL AND length(embedding) = ? AND embedding != zeroblob(length(embedding))",
            (dims * 4,),
        )
        self.conn.execute("DELETE FROM meta WHERE key='vector_table_stale'")
        self.vector_table_ok = True

    def _vectors_in_step(self) -> bool:
        """Before changing chunks (inside the write transaction): bring ``chunks_vec`` in step
        with the chunks when this connection has sqlite-vec (recreated if it is missing or
        another writer left it stale), or mark it stale when it has not. True when the
        vector rows are to be written too."""
        self._read_vector_state()
        if not self.vector_extension:
            if self.vector_dims and self._has_table("chunks_vec"):
                self.conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('vector_table_stale', '1')")
                self.vector_table_ok = False
            return False
        if self.vector_dims and not self.vector_table_ok:
            self._fill_vector_table(self.vector_dims)
        return bool(self.vector_dims)

    @contextlib.contextmanager
    def _tx(self) -> Iterator[None]:
        """An IMMEDIATE transaction (takes the write lock up front, so no deadlock on upgrade)."""
        with self._lock:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                # SQLite has already rolled back after some errors (SQLITE_FULL, SQLITE_IOERR...): a
                # second ROLLBACK would raise and hide the real error.
                if not self.conn.getautocommit():
                    self.conn.execute("ROLLBACK")
                raise
            else:
                self.conn.execute("COMMIT")
                self._writes += 1

    @functools.partial(_locked, follow=False)
    def close(self) -> None:
        self._close_conn()

    def _close_conn(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(apsw.Error):
                self._conn.close()
            self._conn = None
        self._matrix = None
        self._bm25 = None

    # -- meta ---------------------------------------------------------------------------------

    @_locked
    def get_meta(self) -> dict[str, Any] | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key=?", (META_KEY,)).fetchall()
        if not row:
            return None
        try:
            value = json.loads(row[0][0])
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    @_locked
    def set_meta(self, meta: dict[str, Any]) -> None:
        value = json.dumps(meta, sort_keys=True)
        with self._tx():
            self.conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (META_KEY, value))

    # -- vectors table ------------------------------------------------------------------------

    @_locked
    def ensure_vector_table(self, dims: int) -> None:
        """Create ``chunks_vec`` for ``dims``-dimensional vectors (recreated if dims change).
        Without sqlite-vec only the dimensions are recorded (and an existing table marked stale)."""
        if self.vector_dims == dims and (not self.vector_extension or self.vector_table_ok):
            return
        with self._tx():
            self.conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('vector_dims', ?)", (str(dims),))
            if self.vector_extension:
                self._fill_vector_table(dims)
            elif self._has_table("chunks_vec"):
                self.conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('vector_table_stale', '1')")
                self.vector_table_ok = False
        self.vector_dims = dims

    def _has_table(self, name: str) -> bool:
        return bool(self.conn.execute("SELECT 1 FROM sqlite_master WHERE name=?", (name,)).fetchall())

    # -- files and chunks ---------------------------------------------------------------------

    @_locked
    def get_value(self, key: str) -> str | None:
        """A small bookkeeping value from ``meta`` (not the index identity)."""
        row = self.conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchall()
        return row[0][0] if row else None

    @_locked
    def set_value(self, key: str, value: str) -> None:
        with self._tx():
            self.conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))

    @_locked
    def file_hashes(self, source: str) -> dict[str, str]:
        return dict(self.conn.execute("SELECT path, hash FROM files WHERE source=?", (source,)).fetchall())

    @_locked
    def file_states(self, source: str) -> dict[str, FileState]:
        """The ``(path, hash, size, mtime, ctime, ino)`` of each indexed file of ``source``, by path
        (one query)."""
        rows = self.conn.execute("SELECT path, hash, size, mtime, ctime, ino FROM files WHERE source=?", (source,))
        return {row[0]: row for row in rows}

    def _delete_chunks(self, source: str, paths: Sequence[str], with_vectors: bool) -> None:
        """Delete the chunks (keywords, vectors) of ``paths``: one lookup per 500 paths, not per file."""
        conn = self.conn
        rids: list[int] = []
        for i in range(0, len(paths), 500):
            part = paths[i : i + 500]
            marks = ",".join("?" * len(part))
            sql = f"SELECT rid FROM chunks WHERE source=? AND path IN ({marks})"
            rids += [r[0] for r in conn.execute(sql, (source, *part))]
        for i in range(0, len(rids), 500):
            part_rids = rids[i : i + 500]
            marks = ",".join("?" * len(part_rids))
            if self.fts_available:
                conn.execute(f"DELETE FROM chunks_fts WHERE rowid IN ({marks})", part_rids)
            if with_vectors:
                with _vec_errors():
                    conn.execute(f"DELETE FROM chunks_vec WHERE rowid IN ({marks})", part_rids)
            conn.execute(f"DELETE FROM chunks WHERE rid IN ({marks})", part_rids)

    @_locked
    def replace_files(self, items: list[tuple[FileRow, list[ChunkRow]]]) -> None:
        """Replace several files and their chunks in one transaction."""
        dims = next((len(c.embedding) for _, chunks in items for c in chunks if c.embedding), None)
        if dims and dims != self.vector_dims:
            self.ensure_vector_table(dims)
        now = _now_ms()
        conn = self.conn
        cjk = self.fts_tokenizer == "cjk"
        by_source: dict[str, list[str]] = {}
        for file, _ in items:
            by_source.setdefault(file.source, []).append(file.path)
        with self._tx():
            with_vectors = self._vectors_in_step()
            for source, paths in by_source.items():
                self._delete_chunks(source, paths, with_vectors)
            conn.executemany(
                "INSERT OR REPLACE INTO files(path, source, hash, mtime, size, ctime, ino) VALUES (?,?,?,?,?,?,?)",
                [(f.path, f.source, f.hash, f.mtime, f.size, f.ctime, f.ino) for f, _ in items],
            )
            # Row ids are assigned here so that chunks, keywords and vectors go in as three bulk inserts.
            rid = conn.execute("SELECT coalesce(max(rid), 0) FROM chunks").fetchall()[0][0]
            rows, docs, vecs = [], [], []
            seen: set[str] = set()
            for _, chunks in items:
                for c in chunks:
                    if c.id in seen:
                        continue  # identical pieces of one chunk: one row
                    seen.add(c.id)
                    rid += 1
                    blob = _blob(c.embedding) if c.embedding else None
                    rows.append((rid, c.id, c.path, c.source, c.start_line, c.end_line, c.hash, c.model, c.text, blob, now,
                                 int(c.window), int(c.pending)))
                    if not c.window:
                        docs.append((rid, index_document(c.text) if cjk else c.text))
                    if blob is not None and with_vectors and len(c.embedding or ()) == self.vector_dims and blob.strip(b"\0"):
                        vecs.append((rid, blob))  # an all-zero vector has no direction: matrix side only
            conn.executemany(
                "INSERT INTO chunks(rid, id, path, source, start_line, end_line, hash, model, text, embedding, "
                "updated_at, part, pending) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                rows,
            )
            if self.fts_available:
                conn.executemany("INSERT INTO chunks_fts(rowid, text) VALUES (?, ?)", docs)
            if vecs:
                with _vec_errors():
                    conn.executemany("INSERT INTO chunks_vec(rowid, embedding) VALUES (?, ?)", vecs)

    @_locked
    def pending_chunks(self, limit: int, after: int = 0, paths: Sequence[str] | None = None) -> list[tuple[int, ChunkRow]]:
        """Up to ``limit`` chunks whose vectors are still to compute (of ``paths`` only, when
        given), in index order, with the position to pass as ``after`` for the next ones."""
        sql = ("SELECT rid, id, path, source, start_line, end_line, hash, model, text FROM chunks "
               "WHERE pending = 1 AND rid > ?")
        args: list[Any] = [int(after)]
        if paths is not None:
            if not paths:
                return []
            part = list(paths)[:500]
            sql += f" AND path IN ({','.join('?' * len(part))})"
            args += part
        rows = self.conn.execute(sql + " ORDER BY rid LIMIT ?", (*args, int(limit))).fetchall()
        return [(r[0], ChunkRow(*r[1:], pending=True)) for r in rows]

    @_locked
    def pending_ids(self, ids: Iterable[str]) -> set[str]:
        ids = list(ids)
        out: set[str] = set()
        for i in range(0, len(ids), 500):
            part = ids[i : i + 500]
            marks = ",".join("?" * len(part))
            out.update(r[0] for r in self.conn.execute(f"SELECT id FROM chunks WHERE pending = 1 AND id IN ({marks})", part))
        return out

    @_locked
    def vector_counts(self) -> VectorCounts:
        """How many chunks have their vectors, of how many, and the characters still to embed
        (counted once per state of the index)."""
        token = self._data_token()
        if self._vector_counts is not None and self._vector_counts[0] == token:
            return self._vector_counts[1]
        total, pending, chars = self.conn.execute(
            "SELECT count(*), coalesce(sum(pending), 0), coalesce(sum(CASE WHEN pending = 1 THEN length(text) END), 0) "
            "FROM chunks WHERE part = 0"
        ).fetchall()[0]
        counts = VectorCounts(int(total) - int(pending), int(total), int(chars))
        self._vector_counts = (token, counts)
        return counts

    @_locked
    def set_vectors(self, items: Sequence[tuple[str, Sequence[float] | None, list[ChunkRow]]]) -> int:
        """Give pending chunks their vectors: ``(chunk id, its vector or None, its window rows)``,
        in one transaction. A chunk no longer pending (replaced or deleted meanwhile) is left
        alone. Returns how many chunks were completed."""
        dims = next((len(v) for _, v, _ in items if v), None) or next(
            (len(w.embedding) for _, _, ws in items for w in ws if w.embedding), None
        )
        if dims and dims != self.vector_dims:
            self.ensure_vector_table(dims)
        conn = self.conn
        now = _now_ms()
        done = 0
        with self._tx():
            with_vectors = self._vectors_in_step()
            rid = conn.execute("SELECT coalesce(max(rid), 0) FROM chunks").fetchall()[0][0]
            vecs: list[tuple[int, bytes]] = []
            for cid, vec, windows in items:
                blob = _blob(vec) if vec else None
                got = conn.execute(
                    "UPDATE chunks SET embedding = ?, pending = 0, updated_at = ? WHERE id = ? AND pending = 1 "
                    "RETURNING rid",
                    (blob, now, cid),
                ).fetchall()
                if not got:
                    continue
                done += 1
                rows = [(got[0][0], blob, vec)]
                for w in windows:
                    if conn.execute("SELECT 1 FROM chunks WHERE id = ?", (w.id,)).fetchall():
                        continue  # identical pieces of one chunk: one row
                    rid += 1
                    wblob = _blob(w.embedding) if w.embedding else None
                    conn.execute(
                        "INSERT INTO chunks(rid, id, path, source, start_line, end_line, hash, model, text, embedding, "
                        "updated_at, part, pending) VALUES (?,?,?,?,?,?,?,?,?,?,?,1,0)",
                        (rid, w.id, w.path, w.source, w.start_line, w.end_line, w.hash, w.model, w.text, wblob, now),
                    )
                    rows.append((rid, wblob, w.embedding))
                if with_vectors:
                    # an all-zero vector has no direction: matrix side only
                    vecs += [(r, b) for r, b, v in rows
                             if b is not None and len(v or ()) == self.vector_dims and b.strip(b"\0")]
            if vecs:
                conn.executemany("INSERT INTO chunks_vec(rowid, embedding) VALUES (?, ?)", vecs)
        return done

    def touch_file(self, file: FileRow) -> None:
        """Record a new size and mtime for a file whose content did not change."""
        self.touch_files([file])

    @_locked
    def touch_files(self, files: Sequence[FileRow]) -> None:
        """:meth:`touch_file` for many files, in one transaction."""
        with self._tx():
            self.conn.executemany(
                "UPDATE files SET mtime=?, size=?, ctime=?, ino=? WHERE source=? AND path=?",
                [(f.mtime, f.size, f.ctime, f.ino, f.source, f.path) for f in files],
            )

    @_locked
    def delete_files(self, source: str, paths: Iterable[str]) -> None:
        paths = list(paths)
        with self._tx():
            self._delete_chunks(source, paths, self._vectors_in_step())
            self.conn.executemany("DELETE FROM files WHERE source=? AND path=?", [(source, p) for p in paths])

    @_locked
    def get_chunk_meta(self, ids: Iterable[str]) -> dict[str, tuple[str, str, int, int]]:
        """``id -> (path, source, start_line, end_line)``, without reading any text."""
        ids = list(ids)
        out: dict[str, tuple[str, str, int, int]] = {}
        token, memo = self._meta_memo
        if memo and token == self._data_token():  # read with this search's candidates
            out = {i: memo[i] for i in ids if i in memo}
            ids = [i for i in ids if i not in out]
        for i in range(0, len(ids), 500):
            part = ids[i : i + 500]
            marks = ",".join("?" * len(part))
            for row in self.conn.execute(
                f"SELECT id, path, source, start_line, end_line FROM chunks WHERE id IN ({marks})", part
            ):
                out[row[0]] = (row[1], row[2], row[3], row[4])
        return out

    def _read_meta(self, rids: Iterable[int]) -> dict[int, str]:
        """``rid -> id`` of search candidates; their metadata is kept for :meth:`get_chunk_meta`
        while the index is unchanged (looked up by rid, which is cheaper than by id)."""
        token = self._data_token()
        memo_token, memo = self._meta_memo
        if memo_token != token or len(memo) > _META_MEMO_MAX:
            memo = {}
            self._meta_memo = (token, memo)
        rids = [int(r) for r in rids]
        out: dict[int, str] = {}
        for i in range(0, len(rids), 500):
            part = rids[i : i + 500]
            marks = ",".join("?" * len(part))
            for rid, cid, path, source, start, end in self.conn.execute(
                f"SELECT rid, id, path, source, start_line, end_line FROM chunks WHERE rid IN ({marks})", part
            ):
                out[rid] = cid
                memo[cid] = (path, source, start, end)
        return out

    @_locked
    def get_chunks(self, ids: Iterable[str]) -> dict[str, ChunkRow]:
        ids = list(ids)
        out: dict[str, ChunkRow] = {}
        for i in range(0, len(ids), 500):
            part = ids[i : i + 500]
            marks = ",".join("?" * len(part))
            for row in self.conn.execute(
                f"SELECT id, path, source, start_line, end_line, hash, model, text FROM chunks WHERE id IN ({marks})",
                part,
            ):
                out[row[0]] = ChunkRow(*row)
        return out

    # -- search -------------------------------------------------------------------------------

    @_locked
    def keyword_search(self, terms: list[str], limit: int) -> list[tuple[str, float]]:
        if not self.fts_available or not terms:
            return []
        if self.fts_tokenizer == "trigram":
            terms = [t for t in terms if len(t) >= 3]
            if not terms:
                return []
        hits = self._bm25_search(terms, limit)
        if hits is not None:
            return hits
        match = " OR ".join(quote_fts(t) for t in terms)
        try:
            return [
                (row[0], float(row[1]))
                for row in self.conn.execute(
                    # bm25() spelled out is faster than the ``rank`` column alias (same values).
                    "SELECT c.id, f.r FROM (SELECT rowid, bm25(chunks_fts) AS r FROM chunks_fts WHERE chunks_fts "
                    "MATCH ? ORDER BY r, rowid LIMIT ?) AS f JOIN chunks AS c ON c.rid = f.rowid ORDER BY f.r, f.rowid",
                    (match, int(limit)),
                )
            ]
        except apsw.SQLError as exc:  # never expected: every term is quoted
            log.warning("keyword search failed: %s", exc)
            return []

    def _bm25_search(self, terms: list[str], limit: int) -> list[tuple[str, float]] | None:
        """The keyword query scored in process once the index has stayed unchanged for a few
        queries; ``None``: use FTS5 (not warm yet, a term that is not one token, or the index
        changed meanwhile)."""
        token = self._data_token()
        if token != self._kw_token:
            self._kw_token, self._kw_queries, self._bm25 = token, 0, None
        self._kw_queries += 1
        if self._kw_queries <= _BM25_AFTER_QUERIES or self.fts_tokenizer == "trigram":
            return None
        tokens = self._fts_tokens(terms)
        if tokens is None:
            return None
        try:
            if self._bm25 is None or self._bm25[0] != token:
                self._bm25 = (token, Bm25Index.load(self.conn, "chunks_fts"))
            hits = self._bm25[1].search(tokens, int(limit))
            ids = self._read_meta(rid for rid, _ in hits)
        except (StaleStatistics, apsw.Error) as exc:
            log.debug("in-process keyword scoring unavailable: %s", exc)
            self._bm25 = None
            return None
        if self._data_token() != token:  # written meanwhile: FTS5 reads one consistent state
            self._bm25 = None
            return None
        return [(ids[rid], rank) for rid, rank in hits if rid in ids]

    def term_hits(self, terms: list[str]) -> tuple[int, list[int]] | None:
        if not self.fts_available:
            return None
        token = self._data_token()
        if self._hits_cache is None or self._hits_cache[0] != token:
            rows = 0
            for (block,) in self.conn.execute('SELECT block FROM "chunks_fts_data" WHERE id = 1'):
                rows = read_varint(block)[0]
            self._hits_cache = (token, rows, {})
        _, rows, known = self._hits_cache
        out = []
        for term in terms:
            n = known.get(term)
            if n is None:
                try:
                    n = self._term_rows(term)
                except apsw.SQLError as exc:  # never expected: the term is quoted
                    log.debug("term frequency of %r unavailable: %s", term, exc)
                    return None
                if len(known) < 50_000:
                    known[term] = n
            out.append(n)
        return rows, out

    def _term_rows(self, term: str) -> int:
        """Rows holding ``term``: the FTS5 vocabulary's row count for one token, else a count of
        the rows matching it as a phrase."""
        if self.fts_tokenizer == "trigram" and len(term) < 3:
            return 0
        tokens = self._fts_tokens([term])
        if tokens is not None:
            if self.read_only:  # query_only refuses temporary tables too (the file stays read-only)
                self.conn.execute("PRAGMA query_only=0")
            try:
                self.conn.execute(
                    'CREATE VIRTUAL TABLE IF NOT EXISTS temp."chunks_fts_rows" USING fts5vocab(main, "chunks_fts", row)'
                )
            finally:
                if self.read_only:
                    self.conn.execute("PRAGMA query_only=1")
            got = self.conn.execute('SELECT doc FROM temp."chunks_fts_rows" WHERE term = ?', (tokens[0],)).fetchall()
            return int(got[0][0]) if got else 0
        return int(self.conn.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?", (quote_fts(term),)).fetchall()[0][0])

    def _fts_tokens(self, terms: list[str]) -> list[str] | None:
        """The FTS5 token of each query term, or ``None`` when a term is not exactly one token."""
        if self._query_tokenizer is None:
            name, *args = [a.strip("'") for a in FTS_TOKENIZERS[self.fts_tokenizer].split()]
            self._query_tokenizer = self.conn.fts5_tokenizer(name, args)
        out = []
        for term in terms:
            got = self._query_tokenizer(term.encode("utf-8"), apsw.FTS5_TOKENIZE_QUERY, None, include_offsets=False)
            if len(got) != 1 or len(got[0]) != 1:
                return None
            out.append(got[0][0])
        return out

    @_locked
    def refresh(self) -> None:
        """Re-read what another connection may have changed (vector dimensions after a rebuild)."""
        token = self._data_token()
        if token != self._seen_token:
            self._seen_token = token
            self._read_vector_state()

    @_locked
    def vector_search(self, query: Sequence[float], limit: int) -> list[tuple[str, float]]:
        self.refresh()
        if not self.vector_dims or len(query) != self.vector_dims:
            return []
        self._vec_queries += 1
        use_extension = self.vector_extension and self.vector_table_ok and self._vec_queries <= _MATRIX_AFTER_QUERIES
        if use_extension and not self._matrix_fresh():
            with _vec_errors():
                return self._vec_query(query, limit)
        return self._matrix_search(query, limit)

    def _vec_query(self, query: Sequence[float], limit: int) -> list[tuple[str, float]]:
        """sqlite-vec's nearest chunks (an all-zero stored vector has no distance: skipped)."""
        return [
            (row[0], 1.0 - float(row[1]))
            for row in self.conn.execute(
                "SELECT c.id, v.distance FROM (SELECT rowid, distance FROM chunks_vec WHERE embedding MATCH ? "
                "AND k = ?) AS v JOIN chunks AS c ON c.rid = v.rowid ORDER BY v.distance",
                (_blob(query), int(limit)),
            )
            if row[1] is not None and math.isfinite(row[1])
        ]

    def _data_token(self) -> Any:
        return (self.conn.execute("PRAGMA data_version").fetchall()[0][0], self._writes, self._opens)

    def _matrix_fresh(self) -> bool:
        return self._matrix is not None and self._matrix[0] == self._data_token()

    def _matrix_search(self, query: Sequence[float], limit: int) -> list[tuple[str, float]]:
        """Exact cosine search over a float32 matrix kept in memory while the index is unchanged."""
        import numpy as np

        q = np.asarray(query, dtype=np.float32)
        if not self._matrix_fresh():
            token = self._data_token()
            ids: list[str] = []
            rids: list[int] = []
            blobs: list[bytes] = []
            for rid, cid, blob in self.conn.execute(
                "SELECT rid, id, embedding FROM chunks WHERE embedding IS NOT NULL AND length(embedding) = ?",
                (self.vector_dims * 4,),  # type: ignore[operator]
            ):
                rids.append(rid)
                ids.append(cid)
                blobs.append(blob)
            if blobs:
                m = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), -1).copy()
                norms = np.linalg.norm(m, axis=1, keepdims=True)
                np.divide(m, norms, out=m, where=norms > 0)
            else:
                m = np.zeros((0, self.vector_dims or 0), dtype=np.float32)
            self._matrix = (token, ids, m, np.asarray(rids, dtype=np.int64))
        _, ids, m, rid_of = self._matrix  # type: ignore[misc]
        if not ids:
            return []
        qn = float(np.linalg.norm(q))
        if qn == 0:
            return []
        scores = m @ (q / qn)
        k = min(int(limit), len(ids))
        top = np.argpartition(-scores, k - 1)[:k] if k < len(ids) else np.arange(len(ids))
        top = top[np.argsort(-scores[top], kind="stable")]
        self._read_meta(rid_of[top])
        return [(ids[i], float(scores[i])) for i in top if np.isfinite(scores[i])]

    # -- embedding cache ----------------------------------------------------------------------

    @_locked
    def cache_get(self, provider: str, model: str, provider_key: str, hashes: list[str]) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        for i in range(0, len(hashes), 400):
            part = hashes[i : i + 400]
            marks = ",".join("?" * len(part))
            for h, blob in self.conn.execute(
                f"SELECT hash, embedding FROM embedding_cache WHERE provider=? AND model=? AND provider_key=? "
                f"AND hash IN ({marks})",
                (provider, model, provider_key, *part),
            ):
                if blob:
                    out[h] = _unblob(blob)
        return out

    @_locked
    def cache_put(self, provider: str, model: str, provider_key: str, items: dict[str, Sequence[float]]) -> None:
        if not items:
            return
        now = _now_ms()
        with self._tx():
            self.conn.executemany(
                "INSERT OR REPLACE INTO embedding_cache(provider, model, provider_key, hash, embedding, dims, "
                "updated_at) VALUES (?,?,?,?,?,?,?)",
                [(provider, model, provider_key, h, _blob(v), len(v), now) for h, v in items.items() if len(v)],
            )

    @_locked
    def cache_prune(self, max_entries: int) -> int:
        count = self.conn.execute("SELECT count(*) FROM embedding_cache").fetchall()[0][0]
        excess = count - max_entries
        if excess <= 0:
            return 0
        with self._tx():
            self.conn.execute(
                "DELETE FROM embedding_cache WHERE rowid IN "
                "(SELECT rowid FROM embedding_cache ORDER BY updated_at ASC LIMIT ?)",
                (excess,),
            )
        return excess

    @_locked
    def copy_cache_from(self, other: "SQLiteStore") -> None:
        """Copy another index's embedding cache into this one (a rebuild re-embeds nothing)."""
        with other._lock:
            rows = other.conn.execute(
                "SELECT provider, model, provider_key, hash, embedding, dims, updated_at FROM embedding_cache"
            ).fetchall()
        with self._tx():
            self.conn.executemany("INSERT OR REPLACE INTO embedding_cache VALUES (?,?,?,?,?,?,?)", rows)

    # -- status -------------------------------------------------------------------------------

    @_locked
    def counts(self) -> StoreCounts:
        self.refresh()
        rows = self.conn.execute(
            "SELECT 'f', source, count(*) FROM files GROUP BY source UNION ALL "
            "SELECT 'c', source, count(*) FROM chunks WHERE part = 0 GROUP BY source UNION ALL "
            "SELECT 'e', '', count(*) FROM embedding_cache"
        ).fetchall()
        by_source: dict[str, list[int]] = {}
        cache = 0
        for kind, source, n in rows:
            if kind == "e":
                cache = n
                continue
            entry = by_source.setdefault(source, [0, 0])
            entry[0 if kind == "f" else 1] = n
        files = sum(v[0] for v in by_source.values())
        chunks = sum(v[1] for v in by_source.values())
        return StoreCounts(files, chunks, {k: (v[0], v[1]) for k, v in by_source.items()}, cache)

    @_locked
    def has_content(self) -> bool:
        return bool(self.conn.execute("SELECT 1 FROM chunks LIMIT 1").fetchall())

    # -- atomic rebuild -----------------------------------------------------------------------

    @contextlib.contextmanager
    def rebuild(self) -> Iterator["SQLiteStore"]:
        """Build a new index beside this one and swap it in when the block succeeds.

        The new index starts with this index's embedding cache. The swap copies it into the live
        file with SQLite's backup API inside one transaction, so readers in other processes see
        the old index or the new one, never a half-built one. On error the live index is
        untouched and the temporary file is removed.
        """
        tmp_path = self.path.with_name(f"{self.path.name}.tmp-{uuid.uuid4().hex[:12]}")
        try:
            tmp = SQLiteStore(
                tmp_path,
                vector_enabled=self.vector_enabled,
                extension_path=self.extension_path,
                fts_tokenizer=self.fts_tokenizer,
            )
        except BaseException:  # e.g. a full disk: the half-created file must not stay behind
            remove_index_files(tmp_path)
            raise
        try:
            # The temporary index is thrown away on any failure: it needs no durability until
            # the swap, which the live index's own journal protects.
            tmp.conn.execute("PRAGMA journal_mode=MEMORY")
            tmp.conn.execute("PRAGMA synchronous=OFF")
            tmp.copy_cache_from(self)
            yield tmp
            with self._lock:
                with self.conn.backup("main", tmp.conn, "main") as backup:
                    backup.step(-1)
                self._writes += 1
                self._matrix = None
                self.fts_available = tmp.fts_available
                self._read_vector_state()
        finally:
            try:
                tmp.close()
            finally:
                remove_index_files(tmp_path)


#: How many times opening retries an index that another process holds locked (about 10 s in all).
_OPEN_ATTEMPTS = 14

def remove_index_files(path: Path) -> None:
    """Delete an index file and its journal / WAL / shared-memory companions."""
    for suffix in ("", "-journal", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(f"{path}{suffix}")


def remove_stale_temp_files(path: Path) -> int:
    """Remove leftovers of rebuilds that crashed (call only while holding the sync lock)."""
    n = 0
    for p in path.parent.glob(f"{glob.escape(path.name)}.tmp-*"):  # an agent id "*" is no pattern
        with contextlib.suppress(OSError):
            os.remove(p)
            n += 1
    return n


class SQLiteBackend(StoreBackend):
    """One SQLite index file per agent; syncs are serialised by a ``<file>.lock`` file lock."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        vector_enabled: bool = True,
        extension_path: str | None = None,
        fts_tokenizer: str = "cjk",
        namespace_path: Callable[[str], str | os.PathLike[str]] | None = None,
    ) -> None:
        self.path = Path(path)
        self.location = str(self.path)
        self._options = {"vector_enabled": vector_enabled, "extension_path": extension_path, "fts_tokenizer": fts_tokenizer}
        self._namespace_path = namespace_path

    def open(self) -> SQLiteStore:
        return SQLiteStore(self.path, **self._options)  # type: ignore[arg-type]

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
        return SQLiteStore(self.namespace_path(agent_id), read_only=True, **self._options)  # type: ignore[arg-type]

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
