"""Sync: bring an index up to date with its Markdown (and session transcripts).

Scan (stat every file, compare with what the index holds) -> diff (unchanged, to read, gone) ->
read and chunk -> write groups of files atomically for keyword search (the *keyword phase*, with
vectors the embedding cache already holds) -> embed what is still pending (the *vector phase*,
:mod:`clawmem_core.vectors`) -> progress of both, with an ETA from measured throughput. It talks to
the index only through :class:`~clawmem_core.store.base.Store`; locking, recovery and the
embedder's lifecycle belong to :class:`~clawmem_core.index.MemoryIndex`.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Hashable, NamedTuple, Sequence

from .chunking import Chunk, chunk_id, chunk_markdown, remap_lines
from .config import MemoryConfig
from .discovery import BAD_NAME_REASON, Listings, memory_paths, normalize_extra_paths
from .embeddings.base import Embedder
from .errors import StoreError
from .progress import PhaseMeter, ProgressCallback, SyncProgress
from .results import SyncReport
from .safe_fs import FileTooLargeError, UnsafeFileError, decode, read_listed_file
from .store.base import ChunkRow, FileRow, FileState, Store
from .vectors import FillResult, cached_vectors, fill_vectors, windows_of

if TYPE_CHECKING:
    from .sessions import SessionDeltaTracker
    from .walk_snapshot import WalkSnapshot

Listener = Callable[[SyncProgress], None]

#: Chunks written per group by the keyword phase (bounds memory; each group is durable).
_GROUP_CHUNKS = 512
#: A file modified this close to the last scan is re-hashed even if size and mtime match.
_RACY_SECONDS = 2.0
#: Transcripts are not held to ``sync.max_file_bytes`` (they are parsed line by line into messages),
#: only to this bound on what one sync reads into memory.
_TRANSCRIPT_MAX_BYTES = 1 << 30


class Item(NamedTuple):
    """A file to index: display path, absolute path, source; ``deferred`` transcripts wait for
    their delta thresholds."""

    path: str
    abs_path: str
    source: str
    deferred: bool = False


#: An :class:`Item` as a plain tuple (tens of thousands are made per sync).
Entry = tuple[str, str, str, bool]
#: ``(size, mtime in ms, ctime in ns, inode)`` of a file, as :class:`FileState` ends.
StatKey = tuple[int, int, int, int]


def stat_key(st: os.stat_result) -> StatKey:
    """What says a file is unchanged without reading it. Size and mtime alone miss a same-size
    edit whose old mtime was put back (``cp -p``, ``rsync -t``, ``tar x``): its inode change time
    (which no tool can set) or its inode changed, as git compares them."""
    return (st.st_size, int(st.st_mtime * 1000), st.st_ctime_ns, st.st_ino)


@dataclass
class Scan:
    """A freshness scan: the files to read (with their :func:`stat_key`, taken before reading),
    how many are unchanged by it, indexed files gone from disk, what the index held, and the
    index's ``data_version`` when it was read (stale once another connection wrote)."""

    todo: list[tuple[Item, StatKey]]
    scanned: int
    unchanged: int
    gone: dict[str, list[str]]
    #: source -> path -> the file's (path, hash, size, mtime, ctime, ino) row in the index
    known: dict[str, dict[str, FileState]]
    store: Store
    version: Hashable
    #: ``time.time()`` before the first stat: what ``last_scan`` may become after this scan.
    started: float
    #: Files left out because their path is not valid UTF-8 (printable form), reported as skipped.
    bad_names: list[str] = field(default_factory=list)
    #: Transcript (absolute path) -> bytes taken as indexed: the size read (or, unchanged, the size
    #: seen), never the size at the end of the sync (lines appended meanwhile are not indexed yet).
    session_sizes: dict[str, int] = field(default_factory=dict)
    #: Files left out because their path is longer than the store can key a file by: ``"path:
    #: reason"``, reported as skipped.
    too_long: list[str] = field(default_factory=list)
    #: A scan of only the files a change journal saw change (:meth:`Syncer.journal_scan`): those
    #: of them that are memory files now, which the locked sync indexes without a walk (``None``:
    #: a scan of every file).
    items: list[Entry] | None = None

    @property
    def clean(self) -> bool:
        return not self.todo and not any(self.gone.values())


def path_too_long(path: str, limit: int | None) -> str | None:
    """Why a file at ``path`` (workspace-relative) cannot be indexed by a store that keys files by
    at most ``limit`` bytes of path (:attr:`Store.max_path_bytes`), or ``None`` when it can."""
    if limit is None:
        return None
    size = len(path.encode("utf-8", "surrogateescape"))
    if size <= limit:
        return None
    return f"path too long for the index ({size} bytes in UTF-8, at most {limit}); shorten it"


def _same_identity(store: Store, identity: Callable[[], dict[str, Any]]) -> bool:
    """``store`` holds an index built as ``identity()`` says this one is (the same embedder,
    chunking and the like): a scan of it can be trusted; else the locked sync decides."""
    meta = store.get_meta()
    if meta is None:
        return False
    return all(meta.get(k) == v for k, v in identity().items())


def admit_paths(items: list[Entry], store: Store, skipped: list[str]) -> list[Entry]:
    """``items`` without the files whose path ``store`` cannot key (each reported in ``skipped``
    as ``"path: reason"``): such a file is never written, so it never fails the group of files
    written with it, nor every sync (and search) after."""
    limit = store.max_path_bytes
    if limit is None:
        return items
    out: list[Entry] = []
    for item in items:
        why = path_too_long(item[0], limit)
        if why is None:
            out.append(item)
        else:
            skipped.append(f"{item[0]}: {why}")
    return out


class Syncer:
    """Scans a workspace against a :class:`Store` and writes what changed."""

    def __init__(
        self,
        workspace: Path,
        config: MemoryConfig,
        sessions_dir: Path,
        sessions: "SessionDeltaTracker",
        last_scan: float = 0.0,
    ) -> None:
        self.workspace = workspace
        self.config = config
        self.sessions_dir = sessions_dir
        self._sessions = sessions
        #: ``time.time()`` at the start of the last scan that completed a sync.
        self.last_scan = last_scan
        self._read_roots: list[str] | None = None
        #: id(store) -> (store, data version, source -> its file states): what the index held at that
        #: version, so that a scan of an unchanged index does not fetch every file's state again.
        self._states: dict[int, tuple[Store, Hashable, dict[str, dict[str, FileState]]]] = {}
        #: Directory listings reused while a directory is unchanged (see ``discovery._walk``).
        self._listings: Listings = {}
        #: The last walk's skipped paths (names not valid UTF-8, paths the store cannot key): a
        #: scan of only the files a change journal saw change reports them again.
        self._walk_skipped: list[str] = []
        #: The walk a previous process recorded (:class:`~clawmem_core.walk_snapshot.WalkSnapshot`),
        #: asked first by unlocked scans; set by ``clawmem search``.
        self.walk: WalkSnapshot | None = None

    # -- one sync ---------------------------------------------------------------------------------

    def run(
        self,
        writer: Store,
        reader: Store,
        identity: dict[str, Any],
        emb: Embedder | None,
        force: bool,
        listener: Listener | None,
        reason: str,
        session_files: Sequence[str | os.PathLike[str]] = (),
        *,
        scan: Scan | None = None,
    ) -> SyncReport:
        """One sync with the locks held: incremental into ``writer``, or a full rebuild (forced, no
        index yet, or the identity changed) built as a new generation and switched in atomically.
        ``scan`` is a scan taken on ``reader`` before the locks, reused if nothing wrote since."""
        started = time.perf_counter()
        writer.remove_leftovers()
        meta = writer.get_meta()
        full = force or meta is None or any(meta.get(k) != v for k, v in identity.items())
        report = SyncReport(full=full, reason=reason)
        # A scan taken before the locks still holds if no other connection has written since.
        reuse = (
            scan is not None and not full and not self.config.sessions_enabled
            and scan.store is reader and scan.version == reader.data_version()
        )
        if scan is not None and scan.items is not None and reuse:
            # only the files a change journal saw change: no walk (the others are unchanged)
            return self._run_journal_scan(writer, scan, report, listener, emb, started)
        if scan is not None and scan.items is not None:
            scan = None  # written meanwhile: walk
        bad_names: list[str] = []
        items = self.memory_items(bad_names)
        if self.config.sessions_enabled:
            items += self.session_items(full, reason, session_files, writer, bad_names)
        too_long: list[str] = []
        items = admit_paths(items, writer, too_long)
        report.files_scanned = len(items)
        report.files_skipped.extend(f"{name}: {BAD_NAME_REASON}" for name in bad_names)
        report.files_skipped.extend(too_long)
        self._walk_skipped = list(report.files_skipped)
        if full:
            with writer.rebuild() as tmp:
                scan = self.scan(tmp, items, full=True)
                self.index_items(tmp, scan, len(items), report, listener, emb)
                if self.config.cache.max_entries:
                    tmp.cache_prune(self.config.cache.max_entries)
                tmp.set_meta(identity)
        else:
            if scan is None or not reuse:
                scan = self.scan(writer, items, full=False)
            self.index_items(writer, scan, len(items), report, listener, emb)
        for _, abs_path, source, deferred in items:
            if source == "sessions" and not deferred:
                size = scan.session_sizes.get(abs_path)
                if size is None:
                    self._sessions.forget(abs_path)  # vanished or unreadable: counted afresh when it returns
                else:
                    self._sessions.mark_indexed(abs_path, size)
        self.last_scan = scan.started
        # Persisted, so that the next process can trust size + mtime of files older than this scan.
        writer.set_value("last_scan", repr(scan.started))
        writer.settle()
        report.seconds = time.perf_counter() - started
        return report

    def _run_journal_scan(self, writer: Store, scan: Scan, report: SyncReport, listener: Listener | None,
                          emb: Embedder | None, started: float) -> SyncReport:
        """The keyword phase of a scan of only the files a change journal saw change. ``last_scan``
        stays that of the last walk (the files this scan did not check are not re-dated)."""
        report.files_scanned = scan.scanned
        report.files_skipped.extend(self.skipped(scan))
        self.index_items(writer, scan, scan.scanned, report, listener, emb)
        writer.settle()  # (PostgreSQL: the keyword postings of the rows written, once enough wait)
        report.seconds = time.perf_counter() - started
        return report

    def skipped(self, scan: Scan) -> list[str]:
        """The files ``scan`` left out, each ``"path: reason"``. A scan of only the files a change
        journal saw change also reports the last walk's: the files it did not name are as that
        walk found them."""
        seen = [f"{name}: {BAD_NAME_REASON}" for name in scan.bad_names] + list(scan.too_long)
        if scan.items is None:  # a walk: the whole list
            self._walk_skipped = seen
            return seen
        named = {entry.split(": ", 1)[0] for entry in seen}
        earlier = [e for e in self._walk_skipped if e.split(": ", 1)[0] not in named]
        return list(dict.fromkeys(earlier + seen))

    # -- what to index ----------------------------------------------------------------------------

    def memory_items(self, bad_names: list[str] | None = None) -> list[Entry]:
        """Memory files to index; those whose path is not valid UTF-8 go to ``bad_names``."""
        pairs, _ = memory_paths(self.workspace, self.config.extra_paths, bad_names=bad_names, listings=self._listings)
        return [(path, abs_path, "memory", False) for path, abs_path in pairs]

    def session_items(
        self, full: bool, reason: str, targets: Sequence[str | os.PathLike[str]], store: Store,
        bad_names: list[str] | None = None,
    ) -> list[Entry]:
        """Session transcripts to consider. Automatic syncs re-index a grown transcript only once it
        crossed the delta thresholds (or when named, after compaction); manual syncs take all."""
        from .sessions import list_session_files, session_display_path

        # By real path: a transcript may be named (or reported dirty) through a symlinked directory.
        named = {os.path.realpath(os.fspath(t)) for t in targets}
        automatic = reason in ("search", "watch", "interval", "session-start")
        indexed = store.file_hashes("sessions")
        out: list[Entry] = []
        for p in list_session_files(self.sessions_dir, bad_names=bad_names):
            shown = session_display_path(p)
            deferred = (
                automatic and not full and shown in indexed and not self._sessions.is_dirty(p)
                and os.path.realpath(p) not in named
            )
            out.append(Item(shown, str(p), "sessions", deferred))
        return out

    # -- scan and diff ----------------------------------------------------------------------------

    def scan(self, store: Store, items: list[Entry], *, full: bool) -> Scan:
        """Stat every file and compare it with the index: a file whose size and mtime match and
        that is older than the last scan (minus the racy margin) is unchanged without being
        read; the others are to be read and hashed. Reads the index, writes nothing."""
        version = store.data_version()  # before reading: a later write makes this scan stale
        known = {"memory": {}, "sessions": {}} if full else self.file_states(store, version)
        return self.compare(store, items, known, version)

    def compare(self, store: Store, items: list[Entry], known: dict[str, dict[str, FileState]],
                version: Hashable, *, recheck: bool = False) -> Scan:
        """Stat ``items`` and compare them with ``known`` (what ``store`` held at ``version``):
        see :meth:`scan`. An indexed file of ``known`` that is not among ``items`` is gone.
        ``recheck``: every file is to be read (something changed it, whatever its stat says)."""
        started = time.time()
        cutoff = self.last_scan - _RACY_SECONDS
        todo: list[tuple[Item, StatKey]] = []
        unchanged = 0
        listed = 0  # indexed files still listed: when all are, none is gone
        session_sizes: dict[str, int] = {}
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
            # (size, mtime, ctime, inode) as indexed, and old enough that a same-size edit within
            # the same mtime tick could not have followed the indexing unseen.
            key = stat_key(st)
            if source == "sessions":
                session_sizes[abs_path] = st.st_size
            if not recheck and prev is not None and prev[2:] == key and st.st_mtime < cutoff:
                unchanged += 1
            else:
                todo.append((Item._make(item), key))
        gone: dict[str, list[str]] = {}
        if listed < sum(map(len, known.values())):
            for source, indexed in known.items():
                present = {path for path, _, src, _ in items if src == source}
                gone[source] = [p for p in indexed if p not in present]
        return Scan(todo, len(items), unchanged, gone, known, store, version, started, session_sizes=session_sizes)

    def journal_scan(self, store: Store, identity: Callable[[], dict[str, Any]], items: list[Entry],
                     checked: Sequence[str], bad_names: Sequence[str] = ()) -> Scan | None:
        """A scan of only the memory files a change journal saw change, every other file being
        unchanged since the index last matched the Markdown: ``items`` are those of them that are
        memory files now, ``checked`` the display paths of all of them (an indexed one no longer
        listed is gone). ``None`` where :meth:`unlocked_scan` would be (the locked sync decides).
        Its ``scanned`` and ``unchanged`` count every memory file, as a walk's would."""
        if self.config.sessions_enabled:
            return None
        try:
            if not _same_identity(store, identity):
                return None
            too_long: list[str] = []
            items = admit_paths(items, store, too_long)
            version = store.data_version()  # before reading: a later write makes this scan stale
            known: dict[str, dict[str, FileState]] = {"memory": store.file_states_of("memory", checked),
                                                      "sessions": {}}
            indexed = store.file_count("memory")
            # each of them changed, whatever its stat says (a same-size edit with its mtime put
            # back within one tick of the inode clock): read, and compared by content
            scan = self.compare(store, items, known, version, recheck=True)
        except (StoreError, *store.driver_errors):
            return None
        new = sum(1 for item in items if item[0] not in known["memory"])
        scan.unchanged += indexed - len(known["memory"])
        scan.scanned = indexed + new - len(scan.gone.get("memory", ()))
        scan.items = items
        scan.bad_names = list(bad_names)
        scan.too_long = too_long
        return scan

    def file_states(self, store: Store, version: Hashable) -> dict[str, dict[str, FileState]]:
        """Every indexed file's state by source, as ``store`` holds them at ``version`` (read just
        before): fetched once per version of the index, not once per scan. Shared: never modify it."""
        cached = self._states.get(id(store))
        if cached is not None and cached[0] is store and cached[1] == version:
            return cached[2]
        known = {source: store.file_states(source) for source in ("memory", "sessions")}
        # (rows written after ``version`` was read may be in there: harmless, since the version
        # only moves forward, such an entry is never asked for again)
        self._states.pop(id(store), None)
        self._states[id(store)] = (store, version, known)
        while len(self._states) > 4:  # the reader, the writer, a vector handle: a few at a time
            del self._states[next(iter(self._states))]
        return known

    def unlocked_scan(self, store: Store, identity: Callable[[], dict[str, Any]]) -> Scan | None:
        """A scan before taking the locks, so that a sync with nothing to do takes no lock and
        writes nothing. None when the locked sync has to decide (no index yet, identity changed,
        session transcripts, or the index cannot be read)."""
        if self.config.sessions_enabled:
            return None
        try:
            if not _same_identity(store, identity):
                return None
            bad_names: list[str] = []
            too_long: list[str] = []
            items = admit_paths(self.memory_items(bad_names), store, too_long)
            clean = self.walk.clean_scan(store, items) if self.walk is not None else None
            if clean is not None:  # the recorded walk says nothing changed
                version, started = clean
                scan = Scan([], len(items), len(items), {}, {"memory": {}, "sessions": {}}, store, version, started)
            else:
                scan = self.scan(store, items, full=False)
                if self.walk is not None:
                    self.walk.observe(store, items, scan)
            scan.bad_names = bad_names
            scan.too_long = too_long
            return scan
        except (StoreError, *store.driver_errors):
            return None

    # -- read, chunk, embed, write ----------------------------------------------------------------

    def index_items(
        self,
        store: Store,
        scan: Scan,
        total: int,
        report: SyncReport,
        listener: Listener | None,
        emb: Embedder | None,
    ) -> None:
        """The keyword phase: read, chunk and write every file of ``scan.todo`` (vectors from the
        cache only), record new mtimes of unchanged files, delete the files gone. Reports
        ``keywords`` progress: files of ``total``, the ETA from the bytes read per second."""
        model = emb.model if emb else "fts-only"
        known = scan.known
        report.files_unchanged += scan.unchanged
        pending: list[tuple[FileRow, list[Chunk]]] = []
        pending_chunks = 0
        touched: list[FileRow] = []
        skipped: set[str] = set()
        meter = PhaseMeter("keywords", total, sum(key[0] for _, key in scan.todo))
        meter.done = total - len(scan.todo)
        if listener:
            listener(meter.event())
        last_size = -1
        for item, key in scan.todo:
            if last_size >= 0:  # the previous file is done
                event = meter.advance(1, last_size)
                if listener:
                    listener(event)
            size, mtime = key[0], key[1]
            last_size = size
            try:
                data = self._read_item(item)
            except FileTooLargeError as exc:
                # a row without chunks: its old chunks go, and it is not opened again until it changes
                report.files_skipped.append(f"{item.path}: {exc.reason}")
                skipped.add(item.path)
                pending.append((FileRow(item.path, item.source, f"too-large:{key[0]}", key[1], key[0],
                                        ctime=key[2], ino=key[3]), []))
                scan.session_sizes.pop(item.abs_path, None)
                continue
            except UnsafeFileError as exc:  # swapped for a symlink or FIFO since discovery...
                report.files_skipped.append(f"{item.path}: {exc.reason}")
                scan.session_sizes.pop(item.abs_path, None)
                continue
            except OSError as exc:
                report.files_skipped.append(f"{item.path}: {exc.strerror or type(exc).__name__}")
                scan.session_sizes.pop(item.abs_path, None)
                continue
            if item.source == "sessions":
                scan.session_sizes[item.abs_path] = len(data)  # what was read, not what is there at the end
            text, line_map, digest = self._load(item, data, report)
            row = FileRow(item.path, item.source, digest, key[1], key[0], text, ctime=key[2], ino=key[3])
            prev = known[item.source].get(item.path)
            if prev is not None and prev[1] == digest:
                report.files_unchanged += 1
                if prev[2:] != key:
                    touched.append(row)
                continue
            if text is None:
                # kept as a row without chunks (its old chunks go; it is not re-read until it changes),
                # counted as skipped, not as indexed
                report.files_skipped.append(f"{item.path}: binary content")
                skipped.add(item.path)
                chunks: list[Chunk] = []
            else:
                chunks = chunk_markdown(text, self.config.chunking.tokens, self.config.chunking.overlap)
                if line_map is not None:
                    chunks = remap_lines(chunks, line_map)
            pending.append((row, chunks))
            pending_chunks += len(chunks)
            if pending_chunks >= _GROUP_CHUNKS:
                self._write_group(store, pending, emb, model, report, skipped)
                pending, pending_chunks = [], 0
        if pending:
            self._write_group(store, pending, emb, model, report, skipped)
        if touched:
            store.touch_files(touched)
        if listener:
            meter.done = meter.total
            listener(meter.event())
        for source, gone in scan.gone.items():
            if gone:
                store.delete_files(source, gone)
                report.files_deleted += len(gone)

    def _read_item(self, item: Item) -> bytes:
        """A listed file's bytes, opened safely from its memory root (see :mod:`safe_fs`): no
        symlink swapped in since discovery is followed, no FIFO blocks, nothing over the size limit
        is read."""
        roots = self._read_roots
        if roots is None:
            roots = [str(self.workspace), str(self.sessions_dir)]
            for extra in normalize_extra_paths(self.workspace, self.config.extra_paths):
                roots.append(str(extra) if not extra.name.endswith(".md") else str(extra.parent))
            self._read_roots = roots
        limit = self.config.sync.max_file_bytes if item.source == "memory" else _TRANSCRIPT_MAX_BYTES
        return read_listed_file(item.abs_path, roots, limit, shown=item.path)

    @staticmethod
    def _load(item: Item, data: bytes, report: SyncReport) -> tuple[str | None, list[int] | None, str]:
        """Text to chunk (``None`` for binary content), the JSONL line map of a transcript (its
        messages, secrets masked, one line each; unparsable lines counted in the report), and the
        file hash."""
        if item.source == "sessions":
            from .sessions import parse_transcript

            entry = parse_transcript(data.decode("utf-8", errors="replace"))
            report.lines_skipped += entry.skipped_lines
            return entry.content, list(entry.line_map), entry.hash
        return decode(data), None, hashlib.sha256(data).hexdigest()

    def _write_group(
        self,
        store: Store,
        group: list[tuple[FileRow, list[Chunk]]],
        emb: Embedder | None,
        model: str,
        report: SyncReport,
        skipped: set[str] | frozenset[str] = frozenset(),
    ) -> None:
        """Write a group of files for keyword search in one transaction. A chunk whose vectors are
        all in the embedding cache gets them now; the others are written pending, for the vector
        phase (:mod:`clawmem_core.vectors`)."""
        # What the embedder sees: each chunk whole when it fits the embedder's window, else its
        # windows (vector side only; keyword search keeps the whole chunk).
        windowed = [
            (file, [(c, windows_of(c, emb) if emb is not None else [c]) for c in chunks])
            for file, chunks in group
        ]
        vectors: dict[str, list[float]] = {}
        if emb is not None and self.config.cache.enabled:
            vectors = cached_vectors(store, emb, [w.hash for _, pairs in windowed for _, ws in pairs for w in ws])
            report.embeddings_cached += len(vectors)

        def row_of(file: FileRow, c: Chunk, embedding: list[float] | None, *, window: bool = False,
                   pending: bool = False) -> ChunkRow:
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
                pending=pending,
            )

        batch = []
        for file, pairs in windowed:
            rows = []
            for c, windows in pairs:
                if emb is None:
                    rows.append(row_of(file, c, None))
                elif not all(w.hash in vectors for w in windows):
                    rows.append(row_of(file, c, None, pending=True))
                elif windows == [c]:
                    rows.append(row_of(file, c, vectors[c.hash]))
                else:
                    rows.append(row_of(file, c, None))
                    rows.extend(row_of(file, w, vectors[w.hash], window=True) for w in windows)
            batch.append((file, rows))
            if file.path not in skipped:
                report.files_indexed += 1
            report.chunks_indexed += len(pairs)
        store.replace_files(batch)

    # -- the vector phase ---------------------------------------------------------------------------

    def fill_vectors(
        self,
        store: Store,
        emb: Embedder,
        report: SyncReport,
        listener: Listener | None = None,
        *,
        should_stop: Callable[[], bool] | None = None,
        deadline: float | None = None,
        paths: Sequence[str] | None = None,
    ) -> FillResult:
        """Embed the chunks the keyword phase left pending (see :func:`~clawmem_core.vectors.fill_vectors`)."""
        started = time.perf_counter()
        result = fill_vectors(store, emb, cache_enabled=self.config.cache.enabled, listener=listener, report=report,
                              should_stop=should_stop, deadline=deadline, paths=paths)
        report.vectors_completed += result.completed
        if result.completed and self.config.cache.enabled and self.config.cache.max_entries:
            store.cache_prune(self.config.cache.max_entries)
        report.seconds += time.perf_counter() - started
        return result
