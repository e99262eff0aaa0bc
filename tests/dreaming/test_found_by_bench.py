"""Behaviour found by ``bench/consolidation.py`` (see ``bench/results/consolidation.md``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clawmem_core import MemoryConfig, MemoryIndex
from clawmem_core.dreaming import Workspace


def test_a_recall_log_batch_does_not_make_the_next_search_walk_the_workspace(tmp_path: Path, ws: Workspace) -> None:
    """The recall log wrote its batches into the index's SQLite file. The index takes any commit by another
    connection as a possible change of the files' states, so the search after each batch walked the whole
    workspace (the bench: one walk per batch, p95 5.5x on a 4,173-file workspace). Recording must not slow a
    search: a batch of recall events is not a change of the Markdown, and the next search trusts the journal
    as it did before the batch (the index's log has a SQLite file of its own)."""
    cfg = MemoryConfig(provider="none")
    cfg.sync.watch = False
    cfg.sync.on_session_start = False
    with MemoryIndex(ws.root, config=cfg, state_dir=tmp_path / "state") as mem:
        mem.sync()
        for _ in range(3):  # the change journal starts on the second search
            mem.search("gateway loopback")
        walks = []
        scan = mem._syncer.scan

        def counting(*a: Any, **k: Any) -> Any:
            walks.append(1)
            return scan(*a, **k)

        mem._syncer.scan = counting  # type: ignore[method-assign]
        mem.search("gateway loopback")
        if walks:  # no change journal here (no inotify): every search walks, nothing to compare
            return
        mem.search("gateway loopback")  # recorded in the index's own recall log
        walks.clear()
        mem._recall.flush()
        assert mem._recall.dream_store().count_events(mem.agent_id) > 0
        mem.search("router vlan")
        assert walks == [], "a recall-log batch made the next search walk the workspace"
