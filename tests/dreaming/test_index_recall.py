"""The recall log of a ``MemoryIndex``: what its searches gave the model is recorded (with the session key),
internal searches are not, recording never fails a search nor moves the index's data version, and
``clawmem_core.dreaming.promote`` / ``explain`` / ``rollback`` / ``status`` work on the index, on SQLite and
PostgreSQL, in English and Chinese. A replica records but never promotes."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import pytest

from clawmem_core import MemoryConfig, MemoryIndex
from clawmem_core.dreaming import NothingToRollBackError, Workspace, explain, promote, rollback, status
from clawmem_core.errors import ConfigError, ReplicaError
from clawmem_core.tools import asearch_payload, search_payload

EN = ["gateway loopback", "loopback gateway safety", "home gateway network"]
ZH = ["网关 回环", "本机回环地址 网关", "家庭网络 网关"]


def _config(store_config: dict[str, Any], **dreaming: Any) -> MemoryConfig:
    data: dict[str, Any] = {"provider": "none", "sync": {"watch": False, "onSessionStart": False}}
    if store_config:
        data["store"] = store_config
    if dreaming:
        data["dreaming"] = dreaming
    return MemoryConfig.from_dict(data)


def _events(mem: MemoryIndex) -> list[Any]:
    mem._recall.flush()
    return list(mem._recall.dream_store().events(mem.agent_id))


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_searches_are_recorded_with_their_session_key(tmp_path: Path, ws: Workspace,
                                                      store_config: dict[str, Any]) -> None:
    with MemoryIndex(ws.root, agent_id="dana", config=_config(store_config), state_dir=tmp_path / "s") as mem:
        mem.sync()
        first = mem.search(EN[0], session_key="discord:dm:42")
        assert first and first[0].path == "memory/2026-11-02.md"
        mem.search(ZH[0])
        mem.search("gateway loopback duplicate check", record=False)  # an internal search
        asyncio.run(mem.asearch(ZH[1], session_key="agent:dana:main"))
        search_payload(mem, EN[1], session_key="telegram:dm:7")
        asyncio.run(asearch_payload(mem, ZH[2], session_key="mcp:client"))
        events = _events(mem)
    got = [(e.query_text, e.session_key, e.path, e.rank) for e in events]
    assert got == [
        (EN[0], "discord:dm:42", "memory/2026-11-02.md", 1),
        (ZH[0], None, "memory/2026-11-03.md", 1),
        (ZH[1], "agent:dana:main", "memory/2026-11-03.md", 1),
        (EN[1], "telegram:dm:7", "memory/2026-11-02.md", 1),
        (ZH[2], "mcp:client", "memory/2026-11-03.md", 1),
    ]
    assert all(e.agent == "dana" and e.start_line >= 1 and 0 < e.score <= 1 for e in events)



def test_record_recall_records_given_hits_at_the_given_time(tmp_path: Path, ws: Workspace,
                                                            store_config: dict[str, Any]) -> None:
    """``record_recall``: a surface that searched with ``record=False`` (or a replay with its own clock) records
    what it used, under its session key and at its time."""
    with MemoryIndex(ws.root, agent_id="dana", config=_config(store_config), state_dir=tmp_path / "s") as mem:
        mem.sync()
        hits = mem.search(ZH[0], record=False)
        assert hits and _events(mem) == []
        mem.record_recall(ZH[0], hits[:1], session_key="agent:dana:main", when=1_700_000_000.0)
        mem.record_recall(EN[0], [])  # nothing used: nothing recorded
        events = _events(mem)
    assert [(e.query_text, e.session_key, e.path, e.ts) for e in events] == [
        (ZH[0], "agent:dana:main", hits[0].path, 1_700_000_000.0)]

def test_a_secret_in_a_query_is_not_recorded(tmp_path: Path, ws: Workspace) -> None:
    secret = "sk-proj-" + "Ab3dE5gH7jK9mN1pQ3sT5vX7zB9dF1hJ"
    with MemoryIndex(ws.root, config=_config({}), state_dir=tmp_path / "s") as mem:
        mem.sync()
        assert mem.search(f"gateway loopback {secret}", min_score=0)
        events = _events(mem)
        raw = mem._recall.dream_store()._db().execute("SELECT * FROM dreaming_recall").fetchall()
    assert events and secret not in events[0].query_text and secret not in repr(raw)


def test_recording_off_writes_no_log(tmp_path: Path, ws: Workspace) -> None:
    with MemoryIndex(ws.root, config=_config({}, record=False), state_dir=tmp_path / "s") as mem:
        mem.sync()
        assert mem.search(EN[0]) and mem.search(ZH[0])
        assert mem._recall.recall_log() is None
        path = mem.store_path
    assert path is not None and not Path(str(path) + ".recall").exists()


def test_a_recall_log_that_cannot_open_never_fails_a_search(tmp_path: Path, ws: Workspace) -> None:
    cfg = _config({})
    with MemoryIndex(ws.root, config=cfg, state_dir=tmp_path / "s") as mem:
        mem.sync()
        assert mem.store_path is not None
        Path(str(mem.store_path) + ".recall").mkdir()  # where the log's file would be
        assert [h.path for h in mem.search(EN[0])] == ["memory/2026-11-02.md"]
        assert mem.search(ZH[0])
        assert asyncio.run(mem.asearch(ZH[1]))


def test_a_recall_log_batch_does_not_move_the_index_data_version(tmp_path: Path, ws: Workspace,
                                                                 store_config: dict[str, Any]) -> None:
    """Freshness trusts the index while its data version (and the vector handle's view of other writers) stays
    put: a batch of recall events, on SQLite or PostgreSQL, must not move either."""
    with MemoryIndex(ws.root, config=_config(store_config), state_dir=tmp_path / "s") as mem:
        mem.sync()
        mem.search(EN[0])
        store = mem._store
        before = (store.data_version(), store.others_version())
        mem.search(ZH[0])
        assert mem._recall.flush() > 0
        assert (store.data_version(), store.others_version()) == before


def test_postgres_a_recall_log_batch_does_not_make_the_next_search_walk(tmp_path: Path, ws: Workspace,
                                                                         pg_url: str) -> None:
    """As ``test_found_by_bench`` on SQLite: on PostgreSQL the log lives in the shared database, in tables of
    its own; its batches are no change of the Markdown."""
    with MemoryIndex(ws.root, config=_config({"url": pg_url}), state_dir=tmp_path / "s") as mem:
        mem.sync()
        for _ in range(3):  # the change journal starts on the second search
            mem.search(EN[0])
        walks: list[int] = []
        scan = mem._syncer.scan

        def counting(*a: Any, **k: Any) -> Any:
            walks.append(1)
            return scan(*a, **k)

        mem._syncer.scan = counting  # type: ignore[method-assign]
        mem.search(EN[0])
        if walks:  # no change journal here (no inotify): every search walks, nothing to compare
            return
        mem.search(ZH[0])
        walks.clear()
        assert mem._recall.flush() > 0
        mem.search(EN[1])
        assert walks == [], "a recall-log batch made the next search walk the workspace"


def test_promote_explain_rollback_and_status_on_the_index(tmp_path: Path, ws: Workspace,
                                                          store_config: dict[str, Any]) -> None:
    with MemoryIndex(ws.root, config=_config(store_config), state_dir=tmp_path / "s") as mem:
        mem.sync()
        for q in EN + ZH:
            mem.search(q)
        before = _tree(ws.root)
        memory = ws.memory_path.read_bytes()
        st = status(mem)
        assert st["recording"] and st["recall_events"] == 6 and st["preimages"] == 0
        assert st["candidates"] == 2 and st["promotable"] == 2
        why = explain(mem, "网关")
        assert [e.candidate.path for e in why if e.candidate] == ["memory/2026-11-03.md"] and why[0].would_promote
        assert not explain(mem, "nothing like this")[0].would_promote
        preview = promote(mem)
        assert not preview.applied and len(preview.added) == 2 and preview.proposed is not None
        assert _tree(ws.root) == before  # a preview writes nothing
        assert len(promote(mem, limit=1).added) == 1
        assert promote(mem, min_recall_count=4).added == []
        with pytest.raises(ConfigError):
            promote(mem, min_score=2.0)
        report = promote(mem, apply=True)
        assert report.applied and report.mode == "append" and len(report.added) == 2
        text = ws.memory_path.read_text(encoding="utf-8")
        assert "Source: memory/2026-11-03.md#L" in text and "网关只在本机回环地址上监听" in text
        assert "Deep Sleep" in ws.dreams_path.read_text(encoding="utf-8")
        assert status(mem)["preimages"] == 1
        # the promoted entries are searchable at once
        assert any(h.path == "MEMORY.md" for h in mem.search("本机回环地址", record=False))
        rollback(mem)
        assert ws.memory_path.read_bytes() == memory  # byte for byte
        with pytest.raises(NothingToRollBackError):
            rollback(mem)


def test_a_replica_records_recalls_but_never_promotes(tmp_path: Path, ws: Workspace, pg_url: str) -> None:
    cfg = _config({"url": pg_url})
    with MemoryIndex(ws.root, agent_id="team", config=cfg, state_dir=tmp_path / "s") as mem:
        mem.sync()
    with MemoryIndex(None, agent_id="team", config=cfg, state_dir=tmp_path / "r") as rep:
        for q in EN:
            assert rep.search(q, session_key="slack:dm:1")
        for call in (lambda: promote(rep), lambda: promote(rep, apply=True), lambda: explain(rep, "gateway"),
                     lambda: rollback(rep)):
            with pytest.raises(ReplicaError):
                call()
        assert status(rep)["recall_events"] == 3 and status(rep)["candidates"] is None
    with MemoryIndex(ws.root, agent_id="team", config=cfg, state_dir=tmp_path / "s") as mem:
        assert [e.session_key for e in _events(mem)] == ["slack:dm:1"] * 3
        report = promote(mem, apply=True)
        assert report.applied and [a.split("#")[0] for a in report.added] == ["memory/2026-11-02.md"]
