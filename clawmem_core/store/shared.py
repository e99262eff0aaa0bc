"""Search over an agent's own index and, read-only, the shared namespaces it may search.

:class:`SharedView` is a :class:`~clawmem_core.store.base.Store` for the search pipeline: it
asks each index for candidates and names what comes from a namespace ``@<namespace>/<path>``
(chunk ids too), so that the results say where they came from and ``memory_get`` can route a read
to the right index. A namespace shares its notes only, never its agent's session transcripts. It
never writes.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager
from typing import Any, Callable, Iterable, Iterator, Sequence

from ..errors import ReplicaError, StoreError
from .base import ChunkRow, FileRow, FileState, ReadInterrupted, Store, StoreCounts


#: What a namespace shares: its notes. Its agent's session transcripts (private conversations)
#: stay with that agent, whoever searches the namespace.
SHARED_SOURCES = frozenset({"memory"})


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

    def __init__(self, own: Store, shared: dict[str, Store],
                 on_error: Callable[[str, StoreError], None] | None = None) -> None:
        self.own = own
        self.shared = shared
        #: Told of a namespace that failed during a search (it is then left out of that search);
        #: without it, the failure is raised.
        self.on_error = on_error
        self._failed: set[str] = set()

    @property  # type: ignore[override]
    def fts_available(self) -> bool:
        return self.own.fts_available

    @property  # type: ignore[override]
    def vector_dims(self) -> int | None:
        return self.own.vector_dims

    @contextlib.contextmanager
    def reading(self, snapshot: bool = False) -> Iterator[None]:
        """The agent's index and each namespace in one reading block (one connection and snapshot
        for all of them where they share a database)."""
        with contextlib.ExitStack() as stack:
            for store in (self.own, *self.shared.values()):
                stack.enter_context(store.reading(snapshot))
            yield

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
        return [(None, self.own), *((ns, _Guarded(ns, s)) for ns, s in self.shared.items()  # type: ignore[misc]
                                    if ns not in self._failed)]

    def _each(self, call: Callable[[Store], Any], parts: Iterable[tuple[str | None, Any]] | None = None
              ) -> list[tuple[str | None, Any, Any]]:
        """``(namespace, argument, call(store))`` for the agent's index and each namespace (or each
        of ``parts``: ``(namespace, argument)``); a namespace that fails is left out of this search
        (and reported to :attr:`on_error`), the agent's own index never."""
        out = []
        for ns, arg in (((n, None) for n, _ in self._parts()) if parts is None else parts):
            try:
                out.append((ns, arg, call(self._store(ns)) if parts is None else call(self._store(ns), arg)))
            except StoreError as exc:
                if ns is None or self.on_error is None or isinstance(exc, ReadInterrupted):
                    raise  # (a search's lost snapshot is no namespace's failure: it runs again)
                self._failed.add(ns)
                self.on_error(ns, exc)
        return out

    # -- what search uses -------------------------------------------------------------------------

    def keyword_search(self, terms: list[str], limit: int) -> list[tuple[str, float]]:
        return self._merged(lambda store, n: store.keyword_search(terms, n), limit, lambda h: h[1])

    def term_hits_by_prefix(self, terms: list[str], prefixes: Iterable[str]
                            ) -> dict[str, tuple[tuple[int, list[int]] | None, str]]:
        """For each index among ``prefixes`` (``""`` the agent's own, ``"@<ns>/"`` a namespace): its
        :meth:`~Store.term_hits` and its keyword tokenizer (``""`` when unknown). Each index's BM25
        comes from its own term statistics, so its hits are scored and judged against them (a
        namespace that fails is left out)."""
        want = set(prefixes)
        parts = [(ns, None) for ns, _ in self._parts() if ("" if ns is None else shared_prefix(ns)) in want]
        out: dict[str, tuple[tuple[int, list[int]] | None, str]] = {}
        for ns, _, got in self._each(lambda store, _: (store.term_hits(terms), getattr(store, "fts_tokenizer", "")),
                                     parts):
            out["" if ns is None else shared_prefix(ns)] = got
        return out

    def vector_search(self, query: Sequence[float], limit: int) -> list[tuple[str, float]]:
        return self._merged(lambda store, n: store.vector_search(query, n), limit, lambda h: -h[1])

    def _merged(self, search: Callable[[Store, int], list[tuple[str, float]]], limit: int,
                order: Callable[[tuple[str, float]], float]) -> list[tuple[str, float]]:
        """The best ``limit`` of ``search(store, n)``'s hits over the agent's index and its namespaces
        (a namespace's ids prefixed with it), best first by ``order``."""
        hits: list[tuple[str, float]] = []
        for ns, _, got in self._each(lambda store: self._shared_notes(store, lambda n: search(store, n), limit)):
            pre = "" if ns is None else shared_prefix(ns)
            hits += [(pre + i, s) for i, s in got]
        hits.sort(key=order)
        return hits[:limit]

    def _shared_notes(self, store: Store, search: Callable[[int], list[tuple[str, float]]],
                      limit: int) -> list[tuple[str, float]]:
        """``search(n)``'s best ``limit`` hits; of a namespace, only its notes: its agent's session
        transcripts stay with that agent (asked again for more when transcripts took the places)."""
        if store is self.own:
            return search(limit)
        want = limit
        while True:
            got = search(want)
            meta = store.get_chunk_meta([i for i, _ in got]) if got else {}
            kept = [(i, r) for i, r in got if meta.get(i, ("", ""))[1] in SHARED_SOURCES]
            if len(kept) >= limit or len(got) < want or want >= limit * 64:
                return kept[:limit]
            want *= 4

    def _routed(self, ids: Iterable[str]) -> list[tuple[str | None, list[str]]]:
        return [(ns, raw) for ns, raw in self._route(ids).items() if ns is None or ns not in self._failed]

    def get_chunk_meta(self, ids: Iterable[str]) -> dict[str, tuple[str, str, int, int]]:
        out: dict[str, tuple[str, str, int, int]] = {}
        for ns, _, got in self._each(lambda store, raw: store.get_chunk_meta(raw), self._routed(ids)):
            pre = "" if ns is None else shared_prefix(ns)
            for i, (path, source, start, end) in got.items():
                if ns is None or source in SHARED_SOURCES:
                    out[pre + i] = (pre + path, source, start, end)
        return out

    def pending_ids(self, ids: Iterable[str]) -> set[str]:
        out: set[str] = set()
        for ns, _, got in self._each(lambda store, raw: store.pending_ids(raw), self._routed(ids)):
            pre = "" if ns is None else shared_prefix(ns)
            out.update(pre + i for i in got)
        return out

    def get_chunks(self, ids: Iterable[str]) -> dict[str, ChunkRow]:
        out: dict[str, ChunkRow] = {}
        for ns, _, got in self._each(lambda store, raw: store.get_chunks(raw), self._routed(ids)):
            pre = "" if ns is None else shared_prefix(ns)
            for i, row in got.items():
                if ns is not None and row.source not in SHARED_SOURCES:
                    continue  # a transcript of the namespace's agent: never shared
                out[pre + i] = ChunkRow(pre + row.id, pre + row.path, row.source, row.start_line, row.end_line,
                                        row.hash, row.model, row.text)
        return out

    def has_content(self) -> bool:
        return any(got for _, _, got in self._each(lambda store: store.has_content()))

    def file_states(self, source: str) -> dict[str, FileState]:
        out: dict[str, FileState] = {}
        for ns, _, got in self._each(lambda store: store.file_states(source)):
            if ns is not None and source not in SHARED_SOURCES:
                continue
            pre = "" if ns is None else shared_prefix(ns)
            for path, state in got.items():
                out[pre + path] = (pre + state[0], *state[1:])  # type: ignore[assignment]
        return out

    def file_text(self, source: str, path: str) -> tuple[str, int] | None:
        ns, raw = split_shared(path)
        if ns is not None and (ns not in self.shared or source not in SHARED_SOURCES):
            return None
        return self._store(ns).file_text(source, raw)

    def data_version(self) -> Any:
        return tuple(got for _, _, got in self._each(lambda store: store.data_version()))

    def refresh(self) -> None:
        self._each(lambda store: store.refresh())

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
                if type(exc) is StoreError or isinstance(exc, ReadInterrupted):
                    raise
                raise StoreError(f"shared namespace {self._ns!r}: {exc}") from exc
            except Exception as exc:  # the driver's own errors
                if not isinstance(exc, getattr(self._target, "driver_errors", ())):
                    raise
                raise StoreError(f"shared namespace {self._ns!r}: {exc}") from exc

        return call


__all__ = ["SharedView", "shared_prefix", "split_shared", "FileRow"]
