"""The recall log: which chunks searches actually gave the model, per agent, batched and bounded.

:meth:`RecallLog.record` only appends to an in-memory buffer (no I/O); the buffer is written in one
transaction when it holds ``batch_size`` events, when :meth:`flush` is called, and on :meth:`close`. Every
``prune_every`` batches the agent's events older than ``max_age_days`` and beyond ``max_events`` are deleted.
The query is stored masked (:func:`clawmem_core.masking.mask_secrets`) and clipped; its hash is taken of the
masked, whitespace-normalised text, so neither column holds a secret.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional

from ..masking import mask_and_clip
from .events import DreamStore, RecallEvent

__all__ = ["RecallLog", "RetentionPolicy", "content_hash", "normalize_text", "query_hash", "open_store"]

log = logging.getLogger("clawmem.dreaming")
_SPACE = re.compile(r"\s+")
ELLIPSIS = "…"
#: The background writer waits for this long a pause in recording before it writes a batch...
IDLE_BEFORE_WRITE_S = 0.2
#: ... unless this many batches are waiting.
MAX_DEFERRED_BATCHES = 16
#: Characters of the masked query kept in the log.
QUERY_TEXT_MAX = 200


def normalize_text(text: str) -> str:
    """Whitespace collapsed and stripped: what hashes and source checks compare."""
    return _SPACE.sub(" ", text).strip()


def content_hash(text: str) -> str:
    """SHA-256 (hex) of ``text`` normalised, without a clip ``…`` at either end."""
    return hashlib.sha256(normalize_text(text).strip(ELLIPSIS).strip().encode("utf-8", "surrogatepass")).hexdigest()


def query_hash(masked_query: str) -> str:
    """SHA-256 (hex, 32 characters) of the masked, normalised, lower-cased query."""
    return hashlib.sha256(normalize_text(masked_query).lower().encode("utf-8", "surrogatepass")).hexdigest()[:32]


@dataclass(frozen=True)
class RetentionPolicy:
    """How much of the log is kept per agent: events younger than ``max_age_days``, at most ``max_events``."""

    max_age_days: float = 90.0
    max_events: int = 50_000


def open_store(target: Any) -> DreamStore:
    """A :class:`DreamStore` for ``target``: a store itself, an ``apsw.Connection`` or a SQLite path, a
    ``psycopg_pool.ConnectionPool`` or a callable yielding a psycopg connection."""
    if hasattr(target, "add_events") and hasattr(target, "consolidation_lock"):
        return target  # type: ignore[no-any-return]
    if type(target).__module__.startswith("apsw") or isinstance(target, str) or hasattr(target, "__fspath__"):
        from .sqlite_store import SqliteDreamStore

        return SqliteDreamStore(target)
    from .pg_store import PostgresDreamStore

    return PostgresDreamStore(target)


@dataclass(frozen=True)
class _Pending:
    """One recorded search, as given: turned into events (masked, hashed) when its batch is written."""

    agent: str
    query: str
    ts: float
    session_key: Optional[str]
    rows: list[tuple[str, int, int, str, Any, Any, int]]

    def events(self) -> list[RecallEvent]:
        masked = mask_and_clip(normalize_text(self.query), QUERY_TEXT_MAX)
        qhash = query_hash(masked)
        out = []
        for path, start, end, snippet, given, score, rank in self.rows:
            stripped = snippet.strip()
            clipped = not given and (stripped.startswith(ELLIPSIS) or stripped.endswith(ELLIPSIS))
            try:
                value = float(score or 0.0)
            except (TypeError, ValueError):
                value = 0.0
            value = 0.0 if value != value else min(1.0, max(0.0, value))
            out.append(RecallEvent(self.agent, self.ts, path, start, end, str(given) if given else content_hash(snippet),
                                   value, rank, qhash, masked, self.session_key, clipped))
        return out


class RecallLog:
    """Records search hits per agent into a :class:`DreamStore`, in batches (see the module documentation).

    ``now`` is the clock (seconds since the epoch), injectable for tests and simulated days. Thread safe.
    Use as a context manager, or call :meth:`close`, so the last batch is written.
    """

    def __init__(self, store: Any, *, batch_size: int = 64, retention: RetentionPolicy = RetentionPolicy(),
                 prune_every: int = 16, now: Callable[[], float] = time.time, background: bool = False,
                 flush_interval_s: float = 5.0) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.store: DreamStore = open_store(store)
        self.batch_size = batch_size
        self.retention = retention
        self.prune_every = max(1, prune_every)
        self.now = now
        self._buffer: list[_Pending] = []
        self._buffered = 0
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._agents: set[str] = set()
        #: Batches written so far (one transaction each).
        self.batches_written = 0
        self.events_recorded = 0
        #: Events lost because their batch could not be written by :meth:`record` (the store failed).
        self.events_dropped = 0
        self._wake = threading.Event()
        self._last_record = 0.0
        self._woken = False
        self._stop = False
        self._worker: Optional[threading.Thread] = None
        if background:
            self.flush_interval_s = flush_interval_s
            self._worker = threading.Thread(target=self._run, name="clawmem-recall-log", daemon=True)
            self._worker.start()

    def _run(self) -> None:
        while not self._stop:
            self._wake.wait(self.flush_interval_s)
            self._wake.clear()
            # Write between searches, not beside one: wait for a pause in recording (searches from an agent come
            # between model calls), unless the buffer has grown large.
            while (not self._stop and time.monotonic() - self._last_record < IDLE_BEFORE_WRITE_S
                   and self._buffered < MAX_DEFERRED_BATCHES * self.batch_size):
                self._wake.wait(IDLE_BEFORE_WRITE_S)
                self._wake.clear()
            with self._lock:
                self._woken = False
            self._flush_quietly()

    def _flush_quietly(self) -> None:
        try:
            self.flush()
        except Exception as exc:  # the log is best effort on the search path
            log.warning("recall log: a batch could not be written: %s", exc)

    def record(self, agent: str, query: str, hits: Iterable[Any], *, session_key: Optional[str] = None,
               when: Optional[float] = None) -> int:
        """Buffer one finished search: each hit (``path``, ``start_line``/``end_line`` or the snippet's lines,
        ``score``, ``snippet``; an optional ``content_hash``) becomes one event, ranked in order. Hits from
        another namespace (``@ns/...``) are not recorded. Returns the number of events buffered.

        Cheap: masking and hashing happen when the batch is written. With ``background=True`` a full batch is
        written by the log's own thread; otherwise by the call that fills it. Never raises for the store: a batch
        that cannot be written is dropped, logged and counted in :attr:`events_dropped`."""
        ts = self.now() if when is None else when
        rows = []
        for hit in hits:
            path = str(getattr(hit, "path", ""))
            if not path or path.startswith("@") or getattr(hit, "namespace", None):
                continue
            start = int(getattr(hit, "snippet_start_line", 0) or getattr(hit, "start_line", 0) or 0)
            end = int(getattr(hit, "snippet_end_line", 0) or getattr(hit, "end_line", 0) or start)
            rows.append((path, start, max(start, end), str(getattr(hit, "snippet", "") or ""),
                         getattr(hit, "content_hash", None), getattr(hit, "score", 0.0), len(rows) + 1))
        if not rows:
            return 0
        self._last_record = time.monotonic()
        with self._lock:
            self._buffer.append(_Pending(agent, str(query or ""), ts, session_key, rows))
            self._buffered += len(rows)
            self._agents.add(agent)
            self.events_recorded += len(rows)
            full = self._buffered >= self.batch_size
            # The writer is woken once per batch (waking it on every search costs each search a thread switch),
            # and again once the buffer reaches its cap.
            wake = full and (not self._woken or self._buffered >= MAX_DEFERRED_BATCHES * self.batch_size)
            if wake:
                self._woken = True
        if full:
            if self._worker is not None:
                if wake:
                    self._wake.set()
            else:
                self._flush_quietly()
        return len(rows)

    def flush(self) -> int:
        """Write the buffered events in one transaction (pruning every ``prune_every`` batches); returns how many
        were written. On a store error the batch is dropped (counted in :attr:`events_dropped`) and the error
        raised."""
        with self._flush_lock:
            with self._lock:
                pending, self._buffer, self._buffered = self._buffer, [], 0
            batch: list[RecallEvent] = []
            on_own_thread = self._worker is not None and threading.current_thread() is self._worker
            for p in pending:
                batch.extend(p.events())
                if on_own_thread:
                    time.sleep(0)  # hand the interpreter to a waiting search between searches' masking
            if not batch:
                return 0
            try:
                self.store.add_events(batch)
            except BaseException:
                self.events_dropped += len(batch)
                raise
            self.batches_written += 1
            if self.batches_written % self.prune_every == 0:
                self.prune()
            return len(batch)

    def prune(self, agents: Optional[Iterable[str]] = None) -> int:
        """Apply the retention policy now (to ``agents``, default every agent recorded by this log)."""
        cutoff = self.now() - self.retention.max_age_days * 86400.0
        with self._lock:
            targets = list(agents) if agents is not None else sorted(self._agents)
        return sum(self.store.prune(a, cutoff, self.retention.max_events) for a in targets)

    def pending(self) -> int:
        """Events buffered and not yet written."""
        with self._lock:
            return self._buffered

    def events(self, agent: str, since_ts: float = 0.0) -> list[RecallEvent]:
        """The agent's written events (call :meth:`flush` first to include the buffer)."""
        return list(self.store.events(agent, since_ts))

    def close(self) -> None:
        """Stop the background thread (if any) and flush what is buffered. The store is left open (it may be
        the index's connection)."""
        if self._worker is not None:
            self._stop = True
            self._wake.set()
            self._worker.join()
            self._worker = None
        self.flush()

    def __enter__(self) -> "RecallLog":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
