"""Dreaming: a memory that learns (recall log, deterministic candidates, promotion into ``MEMORY.md``).

* :class:`RecallLog` records which chunks searches gave the model (batched, bounded, masked), in the index's
  SQLite file (:class:`SqliteDreamStore`) or the shared PostgreSQL database (:class:`PostgresDreamStore`).
* :func:`candidates_for` ranks recalled daily-note and transcript lines by six signals and three gates;
  :func:`explain_promotion` says why one would or would not promote.
* :func:`promote` writes the gated candidates into ``MEMORY.md`` (append-only, or with a model's
  add / merge / supersede / skip decisions), checked, with a preimage saved; :func:`rollback` restores it;
  :func:`explain` and :func:`status` say why and how many. These take a :class:`~clawmem_core.MemoryIndex`
  (its recall log, workspace and ``config.dreaming``); :func:`promote_workspace` and the other low-level
  functions take a dream store and a :class:`Workspace`.

Not imported by ``import clawmem_core``.
"""

from __future__ import annotations

from .candidates import Candidate, Explanation, Gates
from .errors import ConsolidationBusyError, ModelDecisionError, NothingToRollBackError, RecallLogError
from .events import DreamStore, Preimage, RecallEvent
from .injected import has_injected, strip_injected
from .api import explain, promote, promotion_config, rollback, status
from .promote import (PromotionConfig, PromotionReport, candidates_for, dream_status, explain_promotion,
                      promote_workspace, rollback_workspace)
from .recall_log import RecallLog, RetentionPolicy, open_store
from .sources import Workspace
from .validate import RewriteLimits

__all__ = [
    "Candidate", "ConsolidationBusyError", "DreamStore", "Explanation", "Gates", "ModelDecisionError",
    "NothingToRollBackError", "Preimage", "PromotionConfig", "PromotionReport", "RecallEvent", "RecallLog",
    "RecallLogError", "RetentionPolicy", "RewriteLimits", "Workspace", "candidates_for", "dream_status", "explain",
    "explain_promotion", "has_injected", "open_store", "promote", "promote_workspace", "promotion_config",
    "rollback", "rollback_workspace", "status", "strip_injected",
]


def __getattr__(name: str):  # the store classes load their driver lazily
    if name == "SqliteDreamStore":
        from .sqlite_store import SqliteDreamStore

        return SqliteDreamStore
    if name == "PostgresDreamStore":
        from .pg_store import PostgresDreamStore

        return PostgresDreamStore
    raise AttributeError(name)
