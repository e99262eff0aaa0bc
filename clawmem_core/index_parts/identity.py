"""An index's identity: what its rows were derived with (provider, model, sources, extra paths,
chunking, tokenizer, formats). An index whose identity differs from the configuration is rebuilt
in full by the next sync."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from ..config import MemoryConfig
from ..discovery import normalize_extra_paths
from ..embeddings.base import Embedder
from ..text import FTS_FORMAT

#: Version of what a sync derives from a file (chunk boundaries and line ranges, embedding windows;
#: the keyword terms have their own ``text.FTS_FORMAT``). Bump it when these change: an index written
#: under another version is rebuilt in full on the next sync (from the embedding cache, so nothing is
#: embedded twice), since unchanged files would otherwise keep their old rows.
INDEX_FORMAT = 4  # 4: legacy encodings and UTF-16/32 with a BOM are decoded (safe_fs.decode)


def index_identity(workspace: Path | None, config: MemoryConfig, emb: Embedder | None) -> dict[str, Any]:
    """The identity an index of ``workspace`` built now with ``emb`` would have."""
    extra = sorted(str(p).replace(os.sep, "/") for p in normalize_extra_paths(workspace, config.extra_paths))
    scope = hashlib.sha256(json.dumps({"extra_paths": extra}).encode()).hexdigest()
    return {
        "provider": emb.provider if emb else "none",
        "model": emb.model if emb else "fts-only",
        "provider_key": emb.provider_key if emb else "fts-only",
        "sources": sorted(config.sources),
        "scope_hash": scope,
        "chunk_tokens": config.chunking.tokens,
        "chunk_overlap": config.chunking.overlap,
        "fts_tokenizer": config.store.fts.tokenizer,
        "fts_format": FTS_FORMAT,
        "workspace": str(workspace),
        "index_format": INDEX_FORMAT,
        "embed_window": emb.embed_window if emb else 0,
        # a file over the limit is stored without chunks: another limit rebuilds what it changes
        "max_file_bytes": config.sync.max_file_bytes,
    }
