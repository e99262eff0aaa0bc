"""Reads and searches of the SQLite store: pending chunks and vector counts, chunk metadata (kept
for a search's candidates), keyword search (FTS5's ``bm25()``, or the same scores computed in
process once the index stops changing) and vector search (sqlite-vec, or a NumPy matrix)."""

from __future__ import annotations

import logging
import math
import threading
from typing import Any, Iterable, Sequence

import apsw

from ...text import quote_fts
from ..base import ChunkRow, VectorCounts
from ..bm25 import Bm25Index, StaleStatistics, fts5_totals
from .common import _batches, _blob, _locked, _vec_errors
from .schema import FTS_TOKENIZERS

log = logging.getLogger("clawmem")

#: Queries served by sqlite-vec before the process keeps a NumPy matrix of the vectors.
_MATRIX_AFTER_QUERIES = 2
#: Keyword queries served by FTS5's bm25() on an unchanged index before the process scores them
#: itself (:class:`~.bm25.Bm25Index`, same scores): a short-lived process or an index that changes
#: between searches never pays for reading the statistics.
_BM25_AFTER_QUERIES = 2
#: Candidate metadata kept between the candidate lists and :meth:`SQLiteStore.get_chunk_meta`.
_META_MEMO_MAX = 20_000


class _Search:
    """The reads and searches of :class:`~clawmem_core.store.sqlite.SQLiteStore`."""

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
        for part, marks in _batches(ids):
            out.update(r[0] for r in self.conn.execute(f"SELECT id FROM chunks WHERE pending = 1 AND id IN ({marks})", part))
        return out

    @_locked
    def vector_counts(self) -> VectorCounts:
        """How many chunks have their vectors, of how many, and the characters still to embed
        (counted once per state of the index)."""
        token = self._data_token()
        if self._vector_counts is not None and self._vector_counts[0] == token:
            return self._vector_counts[1]
        if self.windows_index:  # from the indexes: no chunk row read but the pending ones
            total, pending, chars = self.conn.execute(
                "SELECT (SELECT count(*) FROM chunks) - (SELECT count(*) FROM chunks WHERE part = 1), "
                "count(*), coalesce(sum(length(text)), 0) FROM chunks WHERE pending = 1 AND part = 0"
            ).fetchall()[0]
        else:
            total, pending, chars = self.conn.execute(
                "SELECT count(*), coalesce(sum(pending), 0), coalesce(sum(CASE WHEN pending = 1 THEN length(text) END), 0) "
                "FROM chunks WHERE part = 0"
            ).fetchall()[0]
        counts = VectorCounts(int(total) - int(pending), int(total), int(chars))
        self._vector_counts = (token, counts)
        return counts

    @_locked
    def get_chunk_meta(self, ids: Iterable[str]) -> dict[str, tuple[str, str, int, int]]:
        """``id -> (path, source, start_line, end_line)``, without reading any text."""
        ids = list(ids)
        out: dict[str, tuple[str, str, int, int]] = {}
        token, memo = self._meta_memo
        if memo and token == self._data_token():  # read with this search's candidates
            out = {i: memo[i] for i in ids if i in memo}
            ids = [i for i in ids if i not in out]
        for part, marks in _batches(ids):
            for row in self.conn.execute(
                f"SELECT id, path, source, start_line, end_line FROM chunks WHERE id IN ({marks})", part
            ):
                out[row[0]] = (row[1], row[2], row[3], row[4])
        return out

    def _read_meta(self, rids: Iterable[int], positions: Any = None) -> dict[int, str]:
        """``rid -> id`` of search candidates; their metadata is kept for :meth:`get_chunk_meta`
        while the index is unchanged (looked up by rid, which is cheaper than by id). Rows of the
        vector matrix (``positions``: theirs, when the caller knows them) are read from it, the
        others from the index."""
        token = self._data_token()
        memo_token, memo = self._meta_memo
        if memo_token != token or len(memo) > _META_MEMO_MAX:
            memo = {}
            self._meta_memo = (token, memo)
        rids = [int(r) for r in rids]
        out: dict[int, str] = {}
        matrix = self._matrix
        if matrix is not None and matrix[0] == token and rids:
            _, ids, _, rid_of, metas = matrix
            if positions is None:
                import numpy as np

                want = np.asarray(rids, dtype=np.int64)
                positions = np.minimum(np.searchsorted(rid_of, want), max(len(rid_of) - 1, 0))
                positions = [int(p) if len(rid_of) and rid_of[p] == r else -1 for p, r in zip(positions, rids)]
            rest = []
            for rid, p in zip(rids, positions):
                if p < 0:
                    rest.append(rid)
                    continue
                cid = ids[p]
                out[rid] = cid
                memo[cid] = metas[p]
            rids = rest
        for part, marks in _batches(rids):
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
        for part, marks in _batches(ids):
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
        ahead, self._kw_ahead = self._kw_ahead, None
        if ahead is not None and ahead[1] == tuple(terms) and ahead[2] == int(limit) and ahead[0] == self._data_token():
            return list(ahead[3])  # run ahead on this state of the index (prepare_keyword_search)
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

    @_locked
    def prepare_keyword_search(self, terms: list[str], limit: int) -> None:
        """:meth:`keyword_search` now, its answer kept for the next call with the same arguments
        if the index is unchanged by then (see :meth:`Store.prepare_keyword_search`)."""
        self._kw_ahead = None
        if not self.fts_available or not terms:
            return
        token = self._data_token()
        hits = self.keyword_search(terms, limit)
        self._kw_ahead = (token, tuple(terms), int(limit), hits)

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
            hits = self._bm25[1].search(tokens, int(limit), [quote_fts(t) for t in terms])
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
            rows, _ = fts5_totals(self.conn, "chunks_fts")
            self._hits_cache = (token, rows, {})
        _, rows, known = self._hits_cache
        out = []
        for term in terms:
            n = known.get(term)
            if n is None:
                n = self._cached_term_rows(term, token)
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

    def _cached_term_rows(self, term: str, token: Any) -> int | None:
        """Rows holding ``term`` from the in-process keyword scoring's postings of its token, when
        it has them for this state of the index (a keyword search just read them), else ``None``."""
        bm25 = self._bm25
        if bm25 is None or bm25[0] != token or self.fts_tokenizer == "trigram":
            return None
        tokens = self._fts_tokens([term])
        if tokens is None:
            return None
        return bm25[1].cached_rows(tokens[0])

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
        ahead, self._vec_ahead = self._vec_ahead, None  # used once at most, never kept
        self.refresh()
        if not self.vector_dims or len(query) != self.vector_dims:
            return []
        self._vec_queries += 1
        use_extension = self.vector_extension and self.vector_table_ok and self._vec_queries <= _MATRIX_AFTER_QUERIES
        if use_extension and not self._matrix_fresh():
            with _vec_errors():
                return self._vec_query(query, limit)
        return self._matrix_search(query, limit, ahead)

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

    def _matrix_search(self, query: Sequence[float], limit: int, ahead: "_VectorScan | None" = None
                       ) -> list[tuple[str, float]]:
        """Exact cosine search over a float32 matrix kept in memory while the index is unchanged,
        with each row's chunk id and metadata (a search reads nothing else from the index).
        ``ahead``: the same scan run on another thread (:meth:`prepare_vector_search`), used when
        it scanned this matrix for this query."""
        import numpy as np

        q = np.asarray(query, dtype=np.float32)
        if not self._matrix_fresh():
            ahead = None
            token = self._data_token()
            ids: list[str] = []
            rids: list[int] = []
            blobs: list[bytes] = []
            metas: list[tuple[str, str, int, int]] = []
            shared: dict[str, str] = {}  # one string per path, not one per chunk
            for rid, cid, path, source, start, end, blob in self.conn.execute(
                "SELECT rid, id, path, source, start_line, end_line, embedding FROM chunks "
                "WHERE embedding IS NOT NULL AND length(embedding) = ?",
                (self.vector_dims * 4,),  # type: ignore[operator]
            ):
                rids.append(rid)
                ids.append(cid)
                blobs.append(blob)
                metas.append((shared.setdefault(path, path), shared.setdefault(source, source), start, end))
            if blobs:
                m = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), -1).copy()
                norms = np.linalg.norm(m, axis=1, keepdims=True)
                np.divide(m, norms, out=m, where=norms > 0)
            else:
                m = np.zeros((0, self.vector_dims or 0), dtype=np.float32)
            del blobs
            self._matrix = (token, ids, m, np.asarray(rids, dtype=np.int64), metas)
        matrix = self._matrix
        got = None
        if (ahead is not None and ahead.matrix is matrix and ahead.limit == int(limit)
                and (ahead.query is query or list(ahead.query) == list(query))):
            ahead.done.wait()  # the scan of another thread (prepare_vector_search): arithmetic only
            got = ahead.result
        if got is None:
            got = _scan(matrix, q, limit)  # type: ignore[arg-type]
        top, best = got
        if not len(top):
            return []
        _, ids, _, rid_of, _ = matrix  # type: ignore[misc]
        positions = top.tolist()
        self._read_meta(rid_of[top].tolist(), positions)
        return [(ids[i], s) for i, s in zip(positions, best.tolist())]

    def prepare_vector_search(self, query: Sequence[float], limit: int) -> None:
        """The scan of the vector matrix kept in memory, for the next :meth:`vector_search` with
        these arguments while that matrix is still the index's. Runs on another thread than the
        search, without the store's lock: it reads the matrix (never changed, only replaced) and
        nothing else; the search checks that the matrix is current before it uses the result."""
        matrix = self._matrix
        if matrix is None or not self.vector_dims or len(query) != self.vector_dims:
            return
        ahead = _VectorScan(matrix, query, int(limit))
        self._vec_ahead = ahead
        try:
            import numpy as np

            ahead.result = _scan(matrix, np.asarray(query, dtype=np.float32), limit)
        finally:
            ahead.done.set()


class _VectorScan:
    """A scan of one vector matrix run ahead (:meth:`_Search.prepare_vector_search`)."""

    def __init__(self, matrix: Any, query: Sequence[float], limit: int) -> None:
        self.matrix, self.query, self.limit = matrix, query, limit
        self.done = threading.Event()
        self.result: tuple[Any, Any] | None = None


def _scan(matrix: Any, q: Any, limit: int) -> tuple[Any, Any]:
    """Positions and cosines of the best ``limit`` rows of ``matrix`` (unit rows, see
    :meth:`_Search._matrix_search`) for the float32 query ``q``, best first (ties by position)."""
    import numpy as np

    _, ids, m, _, _ = matrix
    qn = float(np.linalg.norm(q))
    if not ids or qn == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
    scores = m @ (q / qn)
    k = min(int(limit), len(ids))
    top = np.argpartition(-scores, k - 1)[:k] if k < len(ids) else np.arange(len(ids))
    top = top[np.argsort(-scores[top], kind="stable")]
    best = scores[top]
    finite = np.isfinite(best)
    if not finite.all():
        top, best = top[finite], best[finite]
    return top, best
