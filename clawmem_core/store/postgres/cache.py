"""The embedding cache of the PostgreSQL store: one table shared by every agent of the database
(same provider, model and text hash: embedded once for everyone)."""

from __future__ import annotations

from typing import Sequence

from .connection import _again_if_lost
from .values import VectorArray, _now_ms, register_binary


class _EmbeddingCache:
    """The embedding cache of :class:`~clawmem_core.store.postgres.PostgresStore`."""

    @_again_if_lost
    def cache_get(self, provider: str, model: str, provider_key: str, hashes: list[str]) -> dict[str, list[float]]:
        if not hashes:
            return {}
        with self._conn(read=True) as conn:
            rows = conn.execute(
                "SELECT hash, embedding::real[] FROM clawmem_embedding_cache WHERE provider = %s AND model = %s "
                "AND provider_key = %s AND hash = ANY(%s)",
                (provider, model, provider_key, list(hashes)),
            ).fetchall()
        return {h: [float(x) for x in v] for h, v in rows if v}

    @_again_if_lost
    def cache_put(self, provider: str, model: str, provider_key: str, items: dict[str, Sequence[float]]) -> None:
        entries = [(h, v) for h, v in items.items() if len(v)]
        if not entries:
            return
        from psycopg.pq import TransactionStatus

        with self._conn() as conn:  # one statement: atomic without a transaction around it
            register_binary(conn)
            # Committed without waiting for the disk (``synchronous_commit`` off for this
            # statement's own transaction, set before its rows; never for a transaction the
            # connection is in): the cache is only a cache (a server that crashed at once loses
            # at most the last entries, embedded again when asked for), and a vector phase
            # writes to it after every provider call.
            own = conn.info.transaction_status == TransactionStatus.IDLE
            setting = "'off'" if own else "current_setting('synchronous_commit')"
            conn.execute(
                f"WITH s AS MATERIALIZED (SELECT set_config('synchronous_commit', {setting}, true)) "
                "INSERT INTO clawmem_embedding_cache (provider, model, provider_key, hash, dims, embedding, updated_at) "
                "SELECT %(provider)s, %(model)s, %(key)s, u.hash, vector_dims(u.emb), u.emb, %(now)s "
                "FROM unnest(%(hashes)s::text[], %(embs)b::vector[]) AS u(hash, emb) CROSS JOIN s "
                "ON CONFLICT (provider, model, provider_key, hash) DO UPDATE SET embedding = excluded.embedding, "
                "dims = excluded.dims, updated_at = excluded.updated_at",
                {"provider": provider, "model": model, "key": provider_key, "now": _now_ms(),
                 "hashes": [h for h, _ in entries], "embs": VectorArray(self._vector_oid(conn), [v for _, v in entries])},
            )

    def cache_prune(self, max_entries: int) -> int:
        """Evict the oldest entries beyond ``max_entries`` among those no agent uses. The cache is
        shared by every agent of the database, so one agent's ``cache.max_entries`` never evicts
        what any agent's index holds (the vectors of its chunks and windows, in any generation) nor
        the calibration vectors every agent's searches use: evicting them would cost that agent
        provider calls at its next rebuild. It bounds the rest (vectors of text no index holds
        any more)."""
        from ...calibration import BACKGROUND_TEXTS
        from ...chunking import sha256

        with self._conn() as conn:
            count = int(conn.execute("SELECT count(*) FROM clawmem_embedding_cache").fetchone()[0])  # type: ignore[index]
            if count <= max_entries:
                return 0
            cur = conn.execute(
                "DELETE FROM clawmem_embedding_cache d USING ("
                " SELECT provider, model, provider_key, hash FROM ("
                "  SELECT e.provider, e.model, e.provider_key, e.hash,"
                "   row_number() OVER (ORDER BY e.updated_at DESC, e.hash DESC) AS n"
                "  FROM clawmem_embedding_cache e"
                "  WHERE NOT EXISTS (SELECT 1 FROM clawmem_chunks c WHERE c.hash = e.hash)"
                "   AND NOT (e.hash = ANY(%(keep)s))"
                " ) ranked WHERE n > %(max)s"
                ") x WHERE d.provider = x.provider AND d.model = x.model AND d.provider_key = x.provider_key "
                "AND d.hash = x.hash",
                {"keep": [sha256(t) for t in BACKGROUND_TEXTS], "max": int(max_entries)},
            )
            return max(0, cur.rowcount)
