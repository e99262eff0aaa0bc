"""The PostgreSQL store: many agents in one database, with pgvector for vectors.

Every row carries its agent id and every query is scoped by it; the embedding cache is shared by
all agents (same provider, model and text hash: embedded once for everyone). Each agent has a live
*generation*: a full reindex writes a new generation beside the live one and switches to it in one
transaction. Keyword search is BM25 over the same terms as the SQLite store (FTS5's own tokenizer,
run in process), kept in a ``tsvector`` with a GIN index and scored with FTS5's ``bm25()`` formula.
Vectors are pgvector ``vector`` values, searched exactly below ``exact_below`` rows per agent and
through an HNSW (cosine) index above. Syncs of one agent are serialised by a PostgreSQL advisory
lock, so processes on different hosts can sync the same agent.

Needs ``pip install "clawmem-py[postgres]"`` (psycopg 3 and psycopg-pool) and the ``vector``
extension (pgvector), which every managed PostgreSQL ships.

The package's modules, each one concern: :mod:`.connection` (the pool, the unreachable store,
writing and reading blocks), :mod:`.migrations` (each schema version's DDL and the upgrade in
place), :mod:`.locks` (advisory locks), :mod:`.terms` and :mod:`.values` (the keyword terms and
the literals PostgreSQL takes), :mod:`.keywords` (BM25 statistics, in process and in SQL),
:mod:`.vectors` (the vector phase, vector search and the HNSW build), :mod:`.reads` and
:mod:`.writes` (reads with their snapshot plumbing; write transactions and generations),
:mod:`.cache` (the shared embedding cache), :mod:`.store` and :mod:`.backend` (the classes that
put them together). URL redaction lives in :mod:`clawmem_core.store.urls`.
"""

from __future__ import annotations

from ..urls import SECRET_PARAMETERS, _passwords_of, is_postgres_url, redact_url
from .backend import PostgresBackend
from .connection import _CHECKOUT_SECONDS, _PROBE_SECONDS, _writing_block
from .keyword_cache import KEYWORD_CACHE, MAX_CACHED_BYTES
from .migrations import _SCHEMA, _UPGRADES_FROM, SCHEMA_DDL, SCHEMA_VERSION
from .store import PostgresStore
from .vectors import (EXACT_BELOW, HNSW_BUILD_MEMORY, HNSW_EF_SEARCH, HNSW_ITERATIVE_SCAN, HNSW_VISIT_COST,
                      _hnsw_name, build_hnsw, hnsw_index, hnsw_type)
from .writes import META_KEY

__all__ = [
    "EXACT_BELOW", "HNSW_BUILD_MEMORY", "HNSW_EF_SEARCH", "HNSW_ITERATIVE_SCAN", "HNSW_VISIT_COST", "KEYWORD_CACHE",
    "MAX_CACHED_BYTES", "META_KEY", "SCHEMA_DDL", "SCHEMA_VERSION", "SECRET_PARAMETERS", "PostgresBackend",
    "PostgresStore", "build_hnsw", "hnsw_index", "hnsw_type", "is_postgres_url", "redact_url",
]
