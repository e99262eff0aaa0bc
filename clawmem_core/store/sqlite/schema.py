"""The SQLite index file and its schema: the DDL and the columns added since the first version,
the checks of a file before and after SQLite opens it, the extensions it loads (FTS5, sqlite-vec),
and what happens to damaged files and leftovers of rebuilds."""

from __future__ import annotations

import contextlib
import glob
import os
import time
from pathlib import Path

import apsw

from ..base import CorruptIndexError

SCHEMA_VERSION = 1
#: FTS5 tokenizer per ``store.fts.tokenizer`` setting.
FTS_TOKENIZERS = {
    "cjk": "porter unicode61 remove_diacritics 2 tokenchars '_'",
    "unicode61": "unicode61",
    "trigram": "trigram case_sensitive 0",
}

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
#: The window rows, so that counting the chunks reads no row (added after the first schema: an
#: index without it gets it on its next writable open, and is counted the slow way until then).
_WINDOWS_INDEX = "CREATE INDEX IF NOT EXISTS idx_chunks_windows ON chunks (rid) WHERE part = 1"
#: The packed keyword postings (see :mod:`clawmem_core.store.bm25`), added after the first schema:
#: an index without them gets them on its next writable open (searches read FTS5's vocabulary
#: until a sync writes them). A chunk row given an id at or below the watermark (an id freed by a
#: delete, reused) lowers the watermark below it: the trigger lives in the file, so every writer,
#: of any version, keeps the postings true.
_POSTINGS = """
CREATE TABLE IF NOT EXISTS chunks_fts_postings (term TEXT PRIMARY KEY, n INTEGER NOT NULL, rows BLOB NOT NULL,
    tfs BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS chunks_fts_postings_upto (id INTEGER PRIMARY KEY CHECK (id = 0), upto INTEGER NOT NULL);
INSERT OR IGNORE INTO chunks_fts_postings_upto (id, upto) VALUES (0, 0);
CREATE TRIGGER IF NOT EXISTS chunks_fts_postings_reused AFTER INSERT ON chunks
WHEN new.rid <= (SELECT upto FROM chunks_fts_postings_upto WHERE id = 0)
BEGIN UPDATE chunks_fts_postings_upto SET upto = new.rid - 1 WHERE id = 0; END;
"""
_POSTINGS_OBJECTS = {"chunks_fts_postings", "chunks_fts_postings_upto", "chunks_fts_postings_reused"}
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



class _Schema:
    """The schema checks and the extensions of :class:`~clawmem_core.store.sqlite.SQLiteStore`."""

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
        self.conn.execute(_WINDOWS_INDEX)

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
