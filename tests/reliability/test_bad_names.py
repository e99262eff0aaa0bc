"""A file whose name is not valid UTF-8 (raw bytes such as ``memory/bad\\xff.md``) is skipped and reported;
everything else indexes. Before, every sync raised UnicodeEncodeError, good files in the same write group were
dropped, memory_search blamed "invalid arguments" and the CLI printed a traceback. Real files with raw-byte
names, a real index, the CLI in a subprocess with a strict UTF-8 terminal encoding."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clawmem_core import MemoryConfig, MemoryIndex
from clawmem_core.tools import get_payload, search_payload

REPO = Path(__file__).resolve().parents[2]
BAD_SHOWN = "memory/bad\\xff.md"

pytestmark = pytest.mark.skipif(sys.platform in ("darwin", "win32"), reason="the file system refuses raw-byte names")


def _raw_file(directory: Path, name: bytes, text: str) -> None:
    path = os.path.join(os.fsencode(directory), name)
    with open(path, "wb") as fh:
        fh.write(text.encode("utf-8"))


def _workspace(root: Path, n_good: int = 40) -> Path:
    (root / "memory").mkdir(parents=True)
    (root / "MEMORY.md").write_text("# Memory\n\n- Dana prefers green tea.\n", encoding="utf-8")
    for i in range(n_good):
        (root / "memory" / f"note-{i:02d}.md").write_text(f"# Note {i}\n\n- pelican{i} nests by the river.\n",
                                                          encoding="utf-8")
    (root / "memory" / "中文.md").write_text("# 笔记\n\n- 我们周末去了杭州西湖。\n", encoding="utf-8")
    _raw_file(root / "memory", b"bad\xff.md", "# Bad name\n\n- the walrus hides here.\n")
    return root


def _config(**extra: object) -> MemoryConfig:
    return MemoryConfig.from_dict({"provider": "none", **extra})


@pytest.mark.parametrize("embedded", [False, True])
def test_undecodable_name_is_skipped_and_the_rest_indexes(tmp_path: Path, embedded: bool) -> None:
    from clawmem_core.testing import HashEmbedder

    ws = _workspace(tmp_path / "ws")
    with MemoryIndex(ws, config=_config(), state_dir=tmp_path / "state",
                     embedder=HashEmbedder() if embedded else None) as mem:
        report = mem.sync()
        assert f"{BAD_SHOWN}: file name is not valid UTF-8" in report.files_skipped
        assert report.files_indexed == 42  # MEMORY.md, 40 notes, the Chinese one: none dropped with the bad one
        assert {h.path for h in mem.search("pelican7 nests", min_score=0)} >= {"memory/note-07.md"}
        assert any(h.path == "memory/中文.md" for h in mem.search("杭州西湖", min_score=0))
        assert mem.status().files == 42
        issues = mem.status().issues
        assert any(BAD_SHOWN in i for i in issues)
        json.dumps(mem.status().to_dict(), ensure_ascii=False).encode("utf-8")  # printable, serialisable
        # The next sync (nothing changed: the no-lock path) still says so.
        again = mem.sync()
        assert f"{BAD_SHOWN}: file name is not valid UTF-8" in again.files_skipped
        payload = search_payload(mem, "pelican3 river")
        assert payload["results"] and "disabled" not in payload
        json.dumps(payload, ensure_ascii=False).encode("utf-8")


def test_existing_index_keeps_updating_after_a_bad_name_appears(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "a.md").write_text("- The heron is grey.\n", encoding="utf-8")
    with MemoryIndex(ws, config=_config(), state_dir=tmp_path / "state") as mem:
        mem.sync()
        _raw_file(ws / "memory", b"bad\xff.md", "- bad\n")
        os.makedirs(os.path.join(os.fsencode(ws / "memory"), b"dir\xfe"))
        _raw_file(Path(os.fsdecode(os.path.join(os.fsencode(ws / "memory"), b"dir\xfe"))), b"inside.md", "- x\n")
        (ws / "memory" / "b.md").write_text("- The kingfisher is blue.\n", encoding="utf-8")
        report = mem.sync()
        assert sorted(report.files_skipped) == [
            "memory/bad\\xff.md: file name is not valid UTF-8",
            "memory/dir\\xfe/inside.md: file name is not valid UTF-8",
        ]
        assert [h.path for h in mem.search("kingfisher blue")] == ["memory/b.md"]


def test_transcript_with_an_undecodable_name_is_skipped(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("- hello\n", encoding="utf-8")
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    line = json.dumps({"type": "message", "message": {"role": "user", "content": "the narwhal sticker is mine"}})
    (sessions / "good.jsonl").write_text(line + "\n", encoding="utf-8")
    _raw_file(sessions, b"bad\xff.jsonl", line.replace("narwhal", "walrus") + "\n")
    cfg = _config(sources=["memory", "sessions"], experimental={"session_memory": True})
    with MemoryIndex(ws, config=cfg, state_dir=tmp_path / "state", sessions_dir=sessions) as mem:
        report = mem.sync()
        assert "sessions/bad\\xff.jsonl: file name is not valid UTF-8" in report.files_skipped
        assert [h.path for h in mem.search("narwhal sticker")] == ["sessions/good.jsonl"]


def test_memory_get_refuses_a_surrogate_path_cleanly(tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws", 1)
    with MemoryIndex(ws, config=_config(), state_dir=tmp_path / "state") as mem:
        payload = get_payload(mem, "memory/bad\udcff.md")
    assert payload["text"] == "" and "not valid UTF-8" in payload["error"]
    json.dumps(payload, ensure_ascii=False).encode("utf-8")  # no lone surrogate reaches the payload


def test_cli_reports_instead_of_a_traceback(tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws", 3)
    env = {**os.environ, "PYTHONPATH": str(REPO), "CLAWMEM_STATE_DIR": str(tmp_path / "state"),
           "PYTHONIOENCODING": "utf-8:strict", "LC_ALL": "C.UTF-8"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "clawmem_core.cli", "--workspace", str(ws), *args],
                              capture_output=True, text=True, env=env, timeout=120)

    index = run("index", "--json")
    assert index.returncode == 0, index.stderr
    assert "Traceback" not in index.stderr
    assert f"{BAD_SHOWN}: file name is not valid UTF-8" in json.loads(index.stdout)["files_skipped"]
    status = run("status", "--json")
    assert status.returncode == 0 and "Traceback" not in status.stderr, status.stderr
    assert any(BAD_SHOWN in issue for issue in json.loads(status.stdout)["status"]["issues"])
    plain = run("status")
    assert plain.returncode == 0 and "Traceback" not in plain.stderr, plain.stderr
    search = run("search", "pelican1 river", "--json")
    assert search.returncode == 0 and json.loads(search.stdout)["results"], search.stderr


def test_workspace_path_with_undecodable_bytes(tmp_path: Path) -> None:
    """The workspace itself has a raw byte in its name: everything works and the CLI prints it escaped. An
    index path that is not valid UTF-8 (SQLite cannot open it) is a one-line error, not a traceback."""
    ws = Path(os.fsdecode(os.path.join(os.fsencode(tmp_path), b"ws\xff")))
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("- The heron nests by the mill.\n", encoding="utf-8")

    def run(state: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
        env = {**os.environ, "PYTHONPATH": str(REPO), "CLAWMEM_STATE_DIR": os.fsencode(state),
               "PYTHONIOENCODING": "utf-8:strict", "LC_ALL": "C.UTF-8"}
        return subprocess.run([sys.executable, "-m", "clawmem_core.cli", "--workspace", os.fsencode(ws), *args],
                              capture_output=True, env=env, timeout=120)

    for args in (["index"], ["status"], ["search", "heron", "--json"], ["status", "--json"]):
        done = run(tmp_path / "state", *args)
        assert done.returncode == 0 and b"Traceback" not in done.stderr, (args, done.stderr[-400:])
    assert "ws\\xff" in json.loads(done.stdout)["status"]["workspace"]
    bad_state = run(ws / ".state", "index")
    assert bad_state.returncode == 1 and b"Traceback" not in bad_state.stderr
    assert b"not valid UTF-8" in bad_state.stderr and len(bad_state.stderr.strip().splitlines()) == 1
