"""Per-search freshness without a walk: a long-lived index trusts kernel change notifications
(``clawmem_core.journal``) and checks no file when none came, and still sees every change that
finished before a search started. When the journal cannot vouch (overflowed, closed, another
writer changed the index), the search walks the files as before."""

from __future__ import annotations

import os
import shutil
import time
import sys
from pathlib import Path
from typing import Any

import pytest

from clawmem_core import MemoryConfig, MemoryIndex

from .conftest import SAMPLE_FILES, IndexFactory, WorkspaceFactory

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the change journal is Linux inotify")


class Walks:
    """Counts the scans (walks of every memory file) an index runs."""

    def __init__(self, mem: MemoryIndex) -> None:
        self.count = 0
        scan = mem._syncer.scan

        def counting(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return scan(*args, **kwargs)

        mem._syncer.scan = counting  # type: ignore[method-assign]


def journal_running(mem: MemoryIndex) -> None:
    """Assert the index's change journal runs; skip when no inotify instance is left on this machine
    (``fs.inotify.max_user_instances`` used up by other processes)."""
    if mem._freshness.journal is None:
        from inotify_simple import INotify

        try:
            INotify().close()
        except OSError as exc:
            pytest.skip(f"no inotify instance available: {exc}")
    assert mem._freshness.journal is not None and mem._freshness.journal.healthy


def paths(mem: MemoryIndex, query: str) -> set[str]:
    return {h.path for h in mem.search(query)}


def trusting(ws: Path, open_index: IndexFactory, **kw: Any) -> tuple[MemoryIndex, Walks]:
    """A keyword-only index that has synced and searched twice: its journal runs and is trusted."""
    mem = open_index(ws, embedder=None, config=MemoryConfig(provider="none"), **kw)
    mem.fresh_budget = 60.0  # a loaded machine must not turn these into tests of speed
    mem.sync()
    walks = Walks(mem)
    mem.search("espresso")
    mem.search("espresso")  # the second search starts the journal, then walks once
    journal_running(mem)
    before = walks.count
    assert paths(mem, "espresso") == {"MEMORY.md"}
    assert walks.count == before  # trusted: no file checked
    return mem, walks


def test_edit_before_a_search_is_seen_through_the_journal(make_workspace: WorkspaceFactory,
                                                          open_index: IndexFactory) -> None:
    ws = make_workspace(SAMPLE_FILES)
    mem, walks = trusting(ws, open_index)
    with open(ws / "memory" / "2026-01-05.md", "a", encoding="utf-8") as fh:
        fh.write("The office mascot is a quokka named Pip.\n")
    hits = mem.search("quokka")  # no watcher, no sync(), no waiting
    assert [h.path for h in hits] == ["memory/2026-01-05.md"] and hits.stale is False
    n = walks.count
    assert paths(mem, "quokka") == {"memory/2026-01-05.md"} and walks.count == n  # trusted again
    # Chinese, rewritten in place with the old mtime put back: the journal still reports it
    target = ws / "MEMORY.md"
    old = target.stat()
    target.write_text("# Preferences\n\n我喜欢爵士乐和浓缩咖啡。\n", encoding="utf-8")
    os.utime(target, ns=(old.st_atime_ns, old.st_mtime_ns))
    assert paths(mem, "爵士乐") == {"MEMORY.md"}
    assert paths(mem, "espresso") == set()


def test_created_deleted_renamed_files_and_directories_are_seen(make_workspace: WorkspaceFactory,
                                                                open_index: IndexFactory) -> None:
    ws = make_workspace(SAMPLE_FILES)
    mem, walks = trusting(ws, open_index)
    (ws / "memory" / "2026-01-06.md").write_text("今天和小明玩成语接龙游戏。\n", encoding="utf-8")
    assert paths(mem, "成语") == {"memory/2026-01-06.md"}
    (ws / "memory" / "2026-01-06.md").rename(ws / "memory" / "idioms.md")
    assert paths(mem, "成语") == {"memory/idioms.md"}
    (ws / "memory" / "idioms.md").unlink()
    assert paths(mem, "成语") == set()
    # A new directory tree, and a file in it written at once: the journal watches it from the
    # search that saw the directory come, so a later edit inside it is seen too.
    deep = ws / "memory" / "trips" / "2026"
    deep.mkdir(parents=True)
    (deep / "lisbon.md").write_text("Lisbon trip: pasteis de nata.\n", encoding="utf-8")
    assert paths(mem, "lisbon") == {"memory/trips/2026/lisbon.md"}
    n = walks.count
    assert paths(mem, "lisbon") == {"memory/trips/2026/lisbon.md"} and walks.count == n
    (deep / "lisbon.md").write_text("Lisbon trip: the tram 28 and fado.\n", encoding="utf-8")
    assert paths(mem, "fado") == {"memory/trips/2026/lisbon.md"}
    # A directory renamed; a file moved in from outside memory; memory/ removed and recreated.
    (ws / "memory" / "trips").rename(ws / "memory" / "travel")
    assert paths(mem, "fado") == {"memory/travel/2026/lisbon.md"}
    (ws / "outside.md").write_text("The wombat note.\n", encoding="utf-8")
    assert paths(mem, "wombat") == set()  # not a memory file
    (ws / "outside.md").rename(ws / "memory" / "wombat.md")
    assert paths(mem, "wombat") == {"memory/wombat.md"}
    shutil.rmtree(ws / "memory")
    assert paths(mem, "wombat") == set()
    (ws / "memory").mkdir()
    (ws / "memory" / "back.md").write_text("The wombat came back.\n", encoding="utf-8")
    assert paths(mem, "wombat") == {"memory/back.md"}
    (ws / "memory" / "back.md").write_text("The echidna now.\n", encoding="utf-8")
    assert paths(mem, "echidna") == {"memory/back.md"}


def test_a_file_swapped_for_a_symlink_leaves_the_index(make_workspace: WorkspaceFactory, open_index: IndexFactory,
                                                       tmp_path: Path) -> None:
    ws = make_workspace(SAMPLE_FILES)
    mem, _ = trusting(ws, open_index)
    outside = tmp_path / "secret.md"
    outside.write_text("kubernetes secrets outside memory\n", encoding="utf-8")
    target = ws / "memory" / "2026-01-05.md"
    target.unlink()
    target.symlink_to(outside)
    assert paths(mem, "kubernetes") == set()


def test_other_files_do_not_cost_a_walk(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    ws = make_workspace(SAMPLE_FILES)
    mem, walks = trusting(ws, open_index)
    n = walks.count
    (ws / "memory" / ".2026-01-05.md.swp").write_bytes(b"editor swap")
    (ws / "notes.txt").write_text("not memory\n", encoding="utf-8")
    assert paths(mem, "espresso") == {"MEMORY.md"}
    assert walks.count == n


def inotify_queue_limit() -> int:
    """The kernel's inotify queue length (the test skips when it is unknown or too long to fill)."""
    try:
        limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    except (OSError, ValueError):
        pytest.skip("inotify queue limit unknown")
    if limit > 200_000:
        pytest.skip("inotify queue too long to overflow in a unit test")
    return limit


def overflow_the_queue(ws: Path, limit: int) -> None:
    """Fill the kernel's queue (alternating names: the kernel merges an event repeating the last
    one): an edit right after gets no event of its own, only the overflow marker."""
    noise = [ws / "memory" / "noise-a.txt", ws / "memory" / "noise-b.txt"]
    for p in noise:
        p.write_text("x", encoding="utf-8")
    for i in range(limit + 10):
        os.utime(noise[i % 2], ns=(i, i))


def test_an_overflowed_journal_falls_back_to_a_walk(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    limit = inotify_queue_limit()
    ws = make_workspace(SAMPLE_FILES)
    mem, walks = trusting(ws, open_index)
    overflow_the_queue(ws, limit)
    with open(ws / "memory" / "2026-01-05.md", "a", encoding="utf-8") as fh:
        fh.write("Quokka day.\n")
    n = walks.count
    assert paths(mem, "quokka") == {"memory/2026-01-05.md"}
    assert walks.count > n
    assert mem._freshness.journal is not None and mem._freshness.journal.healthy  # the watches survive an overflow
    n = walks.count
    assert paths(mem, "quokka") == {"memory/2026-01-05.md"} and walks.count == n


def test_a_dead_journal_falls_back_to_a_walk(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    ws = make_workspace(SAMPLE_FILES)
    mem, walks = trusting(ws, open_index)
    assert mem._freshness.journal is not None
    mem._freshness.journal._inotify.close()  # the notifications stop (closed under the index)
    with open(ws / "memory" / "2026-01-05.md", "a", encoding="utf-8") as fh:
        fh.write("Quokka day.\n")
    assert paths(mem, "quokka") == {"memory/2026-01-05.md"}
    assert not mem._freshness.journal.healthy
    n = walks.count
    (ws / "MEMORY.md").write_text("# Preferences\n\nbebop\n", encoding="utf-8")
    assert paths(mem, "bebop") == {"MEMORY.md"} and walks.count > n  # every search walks now


def test_a_missing_parent_directory_is_watched_from_above_and_its_creation_replans(make_workspace: WorkspaceFactory,
                                                                                  open_index: IndexFactory,
                                                                                  tmp_path: Path) -> None:
    """An extra path whose parent directory does not exist yet: the journal watches the nearest
    directory above it that exists, so the parent's creation re-plans the watches (the search
    walks once, and finds a note created there at once), and from then on searches trust the
    journal again (it used to stay unable to vouch, and every search walked)."""
    ws = make_workspace(SAMPLE_FILES)
    notes = tmp_path / "team" / "notes"
    mem = open_index(ws, embedder=None, config=MemoryConfig(provider="none", extra_paths=[str(notes)]))
    mem.fresh_budget = 60.0  # a loaded machine must not turn this into a test of speed
    mem.sync()
    walks = Walks(mem)
    for _ in range(3):  # the second search starts the journal
        assert paths(mem, "espresso") == {"MEMORY.md"}
    journal = mem._freshness.journal
    if journal is None:
        pytest.skip("no change journal here (no inotify instance left?)")
    assert journal.healthy
    n = walks.count
    assert paths(mem, "espresso") == {"MEMORY.md"} and walks.count == n  # trusted: no file checked
    notes.mkdir(parents=True)  # the parent, then the extra path, then a note: no watch on them yet
    (notes / "tapir.md").write_text("The tapir sleeps by the river. 貘在河边睡觉。\n", encoding="utf-8")
    assert paths(mem, "tapir") == {"../team/notes/tapir.md"}
    assert walks.count > n  # re-planned, so walked
    assert journal.healthy
    n = walks.count
    assert paths(mem, "貘") == {"../team/notes/tapir.md"} and walks.count == n  # trusted again
    (notes / "tapir.md").write_text("The okapi sleeps by the river now.\n", encoding="utf-8")
    assert paths(mem, "okapi") == {"../team/notes/tapir.md"}  # an edit there is seen through the watches
    assert paths(mem, "tapir") == set()
    # the same for a sync: a sync the journal vouches for checks only the changed file
    scans = mem._freshness.journal_scans
    (notes / "tapir.md").write_text("The tapir is back.\n", encoding="utf-8")
    n = walks.count
    report = mem.sync()
    assert report.files_indexed == 1 and walks.count == n and mem._freshness.journal_scans == scans + 1
    assert paths(mem, "tapir") == {"../team/notes/tapir.md"}


def test_a_running_watcher_inside_its_debounce_does_not_hide_an_edit(make_workspace: WorkspaceFactory,
                                                                     open_index: IndexFactory) -> None:
    ws = make_workspace(SAMPLE_FILES)
    cfg = MemoryConfig.from_dict({"provider": "none", "sync": {"watch_debounce_ms": 60_000}})
    mem = open_index(ws, embedder=None, config=cfg)
    mem.fresh_budget = 60.0
    mem.sync()
    watcher = mem.watch()
    try:
        mem.search("espresso")
        mem.search("espresso")
        (ws / "MEMORY.md").write_text("# Preferences\n\nI like bebop now.\n", encoding="utf-8")
        hits = mem.search("bebop")  # the watcher's sync waits a minute; the search does not
        assert [h.path for h in hits] == ["MEMORY.md"] and hits.stale is False
    finally:
        watcher.stop()


def test_a_write_by_another_index_on_the_same_store_is_not_trusted_away(make_workspace: WorkspaceFactory,
                                                                        open_index: IndexFactory) -> None:
    ws = make_workspace(SAMPLE_FILES)
    mem, walks = trusting(ws, open_index)
    other = open_index(ws, embedder=None, config=MemoryConfig(provider="none"))
    assert other.store_path == mem.store_path
    # Another instance (or process) writes the index without any change to the Markdown: the
    # journal saw nothing, but what this index knew about the files no longer holds.
    other._stores.writer_store().delete_files("memory", ["MEMORY.md"])
    n = walks.count
    assert paths(mem, "espresso") == {"MEMORY.md"}  # walked, found it missing, synced it back
    assert walks.count > n


@pytest.mark.parametrize("journal", [True, False])
def test_cached_file_states_follow_a_sync_by_another_index(make_workspace: WorkspaceFactory,
                                                           open_index: IndexFactory, journal: bool) -> None:
    """The file states a scan compares with are kept per data version of the index: a sync by
    another instance on the same store replaces them (with or without the journal)."""
    ws = make_workspace(SAMPLE_FILES)
    cfg = MemoryConfig(provider="none")
    mem = open_index(ws, embedder=None, config=cfg)
    mem.change_journal = journal
    mem.fresh_budget = 60.0
    mem.sync()
    for _ in range(3):
        assert paths(mem, "kubernetes") == {"memory/2026-01-05.md"}  # the states are cached
    other = open_index(ws, embedder=None, config=cfg)
    (ws / "memory" / "ghost.md").write_text("A ghost note about kubernetes.\n", encoding="utf-8")
    other.sync()  # the other instance indexes the new file ...
    (ws / "memory" / "ghost.md").unlink()  # ... which is gone again before this index searches
    assert paths(mem, "kubernetes") == {"memory/2026-01-05.md"}
    assert paths(other, "kubernetes") == {"memory/2026-01-05.md"}


def test_closing_the_index_closes_the_journal(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    ws = make_workspace(SAMPLE_FILES)
    mem, _ = trusting(ws, open_index)
    journal = mem._freshness.journal
    assert journal is not None
    mem.close()
    assert not journal.healthy and journal._inotify.closed


def test_file_system_type_reads_the_mount_holding_a_path(tmp_path: Path) -> None:
    from clawmem_core.journal import file_system_type

    info = tmp_path / "mountinfo"
    info.write_text("27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
                    "40 27 0:50 / /mnt/team\\040notes rw,relatime shared:1 - nfs4 srv:/notes rw\n"
                    "41 27 0:51 / /mnt/fuse rw - fuse.sshfs host:/ rw\n", encoding="utf-8")
    assert file_system_type("/mnt/team notes/ws/memory", str(info)) == "nfs4"
    assert file_system_type("/mnt/team notesX", str(info)) == "ext4"
    assert file_system_type("/mnt/fuse", str(info)) == "fuse.sshfs"
    assert file_system_type("/home/me", str(tmp_path / "missing")) is None


def test_no_journal_on_a_shared_file_system(make_workspace: WorkspaceFactory, open_index: IndexFactory,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Another machine's edits on NFS raise no inotify event here: such a workspace is walked."""
    import clawmem_core.journal as journal

    monkeypatch.setattr(journal, "file_system_type", lambda path: "nfs4")
    ws = make_workspace(SAMPLE_FILES)
    mem = open_index(ws, embedder=None, config=MemoryConfig(provider="none"))
    mem.sync()
    walks = Walks(mem)
    for _ in range(3):
        assert paths(mem, "espresso") == {"MEMORY.md"}
    assert mem._freshness.journal is None and walks.count == 3


def _age(ws: Path, seconds: float = 3600.0) -> None:
    """Make every file and directory of ``ws`` look last modified ``seconds`` ago (their ctimes
    become now: the listings' racy margin is shortened to 50 ms below, and waited for)."""
    old = time.time() - seconds
    for dirpath, _dirs, names in os.walk(ws):
        for name in names:
            os.utime(os.path.join(dirpath, name), (old, old))
        os.utime(dirpath, (old, old))
    time.sleep(0.1)


def test_walk_reuses_unchanged_directory_listings_and_sees_every_change(make_workspace: WorkspaceFactory,
                                                                        open_index: IndexFactory,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the journal a search stats every file but lists a directory again only when its
    mtime or ctime moved: created, deleted and renamed files are seen, even with the directory's
    old mtime put back."""
    import clawmem_core.discovery as discovery

    listed: list[str] = []
    real = discovery._list_dir
    monkeypatch.setattr(discovery, "_list_dir", lambda d: listed.append(d) or real(d))
    monkeypatch.setattr(discovery, "_RACY_LISTING_NS", 50_000_000)
    ws = make_workspace(SAMPLE_FILES)
    _age(ws)
    mem = open_index(ws, embedder=None, config=MemoryConfig(provider="none"))
    mem.change_journal = False
    mem.fresh_budget = 60.0
    mem.sync()
    assert paths(mem, "kubernetes") == {"memory/2026-01-05.md"}
    listed.clear()
    assert paths(mem, "kubernetes") == {"memory/2026-01-05.md"}
    assert listed == []  # memory/ and memory/projects/ were not listed again
    day = ws / "memory"
    old = day.stat()
    (day / "2026-01-06.md").write_text("今天和小明玩成语接龙游戏。\n", encoding="utf-8")
    os.utime(day, ns=(old.st_atime_ns, old.st_mtime_ns))  # the directory's mtime put back
    assert paths(mem, "成语") == {"memory/2026-01-06.md"}
    _age(ws)
    mem.sync()
    assert paths(mem, "成语") == {"memory/2026-01-06.md"}
    (day / "2026-01-06.md").rename(day / "projects" / "idioms.md")
    assert paths(mem, "成语") == {"memory/projects/idioms.md"}
    _age(ws)
    mem.sync()
    (day / "projects" / "idioms.md").unlink()
    assert paths(mem, "成语") == set()
    listed.clear()
    (day / "projects" / "roadmap.md").write_text("# Roadmap\n\nShip the quokka feature.\n", encoding="utf-8")
    assert paths(mem, "quokka") == {"memory/projects/roadmap.md"}  # an edit in place: per-file stats


class _Stepped:
    """Wraps a :class:`HashEmbedder` so that the background vector phase embeds one group of
    chunks each time the test calls :meth:`step` (searches are never held up)."""

    def __init__(self, mem: MemoryIndex, emb: Any) -> None:
        import threading

        self.mem = mem
        self.gate = threading.Semaphore(0)
        embed = emb._embed_documents

        def gated(texts: list[str]) -> list[list[float]]:
            if threading.current_thread().name == "clawmem-sync":
                assert self.gate.acquire(timeout=60)
            return embed(texts)

        emb._embed_documents = gated

    def done(self) -> int:
        return self.mem._store.vector_counts().done

    def step(self) -> None:
        """Let one group through and wait until its vectors are committed."""
        before = self.done()
        self.gate.release()
        for _ in range(6000):
            if self.done() > before:
                return
            time.sleep(0.01)
        raise AssertionError("the vector phase wrote nothing")


_MANY = {"MEMORY.md": "# Preferences\n\nI like espresso.\n",
         **{f"memory/notes/n{i:02d}.md": f"Note {i}: the {i}th topic, 第{i}个话题。\n" for i in range(70)}}


@pytest.mark.parametrize("writer", ["another index", "another process"])
def test_the_vector_phase_costs_no_walk_but_another_writer_still_does(store_config: dict[str, Any],
                                                                      make_workspace: WorkspaceFactory,
                                                                      open_index: IndexFactory, state_dir: Path,
                                                                      writer: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Vectors made in the background move the store's data version; they are this index's own
    writes (vectors, never a file's state), so searches keep trusting the journal while they
    land. A write by anyone else in the meantime is still seen and walked for. On SQLite and on
    PostgreSQL (where the other writer may be another host's index of the same agent)."""
    from clawmem_core.store.base import Store
    from clawmem_core.store.postgres import PostgresStore
    from clawmem_core.testing import HashEmbedder

    for cls in (Store, PostgresStore):  # groups stay at 16 however quick: each step is one group
        monkeypatch.setattr(cls, "vector_group_max", 16)
    ws = make_workspace(_MANY)
    emb = HashEmbedder()
    config = MemoryConfig.from_dict({"store": store_config})
    mem = open_index(ws, embedder=emb, config=config)
    stepped = _Stepped(mem, emb)
    mem.fresh_budget = 60.0
    try:
        mem.sync(vectors=False)
        walks = Walks(mem)
        for _ in range(3):  # starts the journal and the (held) background vector phase
            assert paths(mem, "espresso") == {"MEMORY.md"}
        if mem._freshness.journal is None:
            pytest.skip("no inotify instance available")
        total = mem._store.vector_counts().total
        stepped.step()
        assert paths(mem, "espresso") == {"MEMORY.md"}  # one walk marks the vector phase's handle
        n = walks.count
        for _ in range(3):
            stepped.step()
            assert paths(mem, "咖啡") == set() and paths(mem, "第3个话题") >= {"memory/notes/n03.md"}
        assert walks.count == n, "the index's own vectors cost a walk"
        assert 0 < stepped.done() < total  # still in the vector phase
        # someone else writes the index (no change to the Markdown): seen, walked for, repaired
        if writer == "another index":
            other = open_index(ws, config=config)
            other._stores.writer_store().delete_files("memory", ["MEMORY.md"])
        else:
            import json
            import subprocess

            code = ("import json, sys; from clawmem_core import MemoryIndex; from clawmem_core.testing import HashEmbedder; "
                    "m = MemoryIndex(sys.argv[1], agent_id='main', embedder=HashEmbedder(), state_dir=sys.argv[2], "
                    "config=json.loads(sys.argv[3])); m._stores.writer_store().delete_files('memory', ['MEMORY.md']); m.close()")
            subprocess.run([sys.executable, "-c", code, str(ws), str(state_dir), json.dumps({"store": store_config})],
                           check=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        stepped.step()  # the vector phase goes on meanwhile
        assert paths(mem, "espresso") == {"MEMORY.md"}
        assert walks.count > n
    finally:
        stepped.gate.release(1000)
