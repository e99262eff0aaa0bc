"""One agent's index in the PostgreSQL store: :class:`PostgresStore`, made of the parts that each
own one concern (reads, writes, keywords, vectors, the embedding cache, the upgrade of old rows)."""

from __future__ import annotations

import threading
from typing import Any

from ..base import CorruptIndexError, Store, StoreCounts, VectorCounts
from .cache import _EmbeddingCache
from .keywords import _Keywords
from .postings import _Postings
from .migrations import _InlineVectors
from .reads import _Reads
from .vectors import _Vectors
from .writes import _Writes

#: PostgreSQL's largest btree entry (8 KiB pages): a file's key (agent, generation, source, path)
#: must fit in one, in ``clawmem_files`` and in ``clawmem_chunks``' path index.
_BTREE_MAX_ITEM = 2704
#: What such an entry holds besides the agent id and the path: its header, the generation, the
#: longest source name ("sessions"), the fields' length headers and alignment (with room to spare).
_KEY_OVERHEAD = 72


class PostgresStore(_Reads, _Writes, _Keywords, _Postings, _Vectors, _EmbeddingCache, _InlineVectors, Store):
    """An open handle on one agent's index (``generation`` set: a generation being built)."""

    vector_extension = True
    fts_available = True
    #: A transaction's commit waits for the server's disk (milliseconds): the vector phase groups
    #: up to this many chunks in one while groups are quick.
    vector_group_max = 256

    def __init__(self, backend: PostgresBackend, agent: str, *, generation: int | None = None, create: bool = True) -> None:
        self.backend = backend
        self.agent = agent
        self._gen = generation
        self._closed = False
        #: The data versions this handle's own write transactions committed (ascending; the
        #: latest :data:`_OWN_KEPT` at most) and how many older ones were folded into a count (each
        #: at or below ``_own_floor``); held (``_own_gate``) from before a commit of this handle
        #: goes out until it is recorded (see :meth:`others_version`).
        self._own: list[int] = []
        self._own_folded = 0
        self._own_floor = -1
        self._own_gate = threading.RLock()
        self._cache_token: Any = None
        self._stats: tuple[int, float] = (0, 1.0)
        self._vec_count: dict[int, int] = {}
        self._index_size: dict[int, float] = {}
        self._vec_token: Any = None
        #: ((generation, data version), keyword rows) as last counted
        self._total: tuple[tuple[int, int], int] | None = None
        #: ((generation, data version), vector counts) as last read
        self._last_counts: tuple[Any, VectorCounts] | None = None
        #: dims -> the type of the valid HNSW index over them ("halfvec" or "vector")
        self._hnsw: dict[int, str] = {}
        #: dims -> at least how many vectors of those dimensions the agent has (counted, plus
        #: those written since): when below ``exact_below``, no HNSW index is due yet
        self._vec_bound: dict[int, int] = {}
        self.vector_path = None
        #: the postings of the keyword rows this handle wrote, until :meth:`settle` writes them
        self._held: Any = None
        if create:
            with self.backend.connection() as conn:
                conn.execute(
                    "INSERT INTO clawmem_agents (agent, generation) VALUES (%s, nextval('clawmem_generation_seq')) "
                    "ON CONFLICT (agent) DO NOTHING",
                    (agent,),
                )
        self.refresh()

    def __repr__(self) -> str:
        return f"PostgresStore({self.backend.location!r}, agent={self.agent!r})"

    @property  # type: ignore[override]
    def max_path_bytes(self) -> int:
        """The longest path a file of this agent can be keyed by (a btree entry holds the agent
        id and the path uncompressed within :data:`_BTREE_MAX_ITEM` bytes)."""
        return _BTREE_MAX_ITEM - _KEY_OVERHEAD - len(self.agent.encode("utf-8"))

    @property
    def vector_backend(self) -> str:
        return "pgvector"

    # -- errors -----------------------------------------------------------------------------------

    def is_corruption(self, exc: BaseException) -> bool:
        return isinstance(exc, CorruptIndexError)

    # -- status -----------------------------------------------------------------------------------

    def counts(self) -> StoreCounts:
        self.refresh()
        with self._conn(read=True) as conn:
            rows = conn.execute(
                f"SELECT 'f', source, count(*) FROM clawmem_files WHERE agent = %(agent)s AND generation = {self._g()} "
                f"GROUP BY source UNION ALL SELECT 'c', source, count(*) FROM clawmem_chunks WHERE agent = %(agent)s "
                f"AND generation = {self._g()} AND part = 0 GROUP BY source UNION ALL "
                f"SELECT 'e', '', count(*) FROM clawmem_embedding_cache",
                {"agent": self.agent},
            ).fetchall()
        by_source: dict[str, list[int]] = {}
        cache = 0
        for kind, source, n in rows:
            if kind == "e":
                cache = int(n)
                continue
            entry = by_source.setdefault(source, [0, 0])
            entry[0 if kind == "f" else 1] = int(n)
        files = sum(v[0] for v in by_source.values())
        chunks = sum(v[1] for v in by_source.values())
        return StoreCounts(files, chunks, {k: (v[0], v[1]) for k, v in by_source.items()}, cache)

    def close(self) -> None:
        self._closed = True
