"""The freshness scan of a sync: files are compared with the index by size and mtime (read only
when those differ or the mtime is too recent to trust), a sync with nothing to do takes no lock
and writes nothing, and a scan taken before the locks is redone if the index changed meanwhile."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable

from clawmem_core import MemoryConfig, MemoryIndex

from .conftest import WorkspaceFactory


def _config() -> MemoryConfig:
    return MemoryConfig.from_dict({"provider": "none", "sync": {"on_search": False}})


def _age(ws: Path, seconds: float = 120.0) -> None:
    """Move every file's mtime into the past, out of the racy window of the next sync."""
    past = time.time() - seconds
    for p in ws.rglob("*.md"):
        os.utime(p, (past, past))


def _paths(mem: MemoryIndex, query: str) -> set[str]:
    return {h.path for h in mem.search(query, min_score=0)}


def _last_scan(mem: MemoryIndex) -> str | None:
    return mem._store.get_value("last_scan")


def test_sync_with_nothing_changed_writes_nothing(make_workspace: WorkspaceFactory, state_dir: Path) -> None:
    ws = make_workspace({"MEMORY.md": "- tea\n", "memory/a.md": "- alpha\n", "memory/d/b.md": "- bravo\n"})
    _age(ws)
    with MemoryIndex(ws, config=_config(), state_dir=state_dir) as mem:
        mem.sync()
        before = _last_scan(mem)
        report = mem.sync()
        assert (report.files_scanned, report.files_unchanged, report.files_indexed, report.files_deleted) == (3, 3, 0, 0)
        assert _last_scan(mem) == before  # no write transaction
        assert not mem.dirty


def test_quick_sync_finds_added_deleted_renamed_and_edited_files(make_workspace: WorkspaceFactory,
                                                                  state_dir: Path) -> None:
    ws = make_workspace({"MEMORY.md": "- tea\n", "memory/a.md": "- alpha walrus\n", "memory/b.md": "- bravo\n"})
    _age(ws)
    with MemoryIndex(ws, config=_config(), state_dir=state_dir) as mem:
        mem.sync()
        (ws / "memory" / "c.md").write_text("- charlie narwhal\n", encoding="utf-8")
        assert mem.sync().files_indexed == 1
        assert _paths(mem, "narwhal") == {"memory/c.md"}
        _age(ws)
        (ws / "memory" / "b.md").unlink()
        assert mem.sync().files_deleted == 1
        # A rename keeps the number of files: the old path must still go.
        _age(ws)
        (ws / "memory" / "a.md").rename(ws / "memory" / "renamed.md")
        report = mem.sync()
        assert (report.files_indexed, report.files_deleted) == (1, 1)
        assert _paths(mem, "walrus") == {"memory/renamed.md"}
        _age(ws)
        with open(ws / "memory" / "c.md", "a", encoding="utf-8") as fh:
            fh.write("- delta okapi\n")
        mem.sync()
        assert _paths(mem, "okapi") == {"memory/c.md"}
        assert mem.status().files == 3


def test_same_size_edit_with_the_same_mtime_is_found_while_recent(make_workspace: WorkspaceFactory,
                                                                  state_dir: Path) -> None:
    ws = make_workspace({"memory/a.md": "- the code is alpha\n"})
    target = ws / "memory" / "a.md"
    with MemoryIndex(ws, config=_config(), state_dir=state_dir) as mem:
        mem.sync()
        st = os.stat(target)
        target.write_text("- the code is omega\n", encoding="utf-8")  # same size
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the same mtime
        mem.sync()
        assert _paths(mem, "omega") == {"memory/a.md"}
        assert not _paths(mem, "alpha")


def test_touched_files_are_rehashed_once_then_trusted(make_workspace: WorkspaceFactory, state_dir: Path) -> None:
    ws = make_workspace({f"memory/n{i}.md": f"- note {i}\n" for i in range(5)})
    _age(ws, 600)
    with MemoryIndex(ws, config=_config(), state_dir=state_dir) as mem:
        mem.sync()
        _age(ws, 300)  # new mtimes, same content
        report = mem.sync()
        assert (report.files_indexed, report.files_unchanged) == (0, 5)
        states = mem._store.file_states("memory")
        assert all(row[3] == int(os.stat(ws / row[0]).st_mtime * 1000) for row in states.values())
        before = _last_scan(mem)
        assert mem.sync().files_unchanged == 5
        assert _last_scan(mem) == before  # trusted by size and mtime now: nothing written


class _Hooked(MemoryIndex):
    """Runs ``after_scan`` between the unlocked scan and the locked sync."""

    after_scan: Callable[[], Any] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        scan = self._syncing.unlocked_scan

        def hooked() -> Any:
            got = scan()
            if self.after_scan is not None:
                hook, self.after_scan = self.after_scan, None
                hook()
            return got

        self._syncing.unlocked_scan = hooked  # type: ignore[method-assign]


def test_scan_before_the_locks_is_redone_when_another_sync_wrote(make_workspace: WorkspaceFactory,
                                                                 state_dir: Path) -> None:
    ws = make_workspace({"memory/a.md": "- alpha\n", "memory/z.md": "- zebra stripes\n"})
    _age(ws)
    with _Hooked(ws, config=_config(), state_dir=state_dir) as mem, \
            MemoryIndex(ws, config=_config(), state_dir=state_dir) as other:
        mem.sync()
        (ws / "memory" / "z.md").unlink()  # the scan sees z.md gone ...

        def recreate_and_sync() -> None:  # ... then it comes back and another process indexes it
            (ws / "memory" / "z.md").write_text("- zebra crossing\n", encoding="utf-8")
            other.sync()

        mem.after_scan = recreate_and_sync
        mem.sync()
        assert _paths(mem, "zebra crossing") == {"memory/z.md"}
        assert mem.status().files == 2


def test_same_size_edit_with_its_old_mtime_put_back_is_seen(make_workspace: WorkspaceFactory, state_dir: Path) -> None:
    """``cp -p``, ``rsync -t`` and ``tar x`` restore a file's old mtime: a same-size edit must
    still be seen (its inode change time or its inode differs)."""
    ws = make_workspace({"MEMORY.md": "- tea\n", "memory/a.md": "- alpha walrus\n", "memory/b.md": "- bravo walrus\n"})
    _age(ws)
    with MemoryIndex(ws, config=_config(), state_dir=state_dir) as mem:
        mem.sync()
        a, b = ws / "memory" / "a.md", ws / "memory" / "b.md"
        # In place with the old mtime put back (cp -p onto an existing file).
        st = a.stat()
        a.write_text("- alpha narwhal\n"[: st.st_size].ljust(st.st_size), encoding="utf-8")
        os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert (a.stat().st_size, a.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
        # Replaced by a new file carrying the old mtime (rsync -t, tar x).
        st = b.stat()
        tmp = ws / "memory" / ".b.tmp"
        tmp.write_text("- bravo narwhal\n"[: st.st_size].ljust(st.st_size), encoding="utf-8")
        os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.replace(tmp, b)
        assert (b.stat().st_size, b.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
        report = mem.sync()
        assert report.files_indexed == 2
        assert _paths(mem, "narwhal") == {"memory/a.md", "memory/b.md"}
        assert _paths(mem, "walrus") == set()
    with MemoryIndex(ws, config=_config(), state_dir=state_dir) as mem:  # unchanged now: nothing read
        _age(ws)
        mem.sync()
        assert mem.sync().files_unchanged == 3
