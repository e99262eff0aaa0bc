"""A sync in a long-lived index takes the changed files from the change journal
(``clawmem_core.journal``) and checks no other file, and it falls back to a walk of every file
whenever the journal cannot vouch for the others. Each fallback test makes a change that only the
walk can find: skipping the fallback would leave it out of the index."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from clawmem_core import MemoryConfig, MemoryIndex
from clawmem_core.discovery import list_memory_files

from .conftest import SAMPLE_FILES, IndexFactory, WorkspaceFactory
from .test_change_journal import Walks, inotify_queue_limit, journal_running, overflow_the_queue, paths

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the change journal is Linux inotify")


def vouching(ws: Path, open_index: IndexFactory, **config: Any) -> tuple[MemoryIndex, Walks]:
    """A keyword-only index whose journal runs and vouches for the files: the first sync walks,
    the second starts the journal (and walks), the third checks no file."""
    mem = open_index(ws, embedder=None, config=MemoryConfig(provider="none", **config))
    mem.fresh_budget = 60.0  # a loaded machine must not turn these into tests of speed
    walks = Walks(mem)
    mem.sync()
    mem.sync()
    journal_running(mem)
    n, scans = walks.count, mem._freshness.journal_scans
    report = mem.sync()
    assert walks.count == n and mem._freshness.journal_scans == scans + 1  # vouched: no walk
    assert report.files_scanned == len(list_memory_files(ws, config.get("extra_paths")).files)
    return mem, walks


def indexed(mem: MemoryIndex) -> dict[str, str]:
    """Path -> hash of every file the index holds."""
    return {path: state[1] for path, state in mem._store.file_states("memory").items()}


def on_disk(ws: Path, extra_paths: list[str] | None = None) -> dict[str, str]:
    """Path -> hash of every memory file, as a full walk finds them."""
    return {f.path: hashlib.sha256(f.abs_path.read_bytes()).hexdigest()
            for f in list_memory_files(ws, extra_paths).files}


def edit(path: Path, line: str) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")


def test_a_vouched_sync_reads_only_the_changed_files_and_matches_a_walk(make_workspace: WorkspaceFactory,
                                                                        open_index: IndexFactory) -> None:
    ws = make_workspace({**SAMPLE_FILES, "memory/old.md": "An old note about walruses.\n",
                         "memory/projects/move-me.md": "Move me: the capybara plan.\n"})
    mem, walks = vouching(ws, open_index)
    edit(ws / "memory" / "2026-01-05.md", "The office mascot is a quokka.")
    (ws / "memory" / "projects" / "new.md").write_text("新的笔记：熊猫计划。\n", encoding="utf-8")
    (ws / "memory" / "old.md").unlink()
    (ws / "memory" / "projects" / "move-me.md").rename(ws / "memory" / "moved.md")
    (ws / "MEMORY.md").write_text("# Preferences\n\n我喜欢爵士乐。\n", encoding="utf-8")
    (ws / "memory" / "notes.txt").write_text("not memory\n", encoding="utf-8")
    n, scans = walks.count, mem._freshness.journal_scans
    report = mem.sync()
    assert walks.count == n and mem._freshness.journal_scans == scans + 1
    assert report.files_indexed == 4 and report.files_deleted == 2  # old.md, move-me.md
    assert report.files_scanned == 5 and report.files_unchanged == 1  # as a walk counts them
    assert indexed(mem) == on_disk(ws)
    assert paths(mem, "quokka") == {"memory/2026-01-05.md"}
    assert paths(mem, "熊猫") == {"memory/projects/new.md"}
    assert paths(mem, "爵士乐") == {"MEMORY.md"}
    assert paths(mem, "capybara") == {"memory/moved.md"}
    assert paths(mem, "walruses") == set()
    # a file rewritten with its content unchanged: read, found equal, nothing written
    target = ws / "memory" / "moved.md"
    target.write_bytes(target.read_bytes())
    report = mem.sync()
    assert report.files_indexed == 0 and report.files_unchanged == 5 and walks.count == n
    # a file swapped for a symlink, and one for a directory's worth of nothing: both leave
    (ws / "memory" / "moved.md").unlink()
    (ws / "memory" / "moved.md").symlink_to(ws / "MEMORY.md")
    report = mem.sync()
    assert report.files_deleted == 1 and indexed(mem) == on_disk(ws) and walks.count == n


def test_an_overflowed_journal_makes_the_sync_walk(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    limit = inotify_queue_limit()
    ws = make_workspace(SAMPLE_FILES)
    mem, walks = vouching(ws, open_index)
    overflow_the_queue(ws, limit)
    edit(ws / "memory" / "2026-01-05.md", "Quokka day.")  # no event of its own: the queue is full
    n = walks.count
    report = mem.sync()
    assert walks.count > n and report.files_indexed == 1
    assert paths(mem, "quokka") == {"memory/2026-01-05.md"}


def test_a_renamed_directory_makes_the_sync_walk(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    ws = make_workspace({**SAMPLE_FILES, "memory/trips/lisbon.md": "Lisbon: pasteis de nata.\n"})
    mem, walks = vouching(ws, open_index)
    (ws / "memory" / "trips").rename(ws / "memory" / "travel")  # no event names the files inside
    n = walks.count
    mem.sync()
    assert walks.count > n
    assert indexed(mem) == on_disk(ws)
    assert paths(mem, "lisbon") == {"memory/travel/lisbon.md"}
    # a directory created with a file in it at once: walked too
    (ws / "memory" / "travel" / "2027").mkdir()
    (ws / "memory" / "travel" / "2027" / "oslo.md").write_text("Oslo: the fjord.\n", encoding="utf-8")
    n = walks.count
    mem.sync()
    assert walks.count > n and paths(mem, "fjord") == {"memory/travel/2027/oslo.md"}


def test_a_missing_directory_that_appears_makes_the_sync_walk(make_workspace: WorkspaceFactory,
                                                              open_index: IndexFactory, tmp_path: Path) -> None:
    ws = make_workspace(SAMPLE_FILES)
    notes = tmp_path / "team" / "notes"
    mem, walks = vouching(ws, open_index, extra_paths=[str(notes)])
    notes.mkdir(parents=True)
    (notes / "tapir.md").write_text("The tapir sleeps. 貘在睡觉。\n", encoding="utf-8")
    n = walks.count
    mem.sync()
    assert walks.count > n and paths(mem, "貘") == {"../team/notes/tapir.md"}
    # then the journal vouches again, the new directory included
    edit(notes / "tapir.md", "The okapi too.")
    n = walks.count
    mem.sync()
    assert walks.count == n and paths(mem, "okapi") == {"../team/notes/tapir.md"}
    assert indexed(mem) == on_disk(ws, [str(notes)])


def test_a_journal_that_stopped_makes_the_sync_walk(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    ws = make_workspace(SAMPLE_FILES)
    mem, walks = vouching(ws, open_index)
    assert mem._freshness.journal is not None
    mem._freshness.journal._inotify.close()  # the notifications stop (closed under the index)
    edit(ws / "memory" / "2026-01-05.md", "Quokka day.")
    n = walks.count
    mem.sync()
    assert walks.count > n and paths(mem, "quokka") == {"memory/2026-01-05.md"}


def test_without_the_journal_every_sync_walks(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    ws = make_workspace(SAMPLE_FILES)
    mem = open_index(ws, embedder=None, config=MemoryConfig(provider="none"))
    mem.change_journal = False
    walks = Walks(mem)
    for _ in range(3):
        mem.sync()
    assert mem._freshness.journal is None and walks.count == 3
    edit(ws / "memory" / "2026-01-05.md", "Quokka day.")
    mem.sync()
    assert walks.count == 4 and paths(mem, "quokka") == {"memory/2026-01-05.md"}


def test_another_writer_makes_the_sync_walk(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    ws = make_workspace(SAMPLE_FILES)
    mem, walks = vouching(ws, open_index)
    other = open_index(ws, embedder=None, config=MemoryConfig(provider="none"))
    assert other.store_path == mem.store_path
    # Another instance (or process) writes the index, no Markdown changed: the journal saw
    # nothing, but what this index knew about the files no longer holds.
    other._stores.writer_store().delete_files("memory", ["MEMORY.md"])
    n = walks.count
    report = mem.sync()
    assert walks.count > n and report.files_indexed == 1
    assert paths(mem, "espresso") == {"MEMORY.md"}


def test_a_change_the_journal_cannot_see_is_synced_once_the_index_is_told(make_workspace: WorkspaceFactory,
                                                                          open_index: IndexFactory,
                                                                          tmp_path: Path) -> None:
    """An edit through a hard link from outside the watched directories raises no event there;
    ``mark_dirty()`` (what a caller says when it knows of such a change) makes the next sync walk."""
    ws = make_workspace(SAMPLE_FILES)
    mem, walks = vouching(ws, open_index)
    link = tmp_path / "elsewhere.md"
    os.link(ws / "memory" / "2026-01-05.md", link)
    edit(link, "Quokka day, written through the link.")
    mem.mark_dirty()
    n = walks.count
    mem.sync()
    assert walks.count > n and paths(mem, "quokka") == {"memory/2026-01-05.md"}


def test_a_vouched_sync_writes_the_postgresql_postings_of_what_it_added(pg_url: str, make_workspace: WorkspaceFactory,
                                                                        open_index: IndexFactory) -> None:
    """On PostgreSQL a sync ends by packing the keyword postings of the rows it wrote (once enough
    wait): a sync the journal vouches for too, or rows pile up above what the postings cover."""
    from clawmem_core.store.postgres.postings import SETTLE_MIN_ROWS

    ws = make_workspace(SAMPLE_FILES)
    from clawmem_core.config import StoreConfig

    mem, walks = vouching(ws, open_index, store=StoreConfig(url=pg_url))
    n, scans = walks.count, mem._freshness.journal_scans
    for i in range(SETTLE_MIN_ROWS + 20):  # a chunk a file: more keyword rows than SETTLE_MIN_ROWS
        (ws / "memory" / f"heron-{i:03d}.md").write_text(f"Heron {i} of the lake, 第{i}只苍鹭。\n", encoding="utf-8")
    mem.sync()
    assert walks.count == n and mem._freshness.journal_scans == scans + 1  # vouched: no walk
    store = mem._store
    with store._conn() as conn:
        newest = conn.execute("SELECT max(rid) FROM clawmem_chunks WHERE agent = %s AND generation = "
                              "(SELECT generation FROM clawmem_agents WHERE agent = %s)",
                              (store.agent, store.agent)).fetchone()[0]
        covered = conn.execute("SELECT max(upto) FROM clawmem_postings WHERE agent = %s", (store.agent,)).fetchone()[0]
    assert covered == newest
    assert paths(mem, "苍鹭") and paths(mem, "heron 7 lake") >= {"memory/heron-007.md"}


def test_syncs_that_write_vectors_keep_the_journals_trust(make_workspace: WorkspaceFactory,
                                                          open_index: IndexFactory) -> None:
    """A sync's own keyword commits are not another writer's: after a sync whose vector phase
    wrote vectors, the next one-file sync is still a journal scan, edit after edit."""
    from clawmem_core.testing import HashEmbedder

    ws = make_workspace(SAMPLE_FILES)
    mem = open_index(ws, embedder=HashEmbedder(), config=MemoryConfig())
    mem.fresh_budget = 60.0
    walks = Walks(mem)
    for _ in range(3):
        mem.sync()
    if mem._freshness.journal is None:
        pytest.skip("no inotify instance available")
    for i in range(3):
        n, scans = walks.count, mem._freshness.journal_scans
        edit(ws / "memory" / "2026-01-05.md", f"Visit {i}: the heron colony, 第{i}次看苍鹭。")
        report = mem.sync()
        assert report.files_indexed == 1 and report.vectors_completed >= 1
        assert walks.count == n and mem._freshness.journal_scans == scans + 1, f"edit {i} walked"
    assert paths(mem, "heron colony") == {"memory/2026-01-05.md"}
