"""``clawmem search`` hands its walk to the next one (``<index>.walk``, :mod:`clawmem_core.walk_snapshot`):
the next search answers from it only while it provably holds, and every edit that finished before a
search started is still found (SPEC 6)."""

from __future__ import annotations

import marshal
import os
import time
from pathlib import Path

import pytest

from clawmem_core import MemoryConfig, MemoryIndex, walk_snapshot
from clawmem_core.cli import main
from clawmem_core.walk_snapshot import WalkSnapshot

from .conftest import WorkspaceFactory

HOUR_AGO = time.time() - 3600
FILES = {
    "MEMORY.md": "# Memory\n\n- The build server is called hopper.\n",
    "memory/2026-01-05.md": "# Standup\n\n- Deployed the billing service to kubernetes.\n",
    "memory/2026-01-06.md": "# Standup\n\n- 今天讨论了数据库升级和缓存失效。\n",
    "memory/projects/atlas.md": "# Atlas\n\n- The atlas launch moved to Friday.\n",
}


@pytest.fixture
def ws(make_workspace: WorkspaceFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CLAWMEM_STATE_DIR", str(tmp_path / "state"))
    # the index settled long ago: the snapshot's two-second rule is read off this clock
    monkeypatch.setattr(walk_snapshot, "now_ns", lambda: time.time_ns() + 60 * 10**9)
    root = make_workspace(FILES)
    for path in root.rglob("*.md"):  # files older than the last scan: the scan trusts size and mtime
        os.utime(path, (HOUR_AGO, HOUR_AGO))
    return root


def search(capsys: pytest.CaptureFixture[str], ws: Path, query: str) -> str:
    assert main(["search", query, "--workspace", str(ws), "--provider", "none", "--min-score", "0"]) == 0
    return capsys.readouterr().out


def index_file(tmp_path: Path) -> Path:
    (found,) = (tmp_path / "state").rglob("*.sqlite")
    return found


def answers_from_snapshot(ws: Path, tmp_path: Path) -> bool:
    """Whether a new process's scan would be answered by the recorded walk."""
    cfg = MemoryConfig.from_dict({"provider": "none"})
    with MemoryIndex(ws, config=cfg) as mem:
        walk = WalkSnapshot(index_file(tmp_path), ws, [])
        walk.restore(mem._syncer)
        items = mem._syncer.memory_items([])
        return walk.clean_scan(mem._stores.store, items) is not None


def test_a_search_records_its_walk_and_the_next_one_answers_from_it(
        ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "hopper" in search(capsys, ws, "hopper")  # builds the index: its files change, nothing recorded yet
    assert "hopper" in search(capsys, ws, "hopper")  # a scan finding nothing changed: recorded
    snap = Path(str(index_file(tmp_path)) + ".walk")
    data = marshal.loads(snap.read_bytes())
    assert data["state"] is not None and data["header"][1] == str(ws)
    assert str(ws / "memory") in data["listings"] or not data["listings"]  # listings only once settled
    written = snap.stat().st_mtime_ns
    assert answers_from_snapshot(ws, tmp_path)
    assert "数据库" in search(capsys, ws, "数据库升级")
    assert snap.stat().st_mtime_ns == written  # nothing new to record


def test_an_edit_in_place_with_its_old_mtime_put_back_is_found(
        ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    search(capsys, ws, "hopper")
    search(capsys, ws, "hopper")
    assert answers_from_snapshot(ws, tmp_path)
    note = ws / "memory" / "2026-01-05.md"
    old = note.read_text(encoding="utf-8")
    new = old.replace("kubernetes", "hyperdrive")  # the same size: only the inode change time tells
    assert len(new.encode()) == len(old.encode())
    note.write_text(new, encoding="utf-8")
    os.utime(note, (HOUR_AGO, HOUR_AGO))
    assert not answers_from_snapshot(ws, tmp_path)
    assert "hyperdrive" in search(capsys, ws, "hyperdrive")
    # and in Chinese
    zh = ws / "memory" / "2026-01-06.md"
    zh.write_text(zh.read_text(encoding="utf-8").replace("数据库升级", "机房搬迁了"), encoding="utf-8")
    os.utime(zh, (HOUR_AGO, HOUR_AGO))
    assert "机房搬迁" in search(capsys, ws, "机房搬迁")


def test_new_and_deleted_files_are_seen(ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    search(capsys, ws, "hopper")
    search(capsys, ws, "hopper")
    added = ws / "memory" / "projects" / "zephyr.md"
    added.write_text("# Zephyr\n\n- Zephyr ships the quokka feature.\n", encoding="utf-8")
    os.utime(added, (HOUR_AGO, HOUR_AGO))
    assert not answers_from_snapshot(ws, tmp_path)
    assert "quokka" in search(capsys, ws, "quokka")
    search(capsys, ws, "hopper")  # recorded again, with the new file
    assert answers_from_snapshot(ws, tmp_path)
    (ws / "memory" / "projects" / "atlas.md").unlink()
    assert not answers_from_snapshot(ws, tmp_path)
    assert "atlas" not in search(capsys, ws, "atlas launch")


def test_a_commit_by_another_process_is_not_trusted(
        ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    search(capsys, ws, "hopper")
    search(capsys, ws, "hopper")
    assert answers_from_snapshot(ws, tmp_path)
    index = index_file(tmp_path)
    before = walk_snapshot.index_signature(index)
    with MemoryIndex(ws, config=MemoryConfig.from_dict({"provider": "none"})) as mem:
        mem.sync(force=True)  # another writer: the same files, rewritten
    assert walk_snapshot.index_signature(index) != before
    assert not answers_from_snapshot(ws, tmp_path)
    assert "hopper" in search(capsys, ws, "hopper")


def test_a_fresh_index_is_not_recorded_before_it_settles(
        ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(walk_snapshot, "now_ns", time.time_ns)  # the real clock: the index was just written
    search(capsys, ws, "hopper")
    search(capsys, ws, "hopper")
    snap = Path(str(index_file(tmp_path)) + ".walk")
    assert not snap.exists() or marshal.loads(snap.read_bytes())["state"] is None


def test_a_damaged_snapshot_is_ignored(ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    search(capsys, ws, "hopper")
    snap = Path(str(index_file(tmp_path)) + ".walk")
    snap.write_bytes(b"\x00not marshal")
    assert "hopper" in search(capsys, ws, "hopper")
    assert marshal.loads(snap.read_bytes())["state"] is not None  # written again


def test_a_one_shot_search_run_as_the_program_leaves_the_collector_off(
        ws: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import gc
    import sys

    monkeypatch.setattr(sys, "argv", ["clawmem", "search", "hopper", "--workspace", str(ws), "--provider", "none"])
    try:
        assert main() == 0
        assert not gc.isenabled() and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.enable()
    assert "hopper" in capsys.readouterr().out
    assert main(["search", "hopper", "--workspace", str(ws), "--provider", "none"]) == 0  # called from Python
    assert gc.isenabled() and gc.get_freeze_count() == 0
