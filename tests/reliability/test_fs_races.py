"""Races against the file system, made deterministic with :mod:`fs_race`: a file, a directory
or the note being written is swapped for a symlink to an outside file or for a FIFO at the exact
moment discovery lists it, the sync or ``memory_get`` opens it, or ``memory_write`` opens it.
Whatever the point, nothing outside the workspace is read or written, nothing blocks, no raw
``OSError`` escapes, and the Markdown is untouched."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from clawmem_core import MemoryConfig, MemoryIndex
from clawmem_core.errors import PathNotAllowedError
from clawmem_core.tools import get_payload
from clawmem_core.writing import append_note

from .fs_race import Races, run_bounded, swap_for_fifo, swap_for_symlink
from .conftest import tree_digest

SECRET = "SECRETOUTSIDE"
NOW = datetime(2026, 3, 1, 9, 0, 0)


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    ws = tmp_path / "ws"
    (ws / "memory" / "subdir").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Long term\n\nI like jazz and espresso.\n")
    (ws / "memory" / "note.md").write_text("inside note about the lighthouse keeper\n")
    (ws / "memory" / "subdir" / "deep.md").write_text("inside deep note about the lighthouse keeper\n")
    outside = tmp_path / "outside"
    (outside / "subdir").mkdir(parents=True)
    for p in (outside / "secret.md", outside / "subdir" / "deep.md", outside / "note.md"):
        p.write_text(f"{SECRET} lighthouse keeper password\n")
    return ws, outside


def _index(ws: Path, tmp_path: Path) -> MemoryIndex:
    quiet = {"provider": "none", "sync": {"on_search": False, "on_session_start": False}}
    return MemoryIndex(ws, state_dir=tmp_path / "state", config=MemoryConfig.from_dict(quiet))


def _index_text(mem: MemoryIndex) -> str:
    rows = mem._store.conn.execute("SELECT text FROM chunks").fetchall()
    return "\n".join(r[0] for r in rows)


# -- memory_get ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("component, swap", [
    ("subdir", "dir-symlink"),  # a directory between the checks and the open of the file below it
    ("deep.md", "dir-symlink"),  # the directory, when the file itself is about to be opened
    ("deep.md", "file-symlink"),
    ("deep.md", "fifo"),
])
def test_memory_get_never_reads_outside_through_a_swap(layout: tuple[Path, Path], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch, component: str,
                                                         swap: str) -> None:
    ws, outside = layout
    target = ws / "memory" / "subdir" / "deep.md"
    action = {
        "dir-symlink": swap_for_symlink(ws / "memory" / "subdir", outside / "subdir"),
        "file-symlink": swap_for_symlink(target, outside / "secret.md"),
        "fifo": swap_for_fifo(target),
    }[swap]
    with _index(ws, tmp_path) as mem:
        races = Races(monkeypatch).at("open", component, action)
        payload = run_bounded(lambda: get_payload(mem, "memory/subdir/deep.md"), fifo=target)
        assert races.all_fired
    assert SECRET not in payload["text"]
    if payload.get("error"):
        assert str(tmp_path) not in payload["error"]
        assert any(why in payload["error"] for why in ("symlink", "not a regular file"))
    else:  # opened before the swap took effect: the inside file, read through its own descriptor
        assert "inside deep note" in payload["text"]


def test_memory_get_directory_swapped_between_checks_and_open_is_refused(
        layout: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Defect 6: O_NOFOLLOW on the last component alone let a swapped parent directory through."""
    ws, outside = layout
    with _index(ws, tmp_path) as mem:
        Races(monkeypatch).at("open", "subdir", swap_for_symlink(ws / "memory" / "subdir", outside / "subdir"))
        with pytest.raises(PathNotAllowedError, match="symlink"):
            mem.read("memory/subdir/deep.md")


# -- sync ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("point, component", [("listed", "memory"), ("open", "note.md")])
@pytest.mark.parametrize("swap", ["file-symlink", "fifo"])
def test_sync_skips_a_file_swapped_after_discovery(layout: tuple[Path, Path], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch, point: str, component: str,
                                                    swap: str) -> None:
    """Defect 7: a file swapped after discovery for a symlink was indexed from outside; for a FIFO
    the sync blocked forever holding the index lock."""
    ws, outside = layout
    target = ws / "memory" / "note.md"
    action = swap_for_symlink(target, outside / "secret.md") if swap == "file-symlink" else swap_for_fifo(target)
    with _index(ws, tmp_path) as mem:
        races = Races(monkeypatch).at(point, ws / component if point == "listed" else component, action)
        report = run_bounded(mem.sync, fifo=target)
        assert races.all_fired
        monkeypatch.undo()
        assert SECRET not in _index_text(mem)
        assert not mem.search("password")
        skipped = [s for s in report.files_skipped if s.startswith("memory/note.md")]
        assert skipped and ("symlink" in skipped[0] or "not a regular file" in skipped[0]), report.files_skipped
        assert mem.search("jazz espresso")[0].path == "MEMORY.md"  # the rest indexed
        # the next sync, with the swap in place, is just as safe and does not block
        run_bounded(mem.sync, fifo=target)
        assert SECRET not in _index_text(mem)


def test_sync_skips_a_root_file_swapped_for_a_fifo_after_discovery(
        layout: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws, _ = layout
    target = ws / "MEMORY.md"
    with _index(ws, tmp_path) as mem:
        Races(monkeypatch).at("listed", ws / "memory", swap_for_fifo(target))  # listed after the root files
        report = run_bounded(mem.sync, fifo=target)
    assert any(s.startswith("MEMORY.md: not a regular file") for s in report.files_skipped)
    assert report.files_indexed == 2


def test_sync_skips_files_below_a_directory_swapped_after_discovery(
        layout: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws, outside = layout
    with _index(ws, tmp_path) as mem:
        Races(monkeypatch).at("listed", ws / "memory" / "subdir", swap_for_symlink(ws / "memory" / "subdir", outside / "subdir"))
        report = run_bounded(mem.sync)
        monkeypatch.undo()
        assert SECRET not in _index_text(mem)
        assert any(s.startswith("memory/subdir/deep.md: symlink") for s in report.files_skipped)


# -- memory_write --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("target, component, swap", [
    ("daily", "memory", "dir-symlink"),
    ("daily", "2026-03-01.md", "file-symlink"),
    ("daily", "2026-03-01.md", "fifo"),
    ("long_term", "MEMORY.md", "file-symlink"),
    ("long_term", "MEMORY.md", "fifo"),
])
def test_write_never_goes_outside_or_blocks(layout: tuple[Path, Path], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch, target: str, component: str,
                                            swap: str) -> None:
    ws, outside = layout
    path = ws / "memory" / "2026-03-01.md" if target == "daily" else ws / "MEMORY.md"
    if target == "daily":
        path.write_text("# 2026-03-01\n\nmorning\n")
    action = {
        "dir-symlink": swap_for_symlink(ws / "memory", outside),
        "file-symlink": swap_for_symlink(path, outside / "secret.md"),
        "fifo": swap_for_fifo(path),
    }[swap]
    outside_before = tree_digest(outside)
    races = Races(monkeypatch).at("open", component, action)
    with pytest.raises(PathNotAllowedError) as info:
        run_bounded(lambda: append_note(ws, "a new note", target, now=NOW), fifo=path)  # type: ignore[arg-type]
    assert races.all_fired
    assert ("symlink" in str(info.value)) or ("not a regular file" in str(info.value))
    assert tree_digest(outside) == outside_before


# -- session transcripts ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("swap", ["file-symlink", "fifo"])
def test_sync_skips_a_transcript_swapped_after_listing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       swap: str) -> None:
    import json

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "MEMORY.md").write_text("jazz\n")
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    line = {"type": "message", "message": {"role": "user", "content": "the lighthouse keeper called"}}
    (sessions / "a.jsonl").write_text(json.dumps(line) + "\n")
    outside = tmp_path / "outside.jsonl"
    secret = {"type": "message", "message": {"role": "user", "content": f"{SECRET} lighthouse"}}
    outside.write_text(json.dumps(secret) + "\n")
    target = sessions / "a.jsonl"
    cfg = MemoryConfig.from_dict({"provider": "none", "sources": ["memory", "sessions"],
                                  "experimental": {"sessionMemory": True},
                                  "sync": {"on_search": False, "on_session_start": False}})
    with MemoryIndex(ws, state_dir=tmp_path / "state", config=cfg, sessions_dir=sessions) as mem:
        action = swap_for_symlink(target, outside) if swap == "file-symlink" else swap_for_fifo(target)
        races = Races(monkeypatch).at("listed", sessions, action)
        report = run_bounded(mem.sync, fifo=target)
        assert races.all_fired
        monkeypatch.undo()
        assert SECRET not in _index_text(mem)
        assert any(s.startswith("sessions/a.jsonl") for s in report.files_skipped), report.files_skipped
