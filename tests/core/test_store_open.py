"""Opening and closing an index: opening a complete index writes nothing (it neither waits for
another writer nor disturbs long-lived readers' caches), an older index is upgraded once, and
``close()`` waits for the interval sync."""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

import apsw

from clawmem_core import MemoryIndex
from clawmem_core.store.sqlite import SQLiteStore
from clawmem_core.testing import HashEmbedder

from .conftest import SAMPLE_FILES, WorkspaceFactory, keyword_only


def _index_file(state_dir: Path) -> Path:
    (db,) = (state_dir / "memory").glob("*.sqlite")
    return db


def test_opening_an_index_does_not_wait_for_a_writer(make_workspace: WorkspaceFactory, state_dir: Path) -> None:
    ws = make_workspace(SAMPLE_FILES)
    with MemoryIndex(ws, config=keyword_only(), state_dir=state_dir) as mem:
        mem.sync()
    other = apsw.Connection(str(_index_file(state_dir)))
    other.execute("BEGIN IMMEDIATE")  # another process is writing (and holds the write lock)
    try:
        store = SQLiteStore(_index_file(state_dir))
        store.conn.setbusytimeout(200)  # a write would fail fast instead of waiting 10 s
        assert store.has_content()
        store.close()
        with MemoryIndex(ws, config=keyword_only(), state_dir=state_dir) as mem:
            mem._store.conn.setbusytimeout(200)
            assert mem.search("espresso", min_score=0)[0].path == "MEMORY.md"
            assert mem.status().files == 3
    finally:
        other.execute("ROLLBACK")
        other.close()


def test_opening_an_index_keeps_other_readers_caches(make_workspace: WorkspaceFactory, state_dir: Path) -> None:
    """A long-lived reader's caches (BM25 statistics, vector matrix) live while ``data_version``
    holds: other processes opening and searching the index must not change it."""
    ws = make_workspace(SAMPLE_FILES)
    past = time.time() - 120
    for p in ws.rglob("*.md"):  # old enough for a sync to trust size and times without reading
        os.utime(p, (past, past))
    with MemoryIndex(ws, embedder=HashEmbedder(), state_dir=state_dir) as mem:
        mem.sync()
    reader = SQLiteStore(_index_file(state_dir))
    try:
        before = reader.data_version()
        for _ in range(3):
            with MemoryIndex(ws, embedder=HashEmbedder(), state_dir=state_dir) as mem:
                assert mem.search("jazz espresso", min_score=0)
                mem.status()
        assert reader.data_version() == before
    finally:
        reader.close()


def test_an_older_index_gains_the_new_columns_once(make_workspace: WorkspaceFactory, state_dir: Path) -> None:
    ws = make_workspace(SAMPLE_FILES)
    with MemoryIndex(ws, config=keyword_only(), state_dir=state_dir) as mem:
        mem.sync()
    db = _index_file(state_dir)
    conn = apsw.Connection(str(db))  # the files table as the first schema had it
    conn.execute(
        "CREATE TABLE old_files AS SELECT path, source, hash, mtime, size FROM files; DROP TABLE files;"
        "CREATE TABLE files (path TEXT NOT NULL, source TEXT NOT NULL DEFAULT 'memory', hash TEXT NOT NULL, "
        "mtime INTEGER NOT NULL, size INTEGER NOT NULL, PRIMARY KEY (source, path));"
        "INSERT INTO files SELECT * FROM old_files; DROP TABLE old_files;"
    )
    conn.close()
    with MemoryIndex(ws, config=keyword_only(), state_dir=state_dir) as mem:
        assert mem.search("espresso", min_score=0)[0].path == "MEMORY.md"
        report = mem.sync()
        assert report.files_indexed == 0  # hashes unchanged: nothing re-chunked
        assert set(mem._store.file_states("memory")["MEMORY.md"][4:]) != {0}


class _GatedEmbedder(HashEmbedder):
    """Blocks in ``embed_documents`` until released (a slow sync in progress)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def _embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.entered.set()
        self.release.wait(30)
        return super()._embed_documents(texts)


def test_close_waits_for_the_interval_sync(make_workspace: WorkspaceFactory, state_dir: Path, caplog) -> None:
    ws = make_workspace(SAMPLE_FILES)
    emb = _GatedEmbedder()
    emb.release.set()
    mem = MemoryIndex(ws, embedder=emb, state_dir=state_dir,
                      config={"sync": {"interval_minutes": 0.002, "watch": False, "on_search": False}})
    mem.sync()
    emb.release.clear()
    emb.entered.clear()
    (ws / "memory" / "new.md").write_text("- a new note about walruses\n", encoding="utf-8")
    watcher = mem.watch()  # starts the interval sync (every 0.12 s)
    assert emb.entered.wait(30), "the interval sync did not start"
    (interval,) = [t for t in threading.enumerate() if t.name == "clawmem-interval"]
    threading.Timer(0.3, emb.release.set).start()
    with caplog.at_level(logging.WARNING, logger="clawmem"):
        mem.close()
        assert not interval.is_alive(), "close() returned while the interval sync was running"
    watcher.stop()
    assert not [r for r in caplog.records if "interval memory sync failed" in r.getMessage()]
