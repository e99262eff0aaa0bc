"""Opening, reading and writing memory files safely: notes that would make a file unindexable,
FIFOs as write targets, size limits, true refusal reasons, numeric strings at the tool boundary,
one file reached under two names, and encodings (UTF-16/32 with a BOM, legacy code pages, binary)."""

from __future__ import annotations

import errno
import os
import threading
import tracemalloc
from datetime import datetime
from pathlib import Path

import pytest

from clawmem_core import MemoryConfig
from clawmem_core.errors import ConfigError, PathNotAllowedError
from clawmem_core.memory_write import write_payload
from clawmem_core.read import read_memory_file
from clawmem_core.tools import get_payload, search_payload
from clawmem_core.writing import InvalidNoteError, append_note

from .conftest import IndexFactory, WorkspaceFactory, keyword_only, tree_digest

NOW = datetime(2026, 3, 1, 9, 0, 0)


def _bounded(fn, fifo: Path, timeout: float = 15.0):  # type: ignore[no-untyped-def]
    """Run ``fn``; when it blocks (on ``fifo``), release it and fail."""
    box: dict = {}

    def target() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        os.close(os.open(fifo, os.O_RDWR | os.O_NONBLOCK))
        thread.join(timeout)
        pytest.fail("blocked on a FIFO")
    if "error" in box:
        raise box["error"]
    return box.get("result")


# -- defect 2: what a write may hold ---------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["long_term", "daily"])
@pytest.mark.parametrize("bad", ["note\x00", "a\x00b", "bell\x07", "esc \x1b[31m red"])
def test_control_characters_are_refused_and_the_file_stays_searchable(
        make_workspace: WorkspaceFactory, open_index: IndexFactory, target: str, bad: str) -> None:
    ws = make_workspace({"MEMORY.md": "# Long term\n\nThe lighthouse keeper likes jazz.\n",
                         "memory/2026-03-01.md": "# 2026-03-01\n\nThe lighthouse keeper fixed the lamp.\n"})
    mem = open_index(ws, embedder=None, config=keyword_only())
    mem.sync()
    before = tree_digest(ws)
    with pytest.raises(InvalidNoteError, match="control character"):
        mem.write(bad, target=target, now=NOW)
    payload = write_payload(mem, bad, target)
    assert "error" in payload and "control character" in payload["error"]
    assert tree_digest(ws) == before
    mem.sync()
    paths = {h.path for h in mem.search("lighthouse keeper", min_score=0)}
    assert {"MEMORY.md", "memory/2026-03-01.md"} <= paths


def test_tabs_and_chinese_are_text(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    ws = make_workspace({"MEMORY.md": "# Long term\n"})
    mem = open_index(ws, embedder=None, config=keyword_only())
    mem.write("灯塔看守人\t喜欢爵士乐", target="long_term")
    assert mem.search("灯塔看守人")[0].path == "MEMORY.md"


def test_lone_surrogate_is_refused_before_anything_is_created(tmp_path: Path) -> None:
    with pytest.raises(InvalidNoteError, match="surrogate"):
        append_note(tmp_path, "half a pair \ud83d here", now=NOW)
    assert not (tmp_path / "memory").exists()
    with pytest.raises(InvalidNoteError):
        append_note(tmp_path, "x\udfff", "long_term", now=NOW)
    assert not (tmp_path / "MEMORY.md").exists()


def test_note_appended_to_a_utf16_file_in_its_encoding(make_workspace: WorkspaceFactory,
                                                        open_index: IndexFactory) -> None:
    ws = make_workspace({"MEMORY.md": "# Long term\n\n咖啡 espresso\n".encode("utf-16")})
    mem = open_index(ws, embedder=None, config=keyword_only())
    result = mem.write("灯塔 lighthouse", target="long_term")
    text = (ws / "MEMORY.md").read_bytes().decode("utf-16")
    assert text.endswith("咖啡 espresso\n\n灯塔 lighthouse\n")
    assert text.split("\n")[result.start_line - 1] == "灯塔 lighthouse"
    assert {h.path for h in mem.search("lighthouse")} == {"MEMORY.md"}
    assert mem.search("咖啡")[0].path == "MEMORY.md"


# -- defect 4: a FIFO as the write target ----------------------------------------------------------------------


@pytest.mark.parametrize("target, rel", [("daily", "memory/2026-03-01.md"), ("long_term", "MEMORY.md")])
def test_write_to_a_fifo_is_refused_without_blocking(tmp_path: Path, target: str, rel: str) -> None:
    (tmp_path / "memory").mkdir()
    fifo = tmp_path / rel
    os.mkfifo(fifo)
    with pytest.raises(PathNotAllowedError, match="not a regular file"):
        _bounded(lambda: append_note(tmp_path, "a note", target, now=NOW), fifo)  # type: ignore[arg-type]


def test_write_to_a_directory_named_like_the_note_is_refused(tmp_path: Path) -> None:
    (tmp_path / "memory" / "2026-03-01.md").mkdir(parents=True)
    with pytest.raises(PathNotAllowedError, match="not a regular file"):
        append_note(tmp_path, "a note", now=NOW)


# -- defect 11: size limits --------------------------------------------------------------------------------------


def _numbered(n: int, width: int = 40) -> str:
    return "".join(f"{i:06d} " + "x" * (width - 8) + "\n" for i in range(1, n + 1))


def test_memory_get_caps_its_text_and_says_where_to_go_on(make_workspace: WorkspaceFactory,
                                                          open_index: IndexFactory) -> None:
    ws = make_workspace({"memory/big.md": _numbered(5000)})  # 200,000 characters
    mem = open_index(ws, embedder=None, config=keyword_only())
    first = mem.read("memory/big.md")
    assert first.truncated and len(first.text) <= 20_000
    assert first.text.split("\n")[0].startswith("000001") and first.next_from == first.to_line + 1
    payload = get_payload(mem, "memory/big.md")
    assert payload["truncated"] is True and payload["nextFrom"] == first.next_from and payload["totalLines"] == 5000
    # following nextFrom reads the whole file, each line once
    seen, start = [], 1
    while start is not None:
        part = mem.read("memory/big.md", from_line=start)
        seen += part.text.split("\n")
        start = part.next_from if part.truncated else None
    assert len(seen) == 5000 and seen[-1].startswith("005000")
    # a small range is not cut
    small = mem.read("memory/big.md", from_line=10, lines=3)
    assert not small.truncated and small.text.split("\n")[0].startswith("000010")
    assert "truncated" not in get_payload(mem, "memory/big.md", 10, 3)


def test_memory_get_cap_is_configurable(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    ws = make_workspace({"MEMORY.md": _numbered(100)})
    mem = open_index(ws, embedder=None, config=MemoryConfig.from_dict({"provider": "none", "read": {"maxChars": 100}}))
    got = mem.read("MEMORY.md")
    assert got.truncated and len(got.text) <= 100 and (got.from_line, got.to_line, got.next_from) == (1, 2, 3)
    with pytest.raises(ConfigError):
        MemoryConfig.from_dict({"read": {"max_chars": 0}})


def test_one_line_longer_than_the_cap_is_cut_and_reading_goes_on(make_workspace: WorkspaceFactory) -> None:
    ws = make_workspace({"MEMORY.md": "short\n" + "y" * 50_000 + "\nafter\n"})
    got = read_memory_file(ws, [], "MEMORY.md", 2)
    assert got.truncated and got.text == "y" * 20_000 and got.next_from == 3
    assert read_memory_file(ws, [], "MEMORY.md", 3).text == "after"


def test_reading_two_lines_streams_the_file(make_workspace: WorkspaceFactory) -> None:
    ws = make_workspace({"memory/huge.md": _numbered(400_000, 50)})  # 20 MB
    tracemalloc.start()
    try:
        got = read_memory_file(ws, [], "memory/huge.md", 300_000, 2)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got.text.split("\n")[0].startswith("300000") and got.total_lines == 400_000
    assert peak < 2_000_000, f"reading 2 lines of a 20 MB file peaked at {peak} bytes"


def test_sync_skips_a_file_over_the_size_limit_with_its_reason(make_workspace: WorkspaceFactory,
                                                              open_index: IndexFactory) -> None:
    ws = make_workspace({"MEMORY.md": "jazz\n", "memory/big.md": "walrus " * 1000})
    cfg = MemoryConfig.from_dict({"provider": "none", "sync": {"max_file_bytes": 4096}})
    mem = open_index(ws, embedder=None, config=cfg)
    report = mem.sync()
    assert report.files_indexed == 1 and report.files_skipped == [
        "memory/big.md: too large (7000 bytes, over the 4096-byte limit)"]
    assert not mem.search("walrus")
    # it shrinks: indexed again; it grows again: its old chunks go
    (ws / "memory" / "big.md").write_text("walrus tusks\n")
    assert mem.sync().files_indexed == 1 and mem.search("walrus")[0].path == "memory/big.md"
    (ws / "memory" / "big.md").write_text("walrus " * 2000)
    assert any("too large" in s for s in mem.sync().files_skipped) and not mem.search("walrus")


# -- defect 12: true reasons, no absolute paths, numeric strings ---------------------------------------------


def test_refusal_gives_the_true_reason_for_an_over_long_name(make_workspace: WorkspaceFactory) -> None:
    ws = make_workspace({"MEMORY.md": "m\n", "memory/a.md": "a\n"})
    with pytest.raises(PathNotAllowedError) as info:
        read_memory_file(ws, [], "memory/" + "a" * 300 + "/x.md")
    assert "name too long" in str(info.value) and "symlink" not in str(info.value)


def test_permission_error_gives_its_reason_and_no_absolute_path(make_workspace: WorkspaceFactory,
                                                               open_index: IndexFactory,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    ws = make_workspace({"memory/locked.md": "secret\n"})
    mem = open_index(ws, embedder=None, config=keyword_only())
    real_open = os.open

    def denied(path, flags, mode=0o777, *, dir_fd=None):  # type: ignore[no-untyped-def]
        if os.fspath(path).endswith("locked.md"):
            raise PermissionError(errno.EACCES, "Permission denied", str(ws / "memory" / "locked.md"))
        return real_open(path, flags, mode, dir_fd=dir_fd) if dir_fd is not None else real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", denied)  # as root, permission bits alone would not refuse
    payload = get_payload(mem, "memory/locked.md")
    assert "permission denied" in payload["error"] and "symlink" not in payload["error"]
    assert str(ws) not in str(payload)


def test_numeric_strings_are_accepted_alike_at_the_tool_boundary(make_workspace: WorkspaceFactory,
                                                                 open_index: IndexFactory) -> None:
    ws = make_workspace({"MEMORY.md": "".join(f"jazz note {i}\n\n" + "filler words here. " * 120 + "\n"
                                              for i in range(12))})
    mem = open_index(ws, embedder=None, config=keyword_only())
    as_int = search_payload(mem, "jazz", max_results=5, min_score=0)
    as_str = search_payload(mem, "jazz", max_results="5", min_score="0")
    assert "error" not in as_str and as_str["results"] == as_int["results"] and len(as_str["results"]) == 5
    assert get_payload(mem, "MEMORY.md", "3", "1")["text"] == get_payload(mem, "MEMORY.md", 3, 1)["text"]
    assert "error" in search_payload(mem, "jazz", max_results="five")


# -- defect 18: one file under two names -----------------------------------------------------------------------


def test_memory_md_reached_under_two_names_is_indexed_once(make_workspace: WorkspaceFactory,
                                                           open_index: IndexFactory) -> None:
    """What a case-insensitive file system does (MEMORY.md and memory.md open the same file),
    made with a hard link: one inode under both names."""
    ws = make_workspace({"MEMORY.md": "# Long term\n\nThe lighthouse keeper likes jazz.\n"})
    os.link(ws / "MEMORY.md", ws / "memory.md")
    mem = open_index(ws, embedder=None, config=keyword_only())
    report = mem.sync()
    assert report.files_indexed == 1
    hits = mem.search("lighthouse jazz", min_score=0)
    assert [h.path for h in hits] == ["MEMORY.md"]
    assert mem.status().files == 1


# -- issue 12 item 8: encodings --------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-be-bom", "utf-32", "utf-8-sig"])
def test_bom_files_are_decoded(make_workspace: WorkspaceFactory, open_index: IndexFactory, codec: str) -> None:
    text = "# Notes\n\nCafé crème with the lighthouse keeper\n灯塔看守人喜欢咖啡\n"
    data = (b"\xfe\xff" + text.encode("utf-16-be")) if codec == "utf-16-be-bom" else text.encode(codec)
    ws = make_workspace({"memory/bom.md": data})
    mem = open_index(ws, embedder=None, config=keyword_only())
    report = mem.sync()
    assert report.files_indexed == 1 and not report.files_skipped
    assert mem.search("café crème")[0].path == "memory/bom.md"
    assert mem.search("灯塔看守人")[0].path == "memory/bom.md"
    got = mem.read("memory/bom.md", from_line=4, lines=1)
    assert got.text == "灯塔看守人喜欢咖啡" and got.total_lines == 4


@pytest.mark.parametrize("text, codec, query", [
    ("Café crème brûlée at the lighthouse, naïve façade\n", "cp1252", "café"),
    ("Grüße aus München von der schönen Straße\n", "latin-1", "münchen"),
    ("今天我们在灯塔喝咖啡，看守人很高兴。\n", "gb18030", "灯塔"),
])
def test_legacy_encodings_are_detected(make_workspace: WorkspaceFactory, open_index: IndexFactory, text: str,
                                       codec: str, query: str) -> None:
    ws = make_workspace({"memory/legacy.md": text.encode(codec)})
    mem = open_index(ws, embedder=None, config=keyword_only())
    mem.sync()
    hits = mem.search(query)
    assert hits and hits[0].path == "memory/legacy.md" and "\ufffd" not in hits[0].snippet
    assert mem.read("memory/legacy.md").text == text


def test_binary_is_skipped_and_counted_apart(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    ws = make_workspace({"MEMORY.md": "jazz\n", "memory/blob.md": b"\x00\x01\x02\xff" * 100})
    mem = open_index(ws, embedder=None, config=keyword_only())
    report = mem.sync()
    assert report.files_indexed == 1 and report.files_skipped == ["memory/blob.md: binary content"]
    with pytest.raises(PathNotAllowedError, match="binary"):
        mem.read("memory/blob.md")


def test_decode_and_streamed_reads_agree(make_workspace: WorkspaceFactory) -> None:
    """The sync (whole file) and memory_get (streamed) decode a file the same way, even when the
    first byte that is not UTF-8 comes late."""
    from clawmem_core.safe_fs import decode

    body = ("ascii line\n" * 20_000) + "caf\xe9 cr\xe8me\n"
    ws = make_workspace({"MEMORY.md": body.encode("cp1252")})
    whole = decode((ws / "MEMORY.md").read_bytes())
    assert whole is not None and whole.endswith("café crème\n")
    got = read_memory_file(ws, [], "MEMORY.md", 20_001, 1)
    assert got.text == "café crème" and got.total_lines == 20_001
