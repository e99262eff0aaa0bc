"""``memory_write`` refuses what would break memory: a note over ``write.max_note_chars``, a note that would take
its file past ``sync.max_file_bytes`` (the file would drop out of search), and a note its file's legacy encoding
cannot hold (the file would end up in two encodings). Every write path refuses it the same way, with an argument
error naming the limit, and the file and the index stay as they were. A note its legacy file can hold is
appended in that file's encoding."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from clawmem_core import MemoryConfig, MemoryIndex
from clawmem_core.errors import ConfigError
from clawmem_core.memory_write import write_payload
from clawmem_core.safe_fs import decode
from clawmem_core.writing import NoteEncodingError, NoteTooLargeError, append_note

NOW = datetime(2026, 3, 1, 14, 5, 9)


def _mem(tmp_path: Path, **config: Any) -> MemoryIndex:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    if not (ws / "MEMORY.md").exists():
        (ws / "MEMORY.md").write_text("# Memory\n\n- Dana prefers green tea.\n", encoding="utf-8")
    mem = MemoryIndex(ws, config=MemoryConfig.from_dict({"provider": "none", **config}), state_dir=tmp_path / "state")
    mem.sync()
    return mem


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[MemoryIndex]:
    index = _mem(tmp_path, sync={"maxFileBytes": 2000})
    yield index
    index.close()


def _langchain(mem: MemoryIndex) -> Callable[[str, str], dict[str, Any]]:
    pytest.importorskip("langchain_core")
    from langchain_clawmem.memory_write import create_memory_write_tool

    tool = create_memory_write_tool(mem)
    return lambda text, target: json.loads(tool.invoke({"text": text, "target": target}))


def _llama_index(mem: MemoryIndex) -> Callable[[str, str], dict[str, Any]]:
    pytest.importorskip("llama_index.core")
    from llama_index_clawmem.memory_write import create_memory_write_tool

    tool = create_memory_write_tool(mem)
    return lambda text, target: tool.call(text=text, target=target).raw_output


def _core(mem: MemoryIndex) -> Callable[[str, str], dict[str, Any]]:
    return lambda text, target: write_payload(mem, text, target)  # also the MCP server's memory_write


WRITERS = {"core": _core, "langchain": _langchain, "llama_index": _llama_index}


def _state(mem: MemoryIndex) -> tuple[dict[str, bytes], list[tuple[str, int]]]:
    files = {p.relative_to(mem.workspace).as_posix(): p.read_bytes() for p in mem.workspace.rglob("*.md")}
    return files, [(h.path, h.start_line) for h in mem.search("green tea Dana", min_score=0)]


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_note_over_the_size_limit_is_refused_by_every_write_path(tmp_path: Path, writer: str) -> None:
    mem = _mem(tmp_path)  # the default limit: 20,000 characters
    try:
        write = WRITERS[writer](mem)
        before = _state(mem)
        payload = write("Dana likes green tea. 李伟喜欢粤菜。" * 700, "long_term")  # 20,300 characters
        assert "disabled" not in payload and payload.get("action"), payload
        assert "20,000" in payload["error"] and "write.max_note_chars" in payload["error"]
        assert _state(mem) == before
        ok = write("Dana likes green tea. 李伟喜欢粤菜。" * 600, "daily")  # 17,400 characters: under the limit
        assert ok.get("indexed") is True and ok["path"].startswith("memory/")
    finally:
        mem.close()


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_note_that_would_take_its_file_past_the_indexed_size_is_refused(mem: MemoryIndex, writer: str) -> None:
    write = WRITERS[writer](mem)
    for i in range(60):  # notes under the note limit, until MEMORY.md is nearly 2,000 bytes
        payload = write(f"- Fact {i}: Dana's colleague number {i} drinks green tea at {i} o'clock sharp.", "long_term")
        if "error" in payload:
            break
        assert payload["indexed"] is True
        assert "MEMORY.md" in {h.path for h in mem.search(f"colleague number {i}", min_score=0)}  # still searchable
    else:
        pytest.fail("MEMORY.md never reached sync.max_file_bytes")
    assert "disabled" not in payload and payload.get("action")
    assert "2,000" in payload["error"] and "sync.max_file_bytes" in payload["error"]
    assert (mem.workspace / "MEMORY.md").stat().st_size <= 2000
    assert "MEMORY.md" in {h.path for h in mem.search("Dana prefers green tea", min_score=0)}
    assert write("- Dana's new fact.", "daily").get("indexed") is True  # the daily note still takes notes


def test_core_append_refuses_before_touching_the_file(tmp_path: Path) -> None:
    first = append_note(tmp_path, "Dana prefers green tea.", "long_term", now=NOW)
    before = first.path.read_bytes()
    with pytest.raises(NoteTooLargeError, match="10-character limit"):
        append_note(tmp_path, "x" * 11, "long_term", now=NOW, max_note_chars=10)
    with pytest.raises(NoteTooLargeError, match="100-byte limit"):
        append_note(tmp_path, "中文" * 30, "long_term", now=NOW, max_file_bytes=100)  # 180 bytes of UTF-8
    assert first.path.read_bytes() == before
    with pytest.raises(NoteTooLargeError):  # a new daily file is not even created
        append_note(tmp_path, "y" * 500, "daily", now=NOW, max_file_bytes=100)
    assert not (tmp_path / "memory").exists()


def test_write_limit_config() -> None:
    assert MemoryConfig().write.max_note_chars == 20_000
    assert MemoryConfig.from_dict({"write": {"maxNoteChars": 500}}).write.max_note_chars == 500
    for bad in (0, -1, "many", float("nan")):
        with pytest.raises(ConfigError):
            MemoryConfig.from_dict({"write": {"max_note_chars": bad}})


# -- item 23: a note joins its file in the file's own encoding -------------------------------------------------

CP1252 = (
    "# Mémoire\n\n"
    "- Le café crème de Zoë coûte 3,50 € à la brasserie près de l'hôtel.\n"
    "- Über die Straße: Jürgen trinkt Grüntee, François préfère le thé à la menthe.\n"
    "- Señor Muñoz déjeune à midi ; naïve façade, rôle, œuvre, « guillemets ».\n"
)
GB18030 = (
    "# 记忆\n\n"
    "- 李伟喜欢清淡的粤菜，周末常去广州的茶楼喝早茶。\n"
    "- 王芳在上海的一家科技公司工作，负责数据分析和机器学习项目。\n"
    "- 团队每周三下午开会，讨论项目进度和下周的计划安排。\n"
)


@pytest.mark.parametrize(
    "encoding,original,note,query",
    [
        ("cp1252", CP1252, "- Zoë a réservé la crêperie « Ty Breizh » pour vendredi.", "crêperie Breizh réservé"),
        ("gb18030", GB18030, "- 张磊下个月去杭州出差，住在西湖附近的酒店。", "张磊杭州出差"),
    ],
    ids=["cp1252", "gb18030"],
)
def test_a_note_is_appended_in_its_files_legacy_encoding(tmp_path: Path, encoding: str, original: str, note: str, query: str) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "MEMORY.md").write_bytes(original.encode(encoding))
    mem = _mem(tmp_path)
    try:
        assert write_payload(mem, note, "long_term")["indexed"] is True
        data = (ws / "MEMORY.md").read_bytes()
        assert data.decode(encoding) == original + "\n" + note + "\n"  # the whole file in one encoding
        assert note.encode("utf-8") not in data
        assert decode(data) == original + "\n" + note + "\n"  # and read back as the index reads it
        assert [h.path for h in mem.search(query, min_score=0)][:1] == ["MEMORY.md"]
        got = mem.read("MEMORY.md")
        assert note in got.text and original.splitlines()[2] in got.text
    finally:
        mem.close()


def test_a_note_the_legacy_encoding_cannot_hold_is_refused(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "MEMORY.md").write_bytes(CP1252.encode("cp1252"))
    mem = _mem(tmp_path)
    try:
        with pytest.raises(NoteEncodingError, match="cp1252"):
            mem.write("- 李伟喜欢粤菜", "long_term")
        payload = write_payload(mem, "- Zoë et 李伟", "long_term")
        assert "disabled" not in payload and "cp1252" in payload["error"] and payload.get("action")
        assert (ws / "MEMORY.md").read_bytes() == CP1252.encode("cp1252")
    finally:
        mem.close()
