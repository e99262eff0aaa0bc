"""What a process keeps of each agent's PostgreSQL keyword rows (:data:`KEYWORD_CACHE`), for the keyword
search of :mod:`.keywords`: the row lengths and corpus statistics per data version (:class:`_KeywordStats`),
the postings of the terms searched (evicted term by term, least recently used first, over every agent,
within :data:`MAX_CACHED_BYTES`), the rows' metadata (:class:`_RowMeta`, within :data:`MAX_META_BYTES`), and the
rows and chunks searches named and showed (by rid: none of it changes under a rid)."""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:
    import numpy as np

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
#: Bytes the metadata of one keyword row takes in :class:`_RowMeta` (its id, file, lines) and of
#: one file (besides its path and source), counted in :data:`MAX_META_BYTES`.
_META_ROW_BYTES = 44
_META_FILE_BYTES = 120
#: The positions of an agent's first rows by rid are kept (4 bytes a rid from its lowest, counted
#: with the rows: at most 8 bytes a row over its 24), as many rows as span at most this many
#: times their number of rids: a term's postings among them are placed by a lookup per posting,
#: those above (rows of later syncs, after other agents' rows) by a binary search.
_DENSE_SPAN = 2


def _search(rows: "np.ndarray", rids: "np.ndarray", base: int) -> "np.ndarray":
    """``base`` + the position of each of ``rids`` in ``rows`` (both ascending), -1 where it is not there."""
    import numpy as np

    far = np.searchsorted(rows, rids)
    found = far < len(rows)
    found[found] = rows[far[found]] == rids[found]
    return np.where(found, far + base, -1).astype(np.int32)


class _StaleKeywords(Exception):
    """The agent's keyword rows changed while their statistics were being read."""


class _RowMeta:
    """The id, path, source and lines of every keyword row of one :class:`_KeywordStats`, in its
    row order (read by :meth:`.keywords._Keywords._load_row_meta`, the new rows' with their lengths when
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
        #: Row position by ``rid - rids[0]`` (-1: no row) of the first :attr:`_dense` rows, the
        #: most that span at most :data:`_DENSE_SPAN` times their number of rids.
        self._at: "np.ndarray | None" = None
        self._dense = 0
        if self.rows:
            import numpy as np

            if int(rids[-1] - rids[0]) < _DENSE_SPAN * self.rows:
                self._dense = self.rows
            else:
                fits = (rids - rids[0]) < _DENSE_SPAN * np.arange(1, self.rows + 1)
                self._dense = int(np.flatnonzero(fits)[-1]) + 1
            at = np.full(int(rids[self._dense - 1] - rids[0]) + 1, -1, dtype=np.int32)
            at[rids[:self._dense] - rids[0]] = np.arange(self._dense, dtype=np.int32)
            self._at = at
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
        return self.rows * _ROW_BYTES + (self._at.nbytes if self._at is not None else 0)

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

        pos = self._placed(rids)
        held = pos >= 0
        if not held.all():
            if not live_only:
                raise _StaleKeywords("postings name rows the statistics do not hold")
            pos, tf = pos[held], tf[held]
        return pos.astype(np.int32), tf.astype(np.uint16)  # 6 bytes a posting (tf <= 256)

    def _placed(self, rids: "np.ndarray") -> "np.ndarray":
        """The row position of each of ``rids`` (ascending), -1 where no row holds it: by lookup
        up to the last of the first :attr:`_dense` rows, by binary search above."""
        import numpy as np

        at = self._at
        if at is None or not len(rids):
            return _search(self.rids, rids, 0)
        cut = int(np.searchsorted(rids, self.rids[self._dense - 1], side="right"))
        off = rids[:cut] - self.rids[0]
        pos = at[off] if not cut or off[0] >= 0 else np.where(off >= 0, at[np.maximum(off, 0)], -1)
        if cut == len(rids):
            return pos
        return np.concatenate([pos, _search(self.rids[self._dense:], rids[cut:], self._dense)])

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
