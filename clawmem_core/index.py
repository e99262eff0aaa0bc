"""``MemoryIndex``: the engine that wires discovery, chunking, embeddings, the store and search."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import threading
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, NamedTuple, Sequence

from .chunking import Chunk, chunk_id, chunk_markdown, embedding_windows, remap_lines
from .config import MemoryConfig
from .discovery import Discovery, list_memory_files, memory_paths, normalize_extra_paths
from .embeddings.base import Embedder
from .embeddings.batching import batches_by_bytes
from .errors import ClawmemError, ConfigError, EmbeddingError, InvalidQueryError, StoreError, WorkspaceError
from .read import read_memory_file
from .results import IndexStatus, ReadResult, SearchResult, SyncReport
from .search import (
    CANDIDATE_POOL,
    Candidate,
    apply_temporal_decay,
    dedupe_line_ranges,
    keyword_scores,
    MMR_WINDOW,
    merge_hybrid,
    mmr_rerank,
    select_results,
    truncate_snippet,
)
from .store.base import ChunkRow, FileRow
from .store.sqlite import CorruptIndexError, SQLiteStore, quarantine_index, remove_stale_temp_files
from .text import FTS_FORMAT, search_terms

if TYPE_CHECKING:
    from .writing import WriteResult

log = logging.getLogger("clawmem")

#: progress(done, total, label)
ProgressCallback = Callable[[int, int, str], None]

MAX_QUERY_TERMS = 64
#: Larger ``max_results`` are clamped (a memory tool never needs more; sqlite-vec caps k at 4096).
MAX_RESULTS = 1000
#: Only the start of a very long query is split into keyword terms.
MAX_QUERY_TERM_CHARS = 4000
MAX_QUERY_EMBED_CHARS = 8000
#: Chunks embedded and written per group during a sync (bounds memory; each group is durable).
_GROUP_CHUNKS = 512
#: A file modified this close to the last scan is re-hashed even if size and mtime match.
_RACY_SECONDS = 2.0
#: Version of what a sync derives from a file (chunk boundaries and line ranges, embedding windows;
#: the keyword terms have their own ``text.FTS_FORMAT``). Bump it when these change: an index written
#: under another version is rebuilt in full on the next sync (from the embedding cache, so nothing is
#: embedded twice), since unchanged files would otherwise keep their old rows.
INDEX_FORMAT = 3


def default_state_dir() -> Path:
    """``$CLAWMEM_STATE_DIR`` or ``~/.clawmem``."""
    env = os.environ.get("CLAWMEM_STATE_DIR")
    return Path(os.path.expanduser(env)) if env else Path.home() / ".clawmem"


class _Item(NamedTuple):
    """A file to index: display path, absolute path, source; ``deferred`` transcripts wait for
    their delta thresholds."""

    path: str
    abs_path: str
    source: str
    deferred: bool = False


#: An :class:`_Item` as a plain tuple (tens of thousands are made per sync).
_Entry = tuple[str, str, str, bool]


@dataclass
class _Scan:
    """A freshness scan: the files to read (with their size and mtime in ms, taken before reading),
    how many are unchanged by size and mtime, indexed files gone from disk, what the index held,
    and the index's ``data_version`` when it was read (stale once another connection wrote)."""

    todo: list[tuple[_Item, int, int]]
    scanned: int
    unchanged: int
    gone: dict[str, list[str]]
    #: source -> path -> the file's (path, hash, size, mtime) row in the index
    known: dict[str, dict[str, tuple[str, str, int, int]]]
    store: SQLiteStore
    version: int
    #: ``time.time()`` before the first stat: what ``last_scan`` may become after this scan.
    started: float

    @property
    def clean(self) -> bool:
        return not self.todo and not any(self.gone.values())


@dataclass
class _Selection:
    embedder: Embedder | None
    requested: str
    fallback_from: str | None = None
    reason: str | None = None


def _wrap(obj: Any) -> Embedder:
    if isinstance(obj, Embedder):
        return obj
    from .embeddings.framework import wrap_embedder

    return wrap_embedder(obj)


class MemoryIndex:
    """A workspace of Markdown memory and its SQLite index.

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
        workspace: str | os.PathLike[str],
        agent_id: str = "main",
        config: MemoryConfig | Mapping[str, Any] | None = None,
        embedder: Any = None,
        state_dir: str | os.PathLike[str] | None = None,
        *,
        sessions_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        ws = Path(os.path.abspath(os.path.expanduser(os.fspath(workspace))))
        if not ws.exists():
            raise WorkspaceError(f"workspace not found: {ws}")
        if not ws.is_dir():
            raise WorkspaceError(f"workspace is not a directory: {ws}")
        if not isinstance(agent_id, str) or not agent_id or any(c in agent_id for c in "/\\\x00") or agent_id in (".", ".."):
            raise ConfigError(f"agent_id must be a plain name, got {agent_id!r}")
        if config is None:
            config = MemoryConfig()
        elif isinstance(config, Mapping):
            config = MemoryConfig.from_dict(config)
        elif not isinstance(config, MemoryConfig):
            raise ConfigError(f"config must be a MemoryConfig or a dict, got {type(config).__name__}")
        self.workspace = ws
        self.agent_id = agent_id
        self.config = config
        self.state_dir = Path(os.path.expanduser(os.fspath(state_dir))) if state_dir else default_state_dir()
        self.store_path = self._resolve_store_path()
        #: Session transcripts (``*.jsonl``) indexed when ``sources`` includes "sessions".
        self.sessions_dir = (
            Path(os.path.expanduser(os.fspath(sessions_dir)))
            if sessions_dir
            else self.state_dir / "agents" / agent_id / "sessions"
        )
        from .sessions import SessionDeltaTracker

        sessions_cfg = config.sync.sessions
        self._sessions = SessionDeltaTracker(sessions_cfg.delta_bytes, sessions_cfg.delta_messages)
        self._user_embedder = embedder
        self._selection: _Selection | None = None
        self._fallback_used = False
        self._store = self._open_store()
        self._writer: SQLiteStore | None = None
        self._retired: list[SQLiteStore] = []
        self._sync_lock = threading.Lock()
        self._bg_thread: threading.Thread | None = None
        self._dirty = True
        self._dirty_gen = 0  # bumped by every change notice; a sync clears only what it saw
        self._session_warmed = False
        self._synced_here = False
        try:
            self._last_scan: float = float(self._store.get_value("last_scan") or 0.0)
        except ValueError:
            self._last_scan = 0.0
        self._closed = False
        self._watchers: list[Any] = []
        self._interval_stop: threading.Event | None = None

    # -- setup --------------------------------------------------------------------------------

    def _resolve_store_path(self) -> Path:
        if self.config.store.path:
            raw = self.config.store.path.replace("{agent_id}", self.agent_id).replace("{agentId}", self.agent_id)
            p = Path(os.path.expandvars(os.path.expanduser(raw)))
            return p if p.is_absolute() else self.workspace / p
        return self.state_dir / "memory" / f"{self.agent_id}.sqlite"

    def _new_store(self) -> SQLiteStore:
        return SQLiteStore(
            self.store_path,
            vector_enabled=self.config.store.vector.enabled,
            extension_path=self.config.store.vector.extension_path,
            fts_tokenizer=self.config.store.fts.tokenizer,
        )

    def _open_store(self) -> SQLiteStore:
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
        kept = quarantine_index(self.store_path)
        log.warning("%s; moved it to %s and rebuilding the index from the Markdown", exc, kept.name)

    def _recover(self, exc: Exception) -> None:
        """The live index turned out damaged while in use: set it aside and reopen an empty one
        (call with both sync locks held)."""
        if self._writer is not None:
            self._writer.close()
        self._writer = None
        # the reader may be in use by a search in another thread: retired, closed with the index
        self._retired.append(self._store)
        if not isinstance(exc, CorruptIndexError):
            exc = CorruptIndexError(f"index {self.store_path} is corrupt: {exc}")
        try:
            self._set_aside(exc)
        except OSError as err:
            raise StoreError(f"{exc}; cannot move it aside: {err.strerror or err}") from None
        self._store = self._new_store()

    def _selection_now(self) -> _Selection:
        """Create the embedder on first need (never for an empty index or an empty query)."""
        if self._selection is not None:
            return self._selection
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

    def sync(self, force: bool = False, progress: ProgressCallback | None = None, *, reason: str = "manual") -> SyncReport:
        """Bring the index up to date with the Markdown: unchanged files are skipped, changed files
        re-chunked and re-embedded (the cache means text seen before is never embedded twice),
        deleted files removed. A full reindex (forced, or when the identity changed) is built
        beside the live index and swapped in atomically. Returns what was done."""
        self._check_open()
        with self._sync_lock:
            started, gen = time.perf_counter(), self._dirty_gen
            scan = None if force else self._unlocked_scan()
            if scan is not None and scan.clean:
                return self._nothing_changed(scan, reason, gen, started)
            lock = self._process_lock()
            with lock:
                return self._guarded_sync(force, progress, reason, scan=scan)

    def _guarded_sync(self, force: bool, progress: ProgressCallback | None, reason: str,
                      session_files: Sequence[str | os.PathLike[str]] = (), *, scan: _Scan | None = None) -> SyncReport:
        """``_sync_locked`` with storage failures turned into :class:`StoreError` and a damaged
        index set aside and rebuilt (both locks held)."""
        import apsw

        try:
            return self._sync_locked(force, progress, reason, session_files, scan=scan)
        except (apsw.CorruptError, apsw.NotADBError, CorruptIndexError) as exc:
            self._recover(exc)
            return self._sync_locked(True, progress, "recovery", session_files)
        except apsw.FullError:
            raise StoreError(f"disk full: cannot write the index {self.store_path}; the previous index is unchanged") from None
        except (apsw.ReadOnlyError, apsw.CantOpenError, apsw.PermissionsError, apsw.IOError) as exc:
            raise StoreError(f"cannot write the index {self.store_path}: {exc}") from None

    async def async_sync(self, force: bool = False, progress: ProgressCallback | None = None) -> SyncReport:
        """Async twin of :meth:`sync` (runs in a worker thread)."""
        import asyncio

        return await asyncio.to_thread(self.sync, force, progress)

    def _process_lock(self) -> Any:
        from filelock import FileLock

        return FileLock(str(self.store_path) + ".lock", timeout=600)

    def _writer_store(self) -> SQLiteStore:
        if self._writer is None:
            self._writer = self._new_store()
        return self._writer

    def _sync_locked(
        self,
        force: bool,
        progress: ProgressCallback | None,
        reason: str,
        session_files: Sequence[str | os.PathLike[str]] = (),
        *,
        scan: _Scan | None = None,
    ) -> SyncReport:
        started = time.perf_counter()
        gen = self._dirty_gen
        writer = self._writer_store()
        remove_stale_temp_files(self.store_path)
        sel = self._selection_now()
        identity = self._identity(sel.embedder)
        meta = writer.get_meta()
        full = force or meta is None or any(meta.get(k) != v for k, v in identity.items())
        report = SyncReport(full=full, reason=reason)
        items = self._memory_items()
        if self.config.sessions_enabled:
            items += self._session_items(full, reason, session_files, writer)
        report.files_scanned = len(items)
        # A scan taken before the locks still holds if no other connection has written since.
        reuse = (
            scan is not None and not full and not self.config.sessions_enabled
            and scan.store is self._store and scan.version == self._data_version(self._store)
        )
        try:
            if full:
                with writer.rebuild() as tmp:
                    scan = self._scan(tmp, items, full=True)
                    self._index_items(tmp, [writer], scan, len(items), report, progress)
                    if self.config.cache.max_entries:
                        tmp.cache_prune(self.config.cache.max_entries)
                    tmp.set_meta(identity)
            else:
                if scan is None or not reuse:
                    scan = self._scan(writer, items, full=False)
                self._index_items(writer, [], scan, len(items), report, progress)
        except EmbeddingError as exc:
            if self._activate_fallback(exc):
                return self._sync_locked(True, progress, "fallback")
            raise
        for _, abs_path, source, deferred in items:
            if source == "sessions" and not deferred:
                self._sessions.mark_indexed(abs_path)
        if self._dirty_gen == gen:  # a change noticed during this sync keeps the index dirty
            self._dirty = False
        self._last_scan = scan.started
        self._synced_here = True
        # Persisted, so that the next process can trust size + mtime of files older than this scan.
        writer.set_value("last_scan", repr(scan.started))
        report.seconds = time.perf_counter() - started
        return report

    def _session_items(
        self, full: bool, reason: str, targets: Sequence[str | os.PathLike[str]], store: SQLiteStore
    ) -> list[_Entry]:
        """Session transcripts to consider. Automatic syncs re-index a grown transcript only once it
        crossed the delta thresholds (or when named, after compaction); manual syncs take all."""
        from .sessions import list_session_files, session_display_path

        named = {os.path.abspath(os.fspath(t)) for t in targets}
        automatic = reason in ("search", "watch", "interval", "session-start")
        indexed = store.file_hashes("sessions")
        dirty = {str(p) for p in self._sessions.dirty_files}
        out: list[_Entry] = []
        for p in list_session_files(self.sessions_dir):
            shown = session_display_path(p)
            deferred = (
                automatic and not full and shown in indexed and str(p) not in dirty and os.path.abspath(p) not in named
            )
            out.append(_Item(shown, str(p), "sessions", deferred))
        return out

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

    def _memory_items(self) -> list[_Entry]:
        pairs, _ = memory_paths(self.workspace, self.config.extra_paths)
        return [(path, abs_path, "memory", False) for path, abs_path in pairs]

    @staticmethod
    def _data_version(store: SQLiteStore) -> int:
        """Changes whenever another connection commits to the index."""
        value: Any = store.conn.execute("PRAGMA data_version").fetchall()[0][0]
        return int(value)

    def _scan(self, store: SQLiteStore, items: list[_Entry], *, full: bool) -> _Scan:
        """Stat every file and compare it with the index: a file whose size and mtime match and
        that is older than the last scan (minus the racy margin) is unchanged without being
        read; the others are to be read and hashed. Reads the index, writes nothing."""
        version = self._data_version(store)  # before reading: a later write makes this scan stale
        known = {source: ({} if full else store.file_states(source)) for source in ("memory", "sessions")}
        started = time.time()
        cutoff = self._last_scan - _RACY_SECONDS
        todo: list[tuple[_Item, int, int]] = []
        unchanged = 0
        listed = 0  # indexed files still listed: when all are, none is gone
        stat = os.stat
        for item in items:
            path, abs_path, source, deferred = item
            prev = known[source].get(path)
            if prev is not None:
                listed += 1
            if deferred:
                continue
            try:
                st = stat(abs_path)
            except OSError:
                continue  # vanished since discovery: picked up by the next sync
            # (size, mtime) as indexed, and old enough that a same-size edit within the same mtime
            # tick could not have followed the indexing unseen.
            size, mtime = st.st_size, int(st.st_mtime * 1000)
            if prev is not None and prev[2] == size and prev[3] == mtime and st.st_mtime < cutoff:
                unchanged += 1
            else:
                todo.append((_Item._make(item), size, mtime))
        gone: dict[str, list[str]] = {}
        if listed < sum(map(len, known.values())):
            for source, indexed in known.items():
                present = {path for path, _, src, _ in items if src == source}
                gone[source] = [p for p in indexed if p not in present]
        return _Scan(todo, len(items), unchanged, gone, known, store, version, started)

    def _unlocked_scan(self) -> _Scan | None:
        """A scan before taking the locks, so that a sync with nothing to do takes no lock and
        writes nothing. None when the locked sync has to decide (no index yet, identity changed,
        session transcripts, or the index cannot be read)."""
        import apsw

        if self.config.sessions_enabled:
            return None
        store = self._store
        try:
            meta = store.get_meta()
            if meta is None:
                return None
            identity = self._identity(self._selection_now().embedder)
            if any(meta.get(k) != v for k, v in identity.items()):
                return None
            return self._scan(store, self._memory_items(), full=False)
        except (apsw.Error, StoreError):
            return None

    def _nothing_changed(self, scan: _Scan, reason: str, gen: int, started: float) -> SyncReport:
        """The report of a sync whose unlocked scan found every file unchanged."""
        if self._dirty_gen == gen:
            self._dirty = False
        self._synced_here = True
        return SyncReport(full=False, reason=reason, files_scanned=scan.scanned, files_unchanged=scan.unchanged,
                          seconds=time.perf_counter() - started)

    def _index_items(
        self,
        store: SQLiteStore,
        cache_mirrors: list[SQLiteStore],
        scan: _Scan,
        total: int,
        report: SyncReport,
        progress: ProgressCallback | None,
    ) -> None:
        emb = self._selection_now().embedder
        model = emb.model if emb else "fts-only"
        known = scan.known
        report.files_unchanged += scan.unchanged
        pending: list[tuple[FileRow, list[Chunk]]] = []
        pending_chunks = 0
        touched: list[FileRow] = []
        first = total - len(scan.todo)
        for done, (item, size, mtime) in enumerate(scan.todo, start=first):
            if progress:
                progress(done, total, "Indexing memory files")
            try:
                with open(item.abs_path, "rb") as fh:
                    data = fh.read()
            except OSError as exc:
                report.files_skipped.append(f"{item.path}: {exc.strerror or exc}")
                continue
            text, line_map, digest = self._load(item, data)
            row = FileRow(item.path, item.source, digest, mtime, size)
            prev = known[item.source].get(item.path)
            if prev is not None and prev[1] == digest:
                report.files_unchanged += 1
                if (prev[2], prev[3]) != (row.size, row.mtime):
                    touched.append(row)
                continue
            if text is None:
                report.files_skipped.append(f"{item.path}: binary content")
                chunks: list[Chunk] = []
            else:
                chunks = chunk_markdown(text, self.config.chunking.tokens, self.config.chunking.overlap)
                if line_map is not None:
                    chunks = remap_lines(chunks, line_map)
            pending.append((row, chunks))
            pending_chunks += len(chunks)
            if pending_chunks >= _GROUP_CHUNKS:
                self._write_group(store, cache_mirrors, pending, emb, model, report)
                pending, pending_chunks = [], 0
        if pending:
            self._write_group(store, cache_mirrors, pending, emb, model, report)
        if touched:
            store.touch_files(touched)
        if progress:
            progress(total, total, "Indexing memory files")
        for source, gone in scan.gone.items():
            if gone:
                store.delete_files(source, gone)
                report.files_deleted += len(gone)

    @staticmethod
    def _load(item: "_Item", data: bytes) -> tuple[str | None, list[int] | None, str]:
        """Text to chunk (``None`` for binary content), the JSONL line map of a transcript (its
        messages, secrets masked, one line each), and the file hash."""
        if item.source == "sessions":
            from .sessions import parse_transcript

            entry = parse_transcript(data.decode("utf-8", errors="replace"))
            return entry.content, list(entry.line_map), entry.hash
        digest = hashlib.sha256(data).hexdigest()
        if b"\x00" in data[:8192]:
            return None, None, digest
        return data.decode("utf-8", errors="replace"), None, digest

    def _write_group(
        self,
        store: SQLiteStore,
        cache_mirrors: list[SQLiteStore],
        group: list[tuple[FileRow, list[Chunk]]],
        emb: Embedder | None,
        model: str,
        report: SyncReport,
    ) -> None:
        # What the embedder sees: each chunk whole when it fits the embedder's window, else its
        # windows (vector side only; keyword search keeps the whole chunk).
        windowed = [
            (file, [(c, embedding_windows(c, emb.embed_window) if emb is not None else [c]) for c in chunks])
            for file, chunks in group
        ]
        vectors: dict[str, list[float]] = {}
        if emb is not None:
            pieces = [w for _, pairs in windowed for _, windows in pairs for w in windows]
            vectors = self._embed(store, cache_mirrors, pieces, emb, report)

        def row_of(file: FileRow, c: Chunk, embedding: list[float] | None, window: bool = False) -> ChunkRow:
            return ChunkRow(
                id=chunk_id(file.source, file.path, c.start_line, c.end_line, c.hash, model),
                path=file.path,
                source=file.source,
                start_line=c.start_line,
                end_line=c.end_line,
                hash=c.hash,
                model=model,
                text=c.text,
                embedding=embedding,
                window=window,
            )

        batch = []
        for file, pairs in windowed:
            rows = []
            for c, windows in pairs:
                if windows == [c]:
                    rows.append(row_of(file, c, vectors.get(c.hash)))
                else:
                    rows.append(row_of(file, c, None))
                    rows.extend(row_of(file, w, vectors.get(w.hash), window=True) for w in windows)
            batch.append((file, rows))
            report.files_indexed += 1
            report.chunks_indexed += len(pairs)
        store.replace_files(batch)

    def _embed(
        self,
        store: SQLiteStore,
        cache_mirrors: list[SQLiteStore],
        chunks: Sequence[Chunk],
        emb: Embedder,
        report: SyncReport,
    ) -> dict[str, list[float]]:
        hashes = list(dict.fromkeys(c.hash for c in chunks))
        text_of = {c.hash: c.text for c in chunks}
        use_cache = self.config.cache.enabled
        vectors = store.cache_get(emb.provider, emb.model, emb.provider_key, hashes) if use_cache else {}
        report.embeddings_cached += len(vectors)
        missing = [h for h in hashes if h not in vectors]
        texts = [text_of[h] for h in missing]
        # A provider batch API takes everything in one job; otherwise calls of at most 8000 bytes.
        groups = [list(range(len(texts)))] if texts and getattr(emb, "batch_active", False) else batches_by_bytes(texts)
        # Written as each batch completes to the live index: an interrupted reindex resumes
        # without embedding these again. A rebuild's temporary index (thrown away if the sync
        # fails) takes them once, after the last batch.
        durable = cache_mirrors or [store]
        for batch in groups:
            got = emb.embed_documents([texts[i] for i in batch])
            new = {missing[i]: v for i, v in zip(batch, got)}
            vectors.update(new)
            report.embeddings_computed += len(new)
            if use_cache:
                for target in durable:
                    target.cache_put(emb.provider, emb.model, emb.provider_key, new)
        if use_cache and cache_mirrors:
            store.cache_put(emb.provider, emb.model, emb.provider_key, {h: vectors[h] for h in missing if h in vectors})
        return vectors

    def _maybe_background_sync(self) -> None:
        """Start a background sync when the index may be stale; a search never waits for it."""
        if self._synced_here:
            self._session_warmed = True  # this process has synced: the session is warm
        want = (self.config.sync.on_search and self._dirty) or (
            self.config.sync.on_session_start and not self._session_warmed
        )
        self._session_warmed = True
        if not want:
            return
        if self._bg_thread is not None and self._bg_thread.is_alive():
            return

        def run() -> None:
            try:
                if self._sync_lock.acquire(blocking=False):
                    try:
                        from filelock import Timeout

                        try:
                            with self._process_lock().acquire(timeout=0):
                                # Changes noticed while syncing are picked up by another round.
                                for _ in range(3):
                                    self._guarded_sync(False, None, "search")
                                    if not self._dirty:
                                        break
                        except Timeout:
                            pass  # another process is syncing this index
                    finally:
                        self._sync_lock.release()
            except Exception as exc:  # logged, never raised into the agent
                log.warning("background memory sync failed: %s", exc)

        self._bg_thread = threading.Thread(target=run, name="clawmem-sync", daemon=True)
        self._bg_thread.start()

    def mark_dirty(self) -> None:
        """Tell the index the Markdown changed (the watcher calls this)."""
        self._dirty_gen += 1
        self._dirty = True

    @property
    def dirty(self) -> bool:
        return self._dirty

    # -- search -------------------------------------------------------------------------------

    def _check_args(self, query: Any, max_results: Any, min_score: Any) -> tuple[str, int, float]:
        if not isinstance(query, str):
            raise InvalidQueryError(f"query must be a string, got {type(query).__name__}")
        k = self.config.query.max_results if max_results is None else max_results
        if (
            isinstance(k, bool)
            or not isinstance(k, (int, float))
            or not math.isfinite(k)
            or k < 1
            or (isinstance(k, float) and k != int(k))
        ):
            raise InvalidQueryError(f"max_results must be a positive integer, got {max_results!r}")
        ms = self.config.query.min_score if min_score is None else min_score
        if isinstance(ms, bool) or not isinstance(ms, (int, float)) or ms != ms or ms in (float("inf"), float("-inf")):
            raise InvalidQueryError(f"min_score must be a finite number, got {min_score!r}")
        return query.replace("\x00", " ").strip(), int(min(k, MAX_RESULTS)), max(0.0, min(1.0, float(ms)))

    def search(self, query: str, max_results: int | None = None, min_score: float | None = None) -> list[SearchResult]:
        """Hybrid search (SPEC 6). Empty query or empty index -> ``[]`` without creating the
        embedder. Raises :class:`EmbeddingError` when the query cannot be embedded."""
        self._check_open()
        q, k, ms = self._check_args(query, max_results, min_score)
        if not q:
            return []
        import apsw

        store = self._store
        try:
            return self._search_once(q, k, ms)
        except (apsw.CorruptError, apsw.NotADBError) as exc:  # damaged while in use: rebuild, answer
            self._rebuild_damaged(exc, store)
            return self._search_once(q, k, ms)

    def _search_once(self, q: str, k: int, ms: float) -> list[SearchResult]:
        if not self._prepare_search():
            return []
        emb = self._selection_now().embedder
        qvec = emb.embed_query(q[:MAX_QUERY_EMBED_CHARS]) if emb is not None else None
        return self._rank(q, qvec, k, ms)

    def _rebuild_damaged(self, exc: Exception, failed: SQLiteStore) -> None:
        with self._sync_lock:
            with self._process_lock():
                if self._store is failed and failed.file_id == failed.current_file_id():
                    self._recover(exc)
                    self._sync_locked(True, None, "recovery")
                elif self._store is failed:  # another process already set it aside and rebuilt it
                    self._retired.append(failed)
                    self._store = self._new_store()

    async def asearch(self, query: str, max_results: int | None = None, min_score: float | None = None) -> list[SearchResult]:
        """Async twin of :meth:`search`: the query embedding is awaited (``aembed_query``)."""
        import asyncio

        self._check_open()
        q, k, ms = self._check_args(query, max_results, min_score)
        if not q:
            return []
        if not await asyncio.to_thread(self._prepare_search):
            return []
        emb = self._selection_now().embedder
        qvec = await emb.aembed_query(q[:MAX_QUERY_EMBED_CHARS]) if emb is not None else None
        return await asyncio.to_thread(self._rank, q, qvec, k, ms)

    def _prepare_search(self) -> bool:
        """Sync triggers; False when there is nothing to search."""
        if not self._store.has_content():
            if list_memory_files(self.workspace, self.config.extra_paths).files:
                self.sync(reason="search")  # first use: index before answering
            if not self._store.has_content():
                return False
        else:
            self._maybe_background_sync()
        return True

    def _rank(self, query: str, qvec: list[float] | None, k: int, min_score: float) -> list[SearchResult]:
        cfg = self.config.query
        hybrid = cfg.hybrid
        pool = max(CANDIDATE_POOL, k)
        store = self._store
        emb = self._selection_now().embedder
        keyword_side = emb is None or (hybrid.enabled and store.fts_available)
        kw_hits = store.keyword_search(search_terms(query[:MAX_QUERY_TERM_CHARS])[:MAX_QUERY_TERMS], pool) if keyword_side else []
        vec_hits: list[tuple[str, float]] = []
        if qvec is not None and any(v != 0 for v in qvec):
            vec_hits = store.vector_search(qvec, pool)
        meta = store.get_chunk_meta([i for i, _ in kw_hits] + [i for i, _ in vec_hits])

        def cand(cid: str, **scores: float) -> Candidate | None:
            m = meta.get(cid)  # None: removed since the candidate lists were read
            return Candidate(cid, m[0], m[1], m[2], m[3], "", **scores) if m else None

        # Keyword-only mode keeps OpenClaw's conversion: its scores meet min_score on their own.
        mode = hybrid.text_score if emb is not None else "saturate"
        scores = keyword_scores([r for _, r in kw_hits], mode)
        kw = [c for c in (cand(i, text_score=t) for (i, _), t in zip(kw_hits, scores)) if c]
        vec = [c for c in (cand(i, vector_score=s) for i, s in vec_hits) if c]
        if emb is None:
            merged = merge_hybrid([], kw, 0.0, 1.0)
        elif not keyword_side:
            merged = merge_hybrid(vec, [], 1.0, 0.0)
        else:
            merged = merge_hybrid(vec, kw, hybrid.vector_weight, hybrid.text_weight)
        if hybrid.temporal_decay.enabled:
            merged = apply_temporal_decay(merged, hybrid.temporal_decay.half_life_days, datetime.now(timezone.utc), self._mtime_of)
        merged.sort(key=lambda c: (-c.score, c.path, c.start_line))
        merged = dedupe_line_ranges(merged)
        if hybrid.mmr.enabled:
            window = self._with_snippets(merged[:MMR_WINDOW])
            merged = mmr_rerank(window + merged[MMR_WINDOW:], hybrid.mmr.lambda_)
        # Keyword-only: when nothing reaches min_score, the best keyword hits still answer (a
        # small workspace gives BM25 small scores); hybrid: OpenClaw's floor min(min_score, tw).
        floor = 0.0 if emb is None else min(min_score, hybrid.text_weight)
        chosen = select_results(merged, min_score=min_score, max_results=k, relaxed_floor=floor, strict=cfg.strict)
        return [
            SearchResult(c.path, c.start_line, c.end_line, c.score, c.snippet, c.source, c.id, c.vector_score, c.text_score)
            for c in self._with_snippets(chosen)
        ]

    def _with_snippets(self, cands: list[Candidate]) -> list[Candidate]:
        """Fill in the snippets (text is read only for the candidates that are shown or compared)."""
        need = [c.id for c in cands if not c.snippet]
        if not need:
            return cands
        rows = self._store.get_chunks(need)
        return [c if c.snippet or c.id not in rows else c._replace(snippet=truncate_snippet(rows[c.id].text)) for c in cands]

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
        if len(indexed) != len(found.files):
            return True
        for f in found.files:
            try:
                st = os.stat(f.abs)
            except OSError:
                return True
            prev = indexed.get(f.path)
            if prev is None or (prev[2], prev[3]) != (st.st_size, int(st.st_mtime * 1000)):
                return True
        return False

    def _mtime_of(self, path: str, source: str) -> float | None:
        try:
            return os.stat(self.workspace / path).st_mtime
        except OSError:
            return None

    # -- writing and watching -----------------------------------------------------------------

    def write(self, text: str, target: str = "daily", *, now: datetime | None = None) -> "WriteResult":
        """Append a note to today's ``memory/YYYY-MM-DD.md`` (``target="daily"``) or to
        ``MEMORY.md`` (``"long_term"``); never overwrites. The index is updated before returning,
        so the note is searchable at once."""
        from .writing import append_note

        self._check_open()
        result = append_note(self.workspace, text, target, now=now)  # type: ignore[arg-type]
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
        and index it."""
        from .writing import archive_session

        self._check_open()
        result = archive_session(self.workspace, messages_text, slug, now)
        return self._index_written(result)

    def watch(self, block: bool = False) -> Any:
        """Watch ``MEMORY.md``, ``memory/``, the extra paths (and transcripts when sessions are on)
        and sync after each burst of changes (debounced by ``sync.watch_debounce_ms``). Also runs
        the interval sync when ``sync.interval_minutes`` is set. ``block=True`` runs until
        Ctrl-C; otherwise the watcher is returned (``stop()`` it, or close the index)."""
        from .watcher import MemoryWatcher

        self._check_open()

        def on_change(paths: set[Path]) -> None:
            sessions = [p for p in paths if p.suffix == ".jsonl"]
            for p in sessions:
                self._sessions.observe(p)
            if sessions and len(sessions) == len(paths) and not self._sessions.dirty_files:
                return  # transcripts grew, but not past the delta thresholds yet
            self.mark_dirty()
            try:
                self.sync(reason="watch")
            except Exception as exc:  # logged, the watcher keeps running
                log.warning("memory sync after a file change failed: %s", exc)

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

        threading.Thread(target=loop, name="clawmem-interval", daemon=True).start()

    # -- read ---------------------------------------------------------------------------------

    def read(self, path: str, from_line: int | None = None, lines: int | None = None) -> ReadResult:
        """Read lines of a memory file (``memory_get``). A path outside memory raises
        :class:`~clawmem_core.errors.PathNotAllowedError`; a missing file gives empty text."""
        self._check_open()
        return read_memory_file(self.workspace, self.config.extra_paths, path, from_line, lines)

    async def aread(self, path: str, from_line: int | None = None, lines: int | None = None) -> ReadResult:
        import asyncio

        return await asyncio.to_thread(self.read, path, from_line, lines)

    # -- status -------------------------------------------------------------------------------

    def status(self) -> IndexStatus:
        """Files, chunks, provider, model, mode, vector and FTS state, cache, dirty, issues.
        Does not create the embedder when it has not been needed yet."""
        self._check_open()
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
        found = list_memory_files(self.workspace, self.config.extra_paths)
        issues = []
        if not (self.workspace / "memory").is_dir():
            issues.append(f"memory directory missing ({self.workspace / 'memory'})")
        if not found.files:
            issues.append(f"no memory files found in {self.workspace}")
        issues += [f"additional memory path missing ({p})" for p in found.missing_extra_paths]
        return IndexStatus(
            agent_id=self.agent_id,
            workspace=str(self.workspace),
            store_path=str(self.store_path),
            files=counts.files,
            chunks=counts.chunks,
            by_source={s: {"files": f, "chunks": c} for s, (f, c) in counts.by_source.items()},
            provider=provider,
            requested_provider=requested,
            model=model,
            mode=mode,
            dirty=self._dirty and self._stale_on_disk(found),
            sources=list(self.config.sources),
            extra_paths=list(self.config.extra_paths),
            vector={
                "enabled": self.config.store.vector.enabled,
                "available": store.vector_extension,
                "dims": store.vector_dims,
                "path": getattr(store, "vector_path", None),
                "error": store.vector_error,
                "backend": "sqlite-vec" if store.vector_extension else "numpy",
            },
            fts={"available": store.fts_available, "error": store.fts_error, "tokenizer": self.config.store.fts.tokenizer},
            cache={"enabled": self.config.cache.enabled, "entries": counts.cache_entries, "max_entries": self.config.cache.max_entries},
            fallback={"from": sel.fallback_from, "reason": sel.reason} if sel and sel.fallback_from else None,
            issues=issues,
            files_on_disk=len(found.files),
        )

    # -- lifecycle ----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("this MemoryIndex is closed")

    def close(self) -> None:
        """Wait for a background sync, then close the index and the embedder."""
        if self._closed:
            return
        for w in self._watchers:
            w.stop()
        if self._interval_stop is not None:
            self._interval_stop.set()
        t = self._bg_thread
        if t is not None and t.is_alive():
            t.join()
        self._closed = True
        self._store.close()
        for store in self._retired:
            store.close()
        if self._writer is not None:
            self._writer.close()
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
