"""Odd workspaces: a 50 MB note, a one-million-character line, deep nesting and symlink loops.
Each is indexed sanely (or skipped where it must be), and no Markdown file changes."""

from __future__ import annotations

import hashlib
import os
import random
from pathlib import Path

from clawmem_core import MemoryConfig, MemoryIndex
from clawmem_core.read import MAX_PATH_CHARS


def _digests(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, _, files in os.walk(root, followlinks=False):
        for name in files:
            p = Path(dirpath, name)
            if not p.is_symlink():
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def test_fifty_megabyte_note_and_million_character_line(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    words = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima".split()
    rng = random.Random(7)
    lines = []
    size = 0
    while size < 50 * 1024 * 1024:
        line = " ".join(rng.choice(words) for _ in range(12))
        lines.append(line)
        size += len(line) + 1
    lines.append("the zanzibar needle is at the very end")
    (ws / "memory" / "huge.md").write_text("\n".join(lines) + "\n")
    (ws / "memory" / "longline.md").write_text("x" * 999_000 + " quetzalcoatl tail\n")
    before = _digests(ws)
    # Over the default size limit (16 MiB): skipped with its reason, and still readable in pieces.
    with MemoryIndex(ws, state_dir=tmp_path / "s", config=MemoryConfig(provider="none")) as mem:
        report = mem.sync()
        assert report.files_indexed == 1 and len(report.files_skipped) == 1
        assert report.files_skipped[0].startswith("memory/huge.md: too large")
        assert not mem.search("zanzibar needle")
        whole = mem.read("memory/huge.md")
        assert whole.truncated and len(whole.text) <= 20_000 and whole.next_from == whole.to_line + 1
    limit = MemoryConfig.from_dict({"provider": "none", "sync": {"max_file_bytes": 64 * 1024 * 1024}})
    with MemoryIndex(ws, state_dir=tmp_path / "s", config=limit) as mem:
        report = mem.sync()
        assert report.full and report.files_indexed == 2 and not report.files_skipped  # another limit: rebuilt
        needle = mem.search("zanzibar needle")
        assert needle and needle[0].path == "memory/huge.md" and needle[0].start_line <= len(lines) <= needle[0].end_line
        tail = mem.search("quetzalcoatl")
        assert tail and tail[0].path == "memory/longline.md" and (tail[0].start_line, tail[0].end_line) == (1, 1)
        assert all(len(h.snippet) <= 700 for h in needle + tail)
        got = mem.read("memory/huge.md", from_line=len(lines), lines=1)
        assert got.text == lines[-1] and got.total_lines == len(lines)
    assert _digests(ws) == before


def test_deep_nesting_and_symlink_loops(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    deep = ws / "memory"
    depth = 0
    while len(str(deep / "d" / "note.md")) < MAX_PATH_CHARS - 100 and depth < 400:
        deep = deep / "d"
        depth += 1
    deep.mkdir(parents=True)
    (deep / "note.md").write_text("the bottom of the well holds a lantern\n")
    (ws / "memory" / "loop").symlink_to(ws / "memory", target_is_directory=True)
    (ws / "memory" / "d" / "up").symlink_to(ws, target_is_directory=True)
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "x.md").write_text("extra lantern notes\n")
    (extra / "self").symlink_to(extra, target_is_directory=True)
    (extra / "ws").symlink_to(ws, target_is_directory=True)
    before = _digests(ws) | _digests(extra)
    cfg = MemoryConfig(provider="none", extra_paths=[str(extra), str(extra / "self")])
    with MemoryIndex(ws, state_dir=tmp_path / "s", config=cfg) as mem:
        report = mem.sync()
        assert report.files_indexed == 2  # the deep note and extra/x.md, each once
        paths = {h.path for h in mem.search("lantern")}
        assert paths == {str((deep / "note.md").relative_to(ws)).replace(os.sep, "/"), "../extra/x.md"}
        assert depth > 100
        assert "lantern" in mem.read(str((deep / "note.md").relative_to(ws))).text
    assert _digests(ws) | _digests(extra) == before
