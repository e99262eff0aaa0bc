"""The SQLite store: one file per agent holding files, chunks, FTS5 keywords, sqlite-vec vectors,
the embedding cache and the index identity (meta).

It uses ``apsw``, which bundles a recent SQLite with FTS5 and can load extensions on every
platform (many Python builds' ``sqlite3`` cannot). When sqlite-vec cannot load, vectors are still
stored and searched with NumPy in process.

The package's modules: :mod:`.schema` (the file, its DDL and the columns added since, checks
before and after opening, FTS5 and sqlite-vec, damaged files and leftovers), :mod:`.writes`
(files, chunks, vectors and bookkeeping values, and the packed keyword postings written at the
end of a sync), :mod:`.search` (reads, keyword and vector
search), :mod:`.cache` (the embedding cache), :mod:`.common` (the store's lock, vector blobs),
:mod:`.store` and :mod:`.backend` (the classes that put them together).
"""

from __future__ import annotations

from ...text import quote_fts
from .backend import SQLiteBackend
from .common import VectorTableError
from .schema import (_ADDED_COLUMNS, _COLUMNS, _SCHEMA, FTS_TOKENIZERS, KEEP_CORRUPT, SCHEMA_VERSION,
                     _sqlite_vec_path, quarantine_index, remove_index_files, remove_stale_temp_files)
from .search import _BM25_AFTER_QUERIES, _MATRIX_AFTER_QUERIES, _META_MEMO_MAX
from .store import META_KEY, SQLiteOptions, SQLiteStore

__all__ = [
    "FTS_TOKENIZERS", "KEEP_CORRUPT", "META_KEY", "SCHEMA_VERSION", "SQLiteBackend", "SQLiteOptions", "SQLiteStore",
    "VectorTableError", "quarantine_index", "quote_fts", "remove_index_files", "remove_stale_temp_files",
]
