"""Exceptions raised by clawmem. Every error a user can cause is a subclass of :class:`ClawmemError`."""

from __future__ import annotations


class ClawmemError(Exception):
    """Base class of every clawmem error."""


class ConfigError(ClawmemError, ValueError):
    """A configuration value is invalid (wrong type, unknown provider, bad range)."""


class WorkspaceError(ClawmemError, ValueError):
    """The workspace directory is missing or is not a directory."""


class PathNotAllowedError(ClawmemError, ValueError):
    """``read``/``memory_get`` refused a path outside memory (``..``, absolute, symlink, not ``.md``)."""


class MemoryWriteError(ClawmemError, OSError):
    """A memory file could not be written (full disk, I/O error); nothing of the note was left in it."""


class InvalidQueryError(ClawmemError, ValueError):
    """A search argument is invalid (not a string, NaN score, negative max_results...)."""


class StoreError(ClawmemError):
    """The index file cannot be opened, is corrupt, or cannot be written."""


class IndexingError(ClawmemError):
    """A sync failed for a reason that is neither the store nor the embedding provider (the message says
    what failed; the Markdown is untouched and the previous index stays in place)."""


class EmbeddingError(ClawmemError):
    """The embedding provider failed (network, HTTP error, malformed response)."""


class EmbeddingQuotaError(EmbeddingError):
    """The embedding provider refused because the account's quota is exhausted."""


class MissingApiKeyError(EmbeddingError):
    """No API key was found for a remote embedding provider."""


class MissingDependencyError(ClawmemError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""


class ReplicaError(ClawmemError):
    """This process serves memory from a server store without the workspace (a replica): it can
    search and read the index's copies of files, not write notes or sync."""
