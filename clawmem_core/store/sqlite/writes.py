"""Writes of the SQLite store: the vector table kept in step with the chunks, files and chunks
replaced, touched and deleted, vectors given to pending chunks, and small bookkeeping values."""

from __future__ import annotations

import logging
from typing import Iterable, Sequence

import apsw

from ...text import index_document
from ..base import ChunkRow, FileRow, FileState
from ..bm25 import drop_staged_postings, fts5_totals, install_postings, stage_postings
from .common import _batches, _blob, _locked, _now_ms, _vec_errors

log = logging.getLogger("clawmem")


#: Keyword rows in the index below which no postings are written: a term's first use through
#: FTS5's vocabulary costs in proportion to its instances (0.18 ms a query term at 10k rows, 1.16
#: at 100k), while a rewrite reads every instance (about 30 us a row), so a
#: smaller index pays more to write them than its searches save.
SETTLE_MIN_INDEX_ROWS = 50_000
#: Keyword rows above the postings' watermark before a sync rewrites the packed postings (a
#: search reads those rows' terms from FTS5, a ``MATCH`` above the watermark) ...
SETTLE_MIN_ROWS = 256
#: ... and at least this share of the rows below it: the rewrite reads the whole FTS5 index, so
#: it is done once per so many rows written, not at every sync.
SETTLE_SHARE = 0.125


class _Writes:
    """The writes of :class:`~clawmem_core.store.sqlite.SQLiteStore`."""

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

    @_locked
    def file_states_of(self, source: str, paths: Iterable[str]) -> dict[str, FileState]:
        """:meth:`file_states` of only ``paths`` (one lookup per 500 paths)."""
        out: dict[str, FileState] = {}
        for part, marks in _batches(list(paths)):
            for row in self.conn.execute(
                f"SELECT path, hash, size, mtime, ctime, ino FROM files WHERE source=? AND path IN ({marks})",
                (source, *part),
            ):
                out[row[0]] = row
        return out

    @_locked
    def file_count(self, source: str) -> int:
        return int(self.conn.execute("SELECT count(*) FROM files WHERE source=?", (source,)).fetchall()[0][0])

    def _delete_chunks(self, source: str, paths: Sequence[str], with_vectors: bool) -> None:
        """Delete the chunks (keywords, vectors) of ``paths``: one lookup per 500 paths, not per file."""
        conn = self.conn
        rids: list[int] = []
        for part, marks in _batches(paths):
            sql = f"SELECT rid FROM chunks WHERE source=? AND path IN ({marks})"
            rids += [r[0] for r in conn.execute(sql, (source, *part))]
        for part_rids, marks in _batches(rids):
            if self.fts_available:
                conn.execute(f"DELETE FROM chunks_fts WHERE rowid IN ({marks})", part_rids)
            if with_vectors:
                with _vec_errors():
                    # one rowid at a time: sqlite-vec answers ``rowid IN (...)`` by a scan of the table
                    conn.executemany("DELETE FROM chunks_vec WHERE rowid = ?", [(r,) for r in part_rids])
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
    def settle(self) -> None:
        """Rewrite the packed keyword postings (:func:`~..bm25.stage_postings` in a read
        transaction, :func:`~..bm25.install_postings` in a short write transaction) once the index
        holds :data:`SETTLE_MIN_INDEX_ROWS` keyword rows and those written above their watermark
        are :data:`SETTLE_MIN_ROWS` and :data:`SETTLE_SHARE` of the rows below it; nothing
        otherwise (one count of the new rows)."""
        if self.read_only or not self.fts_available or self.fts_tokenizer == "trigram":
            return
        conn = self.conn
        try:
            (upto,) = conn.execute("SELECT upto FROM chunks_fts_postings_upto WHERE id = 0").fetchall()[0]
        except (apsw.SQLError, IndexError):  # an index of an earlier release not converted yet
            return
        rows, _ = fts5_totals(conn, "chunks_fts")
        if rows < SETTLE_MIN_INDEX_ROWS:
            return
        (above,) = conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM chunks_fts_docsize WHERE id > ? LIMIT ?)",
            (int(upto), max(SETTLE_MIN_ROWS, int(rows * SETTLE_SHARE)) + 1),
        ).fetchall()[0]
        if above < SETTLE_MIN_ROWS or above < (rows - above) * SETTLE_SHARE:
            return
        # The pass over the index runs in a read transaction (WAL: other connections commit
        # meanwhile), writing the postings into a TEMP table (the connection's temporary database:
        # no lock of the main file); the write lock is taken only to copy them in, and only if no
        # other connection committed since the pass's snapshot (``PRAGMA data_version``; this
        # connection's own writes wait for the store's lock, held here). Else they are dropped and
        # a later sync settles again (the rows above the watermark are read from FTS5 meanwhile).
        try:
            conn.execute("BEGIN")
            try:
                (version,) = conn.execute("PRAGMA data_version").fetchall()[0]  # starts the snapshot
                top, _ = stage_postings(conn, "chunks_fts")
            except BaseException as exc:
                if not conn.getautocommit():
                    conn.execute("ROLLBACK")
                if isinstance(exc, (apsw.FullError, apsw.IOError, apsw.CantOpenError)):
                    # the TEMP table lives in SQLite's temporary directory (``TMPDIR``), which may be
                    # full or unwritable where the index is not: the postings only speed searches up,
                    # so the sync goes on without them (the rows above the watermark read from FTS5)
                    log.warning("keyword postings not rewritten (temporary storage: %s); searches read "
                                "FTS5's vocabulary instead", exc)
                    return
                raise
            conn.execute("COMMIT")  # ends the read (and the TEMP table's writes)
            with self._tx():
                if conn.execute("PRAGMA data_version").fetchall()[0][0] == version:
                    install_postings(conn, "chunks_fts", top)
        finally:
            if conn.getautocommit():
                drop_staged_postings(conn, "chunks_fts")

    @_locked
    def delete_files(self, source: str, paths: Iterable[str]) -> None:
        paths = list(paths)
        with self._tx():
            self._delete_chunks(source, paths, self._vectors_in_step())
            self.conn.executemany("DELETE FROM files WHERE source=? AND path=?", [(source, p) for p in paths])
