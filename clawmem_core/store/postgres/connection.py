"""Connections of the PostgreSQL store: one pool per database and process, the unreachable
store (said at once, not after a pool's wait), a thread's writing block (statements on
connections taken without the pool's check) and its reading block (one connection, or one
snapshot, for a search's reads)."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator

from ...errors import MissingDependencyError, StoreError
from ..base import _DEADLINE, ReadInterrupted, StoreUnreachableError, wait_left
from ..urls import redact_url

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

log = logging.getLogger("clawmem")

#: The longest a store call waits for a pooled connection (seconds). Within a search, it waits
#: only until the search's deadline (:func:`~clawmem_core.store.base.store_deadline`), then tries a
#: connection of its own: refused, the store is unreachable (said at once); answered, the pool is
#: only busy, and the call waits on for the rest of this.
_CHECKOUT_SECONDS = 30.0
#: libpq's shortest ``connect_timeout``: the bound on that connection attempt.
_PROBE_SECONDS = 2


class _Writing:
    """One thread's writing block on one database (:meth:`PostgresBackend.writing`): the
    connection its current statement runs on (``None`` between statements), how deeply the block
    and its statements nest, and whether the last statement failed because the connection was
    lost."""

    def __init__(self) -> None:
        self.depth = 1
        self.conn: psycopg.Connection | None = None
        self.uses = 0
        self.lost = False


#: This thread's open writing blocks (:meth:`PostgresBackend.writing`), by database URL.
_WRITING = threading.local()


def _writing_block(url: str) -> _Writing | None:
    return getattr(_WRITING, "by_url", {}).get(url)  # type: ignore[no-any-return]


def _again_if_lost(method: Callable[..., Any]) -> Callable[..., Any]:
    """Run a store call once more when it failed because the connection of this thread's writing
    block was lost (the server ended it as the call began): the calls of the vector phase are
    safe to repeat (a chunk no longer pending is not completed twice)."""
    import functools

    @functools.wraps(method)
    def call(self: "PostgresStore", *args: Any, **kwargs: Any) -> Any:
        block = _writing_block(self.backend._url)
        if block is not None:
            block.lost = False
        try:
            return method(self, *args, **kwargs)
        except StoreError:
            block = _writing_block(self.backend._url)
            if block is None or not block.lost:
                raise
            block.lost = False
            log.debug("the connection of a writing block was lost during %s: once more", method.__name__)
            return method(self, *args, **kwargs)

    return call


#: This thread's open reading blocks (:meth:`PostgresBackend.reading`), by database URL, innermost last.
_READING = threading.local()
#: Bumped by every write transaction of this process: what a reading block outside a snapshot
#: read is reused within the block only while this is unchanged.
_WRITES = [0]
#: Set while this thread takes a pooled connection without the pool's check (a reading block
#: retries a read whose connection turns out to be lost instead).
_UNCHECKED = threading.local()
#: This thread's last block of reads outside a snapshot, by database URL, as it ended: the
#: search it was part of (its deadline, :func:`~clawmem_core.store.base.store_deadline`), the
#: process's writes then (:data:`_WRITES`), and the versions it read of each agent.
_LAST_READS = threading.local()


def _check_connection(conn: "psycopg.Connection") -> None:
    """The pool's check of a connection it hands out (one round trip), skipped for reading blocks."""
    if getattr(_UNCHECKED, "on", False):
        return
    from psycopg_pool import ConnectionPool

    ConnectionPool.check_connection(conn)


class _Reading:
    """The connection of one thread's block of reads (one search) on one database, taken from the
    pool without a check on its first read. With ``snapshot``, its reads run in one ``REPEATABLE
    READ, READ ONLY`` transaction, in pipeline mode (the ``BEGIN`` rides with the first statement,
    the ``COMMIT`` with the return), and what they answered is kept for the block (:attr:`memo`,
    per agent), so that a later read of the same thing needs no round trip."""

    def __init__(self, backend: "PostgresBackend", snapshot: bool) -> None:
        self.backend = backend
        self.snapshot = snapshot
        self.depth = 1
        self.conn: psycopg.Connection | None = None
        self._pipeline: Any = None
        #: (agent, generation) -> what this snapshot answered for it: "token" (generation, data
        #: version), "meta" and "pending" of chunk ids, "chunks" (rows), "vectors" (counts)
        self.memo: dict[tuple[str, int | None], dict[str, Any]] = {}
        #: Agents this snapshot answered reads of.
        self.read: set[tuple[str, int | None]] = set()
        #: Agents read in an earlier snapshot of this block, and their versions then (checked when
        #: the next snapshot starts).
        self._verify: tuple[set[tuple[str, int | None]], dict[tuple[str, int | None], Any]] | None = None
        self.interrupted = False
        self._check_next = False
        #: The statement checking the versions of :attr:`_verify` sent with the ``BEGIN``, and
        #: those versions (its answer is read with the first read's: no round trip of its own).
        self._checking: tuple[Any, dict[tuple[str, int | None], Any]] | None = None

    def adopt(self, tokens: dict[tuple[str, int | None], Any]) -> None:
        """Start this snapshot from the versions (``tokens``, per agent) the block of reads just
        before it read: what a read can answer from them and from what the process keeps at those
        versions (the keyword statistics, the rows they named) needs no statement, so a search
        answered that way takes no snapshot at all; the first statement begins it, with a check
        that each agent is still at its version (else the search is run again: the reads so far
        cannot be made to agree, :class:`ReadInterrupted`)."""
        if not self.snapshot or self.conn is not None or not tokens:
            return
        self._verify = (set(tokens), dict(tokens))
        self._deferred = True
        for key, token in tokens.items():
            self.memo[key] = {"token": token}
        self.read = set(tokens)

    _deferred = False

    def lazy(self) -> Any:
        """The block's connection, or (while it has none and the reads so far came from adopted
        versions) a stand-in that takes it on its first use."""
        if self.conn is not None or not self._deferred:
            return self.connection()
        return _LazyConnection(self)

    def verify(self) -> None:
        """Read the answer of the version check sent with the ``BEGIN`` (:meth:`adopt`); raises
        :class:`ReadInterrupted` when an agent moved on meanwhile."""
        checking, self._checking = self._checking, None
        if checking is None:
            return
        cur, tokens = checking
        now = {r[0]: (int(r[1]), int(r[2])) for r in cur.fetchall()}
        if not all(now.get(agent) == token for (agent, _), token in tokens.items()):
            self.interrupted = True
            raise ReadInterrupted("the index changed between the checks before a search and its ranking")

    def connection(self) -> "psycopg.Connection":
        if self.conn is None:
            # after a lost connection, the pool's others may be lost too (a server restart): checked
            check = self._check_next

            def take(timeout: float) -> "psycopg.Connection":
                _UNCHECKED.on = not check
                try:
                    return self.backend.pool.getconn(timeout=timeout)
                finally:
                    _UNCHECKED.on = False

            conn = self.backend.checkout(take)
            self.conn = conn
            if self.snapshot:
                self._pipeline = conn.pipeline()
                self._pipeline.__enter__()
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                if self._deferred and self._verify is not None and self._verify[0] <= set(self._verify[1]):
                    # adopted versions: checked with the first read (its answer read after it)
                    self._deferred = False
                    read, tokens = self._verify
                    self._verify = None
                    cur = conn.execute("SELECT agent, generation, data_version FROM clawmem_agents "
                                       "WHERE agent = ANY(%s)", ([agent for agent, _ in tokens],))
                    self._checking = (cur, tokens)
                else:
                    self._deferred = False
                    self._check_versions(conn)
        return self.conn

    def lost(self) -> bool:
        """Whether the connection is gone (killed, server restarted), not just a failed statement."""
        conn = self.conn
        return conn is not None and (conn.closed or conn.broken)

    def release(self, discard: bool = False) -> None:
        """End the snapshot and hand the connection back (closed first when ``discard``: the pool
        drops it)."""
        conn, pipeline = self.conn, self._pipeline
        self.conn = self._pipeline = None
        self._checking = None
        if conn is None:
            return
        try:
            if pipeline is not None and not discard:
                conn.execute("COMMIT")
                pipeline.__exit__(None, None, None)
        except Exception:
            discard = True
        if discard:
            self._check_next = True
            with contextlib.suppress(Exception):
                conn.close()
        self.backend.pool.putconn(conn)

    def forget(self) -> None:
        """After the connection was lost or a read failed: the block's next read runs in a new
        snapshot, and only if every agent read so far is still at the version it was read at (the
        answers are then the same); else that read raises :class:`ReadInterrupted`."""
        tokens = {k: m["token"] for k, m in self.memo.items() if "token" in m}
        if self.snapshot and self.read:
            self._verify = (set(self.read) | set(self._verify[0]) if self._verify else set(self.read),
                            {**(self._verify[1] if self._verify else {}), **tokens})
        self.memo, self.read = {}, set()

    def _check_versions(self, conn: "psycopg.Connection") -> None:
        if self._verify is None:
            return
        read, tokens = self._verify
        same = all(key in tokens for key in read)
        if same:
            rows = conn.execute("SELECT agent, generation, data_version FROM clawmem_agents WHERE agent = ANY(%s)",
                                ([agent for agent, _ in tokens],)).fetchall()
            now = {r[0]: (int(r[1]), int(r[2])) for r in rows}
            same = all(now.get(agent) == token for (agent, _), token in tokens.items())
        if not same:  # for good: this block's reads can no longer be made to agree
            self.interrupted = True
            raise ReadInterrupted("the connection to PostgreSQL was lost during a search, and the index changed")
        self._verify = None
        for key, token in tokens.items():
            self.memo[key] = {"token": token}
        self.read = set(tokens)



class _LazyConnection:
    """Stands for a reading block's connection until something of it is used (see
    :meth:`_Reading.lazy`)."""

    def __init__(self, block: _Reading) -> None:
        self._block = block

    def __getattr__(self, name: str) -> Any:
        return getattr(self._block.connection(), name)


class _Connections:
    """The connections of :class:`~clawmem_core.store.postgres.PostgresBackend`: its pool (shared
    by the backends of one URL), checkouts bounded by the search's deadline, writing and reading
    blocks, and driver errors cleaned of the password."""


    _pools: dict[str, "ConnectionPool"] = {}
    _pools_lock = threading.Lock()

    @classmethod
    def close_pools(cls, url: str | None = None) -> None:
        """Close this process's connection pools (of ``url`` only, when given)."""
        with cls._pools_lock:
            for key in [k for k in cls._pools if url is None or k == url]:
                with contextlib.suppress(Exception):
                    cls._pools.pop(key).close(timeout=5)

    # -- connections ------------------------------------------------------------------------------

    def clean(self, text: str) -> str:
        """``text`` without the password (error messages of the driver)."""
        for pw in (*self._passwords, os.environ.get("PGPASSWORD")):
            if pw:
                text = text.replace(pw, "***")
        return text

    def error(self, what: str, exc: BaseException) -> StoreError:
        """A :class:`StoreError` for the driver's ``exc``; ``exc`` and the errors chained to it
        (still reachable as ``__context__``) are cleaned of the password too."""
        seen: set[int] = set()
        e: BaseException | None = exc
        while e is not None and id(e) not in seen:
            seen.add(id(e))
            with contextlib.suppress(Exception):
                e.args = tuple(self.clean(a) if isinstance(a, str) else a for a in e.args)
            e = e.__cause__ or e.__context__
        return StoreError(self.clean(f"{what} ({redact_url(self._url)}): {exc}".strip()))

    @property
    def pool(self) -> "ConnectionPool":
        with self._pools_lock:
            pool = self._pools.get(self._url)
            if pool is None or pool.closed:
                try:
                    from psycopg_pool import ConnectionPool
                except ImportError:
                    raise MissingDependencyError(
                        'the PostgreSQL store needs psycopg and psycopg-pool: pip install "clawmem-py[postgres]"'
                    ) from None
                import psycopg

                try:  # fails at once when the server cannot be reached (the pool would retry)
                    psycopg.connect(self._url, connect_timeout=10).close()
                except psycopg.Error as exc:
                    raise self.error("cannot connect to PostgreSQL", exc) from None
                pool = ConnectionPool(
                    self._url,
                    min_size=1,
                    max_size=self._pool_size,
                    kwargs={"autocommit": True},
                    check=_check_connection,
                    open=False,
                    name="clawmem",
                )
                try:
                    pool.open(wait=True, timeout=15)
                except Exception as exc:
                    with contextlib.suppress(Exception):
                        pool.close(timeout=0)
                    raise self.error("cannot connect to PostgreSQL", exc) from None
                if not self._pools:
                    import atexit

                    atexit.register(type(self).close_pools)
                self._pools[self._url] = pool
            return pool

    @contextlib.contextmanager
    def connection(self) -> Iterator["psycopg.Connection"]:
        """A pooled connection (autocommit), or one for this thread's open writing block
        (:meth:`writing`); driver errors come out as :class:`StoreError` without the password."""
        import psycopg

        block = _writing_block(self._url)
        try:
            if block is not None:
                with self._block_connection(block) as conn:
                    yield conn
                return
            pool = self.pool
            conn = self.checkout(lambda timeout: pool.getconn(timeout=timeout))
            try:
                with conn:  # (a pooled connection's block: commit or roll back, never closed)
                    yield conn
            finally:
                pool.putconn(conn)
        except psycopg.Error as exc:
            raise self.error("PostgreSQL error", exc) from None
        except Exception as exc:
            from psycopg_pool import PoolTimeout

            if isinstance(exc, PoolTimeout):
                raise self.error("no PostgreSQL connection available", exc) from None
            raise

    #: URLs whose server was last found unreachable (by this process), and when.
    _down: dict[str, float] = {}

    def checkout(self, take: Callable[[float], "psycopg.Connection"]) -> "psycopg.Connection":
        """``take(timeout)`` (a connection from the pool) waiting at most until the deadline in
        force (:func:`~clawmem_core.store.base.store_deadline`), then as long as the server
        answers a connection of its own, up to :data:`_CHECKOUT_SECONDS` in all. Raises
        :class:`StoreUnreachableError` when it does not (at once while the server is known to be
        down: no wait at all), ``PoolTimeout`` when the pool stayed busy."""
        from psycopg_pool import PoolTimeout

        if self._url in self._down:
            self._probe(0.0)  # raises while it is still down
        first = wait_left(_CHECKOUT_SECONDS)
        try:
            return take(first)
        except PoolTimeout:
            if first >= _CHECKOUT_SECONDS:
                raise
        self._probe(first)
        return take(_CHECKOUT_SECONDS - first)

    def _probe(self, waited: float) -> None:
        """Raise :class:`StoreUnreachableError` when a new connection to the server fails (and
        remember it is down); forget that it was down when it succeeds."""
        import psycopg

        try:
            psycopg.connect(self._url, connect_timeout=_PROBE_SECONDS).close()
        except psycopg.Error as exc:
            self._down[self._url] = time.monotonic()
            reason = self.error("PostgreSQL cannot be reached", exc)
            raise StoreUnreachableError(f"{reason} (the store is unreachable: memory is unavailable until it "
                                        "answers again)", waited=waited) from None
        self._down.pop(self._url, None)

    def _unchecked(self) -> "psycopg.Connection":
        """A connection from the pool without the pool's check (a round trip, as long as a
        statement under load)."""
        pool = self.pool

        def take(timeout: float) -> "psycopg.Connection":
            _UNCHECKED.on = True
            try:
                return pool.getconn(timeout=timeout)
            finally:
                _UNCHECKED.on = False

        return self.checkout(take)

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """A block of this thread's statements (the vector phase), each on a connection taken from
        the pool without the pool's check and handed back after it: a thread never holds one while
        it does something else (embeds), so a pool of one connection serves the block and other
        threads' searches alike. A connection lost while idle is seen by its socket and replaced;
        one lost under a statement fails it (the vector phase's calls then run once more). Nested
        blocks share the outermost one. Inside this thread's block of reads (a search that syncs
        an edit and its vectors), the reads' connection goes back first, and the reads run on the
        block's connections until it ends; never inside a snapshot (a read-only transaction)."""
        blocks = _WRITING.__dict__.setdefault("by_url", {})
        block = blocks.get(self._url)
        if block is not None:
            block.depth += 1
            try:
                yield
            finally:
                block.depth -= 1
            return
        readers = getattr(_READING, "by_url", {}).get(self._url, [])
        if any(r.snapshot for r in readers):
            raise RuntimeError("no writing block inside a snapshot: its reads are one read-only transaction")
        for r in readers:  # a block of reads outside a snapshot holds no transaction: nothing is lost
            r.release()
        blocks[self._url] = _Writing()
        try:
            yield
        finally:
            del blocks[self._url]

    @contextlib.contextmanager
    def _block_connection(self, block: _Writing) -> Iterator["psycopg.Connection"]:
        """A connection for one statement (with the statements nested in it) of a writing block,
        handed back after it. One lost while idle in the pool (the server closed it: its socket has
        something to read while no statement runs) is replaced; asking the server is left to the
        rare case where the socket says so."""
        import psycopg

        if block.uses:
            block.uses += 1
            try:
                yield block.conn  # type: ignore[misc]
            finally:
                block.uses -= 1
            return
        conn = self._unchecked()
        try:
            conn = self._alive(conn)
            block.conn, block.uses = conn, 1
            try:
                yield conn
            except psycopg.Error:
                block.lost = conn.closed or conn.broken
                raise
        finally:
            block.conn, block.uses = None, 0
            self.pool.putconn(conn)

    def _alive(self, conn: "psycopg.Connection") -> "psycopg.Connection":
        """``conn``, or a new connection in its place when the server closed it while idle."""
        import select

        try:
            idle_news = not conn.closed and bool(select.select([conn.fileno()], [], [], 0)[0])
        except (OSError, ValueError):
            idle_news = True
        if not (conn.closed or conn.broken or idle_news):
            return conn
        from psycopg_pool import ConnectionPool

        try:
            if conn.closed or conn.broken:
                raise ConnectionError
            ConnectionPool.check_connection(conn)  # a notice, or the end of the connection
            return conn
        except Exception:
            log.debug("a pooled connection was lost while idle: taking a new one")
            with contextlib.suppress(Exception):
                conn.close()
            self.pool.putconn(conn)
            pool = self.pool  # checked: the others may be gone too (a restart)
            return self.checkout(lambda timeout: pool.getconn(timeout=timeout))

    def _reading(self) -> _Reading | None:
        """This thread's innermost open reading block on this database."""
        blocks = getattr(_READING, "by_url", {}).get(self._url)
        return blocks[-1] if blocks else None

    @contextlib.contextmanager
    def reading(self, snapshot: bool = False) -> Iterator[None]:
        """A block of this thread's reads on one connection (see :meth:`Store.reading`); blocks
        of the same kind nest into the outermost one, for every agent of this database. Inside
        this thread's writing block, the reads run on the writing block's connections (and a
        snapshot, which would need a second connection, is refused)."""
        if snapshot and _writing_block(self._url) is not None:
            raise RuntimeError("no snapshot inside a writing block: it would hold a second connection")
        blocks = _READING.__dict__.setdefault("by_url", {}).setdefault(self._url, [])
        if blocks and blocks[-1].snapshot == snapshot:
            blocks[-1].depth += 1
            try:
                yield
            finally:
                blocks[-1].depth -= 1
            return
        block = _Reading(self, snapshot)
        last = _LAST_READS.__dict__.setdefault("by_url", {})
        before = last.pop(self._url, None)
        search = _DEADLINE.get()
        if snapshot and not blocks and before is not None and search is not None and before[0] == search \
                and before[1] == _WRITES[0]:
            # the ranking of a search (one deadline) right after its checks, this process having
            # written nothing since: from the versions the checks read (see _Reading.adopt)
            block.adopt(before[2])
        blocks.append(block)
        try:
            yield
        finally:
            blocks.remove(block)
            block.release()
            if not snapshot and not blocks and not block.interrupted:
                # the versions this block read, for a snapshot that starts right after it
                tokens = {k: m["token"] for k, m in block.memo.items()
                          if m.get("token") is not None and m.get("writes") == _WRITES[0]}
                if tokens and _DEADLINE.get() is not None:
                    last[self._url] = (_DEADLINE.get(), _WRITES[0], tokens)
