"""Many agents in one process: :class:`MemoryIndexes` opens a :class:`~clawmem_core.index.MemoryIndex`
per agent on one store (one SQLite file per agent, or one PostgreSQL URL whose connection pool
the process already shares), hands every index the same embedder (one model in memory for all
agents) and the same calibration vectors of it, keeps the most recently used ones open up to a bound
(with what each loaded, such as its keyword statistics) and closes the rest, freeing what they
loaded, never one that a caller holds a lease on.

>>> indexes = MemoryIndexes({"store": {"url": url}}, workspace_root=None)  # doctest: +SKIP
>>> with indexes.lease(user_id) as mem:                                    # doctest: +SKIP
...     hits = mem.search("what music do I like")
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterator, Mapping, Sequence, Union

from .config import MemoryConfig
from .embeddings.base import Embedder
from .errors import ConfigError, StoreError
from .index import MemoryIndex
from .index_parts.calibration_vectors import CalibrationVectors
from .index_parts.embedder import EmbedderChoice, wrap
from .store.base import check_agent_id

log = logging.getLogger("clawmem")

#: Where an agent's Markdown lives: ``None`` (every agent a replica of a PostgreSQL store), a
#: folder holding one workspace per agent (``<root>/<agent_id>``, created when missing), or a
#: callable ``agent_id -> path`` (``None``: that agent is a replica).
WorkspaceRoot = Union[None, str, "os.PathLike[str]", Callable[[str], Union[str, "os.PathLike[str]", None]]]

__all__ = ["MemoryIndexes", "MemoryResolver", "SharedEmbedder", "warm_up"]


class SharedEmbedder(Embedder):
    """One embedder lent to many indexes: it embeds through the embedder it wraps, and an index's
    ``close()`` leaves it open (the registry closes it, once, in :meth:`MemoryIndexes.close`)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner

    provider = property(lambda self: self.inner.provider)  # type: ignore[assignment]
    model = property(lambda self: self.inner.model)  # type: ignore[assignment]
    normalize = property(lambda self: self.inner.normalize)  # type: ignore[assignment]
    max_input_bytes = property(lambda self: self.inner.max_input_bytes)  # type: ignore[assignment]
    query_timeout = property(lambda self: self.inner.query_timeout)  # type: ignore[assignment]
    window_bytes = property(lambda self: self.inner.window_bytes)  # type: ignore[assignment]

    @property
    def provider_key(self) -> str:
        return self.inner.provider_key

    def _embed_documents(self, texts: list[str]) -> list[list[float]]:  # pragma: no cover - delegated below
        return self.inner.embed_documents(texts)

    def _embed_query(self, text: str) -> list[float]:  # pragma: no cover - delegated below
        return self.inner.embed_query(text)

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)

    async def aembed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return await self.inner.aembed_documents(texts)

    async def aembed_query(self, text: str) -> list[float]:
        return await self.inner.aembed_query(text)

    def close(self) -> None:
        """Nothing: the embedder stays open for the other indexes."""

    def __getattr__(self, name: str) -> Any:  # load(), loaded and the like of the embedder wrapped
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"SharedEmbedder({self.inner!r})"


def warm_up(embedder: Embedder | None) -> None:
    """Load ``embedder``'s model now where it has one to load (a local model: seconds); nothing
    for a remote provider or keyword-only search (``None``)."""
    if embedder is None:
        return
    inner = embedder.inner if isinstance(embedder, SharedEmbedder) else embedder
    load = getattr(inner, "load", None)
    if callable(load):
        load()


class _Entry:
    """One agent's index: being opened (``ready`` unset), open, or failed to open (``error``)."""

    __slots__ = ("index", "leases", "ready", "error")

    def __init__(self) -> None:
        self.index: MemoryIndex | None = None
        self.leases = 0
        self.ready = threading.Event()
        self.error: BaseException | None = None


class MemoryIndexes:
    """The open :class:`MemoryIndex` objects of one process, one per agent, on one store.

    ``config`` is the configuration every index uses (a :class:`MemoryConfig` or a dict; with
    ``store.url`` or ``$CLAWMEM_STORE_URL``, PostgreSQL, whose pool of connections is shared by
    every index of the process; else one SQLite file per agent under ``state_dir``).
    ``workspace_root`` says where each agent's Markdown is (see :data:`WorkspaceRoot`).
    ``max_open`` bounds the indexes kept open: opening one more closes the least recently used
    one that no caller holds a lease on (when all are leased, the bound is exceeded until leases
    end, never waited for). ``embedder`` (a clawmem, LangChain or LlamaIndex embedder) is shared
    by every index; without one, the one the configuration names is created once, at the first
    open or, with ``warm=True``, now (a local model then loads here, not at the first search).

    :meth:`get` returns an agent's open index (the same object while it stays open); an index got
    so may be closed by a later open past the bound, so a caller that uses it while other agents
    are opened holds a lease instead: ``with indexes.lease(agent_id) as mem:`` (``async with
    indexes.alease(agent_id)`` in asyncio, where the open runs in a thread). Thread-safe: many
    threads asking for one new agent open it once. A bad agent id is a :class:`ConfigError`.
    """

    def __init__(
        self,
        config: MemoryConfig | Mapping[str, Any] | None = None,
        *,
        workspace_root: WorkspaceRoot = None,
        max_open: int = 100,
        state_dir: str | os.PathLike[str] | None = None,
        embedder: Any = None,
        warm: bool = False,
    ) -> None:
        if config is None:
            config = MemoryConfig()
        elif isinstance(config, Mapping):
            config = MemoryConfig.from_dict(config)
        elif not isinstance(config, MemoryConfig):
            raise ConfigError(f"config must be a MemoryConfig or a dict, got {type(config).__name__}")
        if isinstance(max_open, bool) or not isinstance(max_open, int) or max_open < 1:
            raise ConfigError(f"max_open must be a whole number of at least 1, got {max_open!r}")
        self.config = config
        self.max_open = max_open
        self.state_dir = state_dir
        self._root = workspace_root
        self._lock = threading.Lock()
        self._embedder_lock = threading.Lock()
        self._entries: "OrderedDict[str, _Entry]" = OrderedDict()  # least recently used first
        self._closed = False
        self._embedding = EmbedderChoice(config, wrap(embedder) if embedder is not None else None)
        self._shared: SharedEmbedder | None = None
        self._embedder_ready = False
        #: The shared embedder's calibration vectors, one set for every index (they depend on the
        #: embedder only): read or embedded once per process, not once per agent opened.
        self._calibration = CalibrationVectors(config.cache.enabled)
        if warm:
            self.warm()

    # -- the shared embedder ------------------------------------------------------------------

    @property
    def embedder(self) -> Embedder | None:
        """The embedder every index uses (created on first need), or ``None``: keyword-only."""
        if not self._embedder_ready:
            with self._embedder_lock:
                if not self._embedder_ready:
                    emb = self._embedding.now().embedder
                    self._shared = SharedEmbedder(emb) if emb is not None else None
                    self._embedder_ready = True
        return self._shared

    def warm(self) -> None:
        """Create the embedder and load its model now (a local model's load takes seconds), so
        that the first search costs what the others do."""
        warm_up(self.embedder)

    # -- opening ------------------------------------------------------------------------------

    def workspace_of(self, agent_id: str) -> Path | None:
        """Where ``agent_id``'s Markdown is (``None``: the agent is a replica)."""
        root = self._root
        if root is None:
            return None
        if callable(root):
            got = root(agent_id)
            return None if got is None else Path(os.fspath(got))
        ws = Path(os.path.expanduser(os.fspath(root))) / agent_id
        ws.mkdir(parents=True, exist_ok=True)
        return ws

    def _open(self, agent_id: str) -> MemoryIndex:
        """Open ``agent_id``'s index (a subclass may add to it)."""
        mem = MemoryIndex(self.workspace_of(agent_id), agent_id=agent_id, config=self.config,
                          embedder=self.embedder, state_dir=self.state_dir)
        mem._share_calibration(self._calibration)  # one copy for every index, not one each
        return mem

    def _acquire(self, agent_id: str, lease: bool) -> _Entry:
        check_agent_id(agent_id)  # before the id names a folder or a file (ConfigError)
        with self._lock:
            if self._closed:
                raise StoreError("these MemoryIndexes are closed")
            entry = self._entries.get(agent_id)
            opener = entry is None
            if entry is None:
                entry = self._entries[agent_id] = _Entry()
            self._entries.move_to_end(agent_id)
            entry.leases += 1  # held while opening too: the entry is not closed under its opener
        if opener:
            try:
                entry.index = self._open(agent_id)
            except BaseException as exc:
                entry.error = exc
                with self._lock:
                    if self._entries.get(agent_id) is entry:
                        del self._entries[agent_id]
                entry.ready.set()
                raise
            entry.ready.set()
            self._evict()
        else:
            entry.ready.wait()
        with self._lock:
            failed = entry.error is not None or self._closed
            if failed:
                entry.leases -= 1
        if entry.error is not None:
            raise entry.error
        if failed:  # closed while it opened: a closed index is never handed out
            raise StoreError("these MemoryIndexes are closed")
        if not lease:
            self._release(entry)
        return entry

    def _release(self, entry: _Entry) -> None:
        with self._lock:
            entry.leases -= 1
        self._evict()

    def _evict(self) -> None:
        """Close the least recently used idle indexes past ``max_open`` (outside the lock); never
        the most recently used, which :meth:`get` may just be handing out."""
        doomed: list[MemoryIndex] = []
        with self._lock:
            extra = len(self._entries) - self.max_open
            for agent_id, entry in list(self._entries.items())[:-1]:
                if extra <= 0:
                    break
                if entry.leases == 0 and entry.index is not None:
                    del self._entries[agent_id]
                    doomed.append(entry.index)
                    extra -= 1
        for mem in doomed:
            self._close_one(mem)

    @staticmethod
    def _close_one(mem: MemoryIndex) -> None:
        try:
            mem.close()
        except Exception as exc:  # one index failing to close does not keep the others open
            log.warning("closing the index of agent %s failed: %s", mem.agent_id, exc)
        mem._forget_cached()

    # -- the public calls ---------------------------------------------------------------------

    def get(self, agent_id: str) -> MemoryIndex:
        """``agent_id``'s open index, opened on first use; the same object while it stays open
        (a later open past ``max_open`` may close it: hold a :meth:`lease` to prevent that)."""
        mem = self._acquire(agent_id, lease=False).index
        assert mem is not None
        return mem

    @contextlib.contextmanager
    def lease(self, agent_id: str) -> Iterator[MemoryIndex]:
        """``agent_id``'s open index, kept open until the block ends."""
        entry = self._acquire(agent_id, lease=True)
        assert entry.index is not None
        try:
            yield entry.index
        finally:
            self._release(entry)

    async def aget(self, agent_id: str) -> MemoryIndex:
        """:meth:`get`, the open run in a thread."""
        return await asyncio.to_thread(self.get, agent_id)

    @contextlib.asynccontextmanager
    async def alease(self, agent_id: str) -> AsyncIterator[MemoryIndex]:
        """:meth:`lease` for asyncio: the open runs in a thread."""
        opening = asyncio.ensure_future(asyncio.to_thread(self._acquire, agent_id, True))
        try:
            entry = await asyncio.shield(opening)
        except asyncio.CancelledError:  # the open goes on in its thread: its lease ends with it
            opening.add_done_callback(self._release_when_opened)
            raise
        assert entry.index is not None
        try:
            yield entry.index
        finally:
            self._release(entry)

    def _release_when_opened(self, opening: "asyncio.Future[_Entry]") -> None:
        if not opening.cancelled() and opening.exception() is None:
            self._release(opening.result())

    def open_agents(self) -> list[str]:
        """The agents whose index is open, least recently used first."""
        with self._lock:
            return [a for a, e in self._entries.items() if e.index is not None]

    def __contains__(self, agent_id: object) -> bool:
        with self._lock:
            entry = self._entries.get(agent_id)  # type: ignore[call-overload]
            return entry is not None and entry.index is not None

    def __len__(self) -> int:
        return len(self.open_agents())

    def close(self) -> None:
        """Close every index, then the shared embedder. Safe to call twice."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            entries = list(self._entries.values())
            self._entries.clear()
        for entry in entries:
            entry.ready.wait()
            if entry.index is not None:
                self._close_one(entry.index)
        if self._shared is not None:
            self._shared.inner.close()

    def __enter__(self) -> "MemoryIndexes":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MemoryIndexes(open={len(self)}, max_open={self.max_open})"


class MemoryResolver:
    """Which agent's memory a call uses, named per call: a framework adapter reads ``key`` (e.g.
    ``"user_id"``) from the call's own context (LangGraph's ``runtime.context`` or
    ``config["configurable"]``) and asks :meth:`resolve` for that user's index.

    ``agent_of`` maps a user id to an agent id (default: the user id itself); returning ``None``
    refuses the user. A missing, refused or invalid user is a :class:`ConfigError`, never another
    user's memory or a shared default.

    >>> resolver = MemoryResolver(MemoryIndexes(config, workspace_root="~/users"))  # doctest: +SKIP
    >>> with resolver.resolve("alice") as mem:                                     # doctest: +SKIP
    ...     hits = mem.search("what music do I like")
    """

    def __init__(
        self,
        indexes: MemoryIndexes,
        *,
        key: str = "user_id",
        agent_of: Callable[[str], str | None] | None = None,
    ) -> None:
        if not isinstance(indexes, MemoryIndexes):
            raise ConfigError(f"indexes must be MemoryIndexes, got {type(indexes).__name__}")
        if not isinstance(key, str) or not key:
            raise ConfigError(f"key must be a non-empty string, got {key!r}")
        self.indexes = indexes
        self.key = key
        self.agent_of = agent_of

    @property
    def config(self) -> MemoryConfig:
        """The configuration every user's index uses (its citations mode names the prompt's)."""
        return self.indexes.config

    def agent_id(self, user: Any) -> str:
        """The agent id for ``user`` (the value of :attr:`key` in a call), or :class:`ConfigError`."""
        if user is None or (isinstance(user, str) and not user.strip()):
            raise ConfigError(
                f"no {self.key!r} in this call: memory is per user here; pass it in the call, e.g. "
                f"config={{'configurable': {{'{self.key}': ...}}}} or the runtime context"
            )
        if not isinstance(user, str):
            raise ConfigError(f"{self.key} must be a string, got {type(user).__name__}")
        agent = self.agent_of(user) if self.agent_of is not None else user
        if agent is None:
            raise ConfigError(f"{self.key} {user!r} has no memory here")
        check_agent_id(agent)
        return agent

    @contextlib.contextmanager
    def resolve(self, user: Any) -> Iterator[MemoryIndex]:
        """``user``'s index, leased until the block ends."""
        with self.indexes.lease(self.agent_id(user)) as mem:
            yield mem

    @contextlib.asynccontextmanager
    async def aresolve(self, user: Any) -> AsyncIterator[MemoryIndex]:
        """:meth:`resolve` for asyncio."""
        async with self.indexes.alease(self.agent_id(user)) as mem:
            yield mem

    def __repr__(self) -> str:
        return f"MemoryResolver(key={self.key!r}, {self.indexes!r})"
