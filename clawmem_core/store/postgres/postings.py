"""The packed keyword postings of the PostgreSQL store (``clawmem_postings``): held while a sync
writes keyword rows (:class:`_HeldPostings`, from the term counts it computed for them) and written
at the sync's end (:meth:`_Postings.settle`), one segment per term, merged past
:data:`MAX_POSTING_SEGMENTS`. The search side that reads them is :mod:`.keywords`."""

from __future__ import annotations

import itertools
import logging
import threading
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:
    import numpy as np
    import psycopg

log = logging.getLogger("clawmem")

#: Segments of one term's postings an agent's generation keeps before they are merged into one.
MAX_POSTING_SEGMENTS = 8
#: Keyword rows a sync leaves to be read from their terms before it writes their postings: a
#: sync that changes a file or two costs one more statement, not a write of every term it holds.
SETTLE_MIN_ROWS = 256
#: Rows of which a sync writes the postings in one statement (more when that would make more than
#: half of :data:`MAX_POSTING_SEGMENTS` segments).
SETTLE_BATCH_ROWS = 25_000
#: Postings of the keyword rows a store handle wrote that it keeps for :meth:`_Postings.settle`
#: (14 bytes each); past this, it forgets them and settle has the server read the rows' terms.
MAX_HELD_POSTINGS = 20_000_000


class _HeldPostings:
    """The postings of the keyword rows a store handle wrote into one generation, from the term
    counts it computed for them (what their ``tsvector`` holds: each term with its count, capped
    as positions are), kept until :meth:`_Postings.settle` packs them: the server need not read
    the rows' terms back. Rows deleted since are still held (settle leaves them out)."""

    def __init__(self, gen: int) -> None:
        self.gen = gen
        self.lock = threading.Lock()
        #: term -> its number (in the order first held)
        self.ids: dict[str, int] = _TermIds()
        #: per write: the rows (int64), and per posting the row, the term's number, its count
        self.parts: list[tuple[Any, Any, Any, Any]] = []
        self.held = 0
        #: False once postings were forgotten (too many)
        self.whole = True

    def add(self, rows: Sequence[tuple[int, Mapping[str, int]]]) -> None:
        """Hold the postings of ``rows``: ``(rid, term -> count)`` each."""
        self.add_numbered([r for r, _ in rows], self.number([c for _, c in rows]))

    def number(self, counts: Sequence[Mapping[str, int]]) -> tuple[Any, Any, Any] | None:
        """The postings of rows whose ids are not known yet (``term -> count`` each, in the order
        of the rows), for :meth:`add_numbered`: per row its number of terms, per posting the
        term's number and its count. Numbers terms not seen before (a number given to a term
        whose rows are never added is harmless: no posting refers to it). ``None`` once
        postings are no longer held."""
        import numpy as np

        from .values import _MAX_POSITIONS

        with self.lock:
            if not self.whole or not counts:
                return None
            total = sum(map(len, counts))
            sizes = np.fromiter(map(len, counts), dtype=np.int64, count=len(counts))
            # (a term not seen before is numbered as it is met: ``_TermIds.__missing__``)
            tids = np.fromiter(map(self.ids.__getitem__, itertools.chain.from_iterable(counts)), dtype=np.int32, count=total)
        tfs = np.fromiter(itertools.chain.from_iterable([c.values() for c in counts]), dtype=np.int64, count=total)
        np.minimum(tfs, _MAX_POSITIONS, out=tfs)
        return sizes, tids, tfs.astype(np.int16)

    def add_numbered(self, rids: Sequence[int], numbered: tuple[Any, Any, Any] | None) -> None:
        """Hold the postings :meth:`number` gave for rows now known by ``rids`` (in the same order)."""
        import numpy as np

        if numbered is None or not len(rids):
            return
        sizes, tids, tfs = numbered
        with self.lock:
            if not self.whole:
                return
            rids = np.asarray(rids, dtype=np.int64)
            self.parts.append((rids, np.repeat(rids, sizes), tids, tfs))
            self.held += len(tids)
            if self.held > MAX_HELD_POSTINGS:
                self.whole = False
                self.ids, self.parts = _TermIds(), []

    def segments(self, new: "np.ndarray", cuts: Sequence[int], low: int) -> list[tuple[str, int, bytes, bytes]] | None:
        """``(term, upto, rids, tfs)`` packed for each segment of rows ``(low, cut]`` of ``cuts``,
        of the rows ``new`` only (ascending): ``None`` when some row of ``new`` is not held."""
        import numpy as np

        with self.lock:
            if not self.whole or not self.parts:
                return None
            held = np.sort(np.concatenate([p[0] for p in self.parts]))
            at = np.searchsorted(held, new)
            if len(new) and (at.max() >= len(held) or not (held[at] == new).all()):
                return None
            rids = np.concatenate([p[1] for p in self.parts])
            tids = np.concatenate([p[2] for p in self.parts])
            tfs = np.concatenate([p[3] for p in self.parts])
            terms = list(self.ids)
        at = np.minimum(np.searchsorted(new, rids), max(len(new) - 1, 0))
        keep = new[at] == rids if len(new) else np.zeros(len(rids), dtype=bool)
        rids, tids, tfs = rids[keep], tids[keep], tfs[keep]
        if len(rids) > 1 and not (rids[1:] >= rids[:-1]).all():  # (held in the order written: by rid)
            order = np.argsort(rids, kind="stable")
            rids, tids, tfs = rids[order], tids[order], tfs[order]
        out: list[tuple[str, int, bytes, bytes]] = []
        for high in cuts:
            a, b = np.searchsorted(rids, [low, high], side="right")
            # by term, then row: the postings (in row order) sorted on (term number, position)
            key = np.sort((tids[a:b].astype(np.int64) << 32) | np.arange(b - a, dtype=np.int64))
            order = key & 0xFFFFFFFF
            r, t, f = rids[a:b][order].astype(">i8"), (key >> 32).astype(np.int32), tfs[a:b][order].astype(">i2")
            starts = np.flatnonzero(np.r_[True, t[1:] != t[:-1]]) if len(t) else np.zeros(0, dtype=np.int64)
            ends = np.r_[starts[1:], len(t)]
            for i, j in zip(starts.tolist(), ends.tolist()):
                out.append((terms[int(t[i])], int(high), r[i:j].tobytes(), f[i:j].tobytes()))
            low = high
        return out


class _TermIds(dict):  # type: ignore[type-arg]
    """Terms' numbers: a term not numbered yet gets the next number when it is looked up."""

    def __missing__(self, term: str) -> int:
        n = self[term] = len(self)
        return n


class _Postings:
    """The write half of the keyword postings: :meth:`settle`, run at the end of each sync."""

    def settle(self) -> None:
        """Write the packed postings (``clawmem_postings``) of the keyword rows added to the live
        generation since the last time: one segment per term, for the rows up to the newest;
        a term's segments merged into one (less the rows deleted since) once they are more than
        :data:`MAX_POSTING_SEGMENTS`. Run at the end of a sync, with the sync lock held; nothing
        while fewer than :data:`SETTLE_MIN_ROWS` were added (searches read those from their terms).
        The postings come from what this handle held of the rows it wrote (:class:`_HeldPostings`),
        sent in one statement; when it holds not every new row (another process wrote some, or a
        sync was killed), the server builds them from the rows' terms."""
        if self._gen is not None:
            return
        with self._conn() as conn:
            row = conn.execute(
                f"SELECT (SELECT count(*) FROM (SELECT 1 FROM clawmem_chunks AS c WHERE c.agent = a.agent "
                f"AND c.generation = a.generation AND c.part = 0 AND c.rid > {self._UPTO} LIMIT %s) AS t) "
                "FROM clawmem_agents AS a WHERE a.agent = %s",
                (SETTLE_MIN_ROWS, self.agent),
            ).fetchone()
        if row is None or int(row[0]) < max(1, SETTLE_MIN_ROWS):
            return
        with self._write() as (conn, gen):
            # under the agent's row lock: no keyword row of the agent is written meanwhile
            upto, top = conn.execute(
                f"SELECT {self._UPTO}, (SELECT max(c.rid) FROM clawmem_chunks AS c WHERE c.agent = a.agent "
                "AND c.generation = a.generation AND c.part = 0) FROM clawmem_agents AS a WHERE a.agent = %s",
                (self.agent,),
            ).fetchone()  # type: ignore[misc]
            if top is None or int(top) <= int(upto):
                return
            args = {"agent": self.agent, "gen": gen, "upto": int(upto), "top": int(top), "most": MAX_POSTING_SEGMENTS}
            # the new rows in a few batches of rows, a segment each: each term's postings of a
            # batch gathered in one hash table (unordered: in the order the rows are read, sorted
            # by the reader where they are not)
            got = conn.execute(
                "SELECT string_agg(int8send(rid), ''::bytea ORDER BY rid) FROM clawmem_chunks WHERE agent = %(agent)s "
                "AND generation = %(gen)s AND part = 0 AND rid > %(upto)s AND rid <= %(top)s",
                args,
            ).fetchone()
            new, _ = self._unpack(got[0] if got else None, None)
            step = max(SETTLE_BATCH_ROWS, -(-len(new) // max(1, MAX_POSTING_SEGMENTS // 2)))
            cuts = [int(x) for x in new[step - 1::step]]
            if not cuts or cuts[-1] != int(top):
                cuts.append(int(top))
            held, self._held = self._held, None
            packed = held.segments(new, cuts, int(upto)) if held is not None and held.gen == gen else None
            if packed is not None:
                # the postings this handle held for the rows it wrote: sent packed, one statement
                conn.execute(
                    "INSERT INTO clawmem_postings (agent, generation, term, upto, rids, tfs) "
                    "SELECT %s, %s, u.term, u.upto, u.rids, u.tfs "
                    "FROM unnest(%s::text[], %s::bigint[], %b::bytea[], %b::bytea[]) AS u (term, upto, rids, tfs)",
                    (self.agent, gen, [p[0] for p in packed], [p[1] for p in packed], [p[2] for p in packed],
                     [p[3] for p in packed]),
                )
            else:  # rows another handle wrote (or a sync that was killed): their terms read by the server
                conn.execute("SET LOCAL work_mem = '64MB'")
                low = int(upto)
                for high in cuts:
                    conn.execute(
                        "INSERT INTO clawmem_postings (agent, generation, term, upto, rids, tfs) "
                        f"SELECT %(agent)s, %(gen)s, x.lexeme, %(high)s, {self._PACKED_HASHED} "
                        "FROM clawmem_chunks AS c CROSS JOIN LATERAL unnest(c.terms) AS x WHERE c.agent = %(agent)s "
                        "AND c.generation = %(gen)s AND c.part = 0 AND c.rid > %(low)s AND c.rid <= %(high)s "
                        "GROUP BY x.lexeme",
                        {**args, "low": low, "high": high},
                    )
                    low = high
            conn.execute("DELETE FROM clawmem_postings WHERE agent = %(agent)s AND generation = %(gen)s AND term = ''",
                         args)
            conn.execute("INSERT INTO clawmem_postings (agent, generation, term, upto, rids, tfs) "
                         "VALUES (%(agent)s, %(gen)s, '', %(top)s, ''::bytea, ''::bytea)", args)
            # the terms just written that now have too many segments: all but the largest of each
            # merged into one (a term's postings are rewritten about once per MAX_POSTING_SEGMENTS
            # syncs that touch it, its bulk only once the rest outgrows it)
            # (one pass over the agent's segments, whatever the table's statistics say)
            many_terms = [r[0] for r in conn.execute(
                "SELECT term FROM clawmem_postings WHERE agent = %(agent)s AND generation = %(gen)s AND term <> '' "
                "GROUP BY term HAVING count(*) > %(most)s AND max(upto) > %(upto)s",
                args,
            ).fetchall()]
            sizes = conn.execute(
                "SELECT term, upto, length(tfs) FROM clawmem_postings WHERE agent = %s AND generation = %s "
                "AND term = ANY(%s::text[])",
                (self.agent, gen, many_terms),
            ).fetchall() if many_terms else []
            if sizes:
                largest: dict[str, tuple[int, int]] = {}
                for term, upto_, size in sizes:
                    if term not in largest or (size, -upto_) > (largest[term][1], -largest[term][0]):
                        largest[term] = (upto_, size)
                chosen = [(t, u) for t, u, _ in sizes if largest[t][0] != u]
                many = conn.execute(
                    "SELECT s.term, s.upto, s.rids, s.tfs FROM clawmem_postings AS s "
                    "JOIN unnest(%s::text[], %s::bigint[]) AS d (term, upto) ON s.term = d.term AND s.upto = d.upto "
                    "WHERE s.agent = %s AND s.generation = %s ORDER BY s.term, s.upto",
                    ([t for t, _ in chosen], [u for _, u in chosen], self.agent, gen),
                ).fetchall()
                self._merge_segments(conn, args, many)

    def _merge_segments(self, conn: "psycopg.Connection", args: dict[str, Any], segments: list[Any]) -> None:
        """Replace each term's ``segments`` (``(term, upto, rids, tfs)``, in rid order) by one,
        without the rows deleted since."""
        import numpy as np

        by_term: dict[str, list[tuple[Any, Any]]] = {}
        uptos: dict[str, list[int]] = {}
        for term, upto, rids, tfs in segments:
            by_term.setdefault(term, []).append(self._unpack(rids, tfs))
            uptos.setdefault(term, []).append(int(upto))
        if not any(len(p[0]) for parts in by_term.values() for p in parts):
            return
        low = min(int(p[0].min()) for parts in by_term.values() for p in parts if len(p[0]))
        got = conn.execute(
            "SELECT string_agg(int8send(rid), ''::bytea ORDER BY rid) FROM clawmem_chunks WHERE agent = %(agent)s "
            "AND generation = %(gen)s AND part = 0 AND rid >= %(low)s AND rid <= %(top)s",
            {**args, "low": low},
        ).fetchone()
        live, _ = self._unpack(got[0] if got else None, None)
        merged = []
        for term, parts in by_term.items():
            rids, tf = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
            order = np.argsort(rids, kind="stable")
            rids, tf = rids[order], tf[order]
            keep = np.isin(rids, live, assume_unique=True)
            if keep.any():
                merged.append((self.agent, args["gen"], term, max(uptos[term]), rids[keep].astype(">i8").tobytes(),
                               tf[keep].astype(">i2").tobytes()))
        conn.execute("DELETE FROM clawmem_postings AS s USING unnest(%s::text[], %s::bigint[]) AS d (term, upto) "
                     "WHERE s.agent = %s AND s.generation = %s AND s.term = d.term AND s.upto = d.upto",
                     ([t for t, us in uptos.items() for _ in us], [u for us in uptos.values() for u in us],
                      self.agent, args["gen"]))
        if merged:
            with conn.cursor() as cur:
                cur.executemany("INSERT INTO clawmem_postings (agent, generation, term, upto, rids, tfs) "
                                "VALUES (%s, %s, %s, %s, %s, %s)", merged)
