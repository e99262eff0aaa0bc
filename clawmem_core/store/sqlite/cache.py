"""The embedding cache of the SQLite store (one table in the index file, carried into rebuilds)."""

from __future__ import annotations

from typing import Sequence

from .common import _batches, _blob, _locked, _now_ms, _unblob


class _EmbeddingCache:
    """The embedding cache of :class:`~clawmem_core.store.sqlite.SQLiteStore`."""

    @_locked
    def cache_get(self, provider: str, model: str, provider_key: str, hashes: list[str]) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        for part, marks in _batches(hashes, 400):
            for h, blob in self.conn.execute(
                f"SELECT hash, embedding FROM embedding_cache WHERE provider=? AND model=? AND provider_key=? "
                f"AND hash IN ({marks})",
                (provider, model, provider_key, *part),
            ):
                if blob:
                    out[h] = _unblob(blob)
        return out

    @_locked
    def cache_put(self, provider: str, model: str, provider_key: str, items: dict[str, Sequence[float]]) -> None:
        if not items:
            return
        now = _now_ms()
        with self._tx():
            self.conn.executemany(
                "INSERT OR REPLACE INTO embedding_cache(provider, model, provider_key, hash, embedding, dims, "
                "updated_at) VALUES (?,?,?,?,?,?,?)",
                [(provider, model, provider_key, h, _blob(v), len(v), now) for h, v in items.items() if len(v)],
            )

    @_locked
    def cache_prune(self, max_entries: int) -> int:
        count = self.conn.execute("SELECT count(*) FROM embedding_cache").fetchall()[0][0]
        excess = count - max_entries
        if excess <= 0:
            return 0
        with self._tx():
            self.conn.execute(
                "DELETE FROM embedding_cache WHERE rowid IN "
                "(SELECT rowid FROM embedding_cache ORDER BY updated_at ASC LIMIT ?)",
                (excess,),
            )
        return excess

    @_locked
    def copy_cache_from(self, other: "SQLiteStore") -> None:
        """Copy another index's embedding cache into this one (a rebuild re-embeds nothing)."""
        with other._lock:
            rows = other.conn.execute(
                "SELECT provider, model, provider_key, hash, embedding, dims, updated_at FROM embedding_cache"
            ).fetchall()
        with self._tx():
            self.conn.executemany("INSERT OR REPLACE INTO embedding_cache VALUES (?,?,?,?,?,?,?)", rows)
