"""Advisory locks of the PostgreSQL store: the sync lock and the vector phase's lock of an agent,
each a session lock on a dedicated connection (released by the server if the process dies)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Iterator

from ..base import StoreBusyError

if TYPE_CHECKING:
    import psycopg


class _Locks:
    """The locks of :class:`~clawmem_core.store.postgres.PostgresBackend`."""

    @contextlib.contextmanager
    def process_lock(self, blocking: bool = True) -> Iterator[None]:
        """A session advisory lock on the agent, held on a dedicated connection: released by the
        server if this process dies or loses the connection."""
        import psycopg

        with self._lock_guard:
            if self._lock_depth:  # re-entered in this process (the sync lock is held already)
                self._lock_depth += 1
                try:
                    yield
                finally:
                    self._lock_depth -= 1
                return
            key = self._lock_key()
            try:
                conn = psycopg.connect(self._url, autocommit=True)
            except psycopg.Error as exc:
                raise self.error("cannot connect to PostgreSQL", exc) from None
            try:
                if blocking:
                    conn.execute("SET lock_timeout = '600s'")
                    conn.execute("SELECT pg_advisory_lock(%s)", (key,))
                elif not conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]:  # type: ignore[index]
                    raise StoreBusyError(f"another process is syncing agent {self.agent_id!r}")
            except psycopg.Error as exc:
                conn.close()
                if isinstance(exc, psycopg.errors.LockNotAvailable):
                    raise StoreBusyError(f"another process is syncing agent {self.agent_id!r}") from None
                raise self.error("cannot take the sync lock", exc) from None
            except BaseException:
                conn.close()
                raise
            self._lock_conn, self._lock_depth = conn, 1
            try:
                yield
            finally:
                self._lock_conn, self._lock_depth = None, 0
                with contextlib.suppress(psycopg.Error):
                    conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
                conn.close()

    @contextlib.contextmanager
    def vector_lock(self, timeout: float | None = 0.0) -> Iterator[None]:
        """A session advisory lock on the agent's vector phase (another key than the sync lock's),
        held on a dedicated connection: released by the server if this process dies."""
        import psycopg

        key = self._lock_key("clawmem-vectors")
        busy = f"another process is embedding the vectors of agent {self.agent_id!r}"
        try:
            conn = psycopg.connect(self._url, autocommit=True)
        except psycopg.Error as exc:
            raise self.error("cannot connect to PostgreSQL", exc) from None
        try:
            if timeout is not None and timeout <= 0:
                if not conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]:  # type: ignore[index]
                    raise StoreBusyError(busy)
            else:
                conn.execute(f"SET lock_timeout = {0 if timeout is None else max(1, int(timeout * 1000))}")
                conn.execute("SELECT pg_advisory_lock(%s)", (key,))
        except psycopg.Error as exc:
            conn.close()
            if isinstance(exc, psycopg.errors.LockNotAvailable):
                raise StoreBusyError(busy) from None
            raise self.error("cannot take the vector phase's lock", exc) from None
        except BaseException:
            conn.close()
            raise
        try:
            yield
        finally:
            with contextlib.suppress(psycopg.Error):
                conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
            conn.close()

    def check_lock(self) -> None:
        """Raise when the connection holding the sync lock was lost (another process may hold the
        lock now): the sync stops before writing more."""
        conn = self._lock_conn
        if conn is None:
            return
        import psycopg

        try:
            conn.execute("SELECT 1")
        except psycopg.Error as exc:
            raise self.error("lost the connection holding the sync lock", exc) from None

    def _lock_key(self, kind: str = "clawmem") -> int:
        import hashlib

        digest = hashlib.sha256(f"{kind}:{self.agent_id}".encode()).digest()
        return int.from_bytes(digest[:8], "big", signed=True)
