"""Which files are memory (SPEC 2; OpenClaw tests 22-23)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from clawmem_core.discovery import IGNORED_DIRS, list_memory_files, normalize_extra_paths

from .conftest import WorkspaceFactory, write_files


def paths(ws: Path, extra: list[str] | None = None) -> list[str]:
    return [f.path for f in list_memory_files(ws, extra).files]


def test_root_files_and_memory_tree(make_workspace: WorkspaceFactory) -> None:
    ws = make_workspace({
        "MEMORY.md": "a", "memory.md": "b", "memory/2026-01-05.md": "c", "memory/2026-01-05-standup.md": "d",
        "memory/projects/x/deep.md": "e", "memory/notes.txt": "no", "memory/UPPER.MD": "no",
        "README.md": "not memory", "docs/guide.md": "not memory",
    })
    found = paths(ws)
    assert sorted(found) == sorted([
        "MEMORY.md", "memory.md", "memory/2026-01-05.md", "memory/2026-01-05-standup.md", "memory/projects/x/deep.md"])


#: The order discovery gives, written out: the root files, then each directory's files by code point before its
#: subdirectories (by code point, depth first), then the extra paths in the order configured.
ORDERED = ["MEMORY.md", "memory/Z.md", "memory/a.md", "memory/b.md", "memory/c.md", "memory/aa/q.md",
           "memory/sub/y.md", "memory/sub/z.md", "memory/sub/deeper/x.md", "memory/sub/zz/w.md", "notes/k.md",
           "notes/l.md", "solo.md"]


@pytest.mark.parametrize("creation", ["shuffled", "reversed"])
def test_order_is_stable(tmp_path: Path, creation: str) -> None:
    import random

    names = list(ORDERED)
    random.Random(3).shuffle(names) if creation == "shuffled" else names.reverse()
    ws = tmp_path / "ws"
    for i, name in enumerate(names):  # created in this order, each with its own mtime (oldest first)
        write_files(ws, {name: name})
        os.utime(ws / name, (1_700_000_000 + i * 60, 1_700_000_000 + i * 60))
    assert paths(ws, ["notes", "solo.md"]) == ORDERED


def test_empty_workspace_has_no_files(make_workspace: WorkspaceFactory) -> None:
    assert paths(make_workspace({})) == []


@pytest.mark.parametrize("ignored", sorted(IGNORED_DIRS))
def test_ignored_directories_are_skipped_anywhere(make_workspace: WorkspaceFactory, ignored: str) -> None:
    ws = make_workspace({
        f"memory/{ignored}/x.md": "skip", f"memory/sub/{ignored}/y.md": "skip", "memory/keep.md": "keep",
        f"extra/{ignored}/z.md": "skip", "extra/ok.md": "keep",
    })
    assert sorted(paths(ws, ["extra"])) == ["extra/ok.md", "memory/keep.md"]


def test_required_ignore_list() -> None:
    assert {".git", "node_modules", ".venv", "venv", ".tox", "__pycache__"} <= IGNORED_DIRS


def test_symlinked_files_and_directories_are_skipped(make_workspace: WorkspaceFactory, tmp_path: Path) -> None:
    ws = make_workspace({"memory/real.md": "r", "extra/ok.md": "k"})
    outside = write_files(tmp_path / "outside", {"a.md": "A", "dir/b.md": "B"})
    os.symlink(outside / "a.md", ws / "memory" / "link.md")
    os.symlink(outside / "dir", ws / "memory" / "linkdir")
    os.symlink(outside / "a.md", ws / "extra" / "link.md")
    os.symlink(outside / "dir", ws / "extra" / "linkdir")
    os.symlink(outside / "a.md", ws / "MEMORY.md")
    os.symlink(outside / "dir", ws / "linked-extra")
    found = paths(ws, ["extra", "linked-extra", str(ws / "memory" / "link.md")])
    assert sorted(found) == ["extra/ok.md", "memory/real.md"]


def test_symlinked_memory_directory_is_skipped(make_workspace: WorkspaceFactory, tmp_path: Path) -> None:
    ws = make_workspace({"MEMORY.md": "m"})
    outside = write_files(tmp_path / "outside", {"a.md": "A"})
    os.symlink(outside, ws / "memory")
    assert paths(ws) == ["MEMORY.md"]


def test_files_reached_twice_are_listed_once(make_workspace: WorkspaceFactory) -> None:
    ws = make_workspace({"MEMORY.md": "m", "memory/a.md": "a", "notes/n.md": "n"})
    found = paths(ws, [str(ws), ".", str(ws / "MEMORY.md"), "memory", "notes", "./notes/", "notes/n.md"])
    assert sorted(found) == ["MEMORY.md", "memory/a.md", "notes/n.md"]
    assert len(found) == len(set(found))


def test_extra_paths_directory_and_single_file(make_workspace: WorkspaceFactory, tmp_path: Path) -> None:
    ws = make_workspace({"MEMORY.md": "m", "extra/a.md": "a", "extra/b.txt": "b", "single.md": "s", "single.txt": "t"})
    outside = write_files(tmp_path / "team", {"shared.md": "x"})
    found = paths(ws, ["extra", "single.md", "single.txt", str(outside)])
    assert sorted(found) == ["../team/shared.md", "MEMORY.md", "extra/a.md", "single.md"]


def test_missing_extra_paths_are_ignored_and_reported(make_workspace: WorkspaceFactory) -> None:
    ws = make_workspace({"MEMORY.md": "m"})
    result = list_memory_files(ws, ["does-not-exist", "/no/such/dir", "  "])
    assert [f.path for f in result.files] == ["MEMORY.md"]
    assert result.missing_extra_paths == ["does-not-exist", "/no/such/dir"]


def test_tilde_in_extra_paths_expands(make_workspace: WorkspaceFactory, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    home = write_files(tmp_path / "home", {"notes/t.md": "tilde"})
    monkeypatch.setenv("HOME", str(home))
    ws = make_workspace({"MEMORY.md": "m"})
    result = list_memory_files(ws, ["~/notes"])
    assert [f.abs_path for f in result.files if f.path != "MEMORY.md"] == [home / "notes" / "t.md"]
    assert result.missing_extra_paths == []


def test_environment_variables_in_extra_paths_expand(make_workspace: WorkspaceFactory, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    shared = write_files(tmp_path / "shared", {"dir/e.md": "env", "file.md": "f"})
    monkeypatch.setenv("CLAWMEM_TEST_SHARED", str(shared))
    ws = make_workspace({})
    found = paths(ws, ["$CLAWMEM_TEST_SHARED/dir", "${CLAWMEM_TEST_SHARED}/file.md"])
    assert sorted(found) == ["../shared/dir/e.md", "../shared/file.md"]


def test_normalize_extra_paths(make_workspace: WorkspaceFactory, tmp_path: Path) -> None:
    ws = make_workspace({})
    absolute = str(tmp_path / "abs")
    assert normalize_extra_paths(ws, [" notes ", "./notes", absolute, absolute, ""]) == [ws / "notes", tmp_path / "abs"]


def test_display_paths_use_forward_slashes(make_workspace: WorkspaceFactory) -> None:
    ws = make_workspace({"memory/a/b/c.md": "x"})
    assert paths(ws) == ["memory/a/b/c.md"]


def test_unreadable_directory_does_not_stop_discovery(make_workspace: WorkspaceFactory) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads every directory")
    ws = make_workspace({"memory/ok.md": "ok", "memory/locked/x.md": "x"})
    (ws / "memory" / "locked").chmod(0)
    try:
        assert paths(ws) == ["memory/ok.md"]
    finally:
        (ws / "memory" / "locked").chmod(0o755)


def test_walk_order_files_first_then_subdirectories(make_workspace: WorkspaceFactory) -> None:
    # Per directory: its files by name, then each subdirectory's tree by name; a directory named
    # like a Markdown file is walked, not listed.
    ws = make_workspace({"MEMORY.md": "m", "memory/b.md": "b", "memory/a.md": "a", "memory/a/z.md": "z",
                         "memory/a/y.md": "y", "memory/c.md/inner.md": "i", "memory/sub/q.md": "q", "memory/B.md": "B"})
    assert paths(ws) == ["MEMORY.md", "memory/B.md", "memory/a.md", "memory/b.md", "memory/a/y.md", "memory/a/z.md",
                         "memory/c.md/inner.md", "memory/sub/q.md"]


def test_memory_paths_pairs_match_the_discovery(make_workspace: WorkspaceFactory, tmp_path: Path) -> None:
    from clawmem_core.discovery import memory_paths

    ws = make_workspace({"MEMORY.md": "m", "memory/a.md": "a", "memory/d/b.md": "b", "notes/n.md": "n"})
    extra = ["notes", "memory/d", str(ws / "MEMORY.md")]
    pairs, missing = memory_paths(ws, extra + ["nope"])
    found = list_memory_files(ws, extra + ["nope"])
    assert pairs == [(f.path, f.abs) for f in found.files]
    assert [p for p, _ in pairs] == ["MEMORY.md", "memory/a.md", "memory/d/b.md", "notes/n.md"]
    assert all(a == os.path.join(ws, p) for p, a in pairs)
    assert missing == found.missing_extra_paths == ["nope"]
