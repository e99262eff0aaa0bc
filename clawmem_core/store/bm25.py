"""BM25 of FTS5 keyword queries computed in process, for long-lived processes on large indexes.

FTS5's ``bm25()`` scores every row that matches any term of an OR query, one row at a time, and
common terms match most rows. Here each term's per-row contributions are computed once from the
FTS5 index's own statistics (row count, document lengths, term instances) and kept while the index
is unchanged; a query adds up the arrays of its terms. The formula, the constants and the order of
the floating-point operations are those of FTS5's ``bm25()``, so the scores are the same numbers.
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

    def __init__(self, conn: "apsw.Connection", table: str, rows: int, tokens: int, doc_len: "np.ndarray") -> None:
        self.conn = conn
        self.table = table
        self.rows = rows
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

        conn.execute(
            f'CREATE VIRTUAL TABLE IF NOT EXISTS temp."{table}_instances" USING fts5vocab(main, "{table}", instance)'
        )
        rows = tokens = 0
        for (block,) in conn.execute(f'SELECT block FROM "{table}_data" WHERE id = 1'):
            rows, pos = read_varint(block)
            tokens, _ = read_varint(block, pos)
        ids: list[int] = []
        sizes: list[int] = []
        for rid, sz in conn.execute(f'SELECT id, sz FROM "{table}_docsize"'):
            ids.append(rid)
            sizes.append(_column_total(sz))
        doc_len = np.zeros((max(ids) + 1) if ids else 1, dtype=np.float64)
        doc_len[np.asarray(ids, dtype=np.int64)] = sizes
        return cls(conn, table, rows, tokens, doc_len)

    def _postings(self, token: str) -> tuple[Any, Any, float]:
        """Rows holding ``token`` (ascending), the term's count in each, and its IDF (cached)."""
        with self._lock:
            hit = self._terms.get(token)
            if hit is not None:
                self._terms.move_to_end(token)
                return hit
        import numpy as np

        (docs,) = self.conn.execute(
            f'SELECT group_concat(doc) FROM temp."{self.table}_instances" WHERE term = ?', (token,)
        ).fetchall()[0]
        # One value per instance of the term: rowids with repeats.
        inst = np.fromstring(docs, dtype=np.int64, sep=",") if docs else np.zeros(0, dtype=np.int64)
        rows, tf = _run_lengths(inst)
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

    def cached_rows(self, token: str) -> int | None:
        """How many rows hold ``token`` (FTS5's vocabulary ``doc`` count), when its postings are
        cached; ``None`` otherwise."""
        with self._lock:
            hit = self._terms.get(token)
        return None if hit is None else len(hit[0])

    def search(self, tokens: Sequence[str], limit: int) -> list[tuple[int, float]]:
        """``(rowid, bm25)`` of the best ``limit`` rows matching any of ``tokens`` (one FTS5
        phrase each, repeats counted again as FTS5 does), best first; ties by rowid."""
        import numpy as np

        terms = [self._postings(t) for t in tokens]
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
            else:  # most rows match: cut the whole array once (no copy of the matching rows first)
                cut = len(scores) - limit
                kth = np.partition(scores, cut)[cut] if cut > 0 else 0.0
                found = np.flatnonzero(scores >= kth) if kth > 0 else np.flatnonzero(scores)
            values = scores[found]
        if len(found) > limit:  # the rows at least as good as the limit-th score
            cut = len(found) - limit
            kth = np.partition(values, cut)[cut]
            keep = values >= kth
            found, values = found[keep], values[keep]
        order = np.lexsort((found, -values))[:limit]  # by score, ties by rowid
        return [(int(r), -float(v)) for r, v in zip(found[order], values[order])]


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

