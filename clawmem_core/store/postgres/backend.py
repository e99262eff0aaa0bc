"""The PostgreSQL store's backend: one agent's index in a database shared with other agents."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from ...config import memory_kb
from ...errors import ConfigError
from ..base import MissingIndexError, StoreBackend, check_agent_id
from ..urls import _passwords_of, redact_url
from .connection import _Connections
from .locks import _Locks
from .migrations import _Schema
from .store import PostgresStore
from .terms import _Terms
from .vectors import (EXACT_BELOW, HNSW_BUILD_MEMORY, HNSW_EF_SEARCH, HNSW_ITERATIVE_SCAN, HNSW_VISIT_COST,
                      _ITERATIVE_SCANS, _HnswBuild)

if TYPE_CHECKING:
    import psycopg


class PostgresBackend(_Connections, _Locks, _Schema, _HnswBuild, StoreBackend):
    """One agent's index in a PostgreSQL database shared with other agents.

    Backends for the same URL share one connection pool per process.
    """

    def __init__(
        self,
        url: str,
        agent_id: str,
        *,
        fts_tokenizer: str = "cjk",
        exact_below: int = EXACT_BELOW,
        hnsw_ef_search: int = HNSW_EF_SEARCH,
        hnsw_iterative_scan: str = HNSW_ITERATIVE_SCAN,
        hnsw_visit_cost: float = HNSW_VISIT_COST,
        hnsw_build_memory: str = HNSW_BUILD_MEMORY,
        pool_size: int = 4,
    ) -> None:
        if hnsw_iterative_scan not in _ITERATIVE_SCANS:
            raise ConfigError(f"hnsw_iterative_scan must be one of {', '.join(_ITERATIVE_SCANS)}, got {hnsw_iterative_scan!r}")
        self.hnsw_build_memory_kb = memory_kb(hnsw_build_memory, "hnsw_build_memory")
        if any("\ud800" <= c <= "\udfff" for c in url):  # refused before any driver echoes it
            raise ConfigError("store.url is not valid UTF-8 (it holds an undecodable byte)")
        self._url = url
        self._passwords = _passwords_of(url)
        self.agent_id = check_agent_id(agent_id, plain=False)
        self.location = f"{redact_url(url)} (agent {agent_id})"
        self.exact_below = exact_below
        self.hnsw_ef_search = max(1, min(int(hnsw_ef_search), 1000))
        self.hnsw_iterative_scan = hnsw_iterative_scan
        self.hnsw_visit_cost = max(0.0, float(hnsw_visit_cost))  # 0: HNSW whatever the agent's share
        self.terms = _Terms(fts_tokenizer)
        self._pool_size = pool_size
        self._lock_conn: psycopg.Connection | None = None
        self._lock_depth = 0
        self._lock_guard = threading.RLock()
        self._schema_ready = False
        #: the OID of pgvector's ``vector`` type in the database (vectors are sent binary)
        self.vector_oid: int | None = None
        #: dims -> when the last automatic HNSW build failed (monotonic seconds)
        self._hnsw_failed: dict[int, float] = {}

    def __repr__(self) -> str:
        return f"PostgresBackend({self.location!r})"

    # -- StoreBackend -----------------------------------------------------------------------------

    def forget_cached(self) -> None:
        """Drop the agent's keyword statistics and postings, kept per database and agent for
        every index of the agent in the process (the next search loads them again)."""
        from .keyword_cache import KEYWORD_CACHE

        KEYWORD_CACHE.drop((self._url, self.agent_id))

    def open(self) -> "PostgresStore":
        self.ensure_schema()
        return PostgresStore(self, self.agent_id)

    def connection_pool(self) -> Any:
        """This process's pool of the database (shared by every backend of the URL; autocommit)."""
        return self.pool

    def open_namespace(self, agent_id: str) -> "PostgresStore":
        """A handle on another agent's index in the same database (for shared namespaces and
        replicas): read, never created (a database without clawmem's tables is not given them)."""
        check_agent_id(agent_id, "a shared namespace (an agent id)", plain=False)
        if not self._schema_ready:
            with self.connection() as conn:
                version = self._schema_version(conn)
            if version is None:
                raise MissingIndexError(f"{redact_url(self._url)} holds no clawmem index")
        self.ensure_schema()  # refuses a newer schema version
        return PostgresStore(self, agent_id, create=False)

    def set_aside(self, exc: BaseException) -> str:
        """Nothing to move: the server keeps its data consistent. The agent's rows are dropped
        so that the next sync rebuilds them, and its data version moves, so that every process
        holding the agent's index (caches, a trusted change journal) sees the rows go."""
        with self.connection() as conn, conn.transaction():
            for table in ("clawmem_chunks", "clawmem_files", "clawmem_meta"):
                conn.execute(f"DELETE FROM {table} WHERE agent = %s", (self.agent_id,))
            conn.execute("UPDATE clawmem_agents SET data_version = data_version + 1 WHERE agent = %s", (self.agent_id,))
        return "nowhere (its rows were dropped)"
