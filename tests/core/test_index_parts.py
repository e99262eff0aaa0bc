"""The parts of ``MemoryIndex`` built and used without the facade (real SQLite, real files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clawmem_core import MemoryConfig
from clawmem_core.index_parts.calibration_vectors import CalibrationVectors
from clawmem_core.index_parts.embedder import EmbedderChoice
from clawmem_core.index_parts.freshness import Freshness, FreshnessLimits
from clawmem_core.index_parts.identity import index_identity
from clawmem_core.index_parts.namespaces import SharedNamespaces
from clawmem_core.index_parts.stores import StoreHandles
from clawmem_core.index_parts.syncing import Changes, SyncRunner
from clawmem_core.index_parts.writes import Writer
from clawmem_core.sessions import SessionDeltaTracker
from clawmem_core.sync import Syncer
from clawmem_core.testing import HashEmbedder

from .conftest import WorkspaceFactory


def _parts(ws: Path, state_dir: Path, config: MemoryConfig) -> tuple[StoreHandles, SyncRunner, Changes]:
    stores = StoreHandles(config, "agent", ws, state_dir)
    embedder = EmbedderChoice(config, HashEmbedder())
    sessions = SessionDeltaTracker(config.sync.sessions.delta_bytes, config.sync.sessions.delta_messages)
    syncer = Syncer(ws, config, state_dir / "sessions", sessions, 0.0)
    changes = Changes()
    runner = SyncRunner(config, stores, embedder, syncer, lambda emb: index_identity(ws, config, emb), changes)
    return stores, runner, changes


def test_a_sync_runner_indexes_both_phases_on_its_own(make_workspace: WorkspaceFactory, state_dir: Path) -> None:
    ws = make_workspace({"MEMORY.md": "- tea, never coffee\n", "memory/2026-01-05.md": "- 记忆 测试\n"})
    config = MemoryConfig()
    stores, runner, changes = _parts(ws, state_dir, config)
    try:
        assert stores.store_path == state_dir / "memory" / "agent.sqlite"
        report = runner.sync(False, None, "manual")
        assert report.files_indexed == 2 and report.vectors_pending == 0
        assert not changes.dirty and changes.synced_here
        assert set(stores.store.file_states("memory")) == {"MEMORY.md", "memory/2026-01-05.md"}
        assert runner.sync(False, None, "manual").files_unchanged == 2  # nothing to do: nothing written
    finally:
        stores.close()


def test_freshness_syncs_a_small_change_before_a_search(make_workspace: WorkspaceFactory, state_dir: Path) -> None:
    ws = make_workspace({"MEMORY.md": "- tea\n"})
    config = MemoryConfig.from_dict({"sync": {"on_session_start": False}})
    stores, runner, changes = _parts(ws, state_dir, config)
    started: list[dict[str, Any]] = []
    limits = FreshnessLimits()
    limits.fresh_budget = 60.0  # a loaded machine must not turn this into a test of speed
    fresh = Freshness(config, ws, limits, stores, runner, changes, SharedNamespaces(config, "agent", stores),
                      sync=lambda **kw: runner.sync(False, None, kw["reason"], vectors=kw.get("vectors", True)),
                      background=lambda **kw: started.append(kw))
    try:
        assert fresh.prepare_search() == (True, False)  # a new index: its keyword phase first
        (ws / "memory").mkdir()
        (ws / "memory" / "2026-01-06.md").write_text("- 咖啡 coffee after all\n", encoding="utf-8")
        assert fresh.prepare_search() == (True, False)  # synced before answering, not stale
        assert "memory/2026-01-06.md" in stores.store.file_states("memory")
        assert started  # a background sync was asked for
    finally:
        fresh.close()
        stores.close()


def test_calibration_vectors_are_embedded_once_and_cached_by_a_sync(make_workspace: WorkspaceFactory,
                                                                    state_dir: Path) -> None:
    ws = make_workspace({"MEMORY.md": "- tea\n"})
    stores, runner, _ = _parts(ws, state_dir, MemoryConfig())
    emb = HashEmbedder()
    calls: list[int] = []
    real = emb.embed_documents
    emb.embed_documents = lambda texts: (calls.append(len(texts)), real(texts))[1]  # type: ignore[method-assign]
    vectors = CalibrationVectors(use_cache=True)
    try:
        first = vectors.get(emb, 60.0, stores.store)
        assert first is not None and vectors.get(emb, 60.0, stores.store) == first and len(calls) == 1
        vectors.save(stores.writer_store())  # what a sync does
        again = CalibrationVectors(use_cache=True).get(emb, 60.0, stores.store)  # another process: from the cache
        assert again is not None and len(calls) == 1
    finally:
        stores.close()


def test_a_writer_reports_an_indexing_failure_instead_of_raising(make_workspace: WorkspaceFactory) -> None:
    ws = make_workspace({"MEMORY.md": "- tea\n"})
    marked: list[bool] = []

    def failing_sync(**kwargs: Any) -> Any:
        raise OSError("disk full")

    writes = Writer(MemoryConfig(), ws, lambda: marked.append(True), sync=failing_sync)
    result = writes.write("- 新笔记 a new note", "long_term")
    assert not result.indexed and "disk full" in (result.index_error or "") and marked == [True]
    assert "新笔记" in (ws / "MEMORY.md").read_text(encoding="utf-8")  # the note was written
