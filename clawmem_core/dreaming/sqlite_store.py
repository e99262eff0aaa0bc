"""The dreaming tables in the index's own SQLite file (apsw): recall events and preimages, per agent.

Tables are created lazily (``IF NOT EXISTS``) with a schema version row of their own in ``dreaming_meta``, so
the index's schema is not touched. The consolidation lock is an ``flock`` on a file next to the database
(a private in-process lock for an in-memory database).
"""

from __future__ import annotations

import hashlib
import os
import threading
from contextlib import contextmanager
from typing import Any, Iterator, Optional, Sequence

from .errors import ConsolidationBusyError, RecallLogError
from .events import SCHEMA_VERSION, Preimage, RecallEvent

__all__ = ["SqliteDreamStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS dreaming_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS dreaming_recall (
    id INTEGER PRIMARY KEY,
    agent TEXT NOT NULL, ts REAL NOT NULL, path TEXT NOT NULL,
    start_line INTEGER NOT NULL, end_line INTEGER NOT NULL, content_hash TEXT NOT NULL,
    score REAL NOT NULL, rank INTEGER NOT NULL, query_hash TEXT NOT NULL, query_text TEXT NOT NULL,
    session_key TEXT, clipped INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS dreaming_recall_agent_ts ON dreaming_recall (agent, ts);
CREATE TABLE IF NOT EXISTS dreaming_preimage (
    id INTEGER PRIMARY KEY, agent TEXT NOT NULL, ts REAL NOT NULL, path TEXT NOT NULL,
    content BLOB, reason TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS dreaming_preimage_agent ON dreaming_preimage (agent, path, id);
"""

_COLUMNS = ("agent, ts, path, start_line, end_line, content_hash, score, rank, query_hash, query_text, "
            "session_key, clipped")
_MEMORY_LOCKS: dict[str, threading.Lock] = {}
_MEMORY_LOCKS_GUARD = threading.Lock()


def _row(event: RecallEvent) -> tuple[Any, ...]:
    return (event.agent, event.ts, event.path, event.start_line, event.end_line, event.content_hash, event.score,
            event.rank, event.query_hash, event.query_text, event.session_key, int(event.clipped))


class SqliteDreamStore:
    """Recall log and preimages in SQLite. ``target`` is an open ``apsw.Connection`` (the index's; shared, not
    closed here) or a database path (opened here, with a busy timeout)."""

    def __init__(self, target: Any, *, busy_timeout_ms: int = 5000) -> None:
        import apsw

        if isinstance(target, (str, os.PathLike)):
            self._conn = apsw.Connection(os.fspath(target))
            self._conn.setbusytimeout(busy_timeout_ms)
            # A log of its own: write-ahead, synced at checkpoints (a crash loses at most the last batches of
            # recall events, never the index), so a batch costs a search beside it next to nothing.
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._owned = True
        else:
            self._conn = target
            self._owned = False
        self._ready = False
        self._guard = threading.RLock()

    @property
    def filename(self) -> str:
        """The database file ("" for an in-memory database)."""
        try:
            return str(self._conn.db_filename("main") or "")
        except Exception:
            return ""

    def _db(self) -> Any:
        if not self._ready:
            try:
                with self._conn:
                    self._conn.execute(_SCHEMA)
                    row = self._conn.execute("SELECT value FROM dreaming_meta WHERE key='schema_version'").fetchone()
                    if row is None:
                        self._conn.execute("INSERT INTO dreaming_meta(key, value) VALUES('schema_version', ?)",
                                           (str(SCHEMA_VERSION),))
                    elif int(row[0]) > SCHEMA_VERSION:
                        raise RecallLogError(f"recall log schema {row[0]} is newer than this clawmem ({SCHEMA_VERSION})")
            except RecallLogError:
                raise
            except Exception as exc:
                raise RecallLogError(f"cannot prepare the recall log: {exc}") from exc
            self._ready = True
        return self._conn

    def add_events(self, events: Sequence[RecallEvent]) -> None:
        if not events:
            return
        with self._guard:
            db = self._db()
            try:
                with db:
                    db.executemany(f"INSERT INTO dreaming_recall({_COLUMNS}) VALUES(?,?,?,?,?,?,?,?,?,?,?,?)",
                                   [_row(e) for e in events])
            except Exception as exc:
                raise RecallLogError(f"cannot write the recall log: {exc}") from exc

    def prune(self, agent: str, before_ts: float, max_rows: int) -> int:
        with self._guard:
            db = self._db()
            count = "SELECT count(*) FROM dreaming_recall WHERE agent=?"
            with db:
                before = int(db.execute(count, (agent,)).fetchone()[0])
                db.execute("DELETE FROM dreaming_recall WHERE agent=? AND ts<?", (agent, before_ts))
                db.execute(
                    "DELETE FROM dreaming_recall WHERE agent=? AND id NOT IN "
                    "(SELECT id FROM dreaming_recall WHERE agent=? ORDER BY ts DESC, id DESC LIMIT ?)",
                    (agent, agent, max(0, int(max_rows))))
                return before - int(db.execute(count, (agent,)).fetchone()[0])

    def events(self, agent: str, since_ts: float = 0.0) -> list[RecallEvent]:
        with self._guard:
            rows = self._db().execute(
                f"SELECT {_COLUMNS} FROM dreaming_recall WHERE agent=? AND ts>=? ORDER BY ts, id",
                (agent, since_ts)).fetchall()
        return [RecallEvent(*r[:11], clipped=bool(r[11])) for r in rows]

    def count_events(self, agent: str) -> int:
        with self._guard:
            return int(self._db().execute("SELECT count(*) FROM dreaming_recall WHERE agent=?", (agent,)).fetchone()[0])

    def save_preimage(self, agent: str, path: str, content: Optional[bytes], reason: str, ts: float) -> int:
        with self._guard:
            db = self._db()
            with db:
                db.execute("INSERT INTO dreaming_preimage(agent, ts, path, content, reason) VALUES(?,?,?,?,?)",
                           (agent, ts, path, content, reason))
                return int(db.last_insert_rowid())

    def latest_preimage(self, agent: str, path: str) -> Optional[Preimage]:
        with self._guard:
            row = self._db().execute(
                "SELECT id, agent, ts, path, content, reason FROM dreaming_preimage WHERE agent=? AND path=? "
                "ORDER BY id DESC LIMIT 1", (agent, path)).fetchone()
        if row is None:
            return None
        return Preimage(int(row[0]), row[1], float(row[2]), row[3], None if row[4] is None else bytes(row[4]), row[5])

    def drop_preimage(self, preimage_id: int) -> None:
        with self._guard:
            db = self._db()
            with db:
                db.execute("DELETE FROM dreaming_preimage WHERE id=?", (preimage_id,))

    def count_preimages(self, agent: str) -> int:
        with self._guard:
            return int(self._db().execute("SELECT count(*) FROM dreaming_preimage WHERE agent=?",
                                          (agent,)).fetchone()[0])

    @contextmanager
    def consolidation_lock(self, agent: str) -> Iterator[None]:
        name = self.filename
        if not name:
            with _MEMORY_LOCKS_GUARD:
                lock = _MEMORY_LOCKS.setdefault(f"{id(self._conn)}:{agent}", threading.Lock())
            if not lock.acquire(blocking=False):
                raise ConsolidationBusyError(f"a consolidation of agent {agent!r} is already running")
            try:
                yield
            finally:
                lock.release()
            return
        import fcntl

        tag = hashlib.sha256(agent.encode("utf-8")).hexdigest()[:16]
        fd = os.open(f"{name}.dreaming-{tag}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ConsolidationBusyError(f"a consolidation of agent {agent!r} is already running") from None
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def close(self) -> None:
        if self._owned:
            self._conn.close()
