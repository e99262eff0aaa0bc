"""BM25 of FTS5 keyword queries computed in process, for long-lived processes on large indexes.

FTS5's ``bm25()`` scores every row that matches any term of an OR query, one row at a time, and
common terms match most rows. Here each term's per-row contributions are computed once from the
FTS5 index's own statistics (row count, document lengths, term instances) and kept while the index
is unchanged; a query adds up the arrays of its terms. The formula, the constants and the order of
the floating-point operations are those of FTS5's ``bm25()``, so the scores are the same numbers.

A term's rows and counts come from its packed postings when the index has them (``<table>_postings``,
written by :func:`write_postings` at the end of a sync: one row per term, read in one lookup) for the
rows up to the postings' watermark (``<table>_postings_upto``), and from FTS5 for the rows written
since (a ``MATCH`` of the term above the watermark); otherwise from FTS5's ``instance`` vocabulary,
which visits every instance of the term. Deleted rows are left out of the postings by the rows'
lengths (``<table>_docsize``, read at load); a row id reused after the postings were written lowers
the watermark below it (the store's trigger), so an old row's postings never attach to a new row.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    import apsw
    import numpy as np

from ..tuning import BM25_B as B, BM25_K1 as K1  # FTS5's ``bm25()`` constants
#: Term postings kept per index state, counted in rows (about 6 bytes each).
MAX_CACHED_POSTINGS = 8_000_000
#: Instances of a term below which :func:`write_postings` leaves its postings out: FTS5's
#: vocabulary reads so few in about the time of a lookup of packed postings.
POSTINGS_MIN_INSTANCES = 64
#: Rows of the score array sampled per row asked for, to bound the limit-th score before the
#: cut when most rows match (a partition of the sample, not of every row).
_SAMPLE_PER_LIMIT = 32
#: Name of the FTS5 auxiliary function giving a row's count of a one-phrase query's term.
_TF_FUNCTION = "clawmem_tf"


def read_varint(buf: bytes, pos: int = 0) -> tuple[int, int]:
    """Decode one SQLite varint (as FTS5 writes them) at ``pos``: ``(value, next position)``."""
    value = 0
    for i in range(8):
        byte = buf[pos + i]
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, pos + i + 1
    return (value << 8) | buf[pos + 8], pos + 9


class StaleStatistics(Exception):
    """The index changed while its statistics were being read."""


class Bm25Index:
    """BM25 statistics of one FTS5 table (one column, ``detail=full``) at one state of the index.

    Build it with :meth:`load`; it is valid while the index is unchanged (the caller keeps the
    state token). :meth:`search` gives the rows of ``bm25()``'s ``ORDER BY rank LIMIT n``.
    """

    def __init__(self, conn: "apsw.Connection", table: str, rows: int, tokens: int, doc_len: "np.ndarray",
                 live: "np.ndarray | None" = None, upto: int | None = None) -> None:
        self.conn = conn
        self.table = table
        self.rows = rows
        #: Per row id: whether the row is in the index (its postings count); ``None`` without postings.
        self.live = live
        #: The postings' watermark: rows up to it are read from ``<table>_postings`` (``None``: none).
        self.upto = upto
        avgdl = float(tokens) / float(rows) if rows else 1.0
        #: Per row: ``k1 * (1 - b + b * D / avgdl)``, evaluated as fts5Bm25Function does.
        self.length_norm = K1 * (1 - B + B * doc_len / avgdl)
        self._terms: OrderedDict[str, tuple[Any, Any, float]] = OrderedDict()
        self._cached = 0
        self._lock = threading.Lock()

    @classmethod
    def load(cls, conn: "apsw.Connection", table: str) -> "Bm25Index":
        """Read the row count, the token total and every row's length (FTS5's shadow tables)."""
        import numpy as np

        _instances_table(conn, table)
        rows, tokens = fts5_totals(conn, table)
        ids: list[int] = []
        sizes: list[int] = []
        for rid, sz in conn.execute(f'SELECT id, sz FROM "{table}_docsize"'):
            ids.append(rid)
            sizes.append(_column_total(sz))
        doc_len = np.zeros((max(ids) + 1) if ids else 1, dtype=np.float64)
        where = np.asarray(ids, dtype=np.int64)
        doc_len[where] = sizes
        upto = postings_upto(conn, table)
        live = None
        if upto is not None:
            live = np.zeros(len(doc_len), dtype=bool)
            live[where] = True
            conn.register_fts5_function(_TF_FUNCTION, _instance_count)
        return cls(conn, table, rows, tokens, doc_len, live, upto)

    def _postings(self, token: str, phrase: str | None = None) -> tuple[Any, Any, float]:
        """Rows holding ``token`` (ascending), the term's count in each, and its IDF (cached).
        ``phrase``: an FTS5 query matching exactly the rows holding ``token`` (the term as the
        user wrote it), with which the rows written after the postings are found."""
        with self._lock:
            hit = self._terms.get(token)
            if hit is not None:
                self._terms.move_to_end(token)
                return hit
        import numpy as np

        got = self._stored_postings(token, phrase)
        if got is not None:
            rows, tf = got
        else:
            (docs,) = self.conn.execute(
                f'SELECT group_concat(doc) FROM temp."{self.table}_instances" WHERE term = ?', (token,)
            ).fetchall()[0]
            rows, tf = _rows_and_counts(docs)
        if len(rows) and rows[-1] >= len(self.length_norm):
            raise StaleStatistics(f"row {rows[-1]} was written after the statistics were read")
        hits = len(rows)
        # fts5_aux.c: IDF = log((N - nHit + 0.5) / (nHit + 0.5)), at least 1e-6.
        idf = math.log((self.rows - hits + 0.5) / (hits + 0.5)) if self.rows else 1e-6
        if idf <= 0.0:
            idf = 1e-6
        entry = (
            rows.astype(np.int32 if len(self.length_norm) < 2**31 else np.int64),
            tf.astype(np.uint16 if hits == 0 or tf.max() < 2**16 else np.uint32),
            idf,
        )
        with self._lock:
            if token not in self._terms:
                self._terms[token] = entry
                self._cached += hits
            while self._cached > MAX_CACHED_POSTINGS and len(self._terms) > 1:
                _, (old, _, _) = self._terms.popitem(last=False)
                self._cached -= len(old)
        return entry

    def _stored_postings(self, token: str, phrase: str | None) -> tuple[Any, Any] | None:
        """The rows and counts of ``token`` from its packed postings (less the rows deleted since)
        and, above the watermark, from FTS5; ``None`` when the index has no postings of it."""
        import numpy as np

        if self.upto is None or self.live is None or phrase is None:
            return None
        got = self.conn.execute(
            f'SELECT n, rows, tfs FROM "{self.table}_postings" WHERE term = ?', (token,)
        ).fetchall()
        if not got:
            return None
        rows, tf = unpack_postings(*got[0])
        # rows up to the watermark that are still in the index (a deleted row's id is beyond
        # ``live`` or False there; a reused id is above the watermark)
        keep = rows <= self.upto
        inside = rows < len(self.live)
        keep &= inside
        keep[inside] &= self.live[rows[inside]]
        if not keep.all():
            rows, tf = rows[keep], tf[keep]
        if self.upto + 1 < len(self.live) and self.live[self.upto + 1:].any():  # rows written since
            new = self.conn.execute(
                f'SELECT rowid, {_TF_FUNCTION}("{self.table}") FROM "{self.table}" WHERE "{self.table}" MATCH ? '
                "AND rowid > ? ORDER BY rowid",
                (phrase, self.upto),
            ).fetchall()
            if new:
                more = np.asarray(new, dtype=np.int64)
                rows = np.concatenate([rows, more[:, 0]])
                tf = np.concatenate([tf.astype(np.int64), more[:, 1]])
        return rows, tf

    def cached_rows(self, token: str) -> int | None:
        """How many rows hold ``token`` (FTS5's vocabulary ``doc`` count), when its postings are
        cached; ``None`` otherwise."""
        with self._lock:
            hit = self._terms.get(token)
        return None if hit is None else len(hit[0])

    def search(self, tokens: Sequence[str], limit: int, phrases: Sequence[str] | None = None
               ) -> list[tuple[int, float]]:
        """``(rowid, bm25)`` of the best ``limit`` rows matching any of ``tokens`` (one FTS5
        phrase each, repeats counted again as FTS5 does), best first; ties by rowid. ``phrases``:
        per token, an FTS5 query of it (see :meth:`_postings`); without them, a term's rows come
        from FTS5's vocabulary."""
        import numpy as np

        terms = [self._postings(t, phrases[i] if phrases is not None else None) for i, t in enumerate(tokens)]
        top_row = max((int(r[-1]) for r, _, _ in terms if len(r)), default=-1)
        if top_row < 0 or limit <= 0:
            return []
        norm = self.length_norm
        # fts5Bm25Function: score += idf * ((f * (k1 + 1.0)) / (f + k1 * (1 - b + b * D / avgdl))),
        # one addition per row and phrase, in phrase order, from 0.0, as FTS5 (a term's rows are
        # distinct, so each addition is one element's).
        if len(terms) == 1:
            rows, tf, idf = terms[0]
            freq = tf.astype(np.float64)
            found = rows.astype(np.int64)
            values = 0.0 + idf * ((freq * (K1 + 1.0)) / (freq + norm[rows]))
        else:
            scores = np.zeros(top_row + 1, dtype=np.float64)
            for rows, tf, idf in terms:
                freq = tf.astype(np.float64)
                # ``ufunc.at`` is faster here than ``scores[rows] += ...`` (a gather and a scatter)
                np.add.at(scores, rows, idf * ((freq * (K1 + 1.0)) / (freq + norm[rows])))
            # Every matching row scores above 0 (IDF >= 1e-6), and no other row does.
            if 4 * sum(len(rows) for rows, _, _ in terms) < len(scores):  # few matches: cut among them
                found = np.flatnonzero(scores)
            else:  # most rows match: keep the rows at least as good as a bound of the limit-th score
                # The limit-th best score of every SAMPLE_STRIDE-th row is at most the limit-th best of
                # all (the sample's best are rows of all): the rows scoring that much hold the best
                # ``limit`` and ties, about a stride's worth of rows each, cut exactly below.
                step = len(scores) // (_SAMPLE_PER_LIMIT * limit)
                sample = scores[::step] if step >= 2 else scores
                cut = len(sample) - limit
                kth = np.partition(sample, cut)[cut] if cut > 0 else 0.0
                found = np.flatnonzero(scores >= kth) if kth > 0 else np.flatnonzero(scores)
            values = scores[found]
        if len(found) > limit:  # the rows at least as good as the limit-th score
            cut = len(found) - limit
            kth = np.partition(values, cut)[cut]
            keep = values >= kth
            found, values = found[keep], values[keep]
        order = np.lexsort((found, -values))[:limit]  # by score, ties by rowid
        return [(int(r), -float(v)) for r, v in zip(found[order], values[order])]


def _instance_count(api: "apsw.FTS5ExtensionApi") -> int:
    """FTS5 auxiliary function: the instances of the query's phrases in the current row."""
    return api.inst_count


def postings_upto(conn: "apsw.Connection", table: str) -> int | None:
    """The watermark of ``table``'s packed postings: rows up to it have theirs written; ``None``
    when the index has none (an index written before them, or none written yet)."""
    import apsw

    try:
        got = conn.execute(f'SELECT upto FROM "{table}_postings_upto" WHERE id = 0').fetchall()
    except apsw.SQLError as exc:  # no such table: an index of an earlier version
        if "no such table" in str(exc):
            return None
        raise
    return int(got[0][0]) if got and got[0][0] and int(got[0][0]) > 0 else None


def pack_postings(rows: "np.ndarray", tf: "np.ndarray") -> tuple[int, bytes, bytes]:
    """``(n, rows, tfs)`` of one term: the rows' gaps (the first from 0) and the counts, each
    array in the narrowest of 1, 2, 4 or 8 bytes (little-endian) that holds it."""
    import numpy as np

    gaps = np.diff(rows, prepend=0)
    return len(rows), _narrow(gaps).tobytes(), _narrow(tf).tobytes()


def unpack_postings(n: int, rows: bytes, tfs: bytes) -> tuple["np.ndarray", "np.ndarray"]:
    """The rows (int64, ascending) and counts of :func:`pack_postings`."""
    import numpy as np

    n = int(n)
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    gaps = np.frombuffer(rows, dtype=_WIDTHS[len(rows) // n])
    return np.cumsum(gaps, dtype=np.int64), np.frombuffer(tfs, dtype=_WIDTHS[len(tfs) // n])


_WIDTHS = {1: "<u1", 2: "<u2", 4: "<u4", 8: "<i8"}


def _narrow(values: "np.ndarray") -> "np.ndarray":
    import numpy as np

    top = int(values.max()) if len(values) else 0
    dtype = "<u1" if top < 2**8 else "<u2" if top < 2**16 else "<u4" if top < 2**32 else "<i8"
    return np.ascontiguousarray(values, dtype=dtype)


#: Terms whose packed postings :func:`stage_postings` inserts at a time (the memory it holds).
POSTINGS_BATCH = 256


def write_postings(conn: "apsw.Connection", table: str) -> int:
    """(Re)write ``table``'s packed postings from FTS5's ``instance`` vocabulary (one pass over
    the index, in the caller's transaction): :func:`stage_postings` then :func:`install_postings`.
    Returns how many terms were written."""
    top, terms = stage_postings(conn, table)
    install_postings(conn, table, top)
    return terms


def staged_table(table: str) -> str:
    """The TEMP table in which :func:`stage_postings` writes ``table``'s postings."""
    return f'temp."{table}_postings_staged"'


def stage_postings(conn: "apsw.Connection", table: str) -> tuple[int, int]:
    """Write ``table``'s packed postings into a TEMP table (:func:`staged_table`, recreated): each
    term with at least :data:`POSTINGS_MIN_INSTANCES` instances, read from FTS5's ``instance``
    vocabulary, :data:`POSTINGS_BATCH` terms held at a time. It writes only the connection's
    temporary database, so it needs no more than a read transaction of the main one (the pass
    holds no write lock); run it in one, for one state of the index. Returns the highest row and
    how many terms were written."""
    staged = staged_table(table)
    _instances_table(conn, table)
    conn.execute(f"DROP TABLE IF EXISTS {staged}")
    conn.execute(f"CREATE TABLE {staged} (term TEXT NOT NULL, n INTEGER NOT NULL, rows BLOB NOT NULL, "
                 "tfs BLOB NOT NULL)")
    (top,) = conn.execute(f'SELECT coalesce(max(id), 0) FROM "{table}_docsize"').fetchall()[0]
    insert = f"INSERT INTO {staged} (term, n, rows, tfs) VALUES (?, ?, ?, ?)"
    out: list[tuple[str, int, bytes, bytes]] = []
    terms = 0
    # the instances of the terms worth it, one string per term (the vocabulary lists them by term,
    # then row)
    for term, docs in conn.execute(
        f'SELECT term, group_concat(doc) FROM temp."{table}_instances" GROUP BY term HAVING count(*) >= ?',
        (POSTINGS_MIN_INSTANCES,),
    ):
        out.append((term, *pack_postings(*_rows_and_counts(docs))))
        if len(out) >= POSTINGS_BATCH:
            conn.executemany(insert, out)
            terms += len(out)
            out.clear()
    if out:
        conn.executemany(insert, out)
        terms += len(out)
    return int(top), terms


def install_postings(conn: "apsw.Connection", table: str, top: int) -> None:
    """Replace ``table``'s packed postings by those :func:`stage_postings` wrote and set their
    watermark to ``top`` (in the caller's write transaction, on the state the postings were
    computed from). The TEMP table stays (drop it with :func:`drop_staged_postings`)."""
    conn.execute(f'DELETE FROM "{table}_postings"')
    conn.execute(f'INSERT INTO "{table}_postings" (term, n, rows, tfs) SELECT term, n, rows, tfs FROM '
                 f"{staged_table(table)}")
    conn.execute(f'UPDATE "{table}_postings_upto" SET upto = ? WHERE id = 0', (int(top),))


def drop_staged_postings(conn: "apsw.Connection", table: str) -> None:
    """Drop the TEMP table of :func:`stage_postings` (outside any transaction: its pages go back)."""
    conn.execute(f"DROP TABLE IF EXISTS {staged_table(table)}")


def fts5_totals(conn: "apsw.Connection", table: str) -> tuple[int, int]:
    """``(rows, tokens)`` of an FTS5 table: its averages record (``<table>_data`` id 1; empty
    until the first row is written)."""
    rows = tokens = 0
    for (block,) in conn.execute(f'SELECT block FROM "{table}_data" WHERE id = 1'):
        if block:
            rows, pos = read_varint(block)
            tokens, _ = read_varint(block, pos)
    return rows, tokens


def _instances_table(conn: "apsw.Connection", table: str) -> None:
    """FTS5's ``instance`` vocabulary of ``table`` as ``temp."<table>_instances"`` (a row per
    instance of a term, by term then row)."""
    conn.execute(
        f'CREATE VIRTUAL TABLE IF NOT EXISTS temp."{table}_instances" USING fts5vocab(main, "{table}", instance)'
    )


def _rows_and_counts(docs: str | None) -> tuple["np.ndarray", "np.ndarray"]:
    """A term's rows and its count in each, from ``group_concat`` of its instances' rows (one
    value per instance: row ids with repeats)."""
    import numpy as np

    inst = np.fromstring(docs, dtype=np.int64, sep=",") if docs else np.zeros(0, dtype=np.int64)
    return _run_lengths(inst)


def _run_lengths(inst: "np.ndarray") -> tuple["np.ndarray", "np.ndarray"]:
    """The distinct values of ``inst`` (ascending) and how often each occurs: ``np.unique(inst,
    return_counts=True)``, in one pass when ``inst`` is already in order (FTS5 lists a term's
    instances by rowid), without the sort."""
    import numpy as np

    if len(inst) == 0:
        return inst, np.zeros(0, dtype=np.int64)
    step = np.diff(inst)
    if (step < 0).any():  # not in order: never seen from FTS5, but then sort
        return np.unique(inst, return_counts=True)
    starts = np.flatnonzero(step)
    starts += 1
    bounds = np.empty(len(starts) + 2, dtype=np.int64)
    bounds[0], bounds[1:-1], bounds[-1] = 0, starts, len(inst)
    return inst[bounds[:-1]], np.diff(bounds)


def _column_total(sz: bytes) -> int:
    """Tokens in a row: the sum of the column sizes of a ``_docsize`` record."""
    total, pos = 0, 0
    while pos < len(sz):
        n, pos = read_varint(sz, pos)
        total += n
    return total

