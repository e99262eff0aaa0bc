"""clawmem: OpenClaw-style long-term memory for agents.

Markdown files are the source of truth (``MEMORY.md``, ``memory/**/*.md``); a SQLite index
beside them is rebuildable at any time; search is hybrid (BM25 keywords + vectors).

The names below are loaded when first used (``from clawmem_core import MemoryIndex`` imports the
index then), so that a command that needs none of them, such as a ``clawmem search`` answered by
a running ``clawmem watch``, does not pay for them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import MemoryConfig
    from .errors import (
        ClawmemError,
        ConfigError,
        EmbeddingError,
        EmbeddingQuotaError,
        InvalidQueryError,
        MissingApiKeyError,
        MissingDependencyError,
        PathNotAllowedError,
        StoreError,
        WorkspaceError,
    )
    from .index import MemoryIndex
    from .results import IndexStatus, ReadResult, SearchResult, SyncReport

__version__ = "0.1.0"

__all__ = [
    "MemoryIndex",
    "MemoryConfig",
    "SearchResult",
    "ReadResult",
    "SyncReport",
    "IndexStatus",
    "ClawmemError",
    "ConfigError",
    "EmbeddingError",
    "EmbeddingQuotaError",
    "InvalidQueryError",
    "MissingApiKeyError",
    "MissingDependencyError",
    "PathNotAllowedError",
    "StoreError",
    "WorkspaceError",
]

#: Where each public name is defined.
_HOMES = {
    "MemoryIndex": "index",
    "MemoryConfig": "config",
    "SearchResult": "results",
    "ReadResult": "results",
    "SyncReport": "results",
    "IndexStatus": "results",
    **{name: "errors" for name in __all__ if name.endswith("Error")},
}


def __getattr__(name: str) -> Any:
    """A public name (imported from its module on first use), or a submodule not imported yet
    (``clawmem_core.index`` after a bare ``import clawmem_core``, as when this package imported
    the index itself)."""
    home = _HOMES.get(name)
    if home is not None:
        value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
        globals()[name] = value
        return value
    if not name.startswith("__"):
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
