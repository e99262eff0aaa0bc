"""The memory watcher with real files and the real watchfiles backend."""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import pytest

from clawmem_core.watcher import DEFAULT_IGNORED_DIRS, MemoryWatcher, is_ignored, workspace_watch_paths

DEBOUNCE_MS = 200


class Recorder:
    """Collects callback batches and lets a test wait for a condition on them."""

    def __init__(self, fail_first: int = 0) -> None:
        self.batches: list[set[Path]] = []
        self._cond = threading.Condition()
        self._fail_first = fail_first

    def __call__(self, paths: set[Path]) -> None:
        with self._cond:
            self.batches.append(paths)
            self._cond.notify_all()
        if self._fail_first > 0:
            self._fail_first -= 1
            raise RuntimeError("callback failure")

    @property
    def seen(self) -> set[Path]:
        with self._cond:
            return set().union(*self.batches) if self.batches else set()

    def wait_for(self, predicate: Callable[[set[Path]], bool], timeout: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(set().union(*self.batches) if self.batches else set()):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    def wait_path(self, path: Path, timeout: float = 5.0) -> bool:
        target = Path(os.path.realpath(path))
        return self.wait_for(lambda seen: target in seen, timeout)


@pytest.fixture()
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Memory\n")
    (ws / "memory" / "2026-03-01.md").write_text("# 2026-03-01\n")
    return Path(os.path.realpath(ws))


def test_edit_is_reported_once_by_native_notification(workspace: Path) -> None:
    # How soon is measured by ``python -m bench.latency``; here: the kernel's notification (not polling) reports
    # the edited file, alone, in one callback.
    rec = Recorder()
    target = workspace / "memory" / "2026-03-01.md"
    with MemoryWatcher.for_workspace(workspace, rec, debounce_ms=DEBOUNCE_MS) as watcher:
        assert not watcher.polling
        with open(target, "a") as handle:
            handle.write("new line\n")
        assert rec.wait_path(target, timeout=30)
    assert rec.batches == [{target}] and watcher.callback_count == 1


def test_long_term_file_edit_and_creation(workspace: Path) -> None:
    rec = Recorder()
    with MemoryWatcher.for_workspace(workspace, rec, debounce_ms=DEBOUNCE_MS):
        (workspace / "MEMORY.md").write_text("# Memory\nfact\n")
        (workspace / "memory.md").write_text("lowercase\n")
        (workspace / "README.md").write_text("not memory\n")
        assert rec.wait_for(lambda s: {workspace / "MEMORY.md", workspace / "memory.md"} <= s)
    assert workspace / "README.md" not in rec.seen


def test_delete_is_reported(workspace: Path) -> None:
    rec = Recorder()
    with MemoryWatcher.for_workspace(workspace, rec, debounce_ms=DEBOUNCE_MS):
        (workspace / "memory" / "2026-03-01.md").unlink()
        assert rec.wait_path(workspace / "memory" / "2026-03-01.md")


def test_burst_of_writes_is_debounced(workspace: Path) -> None:
    rec = Recorder()
    target = workspace / "memory" / "burst.md"
    with MemoryWatcher.for_workspace(workspace, rec, debounce_ms=DEBOUNCE_MS):
        for i in range(100):
            with open(target, "a") as handle:
                handle.write(f"line {i}\n")
        assert rec.wait_path(target)
        time.sleep(3 * DEBOUNCE_MS / 1000)  # let any trailing callback arrive
    assert 1 <= len(rec.batches) <= 5


def test_only_markdown_outside_ignored_dirs_is_reported(workspace: Path) -> None:
    rec = Recorder()
    memory = workspace / "memory"
    with MemoryWatcher.for_workspace(workspace, rec, debounce_ms=DEBOUNCE_MS):
        (memory / "notes.txt").write_text("x")
        (memory / "node_modules" / "pkg").mkdir(parents=True)
        (memory / "node_modules" / "pkg" / "README.md").write_text("x")
        (memory / ".git").mkdir()
        (memory / ".git" / "x.md").write_text("x")
        (memory / "project").mkdir()
        (memory / "project" / "notes.md").write_text("x")
        assert rec.wait_path(memory / "project" / "notes.md")
        time.sleep(2 * DEBOUNCE_MS / 1000)
    seen = rec.seen
    assert memory / "notes.txt" not in seen
    assert not any("node_modules" in p.parts or ".git" in p.parts for p in seen)


def test_memory_dir_created_after_start(tmp_path: Path) -> None:
    ws = Path(os.path.realpath(tmp_path))
    rec = Recorder()
    with MemoryWatcher.for_workspace(ws, rec, debounce_ms=DEBOUNCE_MS) as watcher:
        assert watcher.watched["recursive"] == []
        (ws / "memory" / "sub").mkdir(parents=True)
        (ws / "memory" / "sub" / "first.md").write_text("x")
        assert rec.wait_path(ws / "memory" / "sub" / "first.md")
        assert watcher.watched["recursive"] == [ws / "memory"]
        (ws / "memory" / "second.md").write_text("x")
        assert rec.wait_path(ws / "memory" / "second.md")


def test_memory_dir_removed_and_recreated(workspace: Path) -> None:
    rec = Recorder()
    with MemoryWatcher.for_workspace(workspace, rec, debounce_ms=DEBOUNCE_MS):
        shutil.rmtree(workspace / "memory")
        assert rec.wait_for(lambda s: workspace / "memory" in s or workspace / "memory" / "2026-03-01.md" in s)
        (workspace / "memory").mkdir()
        (workspace / "memory" / "again.md").write_text("x")
        assert rec.wait_path(workspace / "memory" / "again.md")


def test_extra_paths_directory_and_single_file(tmp_path: Path, workspace: Path) -> None:
    notes = tmp_path / "notes"
    (notes / "deep" / "er").mkdir(parents=True)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "one.md").write_text("x")
    (docs / "other.md").write_text("x")
    rec = Recorder()
    extras = [str(notes), str(docs / "one.md")]
    with MemoryWatcher.for_workspace(workspace, rec, extras, debounce_ms=DEBOUNCE_MS):
        (docs / "other.md").write_text("changed")
        (notes / "deep" / "er" / "n.md").write_text("x")
        (docs / "one.md").write_text("changed")
        assert rec.wait_for(lambda s: {notes / "deep" / "er" / "n.md", docs / "one.md"} <= s)
        time.sleep(2 * DEBOUNCE_MS / 1000)
    assert docs / "other.md" not in rec.seen


def test_sessions_dir_jsonl(tmp_path: Path, workspace: Path) -> None:
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    rec = Recorder()
    with MemoryWatcher.for_workspace(workspace, rec, sessions_dir=sessions, debounce_ms=DEBOUNCE_MS):
        (sessions / "sessions.json").write_text("{}")
        (sessions / "abc.jsonl").write_text('{"type":"message"}\n')
        assert rec.wait_path(sessions / "abc.jsonl")
        time.sleep(2 * DEBOUNCE_MS / 1000)
    assert sessions / "sessions.json" not in rec.seen


def test_callback_exception_does_not_kill_the_thread(workspace: Path, caplog: pytest.LogCaptureFixture) -> None:
    rec = Recorder(fail_first=1)
    with MemoryWatcher.for_workspace(workspace, rec, debounce_ms=DEBOUNCE_MS) as watcher:
        (workspace / "memory" / "a.md").write_text("x")
        assert rec.wait_path(workspace / "memory" / "a.md")
        time.sleep(2 * DEBOUNCE_MS / 1000)
        (workspace / "memory" / "b.md").write_text("x")
        assert rec.wait_path(workspace / "memory" / "b.md")
        assert watcher.running and watcher.error_count == 1
    assert "on_change callback failed" in caplog.text


def test_stop_joins_the_thread_and_is_restartable(workspace: Path) -> None:
    # How soon stop() returns is measured by ``python -m bench.latency``; the timeout only guards against a hang.
    watcher = MemoryWatcher.for_workspace(workspace, Recorder(), debounce_ms=DEBOUNCE_MS).start()
    with pytest.raises(RuntimeError):
        watcher.start()
    thread = watcher._thread
    assert thread is not None and thread.is_alive()
    watcher.stop(timeout=30)
    assert not thread.is_alive() and not watcher.running and watcher._notifiers == {}
    rec = Recorder()
    watcher._on_change = rec
    watcher.start()  # restartable, and watching again
    (workspace / "memory" / "after.md").write_text("x")
    assert rec.wait_path(workspace / "memory" / "after.md", timeout=30)
    watcher.stop(timeout=30)
    assert not watcher.running


def test_symlinked_extra_dir_is_skipped(tmp_path: Path, workspace: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    with MemoryWatcher.for_workspace(workspace, Recorder(), [str(link)], debounce_ms=DEBOUNCE_MS) as watcher:
        assert real not in watcher.watched["recursive"] and link not in watcher.watched["recursive"]


def test_ignore_rules_match_openclaw() -> None:
    assert is_ignored("/ws/node_modules/pkg/README.md")
    assert is_ignored("/ws/memory/.venv/lib/x.md")
    assert is_ignored("/ws/memory/Node_Modules/x.md")
    assert not is_ignored("memory/project/notes.md")
    assert {".git", "node_modules", ".pnpm-store", ".venv", "venv", ".tox", "__pycache__"} == DEFAULT_IGNORED_DIRS


def test_workspace_watch_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTES_HOME", str(tmp_path / "env-notes"))
    paths = workspace_watch_paths(tmp_path, ["extra", "$NOTES_HOME", " ", "~/x.md"])
    assert paths[:3] == [tmp_path / "MEMORY.md", tmp_path / "memory.md", tmp_path / "memory"]
    assert paths[3:] == [tmp_path / "extra", tmp_path / "env-notes", Path(os.path.expanduser("~/x.md"))]


@pytest.mark.skipif(sys.platform != "linux", reason="counts file descriptors through /proc")
def test_large_tree_is_watched_without_exhausting_descriptors(tmp_path: Path, workspace: Path) -> None:
    big = tmp_path / "big"
    for i in range(200):
        for j in range(100):
            os.makedirs(big / f"d{i:03d}" / f"e{j:03d}")
    assert sum(1 for _ in big.glob("*/*")) == 20_000
    fds_before = len(os.listdir("/proc/self/fd"))
    rec = Recorder()  # the setup time of such a tree is measured by ``python -m bench.latency``
    with MemoryWatcher.for_workspace(workspace, rec, [str(big)], debounce_ms=DEBOUNCE_MS) as watcher:
        assert not watcher.polling
        assert len(os.listdir("/proc/self/fd")) - fds_before < 20  # one inotify instance, not one fd per dir
        deep = big / "d150" / "e077" / "deep.md"
        deep.write_text("x")
        assert rec.wait_path(deep, timeout=5)
        (big / "d000" / "e000" / "first.md").write_text("x")
        assert rec.wait_path(big / "d000" / "e000" / "first.md", timeout=5)
