"""One SQLite index file: :class:`SQLiteStore` (its connection, the file it follows, transactions,
the index identity, counts and the atomic rebuild), made of the parts in this package."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import apsw

from ...errors import StoreError
from ..base import CorruptIndexError, MissingIndexError, Store, StoreCounts, VectorCounts
from ..bm25 import Bm25Index
from .cache import _EmbeddingCache
from .common import VectorTableError, _locked
from .schema import (_ADDED_COLUMNS, _OPEN_ATTEMPTS, _POSTINGS, _POSTINGS_OBJECTS, _SCHEMA, _SCHEMA_OBJECTS,
                     _WINDOWS_INDEX, SCHEMA_VERSION,
                     _check_file_header, _Schema, remove_index_files, remove_stale_temp_files)
from .search import _Search
from .writes import _Writes

log = logging.getLogger("clawmem")

META_KEY = "memory_index_meta_v1"


@dataclasses.dataclass(frozen=True)
class SQLiteOptions:
    """How an index file is opened (the keyword arguments of :class:`SQLiteStore` but
    ``read_only``): kept by the backend, and by a store for the files of its rebuilds."""

    vector_enabled: bool = True
    extension_path: str | None = None
    fts_tokenizer: str = "cjk"

    def open(self, path: str | os.PathLike[str], *, read_only: bool = False) -> "SQLiteStore":
        """An :class:`SQLiteStore` on ``path`` with these options."""
        return SQLiteStore(path, read_only=read_only, **dataclasses.asdict(self))


class SQLiteStore(_Schema, _Writes, _Search, _EmbeddingCache, Store):
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
        self._matrix: tuple[Any, list[str], Any, Any, list[tuple[str, str, int, int]]] | None = None
        #: A keyword search run ahead (:meth:`prepare_keyword_search`): token, terms, limit, hits.
        self._kw_ahead: tuple[Any, tuple[str, ...], int, list[tuple[str, float]]] | None = None
        #: A vector scan run ahead on another thread (:meth:`prepare_vector_search`).
        self._vec_ahead: Any = None
        self._seen_token: Any = None
        self._bm25: tuple[Any, Bm25Index] | None = None
        self._kw_token: Any = None
        self._hits_cache: tuple[Any, int, dict[str, int]] | None = None
        self._kw_queries = 0
        self._query_tokenizer: Any = None
        self._meta_memo: tuple[Any, dict[str, tuple[str, str, int, int]]] = (None, {})
        self._vector_counts: tuple[Any, VectorCounts] | None = None
        #: Whether the index has ``idx_chunks_windows`` (chunks counted without reading rows).
        self.windows_index = False
        #: Guards the connection and the caches (a ``MemoryIndex`` is shared by threads).
        self._lock = threading.RLock()
        self._open()

    @property
    def options(self) -> SQLiteOptions:
        """The options this store was opened with (a rebuild opens its file with them)."""
        return SQLiteOptions(self.vector_enabled, self.extension_path, self.fts_tokenizer)

    # -- connection ---------------------------------------------------------------------------

    @property
    def conn(self) -> apsw.Connection:
        if self._conn is None:
            raise StoreError(f"index {self.path} is closed")
        return self._conn

    def _open(self, attempt: int = 0) -> None:
        from ...discovery import is_valid_name, printable_name

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
            self.windows_index = not complete or "idx_chunks_windows" in names
            if not self.windows_index and not self.read_only:
                # an index of an earlier release: add it now if nobody is writing
                self.windows_index = self._add_if_idle(_WINDOWS_INDEX)
            if not self.read_only and not _POSTINGS_OBJECTS <= names:
                # the packed keyword postings' tables (an index of an earlier release, or a new
                # one): now if nobody is writing; searches do without until then
                self._add_if_idle(_POSTINGS)
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

    def _add_if_idle(self, ddl: str) -> bool:
        """Run ``ddl`` (objects added since an earlier release) in a transaction of its own if
        nobody is writing: never waits for the write lock. Whether it ran."""
        self.conn.setbusytimeout(0)
        try:
            with self._tx():
                self.conn.execute(ddl)
            return True
        except apsw.BusyError:
            return False
        finally:
            self.conn.setbusytimeout(10_000)

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
        self._kw_ahead = self._vec_ahead = None

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
        import uuid

        tmp_path = self.path.with_name(f"{self.path.name}.tmp-{uuid.uuid4().hex[:12]}")
        try:
            tmp = self.options.open(tmp_path)
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
            tmp.settle()  # the new index's keyword postings, swapped in with it
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
