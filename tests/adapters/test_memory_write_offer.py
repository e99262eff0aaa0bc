"""``memory_write`` is offered to the model only when asked for, and never where it cannot work
(a replica: no workspace to write to)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

pytest.importorskip("langchain")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage  # noqa: E402

from clawmem_core import MemoryConfig, MemoryIndex  # noqa: E402
from langchain_clawmem.middleware import ClawmemMiddleware, MemoryFlushMiddleware  # noqa: E402


def _model() -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter([AIMessage("ok")]))


def _offered(*middleware: object) -> list[str]:
    return sorted(t.name for m in middleware for t in getattr(m, "tools", []))


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[MemoryIndex]:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Memory\n\n- Dana prefers tea.\n", encoding="utf-8")
    with MemoryIndex(ws, config=MemoryConfig(provider="none"), state_dir=tmp_path / "state") as index:
        yield index


def test_the_flush_keeps_memory_write_to_itself_unless_asked(mem: MemoryIndex) -> None:
    """Beside ``ClawmemMiddleware(write=False)`` the model is offered no write; the flush still has one."""
    flush = MemoryFlushMiddleware(mem, model=_model(), context_window=128_000)
    assert _offered(ClawmemMiddleware(mem), flush) == ["memory_get", "memory_search"]
    assert flush.write_tool.name == "memory_write" and flush.policy.writable()
    asked = MemoryFlushMiddleware(mem, model=_model(), context_window=128_000, expose_tool=True)
    assert _offered(asked) == ["memory_write"]
    assert _offered(ClawmemMiddleware(mem, write=True)) == ["memory_get", "memory_search", "memory_write"]


def test_a_replica_is_never_offered_memory_write(tmp_path: Path, pg_url: str,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    team = tmp_path / "team"
    (team / "memory").mkdir(parents=True)
    (team / "MEMORY.md").write_text("# Team\n\nThe deploy freeze starts on Fridays.\n", encoding="utf-8")
    config = {"store": {"url": pg_url}, "provider": "none"}
    with MemoryIndex(team, agent_id="team", config=config, state_dir=tmp_path / "team-state") as mem:
        mem.sync()
    with MemoryIndex(None, agent_id="team", config=config, state_dir=tmp_path / "replica-state") as replica:
        with caplog.at_level("WARNING", logger="clawmem"):
            tools = ClawmemMiddleware(replica, write=True)
            flush = MemoryFlushMiddleware(replica, model=_model(), context_window=3000, reserve_tokens=1000,
                                          soft_threshold_tokens=1000, expose_tool=True)
        assert _offered(tools, flush) == ["memory_get", "memory_search"]
        assert not flush.policy.writable() and not flush.policy.should_flush(10**6)  # no flush turn on a replica
        assert sum("replica" in r.getMessage() and "memory_write" in r.getMessage() for r in caplog.records) == 2
