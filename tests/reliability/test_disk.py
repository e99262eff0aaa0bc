"""A full disk and a read-only state directory, both real: a tiny tmpfs and a read-only bind
mount (skipped where mounting is not allowed). Sync gives a clear StoreError, the previous index
keeps answering, no temporary file is left, the Markdown is untouched."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from clawmem_core import MemoryConfig, MemoryIndex
from clawmem_core.errors import StoreError
from clawmem_core.testing import HashEmbedder

from .conftest import make_workspace, tree_digest

QUIET = MemoryConfig.from_dict({"sync": {"on_session_start": False, "on_search": False}})


def open_index(ws: Path, state: Path, config: MemoryConfig | None = None) -> MemoryIndex:
    return MemoryIndex(ws, embedder=HashEmbedder(dims=16), state_dir=state, config=config)


@pytest.mark.parametrize("force", [False, True], ids=["incremental", "full"])
def test_disk_full_during_sync(tmp_path: Path, mount_point, force: bool) -> None:
    state = mount_point("tmpfs:3m")
    ws = make_workspace(tmp_path / "ws", 4, "small")
    with open_index(ws, state) as mem:
        mem.sync()
        before_files = mem.status().files
    make_workspace(ws, 200, "big", lines=80)  # far more than the disk holds
    before = tree_digest(ws)
    with open_index(ws, state, QUIET) as mem:
        with pytest.raises(StoreError, match="disk full|database or disk is full"):
            mem.sync(force=force)
    assert tree_digest(ws) == before
    assert not list((state / "memory").glob("*.tmp-*")), "a temporary index was left on the full disk"
    with open_index(ws, state, QUIET) as mem:  # the old index still opens and answers
        assert mem.status().files == before_files if force else mem.status().files >= before_files
        hits = mem.search("jazz espresso")
        assert hits and hits[0].path == "MEMORY.md"


def test_read_only_state_directory(tmp_path: Path, mount_point) -> None:
    ws = make_workspace(tmp_path / "ws", 4, "ro")
    real_state = tmp_path / "state"
    with open_index(ws, real_state) as mem:
        mem.sync()
    state = mount_point("ro", real_state)
    (ws / "memory" / "new.md").write_text("# New\n\nA note about espresso machines.\n")
    before = tree_digest(ws)
    try:
        mem = open_index(ws, state, QUIET)
    except StoreError as exc:  # refusing to open is acceptable if the message says why
        assert "read-only or not writable" in str(exc)
    else:
        with mem:
            with pytest.raises(StoreError) as info:
                mem.sync()
            assert "read-only" in str(info.value).lower() or "cannot write" in str(info.value)
    assert tree_digest(ws) == before


def test_read_only_fresh_state_directory(tmp_path: Path, mount_point) -> None:
    """No index yet and the state directory cannot be written: a clear error, no traceback."""
    empty = tmp_path / "empty-state"
    empty.mkdir()
    state = mount_point("ro", empty)
    ws = make_workspace(tmp_path / "ws", 2, "x")
    with pytest.raises(StoreError, match="(?i)read-only"):
        with open_index(ws, state) as mem:
            mem.sync()


def test_forced_reindex_on_an_already_full_disk_leaves_no_temporary_index(tmp_path: Path, mount_point) -> None:
    """The disk fills up before the rebuild starts: creating the temporary index itself fails."""
    state = mount_point("tmpfs:3m")
    ws = make_workspace(tmp_path / "ws", 4, "small")
    before = tree_digest(ws)
    with open_index(ws, state, QUIET) as mem:
        mem.sync()
        mem.search("jazz")
        filler = state / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
        try:  # fill every free byte
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError:
            pass
        finally:
            os.close(fd)
        with pytest.raises(StoreError):
            mem.sync(force=True)
        assert not list((state / "memory").glob("*.tmp-*")), "a temporary index was left on the full disk"
    assert tree_digest(ws) == before
    filler.unlink()
    with open_index(ws, state, QUIET) as mem:
        hits = mem.search("jazz espresso")
        assert hits and hits[0].path == "MEMORY.md"


@pytest.mark.parametrize("target", ["daily", "long_term"])
def test_memory_write_on_a_full_disk_is_a_typed_error_and_leaves_no_partial_note(
        tmp_path: Path, mount_point, target: str) -> None:
    from datetime import datetime

    from clawmem_core.errors import MemoryWriteError
    from clawmem_core.writing import append_note

    ws = mount_point("tmpfs:1m")
    (ws / "memory").mkdir()
    (ws / "MEMORY.md").write_text("# Long term\n\njazz\n")
    (ws / "memory" / "2026-03-01.md").write_text("# 2026-03-01\n\nmorning\n")
    before = tree_digest(ws)
    fd = os.open(ws / "filler", os.O_WRONLY | os.O_CREAT)
    try:  # fill every free byte
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    with pytest.raises(MemoryWriteError, match="No space left") as info:
        append_note(ws, "a note that does not fit " * 400, target, now=datetime(2026, 3, 1, 9))  # type: ignore[arg-type]
    assert isinstance(info.value, OSError) and str(ws) not in str(info.value)
    (ws / "filler").unlink()
    assert tree_digest(ws) == before  # nothing half-written
