"""``MemoryIndex``: the facade that wires discovery, embeddings, the store, sync and search, and
owns their lifecycle (opening and recovering the store, locks, background and watched syncs,
status). Sync lives in :mod:`clawmem_core.sync`, ranking in :mod:`clawmem_core.search`, storage
behind :class:`~clawmem_core.store.base.Store`."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import re
import threading
import time
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from .config import MemoryConfig
from .discovery import Discovery, list_memory_files, normalize_extra_paths, printable_name
from .embeddings.base import Embedder
from .errors import (
    ClawmemError,
    ConfigError,
    EmbeddingError,
    IndexingError,
    PathNotAllowedError,
    ReplicaError,
    StoreError,
    WorkspaceError,
)
from .read import read_memory_file
from .results import IndexStatus, ReadResult, SearchHits, SearchResult, SyncReport
from .search import (  # noqa: F401  (the limits are re-exported: they were defined here)
    MAX_QUERY_EMBED_CHARS,
    MAX_QUERY_TERM_CHARS,
    MAX_QUERY_TERMS,
    LATE_CALLS,
    MAX_RESULTS,
    check_args,
    rank,
)
from .store.base import (CorruptIndexError, MissingIndexError, ReadInterrupted, Store, StoreBackend, StoreBusyError,
                         check_agent_id, store_deadline)
from .progress import ProgressCallback, SyncProgress, as_listener
from .journal import ChangeJournal
from .sync import Listener, Scan, Syncer, path_too_long, stat_key
from .text import FTS_FORMAT

if TYPE_CHECKING:
    from .writing import WriteResult

log = logging.getLogger("clawmem")

#: Version of what a sync derives from a file (chunk boundaries and line ranges, embedding windows;
#: the keyword terms have their own ``text.FTS_FORMAT``). Bump it when these change: an index written
#: under another version is rebuilt in full on the next sync (from the embedding cache, so nothing is
#: embedded twice), since unchanged files would otherwise keep their old rows.
INDEX_FORMAT = 4  # 4: legacy encodings and UTF-16/32 with a BOM are decoded (safe_fs.decode)


#: OpenClaw's default agent: names the sessions directory when no agent id is given.
DEFAULT_AGENT_ID = "main"


def workspace_index_name(workspace: str | os.PathLike[str]) -> str:
    """The index name of a workspace opened without an agent id: its directory name (for people)
    and a hash of its real path (so that two workspaces, even of the same name, never share an
    index, and a workspace reached through a symlink keeps its own)."""
    real = os.path.realpath(os.fspath(workspace))
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", os.path.basename(real)).strip("-_")[:40] or "workspace"
    return f"{slug}-{hashlib.sha256(os.fsencode(real)).hexdigest()[:12]}"


def default_state_dir() -> Path:
    """``$CLAWMEM_STATE_DIR`` or ``~/.clawmem``."""
    env = os.environ.get("CLAWMEM_STATE_DIR")
    return Path(os.path.expanduser(env)) if env else Path.home() / ".clawmem"


def _unit(v: Sequence[float]) -> list[float]:
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v] if n > 0 else list(v)


@dataclass
class _Selection:
    embedder: Embedder | None
    requested: str
    fallback_from: str | None = None
    reason: str | None = None


def _vectors_incomplete(vectors: dict[str, int] | None) -> bool:
    """Some chunks still wait for their vectors: search is hybrid where vectors exist, and ranks
    the others by their keywords (:func:`~clawmem_core.search.merge_partial`)."""
    return vectors is not None and vectors["done"] < vectors["total"]


def _no_vectors(vectors: dict[str, int] | None) -> bool:
    """No chunk has its vector yet (keyword-only mode, or the vector phase not started): the
    query is not embedded."""
    return vectors is None or vectors["done"] == 0


def _changed_files(scan: Scan) -> int:
    """Files a scan found added, changed (by size, mtime, ctime or inode) or gone; files re-read
    only because they were modified close to the last scan (most likely unchanged) do not count."""
    n = sum(map(len, scan.gone.values()))
    for item, key in scan.todo:
        prev = scan.known[item.source].get(item.path)
        if prev is None or prev[2:] != key:
            n += 1
    return n


def _wrap(obj: Any) -> Embedder:
    if isinstance(obj, Embedder):
        return obj
    from .embeddings.framework import wrap_embedder

    return wrap_embedder(obj)


def _utc_iso(timestamp: str | None) -> str | None:
    """A stored ``time.time()`` value (``repr``) as ISO 8601 UTC to the second; ``None`` when
    missing or unreadable."""
    try:
        value = float(timestamp) if timestamp else 0.0
    except ValueError:
        return None
    if not (math.isfinite(value) and value > 0):
        return None
    from datetime import timezone

    try:
        return datetime.fromtimestamp(value, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return None


class MemoryIndex:
    """A workspace of Markdown memory and its index.

    >>> with MemoryIndex("~/agent-workspace") as mem:          # doctest: +SKIP
    ...     mem.sync()
    ...     hits = mem.search("what music do I like")

    ``embedder`` may be a clawmem :class:`~clawmem_core.embeddings.base.Embedder`, a LangChain
    ``Embeddings`` or a LlamaIndex ``BaseEmbedding``; without one, ``config.provider`` decides
    (``auto``: a local model if configured, else the first remote provider with an API key, else
    keyword-only search).
    """

    def __init__(
        self,
        workspace: str | os.PathLike[str] | None,
        agent_id: str | None = None,
        config: MemoryConfig | Mapping[str, Any] | None = None,
        embedder: Any = None,
        state_dir: str | os.PathLike[str] | None = None,
        *,
        sessions_dir: str | os.PathLike[str] | None = None,
        reranker: Any = None,
    ) -> None:
        ws: Path | None = None
        if workspace is not None:
            ws = Path(os.path.abspath(os.path.expanduser(os.fspath(workspace))))
            if not ws.exists():
                raise WorkspaceError(f"workspace not found: {ws}")
            if not ws.is_dir():
                raise WorkspaceError(f"workspace is not a directory: {ws}")
        if agent_id is not None:
            check_agent_id(agent_id)  # the same rule on every store (ConfigError)
        if config is None:
            config = MemoryConfig()
        elif isinstance(config, Mapping):
            config = MemoryConfig.from_dict(config)
        elif not isinstance(config, MemoryConfig):
            raise ConfigError(f"config must be a MemoryConfig or a dict, got {type(config).__name__}")
        #: The Markdown workspace; ``None`` on a replica, which serves a server store's index
        #: without the files (search, and reads of the index's copies; no writes, no sync).
        self.workspace = ws
        self.config = config
        if ws is None and not self._store_url():
            raise WorkspaceError("a workspace is required (only a replica of a PostgreSQL store, store.url, runs "
                                 "without one)")
        if ws is None and agent_id is None:
            raise ConfigError("a replica (no workspace) must name the agent it serves: agent_id=... (--agent ID); "
                              "without a workspace there is nothing to derive it from")
        #: The agent: the explicit ``agent_id``, else one derived from the workspace's real path
        #: (:func:`workspace_index_name`), so that two workspaces never share an index, on SQLite
        #: (``<agent_id>.sqlite``) as in PostgreSQL (rows keyed by it).
        self.agent_id = agent_id or workspace_index_name(ws)  # type: ignore[arg-type]
        #: What names the index (the agent id).
        self.index_name = self.agent_id
        from .rerank import wrap_reranker

        #: The reranking stage (``query.rerank``): an object passed here, else one built from the
        #: configuration on first use.
        self._reranker = wrap_reranker(reranker) if reranker is not None else None
        self._reranker_built = reranker is not None
        self._background_vecs: dict[str, list[list[float]]] = {}
        self._background_pending: dict[str, threading.Event] = {}
        self._background_lock = threading.Lock()
        self._background_unsaved: dict[str, tuple[Embedder, dict[str, list[float]]]] = {}
        self.state_dir = Path(os.path.expanduser(os.fspath(state_dir))) if state_dir else default_state_dir()
        #: The SQLite index file (``None`` when the index is in PostgreSQL).
        self.store_path: Path | None = None if self._store_url() else self._resolve_store_path()
        #: Session transcripts (``*.jsonl``) indexed when ``sources`` includes "sessions".
        self.sessions_dir = (
            Path(os.path.expanduser(os.fspath(sessions_dir)))
            if sessions_dir
            else self.state_dir / "agents" / (agent_id or DEFAULT_AGENT_ID) / "sessions"  # OpenClaw's layout
        )
        from .sessions import SessionDeltaTracker

        sessions_cfg = config.sync.sessions
        self._sessions = SessionDeltaTracker(sessions_cfg.delta_bytes, sessions_cfg.delta_messages)
        self._user_embedder = embedder
        self._selection: _Selection | None = None
        #: Guards the embedder's creation and the background sync thread's start.
        self._state_lock = threading.RLock()
        self._fallback_used = False
        self._backend = self._new_backend()
        self._store = self._open_store()
        self._writer: Store | None = None
        self._retired: list[Store] = []
        self._sync_lock = threading.Lock()
        self._bg_thread: threading.Thread | None = None
        #: One vector phase at a time in this process, on its own store handle.
        self._vector_lock = threading.Lock()
        self._vector_store: Store | None = None
        self._closing = False
        self._dirty = True
        self._dirty_gen = 0  # bumped by every change notice; a sync clears only what it saw
        self._session_warmed = False
        self._synced_here = False
        try:
            last_scan = float(self._store.get_value("last_scan") or 0.0)
        except ValueError:
            last_scan = 0.0
        self._syncer = Syncer(ws or Path(), config, self.sessions_dir, self._sessions, last_scan)
        self._shared: dict[str, Store] | None = None
        #: Shared namespaces that could not be opened (not indexed yet, unreadable): why.
        self._shared_unavailable: dict[str, tuple[str, str]] = {}
        self._closed = False
        self._watchers: list[Any] = []
        self._interval_stop: threading.Event | None = None
        self._interval_thread: threading.Thread | None = None
        #: Kernel change notifications trusted by searches (started by the second search; see
        #: :attr:`change_journal`), and the store and data version at which the index last matched
        #: the Markdown.
        self._journal: ChangeJournal | None = None
        self._journal_tried = False
        self._fresh_checks = 0
        #: When a walk last found the index matching the Markdown: ``(search handle, its data
        #: version, the vector phase's handle, what that handle had seen of other writers)``.
        self._fresh_at: tuple[Store, Any, Store | None, Any] | None = None

    # -- setup --------------------------------------------------------------------------------

    def _resolve_store_path(self, name: str | None = None) -> Path:
        """The SQLite index file of agent ``name`` (default: this one's)."""
        name = name or self.index_name
        if self.config.store.path:
            raw = self.config.store.path.replace("{agent_id}", name).replace("{agentId}", name)
            p = Path(os.path.expandvars(os.path.expanduser(raw)))
            return p if p.is_absolute() else self.workspace / p  # type: ignore[operator]
        return self.state_dir / "memory" / f"{name}.sqlite"

    def _store_url(self) -> str | None:
        return self.config.store.url or os.environ.get("CLAWMEM_STORE_URL") or None

    def _new_backend(self) -> StoreBackend:
        url = self._store_url()
        if url:
            from .store.postgres import PostgresBackend, is_postgres_url

            if not is_postgres_url(url):
                raise ConfigError("CLAWMEM_STORE_URL must be a postgresql:// URL")
            return PostgresBackend(
                url,
                self.agent_id,
                fts_tokenizer=self.config.store.fts.tokenizer,
                exact_below=self.config.store.vector.exact_below,
                hnsw_ef_search=self.config.store.vector.hnsw_ef_search,
                hnsw_build_memory=self.config.store.vector.hnsw_build_memory,
            )
        from .store.sqlite import SQLiteBackend

        return SQLiteBackend(
            self.store_path,
            vector_enabled=self.config.store.vector.enabled,
            extension_path=self.config.store.vector.extension_path,
            fts_tokenizer=self.config.store.fts.tokenizer,
            namespace_path=self._resolve_store_path,
        )

    def _new_store(self) -> Store:
        if self.workspace is None:  # a replica reads the agent's index; it never creates one
            store = self._backend.open_namespace(self.agent_id)
            if store.get_meta() is None:
                store.close()
                raise MissingIndexError(f"replica of agent {self.agent_id!r}: {self._backend.location} holds no index "
                                        "of this agent (check --agent; its workspace must be synced to the store first)")
            return store
        return self._backend.open()

    def _open_store(self) -> Store:
        try:
            return self._new_store()
        except CorruptIndexError as exc:
            with self._process_lock():
                try:  # another process may have replaced it meanwhile
                    return self._new_store()
                except CorruptIndexError:
                    self._set_aside(exc)
            return self._new_store()

    def _set_aside(self, exc: Exception) -> None:
        """Keep a damaged index aside (call with the process lock held); the next sync rebuilds
        it from the Markdown."""
        kept = self._backend.set_aside(exc)
        log.warning("%s; moved it to %s and rebuilding the index from the Markdown", exc, kept)

    def _recover(self, exc: Exception) -> None:
        """The live index turned out damaged while in use: set it aside and reopen an empty one
        (call with both sync locks held)."""
        if self._writer is not None:
            self._writer.close()
        self._writer = None
        # the reader may be in use by a search in another thread: retired, closed with the index
        self._retired.append(self._store)
        if not isinstance(exc, CorruptIndexError):
            exc = CorruptIndexError(f"index {self._backend.location} is corrupt: {exc}")
        try:
            self._set_aside(exc)
        except OSError as err:
            raise StoreError(f"{exc}; cannot move it aside: {err.strerror or err}") from None
        self._store = self._new_store()

    def _selection_now(self) -> _Selection:
        """Create the embedder on first need (never for an empty index or an empty query)."""
        if self._selection is not None:
            return self._selection
        with self._state_lock:  # threads searching at once create one embedder
            if self._selection is not None:
                return self._selection
            return self._select()

    def _select(self) -> _Selection:
        if self._user_embedder is not None:
            emb = _wrap(self._user_embedder)
            self._selection = _Selection(emb, requested=emb.provider)
        elif not self.config.enabled or self.config.provider == "none":
            self._selection = _Selection(None, requested=self.config.provider, reason="keyword-only by configuration")
        else:
            try:
                from .embeddings.registry import resolve_embedder
            except ImportError:  # providers not installed in this build
                if self.config.provider != "auto":
                    raise
                self._selection = _Selection(None, "auto", reason="no embedding providers available")
                return self._selection
            sel = resolve_embedder(self.config)
            self._selection = _Selection(sel.embedder, sel.requested, sel.fallback_from, sel.reason)
        return self._selection

    @property
    def embedder(self) -> Embedder | None:
        """The embedder in use (created on first access), or ``None`` in keyword-only mode."""
        return self._selection_now().embedder

    def provider_info(self) -> dict[str, Any]:
        """``provider``, ``model``, ``fallback`` and ``mode`` as the tool payload reports them."""
        sel = self._selection_now()
        emb = sel.embedder
        fallback = None
        if sel.fallback_from:
            fallback = {"from": sel.fallback_from, "reason": sel.reason}
        return {
            "provider": emb.provider if emb else "none",
            "model": emb.model if emb else "fts-only",
            "fallback": fallback,
            "mode": self._mode(emb),
        }

    def _mode(self, emb: Embedder | None) -> str:
        if emb is None:
            return "fts-only"
        if not self.config.query.hybrid.enabled or not self._store.fts_available:
            return "vector"
        return "hybrid"

    # -- identity -----------------------------------------------------------------------------

    def _identity(self, emb: Embedder | None) -> dict[str, Any]:
        extra = sorted(str(p).replace(os.sep, "/") for p in normalize_extra_paths(self.workspace, self.config.extra_paths))
        scope = hashlib.sha256(json.dumps({"extra_paths": extra}).encode()).hexdigest()
        return {
            "provider": emb.provider if emb else "none",
            "model": emb.model if emb else "fts-only",
            "provider_key": emb.provider_key if emb else "fts-only",
            "sources": sorted(self.config.sources),
            "scope_hash": scope,
            "chunk_tokens": self.config.chunking.tokens,
            "chunk_overlap": self.config.chunking.overlap,
            "fts_tokenizer": self.config.store.fts.tokenizer,
            "fts_format": FTS_FORMAT,
            "workspace": str(self.workspace),
            "index_format": INDEX_FORMAT,
            "embed_window": emb.embed_window if emb else 0,
            # a file over the limit is stored without chunks: another limit rebuilds what it changes
            "max_file_bytes": self.config.sync.max_file_bytes,
        }

    def needs_full_reindex(self) -> bool:
        """True when the index identity (provider, model, settings, sources, extra paths,
        chunking, tokenizer, keyword-index format) differs from the configuration, or there is no
        index yet."""
        meta = self._store.get_meta()
        if meta is None:
            return True
        want = self._identity(self._selection_now().embedder)
        return any(meta.get(k) != v for k, v in want.items())

    # -- sync ---------------------------------------------------------------------------------

    def sync(self, force: bool = False, progress: ProgressCallback | None = None, *, reason: str = "manual",
             vectors: bool = True, vector_seconds: float | None = None, wait_for_others: bool = True) -> SyncReport:
        """Bring the index up to date with the Markdown, in two phases. The keyword phase reads and
        chunks the changed files and writes them for keyword search (unchanged files are skipped,
        deleted ones removed; vectors the embedding cache holds are used at once); a full reindex
        (forced, or when the identity changed) is built beside the live index and swapped in
        atomically. The vector phase then embeds the chunks still without vectors (text seen
        before is never embedded twice); ``vectors=False`` leaves them for later (a background
        sync or the next ``sync()``), and so does ``vector_seconds`` for those not embedded within
        that many seconds; a killed run carries on from where it stopped. While another process
        embeds this index's pending chunks, the vector phase waits for it (within
        ``vector_seconds``), or with ``wait_for_others=False`` leaves them to it at once
        (``report.vectors_elsewhere``): one process embeds them, never two.

        ``progress`` receives a :class:`~clawmem_core.progress.SyncProgress` for each phase
        (files, then chunks, with an ETA from the throughput measured so far); a callable of
        three arguments gets ``(done, total, label)``. Returns what was done."""
        self._check_open()
        self._check_workspace("sync")
        listener = as_listener(progress)
        report = self._sync_keywords(force, listener, reason)
        if vectors:
            deadline = None
            if vector_seconds is not None and math.isfinite(vector_seconds):
                deadline = time.monotonic() + max(0.0, vector_seconds)
            try:
                self._sync_vectors(report, listener, deadline=deadline, wait_for_others=wait_for_others)
            except EmbeddingError as exc:
                if not self._activate_fallback(exc):
                    raise
                report = self._sync_keywords(True, listener, "fallback")
                self._sync_vectors(report, listener, deadline=deadline, wait_for_others=wait_for_others)
        else:
            report.vectors_pending = self._pending_vectors()
        return report

    def _sync_keywords(self, force: bool, listener: Listener | None, reason: str) -> SyncReport:
        """The keyword phase under the sync locks (nothing is locked when nothing changed)."""
        with self._sync_lock:
            started, gen = time.perf_counter(), self._dirty_gen
            scan = None if force else self._unlocked_scan()
            if scan is not None and scan.clean:
                return self._nothing_changed(scan, reason, gen, started)
            lock = self._process_lock()
            with lock:
                return self._guarded_sync(force, listener, reason, scan=scan)

    def _sync_vectors(
        self,
        report: SyncReport,
        listener: Listener | None = None,
        *,
        blocking: bool = True,
        deadline: float | None = None,
        paths: Sequence[str] | None = None,
        store: Store | None = None,
        wait_for_others: bool = True,
    ) -> None:
        """The vector phase: embed pending chunks until none is left, the index closes, or
        ``deadline`` (``time.monotonic()``) passes. Runs on this process's vector handle, one at
        a time (``blocking=False``: skipped when another is running), and one process at a time
        (the backend's vector lock: waited for until ``deadline`` unless ``wait_for_others`` is
        false or ``blocking`` is; ``report.vectors_elsewhere`` when another process kept it), or
        on ``store`` when given (``paths`` then limits it to those files' chunks)."""
        emb = self._selection_now().embedder
        if emb is None:
            return
        if store is not None:
            self._syncer.fill_vectors(store, emb, report, listener, should_stop=lambda: self._closing,
                                      deadline=deadline, paths=paths)
            report.vectors_pending = store.vector_counts().pending
            return
        if not self._vector_lock.acquire(blocking=blocking):
            return
        try:
            vstore = self._vector_store
            if vstore is None or vstore.superseded():
                if vstore is not None:
                    self._retired.append(vstore)
                vstore = self._vector_store = self._new_store()
            vstore.refresh()
            if not vstore.vector_counts().pending:
                report.vectors_pending = 0
                return
            if not (blocking and wait_for_others):
                wait: float | None = 0.0
            else:
                wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            with contextlib.ExitStack() as held:
                if self._take_vector_lock(held, wait):
                    self._syncer.fill_vectors(vstore, emb, report, listener, should_stop=lambda: self._closing,
                                              deadline=deadline, paths=paths)
                else:
                    # Another process is embedding these chunks: left to it (embedding them here
                    # too would only race it over the same chunks, and count none as done).
                    report.vectors_elsewhere = True
                    log.info("another process is embedding the vectors of this index: left to it")
            report.vectors_pending = vstore.vector_counts().pending
        finally:
            self._vector_lock.release()

    #: Seconds between two tries of the vector lock while another process holds it.
    _VECTOR_LOCK_POLL = 0.2

    def _take_vector_lock(self, held: contextlib.ExitStack, wait: float | None) -> bool:
        """Take the backend's vector lock into ``held`` within ``wait`` seconds (``None``: until
        it is free or the index closes); whether it was taken."""
        end = None if wait is None else time.monotonic() + wait
        while True:
            left = self._VECTOR_LOCK_POLL if end is None else min(self._VECTOR_LOCK_POLL, end - time.monotonic())
            try:
                held.enter_context(self._backend.vector_lock(max(0.0, left)))
                return True
            except StoreBusyError:
                if self._closing or (end is not None and time.monotonic() >= end):
                    return False

    def _pending_vectors(self) -> int:
        """Chunks waiting for vectors (0 in keyword-only mode or before the embedder is chosen)."""
        sel = self._selection
        if sel is None or sel.embedder is None:
            return 0
        return self._store.vector_counts().pending

    def _guarded_sync(self, force: bool, progress: Listener | None, reason: str,
                      session_files: Sequence[str | os.PathLike[str]] = (), *, scan: Scan | None = None) -> SyncReport:
        """``_sync_locked`` with storage failures turned into :class:`StoreError` and a damaged
        index set aside and rebuilt (both locks held)."""
        try:
            return self._sync_locked(force, progress, reason, session_files, scan=scan)
        except Exception as exc:
            store = self._writer or self._store
            if store.is_corruption(exc):
                self._recover(exc)
                return self._sync_locked(True, progress, "recovery", session_files)
            err = store.write_error(exc)
            if err is not None:
                raise err from None
            if isinstance(exc, (ClawmemError, MemoryError)):  # out of memory is no bug of the files: as it is
                raise
            # Say what failed: never let an unexpected error pass for a provider problem or for
            # invalid tool arguments (a UnicodeError or a RecursionError is a ValueError or a bug here).
            from .discovery import printable_name
            from .masking import mask_secrets

            detail = mask_secrets(printable_name(f"{type(exc).__name__}: {exc}"))
            raise IndexingError(f"indexing the memory files failed: {detail}") from exc

    async def async_sync(self, force: bool = False, progress: ProgressCallback | None = None, *,
                         vectors: bool = True) -> SyncReport:
        """Async twin of :meth:`sync` (runs in a worker thread)."""
        import asyncio

        return await asyncio.to_thread(lambda: self.sync(force, progress, vectors=vectors))

    def _process_lock(self, blocking: bool = True) -> Any:
        return self._backend.process_lock(blocking)

    def _writer_store(self) -> Store:
        if self._writer is None:
            self._writer = self._new_store()
        return self._writer

    def _sync_locked(
        self,
        force: bool,
        progress: Listener | None,
        reason: str,
        session_files: Sequence[str | os.PathLike[str]] = (),
        *,
        scan: Scan | None = None,
    ) -> SyncReport:
        gen = self._dirty_gen
        writer = self._writer_store()
        emb = self._selection_now().embedder
        try:
            report = self._syncer.run(
                writer, self._store, self._identity(emb), emb, force, progress, reason, session_files, scan=scan
            )
        except EmbeddingError as exc:
            if self._activate_fallback(exc):
                return self._sync_locked(True, progress, "fallback")
            raise
        if self._dirty_gen == gen:  # a change noticed during this sync keeps the index dirty
            self._dirty = False
        self._synced_here = True
        if self.config.cache.enabled:
            self._save_background(writer)
        return report

    @property
    def _last_scan(self) -> float:
        return self._syncer.last_scan

    def notify_session_update(self, path: str | os.PathLike[str]) -> bool:
        """Tell the index a transcript grew; returns True when it crossed the delta thresholds
        (the index is then marked dirty and a background sync starts)."""
        if not self.config.sessions_enabled:
            return False
        if self._sessions.observe(path):
            self.mark_dirty()
            self._maybe_background_sync()
            return True
        return False

    def sync_sessions(self, paths: Sequence[str | os.PathLike[str]]) -> SyncReport:
        """Re-index the named transcripts now, whatever their growth (after a compaction)."""
        self._check_open()
        self._check_workspace("sync")
        with self._sync_lock:
            with self._process_lock():
                return self._guarded_sync(False, None, "post-compaction", paths)

    def _activate_fallback(self, exc: Exception) -> bool:
        fb = self.config.fallback
        sel = self._selection
        if fb in ("none", "") or self._fallback_used or sel is None or self._user_embedder is not None:
            return False
        if sel.embedder is not None and sel.embedder.provider == fb:
            return False
        from .embeddings.registry import create_provider

        try:
            emb = create_provider(fb, replace(self.config, model=""))
        except Exception as err:  # the fallback cannot start either: keep the first error
            log.warning("fallback provider %s unavailable: %s", fb, err)
            return False
        self._fallback_used = True
        old = sel.embedder.provider if sel.embedder else sel.requested
        self._selection = _Selection(emb, sel.requested, fallback_from=old, reason=str(exc))
        log.warning("embedding provider %s failed (%s); switched to %s and reindexing", old, exc, fb)
        return True

    def _unlocked_scan(self) -> Scan | None:
        """A scan before taking the locks, so that a sync with nothing to do takes no lock and
        writes nothing (see :meth:`Syncer.unlocked_scan`)."""
        return self._syncer.unlocked_scan(self._store, lambda: self._identity(self._selection_now().embedder))

    def _nothing_changed(self, scan: Scan, reason: str, gen: int, started: float) -> SyncReport:
        """The report of a sync whose unlocked scan found every file unchanged."""
        if self._dirty_gen == gen:
            self._dirty = False
        self._synced_here = True
        from .discovery import BAD_NAME_REASON

        return SyncReport(full=False, reason=reason, files_scanned=scan.scanned, files_unchanged=scan.unchanged,
                          files_skipped=[f"{name}: {BAD_NAME_REASON}" for name in scan.bad_names] + scan.too_long,
                          seconds=time.perf_counter() - started)

    def _maybe_background_sync(self, *, vectors_only: bool = False) -> None:
        """Start a background sync when the index may be stale, or has chunks waiting for vectors;
        a search never waits for it."""
        if self._closing or self.workspace is None:
            return  # closing, or a replica (which never syncs)
        if self._synced_here:
            self._session_warmed = True  # this process has synced: the session is warm
        keywords = not vectors_only and (
            (self.config.sync.on_search and self._dirty)
            or (self.config.sync.on_session_start and not self._session_warmed)
        )
        self._session_warmed = True
        # Vectors left pending (by a first search, a killed run, a search's small sync): after a
        # first search always, later only when searches may sync.
        vectors = (vectors_only or self.config.sync.on_search) and self._pending_vectors() > 0
        if not keywords and not vectors:
            return
        with self._state_lock:
            if self._bg_thread is not None and self._bg_thread.is_alive():
                return
            self._bg_thread = threading.Thread(target=self._background_sync, args=(keywords, vectors),
                                               name="clawmem-sync", daemon=True)
            self._bg_thread.start()

    def _background_sync(self, keywords: bool, vectors: bool) -> None:
        try:
            if keywords and self._sync_lock.acquire(blocking=False):
                try:
                    try:
                        # Changes noticed while syncing are picked up by another round.
                        for _ in range(3):
                            started, gen = time.perf_counter(), self._dirty_gen
                            scan = self._unlocked_scan()
                            if scan is not None and scan.clean:  # nothing to write: no lock taken
                                self._nothing_changed(scan, "search", gen, started)
                            else:
                                with self._process_lock(blocking=False):
                                    self._guarded_sync(False, None, "search", scan=scan)
                            if not self._dirty:
                                break
                    except StoreBusyError:
                        pass  # another process is syncing this index
                finally:
                    self._sync_lock.release()
            if not self._closing and (vectors or keywords):
                self._sync_vectors(SyncReport(reason="background"), blocking=False)
        except Exception as exc:  # logged, never raised into the agent
            log.warning("background memory sync failed: %s", exc)

    def mark_dirty(self) -> None:
        """Tell the index the Markdown changed (the watcher calls this)."""
        self._dirty_gen += 1
        self._dirty = True

    @property
    def dirty(self) -> bool:
        return self._dirty

    # -- search -------------------------------------------------------------------------------

    def _check_args(self, query: Any, max_results: Any, min_score: Any) -> tuple[str, int, float]:
        return check_args(query, max_results, min_score, self.config.query)

    def search(self, query: str, max_results: int | None = None, min_score: float | None = None) -> SearchHits:
        """Hybrid search (SPEC 6). Empty query or empty index -> ``[]`` without creating the
        embedder. Raises :class:`EmbeddingError` when the query cannot be embedded. A query
        embedding that takes longer than ``query.timeout_ms`` is abandoned: the results come from
        the keyword side and ``results.info["degraded"]`` says ``"embedding timeout"``. An explicit
        ``min_score`` is a floor."""
        self._check_open()
        q, k, ms = self._check_args(query, max_results, min_score)
        if not q:
            return SearchHits()
        store = self._store
        # a store whose server is down says so by the query's deadline (no wait for a connection)
        with store_deadline(time.monotonic() + self.config.query.timeout_ms / 1000.0):
            try:
                return self._search_once(q, k, ms, min_score is not None)
            except Exception as exc:  # damaged while in use: rebuild, answer
                if not store.is_corruption(exc) or isinstance(exc, CorruptIndexError):
                    raise
                self._rebuild_damaged(exc, store)
                return self._search_once(q, k, ms, min_score is not None)

    def _search_once(self, q: str, k: int, ms: float, explicit: bool = False) -> SearchHits:
        with self._store.reading():  # the checks before a search: one connection
            ready, stale = self._prepare_search()
            if not ready:
                return SearchHits()
            emb = self._selection_now().embedder
            vectors = self._vector_state(emb)
        keyword_only = emb is None or _no_vectors(vectors)
        deadline = time.monotonic() + self.config.query.timeout_ms / 1000.0
        qvec = None
        degraded = None
        if emb is not None and not keyword_only:
            if LATE_CALLS.busy(emb):  # an earlier query's embedding ran out of time and still runs
                degraded = "embedding timeout"
                log.info("an earlier query embedding is still running: keyword results only")
            else:
                ok, qvec = LATE_CALLS.run(emb, lambda: emb.embed_query(q[:MAX_QUERY_EMBED_CHARS]),
                                          deadline - time.monotonic())
                if not ok:
                    degraded = "embedding timeout"
                    log.warning("query embedding took longer than query.timeout_ms (%d ms): keyword results only",
                                self.config.query.timeout_ms)
        return self._ranked(q, qvec, k, ms, keyword_only, stale, vectors, emb, explicit, deadline, degraded)

    def _ranked(self, q: str, qvec: list[float] | None, k: int, ms: float, keyword_only: bool, stale: bool,
                vectors: dict[str, int] | None, emb: Embedder | None, explicit: bool = False,
                deadline: float | None = None, degraded: str | None = None) -> SearchHits:
        # Every read of the ranking from one state of the index (one snapshot, one connection);
        # run again if the store lost that state midway after the index changed.
        for attempt in range(2):
            try:
                with self._search_store().reading(snapshot=True):
                    return self._ranked_once(q, qvec, k, ms, keyword_only, stale, vectors, emb, explicit, deadline,
                                             degraded)
            except ReadInterrupted:
                if attempt:
                    raise
                log.info("the index changed while a search lost its connection: searching again")
        raise AssertionError("unreachable")

    def _ranked_once(self, q: str, qvec: list[float] | None, k: int, ms: float, keyword_only: bool, stale: bool,
                     vectors: dict[str, int] | None, emb: Embedder | None, explicit: bool = False,
                     deadline: float | None = None, degraded: str | None = None) -> SearchHits:
        partial = _vectors_incomplete(vectors)
        hits = self._rank(q, qvec, k, ms, keyword_only=keyword_only or qvec is None, explicit=explicit, deadline=deadline,
                          partial=partial)
        if not keyword_only and qvec is not None and not partial:
            now = self._vector_state(emb)
            if _vectors_incomplete(now):  # a full reindex switched in while this search ran
                vectors = now
                hits = self._rank(q, qvec, k, ms, keyword_only=False, explicit=explicit, deadline=deadline,
                                  partial=True)
        out = SearchHits(hits, stale=stale, vectors=vectors, info=getattr(hits, "info", None))
        if degraded:
            out.info["degraded"] = degraded
        return out

    def _vector_state(self, emb: Embedder | None) -> dict[str, int] | None:
        """``{"done", "total"}`` chunks with vectors (``None`` in keyword-only mode)."""
        if emb is None:
            return None
        counts = self._store.vector_counts()
        return {"done": counts.done, "total": counts.total}

    def _rebuild_damaged(self, exc: Exception, failed: Store) -> None:
        with self._sync_lock:
            with self._process_lock():
                if self._store is failed and not failed.superseded():
                    self._recover(exc)
                    self._sync_locked(True, None, "recovery")
                elif self._store is failed:  # another process already set it aside and rebuilt it
                    self._retired.append(failed)
                    self._store = self._new_store()

    async def asearch(self, query: str, max_results: int | None = None, min_score: float | None = None) -> SearchHits:
        """Async twin of :meth:`search`: the query embedding is awaited (``aembed_query``) within
        ``query.timeout_ms``."""
        import asyncio

        self._check_open()
        q, k, ms = self._check_args(query, max_results, min_score)
        if not q:
            return SearchHits()
        store = self._store
        explicit = min_score is not None
        with store_deadline(time.monotonic() + self.config.query.timeout_ms / 1000.0):  # (see search)
            try:
                return await self._asearch_once(q, k, ms, explicit)
            except Exception as exc:  # damaged while in use: rebuild, answer
                if not store.is_corruption(exc) or isinstance(exc, CorruptIndexError):
                    raise
                await asyncio.to_thread(self._rebuild_damaged, exc, store)
                return await self._asearch_once(q, k, ms, explicit)

    async def _asearch_once(self, q: str, k: int, ms: float, explicit: bool = False) -> SearchHits:
        import asyncio

        ready, stale = await asyncio.to_thread(self._prepare_search)
        if not ready:
            return SearchHits()
        emb = self._selection_now().embedder
        vectors = await asyncio.to_thread(self._vector_state, emb)
        keyword_only = emb is None or _no_vectors(vectors)
        deadline = time.monotonic() + self.config.query.timeout_ms / 1000.0
        qvec = None
        degraded = None
        if emb is not None and not keyword_only:
            try:
                qvec = await asyncio.wait_for(emb.aembed_query(q[:MAX_QUERY_EMBED_CHARS]), deadline - time.monotonic())
            except asyncio.TimeoutError:
                degraded = "embedding timeout"
                log.warning("query embedding took longer than query.timeout_ms (%d ms): keyword results only",
                            self.config.query.timeout_ms)
        return await asyncio.to_thread(self._ranked, q, qvec, k, ms, keyword_only, stale, vectors, emb, explicit,
                                       deadline, degraded)

    def _prepare_search(self) -> tuple[bool, bool]:
        """Sync what a search needs first; returns whether there is anything to search and whether
        the answer will be stale. A new index gets its keyword phase now (seconds), its vectors
        in the background. An index in use gets the changes made on disk when they are few
        (:attr:`fresh_max_files`, :attr:`fresh_max_bytes`, within :attr:`fresh_budget` seconds);
        more, and the search answers from the index as it is (stale) while a background sync
        catches up."""
        if self.workspace is None:  # a replica: the index as the syncing host left it
            return self._search_store().has_content(), False
        if not self._store.has_content():
            if list_memory_files(self.workspace, self.config.extra_paths).files:
                self.sync(reason="search", vectors=False)  # first use: keywords before answering
            if not self._store.has_content():
                return bool(self.config.shared) and self._search_store().has_content(), False
            self._maybe_background_sync(vectors_only=True)
            return True, False
        stale = self._freshen()
        self._maybe_background_sync()
        return True, stale

    #: A search syncs changes first when they are at most this many files ...
    fresh_max_files = 20
    #: ... of at most this many bytes ...
    fresh_max_bytes = 2_000_000
    #: ... and it waits at most this long (seconds) for that sync and its vectors.
    fresh_budget = 2.0
    #: From its second search on, an index trusts kernel change notifications (Linux inotify, see
    #: :mod:`clawmem_core.journal`): with none since the index last matched the Markdown (and no
    #: other writer since), a search checks no file. Elsewhere, or when the journal cannot vouch
    #: for the files (closed, overflowed, out of watches), a search stats every file.
    change_journal = True

    def _trust_journal(self) -> bool:
        """Whether the index is known to match the Markdown without checking any file: the
        journal saw no change since it last did, nothing marked the index dirty, and no
        connection wrote to the index since (another process or instance may have written files'
        states older than the Markdown) but this index's own vector phase (which writes vectors,
        never a file's state). Call with the sync lock held."""
        journal = self._journal
        if journal is None:
            if self.change_journal and not self._journal_tried and self._fresh_checks >= 2 and self.workspace:
                self._journal_tried = True  # once: unavailable stays unavailable
                self._journal = ChangeJournal.start(self.workspace, self.config.extra_paths)
            return False
        if journal.changed() or self._dirty:
            return False
        at = self._fresh_at
        if at is None or at[0] is not self._store:
            return False
        if at[1] == self._store.data_version():
            return True
        # Written since: by nobody but the vector phase's handle, if that handle saw no other
        # connection commit since the walk.
        return at[2] is not None and at[2] is self._vector_store and self._vector_mark()[1] == at[3]

    def _vector_mark(self) -> tuple[Store | None, Any]:
        """The vector phase's handle and its token of other connections' commits (``(None,
        None)`` before the first vector phase). Read before the walk whose result it marks: a
        commit by anyone else after that moves it."""
        vstore = self._vector_store
        if vstore is None:
            return None, None
        try:
            return vstore, vstore.others_version()
        except (StoreError, *vstore.driver_errors):  # closed or replaced meanwhile: not trusted
            return None, None

    def _confirm_fresh(self, store: Store, version: Any, mark: tuple[Store | None, Any]) -> None:
        """The index (``store`` at ``version``) was found to match the Markdown by a walk started
        after the journal was last read, and after ``mark`` (:meth:`_vector_mark`) was taken."""
        self._fresh_at = (store, version, *mark)
        if self._journal is not None:
            self._journal.confirm()

    def _freshen(self) -> bool:
        """Sync the changes a search must see when they are small; True when the search will
        answer without some of them (stale)."""
        if not self.config.sync.on_search or self.config.sessions_enabled:
            return self._dirty  # syncs on search are off, or transcripts wait for their deltas
        deadline = time.monotonic() + self.fresh_budget
        if not self._sync_lock.acquire(timeout=self.fresh_budget):
            return True  # a long sync holds the index: answer from it as it is
        try:
            self._fresh_checks += 1
            if self._trust_journal():
                return False
            gen = self._dirty_gen
            mark = self._vector_mark()
            scan = self._unlocked_scan()
            if scan is not None and scan.clean:
                self._nothing_changed(scan, "search", gen, time.perf_counter())
                self._confirm_fresh(scan.store, scan.version, mark)
                return False
            changed = _changed_files(scan) if scan is not None else -1
            if changed == 0:
                # only files written just before the last scan, each with the size, mtime, ctime
                # and inode it was indexed with: nothing to write (a sync re-reads them later)
                self._confirm_fresh(scan.store, scan.version, mark)  # type: ignore[union-attr]
                return False
            small = (
                scan is not None
                and changed <= self.fresh_max_files
                and sum(key[0] for _, key in scan.todo) <= self.fresh_max_bytes
                and time.monotonic() < deadline
            )
            if not small:
                self.mark_dirty()
                return True
            try:
                with self._process_lock(blocking=False):
                    report = self._guarded_sync(False, None, "search", scan=scan)
            except StoreBusyError:
                self.mark_dirty()
                return True  # another process is syncing: it will bring these changes
            except (StoreError, *self._store.driver_errors) as exc:  # e.g. another writer holds the file
                log.warning("memory sync before a search failed; answering from the index: %s", exc)
                self.mark_dirty()
                return True
            # The changed files' vectors too, if they come within the budget (the others are
            # the background sync's).
            paths = [item.path for item, _ in scan.todo]
            if paths and report.files_indexed:
                try:
                    self._sync_vectors(report, deadline=deadline, paths=paths, store=self._writer_store())
                except EmbeddingError as exc:
                    log.warning("embedding the changed files failed: %s", exc)
            # (files skipped as unreadable are the state of the disk: a change to them is an event)
            self._confirm_fresh(self._store, self._store.data_version(), self._vector_mark())
            return False
        finally:
            self._sync_lock.release()

    def _rank(self, query: str, qvec: list[float] | None, k: int, min_score: float, *,
              keyword_only: bool | None = None, explicit: bool = False, deadline: float | None = None,
              partial: bool = False) -> SearchHits:
        emb = self._selection_now().embedder
        if keyword_only is None:
            keyword_only = emb is None
        background = None
        if emb is not None and qvec is not None and not keyword_only and self.config.query.hybrid.fusion == "calibrated":
            left = self.config.query.timeout_ms / 1000.0 if deadline is None else deadline - time.monotonic()
            background = self._background(emb, left)
        hits = rank(self._search_store(), self.config.query, query, qvec, k, min_score, keyword_only=keyword_only,
                    mtime_of=self._mtime_of, background=background, explicit_min_score=explicit,
                    reranker=self._get_reranker(), deadline=deadline, vectors_partial=partial)
        if not self.config.shared:
            return hits
        from .store.shared import split_shared

        info = dict(hits.info)
        if self._shared_unavailable:  # searched as empty: say which and why
            info["shared_unavailable"] = {ns: why[1] for ns, why in self._shared_unavailable.items()}
        return SearchHits((replace(h, namespace=split_shared(h.path)[0]) if h.path.startswith("@") else h for h in hits),
                          stale=hits.stale, vectors=hits.vectors, info=info)

    def _search_store(self) -> Store:
        """What search reads: the agent's index, plus its shared namespaces (read-only). A
        namespace whose index does not exist yet (or cannot be read) is searched as empty, with
        the reason in :attr:`_shared_unavailable`, and opened once it appears; one replaced by its
        owner (set aside and rebuilt) is reopened."""
        if not self.config.shared:
            return self._store
        from .store.shared import SharedView

        with self._state_lock:
            if self._shared is None:
                self._shared = {}
            for ns in self.config.shared:
                if ns == self.agent_id:
                    continue
                store = self._shared.get(ns)
                if store is not None and store.superseded():
                    self._retired.append(self._shared.pop(ns))  # a search in another thread may still use it
                    store = None
                if store is not None:
                    try:  # rewritten in place (damaged, restored)? then seen as it is now, by every search
                        store.follow()
                        continue
                    except StoreError:  # reopened below: the same reason as any index that cannot be read
                        self._retired.append(self._shared.pop(ns))
                try:
                    opened = self._backend.open_namespace(ns)
                    if opened.get_meta() is None:  # no such agent in the store, or it never synced
                        opened.close()
                        raise MissingIndexError(f"agent {ns!r} has no index in {self._backend.location} yet")
                    self._shared[ns] = opened
                    self._shared_unavailable.pop(ns, None)
                except ConfigError:
                    raise
                except StoreError as exc:  # the payload's reason names no machine path
                    public = ("not indexed yet: its agent has not indexed its workspace"
                              if isinstance(exc, MissingIndexError) else "its index cannot be read (see clawmem status)")
                    if ns not in self._shared_unavailable:
                        log.warning("shared namespace %r is searched as empty: %s", ns, exc)
                    self._shared_unavailable[ns] = (str(exc), public)
            return SharedView(self._store, dict(self._shared), on_error=self._shared_failed)

    def _shared_failed(self, ns: str, exc: StoreError) -> None:
        """A shared namespace failed during a search (damaged, vanished): left out of it, reported,
        and reopened by the next search (its own agent repairs it on its next sync)."""
        with self._state_lock:
            if self._shared is not None and ns in self._shared:
                self._retired.append(self._shared.pop(ns))  # a search in another thread may still use it
            if ns not in self._shared_unavailable:
                log.warning("shared namespace %r is left out of this search: %s", ns, exc)
            self._shared_unavailable[ns] = (str(exc), "its index cannot be read (see clawmem status)")

    def _check_workspace(self, what: str) -> None:
        if self.workspace is None:
            raise ReplicaError(
                f"{what} is not available here: this process serves agent {self.agent_id!r} from the memory index "
                f"without its workspace (a replica); writes and syncs run where the Markdown is"
            )

    @property
    def replica(self) -> bool:
        """Whether this process serves the index without the workspace (search and reads only)."""
        return self.workspace is None

    def _save_background(self, store: Store) -> None:
        """Cache calibration vectors embedded by an earlier search, in a sync (a search never
        writes to the index)."""
        if not self._background_unsaved:
            return
        with self._background_lock:
            pending, self._background_unsaved = self._background_unsaved, {}
        for emb, items in pending.values():
            try:
                store.cache_put(emb.provider, emb.model, emb.provider_key, items)
            except Exception as exc:  # kept in memory only
                log.debug("calibration vectors not cached: %s", exc)

    def _get_reranker(self) -> Any:
        """The reranker in effect (``None`` when reranking is off)."""
        rc = self.config.query.rerank
        if rc.enabled is False:
            return None
        if not self._reranker_built:
            self._reranker_built = True
            if rc.provider:
                from .rerank import create_reranker

                self._reranker = create_reranker(rc.provider, model=rc.model, model_path=rc.model_path,
                                                 api_key=self.config.remote.api_key if rc.provider == "voyage" else None,
                                                 base_url=rc.base_url)
        return self._reranker

    def _background(self, emb: Embedder, seconds: float) -> list[list[float]] | None:
        """The embedder's vectors of :data:`~clawmem_core.calibration.BACKGROUND_TEXTS` (the
        calibration of its cosine): from memory, from the embedding cache, or embedded once (one
        call, on the first hybrid search; written to the embedding cache by the next sync, so later
        processes and rebuilds reuse them). ``None`` when they cannot be had within ``seconds`` or at all: the
        vector side then scores the raw cosine."""
        from .calibration import BACKGROUND_TEXTS
        from .chunking import sha256

        key = f"{emb.provider}\0{emb.model}\0{emb.provider_key}"
        hashes = [sha256(t) for t in BACKGROUND_TEXTS]
        use_cache = self.config.cache.enabled
        store = self._store
        with self._background_lock:
            if key in self._background_vecs:
                return self._background_vecs[key]
            try:
                got = store.cache_get(emb.provider, emb.model, emb.provider_key, hashes) if use_cache else {}
            except Exception as exc:
                if store.is_corruption(exc):
                    raise  # the search recovers the index
                log.debug("cached calibration vectors unreadable: %s", exc)
                got = {}
            if all(h in got for h in hashes):
                vecs = [_unit(got[h]) for h in hashes]
                self._background_vecs[key] = vecs
                return vecs
            pending = self._background_pending.get(key)
            if pending is None:
                pending = self._background_pending[key] = threading.Event()

                def work() -> None:
                    try:
                        raw = emb.embed_documents(list(BACKGROUND_TEXTS))
                        with self._background_lock:
                            self._background_vecs[key] = [_unit(v) for v in raw]
                            if use_cache:  # written by the search that uses them, once it succeeded
                                self._background_unsaved[key] = (emb, dict(zip(hashes, raw)))
                    except Exception as exc:
                        log.warning("embedder calibration unavailable (%s): vector scores are raw cosines", exc)
                    finally:
                        with self._background_lock:
                            self._background_pending.pop(key, None)
                        pending.set()

                threading.Thread(target=work, name="clawmem-calibration", daemon=True).start()
        pending.wait(max(0.0, seconds))
        with self._background_lock:
            return self._background_vecs.get(key)

    def _stale_on_disk(self, found: Discovery) -> bool:
        """Whether the Markdown differs from the index (by path, size and mtime) or the index
        identity no longer matches the configuration; cheap, reads no file content."""
        store = self._store
        meta = store.get_meta()
        if meta is None:
            return True
        if self._selection is not None and any(meta.get(k) != v for k, v in self._identity(self._selection.embedder).items()):
            return True
        indexed = store.file_states("memory")
        files = [f for f in found.files if not path_too_long(f.path, store.max_path_bytes)]  # never indexed
        if len(indexed) != len(files):
            return True
        for f in files:
            try:
                st = os.stat(f.abs)
            except OSError:
                return True
            prev = indexed.get(f.path)
            if prev is None or prev[2:] != stat_key(st):
                return True
        return False

    def _mtime_of(self, path: str, source: str) -> float | None:
        if self.workspace is None or path.startswith("@"):
            from .search import is_evergreen
            from .store.shared import split_shared

            if path.startswith("@") and is_evergreen(split_shared(path)[1], source):
                return None
            state = self._search_store().file_states(source).get(path)
            return state[3] / 1000 if state else None
        from .sessions import SESSIONS_PREFIX

        if source == "sessions" and path.startswith(SESSIONS_PREFIX + "/"):
            target = self.sessions_dir / path[len(SESSIONS_PREFIX) + 1 :]
        else:
            target = self.workspace / path
        try:
            return os.stat(target).st_mtime
        except OSError:
            return None

    # -- writing and watching -----------------------------------------------------------------

    def write(self, text: str, target: str = "daily", *, now: datetime | None = None) -> "WriteResult":
        """Append a note to today's ``memory/YYYY-MM-DD.md`` (``target="daily"``) or to
        ``MEMORY.md`` (``"long_term"``); never overwrites. The index is updated before returning,
        so the note is searchable at once. A note over ``write.max_note_chars`` characters, or one
        that would take its file past ``sync.max_file_bytes``, is refused with
        :class:`~clawmem_core.writing.NoteTooLargeError` (nothing written).
        The note is stored as written (``memory_write`` keeps the model's own words: no secret
        masking, unlike :meth:`archive_session`)."""
        from .writing import append_note

        self._check_open()
        self._check_workspace("memory_write")
        result = append_note(self.workspace, text, target, now=now,  # type: ignore[arg-type]
                             max_note_chars=self.config.write.max_note_chars,
                             max_file_bytes=self.config.sync.max_file_bytes)
        return self._index_written(result)

    def _index_written(self, result: "WriteResult") -> "WriteResult":
        """Sync after an append. The append has happened: an indexing failure (provider down, disk
        full, ...) is reported in the result, never raised, so a caller does not write twice."""
        self.mark_dirty()
        try:
            self.sync(reason="write")
        except Exception as exc:  # noqa: BLE001 - the write succeeded; its indexing is what failed
            from .masking import mask_secrets

            error = mask_secrets(f"{type(exc).__name__}: {exc}" if not isinstance(exc, ClawmemError) else str(exc))
            log.warning("wrote %s but could not index it yet: %s", result.path, error)
            return replace(result, indexed=False, index_error=error)
        return result

    def archive_session(self, messages_text: str, slug: str | None = None, *, now: datetime | None = None) -> "WriteResult":
        """Save a conversation to ``memory/YYYY-MM-DD-<slug>.md`` (a new file, never replacing one)
        and index it; secrets in it are masked first (:func:`~clawmem_core.masking.mask_secrets`)."""
        from .writing import archive_session

        self._check_open()
        self._check_workspace("memory_write")
        result = archive_session(self.workspace, messages_text, slug, now)
        return self._index_written(result)

    def watch(self, block: bool = False, on_sync: Callable[[SyncReport], Any] | None = None) -> Any:
        """Watch ``MEMORY.md``, ``memory/``, the extra paths (and transcripts when sessions are on)
        and sync after each burst of changes (debounced by ``sync.watch_debounce_ms``). Also runs
        the interval sync when ``sync.interval_minutes`` is set. ``block=True`` runs until
        Ctrl-C; otherwise the watcher is returned (``stop()`` it, or close the index).
        ``on_sync`` receives the report of each sync that changed the index."""
        from .watcher import MemoryWatcher

        self._check_open()
        self._check_workspace("watch")

        def on_change(paths: set[Path]) -> None:
            sessions = [p for p in paths if p.suffix == ".jsonl"]
            for p in sessions:
                self._sessions.observe(p)
            if sessions and len(sessions) == len(paths) and not self._sessions.dirty_files:
                return  # transcripts grew, but not past the delta thresholds yet
            self.mark_dirty()
            try:
                report = self.sync(reason="watch")
            except Exception as exc:  # logged, the watcher keeps running
                log.warning("memory sync after a file change failed: %s", exc)
                return
            if on_sync is not None and (report.files_indexed or report.files_deleted or report.vectors_completed):
                try:
                    on_sync(report)
                except Exception as exc:
                    log.warning("watch callback failed: %s", exc)

        watcher = MemoryWatcher.for_workspace(
            self.workspace,
            on_change,
            self.config.extra_paths,
            debounce_ms=self.config.sync.watch_debounce_ms,
            sessions_dir=self.sessions_dir if self.config.sessions_enabled else None,
        )
        watcher.start()
        self._watchers.append(watcher)
        self._start_interval_sync()
        if not block:
            return watcher
        try:
            while watcher.running:
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
        finally:
            watcher.stop()
        return watcher

    def _start_interval_sync(self) -> None:
        minutes = self.config.sync.interval_minutes
        if not minutes or minutes <= 0 or self._interval_stop is not None:
            return
        stop = threading.Event()
        self._interval_stop = stop

        def loop() -> None:
            while not stop.wait(minutes * 60):
                try:
                    self.sync(reason="interval")
                except Exception as exc:
                    log.warning("interval memory sync failed: %s", exc)

        self._interval_thread = threading.Thread(target=loop, name="clawmem-interval", daemon=True)
        self._interval_thread.start()

    # -- read ---------------------------------------------------------------------------------

    def read(self, path: str, from_line: int | None = None, lines: int | None = None) -> ReadResult:
        """Read lines of a memory file (``memory_get``). A path outside memory raises
        :class:`~clawmem_core.errors.PathNotAllowedError`; a missing file gives empty text."""
        self._check_open()
        if self.workspace is None or (isinstance(path, str) and path.strip().startswith("@") and self.config.shared):
            with store_deadline(time.monotonic() + self.config.query.timeout_ms / 1000.0):  # (see search)
                return self._read_indexed(path, from_line, lines)
        return read_memory_file(self.workspace, self.config.extra_paths, path, from_line, lines,
                                max_chars=self.config.read.max_chars)

    def _read_indexed(self, path: Any, from_line: Any, lines: Any) -> ReadResult:
        """``read`` from the index's copy of a file: on a replica, or in a shared namespace."""
        from .read import check_indexed_path, read_indexed_copy
        from .store.shared import split_shared

        shown = check_indexed_path(path)
        ns, rel = split_shared(shown)
        if ns is not None and ns not in self.config.shared:
            raise PathNotAllowedError(f"path not allowed: {shown[:200]!r} (not a shared namespace of this agent)")
        view = self._search_store()
        got = view.file_text("memory", shown)
        if got is None and ns is not None and ns in getattr(view, "shared", {}):
            # A store that keeps no copies (SQLite: the Markdown is local): the namespace's own
            # workspace, for a file its index holds, under the same rules as any memory_get.
            return self._read_namespace_workspace(view.shared[ns], ns, rel, from_line, lines)  # type: ignore[attr-defined]
        return read_indexed_copy(shown, got[0] if got else None, from_line, lines, max_chars=self.config.read.max_chars)

    def _read_namespace_workspace(self, store: Store, ns: str, rel: str, from_line: Any, lines: Any) -> ReadResult:
        from .store.shared import shared_prefix

        shown = shared_prefix(ns) + rel
        meta = store.get_meta() or {}
        workspace = meta.get("workspace")
        if rel not in store.file_states("memory") or not isinstance(workspace, str) or not workspace:
            return ReadResult(shown, "", 1, 0, 0, missing=True)  # not in the namespace's index: nothing to read
        if not os.path.isabs(workspace) or not os.path.isdir(workspace):
            raise WorkspaceError(f"the workspace of shared namespace {ns!r} is not on this machine; its notes are "
                                 "searchable but cannot be read here")
        got = read_memory_file(Path(workspace), [], rel, from_line, lines, max_chars=self.config.read.max_chars)
        return replace(got, path=shared_prefix(ns) + got.path)

    async def aread(self, path: str, from_line: int | None = None, lines: int | None = None) -> ReadResult:
        import asyncio

        return await asyncio.to_thread(self.read, path, from_line, lines)

    # -- status -------------------------------------------------------------------------------

    def status(self) -> IndexStatus:
        """Files, chunks, provider, model, mode, vector and FTS state, cache, dirty, issues.
        Does not create the embedder when it has not been needed yet. A damaged index is set
        aside and rebuilt from the Markdown first."""
        self._check_open()
        store = self._store
        try:
            return self._status()
        except Exception as exc:
            if not store.is_corruption(exc) or isinstance(exc, CorruptIndexError):
                raise
            self._rebuild_damaged(exc, store)
            return self._status()

    def _status(self) -> IndexStatus:
        store = self._store
        counts = store.counts()
        meta = store.get_meta() or {}
        sel = self._selection
        if sel is not None:
            emb = sel.embedder
            provider, model = (emb.provider, emb.model) if emb else ("none", "fts-only")
        else:
            provider = meta.get("provider", self.config.provider)
            model = meta.get("model", self.config.effective_model)
        requested = sel.requested if sel else ("custom" if self._user_embedder is not None else self.config.provider)
        mode = "fts-only" if provider == "none" else ("vector" if not self.config.query.hybrid.enabled or not store.fts_available else "hybrid")
        vectors = None
        if provider != "none":
            vc = store.vector_counts()
            vectors = {"done": vc.done, "total": vc.total}
        issues = []
        replica = None
        if self.workspace is None:
            found = Discovery([], [])
            issues.append("replica: no workspace here; serving the index as the syncing process left it")
            replica = {"agent": self.agent_id, "workspace": printable_name(str(meta.get("workspace") or "")) or None,
                       "last_sync": _utc_iso(store.get_value("last_scan"))}
        else:
            found = list_memory_files(self.workspace, self.config.extra_paths)
            if not (self.workspace / "memory").is_dir():
                issues.append(f"memory directory missing ({self.workspace / 'memory'})")
            if not found.files:
                issues.append(f"no memory files found in {self.workspace}")
            issues += [f"additional memory path missing ({p})" for p in found.missing_extra_paths]
            issues += [f"not indexed: {p} (file name is not valid UTF-8; rename it)" for p in found.bad_names]
            issues += [f"not indexed: {f.path} ({why})" for f in found.files
                       if (why := path_too_long(f.path, store.max_path_bytes))]
        if self.config.shared:
            self._search_store()
            issues += [f"shared namespace {ns!r} searched as empty: {why[0]}" for ns, why in self._shared_unavailable.items()]
        return IndexStatus(
            agent_id=self.agent_id,
            workspace=printable_name(str(self.workspace)) if self.workspace is not None else "",
            store_path=printable_name(self._backend.location),
            files=counts.files,
            chunks=counts.chunks,
            by_source={s: {"files": f, "chunks": c} for s, (f, c) in counts.by_source.items()},
            provider=provider,
            requested_provider=requested,
            model=model,
            mode=mode,
            dirty=self.workspace is not None and self._dirty and self._stale_on_disk(found),
            sources=list(self.config.sources),
            extra_paths=[printable_name(p) for p in self.config.extra_paths],
            vector={
                "enabled": self.config.store.vector.enabled,
                "available": store.vector_extension,
                "dims": store.vector_dims,
                "path": store.vector_path,
                "error": store.vector_error,
                "backend": store.vector_backend,
            },
            fts={"available": store.fts_available, "error": store.fts_error, "tokenizer": self.config.store.fts.tokenizer},
            cache={"enabled": self.config.cache.enabled, "entries": counts.cache_entries, "max_entries": self.config.cache.max_entries},
            fallback={"from": sel.fallback_from, "reason": sel.reason} if sel and sel.fallback_from else None,
            issues=[printable_name(i) for i in issues],  # a path with undecodable bytes stays printable
            files_on_disk=None if replica else len(found.files),
            vectors=vectors,
            replica=replica,
        )

    # -- lifecycle ----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("this MemoryIndex is closed")

    def close(self) -> None:
        """Stop a background vector phase after its current group (what is done stays done, the
        rest waits for the next sync), wait for it, then close the index and the embedder."""
        if self._closed:
            return
        self._closing = True
        for w in self._watchers:
            w.stop()
        if self._journal is not None:
            self._journal.close()
        if self._interval_stop is not None:
            self._interval_stop.set()
        for t in (self._bg_thread, self._interval_thread):
            if t is not None and t.is_alive() and t is not threading.current_thread():
                t.join()
        self._closed = True
        self._store.close()
        for store in (self._shared or {}).values():
            store.close()
        for store in self._retired:
            store.close()
        if self._writer is not None:
            self._writer.close()
        with self._vector_lock:  # a vector phase run by a watcher or a caller's thread ends first
            if self._vector_store is not None:
                self._vector_store.close()
        if self._selection is not None and self._selection.embedder is not None:
            try:
                self._selection.embedder.close()
            except Exception as exc:
                log.warning("closing the embedder failed: %s", exc)

    def __enter__(self) -> "MemoryIndex":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MemoryIndex(workspace={str(self.workspace)!r}, agent_id={self.agent_id!r})"
