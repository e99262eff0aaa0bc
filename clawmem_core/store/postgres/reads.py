"""Reads of the PostgreSQL store and their plumbing: the connection a read runs on (this thread's
reading block's, reused across the agents of a search's shared views, or a pooled one), what a
snapshot already answered (its memo), the live generation, and the reads of files and chunks."""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterable, Iterator, Sequence, TypeVar

from ...errors import StoreError
from ..base import ChunkRow, FileState, ReadInterrupted
from .connection import _WRITES, _writing_block
from .keyword_cache import KEYWORD_CACHE

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger("clawmem")
_T = TypeVar("_T")


class _Reads:
    """The reads of :class:`~clawmem_core.store.postgres.PostgresStore`."""

    @contextlib.contextmanager
    def _conn(self, read: bool = False) -> Iterator["psycopg.Connection"]:
        """A connection: this thread's reading block's when one is open (a search holds one
        connection at a time, so concurrent searches never wait on each other for a second), except
        for statements that are not all reads (``read`` false) inside a snapshot; else a pooled one."""
        if self._closed:
            raise StoreError(f"index {self.backend.location} is closed")
        block = self.backend._reading()
        if block is not None and block.snapshot and not read:
            raise RuntimeError("no writes inside a snapshot: its connection is in a read-only transaction")
        if block is None or block.interrupted or _writing_block(self.backend._url) is not None:
            with self.backend.connection() as conn:
                yield conn
            return
        import psycopg

        try:
            yield block.connection()
            block.verify()
        except psycopg.Error as exc:
            block.release(discard=True)
            block.forget()
            raise self.backend.error("PostgreSQL error", exc) from None
        if block.snapshot:
            block.read.add((self.agent, self._gen))

    def reading(self, snapshot: bool = False) -> ContextManager[None]:
        return self.backend.reading(snapshot)

    def _read(self, fn: Callable[["psycopg.Connection", dict[str, Any] | None], _T]) -> _T:
        """``fn(conn, memo)``: a read, on this thread's reading block's connection when one is
        open (``memo``: what its snapshot answered for this agent so far, else ``None``), or on a
        pooled connection. A block's connection is not checked before use: a read that finds it
        lost runs again on a new one (within a snapshot, only if nothing read so far changed)."""
        if self._closed:
            raise StoreError(f"index {self.backend.location} is closed")
        block = self.backend._reading()
        if block is None or _writing_block(self.backend._url) is not None:
            with self.backend.connection() as conn:
                return fn(conn, None)
        import psycopg

        if block.interrupted:
            raise ReadInterrupted("the connection to PostgreSQL was lost during a search, and the index changed")
        key = (self.agent, self._gen)
        for attempt in range(2):
            try:
                conn = block.lazy()  # (taken when a statement is sent: none for what the memo answers)
                memo = block.memo.setdefault(key, {}) if self._gen is None else None
                if memo is not None and not block.snapshot and memo.get("writes") != _WRITES[0]:
                    # outside a snapshot, answers are reused until this process writes (a read
                    # moments earlier: another process's write may land before or after it alike)
                    memo.clear()
                    memo["writes"] = _WRITES[0]
                out = fn(conn, memo)
                block.verify()
            except psycopg.Error as exc:
                # gone (killed, server restarted: AdminShutdown is seen before the connection's
                # state says so) or another operational failure: once more, on a checked connection
                lost = block.lost() or isinstance(exc, psycopg.OperationalError)
                block.release(discard=True)
                block.forget()
                if not lost or attempt:
                    raise self.backend.error("PostgreSQL error", exc) from None
                log.debug("the connection of a search was lost: %s", self.backend.clean(str(exc)))
                continue
            if block.snapshot:
                block.read.add(key)
            return out
        raise AssertionError("unreachable")

    def _in_snapshot(self) -> bool:
        block = self.backend._reading()
        return block is not None and block.snapshot

    _TOKEN = "SELECT generation, data_version FROM clawmem_agents WHERE agent = %s"

    def _token(self, conn: "psycopg.Connection", memo: dict[str, Any] | None) -> tuple[int, int] | None:
        """The agent's (live generation, data version): the snapshot's, or read now."""
        if memo is not None and "token" in memo:
            return memo["token"]  # type: ignore[no-any-return]
        row = conn.execute(self._TOKEN, (self.agent,)).fetchone()
        token = (int(row[0]), int(row[1])) if row else None
        if memo is not None:
            memo["token"] = token
        return token

    @staticmethod
    def _remember(memo: dict[str, Any] | None, rows: Iterable[Sequence[Any]]) -> None:
        """Keep ``(id, path, source, start_line, end_line, pending)`` of chunks read in a snapshot
        (``"flags"``: the chunks whose pending flag it knows; ``"meta"`` may know more chunks)."""
        if memo is None:
            return
        meta, pending = memo.setdefault("meta", {}), memo.setdefault("pending", set())
        flags = memo.setdefault("flags", set())
        for cid, path, source, start, end, pend in rows:
            if cid is None:
                continue
            meta[cid] = (path, source, start, end)
            flags.add(cid)
            if pend:
                pending.add(cid)

    def _generation(self, conn: "psycopg.Connection") -> int:
        if self._gen is not None:
            return self._gen
        row = conn.execute("SELECT generation FROM clawmem_agents WHERE agent = %s", (self.agent,)).fetchone()
        if row is None:
            return -1  # an agent nobody has indexed: no rows
        return int(row[0])

    #: The live generation of the agent, as a SQL expression over the ``%(agent)s`` parameter.
    _LIVE = "(SELECT generation FROM clawmem_agents WHERE agent = %(agent)s)"

    def _g(self) -> str:
        return str(int(self._gen)) if self._gen is not None else self._LIVE

    def file_hashes(self, source: str) -> dict[str, str]:
        return {path: state[1] for path, state in self.file_states(source).items()}

    def file_states(self, source: str) -> dict[str, FileState]:
        with self._conn(read=True) as conn:
            rows = conn.execute(
                f"SELECT path, hash, size, mtime, ctime, ino FROM clawmem_files WHERE agent = %(agent)s "
                f"AND generation = {self._g()} AND source = %(source)s",
                {"agent": self.agent, "source": source},
            ).fetchall()
        return {r[0]: (r[0], r[1], int(r[2]), int(r[3]), int(r[4]), int(r[5])) for r in rows}

    def file_text(self, source: str, path: str) -> tuple[str, int] | None:
        """The text of an indexed file as last indexed, and its mtime (ms); ``None`` if not indexed."""
        with self._conn(read=True) as conn:
            row = conn.execute(
                f"SELECT content, mtime FROM clawmem_files WHERE agent = %(agent)s AND generation = {self._g()} "
                f"AND source = %(source)s AND path = %(path)s",
                {"agent": self.agent, "source": source, "path": path},
            ).fetchone()
        if row is None or row[0] is None:
            return None
        return row[0], int(row[1])

    def file_paths(self, source: str = "memory") -> list[str]:
        """Paths of the indexed files of ``source``."""
        return sorted(self.file_states(source))

    def has_content(self) -> bool:
        def run(conn: "psycopg.Connection", memo: dict[str, Any] | None) -> bool:
            if memo is not None:  # in a search: with the counts it asks for next
                return self._vector_counts(conn, memo).total > 0
            row = conn.execute(
                f"SELECT 1 FROM clawmem_chunks WHERE agent = %(agent)s AND generation = {self._g()} LIMIT 1",
                {"agent": self.agent},
            ).fetchone()
            return row is not None

        return self._read(run)

    def get_chunk_meta(self, ids: Iterable[str]) -> dict[str, tuple[str, str, int, int]]:
        return self._chunks_by_id(ids, texts=False)

    def get_chunks(self, ids: Iterable[str]) -> dict[str, ChunkRow]:
        return self._chunks_by_id(ids, texts=True)

    def _chunks_by_id(self, ids: Iterable[str], texts: bool) -> dict[str, Any]:
        """Chunks by id: ``(path, source, start_line, end_line)`` or, with ``texts``, whole
        :class:`ChunkRow` s. In a block of reads, what it already answered is reused (a search's
        candidates came with their paths and pending flags: :meth:`_remember`), and what is read
        here is kept for the block the same way; only the ids it has not seen are asked for."""
        ids = list(dict.fromkeys(ids))
        if not ids:
            return {}

        def run(conn: "psycopg.Connection", memo: dict[str, Any] | None) -> dict[str, Any]:
            memo = {} if memo is None else memo
            known: dict[str, Any] = memo.setdefault("chunks" if texts else "meta", {})
            missing = [i for i in ids if i not in known]
            rid_of = memo.get("rids", {})
            if missing and texts and rid_of:
                # rows a keyword search of this block named (live at the version it checked):
                # their chunks as the process keeps them, when it does
                kept = KEYWORD_CACHE.row_texts([rid_of[i] for i in missing if i in rid_of])
                known.update((i, kept[rid_of[i]]) for i in missing if rid_of.get(i) in kept)
                missing = [i for i in missing if i not in known]
            if missing:
                rows = conn.execute(
                    f"SELECT id, path, source, start_line, end_line, pending{', hash, model, text' if texts else ''} "
                    f"FROM clawmem_chunks WHERE agent = %(agent)s AND generation = {self._g()} AND id = ANY(%(ids)s)",
                    {"agent": self.agent, "ids": missing},
                ).fetchall()
                self._remember(memo, (r[:6] for r in rows))
                if texts:
                    got = {r[0]: ChunkRow(*r[:5], *r[6:]) for r in rows}
                    known.update(got)
                    by_era: dict[int, dict[int, Any]] = {}
                    for i, row in got.items():
                        if i in rid_of:
                            by_era.setdefault(rid_of[i][0], {})[rid_of[i][1]] = row
                    for era, held in by_era.items():
                        KEYWORD_CACHE.keep_row_texts(era, held)
            return {i: known[i] for i in ids if i in known}

        return self._read(run)
