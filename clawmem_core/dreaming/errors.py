"""Errors of dreaming (recall log, candidates, promotion); all are :class:`~clawmem_core.errors.ClawmemError`."""

from __future__ import annotations

from ..errors import ClawmemError, StoreError


class ConsolidationBusyError(ClawmemError):
    """Another process (or thread) is consolidating this agent's memory right now."""


class RecallLogError(StoreError):
    """The recall log could not be read or written."""


class NothingToRollBackError(ClawmemError):
    """No saved preimage of ``MEMORY.md`` is left to restore."""


class ModelDecisionError(ClawmemError, ValueError):
    """The model's answer is not a valid list of decisions (the run falls back to append-only)."""


class RewriteRejectedError(ClawmemError, ValueError):
    """A proposed ``MEMORY.md`` failed a check before it was written (the message says which)."""
