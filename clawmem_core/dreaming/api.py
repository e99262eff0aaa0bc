"""Dreaming on a :class:`~clawmem_core.index.MemoryIndex`: the functions an application, the CLI and the adapters
call. Each reads the index's own recall log (its SQLite file beside the index, or the shared PostgreSQL database)
and the index's workspace, with the gates and limits of ``config.dreaming`` unless a run overrides them.

A replica (an index served without its workspace) records recalls but never promotes, explains or rolls back:
those raise :class:`~clawmem_core.errors.ReplicaError` (the process with the workspace does them).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

from ..errors import ReplicaError
from .candidates import Explanation, Gates
from .decisions import ChatModel
from .events import DreamStore, Preimage
from .promote import PromotionConfig, PromotionReport, dream_status, explain_promotion, promote_workspace, \
    rollback_workspace
from .sources import Workspace
from .validate import RewriteLimits

__all__ = ["promote", "explain", "rollback", "status", "promotion_config", "workspace_of"]


def promotion_config(mem: Any, *, limit: Optional[int] = None, min_score: Optional[float] = None,
                     min_recall_count: Optional[int] = None,
                     min_unique_queries: Optional[int] = None) -> PromotionConfig:
    """The :class:`PromotionConfig` of ``mem.config.dreaming``, with a run's overrides (``None``: as configured).
    Overrides are checked as the configuration is (:class:`~clawmem_core.errors.ConfigError`)."""
    from ..config import DreamingConfig

    d = mem.config.dreaming
    over = {k: v for k, v in (("limit", limit), ("min_score", min_score), ("min_recall_count", min_recall_count),
                              ("min_unique_queries", min_unique_queries)) if v is not None}
    if over:
        d = replace(d, **over)  # __post_init__ validates the values
    assert isinstance(d, DreamingConfig)
    return PromotionConfig(
        gates=Gates(d.min_score, d.min_recall_count, d.min_unique_queries),
        limits=replace(RewriteLimits(), max_loss_fraction=d.max_loss_fraction, max_chars=d.max_memory_chars),
        limit=d.limit, half_life_days=d.half_life_days, window_days=d.window_days, diary=d.diary)


def workspace_of(mem: Any, what: str = "promotion") -> Workspace:
    """The dreaming :class:`Workspace` of ``mem`` (its Markdown and its transcripts); a replica raises
    :class:`ReplicaError`."""
    mem._check_open()
    if mem.workspace is None:
        raise ReplicaError(f"{what} is not available here: this process serves agent {mem.agent_id!r} without its "
                           "workspace (a replica); it records recalls, and the process with the workspace promotes")
    return Workspace(mem.workspace, sessions_dir=mem.sessions_dir)


def _store(mem: Any) -> DreamStore:
    recorder = mem._recall
    recorder.flush()  # what this process recorded counts at once
    return recorder.dream_store()  # type: ignore[no-any-return]


def promote(mem: Any, *, model: ChatModel = None, apply: bool = False, limit: Optional[int] = None,
            min_score: Optional[float] = None, min_recall_count: Optional[int] = None,
            min_unique_queries: Optional[int] = None, now: Optional[float] = None) -> PromotionReport:
    """Promote the agent's recalled daily-note and transcript lines that pass the gates into ``MEMORY.md``
    (``apply=True``), or say what would be done (the default: a preview writes nothing).

    ``model``: a callable ``prompt -> str`` or an object with ``.invoke`` / ``.complete`` (a chat model), asked
    once for add / merge / supersede / skip decisions; without one, promotion is append-only. Every rewrite is
    checked (loss limit, sources, size, secrets) and falls back to append-only when it fails; the previous
    ``MEMORY.md`` is saved first (:func:`rollback`). Raises :class:`ReplicaError` on a replica and
    :class:`~.errors.ConsolidationBusyError` when another process consolidates the agent."""
    ws = workspace_of(mem, "promotion")
    config = promotion_config(mem, limit=limit, min_score=min_score, min_recall_count=min_recall_count,
                              min_unique_queries=min_unique_queries)
    report = promote_workspace(_store(mem), ws, mem.agent_id, model=model, apply=apply, config=config, now=now)
    if report.applied:
        mem.mark_dirty()  # MEMORY.md changed: the next search syncs it
    return report


def explain(mem: Any, query_or_path: str, *, now: Optional[float] = None) -> list[Explanation]:
    """Why the candidates matching ``query_or_path`` (a recorded query's words, a note's text, or a path such as
    ``memory/2026-11-02.md#L3-L4``) would or would not promote, with the configured gates."""
    ws = workspace_of(mem, "promotion explain")
    return explain_promotion(_store(mem), ws, query_or_path, mem.agent_id, config=promotion_config(mem), now=now)


def rollback(mem: Any) -> Preimage:
    """Restore ``MEMORY.md`` as it was before the latest applied promotion, byte for byte (removed when there was
    none), and drop that saved copy. Raises :class:`~.errors.NothingToRollBackError` when none is left."""
    ws = workspace_of(mem, "promotion rollback")
    pre = rollback_workspace(_store(mem), ws, mem.agent_id)
    mem.mark_dirty()
    return pre


def status(mem: Any, *, now: Optional[float] = None) -> dict[str, Any]:
    """Recall and promotion counts of the agent: ``recording`` (``dreaming.record``), ``recall_events``,
    ``candidates`` and ``promotable`` (none on a replica: it has no workspace to read), ``preimages`` (applied
    promotions not rolled back)."""
    mem._check_open()
    store = _store(mem)
    out: dict[str, Any] = {"recording": bool(mem.config.dreaming.record)}
    if mem.workspace is None:
        out.update(recall_events=store.count_events(mem.agent_id), candidates=None, promotable=None,
                   preimages=store.count_preimages(mem.agent_id))
        return out
    ws = workspace_of(mem, "status")
    out.update(dream_status(store, ws, mem.agent_id, config=promotion_config(mem), now=now))
    return out
