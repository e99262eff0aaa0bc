"""Promotion without a model: append-only format, preview, rollback, diary, locking, on SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import pytest

from clawmem_core.dreaming import (ConsolidationBusyError, NothingToRollBackError, PromotionConfig, RecallLog,
                                   Workspace, candidates_for, promote_workspace, rollback_workspace)
from clawmem_core.dreaming.entries import parse_entries
from clawmem_core.dreaming.validate import check_rewrite

from .conftest import Clock, recall

EN = "memory/2026-11-02.md"
ZH = "memory/2026-11-03.md"
TRIP = "memory/2026-11-04-trip.md"


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _traffic(log: RecallLog, ws: Workspace) -> None:
    recall(log, ws, EN, 3, 3, ["gateway", "loopback", "network safety"])
    recall(log, ws, ZH, 3, 3, ["网关", "回环地址", "家庭网络"])
    recall(log, ws, TRIP, 1, 2, ["lisbon flight", "seat", "december trip"])
    recall(log, ws, EN, 6, 6, ["oat milk"])  # below the gates
    log.flush()


def test_preview_writes_nothing(store: Any, ws: Workspace, clock: Clock) -> None:
    log = RecallLog(store, now=clock)
    _traffic(log, ws)
    before = _tree(ws.root)
    report = promote_workspace(log, ws, now=clock.t)
    assert not report.applied and report.mode == "append" and len(report.added) == 3
    assert report.proposed is not None and "Source: memory/2026-11-03.md#L3-L3" in report.proposed
    assert _tree(ws.root) == before
    assert store.count_preimages("main") == 0


def test_append_only_format_and_person_entries_kept(store: Any, ws: Workspace, clock: Clock) -> None:
    log = RecallLog(store, now=clock)
    _traffic(log, ws)
    prior = (ws.root / "MEMORY.md").read_bytes()
    report = promote_workspace(log, ws, apply=True, now=clock.t)
    assert report.applied and report.preimage_id is not None
    text = (ws.root / "MEMORY.md").read_text(encoding="utf-8")
    assert text.encode("utf-8").startswith(prior)  # what the person wrote stays byte for byte
    new = [e.text for e in parse_entries(text)][len(parse_entries(prior.decode())):]
    shape = re.compile(r"- [^\n]+ <!-- importance: (?:10|[1-9]) -->\n  Source: memory/[^\n]+#L\d+-L\d+")
    assert len(new) == 3 and all(shape.fullmatch(e) for e in new)
    assert any("网关只在本机回环地址上监听，保证家庭网络安全。" in e for e in new)
    trip = next(e for e in new if "Lisbon" in e)
    assert "<!-- importance: 9 -->" in trip and trip.endswith(f"Source: {TRIP}#L1-L2")
    assert check_rewrite(prior.decode(), text, ws) == []
    diary = (ws.root / "DREAMS.md").read_text(encoding="utf-8")
    assert diary.startswith("## Deep Sleep ") and "added 3, merged 0, superseded 0" in diary
    # promoted lines do not come back as candidates, and the diary is never one
    again = promote_workspace(log, ws, apply=True, now=clock.t)
    assert again.mode == "none" and not again.applied
    assert all(c.path != "DREAMS.md" for c in candidates_for(log, ws, now=clock.t))


def test_rollback_restores_byte_for_byte(store: Any, ws: Workspace, clock: Clock) -> None:
    memory = ws.root / "MEMORY.md"
    memory.write_bytes("# Memory\r\n\r\n- Dana's cat is called Miso.   \r\n- 用户喜欢简洁的回答。".encode("utf-8"))
    original = memory.read_bytes()
    log = RecallLog(store, now=clock)
    _traffic(log, ws)
    promote_workspace(log, ws, apply=True, now=clock.t)
    assert memory.read_bytes() != original
    pre = rollback_workspace(log, ws)
    assert pre.content == original and memory.read_bytes() == original
    with pytest.raises(NothingToRollBackError):
        rollback_workspace(log, ws)


def test_rollback_of_a_first_memory_file_removes_it(store: Any, ws: Workspace, clock: Clock) -> None:
    (ws.root / "MEMORY.md").unlink()
    log = RecallLog(store, now=clock)
    _traffic(log, ws)
    assert promote_workspace(log, ws, apply=True, now=clock.t).applied
    assert (ws.root / "MEMORY.md").exists()
    rollback_workspace(log, ws)
    assert not (ws.root / "MEMORY.md").exists()


def test_source_changed_after_ranking_is_not_written(sqlite_store: Any, ws: Workspace, clock: Clock) -> None:
    """A note edited after it was recalled is skipped with its reason, and nothing else is lost."""
    log = RecallLog(sqlite_store, now=clock)
    _traffic(log, ws)
    (ws.root / ZH).write_text("# 周二\n\n网关改为监听所有接口。\n", encoding="utf-8")
    report = promote_workspace(log, ws, apply=True, now=clock.t)
    assert (f"{ZH}#L3-L3", "source changed since it was recalled (content hash differs)") in report.skipped
    assert "网关" not in "".join(report.added)
    assert "网关改为" not in (ws.root / "MEMORY.md").read_text(encoding="utf-8")


def test_one_consolidation_per_agent(store: Any, ws: Workspace, clock: Clock) -> None:
    log = RecallLog(store, now=clock)
    _traffic(log, ws)
    with store.consolidation_lock("main"):
        with pytest.raises(ConsolidationBusyError):
            promote_workspace(log, ws, apply=True, now=clock.t)
        promote_workspace(log, ws, now=clock.t)  # a preview needs no lock
        with store.consolidation_lock("other"):  # other agents are independent
            pass
    assert promote_workspace(log, ws, apply=True, now=clock.t).applied


def test_limit_and_size_budget(sqlite_store: Any, ws: Workspace, clock: Clock) -> None:
    log = RecallLog(sqlite_store, now=clock)
    _traffic(log, ws)
    assert len(promote_workspace(log, ws, config=PromotionConfig(limit=1), now=clock.t).added) == 1
    prior = (ws.root / "MEMORY.md").read_text(encoding="utf-8")
    from clawmem_core.dreaming import RewriteLimits

    tight = PromotionConfig(limits=RewriteLimits(max_chars=len(prior) + 260))
    report = promote_workspace(log, ws, config=tight, apply=True, now=clock.t)
    assert report.applied and 1 <= len(report.added) < 3  # as many as fit
    assert len((ws.root / "MEMORY.md").read_text(encoding="utf-8")) <= len(prior) + 260


def test_promoted_entries_carry_trigger_phrases_from_plain_queries(sqlite_store: Any, ws: Workspace,
                                                                   clock: Clock) -> None:
    log = RecallLog(sqlite_store, now=clock)
    recall(log, ws, ZH, 3, 3, ["网关", "回环地址", "家庭网络安全", "token ghp_" + "Q" * 36 + " 网关"])
    recall(log, ws, EN, 3, 3, ["gateway loopback", "what is the gateway's address?", "network safety", "gw"])
    log.flush()
    promote_workspace(log, ws, apply=True, now=clock.t)
    from clawmem_core.dreaming.entries import entry_triggers

    entries = {e.text.split("Source: ")[-1]: e.text for e in parse_entries((ws.root / "MEMORY.md").read_text("utf-8"))}
    assert entry_triggers(entries[f"{ZH}#L3-L3"]) == ["网关", "回环地址", "家庭网络安全"]  # no masked query
    assert entry_triggers(entries[f"{EN}#L3-L3"]) == ["gw", "network safety", "gateway loopback"]


def test_status_counts(store: Any, ws: Workspace, clock: Clock) -> None:
    from clawmem_core.dreaming import dream_status

    log = RecallLog(store, now=clock)
    _traffic(log, ws)
    assert dream_status(log, ws, now=clock.t) == {"recall_events": 10, "candidates": 4, "promotable": 3,
                                                  "preimages": 0}
    promote_workspace(log, ws, apply=True, now=clock.t)
    assert dream_status(log, ws, now=clock.t)["preimages"] == 1


def test_a_failing_store_never_fails_the_search_path(tmp_path: Path, ws: Workspace, clock: Clock) -> None:
    from clawmem_core.dreaming import RecallLogError
    from clawmem_core.dreaming.sqlite_store import SqliteDreamStore

    (tmp_path / "ro").mkdir()
    store = SqliteDreamStore(tmp_path / "ro" / "index.sqlite")
    store.close()
    import apsw

    broken = SqliteDreamStore(apsw.Connection(str(tmp_path / "ro" / "index.sqlite"), flags=apsw.SQLITE_OPEN_READONLY))
    log = RecallLog(broken, batch_size=2, now=clock)
    recall(log, ws, EN, 3, 3, ["a", "b", "c"])  # the full batch fails quietly
    assert log.events_dropped == 2 and log.pending() == 1
    with pytest.raises(RecallLogError):
        log.flush()  # an explicit flush says so


def test_a_note_holding_a_secret_is_skipped_and_the_rest_promoted(sqlite_store: Any, ws: Workspace,
                                                                  clock: Clock) -> None:
    (ws.root / "memory" / "2026-11-07.md").write_text(
        "The staging database password is Tr0ub4dor-x93!kq for the admin user.\n"
        "数据库密码是 Zx9-Qw8-Er7-Ty6，别告诉别人。\n", encoding="utf-8")
    log = RecallLog(sqlite_store, now=clock)
    _traffic(log, ws)
    recall(log, ws, "memory/2026-11-07.md", 1, 1, ["staging database", "admin user", "password"], score=1.0)
    recall(log, ws, "memory/2026-11-07.md", 2, 2, ["数据库", "密码", "别告诉"], score=1.0)
    log.flush()
    report = promote_workspace(log, ws, apply=True, now=clock.t)
    assert ("memory/2026-11-07.md#L1-L1", "holds a secret") in report.skipped
    assert ("memory/2026-11-07.md#L2-L2", "holds a secret") in report.skipped
    assert len(report.added) == 3
    text = (ws.root / "MEMORY.md").read_text(encoding="utf-8")
    assert "Tr0ub4dor" not in text and "Zx9-Qw8" not in text


def test_weekly_runs_promote_what_was_recalled_that_week(sqlite_store: Any, ws: Workspace, clock: Clock) -> None:
    """No frozen recall set: each weekly run promotes that week's recalls, never last week's again."""
    log = RecallLog(sqlite_store, now=clock)
    weeks = [(EN, 3, ["gateway", "loopback", "network safety"]), (ZH, 4, ["备份", "外置硬盘", "凌晨三点"]),
             (EN, 4, ["router vlan", "cameras", "doorbell"])]
    added = []
    for path, line, queries in weeks:
        for _ in range(3):
            recall(log, ws, path, line, line, queries)
            clock.advance(2)
        clock.advance(1)
        report = promote_workspace(log, ws, apply=True, now=clock.t)
        added.append(report.added)
    assert added == [[f"{EN}#L3-L3"], [f"{ZH}#L4-L4"], [f"{EN}#L4-L4"]]
    diary = (ws.root / "DREAMS.md").read_text(encoding="utf-8").split("## Deep Sleep ")[1:]
    assert len(set(diary)) == 3  # three different reports
