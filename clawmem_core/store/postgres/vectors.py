"""Vectors in the PostgreSQL store: the vector phase (pending chunks completed with their
vectors), the counts a search asks for, the search (exact, or through an HNSW index shared by
every agent) and the HNSW build."""

from __future__ import annotations

import contextlib
import logging
import math
import time
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

from ..base import ChunkRow, VectorCounts
from .connection import _again_if_lost
from .values import VectorArray, _now_ms, _vec, register_binary

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger("clawmem")

#: Agents with fewer vectors than this are searched exactly; above it, through HNSW.
EXACT_BELOW = 20_000
#: HNSW candidates examined per query (at least the number asked for): ``store.vector.hnsw_ef_search``.
#: At 1M 384-d chunks, for search()'s 200 candidates through the halfvec index, recall@10 of real
#: questions (far from every chunk) is 0.93 at 400 and 0.96 at 600, for about 1.3 times the time
#: (bench/results/POSTGRES.md); draws like the data are at 0.99 from 400 up.
HNSW_EF_SEARCH = 600
#: pgvector's ``hnsw.iterative_scan``: keep scanning the graph until enough rows pass the agent
#: filter (an agent with few of the index's rows would otherwise get fewer results than asked for).
HNSW_ITERATIVE_SCAN = "relaxed_order"
_ITERATIVE_SCANS = ("off", "relaxed_order", "strict_order")
#: An agent with few of a shared HNSW index's rows is searched exactly: to return ``limit`` rows the
#: filtered graph walk visits about ``limit / share`` index entries, each costing about this many
#: exact comparisons (measured at 1M 384-d rows: ~80 us a visited entry against ~5 us an exact row).
#: Exact is chosen when ``count < HNSW_VISIT_COST * limit / share``, i.e. ``count**2 < cost * limit * rows``.
HNSW_VISIT_COST = 20
#: ``maintenance_work_mem`` for the store's own HNSW build (``store.vector.hnsw_build_memory``):
#: raised to this for the build only, never lowered below the server's setting. Small enough for
#: a 1 GB managed server; a larger graph is built partly on disk (slower, same index).
HNSW_BUILD_MEMORY = "256MB"
#: pgvector's limits on the dimensions of an HNSW index: ``vector`` 2,000, ``halfvec`` 4,000.
_HNSW_MAX_DIMS = {"vector": 2000, "halfvec": 4000}
#: A failed automatic build is tried again after this many seconds (searches stay exact meanwhile).
_HNSW_RETRY_SECONDS = 600.0


#: The index types the store searches through, preferred first. Earlier versions built ``vector``
#: indexes; they are still used where they exist.
_HNSW_TYPES = ("halfvec", "vector")


def _hnsw_name(kind: str, dims: int) -> str:
    return f"clawmem_chunks_hnsw_half_{int(dims)}" if kind == "halfvec" else f"clawmem_chunks_hnsw_{int(dims)}"


def hnsw_type(dims: int) -> str | None:
    """The type the store builds its HNSW index for ``dims``-dimensional vectors in: ``halfvec``
    (half the size of ``vector``, up to 4,000 dimensions); None above pgvector's limit (exact search)."""
    return "halfvec" if 0 < dims <= _HNSW_MAX_DIMS["halfvec"] else None


def hnsw_index(conn: "psycopg.Connection", dims: int) -> str | None:
    """The type of the valid HNSW index over ``dims``-dimensional vectors, None without one (an index
    still being built, or left invalid by a build that died, does not count)."""
    for kind in _HNSW_TYPES:
        row = conn.execute(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", (_hnsw_name(kind, dims),)
        ).fetchone()
        if row and row[0]:
            return kind
    return None


def _drop_invalid_hnsw(conn: "psycopg.Connection", dims: int) -> None:
    """Drop the HNSW indexes over ``dims`` left invalid by a build that died (the caller holds the
    build lock, so none is being built)."""
    for kind in _HNSW_TYPES:
        row = conn.execute(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", (_hnsw_name(kind, dims),)
        ).fetchone()
        if row and not row[0]:
            conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {_hnsw_name(kind, dims)}")


def build_hnsw(conn: "psycopg.Connection", dims: int) -> None:
    """Create the HNSW (cosine) index over ``dims``-dimensional vectors (all agents) on ``conn``
    (autocommit), without blocking writers: ``halfvec``, so the graph takes half the memory and
    disk of full-precision vectors (searches rank its candidates at full precision)."""
    kind = hnsw_type(dims)
    if kind is None:
        raise ValueError(f"pgvector cannot index {dims}-dimensional vectors with HNSW")
    conn.execute(
        f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {_hnsw_name(kind, dims)} ON clawmem_chunks "
        f"USING hnsw ((embedding::{kind}({int(dims)})) {kind}_cosine_ops) WHERE dims = {int(dims)}"
    )


class _HnswBuild:
    """The HNSW build of :class:`~clawmem_core.store.postgres.PostgresBackend`."""

    def build_hnsw(self, dims: int) -> bool:
        """Build the HNSW index over ``dims``-dimensional vectors (one for all agents), without
        blocking writers, on a connection of its own whose ``maintenance_work_mem`` is raised to
        ``hnsw_build_memory`` (never lowered): the setting ends with that connection. One process
        builds at a time (an advisory lock); an invalid index left by a build that died is dropped
        and built again. A build that fails is logged, not raised (the rows are written and
        searches stay exact) and tried again after a while. Returns whether the index is there."""
        import psycopg

        if hnsw_type(dims) is None:
            return False
        failed = self._hnsw_failed.get(dims)
        if failed is not None and time.monotonic() - failed < _HNSW_RETRY_SECONDS:
            return False
        import hashlib

        key = int.from_bytes(hashlib.sha256(f"clawmem:hnsw:{int(dims)}".encode()).digest()[:8], "big", signed=True)
        try:
            conn = psycopg.connect(self._url, autocommit=True, connect_timeout=10)
        except psycopg.Error as exc:
            self._build_failed(dims, exc)
            return False
        # pgvector's notices (a graph that no longer fits in memory, ...) go to the log
        conn.add_notice_handler(lambda diag: log.info("PostgreSQL: %s", diag.message_primary))
        try:
            if not conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]:  # type: ignore[index]
                return False  # another process is building it
            if hnsw_index(conn, dims) is not None:
                return True
            _drop_invalid_hnsw(conn, dims)
            server_kb = int(conn.execute(
                "SELECT pg_size_bytes(current_setting('maintenance_work_mem')) / 1024").fetchone()[0])  # type: ignore[index]
            if self.hnsw_build_memory_kb > server_kb:
                conn.execute("SELECT set_config('maintenance_work_mem', %s, false)", (f"{self.hnsw_build_memory_kb}kB",))
            try:
                build_hnsw(conn, dims)
            except psycopg.Error as exc:
                if not (exc.sqlstate or "").startswith("53"):
                    raise
                # out of memory or of shared memory (a parallel build takes all of
                # maintenance_work_mem as shared memory, more than a container's /dev/shm may
                # hold): once more without parallel workers, which take only what they use
                log.warning("HNSW index build for %d-d vectors ran out of resources (%s); building it "
                            "again without parallel workers", dims, self.clean(str(exc)).strip())
                _drop_invalid_hnsw(conn, dims)
                conn.execute("SET max_parallel_maintenance_workers = 0")
                build_hnsw(conn, dims)
            self._hnsw_failed.pop(dims, None)
            return hnsw_index(conn, dims) is not None
        except psycopg.Error as exc:
            self._build_failed(dims, exc)
            return False
        finally:
            conn.close()

    def _build_failed(self, dims: int, exc: BaseException) -> None:
        self._hnsw_failed[dims] = time.monotonic()
        log.warning("could not build the HNSW index for %d-d vectors (searches stay exact; tried again in %d "
                    "minutes): %s", dims, _HNSW_RETRY_SECONDS // 60, self.error("PostgreSQL error", exc))


class _Vectors:
    """The vector side of :class:`~clawmem_core.store.postgres.PostgresStore`."""


    @_again_if_lost
    def pending_chunks(self, limit: int, after: int = 0, paths: Sequence[str] | None = None) -> list[tuple[int, ChunkRow]]:
        if paths is not None and not paths:
            return []
        where = "" if paths is None else " AND path = ANY(%(paths)s)"
        with self._conn(read=True) as conn:
            rows = conn.execute(
                f"SELECT rid, id, path, source, start_line, end_line, hash, model, text FROM clawmem_chunks "
                f"WHERE agent = %(agent)s AND generation = {self._g()} AND pending = 1 AND rid > %(after)s{where} "
                f"ORDER BY rid LIMIT %(limit)s",
                {"agent": self.agent, "after": int(after), "limit": int(limit),
                 "paths": list(paths)[:500] if paths is not None else None},
            ).fetchall()
        return [(int(r[0]), ChunkRow(*r[1:], pending=True)) for r in rows]

    @_again_if_lost
    def set_vectors(self, items: Sequence[tuple[str, Sequence[float] | None, list[ChunkRow]]]) -> int:
        now = _now_ms()
        dims = next((len(v) for _, v, _ in items if v), None) or next(
            (len(w.embedding) for _, _, ws in items for w in ws if w.embedding), None
        )
        first: dict[str, tuple[Sequence[float] | None, list[ChunkRow]]] = {}
        for cid, vec, windows in items:
            first.setdefault(cid, (vec, windows))
        if not first:
            return 0
        with self._write(read_generation=False) as (conn, gen):
            register_binary(conn)
            # One statement for the batch, the vectors binary: each chunk found by its unique key
            # (``pending <> 0``, not ``= 1``: the partial index of pending rows, which the planner
            # may otherwise prefer on statistics that lag behind a keyword phase that just wrote
            # them, would be scanned for every chunk). A chunk no longer pending (replaced or
            # deleted since it was read) is not updated and returns nothing. Without window rows
            # to add, nothing is read before the COMMIT: one round trip in all (two the first
            # time, for the ``vector`` type's OID).
            live = isinstance(gen, str)
            ids = list(first)
            vecs = [first[cid][0] or None for cid in ids]
            cur = conn.cursor()
            cur.execute(
                "UPDATE clawmem_chunks AS c SET embedding = u.embedding, dims = u.dims, pending = 0, updated_at = %s "
                "FROM unnest(%s::text[], %s::int[], %b::vector[]) AS u(id, dims, embedding) "
                f"WHERE c.agent = %s AND c.generation = {gen if live else '%s'} AND c.id = u.id AND c.pending <> 0 "
                "RETURNING c.id",
                (now, ids, [len(v) if v else None for v in vecs], VectorArray(self._vector_oid(conn), vecs),
                 self.agent, self.agent if live else gen),
            )
            rows: list[tuple[str]] | None = None
            windows: list[tuple[Any, ...]] = []
            if any(ws for _, ws in first.values()):
                rows = cur.fetchall()
                if live:  # the generation read (as a number from here on)
                    gen, live = self._generation(conn), False
                windows = [self._chunk_values(w, gen, now) for (cid,) in rows for w in first[cid][1]]
            if windows:
                with conn.cursor() as wcur:
                    wcur.executemany(self._CHUNK_INSERT + " ON CONFLICT (agent, generation, id) DO NOTHING", windows)
            if dims and dims != self.vector_dims:  # (nothing is written when no chunk was completed)
                conn.execute(
                    f"INSERT INTO clawmem_meta (agent, generation, key, value) SELECT %s, {gen if live else '%s'}, "
                    "'vector_dims', %s WHERE EXISTS (SELECT 1 FROM clawmem_chunks WHERE agent = %s AND updated_at = %s "
                    "AND id = ANY(%s) AND pending = 0) "
                    "ON CONFLICT (agent, generation, key) DO UPDATE SET value = excluded.value",
                    (self.agent, self.agent if live else gen, str(dims), self.agent, now, list(first)),
                )
        if rows is None:
            rows = cur.fetchall()
        cur.close()
        done = len(rows)
        if dims and done:
            self.vector_dims = dims
            self._maybe_build_hnsw(dims, sum(1 for (cid,) in rows if first[cid][0])
                                   + sum(1 for w in windows if w[14] is not None), after=rows[0][0])
        return done

    def _vector_oid(self, conn: "psycopg.Connection") -> int:
        """The OID of pgvector's ``vector`` type in this database (asked once per backend)."""
        oid = self.backend.vector_oid
        if oid is None:
            oid = self.backend.vector_oid = int(conn.execute("SELECT 'vector'::regtype::oid").fetchone()[0])  # type: ignore[index]
        return oid

    def pending_ids(self, ids: Iterable[str]) -> set[str]:
        ids = list(dict.fromkeys(ids))
        if not ids:
            return set()

        def run(conn: "psycopg.Connection", memo: dict[str, Any] | None) -> set[str]:
            known = memo.get("flags", set()) if memo is not None else set()
            if all(i in known for i in ids):  # read with the candidates in this snapshot
                return set(ids) & memo["pending"]  # type: ignore[index]
            rows = conn.execute(
                f"SELECT id FROM clawmem_chunks WHERE agent = %(agent)s AND generation = {self._g()} "
                f"AND pending = 1 AND id = ANY(%(ids)s)",
                {"agent": self.agent, "ids": ids},
            ).fetchall()
            found = {r[0] for r in rows}
            if memo is not None:  # (an id no longer there: not pending, as read outside a snapshot)
                memo.setdefault("flags", set()).update(ids)
                memo.setdefault("pending", set()).update(found)
            return found

        return self._read(run)

    @_again_if_lost
    def vector_counts(self) -> VectorCounts:
        if self._gen is not None:  # a generation being built
            with self._conn(read=True) as conn:
                row = conn.execute(
                    f"SELECT count(*), coalesce(sum(pending), 0), "
                    f"coalesce(sum(CASE WHEN pending = 1 THEN length(text) END), 0) FROM clawmem_chunks "
                    f"WHERE agent = %(agent)s AND generation = {self._g()} AND part = 0",
                    {"agent": self.agent},
                ).fetchone()
            total, pending, chars = (int(x) for x in row)  # type: ignore[union-attr]
            return VectorCounts(total - pending, total, chars)
        # Asked on every search: the pending rows through their partial index, and the total kept
        # per data version (read with the version, in one statement, when it changed).
        return self._read(self._vector_counts)

    def _vector_counts(self, conn: "psycopg.Connection", memo: dict[str, Any] | None) -> VectorCounts:
        if memo is not None:
            if "vectors" in memo:
                return memo["vectors"]  # type: ignore[no-any-return]
            last = self._last_counts
            if last is not None and "token" in memo and memo["token"] == last[0]:  # same version, same counts
                memo["vectors"] = last[1]
                return last[1]
        known = self._total
        row = conn.execute(
            "SELECT a.generation, a.data_version, p.n, p.chars, "
            "CASE WHEN (a.generation, a.data_version) IS DISTINCT FROM (%(g)s::bigint, %(v)s::bigint) THEN "
            "(SELECT count(*) FROM clawmem_chunks AS c WHERE c.agent = a.agent AND c.generation = a.generation "
            "AND c.part = 0) END FROM clawmem_agents AS a CROSS JOIN LATERAL (SELECT count(*) AS n, "
            "coalesce(sum(length(c.text)), 0) AS chars FROM clawmem_chunks AS c WHERE c.agent = a.agent "
            "AND c.generation = a.generation AND c.pending = 1 AND c.part = 0) AS p WHERE a.agent = %(agent)s",
            {"agent": self.agent, "g": known[0][0] if known else None, "v": known[0][1] if known else None},
        ).fetchone()
        if row is None:
            out = VectorCounts(0, 0, 0)
        else:
            if row[4] is not None or known is None:
                known = self._total = ((row[0], row[1]), int(row[4] or 0))
            total, pending = known[1], int(row[2])
            out = VectorCounts(total - pending, total, int(row[3]))
        token = (int(row[0]), int(row[1])) if row else None
        self._last_counts = (token, out)
        if memo is not None:
            memo["vectors"] = out
            memo.setdefault("token", token)
        return out

    def vector_search(self, query: Sequence[float], limit: int) -> list[tuple[str, float]]:
        dims = len(query)
        if not dims or limit <= 0:
            return []
        rows = self._read(lambda conn, memo: self._vector_rows(conn, memo, _vec(query), dims, int(limit)))
        out = []
        for cid, d in rows:
            if d is not None and math.isfinite(d):
                out.append((cid, 1.0 - float(d)))
        return out

    #: What the vector query returns of each row besides its distance (search asks for it next).
    _VECTOR_COLS = "id, path, source, start_line, end_line, pending"

    def _vector_rows(self, conn: "psycopg.Connection", memo: dict[str, Any] | None, q: str, dims: int,
                     limit: int) -> list[tuple[str, float]]:
        token = self._token(conn, memo)
        if (self._gen, token) != self._vec_token:  # vectors counted per data version
            self._vec_count, self._vec_token = {}, (self._gen, token)
            self._index_size = {}
        count = self._vec_count.get(dims)
        if count is None:
            row = conn.execute(
                f"SELECT count(*) FROM clawmem_chunks WHERE agent = %(agent)s AND generation = {self._g()} "
                f"AND dims = {dims}",
                {"agent": self.agent},
            ).fetchone()
            count = self._vec_count[dims] = int(row[0])  # type: ignore[index]
        if not count:
            return []
        params = {"agent": self.agent, "q": q, "limit": limit}
        kind = self._hnsw_type(conn, dims) if count >= self.backend.exact_below else None
        if kind is None or count * count < self.backend.hnsw_visit_cost * limit * self._index_rows(conn, dims):
            rows = conn.execute(
                f"SELECT embedding <=> %(q)s::vector AS d, {self._VECTOR_COLS} FROM clawmem_chunks "
                f"WHERE agent = %(agent)s AND generation = {self._g()} AND dims = {dims} ORDER BY d, rid LIMIT %(limit)s",
                params,
            ).fetchall()
        else:
            ef = max(self.backend.hnsw_ef_search, min(limit, 1000))
            # The settings hold for this query only (rolled back with it), sent with it in one round trip.
            with self._rolled_back(conn):
                # one statement; the agent's rows by the btree, then a sort, can look cheaper on
                # stale statistics (enable_sort off)
                conn.execute(
                    "SELECT set_config('hnsw.ef_search', %s, true), set_config('hnsw.iterative_scan', %s, true), "
                    "set_config('enable_sort', 'off', true)",
                    (str(ef), self.backend.hnsw_iterative_scan),
                )
                # the graph walk orders by the index's own expression; the candidates are then
                # ranked by their full-precision distance (the heap row is read anyway)
                rows = conn.execute(
                    f"WITH c AS MATERIALIZED (SELECT rid, embedding <=> %(q)s::vector AS d, {self._VECTOR_COLS} "
                    f"FROM clawmem_chunks WHERE agent = %(agent)s AND generation = {self._g()} AND dims = {dims} "
                    f"ORDER BY embedding::{kind}({dims}) <=> %(q)s::{kind}({dims}) LIMIT %(limit)s) "
                    f"SELECT d, {self._VECTOR_COLS} FROM c ORDER BY d, rid",
                    params,
                ).fetchall()
        self._remember(memo, (r[1:] for r in rows))
        return [(r[1], r[0]) for r in rows]

    @contextlib.contextmanager
    def _rolled_back(self, conn: "psycopg.Connection") -> Iterator[None]:
        """Statements whose effects (``SET LOCAL``-like settings) end with them, pipelined: in a
        search's snapshot up to a savepoint (that snapshot's transaction is this store's, not
        psycopg's), else in a transaction of their own."""
        if self._in_snapshot():
            conn.execute("SAVEPOINT clawmem_settings")
            yield
            conn.execute("ROLLBACK TO SAVEPOINT clawmem_settings")
            return
        with conn.pipeline(), conn.transaction(force_rollback=True):
            yield

    def _index_rows(self, conn: "psycopg.Connection", dims: int) -> float:
        """The planner's estimate of the rows in the (all agents') HNSW index for ``dims``; 0 if unknown."""
        rows = self._index_size.get(dims)
        if rows is None:
            row = conn.execute(
                "SELECT reltuples FROM pg_class WHERE oid = to_regclass(%s)", (_hnsw_name(self._hnsw[dims], dims),)
            ).fetchone()
            rows = self._index_size[dims] = max(0.0, float(row[0])) if row else 0.0
        return rows

    def _hnsw_type(self, conn: "psycopg.Connection", dims: int) -> str | None:
        """The type of the valid HNSW index over ``dims``-dimensional vectors, None without one."""
        kind = self._hnsw.get(dims)
        if kind is None:
            kind = hnsw_index(conn, dims)
            if kind is not None:
                self._hnsw[dims] = kind
        return kind

    def _maybe_build_hnsw(self, dims: int, written: int, after: str | None = None) -> None:
        """Build the HNSW index for ``dims``-dimensional vectors once an agent has enough of them
        (one index per dimension count, shared by every agent). ``written``: vectors just written.
        The agent's vectors are counted only when the last count plus those written since could
        reach the threshold (not after every batch of a vector phase). ``after`` (the vector phase:
        the id of a chunk it just completed): not while chunks of that chunk's model wait for their
        vectors, so that the graph is built once over them all rather than grown a vector at a
        time (an insert into the graph costs several times what a bulk build spends on a vector);
        searches stay exact until then."""
        if dims in self._hnsw or hnsw_type(dims) is None:
            return
        bound = self._vec_bound.get(dims)
        if bound is not None:
            bound = self._vec_bound[dims] = bound + written
            if bound < self.backend.exact_below:
                return
        with self._conn() as conn:
            if self._hnsw_type(conn, dims):
                return
            if after is not None and bound is not None and self._pending_left(conn, after):
                return
            row = conn.execute(
                f"SELECT count(*) FROM clawmem_chunks WHERE agent = %(agent)s AND generation = {self._g()} "
                f"AND dims = {dims}",
                {"agent": self.agent},
            ).fetchone()
            self._vec_bound[dims] = int(row[0])  # type: ignore[index]
            if self._vec_bound[dims] < self.backend.exact_below:
                return
            if after is not None and bound is None and self._pending_left(conn, after):
                return
        self.backend.build_hnsw(dims)

    def _pending_left(self, conn: "psycopg.Connection", like: str) -> bool:
        """Whether any chunk of the agent of the same model as chunk ``like`` waits for its
        vectors (chunks of other models are left pending by this model's vector phase)."""
        g = self._g()
        row = conn.execute(
            f"SELECT EXISTS (SELECT 1 FROM clawmem_chunks WHERE agent = %(agent)s AND generation = {g} "
            f"AND pending = 1 AND model = (SELECT model FROM clawmem_chunks WHERE agent = %(agent)s "
            f"AND generation = {g} AND id = %(id)s))",
            {"agent": self.agent, "id": like},
        ).fetchone()
        return bool(row[0])  # type: ignore[index]
