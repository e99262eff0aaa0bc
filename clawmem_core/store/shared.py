"""Search over an agent's own index and, read-only, the shared namespaces it may search.

:class:`SharedView` is a :class:`~clawmem_core.store.base.Store` for the search pipeline: it
asks each index for candidates and names what comes from a namespace ``@<namespace>/<path>``
(chunk ids too), so that the results say where they came from and ``memory_get`` can route a read
to the right index. It never writes.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Iterable, Sequence

from ..errors import ReplicaError, StoreError
from .base import ChunkRow, FileRow, FileState, Store, StoreCounts


def shared_prefix(namespace: str) -> str:
    return f"@{namespace}/"


def split_shared(name: str) -> tuple[str | None, str]:
    """``("team", "MEMORY.md")`` for ``"@team/MEMORY.md"``; ``(None, name)`` for the agent's own."""
    if name.startswith("@") and "/" in name:
        ns, rest = name[1:].split("/", 1)
        return ns, rest
    return None, name


class SharedView(Store):
    """The agent's own index plus read-only shared namespaces, for searching."""

    def __init__(self, own: Store, shared: dict[str, Store]) -> None:
        self.own = own
        self.shared = shared

    @property  # type: ignore[override]
    def fts_available(self) -> bool:
        return self.own.fts_available

    @property  # type: ignore[override]
    def vector_dims(self) -> int | None:
        return self.own.vector_dims

    def _route(self, ids: Iterable[str]) -> dict[str | None, list[str]]:
        out: dict[str | None, list[str]] = {}
        for i in ids:
            ns, raw = split_shared(i)
            if ns is not None and ns not in self.shared:
                continue
            out.setdefault(ns, []).append(raw)
        return out

    def _store(self, ns: str | None) -> Store:
        return self.own if ns is None else _Guarded(ns, self.shared[ns])  # type: ignore[return-value]

    def _parts(self) -> list[tuple[str | None, Store]]:
        return [(None, self.own), *((ns, _Guarded(ns, s)) for ns, s in self.shared.items())]  # type: ignore[misc]

    # -- what search uses -------------------------------------------------------------------------

    def keyword_search(self, terms: list[str], limit: int) -> list[tuple[str, float]]:
        hits: list[tuple[str, float]] = []
        for ns, store in self._parts():
            pre = "" if ns is None else shared_prefix(ns)
            hits += [(pre + i, r) for i, r in store.keyword_search(terms, limit)]
        hits.sort(key=lambda h: h[1])
        return hits[:limit]

    def vector_search(self, query: Sequence[float], limit: int) -> list[tuple[str, float]]:
        hits: list[tuple[str, float]] = []
        for ns, store in self._parts():
            pre = "" if ns is None else shared_prefix(ns)
            hits += [(pre + i, s) for i, s in store.vector_search(query, limit)]
        hits.sort(key=lambda h: -h[1])
        return hits[:limit]

    def get_chunk_meta(self, ids: Iterable[str]) -> dict[str, tuple[str, str, int, int]]:
        out: dict[str, tuple[str, str, int, int]] = {}
        for ns, raw in self._route(ids).items():
            pre = "" if ns is None else shared_prefix(ns)
            for i, (path, source, start, end) in self._store(ns).get_chunk_meta(raw).items():
                out[pre + i] = (pre + path, source, start, end)
        return out

    def get_chunks(self, ids: Iterable[str]) -> dict[str, ChunkRow]:
        out: dict[str, ChunkRow] = {}
        for ns, raw in self._route(ids).items():
            pre = "" if ns is None else shared_prefix(ns)
            for i, row in self._store(ns).get_chunks(raw).items():
                out[pre + i] = ChunkRow(pre + row.id, pre + row.path, row.source, row.start_line, row.end_line,
                                        row.hash, row.model, row.text)
        return out

    def has_content(self) -> bool:
        return any(store.has_content() for _, store in self._parts())

    def file_states(self, source: str) -> dict[str, FileState]:
        out: dict[str, FileState] = {}
        for ns, store in self._parts():
            pre = "" if ns is None else shared_prefix(ns)
            for path, state in store.file_states(source).items():
                out[pre + path] = (pre + state[0], *state[1:])  # type: ignore[assignment]
        return out

    def file_text(self, source: str, path: str) -> tuple[str, int] | None:
        ns, raw = split_shared(path)
        if ns is not None and ns not in self.shared:
            return None
        return self._store(ns).file_text(source, raw)

    def data_version(self) -> Any:
        return tuple(store.data_version() for _, store in self._parts())

    def refresh(self) -> None:
        for _, store in self._parts():
            store.refresh()

    def get_meta(self) -> dict[str, Any] | None:
        return self.own.get_meta()

    def get_value(self, key: str) -> str | None:
        return self.own.get_value(key)

    def file_hashes(self, source: str) -> dict[str, str]:
        return {p: s[1] for p, s in self.file_states(source).items()}

    def counts(self) -> StoreCounts:
        return self.own.counts()

    def cache_get(self, provider: str, model: str, provider_key: str, hashes: list[str]) -> dict[str, list[float]]:
        return self.own.cache_get(provider, model, provider_key, hashes)

    def vector_counts(self) -> Any:
        return self.own.vector_counts()

    def pending_chunks(self, limit: int, after: int = 0, paths: Sequence[str] | None = None) -> list[tuple[int, ChunkRow]]:
        return []

    # -- never written ----------------------------------------------------------------------------

    def _read_only(self, *_: Any, **__: Any) -> Any:
        raise ReplicaError("shared namespaces are read-only")

    set_meta = set_value = replace_files = touch_files = delete_files = _read_only  # type: ignore[assignment]
    cache_put = cache_prune = set_vectors = _read_only  # type: ignore[assignment]

    def rebuild(self) -> AbstractContextManager[Store]:
        raise ReplicaError("shared namespaces are read-only")

    def remove_leftovers(self) -> int:
        return 0

    def close(self) -> None:
        for store in self.shared.values():
            store.close()


class _Guarded:
    """Another agent's index as :class:`SharedView` calls it: a failure there (damaged, locked,
    vanished) is a :class:`StoreError` naming the namespace, never taken for damage of the agent's
    own index (which would be set aside and rebuilt)."""

    def __init__(self, ns: str, store: Store) -> None:
        self._ns = ns
        self._target = store

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return attr(*args, **kwargs)
            except StoreError as exc:
                if type(exc) is StoreError:
                    raise
                raise StoreError(f"shared namespace {self._ns!r}: {exc}") from exc
            except Exception as exc:  # the driver's own errors
                if not isinstance(exc, getattr(self._target, "driver_errors", ())):
                    raise
                raise StoreError(f"shared namespace {self._ns!r}: {exc}") from exc

        return call


__all__ = ["SharedView", "shared_prefix", "split_shared", "FileRow"]
