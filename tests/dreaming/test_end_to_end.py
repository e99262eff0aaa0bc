"""A week of real searches (MemoryIndex, keyword mode) recorded, promoted into MEMORY.md, and found again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clawmem_core import MemoryConfig, MemoryIndex
from clawmem_core.dreaming import RecallLog, Workspace, explain_promotion, promote_workspace, rollback_workspace
from clawmem_core.dreaming.sqlite_store import SqliteDreamStore
from clawmem_core.dreaming.validate import check_rewrite

from .conftest import Clock


def test_a_week_of_searches_becomes_memory(tmp_path: Path, ws: Workspace, clock: Clock) -> None:
    (ws.root / "memory" / "2026-11-04-trip.md").unlink()
    prior = (ws.root / "MEMORY.md").read_text(encoding="utf-8")
    with MemoryIndex(ws.root, config=MemoryConfig(provider="none"), state_dir=tmp_path / "state") as mem:
        mem.sync()
        log = RecallLog(SqliteDreamStore(mem.store_path), now=clock)
        for day in range(7):
            for q in ("gateway loopback", "router vlan cameras", "网关 回环地址", "备份 外置硬盘"):
                log.record("main", q, mem.search(q, max_results=1), session_key="agent:main:main")
            clock.advance(1)
        (why,) = explain_promotion(log, ws, "网关 回环地址", now=clock.t)
        assert why.would_promote, why.reasons
        report = promote_workspace(log, ws, apply=True, now=clock.t)
        assert report.applied and report.added, report.to_dict()
        text = (ws.root / "MEMORY.md").read_text(encoding="utf-8")
        assert text.startswith(prior) and check_rewrite(prior, text, ws) == []
        assert "Source: memory/2026-11-03.md#L" in text and "Source: memory/2026-11-02.md#L" in text
        mem.sync()
        found = mem.search("网关 回环地址", max_results=5)
        assert any(h.path == "MEMORY.md" for h in found)
        rollback_workspace(log, ws)
        assert (ws.root / "MEMORY.md").read_text(encoding="utf-8") == prior
