"""The dreaming tables in the shared PostgreSQL database: one table of recall events and one of preimages,
each with an ``agent`` column; the consolidation lock is a session advisory lock per agent.

``connect`` is a ``psycopg_pool.ConnectionPool`` (its ``connection()`` is used) or any callable returning a
context manager that yields a psycopg connection. Tables are created lazily (``IF NOT EXISTS``) with a schema
version row of their own.
"""

from __future__ import annotations

import hashlib
from contextlib import contextmanager
from typing import Any, Callable, ContextManager, Iterator, Optional, Sequence

from .errors import ConsolidationBusyError, RecallLogError
from .events import SCHEMA_VERSION, Preimage, RecallEvent

__all__ = ["PostgresDreamStore"]

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS clawmem_dreaming_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS clawmem_dreaming_recall (
        id BIGSERIAL PRIMARY KEY, agent TEXT NOT NULL, ts DOUBLE PRECISION NOT NULL, path TEXT NOT NULL,
        start_line INTEGER NOT NULL, end_line INTEGER NOT NULL, content_hash TEXT NOT NULL,
        score DOUBLE PRECISION NOT NULL, rank INTEGER NOT NULL, query_hash TEXT NOT NULL, query_text TEXT NOT NULL,
        session_key TEXT, clipped BOOLEAN NOT NULL DEFAULT FALSE)""",
    "CREATE INDEX IF NOT EXISTS clawmem_dreaming_recall_agent_ts ON clawmem_dreaming_recall (agent, ts)",
    """CREATE TABLE IF NOT EXISTS clawmem_dreaming_preimage (
        id BIGSERIAL PRIMARY KEY, agent TEXT NOT NULL, ts DOUBLE PRECISION NOT NULL, path TEXT NOT NULL,
        content BYTEA, reason TEXT NOT NULL)""",
)
_COLUMNS = ("agent, ts, path, start_line, end_line, content_hash, score, rank, query_hash, query_text, "
            "session_key, clipped")


def _lock_key(agent: str) -> int:
    """A signed 64-bit advisory lock key for ``agent`` (stable across processes)."""
    return int.from_bytes(hashlib.sha256(b"clawmem-dreaming:" + agent.encode("utf-8")).digest()[:8], "big",
                          signed=True)


class PostgresDreamStore:
    """Recall log and preimages in the shared PostgreSQL database (see the module documentation)."""

    def __init__(self, connect: Any) -> None:
        if hasattr(connect, "connection") and callable(connect.connection):
            self._connect: Callable[[], ContextManager[Any]] = connect.connection
        elif callable(connect):
            self._connect = connect
        else:
            raise TypeError("connect must be a psycopg_pool.ConnectionPool or a callable yielding a connection")
        self._ready = False

    @contextmanager
    def _tx(self) -> Iterator[Any]:
        try:
            with self._connect() as conn:
                if not self._ready:
                    with conn.transaction():
                        conn.execute("SELECT pg_advisory_xact_lock(7384610021)")  # one creator at a time
                        for statement in _SCHEMA:
                            conn.execute(statement)
                        row = conn.execute(
                            "SELECT value FROM clawmem_dreaming_meta WHERE key='schema_version'").fetchone()
                        if row is None:
                            conn.execute("INSERT INTO clawmem_dreaming_meta(key, value) VALUES('schema_version', %s)",
                                         (str(SCHEMA_VERSION),))
                        elif int(row[0]) > SCHEMA_VERSION:
                            raise RecallLogError(f"recall log schema {row[0]} is newer than this clawmem")
                    self._ready = True
                with conn.transaction():
                    yield conn
        except (RecallLogError, ConsolidationBusyError):
            raise
        except Exception as exc:
            if type(exc).__module__.startswith("psycopg"):
                raise RecallLogError(f"recall log (PostgreSQL): {exc}") from exc
            raise

    def add_events(self, events: Sequence[RecallEvent]) -> None:
        if not events:
            return
        with self._tx() as conn, conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO clawmem_dreaming_recall({_COLUMNS}) VALUES(%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
                [(e.agent, e.ts, e.path, e.start_line, e.end_line, e.content_hash, e.score, e.rank, e.query_hash,
                  e.query_text, e.session_key, e.clipped) for e in events])

    def prune(self, agent: str, before_ts: float, max_rows: int) -> int:
        with self._tx() as conn:
            a = conn.execute("DELETE FROM clawmem_dreaming_recall WHERE agent=%s AND ts<%s", (agent, before_ts))
            b = conn.execute(
                "DELETE FROM clawmem_dreaming_recall WHERE agent=%s AND id NOT IN (SELECT id FROM "
                "clawmem_dreaming_recall WHERE agent=%s ORDER BY ts DESC, id DESC LIMIT %s)",
                (agent, agent, max(0, int(max_rows))))
            return max(0, a.rowcount) + max(0, b.rowcount)

    def events(self, agent: str, since_ts: float = 0.0) -> list[RecallEvent]:
        with self._tx() as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM clawmem_dreaming_recall WHERE agent=%s AND ts>=%s ORDER BY ts, id",
                (agent, since_ts)).fetchall()
        return [RecallEvent(*r[:11], clipped=bool(r[11])) for r in rows]

    def count_events(self, agent: str) -> int:
        with self._tx() as conn:
            return int(conn.execute("SELECT count(*) FROM clawmem_dreaming_recall WHERE agent=%s",
                                    (agent,)).fetchone()[0])

    def save_preimage(self, agent: str, path: str, content: Optional[bytes], reason: str, ts: float) -> int:
        with self._tx() as conn:
            row = conn.execute(
                "INSERT INTO clawmem_dreaming_preimage(agent, ts, path, content, reason) VALUES(%s,%s,%s,%s,%s) "
                "RETURNING id", (agent, ts, path, content, reason)).fetchone()
            return int(row[0])

    def latest_preimage(self, agent: str, path: str) -> Optional[Preimage]:
        with self._tx() as conn:
            row = conn.execute(
                "SELECT id, agent, ts, path, content, reason FROM clawmem_dreaming_preimage WHERE agent=%s AND "
                "path=%s ORDER BY id DESC LIMIT 1", (agent, path)).fetchone()
        if row is None:
            return None
        return Preimage(int(row[0]), row[1], float(row[2]), row[3], None if row[4] is None else bytes(row[4]), row[5])

    def drop_preimage(self, preimage_id: int) -> None:
        with self._tx() as conn:
            conn.execute("DELETE FROM clawmem_dreaming_preimage WHERE id=%s", (preimage_id,))

    def count_preimages(self, agent: str) -> int:
        with self._tx() as conn:
            return int(conn.execute("SELECT count(*) FROM clawmem_dreaming_preimage WHERE agent=%s",
                                    (agent,)).fetchone()[0])

    @contextmanager
    def consolidation_lock(self, agent: str) -> Iterator[None]:
        """A session advisory lock held on one connection for the whole consolidation."""
        key = _lock_key(agent)
        with self._connect() as conn:
            if conn.autocommit is False and conn.info.transaction_status != 0:
                conn.rollback()
            got = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]
            if not conn.autocommit:
                conn.commit()
            if not got:
                raise ConsolidationBusyError(f"a consolidation of agent {agent!r} is already running")
            try:
                yield
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
                if not conn.autocommit:
                    conn.commit()

    def close(self) -> None:
        """Nothing to close: the connections belong to the caller's pool."""
