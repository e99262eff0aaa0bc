"""The pre-compaction flush logic: threshold maths, once per cycle, read-only skip, prompts, estimate, archive."""

from __future__ import annotations

import os
import re
from datetime import datetime
from pathlib import Path

import pytest

from clawmem_core import MemoryConfig, MemoryIndex
from clawmem_core.flush import (
    FlushCycleState,
    FlushPolicy,
    archive_conversation,
    estimate_messages_tokens,
    estimate_tokens,
    flush_prompt,
    flush_system_prompt,
    format_conversation,
    is_silent_reply,
    workspace_writable,
)

NOW = datetime(2026, 3, 1, 14, 5, 9)


def test_threshold_maths() -> None:
    policy = FlushPolicy(200_000, reserve_tokens=20_000, soft_threshold_tokens=4000)
    assert policy.threshold == 176_000
    assert not policy.should_flush(175_999)
    assert policy.should_flush(176_000) and policy.should_flush(199_000)
    assert FlushPolicy(128_000).threshold == 128_000 - 20_000 - 4000  # defaults
    tiny = FlushPolicy(10_000, reserve_tokens=8000, soft_threshold_tokens=4000)
    assert tiny.threshold == 0 and not tiny.should_flush(9999)  # no room: never flush
    assert not FlushPolicy(10_000, reserve_tokens=0, soft_threshold_tokens=0).should_flush(0)
    assert not FlushPolicy(1000, reserve_tokens=0, enabled=False).should_flush(5000)
    for bad in ({"context_window": 0}, {"context_window": -5}, {"context_window": 100, "reserve_tokens": -1}, {"context_window": 1.5}):
        with pytest.raises(ValueError):
            FlushPolicy(**bad)  # type: ignore[arg-type]


def test_once_per_compaction_cycle() -> None:
    policy = FlushPolicy(10_000, reserve_tokens=1000, soft_threshold_tokens=1000)
    cycle = FlushCycleState()
    assert policy.should_flush(8500, cycle)
    cycle.mark_flushed()
    assert cycle.flushed_this_cycle
    assert not policy.should_flush(8500, cycle) and not policy.should_flush(9900, cycle)
    cycle.mark_compacted()
    assert cycle.compaction_count == 1 and not cycle.flushed_this_cycle
    assert not policy.should_flush(2000, cycle)  # after compaction, below the threshold again
    assert policy.should_flush(8100, cycle)
    cycle.mark_flushed()
    assert cycle.to_dict() == {"compaction_count": 1, "flushed_at_compaction": 1}
    restored = FlushCycleState.from_dict(cycle.to_dict())
    assert not policy.should_flush(9000, restored)
    assert FlushCycleState.from_dict(None) == FlushCycleState()


def test_read_only_workspace_skips(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    assert workspace_writable(ws)
    assert FlushPolicy(1000, reserve_tokens=0, soft_threshold_tokens=0, workspace=ws).should_flush(2000)
    assert not FlushPolicy(1000, reserve_tokens=0, soft_threshold_tokens=0, workspace=ws, read_only=True).should_flush(2000)
    missing = tmp_path / "nowhere"
    assert not workspace_writable(missing)
    assert not FlushPolicy(1000, reserve_tokens=0, soft_threshold_tokens=0, workspace=missing).should_flush(2000)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="permission bits do not bind root")
def test_read_only_memory_dir_skips(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    os.chmod(ws / "memory", 0o555)
    try:
        assert not workspace_writable(ws)
        assert not FlushPolicy(1000, reserve_tokens=0, soft_threshold_tokens=0, workspace=ws).should_flush(2000)
    finally:
        os.chmod(ws / "memory", 0o755)
    ws2 = tmp_path / "ws2"
    ws2.mkdir()
    os.chmod(ws2, 0o555)  # no memory/ yet: the workspace itself decides
    try:
        assert not workspace_writable(ws2)
    finally:
        os.chmod(ws2, 0o755)


def test_token_estimate() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("abcd") == 1 and estimate_tokens("abcde") == 2
    assert estimate_tokens("x" * 4000) == 1000
    assert estimate_tokens("记忆系统") == 4  # one token per CJK character
    assert estimate_tokens("ab记忆") == 3  # (2 + 2*4) / 4 -> 3
    messages = [{"role": "user", "content": "x" * 400}, {"role": "assistant", "content": [{"type": "text", "text": "y" * 40}]}, "z" * 8]
    assert estimate_messages_tokens(messages) == 100 + 10 + 2 + 3 * 4


def test_prompts() -> None:
    prompt = flush_prompt(NOW)
    assert "memory/2026-03-01.md" in prompt and "memory/YYYY-MM-DD.md" in prompt
    assert "NO_REPLY" in prompt and "Append only" in prompt and "memory_write" in prompt
    assert "memory/2026-03-01.md" in flush_system_prompt(NOW) and "NO_REPLY" in flush_system_prompt(NOW)
    assert is_silent_reply("NO_REPLY") and is_silent_reply("  NO_REPLY.\n") and is_silent_reply("")
    assert not is_silent_reply("Stored two notes.")


def test_format_and_archive(tmp_path: Path) -> None:
    messages = [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Book the  Lisbon offsite"},
        {"role": "assistant", "content": ""},
        {"role": "tool", "content": "{}"},
        {"role": "assistant", "content": "Booked Hotel Avenida."},
        {"role": "assistant", "content": "NO_REPLY"},
    ]
    assert format_conversation(messages) == "User: Book the  Lisbon offsite\nAssistant: Booked Hotel Avenida."
    assert format_conversation(messages, max_messages=1) == "Assistant: Booked Hotel Avenida."
    ws = tmp_path / "ws"
    ws.mkdir()
    with MemoryIndex(ws, config=MemoryConfig(provider="none"), state_dir=tmp_path / "state") as mem:
        asked: list[str] = []

        def slug_fn(conversation: str) -> str:
            asked.append(conversation)
            return "Lisbon Offsite\nextra words"

        result = archive_conversation(mem, messages, slug_fn=slug_fn, now=NOW)
        assert result is not None and result.path.name == "2026-03-01-lisbon-offsite.md"
        assert asked and "Hotel Avenida" in asked[0]
        assert mem.search("Lisbon Avenida")[0].path == "memory/2026-03-01-lisbon-offsite.md"

        def broken(conversation: str) -> str:
            raise RuntimeError("model down")

        fallback = archive_conversation(mem, messages, slug_fn=broken, now=NOW)
        assert fallback is not None and fallback.path.name == "2026-03-01-140509.md"
        explicit = archive_conversation(mem, "User: hi", slug="Given Slug", slug_fn=slug_fn, now=NOW)
        assert explicit is not None and explicit.path.name == "2026-03-01-given-slug.md" and len(asked) == 1
        again = archive_conversation(mem, messages, slug="lisbon offsite", now=NOW)
        assert again is not None and again.path.name == "2026-03-01-lisbon-offsite-2.md"  # never replaced
        assert archive_conversation(mem, [{"role": "tool", "content": "x"}], now=NOW) is None
        assert re.fullmatch(r"# Session: 2026-03-01 14:05:09", result.path.read_text(encoding="utf-8").splitlines()[0])
