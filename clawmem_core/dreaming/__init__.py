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

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

#: Public name -> the module of this package that defines it. Loaded on first use, so that a search
#: recording its recall (which needs the log and its store only) does not import promotion.
_EXPORTS = {
    "Candidate": "candidates", "Explanation": "candidates", "Gates": "candidates",
    "ConsolidationBusyError": "errors", "ModelDecisionError": "errors", "NothingToRollBackError": "errors",
    "RecallLogError": "errors",
    "DreamStore": "events", "Preimage": "events", "RecallEvent": "events",
    "has_injected": "injected", "strip_injected": "injected",
    "explain": "api", "promotion_config": "api", "rollback": "api", "status": "api",
    "PromotionConfig": "promote", "PromotionReport": "promote", "candidates_for": "promote",
    "dream_status": "promote", "explain_promotion": "promote", "promote_workspace": "promote",
    "rollback_workspace": "promote",
    "RecallLog": "recall_log", "RetentionPolicy": "recall_log", "open_store": "recall_log",
    "Workspace": "sources",
    "RewriteLimits": "validate",
    "SqliteDreamStore": "sqlite_store",  # the store classes load their driver lazily
    "PostgresDreamStore": "pg_store",
}

if TYPE_CHECKING:
    from .api import explain, promote, promotion_config, rollback, status
    from .candidates import Candidate, Explanation, Gates
    from .errors import ConsolidationBusyError, ModelDecisionError, NothingToRollBackError, RecallLogError
    from .events import DreamStore, Preimage, RecallEvent
    from .injected import has_injected, strip_injected
    from .pg_store import PostgresDreamStore
    from .promote import (PromotionConfig, PromotionReport, candidates_for, dream_status, explain_promotion,
                          promote_workspace, rollback_workspace)
    from .recall_log import RecallLog, RetentionPolicy, open_store
    from .sources import Workspace
    from .sqlite_store import SqliteDreamStore
    from .validate import RewriteLimits

__all__ = [
    "Candidate", "ConsolidationBusyError", "DreamStore", "Explanation", "Gates", "ModelDecisionError",
    "NothingToRollBackError", "Preimage", "PromotionConfig", "PromotionReport", "RecallEvent", "RecallLog",
    "RecallLogError", "RetentionPolicy", "RewriteLimits", "Workspace", "candidates_for", "dream_status", "explain",
    "explain_promotion", "has_injected", "open_store", "promote", "promote_workspace", "promotion_config",
    "rollback", "rollback_workspace", "status", "strip_injected",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS) | {"promote"})


class _Package(types.ModuleType):
    """This package, whose ``promote`` is :func:`.api.promote` and stays so when the submodule of
    that name is loaded (the import system then sets the package's attribute to the submodule)."""

    @property
    def promote(self) -> Any:
        from .api import promote

        return promote

    @promote.setter
    def promote(self, value: Any) -> None:
        pass


sys.modules[__name__].__class__ = _Package
