"""``read`` / ``memory_get`` path rules and slicing (SPEC 7; OpenClaw tests 51-52)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from clawmem_core.errors import ClawmemError, InvalidQueryError, PathNotAllowedError
from clawmem_core.read import read_memory_file, resolve_memory_path

from .conftest import IndexFactory, WorkspaceFactory, write_files

THREE = "line 1\nline 2\nline 3\n"


@pytest.fixture
def ws(make_workspace: WorkspaceFactory, tmp_path: Path) -> Path:
    root = make_workspace({
        "MEMORY.md": THREE,
        "memory.md": "lower case memory\n",
        "memory/2026-01-05.md": "standup\nshipped\n",
        "memory/deep/nested/note.md": "nested note\n",
        "memory/readme.txt": "not markdown\n",
        "NOTES.md": "not memory\n",
        "extra/extra.md": "Extra content.",
        "extra/sub/more.md": "more extra\n",
        "single/one.md": "single extra file\n",
        "single/two.md": "sibling of the single extra file\n",
    })
    write_files(tmp_path / "outside", {"secret.md": "SECRET outside\n", "dir/secret.md": "SECRET in dir\n"})
    return root


def read(ws: Path, path: object, from_line: object = None, lines: object = None, extra: list[str] | None = None):
    return read_memory_file(ws, extra if extra is not None else ["extra", "single/one.md"], path, from_line, lines)


# -- slicing (test 51) --------------------------------------------------------------------------


def test_whole_file_when_no_range(ws: Path) -> None:
    r = read(ws, "MEMORY.md")
    assert (r.path, r.text, r.from_line, r.to_line, r.total_lines) == ("MEMORY.md", THREE, 1, 3, 3)


def test_from_and_lines_slice(ws: Path) -> None:
    r = read(ws, "MEMORY.md", 2, 1)
    assert (r.text, r.from_line, r.to_line, r.total_lines) == ("line 2", 2, 2, 3)
    assert read(ws, "MEMORY.md", 2).text == "line 2\nline 3"
    assert read(ws, "MEMORY.md", None, 2).text == "line 1\nline 2"
    assert read(ws, "MEMORY.md", 2, 100).text == "line 2\nline 3"


def test_reading_past_the_end_is_empty(ws: Path) -> None:
    r = read(ws, "MEMORY.md", 10, 5)
    assert r.text == "" and r.total_lines == 3


def test_missing_file_is_empty_not_an_error(ws: Path) -> None:
    r = read(ws, "memory/2099-01-01.md")
    assert (r.path, r.text, r.total_lines) == ("memory/2099-01-01.md", "", 0)
    assert read(ws, "memory/no/such/dir/x.md").text == ""


def test_line_arguments_must_be_integers(ws: Path) -> None:
    for bad in ("two", 1.5, float("nan"), True, [1]):
        with pytest.raises(InvalidQueryError):
            read(ws, "MEMORY.md", bad, 1)
        with pytest.raises(InvalidQueryError):
            read(ws, "MEMORY.md", 1, bad)
    assert read(ws, "MEMORY.md", "2", "1").text == "line 2"
    assert read(ws, "MEMORY.md", 2.0, 1.0).text == "line 2"


def test_zero_and_negative_lines_are_sane(ws: Path) -> None:
    assert read(ws, "MEMORY.md", 0, 0).text == THREE  # both falsy: whole file
    assert read(ws, "MEMORY.md", -5, 1).text == "line 1"
    assert read(ws, "MEMORY.md", 1, -3).text == "line 1"


# -- allowed paths (test 52) ----------------------------------------------------------------------


@pytest.mark.parametrize("path, text", [
    ("MEMORY.md", THREE),
    ("memory.md", "lower case memory\n"),
    ("memory/2026-01-05.md", "standup\nshipped\n"),
    ("memory/deep/nested/note.md", "nested note\n"),
    ("./memory/2026-01-05.md", "standup\nshipped\n"),
    ("  MEMORY.md  ", THREE),
    ("extra/extra.md", "Extra content."),
    ("extra/sub/more.md", "more extra\n"),
    ("single/one.md", "single extra file\n"),
])
def test_memory_files_are_readable(ws: Path, path: str, text: str) -> None:
    assert read(ws, path).text == text


def test_extra_file_payload_path(ws: Path) -> None:
    r = read(ws, "extra/extra.md")
    assert (r.path, r.text) == ("extra/extra.md", "Extra content.")


def test_absolute_path_inside_memory_is_allowed(ws: Path) -> None:
    r = read(ws, str(ws / "memory" / "2026-01-05.md"))
    assert r.path == "memory/2026-01-05.md" and r.text == "standup\nshipped\n"


def test_extra_path_outside_the_workspace_shows_dotdot(ws: Path, tmp_path: Path) -> None:
    r = read(ws, str(tmp_path / "outside" / "secret.md"), extra=[str(tmp_path / "outside")])
    assert r.path == "../outside/secret.md" and r.text == "SECRET outside\n"


# -- refused paths ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [
    "NOTES.md",  # not memory
    "memory/readme.txt",  # not .md
    "memory/",  # a directory
    "memory",
    "single/two.md",  # sibling of a single-file extra path
    "memory/../NOTES.md",
    "memory/../../outside/secret.md",
    "../outside/secret.md",
    "extra/../NOTES.md",
    "~/MEMORY.md",
    "",
    "   ",
    "memory/x.md\x00.txt",
    "MEMORY.md\x00",
])
def test_paths_outside_memory_are_refused(ws: Path, path: str) -> None:
    with pytest.raises(PathNotAllowedError):
        read(ws, path)


def test_absolute_path_outside_is_refused(ws: Path, tmp_path: Path) -> None:
    with pytest.raises(PathNotAllowedError):
        read(ws, str(tmp_path / "outside" / "secret.md"))
    with pytest.raises(PathNotAllowedError):
        read(ws, "/etc/passwd")


def test_refusal_is_a_value_error_and_a_clawmem_error(ws: Path) -> None:
    with pytest.raises(ValueError):
        read(ws, "NOTES.md")
    with pytest.raises(ClawmemError):
        read(ws, "NOTES.md")


@pytest.mark.parametrize("path", [None, 42, b"MEMORY.md", ["MEMORY.md"], Path("MEMORY.md")])
def test_non_string_paths_are_refused(ws: Path, path: object) -> None:
    with pytest.raises(PathNotAllowedError):
        read(ws, path)


@pytest.mark.parametrize("path", [
    "memory/" + "a" * 300 + ".md",  # a component longer than NAME_MAX
    "memory/" + "d/" * 3000 + "x.md",  # longer than PATH_MAX
    "memory/" + "a" * 10000 + ".md",
])
def test_very_long_paths_give_a_clear_answer(ws: Path, path: str) -> None:
    try:
        r = read(ws, path)
    except PathNotAllowedError:
        return
    assert r.text == ""  # a path that cannot exist reads as missing


def test_symlinked_file_in_memory_is_refused(ws: Path, tmp_path: Path) -> None:
    os.symlink(tmp_path / "outside" / "secret.md", ws / "memory" / "link.md")
    with pytest.raises(PathNotAllowedError):
        read(ws, "memory/link.md")


def test_symlink_to_a_memory_file_is_refused_too(ws: Path) -> None:
    os.symlink(ws / "MEMORY.md", ws / "memory" / "alias.md")
    with pytest.raises(PathNotAllowedError):
        read(ws, "memory/alias.md")


def test_symlinked_parent_directory_is_refused(ws: Path, tmp_path: Path) -> None:
    os.symlink(tmp_path / "outside" / "dir", ws / "memory" / "linkdir")
    with pytest.raises(PathNotAllowedError):
        read(ws, "memory/linkdir/secret.md")


def test_symlinked_memory_root_file_is_refused(make_workspace: WorkspaceFactory, tmp_path: Path) -> None:
    ws = make_workspace({"memory/a.md": "a\n"}, name="ws2")
    write_files(tmp_path / "elsewhere", {"MEMORY.md": "SECRET\n"})
    os.symlink(tmp_path / "elsewhere" / "MEMORY.md", ws / "MEMORY.md")
    with pytest.raises(PathNotAllowedError):
        read_memory_file(ws, [], "MEMORY.md")


def test_symlinked_memory_directory_is_refused(make_workspace: WorkspaceFactory, tmp_path: Path) -> None:
    ws = make_workspace({"MEMORY.md": "m\n"}, name="ws3")
    write_files(tmp_path / "elsewhere", {"note.md": "SECRET\n"})
    os.symlink(tmp_path / "elsewhere", ws / "memory")
    with pytest.raises(PathNotAllowedError):
        read_memory_file(ws, [], "memory/note.md")


def test_symlink_inside_an_extra_directory_is_refused(ws: Path, tmp_path: Path) -> None:
    os.symlink(tmp_path / "outside" / "secret.md", ws / "extra" / "linked.md")
    with pytest.raises(PathNotAllowedError):
        read(ws, "extra/linked.md")


def test_symlinked_extra_root_is_not_a_memory_root(ws: Path, tmp_path: Path) -> None:
    os.symlink(tmp_path / "outside", ws / "linkedextra")
    with pytest.raises(PathNotAllowedError):
        read(ws, "linkedextra/secret.md", extra=["linkedextra"])


def test_directory_named_like_a_note_is_refused(ws: Path) -> None:
    (ws / "memory" / "folder.md").mkdir()
    with pytest.raises(PathNotAllowedError):
        read(ws, "memory/folder.md")


def test_fifo_named_like_a_note_is_refused_without_blocking(ws: Path) -> None:
    os.mkfifo(ws / "memory" / "pipe.md")
    with pytest.raises(PathNotAllowedError):
        read(ws, "memory/pipe.md")


def test_resolve_returns_absolute_and_display_path(ws: Path) -> None:
    abs_path, shown = resolve_memory_path(ws, [], "memory/../memory/2026-01-05.md")
    assert abs_path == ws / "memory" / "2026-01-05.md" and shown == "memory/2026-01-05.md"


# -- through MemoryIndex -----------------------------------------------------------------------------


def test_index_read_uses_the_same_rules(ws: Path, open_index: IndexFactory) -> None:
    from clawmem_core import MemoryConfig

    mem = open_index(ws, embedder=None, config=MemoryConfig(provider="none", extra_paths=["extra"]))
    assert mem.read("extra/extra.md").text == "Extra content."
    assert mem.read("MEMORY.md", from_line=3, lines=1).text == "line 3"
    with pytest.raises(PathNotAllowedError):
        mem.read("NOTES.md")
    assert mem._embedding.selection is None  # reading never creates the embedder
