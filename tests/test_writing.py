"""Appending memory: daily notes, MEMORY.md, session archives, symlink refusal, concurrent writers."""

from __future__ import annotations

import multiprocessing
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from clawmem_core.errors import PathNotAllowedError, WorkspaceError
from clawmem_core.writing import (
    InvalidNoteError,
    append_note,
    archive_session,
    daily_note_path,
    sanitize_slug,
)

NOW = datetime(2026, 3, 1, 14, 5, 9)


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")


def _assert_lines(path: Path, result_start: int, result_end: int, expected: list[str]) -> None:
    lines = _lines(path)
    assert lines[result_start - 1 : result_end] == expected


def test_daily_note_created_with_heading(tmp_path: Path) -> None:
    result = append_note(tmp_path, "Decided to use SQLite.\nOwner: Ana", now=NOW)
    assert result.path == tmp_path.resolve() / "memory" / "2026-03-01.md"
    assert result.path == daily_note_path(tmp_path.resolve(), NOW)
    assert result.path.read_text() == "# 2026-03-01\n\nDecided to use SQLite.\nOwner: Ana\n"
    assert (result.start_line, result.end_line) == (3, 4)
    assert result.relative_to(tmp_path) == "memory/2026-03-01.md"


def test_appends_never_overwrite_and_line_numbers_match(tmp_path: Path) -> None:
    first = append_note(tmp_path, "one", now=NOW)
    before = first.path.read_bytes()
    second = append_note(tmp_path, "  two\n    indented\n\n", now=NOW)
    assert first.path == second.path
    assert second.path.read_bytes().startswith(before)
    _assert_lines(second.path, second.start_line, second.end_line, ["two", "  indented"])
    assert _lines(second.path)[second.start_line - 2] == ""  # a blank line separates notes
    assert second.path.read_text().endswith("indented\n")


def test_missing_trailing_newline_is_fixed_before_appending(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    memory.mkdir()
    target = memory / "2026-03-01.md"
    target.write_text("hand written\nno newline at end")
    result = append_note(tmp_path, "new note", now=NOW)
    assert target.read_text() == "hand written\nno newline at end\n\nnew note\n"
    _assert_lines(target, result.start_line, result.end_line, ["new note"])


def test_day_rolls_over_to_a_new_file(tmp_path: Path) -> None:
    a = append_note(tmp_path, "today", now=NOW)
    b = append_note(tmp_path, "tomorrow", now=NOW + timedelta(days=1))
    assert a.path.name == "2026-03-01.md" and b.path.name == "2026-03-02.md"
    aware = append_note(tmp_path, "utc", now=datetime(2026, 3, 5, 23, 0, tzinfo=timezone.utc))
    assert aware.path.name == "2026-03-05.md"
    assert append_note(tmp_path, "default").path.name == f"{datetime.now():%Y-%m-%d}.md"


def test_long_term_memory(tmp_path: Path) -> None:
    result = append_note(tmp_path, "Prefers tea", target="long_term")
    assert result.path == tmp_path.resolve() / "MEMORY.md"
    assert result.path.read_text() == "Prefers tea\n"
    assert (result.start_line, result.end_line) == (1, 1)
    again = append_note(tmp_path, "Lives in Lisbon", target="long_term")
    assert again.path.read_text() == "Prefers tea\n\nLives in Lisbon\n"
    assert (again.start_line, again.end_line) == (3, 3)


def test_long_term_uses_existing_lowercase_memory_md(tmp_path: Path) -> None:
    (tmp_path / "memory.md").write_text("# Notes\n")
    result = append_note(tmp_path, "fact", target="long_term")
    assert result.path.name == "memory.md"
    names = {p.name for p in tmp_path.iterdir()}
    assert "memory.md" in names and ("MEMORY.md" not in names or (tmp_path / "MEMORY.md").samefile(result.path))
    assert (tmp_path / "memory.md").read_text() == "# Notes\n\nfact\n"


@pytest.mark.parametrize("text", ["", "   ", "\n\n  \n"])
def test_empty_note_is_refused(tmp_path: Path, text: str) -> None:
    with pytest.raises(InvalidNoteError) as info:
        append_note(tmp_path, text, now=NOW)
    assert isinstance(info.value, ValueError)
    assert not (tmp_path / "memory").exists() or not any((tmp_path / "memory").iterdir())


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(InvalidNoteError):
        append_note(tmp_path, "x", target="weekly")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        append_note(tmp_path, b"bytes")  # type: ignore[arg-type]
    with pytest.raises(WorkspaceError):
        append_note(tmp_path / "missing", "x")


def test_symlinked_daily_file_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside.md"
    outside.write_text("secret\n")
    workspace = tmp_path / "ws"
    (workspace / "memory").mkdir(parents=True)
    (workspace / "memory" / "2026-03-01.md").symlink_to(outside)
    with pytest.raises(PathNotAllowedError):
        append_note(workspace, "note", now=NOW)
    assert outside.read_text() == "secret\n"


def test_symlinked_memory_dir_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "memory").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(PathNotAllowedError):
        append_note(workspace, "note", now=NOW)
    with pytest.raises(PathNotAllowedError):
        archive_session(workspace, "User: hi", slug="x", now=NOW)
    assert list(elsewhere.iterdir()) == []


def test_symlinked_memory_md_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside.md"
    outside.write_text("keep\n")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "MEMORY.md").symlink_to(outside)
    with pytest.raises(PathNotAllowedError):
        append_note(workspace, "note", target="long_term")
    assert outside.read_text() == "keep\n"


def test_symlinked_workspace_itself_is_allowed(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    result = append_note(link, "via link", now=NOW)
    assert (real / "memory" / "2026-03-01.md").read_text().endswith("via link\n")
    assert result.path == real.resolve() / "memory" / "2026-03-01.md"


# ---------------------------------------------------------------------------------------------------- concurrency

LINES_PER_WRITER = 500
_NOTE = re.compile(r"writer(\d)-(\d{4}) " + "x" * 80)


def _writer(workspace: str, writer: int, start: "multiprocessing.synchronize.Barrier", out: "multiprocessing.Queue") -> None:
    start.wait()
    positions = []
    for i in range(LINES_PER_WRITER):
        result = append_note(workspace, f"writer{writer}-{i:04d} " + "x" * 80, now=NOW)
        positions.append((i, result.start_line, result.end_line))
    out.put((writer, positions))


def test_two_processes_appending_lose_no_line(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    # A barrier, not an event set here: both writers start appending only once both have started
    # up, so they overlap even when one process takes much longer to launch.
    start = ctx.Barrier(2)
    out = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), w, start, out)) for w in (1, 2)]
    for proc in procs:
        proc.start()
    results = dict(out.get(timeout=120) for _ in procs)
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0

    path = tmp_path / "memory" / "2026-03-01.md"
    lines = _lines(path)
    assert lines[0] == "# 2026-03-01" and lines[-1] == ""
    notes = [line for line in lines if line.startswith("writer")]
    # Every line is whole (no interleaving) and every note landed exactly once.
    assert all(_NOTE.fullmatch(line) for line in notes)
    assert len(notes) == 2 * LINES_PER_WRITER
    assert sorted(notes) == sorted(f"writer{w}-{i:04d} " + "x" * 80 for w in (1, 2) for i in range(LINES_PER_WRITER))
    # Notes are separated by exactly one blank line; nothing else is in the file.
    assert lines[1:-1:2] == [""] * len(notes) and lines[2:-1:2] == notes and len(lines) == 2 + 2 * len(notes)
    # The writers really overlapped in time (not one after the other).
    order = [line[6] for line in notes]
    assert sum(a != b for a, b in zip(order, order[1:])) > 2
    # Each writer's reported line numbers point at its own note, in its own order.
    both_interleaved = set()
    for writer, positions in results.items():
        previous = 0
        for i, start_line, end_line in positions:
            assert start_line == end_line > previous
            assert lines[start_line - 1] == f"writer{writer}-{i:04d} " + "x" * 80
            previous = start_line
            both_interleaved.add(start_line)
    assert len(both_interleaved) == 2 * LINES_PER_WRITER


# ---------------------------------------------------------------------------------------------------- archives


def test_archive_session_with_slug(tmp_path: Path) -> None:
    result = archive_session(
        tmp_path, "User: plan the trip\nAssistant: sure", slug="Trip Planning: Café & Co!", now=NOW,
        metadata={"Session Key": "agent:main:main"},
    )
    assert result.path == tmp_path.resolve() / "memory" / "2026-03-01-trip-planning-cafe-co.md"
    text = result.path.read_text()
    assert text.startswith("# Session: 2026-03-01 14:05:09\n")
    assert "- **Session Key**: agent:main:main\n" in text
    assert text.endswith("User: plan the trip\nAssistant: sure\n")
    assert (result.start_line, result.end_line) == (1, len(text.splitlines()))


def test_archive_session_never_overwrites(tmp_path: Path) -> None:
    first = archive_session(tmp_path, "first", slug="standup", now=NOW)
    second = archive_session(tmp_path, "second", slug="standup", now=NOW)
    third = archive_session(tmp_path, "third", slug="standup", now=NOW)
    assert [p.path.name for p in (first, second, third)] == [
        "2026-03-01-standup.md",
        "2026-03-01-standup-2.md",
        "2026-03-01-standup-3.md",
    ]
    assert first.path.read_text().endswith("first\n")
    assert second.path.read_text().endswith("second\n")


@pytest.mark.parametrize("slug", [None, "", "!!!", "会议记录"])
def test_archive_session_falls_back_to_timestamp(tmp_path: Path, slug: str | None) -> None:
    result = archive_session(tmp_path, "User: hi", slug=slug, now=NOW)
    assert result.path.name == "2026-03-01-140509.md"


def test_archive_empty_text_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidNoteError):
        archive_session(tmp_path, "  \n", slug="x", now=NOW)


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("Hello World", "hello-world"),
        ("  --API design--  ", "api-design"),
        ("naïve résumé", "naive-resume"),
        ("../../etc/passwd", "etc-passwd"),
        ("a" * 100, "a" * 60),
        (None, ""),
    ],
)
def test_sanitize_slug(raw: str | None, expected: str) -> None:
    assert sanitize_slug(raw) == expected
    assert re.fullmatch(r"[a-z0-9-]*", sanitize_slug(raw))
