"""Memory that stays fresh: watcher-driven syncs, deletions, debounced bursts, large trees, session transcripts
with delta thresholds and secret masking, immediate writes and concurrent writers. Real files, a real index."""

from __future__ import annotations

import json
import multiprocessing
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from clawmem_core import MemoryConfig, MemoryIndex
from clawmem_core.errors import PathNotAllowedError
from clawmem_core.results import SyncReport

DEBOUNCE_MS = 200
WAIT = 8.0


class CountingIndex(MemoryIndex):
    """A ``MemoryIndex`` that records the reports of its syncs, by reason."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reports: list[SyncReport] = []
        self._count_lock = threading.Lock()

    def sync(self, force: bool = False, progress: Any = None, *, reason: str = "manual") -> SyncReport:
        report = super().sync(force, progress, reason=reason)
        with self._count_lock:
            self.reports.append(report)
        return report

    def count(self, reason: str) -> int:
        with self._count_lock:
            return sum(1 for r in self.reports if r.reason == reason)


def _config(**extra: Any) -> MemoryConfig:
    data: dict[str, Any] = {"provider": "none", "sync": {"watch_debounce_ms": DEBOUNCE_MS, "on_search": False}}
    data.update(extra)
    return MemoryConfig.from_dict(data)


def wait_until(predicate: Callable[[], bool], timeout: float = WAIT) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def paths_for(mem: MemoryIndex, query: str) -> set[str]:
    return {h.path for h in mem.search(query)}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Memory\n\n- Dana prefers green tea.\n", encoding="utf-8")
    (ws / "memory" / "notes.md").write_text("# Notes\n\n- The build server is called hopper.\n", encoding="utf-8")
    return ws


@pytest.fixture
def watched(tmp_path: Path, workspace: Path) -> Iterator[CountingIndex]:
    mem = CountingIndex(workspace, config=_config(), state_dir=tmp_path / "state")
    mem.watch()  # before the first sync, so no edit falls between the two
    mem.sync()
    yield mem
    mem.close()


# ------------------------------------------------------------------------------------------------------------
# Watching Markdown
# ------------------------------------------------------------------------------------------------------------


def test_edit_is_searchable_after_the_watchers_sync(watched: CountingIndex, workspace: Path) -> None:
    # Searches do not sync here (sync.on_search off): the edit is found because the watcher's own sync indexed
    # it. How soon is measured by ``python -m bench.latency``; the wait below only guards against a hang.
    assert paths_for(watched, "hopper") == {"memory/notes.md"}
    assert not paths_for(watched, "quokka")
    seen = len(watched.reports)
    with open(workspace / "memory" / "notes.md", "a", encoding="utf-8") as handle:
        handle.write("- The office mascot is a quokka named Pip.\n")
    assert wait_until(lambda: any(r.reason == "watch" and r.files_indexed == 1 for r in watched.reports[seen:]), 30)
    assert paths_for(watched, "quokka mascot") == {"memory/notes.md"}
    assert {r.reason for r in watched.reports[seen:]} == {"watch"}  # no other sync brought it in
    # A new file in a new subdirectory, and the long-term file.
    (workspace / "memory" / "people").mkdir()
    (workspace / "memory" / "people" / "priya.md").write_text("Priya runs the ferret rescue.\n", encoding="utf-8")
    (workspace / "MEMORY.md").write_text("# Memory\n\n- Dana prefers oolong now.\n", encoding="utf-8")
    assert wait_until(lambda: paths_for(watched, "ferret rescue") == {"memory/people/priya.md"})
    assert wait_until(lambda: paths_for(watched, "oolong") == {"MEMORY.md"})
    assert wait_until(lambda: not paths_for(watched, "green tea"))


def test_deleting_a_file_removes_its_results(watched: CountingIndex, workspace: Path) -> None:
    assert paths_for(watched, "hopper") == {"memory/notes.md"}
    (workspace / "memory" / "notes.md").unlink()
    assert wait_until(lambda: not paths_for(watched, "hopper"))
    assert watched.status().files == 1
    # Removing a whole directory removes everything under it.
    (workspace / "memory" / "trip").mkdir()
    (workspace / "memory" / "trip" / "a.md").write_text("Lisbon offsite at Hotel Avenida.\n", encoding="utf-8")
    assert wait_until(lambda: paths_for(watched, "Avenida") == {"memory/trip/a.md"})
    (workspace / "memory" / "trip" / "a.md").unlink()
    (workspace / "memory" / "trip").rmdir()
    assert wait_until(lambda: not paths_for(watched, "Avenida"))


def test_burst_of_writes_gives_a_handful_of_syncs(watched: CountingIndex, workspace: Path) -> None:
    before = watched.count("watch")
    target = workspace / "memory" / "burst.md"
    for i in range(100):
        with open(target, "a", encoding="utf-8") as handle:
            handle.write(f"- burst line {i:03d} token{i:03d}\n")
    assert wait_until(lambda: paths_for(watched, "token099") == {"memory/burst.md"})
    time.sleep(3 * DEBOUNCE_MS / 1000)  # let a trailing sync arrive
    syncs = watched.count("watch") - before
    assert 1 <= syncs <= 6, f"{syncs} syncs for a burst of 100 writes"
    text = "\n".join(h.snippet for h in watched.search("burst line", max_results=50))
    assert "token000" in text


def test_large_tree_under_an_extra_path(tmp_path: Path, workspace: Path) -> None:
    extra = tmp_path / "vault"
    for i in range(200):
        for j in range(100):
            os.makedirs(extra / f"d{i:03d}" / f"s{j:03d}")
    (extra / "d000" / "s000" / "seed.md").write_text("Seed note about the lighthouse.\n", encoding="utf-8")
    mem = CountingIndex(workspace, config=_config(extra_paths=[str(extra)]), state_dir=tmp_path / "state")
    try:
        watcher = mem.watch()
        mem.sync()
        assert watcher.running
        assert paths_for(mem, "lighthouse") == {"../vault/d000/s000/seed.md"}
        deep = extra / "d199" / "s099" / "deep.md"
        deep.write_text("The walrus keeps the spare keys.\n", encoding="utf-8")
        assert wait_until(lambda: paths_for(mem, "walrus spare keys") == {"../vault/d199/s099/deep.md"}, timeout=15)
        assert watcher.running
    finally:
        mem.close()


# ------------------------------------------------------------------------------------------------------------
# Session transcripts
# ------------------------------------------------------------------------------------------------------------

API_KEY = "sk-proj-abcdefghijklmnopqrstuvwx1234"


def _record(role: str, text: str) -> str:
    return json.dumps({"type": "message", "message": {"role": role, "content": [{"type": "text", "text": text}]}})


def _append(path: Path, lines: list[str]) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("".join(line + "\n" for line in lines))


@pytest.fixture
def sessions_index(tmp_path: Path, workspace: Path) -> Iterator[tuple[MemoryIndex, Path]]:
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    transcript = sessions / "chat-1.jsonl"
    _append(
        transcript,
        [
            json.dumps({"type": "session", "id": "chat-1"}),
            _record("user", "Which planetarium did we visit?"),
            json.dumps({"type": "custom", "data": "ignored"}),
            _record("assistant", f"The Zeiss planetarium. My key is {API_KEY} by the way."),
        ],
    )
    cfg = _config(
        sources=["memory", "sessions"],
        experimental={"session_memory": True},
        sync={"watch_debounce_ms": DEBOUNCE_MS, "on_search": False, "sessions": {"delta_bytes": 4000, "delta_messages": 5}},
    )
    mem = MemoryIndex(workspace, config=cfg, state_dir=tmp_path / "state", sessions_dir=sessions)
    mem.sync()
    yield mem, transcript
    mem.close()


def test_transcript_indexed_with_jsonl_lines_and_masked(sessions_index: tuple[MemoryIndex, Path]) -> None:
    mem, _ = sessions_index
    hits = mem.search("Zeiss planetarium")
    assert hits and hits[0].path == "sessions/chat-1.jsonl" and hits[0].source == "sessions"
    assert (hits[0].start_line, hits[0].end_line) == (2, 4)  # JSONL lines, not message lines
    with pytest.raises(PathNotAllowedError):
        mem.read("sessions/chat-1.jsonl")
    with sqlite3.connect(mem.store_path) as conn:
        texts = [row[0] for row in conn.execute("SELECT text FROM chunks WHERE source = 'sessions'")]
    assert texts and "Zeiss planetarium" in texts[0]
    assert all(API_KEY not in t for t in texts)
    assert "sk-pro" in texts[0]  # masked, not dropped
    assert not paths_for(mem, "abcdefghijklmnopqrstuvwx1234")  # the hidden middle is not searchable


def test_transcript_delta_thresholds(sessions_index: tuple[MemoryIndex, Path]) -> None:
    mem, transcript = sessions_index
    # Growth below the thresholds (2 lines < 5, bytes < 4000): an automatic sync leaves the index as it was.
    _append(transcript, [_record("user", "Remember the narwhal sticker."), _record("assistant", "Noted.")])
    assert mem.notify_session_update(transcript) is False
    mem.sync(reason="search")
    assert not paths_for(mem, "narwhal")
    # Crossing the message threshold: the transcript is re-indexed by the automatic sync.
    _append(transcript, [_record("user", f"Filler {i}.") for i in range(3)])
    assert mem.notify_session_update(transcript) is True
    mem.sync(reason="search")
    hits = mem.search("narwhal sticker")
    assert hits and hits[0].path == "sessions/chat-1.jsonl" and (hits[0].start_line, hits[0].end_line) == (2, 9)
    # Small growth again, then a forced re-index after compaction.
    _append(transcript, [_record("user", "The axolotl is called Gus.")])
    assert mem.notify_session_update(transcript) is False
    mem.sync(reason="search")
    assert not paths_for(mem, "axolotl")
    mem.sync_sessions([transcript])
    assert paths_for(mem, "axolotl Gus") == {"sessions/chat-1.jsonl"}


def test_transcript_byte_threshold_crossed(sessions_index: tuple[MemoryIndex, Path]) -> None:
    mem, transcript = sessions_index
    _append(transcript, [_record("user", "The capybara visits on Fridays. " + "padding " * 600)])
    assert mem.notify_session_update(transcript) is True  # one line, but over 4000 bytes
    mem.sync(reason="search")
    assert paths_for(mem, "capybara Fridays") == {"sessions/chat-1.jsonl"}


# ------------------------------------------------------------------------------------------------------------
# Writing
# ------------------------------------------------------------------------------------------------------------


def test_write_is_searchable_immediately(tmp_path: Path, workspace: Path) -> None:
    with MemoryIndex(workspace, config=_config(), state_dir=tmp_path / "state") as mem:
        mem.sync()
        result = mem.write("- The espresso machine code is 4711.")
        assert paths_for(mem, "espresso machine") == {result.relative_to(workspace)}
        long_term = mem.write("- Dana's birthday is 3 June.", target="long_term")
        assert long_term.relative_to(workspace) == "MEMORY.md"
        assert paths_for(mem, "birthday June") == {"MEMORY.md"}


WRITES_PER_PROCESS = 25


def _process_writer(workspace: str, state_dir: str, writer: int, start: Any, out: Any) -> None:
    mem = MemoryIndex(workspace, config=_config(), state_dir=state_dir)
    try:
        start.wait()
        for i in range(WRITES_PER_PROCESS):
            mem.write(f"- writer{writer} note{i:02d} zebra{writer}x{i:02d}")
    finally:
        mem.close()
    out.put(writer)


def test_two_processes_writing_lose_no_line(tmp_path: Path, workspace: Path) -> None:
    state = tmp_path / "state"
    with MemoryIndex(workspace, config=_config(), state_dir=state) as mem:
        mem.sync()
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(2)  # both processes write at once, however long each takes to start
    out = ctx.Queue()
    procs = [ctx.Process(target=_process_writer, args=(str(workspace), str(state), w, start, out)) for w in (1, 2)]
    for proc in procs:
        proc.start()
    done = sorted(out.get(timeout=180) for _ in procs)
    for proc in procs:
        proc.join(timeout=30)
        assert proc.exitcode == 0
    assert done == [1, 2]
    daily = next((workspace / "memory").glob("20*.md"))
    notes = [line for line in daily.read_text(encoding="utf-8").splitlines() if line.startswith("- writer")]
    expected = sorted(f"- writer{w} note{i:02d} zebra{w}x{i:02d}" for w in (1, 2) for i in range(WRITES_PER_PROCESS))
    assert sorted(notes) == expected
    with MemoryIndex(workspace, config=_config(), state_dir=state) as mem:
        # Every note is in the index already: each write synced before returning.
        with sqlite3.connect(mem.store_path) as conn:
            indexed = "\n".join(row[0] for row in conn.execute("SELECT text FROM chunks WHERE source = 'memory'"))
        assert all(f"zebra{w}x{i:02d}" in indexed for w in (1, 2) for i in range(WRITES_PER_PROCESS))
        assert paths_for(mem, "zebra2x24") == {daily.relative_to(workspace).as_posix()}


def test_a_change_noticed_during_a_sync_is_not_lost(tmp_path: Path) -> None:
    """A change notice that arrives while a sync runs keeps the index dirty, so the next
    trigger syncs again instead of forgetting it."""
    from clawmem_core import MemoryIndex
    from clawmem_core.testing import HashEmbedder

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "a.md").write_text("alpha note\n")
    holder: dict[str, MemoryIndex] = {}

    class NoticingEmbedder(HashEmbedder):
        def _embed_documents(self, texts: list[str]) -> list[list[float]]:
            (ws / "memory" / "b.md").write_text("bravo note written mid-sync\n")
            holder["mem"].mark_dirty()
            return super()._embed_documents(texts)

    with MemoryIndex(ws, embedder=NoticingEmbedder(), state_dir=tmp_path / "s") as mem:
        holder["mem"] = mem
        mem.sync()
        assert mem.dirty
        mem.sync()
        assert any(h.path == "memory/b.md" for h in mem.search("bravo", min_score=0))
