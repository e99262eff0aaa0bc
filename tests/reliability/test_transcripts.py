"""Session transcripts against hostile content and timing: a line nested too deeply for the JSON parser, an
unexpected failure during a sync (never blamed on the provider or the arguments), lines appended while a sync
embeds, and a sessions directory reached through a symlink (watched, re-indexed). Real files, a real index,
the real watcher."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from clawmem_core import MemoryConfig, MemoryIndex
from clawmem_core.sessions import SessionDeltaTracker, parse_transcript
from clawmem_core.testing import HashEmbedder
from clawmem_core.tools import ARGS_WARNING, ERROR_WARNING, search_payload

DEEP = "[" * 1500 + "]" * 1500


def _record(role: str, text: str) -> str:
    return json.dumps({"type": "message", "message": {"role": role, "content": [{"type": "text", "text": text}]}},
                      ensure_ascii=False)


def _append(path: Path, lines: list[str]) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("".join(line + "\n" for line in lines))


def _workspace(root: Path) -> Path:
    (root / "memory").mkdir(parents=True)
    (root / "MEMORY.md").write_text("# Memory\n\n- Dana prefers green tea.\n", encoding="utf-8")
    return root


def _config(**sync: Any) -> MemoryConfig:
    return MemoryConfig.from_dict({
        "provider": "none", "sources": ["memory", "sessions"], "experimental": {"session_memory": True},
        "sync": {"watch_debounce_ms": 200, "on_search": False, **sync},
    })


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


# ------------------------------------------------------------------------------------------------ nesting


def test_deeply_nested_line_is_skipped_and_counted() -> None:
    text = "\n".join([_record("user", "before the deep line"), DEEP, '{"type": "message", "message": ' + DEEP + "}",
                      "{not json", _record("assistant", "after it: 之后")]) + "\n"
    entry = parse_transcript(text)
    assert entry.content == "User: before the deep line\nAssistant: after it: 之后"
    assert entry.line_map == (1, 5)
    assert entry.skipped_lines == 3


def test_sync_survives_a_deeply_nested_line(tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws")
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    _append(sessions / "chat.jsonl", [_record("user", "The capybara visits on Fridays."), DEEP,
                                      _record("assistant", "卡皮巴拉每周五来。")])
    with MemoryIndex(ws, config=_config(), state_dir=tmp_path / "state", sessions_dir=sessions) as mem:
        report = mem.sync()
        assert report.lines_skipped == 1
        assert [h.path for h in mem.search("capybara Fridays")] == ["sessions/chat.jsonl"]
        assert [h.path for h in mem.search("卡皮巴拉")] == ["sessions/chat.jsonl"]
        payload = search_payload(mem, "capybara")
        assert payload["results"] and "disabled" not in payload


def test_a_message_cut_inside_a_surrogate_pair_does_not_stop_the_sync(tmp_path: Path) -> None:
    """JavaScript writes a string cut between the two halves of an emoji as a lone ``\\udXXX``
    escape (``JSON.stringify`` of ``"🦫".slice(0, 1)``): such a line is indexed with U+FFFD in its
    place, instead of failing every sync (and every search) of the agent."""
    ws = _workspace(tmp_path / "ws")
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    cut = '{"type": "message", "message": {"role": "user", "content": "The capybara emoji is \\ud83e"}}'
    low = '{"type": "message", "message": {"role": "assistant", "content": [{"type": "text", "text": "\\udeab 水豚"}]}}'
    _append(sessions / "chat.jsonl", [cut, low, _record("assistant", "卡皮巴拉每周五来。")])
    entry = parse_transcript((sessions / "chat.jsonl").read_text(encoding="utf-8"))
    assert entry.content == "User: The capybara emoji is \ufffd\nAssistant: \ufffd 水豚\nAssistant: 卡皮巴拉每周五来。"
    with MemoryIndex(ws, config=_config(), state_dir=tmp_path / "state", sessions_dir=sessions) as mem:
        mem.sync()
        assert [h.path for h in mem.search("capybara emoji")] == ["sessions/chat.jsonl"]
        assert [h.path for h in mem.search("卡皮巴拉")] == ["sessions/chat.jsonl"]
        assert [h.path for h in mem.search("green tea")] == ["MEMORY.md"]


def test_an_unexpected_sync_failure_is_not_blamed_on_the_provider(tmp_path: Path, monkeypatch) -> None:
    """Fault injection: chunking raises the RecursionError a parser bug would. The payload names it; it is
    neither "invalid arguments" nor "an embedding/provider error", and the Markdown is untouched."""
    from clawmem_core import sync as sync_module
    from clawmem_core.errors import IndexingError

    ws = _workspace(tmp_path / "ws")
    before = (ws / "MEMORY.md").read_bytes()

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RecursionError("maximum recursion depth exceeded while decoding a JSON array")

    monkeypatch.setattr(sync_module, "chunk_markdown", broken)
    with MemoryIndex(ws, config=_config(), state_dir=tmp_path / "state", embedder=HashEmbedder()) as mem:
        with pytest.raises(IndexingError, match="RecursionError"):
            mem.sync()
        payload = search_payload(mem, "green tea")
    assert payload["results"] == [] and payload["disabled"] is True
    assert payload["warning"] not in (ERROR_WARNING, ARGS_WARNING)
    assert "RecursionError" in payload["error"] and "not a provider problem" in payload["warning"]
    assert (ws / "MEMORY.md").read_bytes() == before


# ------------------------------------------------------------------------------------------------ timing


def test_lines_appended_while_a_sync_works_are_not_counted_as_indexed(tmp_path: Path, monkeypatch) -> None:
    """Lines appended after the sync read the transcript (while it parses, chunks, embeds) are not taken as
    indexed: the tracker records the size read, so they cross the threshold and the next sync indexes them.
    The append is injected at the parse, the earliest point after the read."""
    from clawmem_core import sessions as sessions_module

    ws = _workspace(tmp_path / "ws")
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    transcript = sessions / "chat.jsonl"
    _append(transcript, [_record("user", "first part of the chat")])
    late = [_record("user", f"late line {i} about the axolotl called Gus") for i in range(6)]
    parse = sessions_module.parse_transcript

    def parse_while_the_chat_goes_on(text: str) -> Any:
        if late:
            _append(transcript, late)
            late.clear()
        return parse(text)

    cfg = _config(sessions={"delta_bytes": 100_000, "delta_messages": 5})
    with MemoryIndex(ws, config=cfg, state_dir=tmp_path / "state", sessions_dir=sessions,
                     embedder=HashEmbedder()) as mem:
        monkeypatch.setattr(sessions_module, "parse_transcript", parse_while_the_chat_goes_on)
        mem.sync()
        monkeypatch.setattr(sessions_module, "parse_transcript", parse)
        assert not late, "the lines were appended during the sync"
        assert mem._sessions.state(transcript).last_size < transcript.stat().st_size  # what was read
        # The 6 late lines cross the 5-message threshold: the next automatic sync indexes them.
        assert mem.notify_session_update(transcript) is True
        mem.sync(reason="search")
        hits = mem.search("axolotl Gus", min_score=0)
        assert hits[0].path == "sessions/chat.jsonl" and "axolotl called Gus" in hits[0].snippet


# ------------------------------------------------------------------------------------------------ symlinks


def test_tracker_treats_a_symlinked_path_and_its_real_path_as_one(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    _append(real / "a.jsonl", [_record("user", "x" * 50)])
    tracker = SessionDeltaTracker(delta_bytes=10, delta_messages=0)
    assert tracker.observe(real / "a.jsonl") is True
    assert tracker.is_dirty(link / "a.jsonl")
    tracker.mark_indexed(link / "a.jsonl")
    assert not tracker.is_dirty(real / "a.jsonl") and not tracker.dirty_files


def test_symlinked_sessions_dir_is_watched_and_reindexed(tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws")
    real = tmp_path / "real-sessions"
    real.mkdir()
    link = tmp_path / "sessions-link"
    link.symlink_to(real, target_is_directory=True)
    transcript = real / "chat.jsonl"
    _append(transcript, [_record("user", "Which planetarium did we visit?")])
    cfg = _config(sessions={"delta_bytes": 100_000, "delta_messages": 3})
    with MemoryIndex(ws, config=cfg, state_dir=tmp_path / "state", sessions_dir=link) as mem:
        watcher = mem.watch()
        mem.sync()
        assert watcher.watched["flat"] and Path(os.path.realpath(real)) in watcher.watched["flat"]
        assert [h.path for h in mem.search("planetarium")] == ["sessions/chat.jsonl"]
        _append(transcript, [_record("user", f"The narwhal sticker number {i}.") for i in range(4)])
        assert wait_until(lambda: [h.path for h in mem.search("narwhal sticker")] == ["sessions/chat.jsonl"])
