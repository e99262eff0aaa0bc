"""Writes of the PostgreSQL store: write transactions (each bumps the agent's data version under
its row lock) and the versions a handle committed itself, the agent's bookkeeping values, files
and chunks, and generations (a full reindex written beside the live one, switched to at once)."""

from __future__ import annotations

import bisect
import contextlib
import json
from typing import TYPE_CHECKING, Any, ContextManager, Iterable, Iterator, Sequence

from ...errors import StoreError
from ..base import ChunkRow, FileRow
from .connection import _WRITES
from .values import BinaryTsVector, BinaryVector, _now_ms, _pg_text, register_binary

if TYPE_CHECKING:
    import psycopg

META_KEY = "memory_index_meta_v1"
#: Versions of its own commits a store handle keeps for :meth:`PostgresStore.others_version`
#: (older ones are counted, not kept).
_OWN_KEPT = 1024


class _Writes:
    """The writes of :class:`~clawmem_core.store.postgres.PostgresStore`."""

    def writing(self) -> ContextManager[None]:
        return self.backend.writing()

    @contextlib.contextmanager
    def _tx(self) -> Iterator["psycopg.Connection"]:
        """A write transaction: holds the agent's row lock and bumps its data version."""
        with self._write() as (conn, _):
            yield conn

    @contextlib.contextmanager
    def _write(self, read_generation: bool = True) -> Iterator[tuple["psycopg.Connection", Any]]:
        """A write transaction (see :meth:`_tx`) and the generation it writes (the live one,
        read under the agent's row lock, or the one being built); without ``read_generation``,
        the live one is a SQL expression over the agent (a ``%s`` parameter) and nothing waits
        for the server before the block's own statements. Pipelined: statements whose results
        are not read go with the next one that is, the ``COMMIT`` with the last."""
        self.backend.check_lock()
        _WRITES[0] += 1
        try:
            with self._write_tx(read_generation) as out:
                yield out
        finally:
            _WRITES[0] += 1

    @contextlib.contextmanager
    def _write_tx(self, read_generation: bool) -> Iterator[tuple["psycopg.Connection", Any]]:
        row: Sequence[Any] | None = None
        gate = self._own_gate
        gated = False
        try:
            with self._conn() as conn, conn.pipeline(), conn.transaction():
                cur = conn.execute(
                    "UPDATE clawmem_agents SET data_version = data_version + 1 WHERE agent = %s "
                    "RETURNING generation, data_version",
                    (self.agent,),
                )
                if self._gen is not None:
                    yield conn, self._gen
                elif not read_generation:
                    yield conn, "(SELECT generation FROM clawmem_agents WHERE agent = %s)"
                else:
                    row = cur.fetchone()
                    yield conn, int(row[0]) if row else -1  # an agent nobody has indexed: no rows
                gate.acquire()  # the COMMIT goes out as the blocks end
                gated = True
            # committed (a commit whose outcome is unknown raised above: never counted as ours)
            if row is None:
                row = cur.fetchone()
            if row is not None:
                self._own_commit(int(row[1]))
        finally:
            if gated:
                gate.release()

    def _own_commit(self, version: int) -> None:
        """Record that this handle's transaction committed the agent's data ``version``."""
        with self._own_gate:
            if version <= self._own_floor:
                self._own_folded += 1
                return
            bisect.insort(self._own, version)
            if len(self._own) > _OWN_KEPT:
                fold = len(self._own) - _OWN_KEPT // 2
                self._own_floor = self._own[fold - 1]
                self._own_folded += fold
                del self._own[:fold]

    def others_version(self) -> Any:
        """A token of the commits to the agent's index by every connection but this handle's own
        write transactions (other processes, other handles of this process): the data version
        (bumped by one by every write transaction, under the agent's row lock) less the versions
        this handle committed. Only a commit known to have succeeded counts as this handle's (one
        rolled back, or whose outcome is unknown, counts as another's: a walk more, never one
        less). A version read while this handle's commit is on its way is counted once that
        commit is recorded: the count waits for it (a round trip at most)."""
        token = self._read(self._token)
        if token is None:
            return (self._gen, None)
        gen, version = token
        with self._own_gate:
            if version < self._own_floor:  # read before the versions still kept (a stale read)
                return (self._gen, gen, version, None)
            return (self._gen, gen, version - self._own_folded - bisect.bisect_right(self._own, version))

    def _get(self, key: str) -> str | None:
        with self._conn(read=True) as conn:
            row = conn.execute(
                f"SELECT value FROM clawmem_meta WHERE agent = %(agent)s AND generation = {self._g()} AND key = %(key)s",
                {"agent": self.agent, "key": key},
            ).fetchone()
        return row[0] if row else None

    def _set(self, key: str, value: str) -> None:
        with self._tx() as conn:
            conn.execute(
                f"INSERT INTO clawmem_meta (agent, generation, key, value) VALUES (%(agent)s, {self._g()}, %(key)s, "
                f"%(value)s) ON CONFLICT (agent, generation, key) DO UPDATE SET value = excluded.value",
                {"agent": self.agent, "key": key, "value": value},
            )

    def get_meta(self) -> dict[str, Any] | None:
        raw = self._get(META_KEY)
        if raw is None:
            return None
        try:
            value = json.loads(raw)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    def set_meta(self, meta: dict[str, Any]) -> None:
        self._set(META_KEY, json.dumps(meta, sort_keys=True))

    def get_value(self, key: str) -> str | None:
        return self._get(f"value:{key}")

    def set_value(self, key: str, value: str) -> None:
        self._set(f"value:{key}", value)

    def data_version(self) -> Any:
        return (self._gen, self._read(self._token))

    def refresh(self) -> None:
        dims = self._get("vector_dims")
        self.vector_dims = int(dims) if dims else None

    def _delete(self, conn: "psycopg.Connection", gen: int, source: str, paths: list[str]) -> None:
        """Delete the chunks of ``paths``: each path's rows found through the path index (an
        equality on each of its columns, in a subquery the planner cannot merge into a join), then
        deleted by rid. With ``path = ANY(...)`` the planner, without statistics (a table that was
        never analyzed: an agent's first sync), took the unique index on ``(agent, generation,
        id)`` and read every row of the agent, for each batch of files: the keyword phase grew with
        the square of the chunk count."""
        conn.execute(
            "DELETE FROM clawmem_chunks WHERE rid = ANY(ARRAY(SELECT c.rid FROM unnest(%s::text[]) AS p (path) "
            "CROSS JOIN LATERAL (SELECT rid FROM clawmem_chunks WHERE agent = %s AND generation = %s AND source = %s "
            "AND path = p.path OFFSET 0) AS c))",
            (paths, self.agent, gen, source),
        )

    #: The columns of a chunk row, as :meth:`_chunk_values` gives them (the terms and the vector
    #: binary: the connection needs :func:`register_binary`).
    _CHUNK_INSERT = (
        "INSERT INTO clawmem_chunks (agent, generation, id, path, source, start_line, end_line, hash, model, text, "
        "part, terms, doc_len, dims, embedding, updated_at, pending) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, "
        "%s, %b::tsvector, %s, %s, %b::vector, %s, %s)"
    )

    def _chunk_values(self, c: ChunkRow, gen: int, now: int) -> tuple[Any, ...]:
        terms: BinaryTsVector | None = None
        doc_len = 0
        text = _pg_text(c.text)
        if not c.window:
            counts, doc_len = self.backend.terms.counts(text)
            terms = BinaryTsVector(counts)
        emb = list(c.embedding) if c.embedding else None
        return (self.agent, gen, c.id, c.path, c.source, c.start_line, c.end_line, c.hash, c.model, text,
                int(c.window), terms, doc_len, len(emb) if emb else None, BinaryVector(emb) if emb else None, now,
                int(c.pending))

    def replace_files(self, items: list[tuple[FileRow, list[ChunkRow]]]) -> None:
        now = _now_ms()
        dims = next((len(c.embedding) for _, chunks in items for c in chunks if c.embedding), None)
        by_source: dict[str, list[str]] = {}
        for file, _ in items:
            by_source.setdefault(file.source, []).append(file.path)
        rows = []
        seen: set[str] = set()
        with self._write() as (conn, gen):
            for _, chunks in items:
                for c in chunks:
                    if c.id not in seen:  # identical pieces of one chunk: one row
                        seen.add(c.id)
                        rows.append(self._chunk_values(c, gen, now))
            for source, paths in by_source.items():
                self._delete(conn, gen, source, paths)
            register_binary(conn)
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO clawmem_files (agent, generation, source, path, hash, mtime, size, content, ctime, ino) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (agent, generation, source, path) "
                    "DO UPDATE SET hash = excluded.hash, mtime = excluded.mtime, size = excluded.size, "
                    "content = excluded.content, ctime = excluded.ctime, ino = excluded.ino",
                    [(self.agent, gen, f.source, f.path, f.hash, f.mtime, f.size, f.text if f.text is None else _pg_text(f.text),
                      f.ctime, f.ino) for f, _ in items],
                )
                if rows:
                    # the rows' ids come back: their postings are held for settle (``_HeldPostings``)
                    with conn.cursor() as ccur:
                        ccur.executemany(self._CHUNK_INSERT + " RETURNING rid", rows, returning=True)
                        rids = []
                        while True:
                            rids.append(ccur.fetchone()[0])  # type: ignore[index]
                            if not ccur.nextset():
                                break
            if dims and dims != self.vector_dims:
                conn.execute(
                    "INSERT INTO clawmem_meta (agent, generation, key, value) VALUES (%s, %s, 'vector_dims', %s) "
                    "ON CONFLICT (agent, generation, key) DO UPDATE SET value = excluded.value",
                    (self.agent, gen, str(dims)),
                )
        keyword = [(rid, r[11].counts) for rid, r in zip(rids, rows) if r[11] is not None] if rows else []
        if keyword:
            self._hold_postings(gen, keyword)
        if dims:
            self.vector_dims = dims
            self._maybe_build_hnsw(dims, sum(1 for r in rows if r[14] is not None))

    def _hold_postings(self, gen: int, rows: list[tuple[int, Any]]) -> None:
        """Hold the postings of keyword ``rows`` (``(rid, term counts)``) just committed to ``gen``
        for :meth:`settle`; those held for another generation are forgotten."""
        from .postings import _HeldPostings

        held = self._held
        if held is None or held.gen != gen:
            held = self._held = _HeldPostings(gen)
        held.add(rows)

    def touch_files(self, files: Sequence[FileRow]) -> None:
        with self._write() as (conn, gen):
            with conn.cursor() as cur:
                cur.executemany(
                    "UPDATE clawmem_files SET mtime = %s, size = %s, ctime = %s, ino = %s WHERE agent = %s "
                    "AND generation = %s AND source = %s AND path = %s",
                    [(f.mtime, f.size, f.ctime, f.ino, self.agent, gen, f.source, f.path) for f in files],
                )

    def delete_files(self, source: str, paths: Iterable[str]) -> None:
        paths = list(paths)
        with self._write() as (conn, gen):
            self._delete(conn, gen, source, paths)
            conn.execute(
                "DELETE FROM clawmem_files WHERE agent = %s AND generation = %s AND source = %s AND path = ANY(%s)",
                (self.agent, gen, source, paths),
            )

    @contextlib.contextmanager
    def rebuild(self) -> Iterator["PostgresStore"]:
        """A new generation of this agent's index; the switch to it is one transaction."""
        with self._conn() as conn:
            gen = int(conn.execute("SELECT nextval('clawmem_generation_seq')").fetchone()[0])  # type: ignore[index]
        tmp = type(self)(self.backend, self.agent, generation=gen, create=False)
        try:
            yield tmp
            with self._tx() as conn:
                conn.execute("UPDATE clawmem_agents SET generation = %s WHERE agent = %s", (gen, self.agent))
            self.vector_dims = tmp.vector_dims
            self._cache_token = None
            self._held = tmp._held  # the postings of the rows it wrote, now the live generation's
        except BaseException:
            with contextlib.suppress(StoreError):
                self._drop_generations(keep_live=True)
            raise
        finally:
            tmp.close()
        with contextlib.suppress(StoreError):
            self._drop_generations(keep_live=True)

    def _drop_generations(self, keep_live: bool) -> int:
        with self._conn() as conn, conn.transaction():
            live = self._generation(conn)
            n = 0
            for table in ("clawmem_chunks", "clawmem_files", "clawmem_meta", "clawmem_postings"):
                # two ranges of the (agent, generation, ...) indexes, not every row of the agent
                cur = conn.execute(f"DELETE FROM {table} WHERE agent = %s AND (generation < %s OR generation > %s)",
                                   (self.agent, live, live))
                n += cur.rowcount or 0
        return n

    def remove_leftovers(self) -> int:
        """Rows of generations that are not live (a rebuild that crashed, or an old generation not
        yet dropped); call with the sync lock held. Also moves vectors stored out of line (an agent
        indexed under schema version 2) into their rows, once per agent."""
        n = self._drop_generations(keep_live=True)
        self._inline_vectors()
        return n
