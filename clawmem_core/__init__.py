"""clawmem: OpenClaw-style long-term memory for agents.

Markdown files are the source of truth (``MEMORY.md``, ``memory/**/*.md``); a SQLite index
beside them is rebuildable at any time; search is hybrid (BM25 keywords + vectors).
"""

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
