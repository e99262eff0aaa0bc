"""``MemoryIndex``: the facade of a workspace of Markdown memory and its index. It checks its
arguments, wires the parts that do the work (:mod:`clawmem_core.index_parts`, one concern each) and
owns their lifecycle. The algorithms live further down: discovery, :mod:`clawmem_core.sync`,
:mod:`clawmem_core.search`, storage behind :class:`~clawmem_core.store.base.Store`.

Where to look:

- opening the index, its location, a damaged one set aside: :mod:`~clawmem_core.index_parts.stores`
- the embedder and its fallback: :mod:`~clawmem_core.index_parts.embedder`
- a sync's two phases and locks, the dirty state: :mod:`~clawmem_core.index_parts.syncing`
- background, interval and watched syncs: :mod:`~clawmem_core.index_parts.background`
- what a search syncs first (change journal, small syncs): :mod:`~clawmem_core.index_parts.freshness`
- a search (deadline, degrade, rerank, namespaces): :mod:`~clawmem_core.index_parts.searching`
- reads, writes, status: :mod:`~clawmem_core.index_parts.reads`, ``.writes``, ``.status``
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from .config import MemoryConfig
from .embeddings.base import Embedder
from .errors import ConfigError, ReplicaError, StoreError, WorkspaceError
from .index_parts.background import BackgroundWork
from .index_parts.calibration_vectors import CalibrationVectors
from .index_parts.embedder import EmbedderChoice
from .index_parts.freshness import Freshness, FreshnessLimits
from .index_parts.identity import INDEX_FORMAT, index_identity  # noqa: F401  (INDEX_FORMAT: defined here before)
from .index_parts.namespaces import SharedNamespaces
from .index_parts.reads import Reader
from .index_parts.recall import RecallRecorder
from .index_parts.searching import Reranker, SearchRunner
from .index_parts.status import StatusReport
from .index_parts.stores import StoreHandles, store_url
from .index_parts.syncing import Changes, SyncRunner
from .index_parts.writes import Writer
from .progress import ProgressCallback, as_listener
from .results import IndexStatus, ReadResult, SearchHits, SearchResult, SyncReport
from .search import (  # noqa: F401  (the limits are re-exported: they were defined here)
    MAX_QUERY_EMBED_CHARS,
    MAX_QUERY_TERM_CHARS,
    MAX_QUERY_TERMS,
    LATE_CALLS,
    MAX_RESULTS,
)
from .store.base import CorruptIndexError, Store, check_agent_id
from .sync import Syncer

if TYPE_CHECKING:
    from .writing import WriteResult

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
        if ws is None and not store_url(config):
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
        self._reranker = Reranker(config, reranker)
        self._calibration = CalibrationVectors(config.cache.enabled)
        self.state_dir = Path(os.path.expanduser(os.fspath(state_dir))) if state_dir else default_state_dir()
        #: Session transcripts (``*.jsonl``) indexed when ``sources`` includes "sessions".
        self.sessions_dir = (
            Path(os.path.expanduser(os.fspath(sessions_dir)))
            if sessions_dir
            else self.state_dir / "agents" / (agent_id or DEFAULT_AGENT_ID) / "sessions"  # OpenClaw's layout
        )
        from .sessions import SessionDeltaTracker

        self._sessions = SessionDeltaTracker(config.sync.sessions.delta_bytes, config.sync.sessions.delta_messages)
        # The parts, each built from the ones it needs (a new concern lands as one more part here).
        #: Guards the embedder's creation, the background sync thread's start and the namespaces.
        lock = threading.RLock()
        self._embedding = EmbedderChoice(config, embedder, lock)
        self._stores = StoreHandles(config, self.agent_id, ws, self.state_dir)
        #: The SQLite index file (``None`` when the index is in PostgreSQL).
        self.store_path: Path | None = self._stores.store_path
        try:
            last_scan = float(self._store.get_value("last_scan") or 0.0)
        except ValueError:
            last_scan = 0.0
        self._syncer = Syncer(ws or Path(), config, self.sessions_dir, self._sessions, last_scan)
        self._changes = Changes()
        self._syncing = SyncRunner(config, self._stores, self._embedding, self._syncer, self._identity,
                                   self._changes, after_sync=self._calibration.save,
                                   after_sync_due=self._calibration.unsaved)
        self._namespaces = SharedNamespaces(config, self.agent_id, self._stores, lock)
        self._background = BackgroundWork(config, ws, self.sessions_dir, self._sessions, self._stores, self._syncing,
                                          self._changes, sync=self._resync, lock=lock)
        self._freshness = Freshness(config, ws, self, self._stores, self._syncing, self._changes, self._namespaces,
                                    sync=self._resync, background=self._background.maybe_sync)
        self._searching = SearchRunner(config, ws, self.sessions_dir, self._stores, self._embedding, self._freshness,
                                       self._syncing, self._namespaces, self._calibration, self._reranker)
        self._reader = Reader(config, ws, self._namespaces)
        self._writes = Writer(config, ws, self.mark_dirty, sync=self._resync)  # type: ignore[arg-type]
        self._status_report = StatusReport(config, ws, self.agent_id, self._stores, self._embedding,
                                           self._namespaces, self._changes, self._identity)
        self._recall = RecallRecorder(config, self.agent_id, self._stores)
        self._closed = False

    def _resync(self, **kwargs: Any) -> SyncReport:
        """:meth:`sync`, as the parts run it (a subclass's own ``sync`` included)."""
        return self.sync(**kwargs)

    @property
    def _store(self) -> Store:
        """The handle searches and reads use."""
        return self._stores.store

    # -- embedder and identity ----------------------------------------------------------------

    @property
    def embedder(self) -> Embedder | None:
        """The embedder in use (created on first access), or ``None`` in keyword-only mode."""
        return self._embedding.now().embedder

    def provider_info(self) -> dict[str, Any]:
        """``provider``, ``model``, ``fallback`` and ``mode`` as the tool payload reports them."""
        return self._embedding.provider_info(self._store)

    def _identity(self, emb: Embedder | None) -> dict[str, Any]:
        return index_identity(self.workspace, self.config, emb)

    def needs_full_reindex(self) -> bool:
        """True when the index identity (provider, model, settings, sources, extra paths,
        chunking, tokenizer, keyword-index format) differs from the configuration, or there is no
        index yet."""
        meta = self._store.get_meta()
        if meta is None:
            return True
        want = self._identity(self._embedding.now().embedder)
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
        return self._syncing.sync(force, as_listener(progress), reason, vectors=vectors,
                                  vector_seconds=vector_seconds, wait_for_others=wait_for_others)

    async def async_sync(self, force: bool = False, progress: ProgressCallback | None = None, *,
                         vectors: bool = True) -> SyncReport:
        """Async twin of :meth:`sync` (runs in a worker thread)."""
        import asyncio

        return await asyncio.to_thread(lambda: self.sync(force, progress, vectors=vectors))

    def notify_session_update(self, path: str | os.PathLike[str]) -> bool:
        """Tell the index a transcript grew; returns True when it crossed the delta thresholds
        (the index is then marked dirty and a background sync starts)."""
        if not self.config.sessions_enabled:
            return False
        if self._sessions.observe(path):
            self.mark_dirty()
            self._background.maybe_sync()
            return True
        return False

    def sync_sessions(self, paths: Sequence[str | os.PathLike[str]]) -> SyncReport:
        """Re-index the named transcripts now, whatever their growth (after a compaction)."""
        self._check_open()
        self._check_workspace("sync")
        return self._syncing.sessions(paths)

    def mark_dirty(self) -> None:
        """Tell the index the Markdown changed (the watcher calls this)."""
        self._changes.mark_dirty()

    @property
    def dirty(self) -> bool:
        return self._changes.dirty

    # -- search -------------------------------------------------------------------------------

    #: A search syncs changes first when they are at most this many files ...
    fresh_max_files = FreshnessLimits.fresh_max_files
    #: ... of at most this many bytes ...
    fresh_max_bytes = FreshnessLimits.fresh_max_bytes
    #: ... and it waits at most this long (seconds) for that sync and its vectors.
    fresh_budget = FreshnessLimits.fresh_budget
    #: From its second search or sync on, an index trusts kernel change notifications (Linux
    #: inotify, see :mod:`clawmem_core.journal`): with none since the index last matched the
    #: Markdown (and no other writer since), a search checks no file, and a sync checks only the
    #: files they name. Elsewhere, or when the journal cannot vouch for the files (closed,
    #: overflowed, out of watches, a directory created, removed or renamed, ``mark_dirty()``
    #: called), every file is checked.
    change_journal = FreshnessLimits.change_journal

    def search(self, query: str, max_results: int | None = None, min_score: float | None = None, *,
               session_key: str | None = None, record: bool = True) -> SearchHits:
        """Hybrid search (SPEC 6). Empty query or empty index -> ``[]`` without creating the
        embedder. Raises :class:`EmbeddingError` when the query cannot be embedded. A query
        embedding that takes longer than ``query.timeout_ms`` is abandoned: the results come from
        the keyword side and ``results.info["degraded"]`` says ``"embedding timeout"``. An explicit
        ``min_score`` is a floor.

        The hits returned are recorded in the agent's recall log (``dreaming.record``, on by
        default), with ``session_key`` when given; a search that does not answer the model (a
        duplicate check, a benchmark) passes ``record=False``. Recording never fails a search."""
        self._check_open()
        return self._answered(query, self._searching.search(query, max_results, min_score), session_key, record)

    async def asearch(self, query: str, max_results: int | None = None, min_score: float | None = None, *,
                      session_key: str | None = None, record: bool = True) -> SearchHits:
        """Async twin of :meth:`search`: the query embedding is awaited (``aembed_query``) within
        ``query.timeout_ms``."""
        self._check_open()
        hits = await self._searching.asearch(query, max_results, min_score)
        return self._answered(query, hits, session_key, record)

    def record_recall(self, query: str, hits: Sequence[SearchResult], session_key: str | None = None, *,
                      when: float | None = None) -> None:
        """Record ``hits`` in the recall log as recalled by ``query``: for a surface that searches with
        ``record=False`` and returns only part of what it found (the LangGraph store returns items), or for a
        replay with its own clock (``when``: a Unix time; default now)."""
        self._check_open()
        if hits:
            self._recall.record(query, list(hits), session_key, when=when)

    def _answered(self, query: str, hits: SearchHits, session_key: str | None = None,
                  record: bool = True) -> SearchHits:
        """Every search's answer passes here (``search`` and ``asearch``), as returned: the place
        for a part that observes what was recalled (the recall log)."""
        if record and hits:
            self._recall.record(query, hits, session_key)
        return hits

    # -- read and write -----------------------------------------------------------------------

    def read(self, path: str, from_line: int | None = None, lines: int | None = None) -> ReadResult:
        """Read lines of a memory file (``memory_get``). A path outside memory raises
        :class:`~clawmem_core.errors.PathNotAllowedError`; a missing file gives empty text."""
        self._check_open()
        return self._reader.read(path, from_line, lines)

    async def aread(self, path: str, from_line: int | None = None, lines: int | None = None) -> ReadResult:
        import asyncio

        return await asyncio.to_thread(self.read, path, from_line, lines)

    def write(self, text: str, target: str = "daily", *, now: datetime | None = None) -> "WriteResult":
        """Append a note to today's ``memory/YYYY-MM-DD.md`` (``target="daily"``) or to
        ``MEMORY.md`` (``"long_term"``); never overwrites. The index is updated before returning,
        so the note is searchable at once. A note over ``write.max_note_chars`` characters, or one
        that would take its file past ``sync.max_file_bytes``, is refused with
        :class:`~clawmem_core.writing.NoteTooLargeError` (nothing written).
        The note is stored as written (``memory_write`` keeps the model's own words: no secret
        masking, unlike :meth:`archive_session`)."""
        self._check_open()
        self._check_workspace("memory_write")
        return self._writes.write(text, target, now=now)

    def archive_session(self, messages_text: str, slug: str | None = None, *, now: datetime | None = None) -> "WriteResult":
        """Save a conversation to ``memory/YYYY-MM-DD-<slug>.md`` (a new file, never replacing one)
        and index it; secrets in it are masked first (:func:`~clawmem_core.masking.mask_secrets`)."""
        self._check_open()
        self._check_workspace("memory_write")
        return self._writes.archive_session(messages_text, slug, now=now)

    # -- watching -----------------------------------------------------------------------------

    def watch(self, block: bool = False, on_sync: Callable[[SyncReport], Any] | None = None) -> Any:
        """Watch ``MEMORY.md``, ``memory/``, the extra paths (and transcripts when sessions are on)
        and sync after each burst of changes (debounced by ``sync.watch_debounce_ms``). Also runs
        the interval sync when ``sync.interval_minutes`` is set. ``block=True`` runs until
        Ctrl-C; otherwise the watcher is returned (``stop()`` it, or close the index).
        ``on_sync`` receives the report of each sync that changed the index."""
        self._check_open()
        self._check_workspace("watch")
        return self._background.watch(block, on_sync)

    # -- status -------------------------------------------------------------------------------

    def status(self) -> IndexStatus:
        """Files, chunks, provider, model, mode, vector and FTS state, cache, dirty, issues.
        Does not create the embedder when it has not been needed yet. A damaged index is set
        aside and rebuilt from the Markdown first."""
        self._check_open()
        store = self._store
        try:
            return self._status_report.build()
        except Exception as exc:
            if not store.is_corruption(exc) or isinstance(exc, CorruptIndexError):
                raise
            self._syncing.rebuild_damaged(exc, store)
            return self._status_report.build()

    @property
    def replica(self) -> bool:
        """Whether this process serves the index without the workspace (search and reads only)."""
        return self.workspace is None

    # -- lifecycle ----------------------------------------------------------------------------

    def _check_workspace(self, what: str) -> None:
        if self.workspace is None:
            raise ReplicaError(
                f"{what} is not available here: this process serves agent {self.agent_id!r} from the memory index "
                f"without its workspace (a replica); writes and syncs run where the Markdown is"
            )

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("this MemoryIndex is closed")

    def close(self) -> None:
        """Stop a background vector phase after its current group (what is done stays done, the
        rest waits for the next sync), wait for it, then close the index and the embedder."""
        if self._closed:
            return
        self._stores.closing = True
        self._background.stop_watchers()
        self._freshness.close()
        self._background.stop()
        self._recall.close()
        self._closed = True
        self._stores.close(others=self._namespaces.open_handles())
        self._embedding.close()

    # -- for a registry of indexes (clawmem_core.registry) -------------------------------------------

    def _share_calibration(self, calibration: CalibrationVectors) -> None:
        """Use ``calibration`` (the vectors of the same embedder, shared by a registry's indexes)
        in place of this index's own copy: read or embedded once per process, not once per index."""
        self._calibration = calibration
        self._searching.calibration = calibration
        self._syncing.after_sync = calibration.save  # a sync caches what a search embedded

    def _forget_cached(self) -> None:
        """Drop what this agent's searches loaded that the process keeps beyond the index (on
        PostgreSQL its keyword statistics and postings): called when a registry closes the agent."""
        self._stores.backend.forget_cached()

    def __enter__(self) -> "MemoryIndex":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MemoryIndex(workspace={str(self.workspace)!r}, agent_id={self.agent_id!r})"
