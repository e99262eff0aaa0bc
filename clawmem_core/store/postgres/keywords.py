"""Keyword search in the PostgreSQL store: BM25 (FTS5's ``bm25()``) over an agent's keyword rows.

The agent's row lengths and the postings of the terms searched so far are kept in process
(:data:`KEYWORD_CACHE`), per data version of the agent, the terms' postings evicted term by term
(least recently used first, over every agent of the process); the server answers what the cache
cannot (:meth:`_Keywords._keyword_search_sql`: the same scores, computed in SQL).

A term's postings come packed from ``clawmem_postings`` (written at the end of each sync that added
rows: :meth:`~.postings._Postings.settle`) for the rows up to the rid its row of the empty term names, and
from the terms of the rows above it; never from the terms of every row holding the term.

What a search reads of the best rows (id, path, source, lines) and of the chunks it shows is kept
too, by rid (none of it changes under a rid, and a rid is never reused): a search the process
has answered before at the agent's version reads nothing but that version, which the checks
before a search read anyway (see ``_Reading.adopt`` in :mod:`.connection`). Once an agent's
searches have read rows by rid a few times (:data:`META_AFTER_READS`), the id, path, source and
lines of every row are read in the background and kept with its statistics (:class:`_RowMeta`,
about 44 bytes a row, within :data:`MAX_META_BYTES` over the process, carried across writes like
the row lengths): a query's first use then reads its terms' postings and no rows."""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections import OrderedDict
import math
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from .values import _tsquery

if TYPE_CHECKING:
    import numpy as np
    import psycopg

log = logging.getLogger("clawmem")

#: FTS5's ``bm25()`` constants.
_K1, _B = 1.2, 0.75


#: Bytes the in-process keyword statistics keep, over every agent of the process: 24 a row of an
#: agent searched (its rid and length), 6 a posting of a term searched (the 8M postings of before).
MAX_CACHED_BYTES = 48_000_000
_ROW_BYTES = 24
_POSTING_BYTES = 6
#: Keyword rows whose id, path, source and lines the process keeps (over every agent, least
#: recently used first; about 400 bytes each): a warm search names its best rows without reading
#: them. A row's rid is never reused and those columns never change under it; whether it is
#: still live is what the statistics of the data version say.
MAX_ROW_META = 60_000
#: Chunks (:class:`~clawmem_core.store.base.ChunkRow`, the text included: none of it changes under a
#: rid either) the process keeps of those a search showed, over every agent, least recently used
#: first: a repeated search reads no text.
MAX_ROW_TEXTS = 2_000
#: Bytes the rows' metadata kept with the keyword statistics (:class:`_RowMeta`) may take, over
#: every agent of the process: past it, the metadata of the agents searched least recently is
#: dropped (their rows are then read by rid, kept in the row cache of :data:`MAX_ROW_META`).
MAX_META_BYTES = 40_000_000
#: Keyword rows above those ``clawmem_postings`` holds up to which a term's first use reads their
#: terms by rid (a row's terms filtered to the query's), not through the index of terms.
BY_RID_BELOW = 4096
#: Searches of an agent's statistics that read rows by rid before the rows' metadata is read (in
#: the background, for every row of the agent): an agent searched once costs no more than before.
META_AFTER_READS = 2
#: One load of rows' metadata at a time in the process.
_META_LOADS = threading.Semaphore(1)
#: Bytes the metadata of one keyword row takes in :class:`_RowMeta` (its id, file, lines) and of
#: one file (besides its path and source), counted in :data:`MAX_META_BYTES`.
_META_ROW_BYTES = 44
_META_FILE_BYTES = 120
#: Attempts to read statistics of one data version while other processes write.
_KEYWORD_ATTEMPTS = 3
#: What a keyword-cache answer returns when it finds the statistics out of date (asked again).
_STALE = object()


class _StaleKeywords(Exception):
    """The agent's keyword rows changed while their statistics were being read."""


class _RowMeta:
    """The id, path, source and lines of every keyword row of one :class:`_KeywordStats`, in its
    row order (read by :meth:`_Keywords._load_row_meta`, the new rows' with their lengths when
    the statistics are carried to a later version): a search names its best rows without reading them.
    About :data:`_META_ROW_BYTES` a row (the id as 32 bytes, its file's number, two lines) and
    :data:`_META_FILE_BYTES` plus the path a file. Held only where every id is a lowercase
    SHA-256 in hex (the chunk ids clawmem writes); else rows are read by rid as before."""

    def __init__(self, ids: "np.ndarray", file_of: "np.ndarray", lines: "np.ndarray",
                 files: list[tuple[str, str]]) -> None:
        self.ids = ids  # (rows, 32) uint8
        self.file_of = file_of  # int32, into ``files``
        self.lines = lines  # (rows, 2) int32
        self.files = files  # (path, source)
        self.nbytes = (ids.nbytes + file_of.nbytes + lines.nbytes
                       + sum(_META_FILE_BYTES + len(p) + len(src) for p, src in files))

    @staticmethod
    def parse(n: int, ids: str | None, uniform: Any, lines: bytes | None, at: Any, paths: Any,
              sources: Any) -> "_RowMeta | None":
        """From what :attr:`_Keywords._ROWS` reads of ``n`` rows: ``ids`` concatenated in row
        order (``uniform``: all 64 characters long), ``lines`` packed (two big-endian int4 a
        row), and the rows (``at``: positions) where a file starts, with its path and source."""
        import numpy as np

        ids = ids or ""
        if (n and not uniform) or len(ids) != 64 * n or ids != ids.lower():
            return None
        try:
            raw = bytes.fromhex(ids)
        except ValueError:
            return None
        packed = np.frombuffer(lines or b"", dtype=">i4").astype(np.int32).reshape(-1, 2)
        if len(packed) != n:
            return None
        starts = np.array(list(at or []), dtype=np.int64)
        file_of = np.zeros(n, dtype=np.int32)
        if n:
            if not len(starts) or starts[0] != 0:
                return None
            marks = np.zeros(n, dtype=np.int32)
            marks[starts] = 1
            file_of = (np.cumsum(marks) - 1).astype(np.int32)
        return _RowMeta(np.frombuffer(raw, dtype=np.uint8).reshape(n, 32), file_of, packed,
                        list(zip(paths or [], sources or [])))

    def take(self, keep: "np.ndarray | None", new: "_RowMeta") -> "_RowMeta":
        """These rows (those of ``keep`` only, all when ``None``) followed by ``new``'s; files no
        row names any more are left out."""
        import numpy as np

        ids, file_of, lines = (self.ids, self.file_of, self.lines) if keep is None else \
            (self.ids[keep], self.file_of[keep], self.lines[keep])
        file_of = np.concatenate([file_of, new.file_of + len(self.files)])
        used, file_of = np.unique(file_of, return_inverse=True)
        files = self.files + new.files
        return _RowMeta(np.concatenate([ids, new.ids]), file_of.astype(np.int32).reshape(-1),
                        np.concatenate([lines, new.lines]), [files[i] for i in used.tolist()])

    def row(self, pos: int) -> tuple[str, str, str, int, int]:
        """``(id, path, source, start_line, end_line)`` of the row at ``pos``."""
        path, source = self.files[int(self.file_of[pos])]
        return (self.ids[pos].tobytes().hex(), path, source, int(self.lines[pos, 0]), int(self.lines[pos, 1]))


class _KeywordStats:
    """BM25 statistics of one agent's keyword rows at one data version, kept in process: the rows
    (ascending ``rid``), their lengths, and the postings of the terms searched so far. Scores are
    FTS5's ``bm25()`` (same formula, constants and order of additions as :mod:`.bm25`)."""

    def __init__(self, token: Any, rids: "np.ndarray", doc_len: "np.ndarray", upto: int = 0,
                 era: int | None = None, meta: _RowMeta | None = None) -> None:
        self.token = token
        #: The rows' ids, paths and lines (``None``: read by rid when a search names them).
        self.meta = meta if meta is not None and len(meta.ids) == len(rids) else None
        #: Statistics loaded afresh get a new era, carried ones keep theirs: the rows' metadata
        #: (:meth:`_KeywordCache.row_meta`) is kept per era, so a database dropped and created
        #: again (rids counted from 1 again) never answers with a row of before.
        self.era = next(_ERAS) if era is None else era
        #: The rows ``clawmem_postings`` holds at this data version: those up to this rid.
        self.upto = upto
        self.rids = rids
        self.doc_len = doc_len
        self.rows = len(rids)
        avgdl = float(doc_len.sum()) / self.rows if self.rows else 1.0
        #: Per row: ``k1 * (1 - b + b * D / avgdl)``, evaluated as fts5Bm25Function does.
        self.length_norm = _K1 * (1 - _B + _B * doc_len / avgdl)
        #: token -> (row positions ascending, the token's count in each); kept and evicted by
        #: :class:`_KeywordCache`
        self.terms: dict[str, tuple[Any, Any]] = {}
        self.used = time.monotonic()
        #: Searches that read rows by rid, and whether the rows' metadata is being read.
        self.reads_by_rid = 0
        self.meta_loading = False

    @property
    def nbytes(self) -> int:
        """Bytes the row arrays take (their metadata and the terms' postings are counted by the cache)."""
        return self.rows * _ROW_BYTES

    def row_meta(self, rids: Sequence[int]) -> dict[int, tuple[str, str, str, int, int]]:
        """``rid -> (id, path, source, start_line, end_line)`` of ``rids`` (rows these statistics
        hold) from :attr:`meta`; empty without it."""
        import numpy as np

        meta = self.meta
        if meta is None or not len(rids):
            return {}
        want = np.asarray(rids, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self.rids, want), max(self.rows - 1, 0))
        return {int(r): meta.row(int(i)) for r, i in zip(want.tolist(), pos.tolist())
                if self.rows and int(self.rids[i]) == r}

    def entry(self, rids: "np.ndarray", tf: "np.ndarray", live_only: bool = False) -> tuple[Any, Any]:
        """The postings of a term as kept: ``rids`` (ascending) as row positions, with its count
        in each. ``live_only``: rows these statistics do not hold (deleted since the postings
        were written) are left out; else such a row means the statistics are out of date."""
        import numpy as np

        pos = np.searchsorted(self.rids, rids)
        if len(rids):
            held = pos < self.rows
            held[held] = self.rids[pos[held]] == rids[held]
            if not held.all():
                if not live_only:
                    raise _StaleKeywords("postings name rows the statistics do not hold")
                pos, tf = pos[held], tf[held]
        return pos.astype(np.int32), tf.astype(np.uint16)  # 6 bytes a posting (tf <= 256)

    def advance(self, token: Any, live: "np.ndarray | None", rids: "np.ndarray", doc_len: "np.ndarray",
                postings: dict[str, tuple["np.ndarray", "np.ndarray"]], upto: int,
                meta: _RowMeta | None = None) -> "_KeywordStats":
        """These statistics carried to a later data version of the same generation: of the rows
        held, those in ``live`` stay (all when ``None``); ``rids`` (all above the ones held) come
        with their lengths and, for each term held, its ``postings`` among them; ``upto``: the
        rows ``clawmem_postings`` holds at that version; ``meta``: the metadata of ``rids``."""
        import numpy as np

        if live is None:
            keep = np.ones(self.rows, dtype=bool)
        else:
            keep = np.isin(self.rids, live, assume_unique=True)
        kept = int(keep.sum())
        moved = np.cumsum(keep) - 1  # old position -> new position (where kept)
        carried = None
        if self.meta is not None and meta is not None and len(meta.ids) == len(rids):
            carried = self.meta.take(None if live is None else keep, meta)
        out = _KeywordStats(token, np.concatenate([self.rids[keep], rids]),
                            np.concatenate([self.doc_len[keep], doc_len]), upto, self.era, carried)
        out.reads_by_rid = self.reads_by_rid
        for term, (pos, tf) in list(self.terms.items()):
            alive = keep[pos]
            new_rids, new_tf = postings.get(term, (rids[:0], doc_len[:0]))
            new_pos = kept + np.searchsorted(rids, new_rids)
            out.terms[term] = (np.concatenate([moved[pos[alive]], new_pos]).astype(np.int32),
                               np.concatenate([tf[alive], new_tf]).astype(np.uint16))
        return out

    def idf(self, hits: int) -> float:
        # fts5_aux.c: IDF = log((N - nHit + 0.5) / (nHit + 0.5)), at least 1e-6.
        idf = math.log((self.rows - hits + 0.5) / (hits + 0.5)) if self.rows else 1e-6
        return 1e-6 if idf <= 0.0 else idf

    def search(self, postings: Sequence[tuple[Any, Any]], limit: int) -> list[tuple[int, float]]:
        """``(rid, bm25 rank)`` of the best ``limit`` rows holding any of the query's tokens (their
        ``postings``, in query order); ties by rid."""
        import numpy as np

        if not self.rows or limit <= 0:
            return []
        scores = np.zeros(self.rows, dtype=np.float64)
        norm = self.length_norm
        hit = False
        for pos, tf in postings:  # one addition per row and term, in term order, as FTS5
            freq = tf.astype(np.float64)
            if len(pos):
                hit = True
                # fts5Bm25Function: score += idf * ((f * (k1 + 1.0)) / (f + k1 * (1 - b + b * D / avgdl)))
                scores[pos] += self.idf(len(pos)) * ((freq * (_K1 + 1.0)) / (freq + norm[pos]))
        if not hit:
            return []
        # Every matching row scores above 0 (IDF >= 1e-6): the rows at least as good as the
        # limit-th score, then ordered by score and row.
        cut = len(scores) - limit
        kth = np.partition(scores, cut)[cut] if cut > 0 else 0.0
        found = np.flatnonzero(scores >= kth) if kth > 0 else np.flatnonzero(scores)
        best = found[np.lexsort((found, -scores[found]))[:limit]]
        return [(int(self.rids[i]), -float(scores[i])) for i in best]

    @staticmethod
    def rows_with_all(postings: Sequence[tuple[Any, Any]]) -> int:
        """Rows holding every token of ``postings``."""
        import numpy as np

        pos = postings[0][0]
        for other, _ in postings[1:]:
            pos = np.intersect1d(pos, other, assume_unique=True)
        return len(pos)


_ERAS = itertools.count()


class _KeywordCache:
    """The in-process keyword statistics of every agent this process searches, by database and
    agent, each valid for one data version of its agent (bumped by every write transaction, in
    any process): a search checks the version in the same statement that fetches its results.

    Bounded by :data:`MAX_CACHED_BYTES`: the postings of the term least recently searched, of
    whichever agent, go first; an agent whose every term went goes with them (its row lengths).
    Several large agents searched in turn keep their hot terms, not evict each other whole."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stats: dict[tuple[str, str], _KeywordStats] = {}
        #: (agent key, term) -> bytes of the term's postings, least recently used first
        self._lru: "OrderedDict[tuple[tuple[str, str], str], int]" = OrderedDict()
        self._bytes = 0
        #: bytes of the rows' metadata held by the statistics (:data:`MAX_META_BYTES`)
        self._meta_bytes = 0
        #: (era, rid) -> (id, path, source, start_line, end_line), least recently used first
        self._meta: "OrderedDict[tuple[int, int], tuple[str, str, str, int, int]]" = OrderedDict()
        #: (era, rid) -> the chunk as get_chunks returns it, least recently used first
        self._texts: "OrderedDict[tuple[int, int], Any]" = OrderedDict()

    @property
    def nbytes(self) -> int:
        """Bytes kept now (row arrays and postings)."""
        return self._bytes

    @property
    def meta_nbytes(self) -> int:
        """Bytes of the rows' metadata the statistics keep now."""
        return self._meta_bytes

    def get(self, key: tuple[str, str]) -> _KeywordStats | None:
        with self._lock:
            stats = self._stats.get(key)
            if stats is not None:
                stats.used = time.monotonic()
            return stats

    def put(self, key: tuple[str, str], stats: _KeywordStats) -> None:
        """``stats`` for ``key`` from now on (its terms keep their places in the order of use)."""
        with self._lock:
            old = self._stats.get(key)
            if old is not None:
                self._bytes -= old.nbytes
                self._meta_bytes -= old.meta.nbytes if old.meta is not None else 0
                for term in old.terms:
                    if term not in stats.terms:
                        self._bytes -= self._lru.pop((key, term), 0)
            self._stats[key] = stats
            self._bytes += stats.nbytes
            if stats.meta is not None:
                self._meta_bytes += stats.meta.nbytes
                self._trim_meta()
            for term, (pos, _) in stats.terms.items():
                size = len(pos) * _POSTING_BYTES
                self._bytes += size - self._lru.get((key, term), 0)
                self._lru[(key, term)] = size
            self._trim(keep=key)

    def add(self, key: tuple[str, str], stats: _KeywordStats, entries: dict[str, tuple[Any, Any]]) -> None:
        """Keep ``entries`` (term -> postings) in ``stats``, the statistics of ``key`` (not when
        they were replaced meanwhile), as the terms used last."""
        with self._lock:
            if self._stats.get(key) is not stats:
                return
            for term, entry in entries.items():
                stats.terms[term] = entry
                size = len(entry[0]) * _POSTING_BYTES
                self._bytes += size - self._lru.get((key, term), 0)
                self._lru[(key, term)] = size
                self._lru.move_to_end((key, term))
            self._trim(keep=key)

    def keep_meta(self, key: tuple[str, str], stats: _KeywordStats, meta: _RowMeta) -> None:
        """Keep ``meta`` (of every row of ``stats``) with ``stats``, while they are ``key``'s."""
        with self._lock:
            if self._stats.get(key) is not stats or stats.meta is not None or len(meta.ids) != stats.rows:
                return
            stats.meta = meta
            self._meta_bytes += meta.nbytes
            self._trim_meta()

    def _trim_meta(self) -> None:
        """Over :data:`MAX_META_BYTES`: the metadata of the agents searched least recently goes."""
        for other in sorted(self._stats.values(), key=lambda st: st.used):
            if self._meta_bytes <= MAX_META_BYTES:
                break
            if other.meta is not None:  # (the least recently searched first; at last the newest)
                self._meta_bytes -= other.meta.nbytes
                other.meta = None

    def row_meta(self, stats: _KeywordStats, rids: Sequence[int]) -> dict[int, tuple[str, str, str, int, int]]:
        """What is kept of ``rids`` (rows of ``stats``): ``rid -> (id, path, source, start_line,
        end_line)``, those used now."""
        era, meta, out = stats.era, self._meta, {}
        with self._lock:
            for rid in rids:
                got = meta.get((era, rid))
                if got is not None:
                    meta.move_to_end((era, rid))
                    out[rid] = got
        return out

    def keep_row_meta(self, stats: _KeywordStats, rows: Mapping[int, tuple[str, str, str, int, int]]) -> None:
        """Keep ``rows`` (``rid -> (id, path, source, start_line, end_line)``) of ``stats``'s rows,
        within :data:`MAX_ROW_META` over every agent."""
        era, meta = stats.era, self._meta
        with self._lock:
            for rid, row in rows.items():
                meta[(era, rid)] = row
                meta.move_to_end((era, rid))
            while len(meta) > MAX_ROW_META:
                meta.popitem(last=False)

    def row_texts(self, rows: Sequence[tuple[int, int]]) -> dict[tuple[int, int], Any]:
        """The chunks kept of ``rows`` (``(era, rid)`` each), those used now."""
        out = {}
        with self._lock:
            for row in rows:
                got = self._texts.get(row)
                if got is not None:
                    self._texts.move_to_end(row)
                    out[row] = got
        return out

    def keep_row_texts(self, era: int, rows: Mapping[int, Any]) -> None:
        """Keep the chunks ``rows`` (``rid -> ChunkRow``) of rows of statistics of ``era``."""
        with self._lock:
            for rid, row in rows.items():
                self._texts[(era, rid)] = row
                self._texts.move_to_end((era, rid))
            while len(self._texts) > MAX_ROW_TEXTS:
                self._texts.popitem(last=False)

    def touch(self, key: tuple[str, str], terms: Sequence[str]) -> None:
        """``terms`` of ``key`` were used now."""
        with self._lock:
            for term in terms:
                if (key, term) in self._lru:
                    self._lru.move_to_end((key, term))

    def drop(self, key: tuple[str, str], stats: _KeywordStats | None = None) -> None:
        with self._lock:
            if stats is None or self._stats.get(key) is stats:
                self._forget(key)

    def clear(self) -> None:
        with self._lock:
            self._stats.clear()
            self._lru.clear()
            self._meta.clear()
            self._texts.clear()
            self._bytes = self._meta_bytes = 0

    def _forget(self, key: tuple[str, str]) -> None:
        stats = self._stats.pop(key, None)
        if stats is None:
            return
        self._bytes -= stats.nbytes
        self._meta_bytes -= stats.meta.nbytes if stats.meta is not None else 0
        for term in stats.terms:
            self._bytes -= self._lru.pop((key, term), 0)

    def _trim(self, keep: tuple[str, str]) -> None:
        """Forget the least recently used terms, and the agents left without any (``keep``'s row
        lengths stay), then the least recently used agents, over the budget."""
        while self._bytes > MAX_CACHED_BYTES and self._lru:
            (key, term), size = self._lru.popitem(last=False)
            self._bytes -= size
            stats = self._stats.get(key)
            if stats is not None:
                stats.terms.pop(term, None)
                if not stats.terms and key != keep:
                    self._forget(key)
        if self._bytes > MAX_CACHED_BYTES:
            for key, _ in sorted(self._stats.items(), key=lambda kv: kv[1].used):
                if self._bytes <= MAX_CACHED_BYTES:
                    return
                if key != keep:
                    self._forget(key)


KEYWORD_CACHE = _KeywordCache()


class _Keywords:
    """The keyword side of :class:`~clawmem_core.store.postgres.PostgresStore`."""

    def _corpus_stats(self, conn: "psycopg.Connection") -> tuple[int, float]:
        """Rows and average length of the keyword index (FTS5's N and avgdl), kept per data version."""
        token = conn.execute("SELECT generation, data_version FROM clawmem_agents WHERE agent = %s", (self.agent,)).fetchone()
        token = (self._gen, token)
        if token != self._cache_token:
            row = conn.execute(
                f"SELECT count(*), coalesce(sum(doc_len), 0) FROM clawmem_chunks WHERE agent = %(agent)s "
                f"AND generation = {self._g()} AND part = 0",
                {"agent": self.agent},
            ).fetchone()
            n, total = int(row[0]), float(row[1])  # type: ignore[index]
            self._stats = (n, total / n if n else 1.0)
            self._cache_token = token
        return self._stats

    # The keyword side in process: the agent's row lengths and the postings of the terms searched
    # so far are kept (KEYWORD_CACHE) for one data version of the agent. Every statement that
    # reads them or answers from them also reads the version, in the same snapshot: a write by any
    # process (each write transaction bumps the version) is seen by the next search.

    _VERSION = "SELECT a.generation, a.data_version{cols} FROM clawmem_agents AS a {join} WHERE a.agent = %(agent)s"
    #: The rows ``clawmem_postings`` holds for the live generation: those up to this rid (its row
    #: of the empty term says; none: no row).
    _UPTO = ("coalesce((SELECT max(w.upto) FROM clawmem_postings AS w WHERE w.agent = a.agent "
             "AND w.generation = a.generation AND w.term = ''), 0)")

    def _kw_key(self) -> tuple[str, str]:
        return (self.backend._url, self.agent)

    def _load_keyword_stats(self, conn: "psycopg.Connection") -> _KeywordStats:
        import numpy as np

        # (the row lengths come from an index; the rows' metadata needs the table's rows: read
        # later, off the search, once the agent's searches need it: _load_row_meta)
        row = conn.execute(
            self._VERSION.format(
                cols=f", s.rids, s.lens, {self._UPTO}",
                join="CROSS JOIN LATERAL (SELECT string_agg(c.rid::text, ',' ORDER BY c.rid) AS rids, "
                "string_agg(c.doc_len::text, ',' ORDER BY c.rid) AS lens FROM clawmem_chunks AS c "
                "WHERE c.agent = a.agent AND c.generation = a.generation AND c.part = 0) AS s",
            ),
            {"agent": self.agent},
        ).fetchone()
        if row is None:
            return _KeywordStats(None, self._ints(None), self._ints(None, "float64"))
        return _KeywordStats((row[0], row[1]), self._ints(row[2]), self._ints(row[3], "float64"), int(row[4]))

    def _load_row_meta(self, stats: _KeywordStats) -> None:
        """Read the metadata of the rows of ``stats`` (on a connection of the pool, outside any
        search) and keep it with them, if they are still the agent's statistics then. Run in a
        thread of its own (:meth:`_want_row_meta`); any failure leaves them without."""
        import numpy as np

        key = self._kw_key()
        try:
            if stats.token is None or not stats.rows:
                return
            with self.backend.connection() as conn:
                row = conn.execute(
                    self._VERSION.format(cols=f", s.rids, {self._META_COLS}",
                                         join=f"CROSS JOIN LATERAL ({self._ROWS.format(where=' AND c.rid <= %(top)s')}) AS s"),
                    {"agent": self.agent, "top": int(stats.rids[-1])},
                ).fetchone()
            if row is None or int(row[0]) != stats.token[0]:
                return
            rids = self._ints(row[2])
            meta = _RowMeta.parse(len(rids), *row[3:])
            if meta is None:
                return
            keep = np.isin(rids, stats.rids, assume_unique=True)
            if int(keep.sum()) != stats.rows:  # (rows of the statistics deleted since: not all there)
                return
            KEYWORD_CACHE.keep_meta(key, stats, meta.take(keep, _RowMeta.parse(0, None, None, None, None, None, None)))
        except Exception as exc:  # (closed, unreachable: searches read the rows by rid, as before)
            log.debug("rows' metadata of agent %r not kept: %s", self.agent, exc)
        finally:
            stats.meta_loading = False

    def _want_row_meta(self, stats: _KeywordStats) -> None:
        """A search of ``stats`` read rows by rid: after :data:`META_AFTER_READS` such searches,
        the rows' metadata is read in the background (one load at a time in the process, on one
        connection of the pool: not with a pool of one)."""
        stats.reads_by_rid += 1
        if stats.reads_by_rid < META_AFTER_READS or stats.meta is not None or stats.meta_loading \
                or stats.token is None or MAX_META_BYTES <= 0 or self.backend._pool_size < 2:
            return  # (a pool of one connection: not taken from the searches)
        if not _META_LOADS.acquire(blocking=False):
            return
        stats.meta_loading = True

        def run() -> None:
            try:
                self._load_row_meta(stats)
            finally:
                _META_LOADS.release()

        try:
            threading.Thread(target=run, name="clawmem-row-meta", daemon=True).start()
        except RuntimeError:  # (no thread to be had: rows read by rid, as before)
            stats.meta_loading = False
            _META_LOADS.release()

    #: The agent's keyword rows (``{where}``: more conditions on ``c``), in rid order: their rids
    #: and lengths, and what :class:`_RowMeta` keeps of them (:attr:`_META_COLS`): the ids, whether
    #: all are 64 characters long, the lines packed, and where each run of rows of one file starts.
    _ROWS = (
        "SELECT string_agg(r.rid::text, ',' ORDER BY r.rid) AS rids, "
        "string_agg(r.doc_len::text, ',' ORDER BY r.rid) AS lens, "
        "string_agg(r.id, '' ORDER BY r.rid) AS ids, bool_and(octet_length(r.id) = 64) AS uniform, "
        "string_agg(int4send(r.start_line) || int4send(r.end_line), ''::bytea ORDER BY r.rid) AS lines, "
        "array_agg(r.n - 1 ORDER BY r.rid) FILTER (WHERE r.first) AS at, "
        "array_agg(r.path ORDER BY r.rid) FILTER (WHERE r.first) AS paths, "
        "array_agg(r.source ORDER BY r.rid) FILTER (WHERE r.first) AS sources "
        "FROM (SELECT c.rid, c.doc_len, c.id, c.start_line, c.end_line, c.path, c.source, "
        "row_number() OVER w AS n, (c.path, c.source) IS DISTINCT FROM (lag(c.path) OVER w, lag(c.source) OVER w) AS first "
        "FROM clawmem_chunks AS c WHERE c.agent = a.agent AND c.generation = a.generation AND c.part = 0{where} "
        "WINDOW w AS (ORDER BY c.rid)) AS r"
    )
    _META_COLS = "s.ids, s.uniform, s.lines, s.at, s.paths, s.sources"
    #: The rids and lengths of :attr:`_ROWS` alone (from an index, not the table's rows).
    _ROWS_ONLY = ("SELECT string_agg(c.rid::text, ',' ORDER BY c.rid) AS rids, "
                  "string_agg(c.doc_len::text, ',' ORDER BY c.rid) AS lens FROM clawmem_chunks AS c "
                  "WHERE c.agent = a.agent AND c.generation = a.generation AND c.part = 0{where}")

    #: A term's rows packed (8 bytes big-endian each, ascending) and its counts (2 bytes each), as
    #: ``clawmem_postings`` keeps them, from rows ``c`` and lexemes ``x`` grouped by lexeme.
    _PACKED = ("string_agg(int8send(c.rid), ''::bytea ORDER BY c.rid) AS rids, "
               "string_agg(int2send(array_length(x.positions, 1)::int2), ''::bytea ORDER BY c.rid) AS tfs")

    #: :attr:`_PACKED` in the order the rows come (a hash aggregate, no sort of every posting).
    _PACKED_HASHED = ("string_agg(int8send(c.rid), ''::bytea) AS rids, "
                      "string_agg(int2send(array_length(x.positions, 1)::int2), ''::bytea) AS tfs")

    #: Per lexeme of ``%(tokens)s``: the agent's keyword rows holding it (``{where}``) and its count in
    #: each (a row's tsvector cut down to the tokens: a lexeme's positions count its occurrences).
    _POSTINGS = (
        "SELECT x.lexeme, " + _PACKED + " "
        "FROM clawmem_chunks AS c CROSS JOIN LATERAL "
        "unnest(ts_filter(setweight(c.terms, 'A', %(tokens)s::text[]), '{{a}}')) AS x "
        "WHERE c.agent = a.agent AND c.generation = a.generation AND c.part = 0 AND {where} GROUP BY x.lexeme"
    )

    @staticmethod
    def _ints(text: str | None, dtype: str = "int64") -> "np.ndarray":
        import numpy as np

        return np.array(text.split(","), dtype=dtype) if text else np.zeros(0, dtype=dtype)

    @staticmethod
    def _unpack(rids: bytes | None, tfs: bytes | None) -> tuple["np.ndarray", "np.ndarray"]:
        """Packed postings (see :attr:`_PACKED`) as arrays: rids (int64) and counts."""
        import numpy as np

        return (np.frombuffer(rids or b"", dtype=">i8").astype(np.int64),
                np.frombuffer(tfs or b"", dtype=">i2").astype(np.int64))

    def _refresh_keyword_stats(self, conn: "psycopg.Connection", stats: _KeywordStats) -> _KeywordStats | None:
        """``stats`` carried to the agent's current data version without reading again what did
        not change: the rows added since (all above the rows held: an agent's writes are serialised
        by its row in ``clawmem_agents``), and the rows deleted. ``None`` when the generation changed."""
        top = int(stats.rids[-1]) if stats.rows else 0
        tokens = list(stats.terms)
        with_meta = stats.meta is not None  # (the new rows' metadata too)
        rows_sql = self._ROWS if with_meta else self._ROWS_ONLY
        snapshot = self._in_snapshot()
        with (contextlib.nullcontext() if snapshot else conn.transaction()):
            if not snapshot:
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")  # one snapshot
            rows = conn.execute(
                self._VERSION.format(
                    # (the new rows' metadata on one row of the answer only: one row per term held)
                    cols=f", o.kept, n.rids, n.lens, {self._UPTO}, p.lexeme, p.rids, p.tfs"
                    + "".join(f", CASE WHEN row_number() OVER () = 1 THEN {c} END"
                              for c in self._META_COLS.replace("s.", "n.").split(", ") if with_meta),
                    join="CROSS JOIN LATERAL (SELECT count(*) AS kept FROM clawmem_chunks AS c WHERE c.agent = a.agent "
                    "AND c.generation = a.generation AND c.part = 0 AND c.rid <= %(top)s) AS o "
                    f"CROSS JOIN LATERAL ({rows_sql.format(where=' AND c.rid > %(top)s')}) AS n "
                    f"LEFT JOIN LATERAL ({self._POSTINGS.format(where='c.rid > %(top)s')}) AS p ON true",
                ),
                {"agent": self.agent, "top": top, "tokens": tokens},
            ).fetchall()
            if not rows or stats.token is None or rows[0][0] != stats.token[0]:
                return None
            if rows[0][1] < stats.token[1]:
                # a search's snapshot older than the statistics (another thread brought them up to
                # date meanwhile): they cannot be carried back; that search asks the server
                raise _StaleKeywords("the statistics are newer than the search's snapshot")
            live = None
            if int(rows[0][2]) != stats.rows:  # rows were deleted: which ones
                row = conn.execute(
                    "SELECT string_agg(rid::text, ',' ORDER BY rid) FROM clawmem_chunks WHERE agent = %(agent)s "
                    "AND generation = %(gen)s AND part = 0 AND rid <= %(top)s",
                    {"agent": self.agent, "gen": rows[0][0], "top": top},
                ).fetchone()
                live = self._ints(row[0] if row else None)
        postings = {r[6]: self._unpack(r[7], r[8]) for r in rows if r[6] is not None}
        new = self._ints(rows[0][3])
        meta = None
        if with_meta:
            head = next((r for r in rows if r[10] is not None or r[11] is not None), None)  # (row_number 1)
            meta = _RowMeta.parse(len(new), *head[9:15]) if head is not None else \
                _RowMeta.parse(0, None, None, None, None, None, None) if not len(new) else None
        return stats.advance((rows[0][0], rows[0][1]), live, new, self._ints(rows[0][4], "float64"),
                             postings, int(rows[0][5]), meta)

    def _load_postings(self, conn: "psycopg.Connection", stats: _KeywordStats, tokens: list[str]) -> dict[str, tuple[Any, Any]]:
        """The postings of ``tokens`` at the data version of ``stats`` (:class:`_StaleKeywords` when
        the agent's is no longer that): packed in ``clawmem_postings`` for the rows up to
        ``stats.upto`` (less the rows deleted since), from the terms of the rows above it."""
        import numpy as np

        # The rows above ``upto`` (a few, normally: those of syncs that wrote too few to settle):
        # each one's terms filtered by rid, without the index of terms, which the planner (that
        # cannot tell how few of the agent's rids are that high) would otherwise scan for every
        # agent's rows holding the tokens; many (postings not written yet): by that index.
        above = stats.rows - int(np.searchsorted(stats.rids, stats.upto, side="right"))
        where = "c.rid > %(upto)s" + ("" if above <= BY_RID_BELOW else " AND c.terms @@ %(query)s::tsquery")
        rows = conn.execute(
            self._VERSION.format(
                cols=", p.lexeme, p.rids, p.tfs",
                join="LEFT JOIN LATERAL (SELECT s.term AS lexeme, s.rids, s.tfs FROM clawmem_postings AS s "
                "WHERE s.agent = a.agent AND s.generation = a.generation AND s.term = ANY(%(tokens)s::text[]) "
                f"UNION ALL {self._POSTINGS.format(where=where)}"
                ") AS p ON true",
            ),
            {"agent": self.agent, "tokens": tokens, "query": _tsquery(tokens), "upto": stats.upto},
            prepare=False,  # planned for these values (the rows above ``upto`` are read by rid: no index of terms)
            binary=True,  # the packed postings as they are (not twice their size in hex, encoded and decoded)
        ).fetchall()
        token = (rows[0][0], rows[0][1]) if rows else None
        if token != stats.token:
            raise _StaleKeywords("the agent's keyword rows changed")
        parts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {t: [] for t in tokens}
        for r in rows:
            if r[2] in parts:
                parts[r[2]].append(self._unpack(r[3], r[4]))
        out = {}
        for t, got in parts.items():
            if not got:
                rids, tf = self._unpack(None, None)
            else:  # segments of disjoint rows, each in the order its rows were read: in rid order
                rids, tf = np.concatenate([g[0] for g in got]), np.concatenate([g[1] for g in got])
                if len(rids) > 1 and not (rids[1:] > rids[:-1]).all():
                    order = np.argsort(rids, kind="stable")
                    rids, tf = rids[order], tf[order]
            out[t] = stats.entry(rids, tf, live_only=True)
        return out

    def _keyword_postings(self, conn: "psycopg.Connection", tokens: list[str], stale: _KeywordStats | None = None,
                          ) -> tuple[_KeywordStats, dict[str, tuple[Any, Any]], bool]:
        """The agent's keyword statistics with the postings of ``tokens`` (read where missing), and
        whether their data version was just checked (else the caller checks it). ``stale``:
        statistics found out of date (they are brought up to date)."""
        key = self._kw_key()
        for _ in range(_KEYWORD_ATTEMPTS):
            stats = KEYWORD_CACHE.get(key)
            checked = False
            if stats is None or stats is stale:
                fresh = self._refresh_keyword_stats(conn, stats) if stats is not None else None
                stats = fresh if fresh is not None else self._load_keyword_stats(conn)
                KEYWORD_CACHE.put(key, stats)
                checked = True
            entries = {t: stats.terms.get(t) for t in tokens}
            missing = [t for t, e in entries.items() if e is None]
            KEYWORD_CACHE.touch(key, [t for t in tokens if entries[t] is not None])
            if missing:
                try:
                    loaded = self._load_postings(conn, stats, missing)
                except _StaleKeywords:
                    stale = stats
                    continue
                entries.update(loaded)
                KEYWORD_CACHE.add(key, stats, loaded)
                checked = True
            return stats, entries, checked  # type: ignore[return-value]
        raise _StaleKeywords("the agent's keyword rows kept changing")

    def _from_keyword_cache(self, tokens: list[str], answer: Callable[..., Any]) -> Any:
        """``answer(conn, memo, stats, entries, checked)`` on the agent's cached keyword statistics
        (the postings of ``tokens`` in ``entries``; ``checked``: their data version was just read),
        asked again on refreshed statistics while it returns :data:`_STALE`. None while a
        generation is being built or when the rows kept changing: the caller asks the server."""
        if self._gen is not None:  # a generation being built: straight from the tables
            return None

        def run(conn: "psycopg.Connection", memo: dict[str, Any] | None) -> Any:
            stale = None
            for _ in range(_KEYWORD_ATTEMPTS):
                try:
                    stats, entries, checked = self._keyword_postings(conn, tokens, stale)
                except _StaleKeywords:
                    break
                result = answer(conn, memo, stats, entries, checked)
                if result is not _STALE:
                    return result
                stale = stats
            return None

        with self._reads_on_one_connection():
            found = self._read(run)
        if found is None:
            log.debug("keyword statistics of agent %r kept changing: scored in SQL", self.agent)
        return found

    def _reads_on_one_connection(self) -> Any:
        """Outside any block of reads or writes: a block of reads for this call (a connection from
        the pool without the pool's check, a round trip; one lost is replaced and the read run
        again); inside one, nothing more."""
        from .connection import _writing_block

        if self.backend._reading() is not None or _writing_block(self.backend._url) is not None:
            return contextlib.nullcontext()
        return self.backend.reading()

    def keyword_search(self, terms: list[str], limit: int) -> list[tuple[str, float]]:
        tokens = self.backend.terms.query(terms)
        if not tokens or limit <= 0:
            return []

        def answer(conn: "psycopg.Connection", memo: dict[str, Any] | None, stats: _KeywordStats,
                   entries: dict[str, Any], checked: bool) -> Any:
            best = stats.search([entries[t] for t in tokens], int(limit))
            rids = [rid for rid, _ in best]
            known = stats.row_meta(rids) if stats.meta is not None else KEYWORD_CACHE.row_meta(stats, rids)
            missing = [rid for rid in rids if rid not in known]
            if missing:
                # the ids of the best rows not kept yet (and what search asks next about them), and
                # the version they were scored at (one statement)
                rows = conn.execute(
                    self._VERSION.format(
                        cols=", c.rid, c.id, c.path, c.source, c.start_line, c.end_line, c.pending",
                        join="LEFT JOIN clawmem_chunks AS c ON c.rid = ANY(%(rids)s) AND c.agent = a.agent "
                        "AND c.generation = a.generation",
                    ),
                    {"agent": self.agent, "rids": missing},
                ).fetchall()
                token = (rows[0][0], rows[0][1]) if rows else None
                if token != stats.token:
                    return _STALE
                if memo is not None:
                    memo.setdefault("token", token)
                    self._remember(memo, (r[3:] for r in rows))
                read = {int(r[2]): (r[3], r[4], r[5], int(r[6]), int(r[7])) for r in rows if r[2] is not None}
                KEYWORD_CACHE.keep_row_meta(stats, read)
                self._want_row_meta(stats)
                known.update(read)
            elif not checked and self._token(conn, memo) != stats.token:
                # every best row known: only the version is read (none when this snapshot read it)
                return _STALE
            elif checked and memo is not None:  # read just now with the statistics
                memo.setdefault("token", stats.token)
            if memo is not None and known:
                # what search asks next about them (their pending flags not), and which rows they
                # are (live at the version just checked: their texts may come from the process)
                meta, rid_of = memo.setdefault("meta", {}), memo.setdefault("rids", {})
                for rid, m in known.items():
                    meta.setdefault(m[0], m[1:])
                    rid_of[m[0]] = (stats.era, rid)
            return [(known[rid][0], rank) for rid, rank in best if rid in known]

        found = self._from_keyword_cache(tokens, answer)
        return found if found is not None else self._keyword_search_sql(tokens, limit)

    def _keyword_search_sql(self, tokens: list[str], limit: int) -> list[tuple[str, float]]:
        """The keyword query scored by the server (every matching row; same scores). It reads the
        terms of every keyword row of the agent (no index of terms): only while a generation is
        being built, or when the agent's rows kept changing under the cached statistics."""
        return self._read(lambda conn, memo: self._keyword_rows_sql(conn, tokens, limit))

    def _keyword_rows_sql(self, conn: "psycopg.Connection", tokens: list[str], limit: int) -> list[tuple[str, float]]:
        n, avgdl = self._corpus_stats(conn)
        if not n:
            return []
        # FTS5's bm25(): idf = ln((N - n + 0.5) / (n + 0.5)), at least 1e-6; each term adds
        # idf * f * (k1 + 1) / (f + k1 * (1 - b + b * D / avgdl)); the rank is minus the sum.
        # Each matching row's tsvector is cut down to the query's lexemes once; a lexeme's
        # positions count its occurrences (tf); the rows per lexeme give its document frequency.
        rows = conn.execute(
            f"""
            WITH m AS MATERIALIZED (
                SELECT rid, id, doc_len, ts_filter(setweight(terms, 'A', %(tokens)s::text[]), '{{a}}') AS hit
                FROM clawmem_chunks
                WHERE agent = %(agent)s AND generation = {self._g()} AND part = 0
                  AND terms @@ %(query)s::tsquery),
            u AS MATERIALIZED (
                SELECT m.rid, m.id, m.doc_len, x.lexeme, array_length(x.positions, 1)::float8 AS f
                FROM m CROSS JOIN LATERAL unnest(m.hit) AS x),
            d AS (
                SELECT lexeme, ln((%(n)s - count(*) + 0.5) / (count(*) + 0.5)) AS idf FROM u GROUP BY lexeme)
            SELECT u.id, -sum(CASE WHEN d.idf <= 0 THEN 1e-6 ELSE d.idf END
                              * (u.f * %(k1p)s) / (u.f + %(k1)s * (1 - %(b)s + %(b)s * u.doc_len / %(avgdl)s))) AS r
            FROM u JOIN d USING (lexeme)
            GROUP BY u.rid, u.id ORDER BY r, u.rid LIMIT %(limit)s
            """,
            {"tokens": tokens, "agent": self.agent, "query": _tsquery(tokens), "n": float(n), "k1p": _K1 + 1.0,
             "k1": _K1, "b": _B, "avgdl": avgdl, "limit": int(limit)},
        ).fetchall()
        return [(r[0], float(r[1])) for r in rows]

    def term_hits(self, terms: list[str]) -> tuple[int, list[int]] | None:
        per_term = [self.backend.terms.query([term]) for term in terms]
        tokens = list(dict.fromkeys(t for toks in per_term for t in toks))

        def answer(conn: "psycopg.Connection", memo: dict[str, Any] | None, stats: _KeywordStats,
                   entries: dict[str, Any], checked: bool) -> Any:
            if not checked and self._token(conn, memo) != stats.token:  # no round trip in a snapshot that read it
                return _STALE
            # a term of several tokens: the rows holding all of them
            return stats.rows, [stats.rows_with_all([entries[t] for t in toks]) if toks else 0 for toks in per_term]

        found = self._from_keyword_cache(tokens, answer)
        if found is not None:
            return found  # type: ignore[no-any-return]
        return self._read(lambda conn, memo: self._term_hits_sql(conn, per_term))

    def _term_hits_sql(self, conn: "psycopg.Connection", per_term: list[list[str]]) -> tuple[int, list[int]]:
        n, _ = self._corpus_stats(conn)
        out = []
        for toks in per_term:
            if not toks:
                out.append(0)
                continue
            q = " & ".join(_tsquery([t]) for t in toks)  # a term of several tokens: all of them
            row = conn.execute(
                f"SELECT count(*) FROM clawmem_chunks WHERE agent = %(agent)s AND generation = {self._g()} "
                "AND part = 0 AND terms @@ %(q)s::tsquery",
                {"agent": self.agent, "q": q},
            ).fetchone()
            out.append(int(row[0]))  # type: ignore[index]
        return int(n), out
