"""The PostgreSQL store's schema: each version's DDL, and the upgrade of an older database in place.

Version 2 created the tables; version 3 added the keyword index and kept vectors inside their
rows; version 4 stores the terms uncompressed and marks the agents whose vectors (written under
version 2) are still out of line, moved into their rows at each agent's next sync; version 5 keeps
each term's postings (rows and counts, packed) per agent and generation, written at the end of a sync
(:meth:`~clawmem_core.store.postgres.postings._Postings.settle`), so that a keyword search reads a term without reading the terms of its rows,
and drops the GIN index of the terms (no search reads it any more); version 6 keeps no planner
statistics of the large values (the rows' terms, text and vectors, the files' content, the packed
postings): nothing is planned on them, and an ANALYZE (autovacuum's, as the tables grow) read them
for every row of its sample."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ...errors import StoreError
from ..urls import redact_url

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger("clawmem")

SCHEMA_VERSION = 6
#: Older schema versions this code upgrades in place (the changes are only added tables, indexes,
#: columns, storage and statistics settings, and the dropped GIN index of the terms; an agent's keyword postings are written at its next sync; vectors a version 2 database keeps out of line are moved into their rows
#: agent by agent, at each agent's next sync: see :meth:`PostgresStore.remove_leftovers`).
_UPGRADES_FROM = (2, 3, 4, 5)
#: Out-of-line vectors (written under schema version 2) moved into their rows per statement.
_INLINE_BATCH = 2_000

#: Arbitrary key of the advisory lock taken while creating the schema.
_SCHEMA_LOCK = 0x636C61776D656D  # "clawmem"

#: The tables and indexes of version 2.
_TABLES = """
CREATE EXTENSION IF NOT EXISTS vector;
CREATE TABLE IF NOT EXISTS clawmem_schema (version integer NOT NULL);
CREATE SEQUENCE IF NOT EXISTS clawmem_generation_seq;
CREATE TABLE IF NOT EXISTS clawmem_agents (
    agent text PRIMARY KEY,
    generation bigint NOT NULL,
    data_version bigint NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS clawmem_meta (
    agent text NOT NULL, generation bigint NOT NULL, key text NOT NULL, value text NOT NULL,
    PRIMARY KEY (agent, generation, key));
CREATE TABLE IF NOT EXISTS clawmem_files (
    agent text NOT NULL, generation bigint NOT NULL, source text NOT NULL, path text NOT NULL,
    hash text NOT NULL, mtime bigint NOT NULL, size bigint NOT NULL, content text,
    ctime bigint NOT NULL DEFAULT 0, ino bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (agent, generation, source, path));
CREATE TABLE IF NOT EXISTS clawmem_chunks (
    rid bigserial PRIMARY KEY,
    agent text NOT NULL, generation bigint NOT NULL, id text NOT NULL,
    path text NOT NULL, source text NOT NULL, start_line integer NOT NULL, end_line integer NOT NULL,
    hash text NOT NULL, model text NOT NULL, text text NOT NULL,
    part smallint NOT NULL DEFAULT 0,
    pending smallint NOT NULL DEFAULT 0,
    terms tsvector, doc_len integer NOT NULL DEFAULT 0,
    dims integer, embedding vector,
    updated_at bigint NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS clawmem_chunks_id ON clawmem_chunks (agent, generation, id);
CREATE INDEX IF NOT EXISTS clawmem_chunks_path ON clawmem_chunks (agent, generation, source, path);
ALTER TABLE clawmem_chunks ADD COLUMN IF NOT EXISTS pending smallint NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS clawmem_chunks_pending ON clawmem_chunks (agent, generation, rid) WHERE pending = 1;
"""
#: The index of the rows holding each term (versions 2 to 4; version 5 reads packed postings instead).
_TERMS_INDEX = """CREATE INDEX IF NOT EXISTS clawmem_chunks_terms ON clawmem_chunks USING gin (terms);
"""
#: What version 3 added.
_ADDED_IN_3 = """-- the keyword rows of an agent in rid order with their lengths, read without the table (version 3)
CREATE INDEX IF NOT EXISTS clawmem_chunks_keyword ON clawmem_chunks (agent, generation, rid) INCLUDE (doc_len)
    WHERE part = 0;
-- vectors inside the row (the text and the terms go out of line instead): an exact search reads
-- one page per few rows, not a TOAST lookup per row (version 3)
ALTER TABLE clawmem_chunks ALTER COLUMN embedding SET STORAGE MAIN;
"""
#: What version 4 added.
_ADDED_IN_4 = """-- the terms uncompressed (out of line when large): compressing them cost a third of a keyword
-- row's insert, and a read of postings decompressed them again (version 4)
ALTER TABLE clawmem_chunks ALTER COLUMN terms SET STORAGE EXTERNAL;
-- false: the agent may have vectors stored out of line (written under version 2), moved into
-- their rows at its next sync (version 4)
ALTER TABLE clawmem_agents ADD COLUMN IF NOT EXISTS vectors_inline boolean NOT NULL DEFAULT true;
"""
#: What version 5 added.
_ADDED_IN_5 = """-- each term's postings in an agent's generation, packed: the rows (rid, 8 bytes big-endian each,
-- ascending) and the term's count in each (2 bytes each), for the rows up to ``upto`` written at
-- the time (a segment per sync that added rows, merged as they pile up); rows deleted since are
-- left to the reader. The empty term's row (no postings) names the rows all terms' postings
-- cover: those up to its ``upto`` (none without it) (version 5)
CREATE TABLE IF NOT EXISTS clawmem_postings (
    agent text NOT NULL, generation bigint NOT NULL, term text NOT NULL, upto bigint NOT NULL,
    rids bytea NOT NULL, tfs bytea NOT NULL,
    PRIMARY KEY (agent, generation, term, upto));
-- the postings uncompressed (out of line when large), as the terms: compressing them cost more
-- than half of a sync's write of them, and a term's first search decompressed them (version 5)
ALTER TABLE clawmem_postings ALTER COLUMN rids SET STORAGE EXTERNAL, ALTER COLUMN tfs SET STORAGE EXTERNAL;
-- no index of the rows holding a term: a search reads a term's packed postings, and the rows
-- written since by rid; each write of a row (its vectors included) no longer adds every term of
-- it to an index (version 5)
DROP INDEX IF EXISTS clawmem_chunks_terms;
"""
#: What version 6 added.
_ADDED_IN_6 = """-- no planner statistics of the large values: no statement is planned on them (they are read,
-- compared with a query or ranked, never selected on by their distribution), and an ANALYZE read
-- each of them in its sample of 30,000 rows (0.7-0.9 s a run of the chunks table at 30k rows,
-- 0.26-0.29 s without) (version 6)
ALTER TABLE clawmem_chunks ALTER COLUMN terms SET STATISTICS 0, ALTER COLUMN text SET STATISTICS 0,
    ALTER COLUMN embedding SET STATISTICS 0;
ALTER TABLE clawmem_files ALTER COLUMN content SET STATISTICS 0;
ALTER TABLE clawmem_postings ALTER COLUMN rids SET STATISTICS 0, ALTER COLUMN tfs SET STATISTICS 0;
"""
#: The embedding cache shared by every agent (the same in every version).
_CACHE = """CREATE TABLE IF NOT EXISTS clawmem_embedding_cache (
    provider text NOT NULL, model text NOT NULL, provider_key text NOT NULL, hash text NOT NULL,
    dims integer NOT NULL, embedding vector NOT NULL, updated_at bigint NOT NULL,
    PRIMARY KEY (provider, model, provider_key, hash));
CREATE INDEX IF NOT EXISTS clawmem_embedding_cache_updated ON clawmem_embedding_cache (updated_at);
"""

#: The DDL of each schema version, as clawmem wrote it (a later version runs over an earlier one).
SCHEMA_DDL = {
    2: _TABLES + _TERMS_INDEX + _CACHE,
    3: _TABLES + _TERMS_INDEX + _ADDED_IN_3 + _CACHE,
    4: _TABLES + _TERMS_INDEX + _ADDED_IN_3 + _ADDED_IN_4 + _CACHE,
    5: _TABLES + _ADDED_IN_3 + _ADDED_IN_4 + _ADDED_IN_5 + _CACHE,
    6: _TABLES + _ADDED_IN_3 + _ADDED_IN_4 + _ADDED_IN_5 + _ADDED_IN_6 + _CACHE,
}
_SCHEMA = SCHEMA_DDL[SCHEMA_VERSION]


class _Schema:
    """Creating and upgrading the schema (:class:`~clawmem_core.store.postgres.PostgresBackend`)."""

    def _schema_version(self, conn: "psycopg.Connection") -> int | None:
        if not conn.execute("SELECT to_regclass('clawmem_schema') IS NOT NULL").fetchone()[0]:  # type: ignore[index]
            return None
        row = conn.execute("SELECT version FROM clawmem_schema").fetchone()
        return int(row[0]) if row else None

    def ensure_schema(self) -> int | None:
        """Create the tables on first use, or upgrade an older schema in place; returns the
        version upgraded from (``None`` when nothing was upgraded here). A database that has the
        current schema is only read: DDL takes table locks that would wait on (and deadlock with)
        the syncs of other processes. Processes opening an old schema at once upgrade it once:
        the upgrade runs under an advisory lock and rereads the version."""
        if self._schema_ready:
            return None
        with self.connection() as conn:
            version = self._schema_version(conn)
        if version == SCHEMA_VERSION:
            self._schema_ready = True
            return None
        upgraded: int | None = None
        with self.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            version = self._schema_version(conn)
            if version is not None and version != SCHEMA_VERSION and version not in _UPGRADES_FROM:
                raise StoreError(
                    f"database {redact_url(self._url)} has clawmem schema version {version}; this clawmem "
                    f"writes {SCHEMA_VERSION}"
                )
            if version != SCHEMA_VERSION:
                conn.execute(_SCHEMA)
                if version is not None and version < 4:
                    # an agent indexed under version 2 (or a version 3 upgraded from it) may
                    # hold vectors out of line: each is moved into its rows at the agent's next sync
                    conn.execute("UPDATE clawmem_agents SET vectors_inline = false")
                if version is not None:
                    upgraded = version
                    log.info("upgraded the clawmem schema of %s from version %s to %s", redact_url(self._url),
                             version, SCHEMA_VERSION)
                conn.execute("DELETE FROM clawmem_schema")
                conn.execute("INSERT INTO clawmem_schema VALUES (%s)", (SCHEMA_VERSION,))
        self._schema_ready = True
        return upgraded


class _InlineVectors:
    """The data part of the upgrade from version 2 (:class:`~clawmem_core.store.postgres.PostgresStore`)."""

    def _inline_vectors(self) -> int:
        """Move the agent's out-of-line vectors into their rows (an exact search then reads no
        TOAST entry per row), a batch per transaction: a sync killed meanwhile leaves vectors
        inline or out of line, every one whole, and the next sync carries on. Returns how many."""
        with self._conn() as conn:
            row = conn.execute("SELECT vectors_inline, current_setting('server_version_num')::int FROM clawmem_agents "
                               "WHERE agent = %s", (self.agent,)).fetchone()
        if row is None or row[0]:
            return 0
        # PostgreSQL 17 tells which values are out of line; before it, every vector is rewritten once
        outside = "pg_column_toast_chunk_id(embedding) IS NOT NULL" if int(row[1]) >= 170000 else "true"
        moved, after = 0, 0
        while True:
            with self._conn() as conn, conn.transaction():
                # a new value (through text) is stored as the column says now: inside the row
                got = conn.execute(
                    f"WITH b AS (SELECT rid FROM clawmem_chunks WHERE agent = %(agent)s AND rid > %(after)s "
                    f"AND embedding IS NOT NULL AND {outside} ORDER BY rid LIMIT %(n)s) "
                    "UPDATE clawmem_chunks AS c SET embedding = c.embedding::text::vector FROM b WHERE c.rid = b.rid "
                    "RETURNING c.rid",
                    {"agent": self.agent, "after": after, "n": _INLINE_BATCH},
                ).fetchall()
                if not got:
                    conn.execute("UPDATE clawmem_agents SET vectors_inline = true WHERE agent = %s", (self.agent,))
                    return moved
            moved += len(got)
            after = max(r[0] for r in got)
