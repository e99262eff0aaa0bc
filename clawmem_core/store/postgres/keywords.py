"""Keyword search in the PostgreSQL store: BM25 (FTS5's ``bm25()``) over an agent's keyword rows.

The agent's row lengths and the postings of the terms searched so far are kept in process
(:data:`~.keyword_cache.KEYWORD_CACHE`), per data version of the agent, the terms' postings evicted term by term
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
lines of every row are read in the background and kept with its statistics (:class:`~.keyword_cache._RowMeta`,
about 44 bytes a row, within :data:`~.keyword_cache.MAX_META_BYTES` over the process, carried across writes like
the row lengths): a query's first use then reads its terms' postings and no rows."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

from . import keyword_cache
from .keyword_cache import KEYWORD_CACHE, _B, _K1, _KeywordStats, _RowMeta, _StaleKeywords
from .values import _tsquery

if TYPE_CHECKING:
    import numpy as np
    import psycopg

log = logging.getLogger("clawmem")

#: Keyword rows above those ``clawmem_postings`` holds up to which a term's first use reads their
#: terms by rid (a row's terms filtered to the query's), not through the index of terms.
BY_RID_BELOW = 4096
#: Searches of an agent's statistics that read rows by rid before the rows' metadata is read (in
#: the background, for every row of the agent): an agent searched once costs no more than before.
META_AFTER_READS = 2
#: One load of rows' metadata at a time in the process.
_META_LOADS = threading.Semaphore(1)
#: Attempts to read statistics of one data version while other processes write.
_KEYWORD_ATTEMPTS = 3
#: What a keyword-cache answer returns when it finds the statistics out of date (asked again).
_STALE = object()


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
                or stats.token is None or keyword_cache.MAX_META_BYTES <= 0 or self.backend._pool_size < 2:
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
