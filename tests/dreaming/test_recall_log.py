"""The recall log: batched writes, retention, masking, per-agent rows, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apsw
import pytest

from clawmem_core import MemoryConfig, MemoryIndex
from clawmem_core.dreaming import RecallLog, RetentionPolicy, Workspace, has_injected, strip_injected
from clawmem_core.dreaming.recall_log import content_hash
from clawmem_core.dreaming.sqlite_store import SqliteDreamStore

from .conftest import DAY, Clock, hit


def test_batches_one_write_per_batch_not_per_record(store: Any, ws: Workspace, clock: Clock) -> None:
    log = RecallLog(store, batch_size=10, now=clock)
    for i in range(25):
        log.record("main", f"query {i}", [hit(ws, "memory/2026-11-02.md", 3, 3)])
    assert log.batches_written == 2  # 20 written in two transactions, 5 buffered
    assert log.pending() == 5
    assert store.count_events("main") == 20
    log.close()
    assert log.batches_written == 3
    assert store.count_events("main") == 25


def test_record_does_no_io_until_the_batch_is_full(tmp_path: Path, ws: Workspace, clock: Clock) -> None:
    db = tmp_path / "index.sqlite"
    log = RecallLog(SqliteDreamStore(db), batch_size=4, now=clock)
    log.record("main", "gateway", [hit(ws, "memory/2026-11-02.md", 3, 3)])  # creates nothing yet
    assert not db.exists() or apsw.Connection(str(db)).execute(
        "SELECT count(*) FROM sqlite_master WHERE name='dreaming_recall'").fetchone()[0] == 0
    log.flush()
    other = apsw.Connection(str(db))  # another connection sees the batch
    assert other.execute("SELECT count(*) FROM dreaming_recall").fetchone()[0] == 1
    assert other.execute("SELECT value FROM dreaming_meta WHERE key='schema_version'").fetchone()[0] == "1"


def test_event_fields_rank_and_agents(store: Any, ws: Workspace, clock: Clock) -> None:
    with RecallLog(store, now=clock) as log:
        hits = [hit(ws, "memory/2026-11-02.md", 3, 3, 0.9), hit(ws, "memory/2026-11-03.md", 3, 4, 0.7)]
        log.record("main", "gateway loopback", hits, session_key="agent:main:telegram:dm:1")
        log.record("ops", "网关 回环", hits[1:])
    main = store.events("main")
    assert [(e.path, e.start_line, e.end_line, e.rank) for e in main] == [
        ("memory/2026-11-02.md", 3, 3, 1), ("memory/2026-11-03.md", 3, 4, 2)]
    assert main[0].session_key == "agent:main:telegram:dm:1"
    assert main[0].content_hash == content_hash(hits[0].snippet)
    assert main[0].ts == clock.t and main[0].query_hash == main[1].query_hash
    ops = store.events("ops")
    assert len(ops) == 1 and ops[0].query_text == "网关 回环"


def test_query_text_is_masked_and_hash_holds_no_secret(store: Any, ws: Workspace, clock: Clock) -> None:
    secret = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    with RecallLog(store, now=clock) as log:
        log.record("main", f"why does token {secret} fail", [hit(ws, "memory/2026-11-02.md", 3, 3)])
        log.record("main", "我的密码是 hunter2-Xq9#zzLp 对吗", [hit(ws, "memory/2026-11-03.md", 3, 3)])
    events = store.events("main")
    assert secret not in events[0].query_text and "ghp_***" in events[0].query_text
    assert "hunter2-Xq9#zzLp" not in events[1].query_text
    with RecallLog(store, now=clock) as log:  # the same query with another secret is the same query
        log.record("main", "why does token ghp_" + "Z" * 36 + " fail", [hit(ws, "memory/2026-11-02.md", 3, 3)])
    assert store.events("main")[-1].query_hash == events[0].query_hash


def test_retention_by_age_and_count(store: Any, ws: Workspace, clock: Clock) -> None:
    log = RecallLog(store, batch_size=5, retention=RetentionPolicy(max_age_days=30, max_events=12), prune_every=1,
                    now=clock)
    for day in range(40):
        log.record("main", f"q{day}", [hit(ws, "memory/2026-11-02.md", 3, 3)])
        log.record("other", f"q{day}", [hit(ws, "memory/2026-11-02.md", 3, 3)])
        clock.advance(1)
    log.close()
    log.prune()
    for agent in ("main", "other"):
        events = store.events(agent)
        assert len(events) <= 12
        assert all(e.ts >= clock.t - 30 * DAY for e in events)
        assert events[-1].query_text == "q39"  # the newest are kept


def test_namespace_hits_are_not_recorded(store: Any, ws: Workspace, clock: Clock) -> None:
    with RecallLog(store, now=clock) as log:
        shared = hit(ws, "memory/2026-11-02.md", 3, 3)
        log.record("main", "q", [type(shared)("@team/memory/x.md", 1, 1, 0.9, "x")])
    assert store.count_events("main") == 0


def test_logs_into_the_index_sqlite_file_beside_a_real_search(tmp_path: Path, ws: Workspace, clock: Clock) -> None:
    """The log shares the index's own SQLite file; search hits are recorded as they are."""
    with MemoryIndex(ws.root, config=MemoryConfig(provider="none"), state_dir=tmp_path / "state") as mem:
        mem.sync()
        log = RecallLog(SqliteDreamStore(mem.store_path), now=clock)
        for q in ("gateway loopback", "网关 回环"):
            log.record("main", q, mem.search(q))
        log.close()
        assert mem.search("gateway loopback")  # the index still answers
        events = log.events("main")
    assert {e.path for e in events} >= {"memory/2026-11-02.md", "memory/2026-11-03.md"}
    live = {e.path: (ws.root / e.path).read_text(encoding="utf-8").split("\n") for e in events}
    for e in events:  # hashes taken of the snippet match the live lines it cites
        assert e.content_hash == content_hash("\n".join(live[e.path][e.start_line - 1 : e.end_line]))


def test_injected_recall_is_recognised_and_stripped() -> None:
    lc = ("## Recalled memory\nNotes from memory that may be relevant to the latest message:\n\n"
          "The gateway listens on loopback.\nSource: memory/2026-11-02.md#L3")
    li = "<memory>\n<clawmem_recall>\n网关只在回环地址上监听。\nSource: memory/2026-11-03.md#L3\n</clawmem_recall>\n</memory>"
    collapsed = "Assistant: ## Recalled memory Notes from memory that may be relevant ... Source: memory/a.md#L1"
    for text in (lc, li):
        assert has_injected(text)
        assert strip_injected(text).strip() == ""
    assert has_injected(collapsed) and strip_injected(collapsed).strip() == "Assistant:"
    mixed = "I moved to Porto in May.\n" + li + "\n我下周去上海。"
    assert [x for x in strip_injected(mixed).split("\n") if x.strip()] == ["I moved to Porto in May.", "我下周去上海。"]
    assert not has_injected("Dana's cat is called Miso.")


def test_background_writer_flushes_off_the_calling_thread(store: Any, ws: Workspace, clock: Clock) -> None:
    import threading

    writers: list[str] = []
    add = store.add_events

    def tracking(events: Any) -> None:
        writers.append(threading.current_thread().name)
        add(events)

    store.add_events = tracking  # type: ignore[method-assign]
    log = RecallLog(store, batch_size=5, now=clock, background=True, flush_interval_s=60)
    for i in range(12):
        log.record("main", f"q{i}", [hit(ws, "memory/2026-11-02.md", 3, 3)])
    log.close()
    assert store.count_events("main") == 12
    assert writers and threading.current_thread().name not in writers[:-1]  # only close() writes inline
    assert all(w == "clawmem-recall-log" for w in writers[:-1])


def test_background_writer_waits_for_a_pause_in_searches(store: Any, ws: Workspace, clock: Clock,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch is written between searches, not beside one: while recording goes on, the writer holds its batches
    until the buffer reaches its cap (a long pause is simulated by a wait that never ends)."""
    import threading

    from clawmem_core.dreaming import recall_log

    monkeypatch.setattr(recall_log, "IDLE_BEFORE_WRITE_S", 3600.0)  # searches never pause in this test
    written = threading.Event()
    add = store.add_events

    def tracking(events: Any) -> None:
        add(events)
        written.set()

    store.add_events = tracking  # type: ignore[method-assign]
    log = RecallLog(store, batch_size=2, now=clock, background=True, flush_interval_s=60)
    try:
        cap = recall_log.MAX_DEFERRED_BATCHES * 2
        for i in range(cap - 1):  # full batches wake the writer, which waits for a pause
            log.record("main", f"q{i}", [hit(ws, "memory/2026-11-02.md", 3, 3)])
        assert not written.wait(0.5) and log.batches_written == 0 and log.pending() == cap - 1
        log.record("main", "one more", [hit(ws, "memory/2026-11-02.md", 3, 3)])  # the cap: written now
        assert written.wait(30) and store.count_events("main") == cap
    finally:
        log.close()
