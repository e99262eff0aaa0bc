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
"""

from __future__ import annotations

import bisect
import contextlib
import json
import logging
import math
import os
import re
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterable, Iterator, Sequence, TypeVar
from urllib.parse import unquote, urlsplit, urlunsplit

from ..config import memory_kb
from ..errors import ConfigError, MissingDependencyError, StoreError
from ..text import index_document
from .base import (ChunkRow, CorruptIndexError, FileRow, FileState, MissingIndexError, ReadInterrupted, Store,
                   StoreBackend, StoreBusyError, StoreCounts, StoreUnreachableError, VectorCounts, check_agent_id,
                   wait_left)

if TYPE_CHECKING:
    import numpy as np
    import psycopg
    from psycopg_pool import ConnectionPool

log = logging.getLogger("clawmem")
_T = TypeVar("_T")

SCHEMA_VERSION = 4
#: Older schema versions this code upgrades in place (the changes are only added indexes, columns
#: and storage settings; vectors a version 2 database keeps out of line are moved into their rows
#: agent by agent, at each agent's next sync: see :meth:`PostgresStore.remove_leftovers`).
_UPGRADES_FROM = (2, 3)
#: Out-of-line vectors (written under schema version 2) moved into their rows per statement.
_INLINE_BATCH = 2_000
META_KEY = "memory_index_meta_v1"
#: Agents with fewer vectors than this are searched exactly; above it, through HNSW.
EXACT_BELOW = 20_000
#: HNSW candidates examined per query (at least the number asked for): ``store.vector.hnsw_ef_search``.
#: At 1M 384-d chunks, for search()'s 200 candidates through the halfvec index, recall@10 of real
#: questions (far from every chunk) is 0.93 at 400 and 0.96 at 600, for about 1.3 times the time
#: (bench/results/POSTGRES.md); draws like the data are at 0.99 from 400 up.
HNSW_EF_SEARCH = 600
#: pgvector's ``hnsw.iterative_scan``: keep scanning the graph until enough rows pass the agent
#: filter (an agent with few of the index's rows would otherwise get fewer results than asked for).
HNSW_ITERATIVE_SCAN = "relaxed_order"
_ITERATIVE_SCANS = ("off", "relaxed_order", "strict_order")
#: An agent with few of a shared HNSW index's rows is searched exactly: to return ``limit`` rows the
#: filtered graph walk visits about ``limit / share`` index entries, each costing about this many
#: exact comparisons (measured at 1M 384-d rows: ~80 us a visited entry against ~5 us an exact row).
#: Exact is chosen when ``count < HNSW_VISIT_COST * limit / share``, i.e. ``count**2 < cost * limit * rows``.
HNSW_VISIT_COST = 20
#: ``maintenance_work_mem`` for the store's own HNSW build (``store.vector.hnsw_build_memory``):
#: raised to this for the build only, never lowered below the server's setting. Small enough for
#: a 1 GB managed server; a larger graph is built partly on disk (slower, same index).
HNSW_BUILD_MEMORY = "256MB"
#: pgvector's limits on the dimensions of an HNSW index: ``vector`` 2,000, ``halfvec`` 4,000.
_HNSW_MAX_DIMS = {"vector": 2000, "halfvec": 4000}
#: A failed automatic build is tried again after this many seconds (searches stay exact meanwhile).
_HNSW_RETRY_SECONDS = 600.0
#: Versions of its own commits a store handle keeps for :meth:`PostgresStore.others_version`
#: (older ones are counted, not kept).
_OWN_KEPT = 1024
#: FTS5's ``bm25()`` constants.
_K1, _B = 1.2, 0.75
#: PostgreSQL refuses lexemes of 2 KiB and more (such a "word" is never searched for).
_MAX_LEXEME_BYTES = 2046
#: The longest a store call waits for a pooled connection (seconds). Within a search, it waits
#: only until the search's deadline (:func:`~clawmem_core.store.base.store_deadline`), then tries a
#: connection of its own: refused, the store is unreachable (said at once); answered, the pool is
#: only busy, and the call waits on for the rest of this.
_CHECKOUT_SECONDS = 30.0
#: libpq's shortest ``connect_timeout``: the bound on that connection attempt.
_PROBE_SECONDS = 2
#: PostgreSQL's largest btree entry (8 KiB pages): a file's key (agent, generation, source, path)
#: must fit in one, in ``clawmem_files`` and in ``clawmem_chunks``' path index.
_BTREE_MAX_ITEM = 2704
#: What such an entry holds besides the agent id and the path: its header, the generation, the
#: longest source name ("sessions"), the fields' length headers and alignment (with room to spare).
_KEY_OVERHEAD = 72
#: Arbitrary key of the advisory lock taken while creating the schema.
_SCHEMA_LOCK = 0x636C61776D656D  # "clawmem"

_SCHEMA = """
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
CREATE INDEX IF NOT EXISTS clawmem_chunks_terms ON clawmem_chunks USING gin (terms);
ALTER TABLE clawmem_chunks ADD COLUMN IF NOT EXISTS pending smallint NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS clawmem_chunks_pending ON clawmem_chunks (agent, generation, rid) WHERE pending = 1;
-- the keyword rows of an agent in rid order with their lengths, read without the table (version 3)
CREATE INDEX IF NOT EXISTS clawmem_chunks_keyword ON clawmem_chunks (agent, generation, rid) INCLUDE (doc_len)
    WHERE part = 0;
-- vectors inside the row (the text and the terms go out of line instead): an exact search reads
-- one page per few rows, not a TOAST lookup per row (version 3)
ALTER TABLE clawmem_chunks ALTER COLUMN embedding SET STORAGE MAIN;
-- the terms uncompressed (out of line when large): compressing them cost a third of a keyword
-- row's insert, and a read of postings decompressed them again (version 4)
ALTER TABLE clawmem_chunks ALTER COLUMN terms SET STORAGE EXTERNAL;
-- false: the agent may have vectors stored out of line (written under version 2), moved into
-- their rows at its next sync (version 4)
ALTER TABLE clawmem_agents ADD COLUMN IF NOT EXISTS vectors_inline boolean NOT NULL DEFAULT true;
CREATE TABLE IF NOT EXISTS clawmem_embedding_cache (
    provider text NOT NULL, model text NOT NULL, provider_key text NOT NULL, hash text NOT NULL,
    dims integer NOT NULL, embedding vector NOT NULL, updated_at bigint NOT NULL,
    PRIMARY KEY (provider, model, provider_key, hash));
CREATE INDEX IF NOT EXISTS clawmem_embedding_cache_updated ON clawmem_embedding_cache (updated_at);
"""


#: libpq parameters that carry a secret (those libpq itself shows as "*", and the SCRAM keys).
SECRET_PARAMETERS = frozenset({"password", "sslpassword", "oauth_client_secret", "scram_client_key",
                               "scram_server_key"})
# key=value pairs of a conninfo string: host=db password='a b' sslpassword = x
_CONNINFO_PAIR = re.compile(r"([A-Za-z_%0-9]+)(\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s']*)")


def _is_password_key(key: str) -> bool:
    """A key libpq reads as a secret parameter, in any spelling it accepts (it decodes ``pass%77ord``) and
    in upper case (refused by libpq, but quoted in its error)."""
    return unquote(key).strip().lower() in SECRET_PARAMETERS


def _is_uri(url: str) -> bool:
    return bool(re.match(r"(?i)\s*postgres(?:ql)?://", url))


def redact_url(url: str) -> str:
    """``url`` with every secret replaced by ``***``: the userinfo password and each secret parameter
    (``password``, ``sslpassword``, ...) of the query string, in any spelling; a ``key=value`` conninfo
    string has its secret values replaced the same way."""
    if not _is_uri(url):
        return _CONNINFO_PAIR.sub(lambda m: f"{m.group(1)}{m.group(2)}***" if _is_password_key(m.group(1))
                                  else m.group(0), url)
    try:
        parts = urlsplit(url)
    except ValueError:
        return "postgresql://***"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        if ":" in userinfo:
            userinfo = userinfo.split(":", 1)[0] + ":***"
        netloc = f"{userinfo}@{host}"
    query = "&".join(f"{part.split('=', 1)[0]}=***" if "=" in part and _is_password_key(part.split("=", 1)[0])
                     else part for part in parts.query.split("&"))
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _passwords_of(url: str) -> list[str]:
    """Every secret ``url`` holds (password, sslpassword, ...), as written and percent-decoded (longest
    first); also of a URL ``urlsplit`` refuses, whose text libpq may quote in its error."""
    found: list[str] = []
    if _is_uri(url):
        for m in (re.match(r"[^:/?#]*://([^@/?#]*)@", url.strip()), re.match(r"[^:/?#]*://([^/?#]*)@", url.strip())):
            if m and ":" in m.group(1):  # libpq ends the userinfo at the first "@", urlsplit at the last
                found.append(m.group(1).split(":", 1)[1])
        query = url.split("?", 1)[1].split("#", 1)[0] if "?" in url else ""
        found += [part.split("=", 1)[1] for part in query.split("&")
                  if "=" in part and _is_password_key(part.split("=", 1)[0])]
    else:
        for m in _CONNINFO_PAIR.finditer(url):
            if _is_password_key(m.group(1)):
                value = m.group(3)
                found.append(value)
                if value.startswith("'"):
                    found.append(re.sub(r"\\(.)", r"\1", value.strip("'")))
    found += [unquote(pw) for pw in found]
    return sorted({pw for pw in found if pw}, key=len, reverse=True)


def is_postgres_url(url: str | None) -> bool:
    return bool(url) and str(url).split(":", 1)[0].lower() in ("postgres", "postgresql")


def _now_ms() -> int:
    return int(time.time() * 1000)


def _pg_text(text: str) -> str:
    """``text`` as PostgreSQL can store it: a NUL character (text fields refuse it; SQLite keeps
    it) becomes U+FFFD, which no tokenizer indexes either."""
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def _vec(v: Sequence[float]) -> str:
    """A pgvector text literal (``[1.0, 0.5]``: pgvector skips the spaces)."""
    return str(list(map(float, v)))


class _Terms:
    """FTS5's tokenizer for the configured ``store.fts.tokenizer``, run in process: the PostgreSQL
    index holds exactly the terms the SQLite index holds."""

    def __init__(self, tokenizer: str) -> None:
        import apsw

        from .sqlite import FTS_TOKENIZERS

        if tokenizer not in ("cjk", "unicode61"):
            raise ConfigError(f"the PostgreSQL store supports store.fts.tokenizer cjk or unicode61, not {tokenizer!r}")
        self.cjk = tokenizer == "cjk"
        self._conn = apsw.Connection(":memory:")
        name, *args = [a.strip("'") for a in FTS_TOKENIZERS[tokenizer].split()]
        self._tok = self._conn.fts5_tokenizer(name, args)
        self._doc_flag = apsw.FTS5_TOKENIZE_DOCUMENT
        self._query_flag = apsw.FTS5_TOKENIZE_QUERY
        self._lock = threading.Lock()

    def document(self, text: str) -> list[str]:
        doc = index_document(text) if self.cjk else text
        with self._lock:  # (no colocated tokens: the first of each group, as FTS5 indexes it)
            return self._tok(doc.encode("utf-8"), self._doc_flag, None, include_offsets=False,  # type: ignore[no-any-return]
                             include_colocated=False)

    def counts(self, text: str) -> tuple["Counter[str]", int]:
        """Each term of a document with its count (terms PostgreSQL cannot hold left out), and the
        document's length in tokens (all of them, as FTS5 counts it)."""
        tokens = self.document(text)
        counts = Counter(tokens)
        # a term of at most 511 characters is at most 2044 bytes: only longer ones are measured
        for t in [t for t in counts if len(t) > _MAX_LEXEME_BYTES // 4 and len(t.encode("utf-8")) > _MAX_LEXEME_BYTES]:
            del counts[t]
        return counts, len(tokens)

    def query(self, terms: Sequence[str]) -> list[str]:
        """The tokens of query terms (a term of several tokens counts as each of them)."""
        out: list[str] = []
        with self._lock:
            for term in terms:
                got = self._tok(term.encode("utf-8"), self._query_flag, None, include_offsets=False)
                out.extend(t[0] for t in got if t)
        return [t for t in dict.fromkeys(out) if len(t.encode("utf-8")) <= _MAX_LEXEME_BYTES]


#: PostgreSQL keeps at most 256 positions per lexeme: a term's count in one chunk is capped there.
_MAX_POSITIONS = 256


def _quote_lexeme(t: str) -> str:
    return "'" + t.replace("\\", "\\\\").replace("'", "''") + "'"


#: ``1,2,...,n`` for every n up to :data:`_MAX_POSITIONS`.
_POSITIONS = [""] + [",".join(map(str, range(1, n + 1))) for n in range(1, _MAX_POSITIONS + 1)]


def _tsvector(counts: "Counter[str]") -> str:
    """A ``tsvector`` literal holding each term with as many positions as occurrences (its tf)."""
    pos, top = _POSITIONS, _MAX_POSITIONS
    return " ".join(["'" + t.replace("\\", "\\\\").replace("'", "''") + "':" + pos[n if n < top else top]
                     for t, n in counts.items()])


def _tsquery(tokens: Sequence[str]) -> str:
    """``'a' | 'b'`` with every lexeme quoted (nothing in a term is tsquery syntax)."""
    return " | ".join(_quote_lexeme(t) for t in tokens)


#: Postings (rows) the in-process keyword statistics keep, over every agent of the process.
MAX_CACHED_POSTINGS = 8_000_000
#: Attempts to read statistics of one data version while other processes write.
_KEYWORD_ATTEMPTS = 3
#: What a keyword-cache answer returns when it finds the statistics out of date (asked again).
_STALE = object()


class _StaleKeywords(Exception):
    """The agent's keyword rows changed while their statistics were being read."""


class _KeywordStats:
    """BM25 statistics of one agent's keyword rows at one data version, kept in process: the rows
    (ascending ``rid``), their lengths, and the postings of the terms searched so far. Scores are
    FTS5's ``bm25()`` (same formula, constants and order of additions as :mod:`.bm25`)."""

    def __init__(self, token: Any, rids: "np.ndarray", doc_len: "np.ndarray") -> None:
        self.token = token
        self.rids = rids
        self.doc_len = doc_len
        self.rows = len(rids)
        avgdl = float(doc_len.sum()) / self.rows if self.rows else 1.0
        #: Per row: ``k1 * (1 - b + b * D / avgdl)``, evaluated as fts5Bm25Function does.
        self.length_norm = _K1 * (1 - _B + _B * doc_len / avgdl)
        #: token -> (row positions ascending, the token's count in each)
        self.terms: dict[str, tuple[Any, Any]] = {}
        self.postings = 0
        self.used = time.monotonic()

    @property
    def size(self) -> int:
        return self.rows + self.postings

    def add(self, token: str, rids: "np.ndarray", tf: "np.ndarray") -> tuple[Any, Any]:
        """Keep the postings of ``token``: its rows (ascending) and its count in each."""
        import numpy as np

        pos = np.searchsorted(self.rids, rids)
        if len(rids) and (pos.max() >= self.rows or not np.array_equal(self.rids[pos], rids)):
            raise _StaleKeywords(f"postings of {token!r} name rows the statistics do not hold")
        entry = (pos.astype(np.int32), tf.astype(np.uint16))  # 6 bytes a posting (tf <= 256)
        self.terms[token] = entry
        self.postings += len(pos)
        return entry

    def advance(self, token: Any, live: "np.ndarray | None", rids: "np.ndarray", doc_len: "np.ndarray",
                postings: dict[str, tuple["np.ndarray", "np.ndarray"]]) -> "_KeywordStats":
        """These statistics carried to a later data version of the same generation: of the rows
        held, those in ``live`` stay (all when ``None``); ``rids`` (all above the ones held) come
        with their lengths and, for each term held, its ``postings`` among them."""
        import numpy as np

        if live is None:
            keep = np.ones(self.rows, dtype=bool)
        else:
            keep = np.isin(self.rids, live, assume_unique=True)
        kept = int(keep.sum())
        moved = np.cumsum(keep) - 1  # old position -> new position (where kept)
        out = _KeywordStats(token, np.concatenate([self.rids[keep], rids]),
                            np.concatenate([self.doc_len[keep], doc_len]))
        for term, (pos, tf) in list(self.terms.items()):
            alive = keep[pos]
            new_rids, new_tf = postings.get(term, (rids[:0], doc_len[:0]))
            new_pos = kept + np.searchsorted(rids, new_rids)
            out.terms[term] = (np.concatenate([moved[pos[alive]], new_pos]).astype(np.int32),
                               np.concatenate([tf[alive], new_tf]).astype(np.uint16))
            out.postings += len(out.terms[term][0])
        return out

    def idf(self, hits: int) -> float:
        # fts5_aux.c: IDF = log((N - nHit + 0.5) / (nHit + 0.5)), at least 1e-6.
        idf = math.log((self.rows - hits + 0.5) / (hits + 0.5)) if self.rows else 1e-6
        return 1e-6 if idf <= 0.0 else idf

    def search(self, postings: Sequence[tuple[Any, Any]], limit: int) -> list[tuple[int, float]]:
        """``(rid, bm25 rank)`` of the best ``limit`` rows holding any of the query's tokens (their
        ``postings``, in query order); ties by rid."""
        import numpy as np

        if not self.rows or limit <= 0:
            return []
        scores = np.zeros(self.rows, dtype=np.float64)
        norm = self.length_norm
        hit = False
        for pos, tf in postings:  # one addition per row and term, in term order, as FTS5
            freq = tf.astype(np.float64)
            if len(pos):
                hit = True
                # fts5Bm25Function: score += idf * ((f * (k1 + 1.0)) / (f + k1 * (1 - b + b * D / avgdl)))
                scores[pos] += self.idf(len(pos)) * ((freq * (_K1 + 1.0)) / (freq + norm[pos]))
        if not hit:
            return []
        # Every matching row scores above 0 (IDF >= 1e-6): the rows at least as good as the
        # limit-th score, then ordered by score and row.
        cut = len(scores) - limit
        kth = np.partition(scores, cut)[cut] if cut > 0 else 0.0
        found = np.flatnonzero(scores >= kth) if kth > 0 else np.flatnonzero(scores)
        best = found[np.lexsort((found, -scores[found]))[:limit]]
        return [(int(self.rids[i]), -float(scores[i])) for i in best]

    @staticmethod
    def rows_with_all(postings: Sequence[tuple[Any, Any]]) -> int:
        """Rows holding every token of ``postings``."""
        import numpy as np

        pos = postings[0][0]
        for other, _ in postings[1:]:
            pos = np.intersect1d(pos, other, assume_unique=True)
        return len(pos)


class _KeywordCache:
    """The in-process keyword statistics of every agent this process searches, by database and
    agent, each valid for one data version of its agent (bumped by every write transaction, in
    any process): a search checks the version in the same statement that fetches its results."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stats: dict[tuple[str, str], _KeywordStats] = {}

    def get(self, key: tuple[str, str]) -> _KeywordStats | None:
        with self._lock:
            stats = self._stats.get(key)
            if stats is not None:
                stats.used = time.monotonic()
            return stats

    def put(self, key: tuple[str, str], stats: _KeywordStats) -> None:
        with self._lock:
            self._stats[key] = stats
            self._trim(keep=key)

    def grew(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._trim(keep=key)

    def drop(self, key: tuple[str, str], stats: _KeywordStats | None = None) -> None:
        with self._lock:
            if stats is None or self._stats.get(key) is stats:
                self._stats.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._stats.clear()

    def _trim(self, keep: tuple[str, str]) -> None:
        """Forget the least recently used agents, then the kept agent's postings, over the budget."""
        total = sum(s.size for s in self._stats.values())
        for key, s in sorted(self._stats.items(), key=lambda kv: kv[1].used):
            if total <= MAX_CACHED_POSTINGS:
                return
            if key != keep:
                total -= s.size
                del self._stats[key]
        s = self._stats.get(keep)
        if s is not None and total > MAX_CACHED_POSTINGS:
            s.terms.clear()  # the kept agent alone is over the budget: its row lengths stay
            s.postings = 0


KEYWORD_CACHE = _KeywordCache()

class _Writing:
    """One thread's writing block on one database (:meth:`PostgresBackend.writing`): the
    connection its current statement runs on (``None`` between statements), how deeply the block
    and its statements nest, and whether the last statement failed because the connection was
    lost."""

    def __init__(self) -> None:
        self.depth = 1
        self.conn: psycopg.Connection | None = None
        self.uses = 0
        self.lost = False


#: This thread's open writing blocks (:meth:`PostgresBackend.writing`), by database URL.
_WRITING = threading.local()


def _writing_block(url: str) -> _Writing | None:
    return getattr(_WRITING, "by_url", {}).get(url)  # type: ignore[no-any-return]


def _again_if_lost(method: Callable[..., Any]) -> Callable[..., Any]:
    """Run a store call once more when it failed because the connection of this thread's writing
    block was lost (the server ended it as the call began): the calls of the vector phase are
    safe to repeat (a chunk no longer pending is not completed twice)."""
    import functools

    @functools.wraps(method)
    def call(self: "PostgresStore", *args: Any, **kwargs: Any) -> Any:
        block = _writing_block(self.backend._url)
        if block is not None:
            block.lost = False
        try:
            return method(self, *args, **kwargs)
        except StoreError:
            block = _writing_block(self.backend._url)
            if block is None or not block.lost:
                raise
            block.lost = False
            log.debug("the connection of a writing block was lost during %s: once more", method.__name__)
            return method(self, *args, **kwargs)

    return call


#: This thread's open reading blocks (:meth:`PostgresBackend.reading`), by database URL, innermost last.
_READING = threading.local()
#: Bumped by every write transaction of this process: what a reading block outside a snapshot
#: read is reused within the block only while this is unchanged.
_WRITES = [0]
#: Set while this thread takes a pooled connection without the pool's check (a reading block
#: retries a read whose connection turns out to be lost instead).
_UNCHECKED = threading.local()


def _check_connection(conn: "psycopg.Connection") -> None:
    """The pool's check of a connection it hands out (one round trip), skipped for reading blocks."""
    if getattr(_UNCHECKED, "on", False):
        return
    from psycopg_pool import ConnectionPool

    ConnectionPool.check_connection(conn)


class _Reading:
    """The connection of one thread's block of reads (one search) on one database, taken from the
    pool without a check on its first read. With ``snapshot``, its reads run in one ``REPEATABLE
    READ, READ ONLY`` transaction, in pipeline mode (the ``BEGIN`` rides with the first statement,
    the ``COMMIT`` with the return), and what they answered is kept for the block (:attr:`memo`,
    per agent), so that a later read of the same thing needs no round trip."""

    def __init__(self, backend: "PostgresBackend", snapshot: bool) -> None:
        self.backend = backend
        self.snapshot = snapshot
        self.depth = 1
        self.conn: psycopg.Connection | None = None
        self._pipeline: Any = None
        #: (agent, generation) -> what this snapshot answered for it: "token" (generation, data
        #: version), "meta" and "pending" of chunk ids, "chunks" (rows), "vectors" (counts)
        self.memo: dict[tuple[str, int | None], dict[str, Any]] = {}
        #: Agents this snapshot answered reads of.
        self.read: set[tuple[str, int | None]] = set()
        #: Agents read in an earlier snapshot of this block, and their versions then (checked when
        #: the next snapshot starts).
        self._verify: tuple[set[tuple[str, int | None]], dict[tuple[str, int | None], Any]] | None = None
        self.interrupted = False
        self._check_next = False

    def connection(self) -> "psycopg.Connection":
        if self.conn is None:
            # after a lost connection, the pool's others may be lost too (a server restart): checked
            check = self._check_next

            def take(timeout: float) -> "psycopg.Connection":
                _UNCHECKED.on = not check
                try:
                    return self.backend.pool.getconn(timeout=timeout)
                finally:
                    _UNCHECKED.on = False

            conn = self.backend.checkout(take)
            self.conn = conn
            if self.snapshot:
                self._pipeline = conn.pipeline()
                self._pipeline.__enter__()
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                self._check_versions(conn)
        return self.conn

    def lost(self) -> bool:
        """Whether the connection is gone (killed, server restarted), not just a failed statement."""
        conn = self.conn
        return conn is not None and (conn.closed or conn.broken)

    def release(self, discard: bool = False) -> None:
        """End the snapshot and hand the connection back (closed first when ``discard``: the pool
        drops it)."""
        conn, pipeline = self.conn, self._pipeline
        self.conn = self._pipeline = None
        if conn is None:
            return
        try:
            if pipeline is not None and not discard:
                conn.execute("COMMIT")
                pipeline.__exit__(None, None, None)
        except Exception:
            discard = True
        if discard:
            self._check_next = True
            with contextlib.suppress(Exception):
                conn.close()
        self.backend.pool.putconn(conn)

    def forget(self) -> None:
        """After the connection was lost or a read failed: the block's next read runs in a new
        snapshot, and only if every agent read so far is still at the version it was read at (the
        answers are then the same); else that read raises :class:`ReadInterrupted`."""
        tokens = {k: m["token"] for k, m in self.memo.items() if "token" in m}
        if self.snapshot and self.read:
            self._verify = (set(self.read) | set(self._verify[0]) if self._verify else set(self.read),
                            {**(self._verify[1] if self._verify else {}), **tokens})
        self.memo, self.read = {}, set()

    def _check_versions(self, conn: "psycopg.Connection") -> None:
        if self._verify is None:
            return
        read, tokens = self._verify
        same = all(key in tokens for key in read)
        if same:
            rows = conn.execute("SELECT agent, generation, data_version FROM clawmem_agents WHERE agent = ANY(%s)",
                                ([agent for agent, _ in tokens],)).fetchall()
            now = {r[0]: (int(r[1]), int(r[2])) for r in rows}
            same = all(now.get(agent) == token for (agent, _), token in tokens.items())
        if not same:  # for good: this block's reads can no longer be made to agree
            self.interrupted = True
            raise ReadInterrupted("the connection to PostgreSQL was lost during a search, and the index changed")
        self._verify = None
        for key, token in tokens.items():
            self.memo[key] = {"token": token}
        self.read = set(tokens)


class PostgresBackend(StoreBackend):
    """One agent's index in a PostgreSQL database shared with other agents.

    Backends for the same URL share one connection pool per process.
    """

    _pools: dict[str, "ConnectionPool"] = {}
    _pools_lock = threading.Lock()

    def __init__(
        self,
        url: str,
        agent_id: str,
        *,
        fts_tokenizer: str = "cjk",
        exact_below: int = EXACT_BELOW,
        hnsw_ef_search: int = HNSW_EF_SEARCH,
        hnsw_iterative_scan: str = HNSW_ITERATIVE_SCAN,
        hnsw_visit_cost: float = HNSW_VISIT_COST,
        hnsw_build_memory: str = HNSW_BUILD_MEMORY,
        pool_size: int = 4,
    ) -> None:
        if hnsw_iterative_scan not in _ITERATIVE_SCANS:
            raise ConfigError(f"hnsw_iterative_scan must be one of {', '.join(_ITERATIVE_SCANS)}, got {hnsw_iterative_scan!r}")
        self.hnsw_build_memory_kb = memory_kb(hnsw_build_memory, "hnsw_build_memory")
        if any("\ud800" <= c <= "\udfff" for c in url):  # refused before any driver echoes it
            raise ConfigError("store.url is not valid UTF-8 (it holds an undecodable byte)")
        self._url = url
        self._passwords = _passwords_of(url)
        self.agent_id = check_agent_id(agent_id, plain=False)
        self.location = f"{redact_url(url)} (agent {agent_id})"
        self.exact_below = exact_below
        self.hnsw_ef_search = max(1, min(int(hnsw_ef_search), 1000))
        self.hnsw_iterative_scan = hnsw_iterative_scan
        self.hnsw_visit_cost = max(0.0, float(hnsw_visit_cost))  # 0: HNSW whatever the agent's share
        self.terms = _Terms(fts_tokenizer)
        self._pool_size = pool_size
        self._lock_conn: psycopg.Connection | None = None
        self._lock_depth = 0
        self._lock_guard = threading.RLock()
        self._schema_ready = False
        #: dims -> when the last automatic HNSW build failed (monotonic seconds)
        self._hnsw_failed: dict[int, float] = {}

    def __repr__(self) -> str:
        return f"PostgresBackend({self.location!r})"

    @classmethod
    def close_pools(cls, url: str | None = None) -> None:
        """Close this process's connection pools (of ``url`` only, when given)."""
        with cls._pools_lock:
            for key in [k for k in cls._pools if url is None or k == url]:
                with contextlib.suppress(Exception):
                    cls._pools.pop(key).close(timeout=5)

    # -- connections ------------------------------------------------------------------------------

    def clean(self, text: str) -> str:
        """``text`` without the password (error messages of the driver)."""
        for pw in (*self._passwords, os.environ.get("PGPASSWORD")):
            if pw:
                text = text.replace(pw, "***")
        return text

    def error(self, what: str, exc: BaseException) -> StoreError:
        """A :class:`StoreError` for the driver's ``exc``; ``exc`` and the errors chained to it
        (still reachable as ``__context__``) are cleaned of the password too."""
        seen: set[int] = set()
        e: BaseException | None = exc
        while e is not None and id(e) not in seen:
            seen.add(id(e))
            with contextlib.suppress(Exception):
                e.args = tuple(self.clean(a) if isinstance(a, str) else a for a in e.args)
            e = e.__cause__ or e.__context__
        return StoreError(self.clean(f"{what} ({redact_url(self._url)}): {exc}".strip()))

    @property
    def pool(self) -> "ConnectionPool":
        with self._pools_lock:
            pool = self._pools.get(self._url)
            if pool is None or pool.closed:
                try:
                    from psycopg_pool import ConnectionPool
                except ImportError:
                    raise MissingDependencyError(
                        'the PostgreSQL store needs psycopg and psycopg-pool: pip install "clawmem-py[postgres]"'
                    ) from None
                import psycopg

                try:  # fails at once when the server cannot be reached (the pool would retry)
                    psycopg.connect(self._url, connect_timeout=10).close()
                except psycopg.Error as exc:
                    raise self.error("cannot connect to PostgreSQL", exc) from None
                pool = ConnectionPool(
                    self._url,
                    min_size=1,
                    max_size=self._pool_size,
                    kwargs={"autocommit": True},
                    check=_check_connection,
                    open=False,
                    name="clawmem",
                )
                try:
                    pool.open(wait=True, timeout=15)
                except Exception as exc:
                    with contextlib.suppress(Exception):
                        pool.close(timeout=0)
                    raise self.error("cannot connect to PostgreSQL", exc) from None
                if not self._pools:
                    import atexit

                    atexit.register(PostgresBackend.close_pools)
                self._pools[self._url] = pool
            return pool

    @contextlib.contextmanager
    def connection(self) -> Iterator["psycopg.Connection"]:
        """A pooled connection (autocommit), or one for this thread's open writing block
        (:meth:`writing`); driver errors come out as :class:`StoreError` without the password."""
        import psycopg

        block = _writing_block(self._url)
        try:
            if block is not None:
                with self._block_connection(block) as conn:
                    yield conn
                return
            pool = self.pool
            conn = self.checkout(lambda timeout: pool.getconn(timeout=timeout))
            try:
                with conn:  # (a pooled connection's block: commit or roll back, never closed)
                    yield conn
            finally:
                pool.putconn(conn)
        except psycopg.Error as exc:
            raise self.error("PostgreSQL error", exc) from None
        except Exception as exc:
            from psycopg_pool import PoolTimeout

            if isinstance(exc, PoolTimeout):
                raise self.error("no PostgreSQL connection available", exc) from None
            raise

    #: URLs whose server was last found unreachable (by this process), and when.
    _down: dict[str, float] = {}

    def checkout(self, take: Callable[[float], "psycopg.Connection"]) -> "psycopg.Connection":
        """``take(timeout)`` (a connection from the pool) waiting at most until the deadline in
        force (:func:`~clawmem_core.store.base.store_deadline`), then as long as the server
        answers a connection of its own, up to :data:`_CHECKOUT_SECONDS` in all. Raises
        :class:`StoreUnreachableError` when it does not (at once while the server is known to be
        down: no wait at all), ``PoolTimeout`` when the pool stayed busy."""
        from psycopg_pool import PoolTimeout

        if self._url in self._down:
            self._probe(0.0)  # raises while it is still down
        first = wait_left(_CHECKOUT_SECONDS)
        try:
            return take(first)
        except PoolTimeout:
            if first >= _CHECKOUT_SECONDS:
                raise
        self._probe(first)
        return take(_CHECKOUT_SECONDS - first)

    def _probe(self, waited: float) -> None:
        """Raise :class:`StoreUnreachableError` when a new connection to the server fails (and
        remember it is down); forget that it was down when it succeeds."""
        import psycopg

        try:
            psycopg.connect(self._url, connect_timeout=_PROBE_SECONDS).close()
        except psycopg.Error as exc:
            self._down[self._url] = time.monotonic()
            reason = self.error("PostgreSQL cannot be reached", exc)
            raise StoreUnreachableError(f"{reason} (the store is unreachable: memory is unavailable until it "
                                        "answers again)", waited=waited) from None
        self._down.pop(self._url, None)

    def _unchecked(self) -> "psycopg.Connection":
        """A connection from the pool without the pool's check (a round trip, as long as a
        statement under load)."""
        pool = self.pool

        def take(timeout: float) -> "psycopg.Connection":
            _UNCHECKED.on = True
            try:
                return pool.getconn(timeout=timeout)
            finally:
                _UNCHECKED.on = False

        return self.checkout(take)

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """A block of this thread's statements (the vector phase), each on a connection taken from
        the pool without the pool's check and handed back after it: a thread never holds one while
        it does something else (embeds), so a pool of one connection serves the block and other
        threads' searches alike. A connection lost while idle is seen by its socket and replaced;
        one lost under a statement fails it (the vector phase's calls then run once more). Nested
        blocks share the outermost one. Inside this thread's block of reads (a search that syncs
        an edit and its vectors), the reads' connection goes back first, and the reads run on the
        block's connections until it ends; never inside a snapshot (a read-only transaction)."""
        blocks = _WRITING.__dict__.setdefault("by_url", {})
        block = blocks.get(self._url)
        if block is not None:
            block.depth += 1
            try:
                yield
            finally:
                block.depth -= 1
            return
        readers = getattr(_READING, "by_url", {}).get(self._url, [])
        if any(r.snapshot for r in readers):
            raise RuntimeError("no writing block inside a snapshot: its reads are one read-only transaction")
        for r in readers:  # a block of reads outside a snapshot holds no transaction: nothing is lost
            r.release()
        blocks[self._url] = _Writing()
        try:
            yield
        finally:
            del blocks[self._url]

    @contextlib.contextmanager
    def _block_connection(self, block: _Writing) -> Iterator["psycopg.Connection"]:
        """A connection for one statement (with the statements nested in it) of a writing block,
        handed back after it. One lost while idle in the pool (the server closed it: its socket has
        something to read while no statement runs) is replaced; asking the server is left to the
        rare case where the socket says so."""
        import psycopg

        if block.uses:
            block.uses += 1
            try:
                yield block.conn  # type: ignore[misc]
            finally:
                block.uses -= 1
            return
        conn = self._unchecked()
        try:
            conn = self._alive(conn)
            block.conn, block.uses = conn, 1
            try:
                yield conn
            except psycopg.Error:
                block.lost = conn.closed or conn.broken
                raise
        finally:
            block.conn, block.uses = None, 0
            self.pool.putconn(conn)

    def _alive(self, conn: "psycopg.Connection") -> "psycopg.Connection":
        """``conn``, or a new connection in its place when the server closed it while idle."""
        import select

        try:
            idle_news = not conn.closed and bool(select.select([conn.fileno()], [], [], 0)[0])
        except (OSError, ValueError):
            idle_news = True
        if not (conn.closed or conn.broken or idle_news):
            return conn
        from psycopg_pool import ConnectionPool

        try:
            if conn.closed or conn.broken:
                raise ConnectionError
            ConnectionPool.check_connection(conn)  # a notice, or the end of the connection
            return conn
        except Exception:
            log.debug("a pooled connection was lost while idle: taking a new one")
            with contextlib.suppress(Exception):
                conn.close()
            self.pool.putconn(conn)
            pool = self.pool  # checked: the others may be gone too (a restart)
            return self.checkout(lambda timeout: pool.getconn(timeout=timeout))

    def _reading(self) -> _Reading | None:
        """This thread's innermost open reading block on this database."""
        blocks = getattr(_READING, "by_url", {}).get(self._url)
        return blocks[-1] if blocks else None

    @contextlib.contextmanager
    def reading(self, snapshot: bool = False) -> Iterator[None]:
        """A block of this thread's reads on one connection (see :meth:`Store.reading`); blocks
        of the same kind nest into the outermost one, for every agent of this database. Inside
        this thread's writing block, the reads run on the writing block's connections (and a
        snapshot, which would need a second connection, is refused)."""
        if snapshot and _writing_block(self._url) is not None:
            raise RuntimeError("no snapshot inside a writing block: it would hold a second connection")
        blocks = _READING.__dict__.setdefault("by_url", {}).setdefault(self._url, [])
        if blocks and blocks[-1].snapshot == snapshot:
            blocks[-1].depth += 1
            try:
                yield
            finally:
                blocks[-1].depth -= 1
            return
        block = _Reading(self, snapshot)
        blocks.append(block)
        try:
            yield
        finally:
            blocks.remove(block)
            block.release()

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
                if version is not None:
                    # an agent indexed under version 2 (or a version 3 upgraded from it) may
                    # hold vectors out of line: each is moved into its rows at the agent's next sync
                    conn.execute("UPDATE clawmem_agents SET vectors_inline = false")
                    upgraded = version
                    log.info("upgraded the clawmem schema of %s from version %s to %s", redact_url(self._url),
                             version, SCHEMA_VERSION)
                conn.execute("DELETE FROM clawmem_schema")
                conn.execute("INSERT INTO clawmem_schema VALUES (%s)", (SCHEMA_VERSION,))
        self._schema_ready = True
        return upgraded

    # -- StoreBackend -----------------------------------------------------------------------------

    def open(self) -> "PostgresStore":
        self.ensure_schema()
        return PostgresStore(self, self.agent_id)

    def open_namespace(self, agent_id: str) -> "PostgresStore":
        """A handle on another agent's index in the same database (for shared namespaces and
        replicas): read, never created (a database without clawmem's tables is not given them)."""
        check_agent_id(agent_id, "a shared namespace (an agent id)", plain=False)
        if not self._schema_ready:
            with self.connection() as conn:
                version = self._schema_version(conn)
            if version is None:
                raise MissingIndexError(f"{redact_url(self._url)} holds no clawmem index")
        self.ensure_schema()  # refuses a newer schema version
        return PostgresStore(self, agent_id, create=False)

    @contextlib.contextmanager
    def process_lock(self, blocking: bool = True) -> Iterator[None]:
        """A session advisory lock on the agent, held on a dedicated connection: released by the
        server if this process dies or loses the connection."""
        import psycopg

        with self._lock_guard:
            if self._lock_depth:  # re-entered in this process (the sync lock is held already)
                self._lock_depth += 1
                try:
                    yield
                finally:
                    self._lock_depth -= 1
                return
            key = self._lock_key()
            try:
                conn = psycopg.connect(self._url, autocommit=True)
            except psycopg.Error as exc:
                raise self.error("cannot connect to PostgreSQL", exc) from None
            try:
                if blocking:
                    conn.execute("SET lock_timeout = '600s'")
                    conn.execute("SELECT pg_advisory_lock(%s)", (key,))
                elif not conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]:  # type: ignore[index]
                    raise StoreBusyError(f"another process is syncing agent {self.agent_id!r}")
            except psycopg.Error as exc:
                conn.close()
                if isinstance(exc, psycopg.errors.LockNotAvailable):
                    raise StoreBusyError(f"another process is syncing agent {self.agent_id!r}") from None
                raise self.error("cannot take the sync lock", exc) from None
            except BaseException:
                conn.close()
                raise
            self._lock_conn, self._lock_depth = conn, 1
            try:
                yield
            finally:
                self._lock_conn, self._lock_depth = None, 0
                with contextlib.suppress(psycopg.Error):
                    conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
                conn.close()

    @contextlib.contextmanager
    def vector_lock(self, timeout: float | None = 0.0) -> Iterator[None]:
        """A session advisory lock on the agent's vector phase (another key than the sync lock's),
        held on a dedicated connection: released by the server if this process dies."""
        import psycopg

        key = self._lock_key("clawmem-vectors")
        busy = f"another process is embedding the vectors of agent {self.agent_id!r}"
        try:
            conn = psycopg.connect(self._url, autocommit=True)
        except psycopg.Error as exc:
            raise self.error("cannot connect to PostgreSQL", exc) from None
        try:
            if timeout is not None and timeout <= 0:
                if not conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]:  # type: ignore[index]
                    raise StoreBusyError(busy)
            else:
                conn.execute(f"SET lock_timeout = {0 if timeout is None else max(1, int(timeout * 1000))}")
                conn.execute("SELECT pg_advisory_lock(%s)", (key,))
        except psycopg.Error as exc:
            conn.close()
            if isinstance(exc, psycopg.errors.LockNotAvailable):
                raise StoreBusyError(busy) from None
            raise self.error("cannot take the vector phase's lock", exc) from None
        except BaseException:
            conn.close()
            raise
        try:
            yield
        finally:
            with contextlib.suppress(psycopg.Error):
                conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
            conn.close()

    def check_lock(self) -> None:
        """Raise when the connection holding the sync lock was lost (another process may hold the
        lock now): the sync stops before writing more."""
        conn = self._lock_conn
        if conn is None:
            return
        import psycopg

        try:
            conn.execute("SELECT 1")
        except psycopg.Error as exc:
            raise self.error("lost the connection holding the sync lock", exc) from None

    def _lock_key(self, kind: str = "clawmem") -> int:
        import hashlib

        digest = hashlib.sha256(f"{kind}:{self.agent_id}".encode()).digest()
        return int.from_bytes(digest[:8], "big", signed=True)

    def build_hnsw(self, dims: int) -> bool:
        """Build the HNSW index over ``dims``-dimensional vectors (one for all agents), without
        blocking writers, on a connection of its own whose ``maintenance_work_mem`` is raised to
        ``hnsw_build_memory`` (never lowered): the setting ends with that connection. One process
        builds at a time (an advisory lock); an invalid index left by a build that died is dropped
        and built again. A build that fails is logged, not raised (the rows are written and
        searches stay exact) and tried again after a while. Returns whether the index is there."""
        import psycopg

        if hnsw_type(dims) is None:
            return False
        failed = self._hnsw_failed.get(dims)
        if failed is not None and time.monotonic() - failed < _HNSW_RETRY_SECONDS:
            return False
        import hashlib

        key = int.from_bytes(hashlib.sha256(f"clawmem:hnsw:{int(dims)}".encode()).digest()[:8], "big", signed=True)
        try:
            conn = psycopg.connect(self._url, autocommit=True, connect_timeout=10)
        except psycopg.Error as exc:
            self._build_failed(dims, exc)
            return False
        # pgvector's notices (a graph that no longer fits in memory, ...) go to the log
        conn.add_notice_handler(lambda diag: log.info("PostgreSQL: %s", diag.message_primary))
        try:
            if not conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]:  # type: ignore[index]
                return False  # another process is building it
            if hnsw_index(conn, dims) is not None:
                return True
            _drop_invalid_hnsw(conn, dims)
            server_kb = int(conn.execute(
                "SELECT pg_size_bytes(current_setting('maintenance_work_mem')) / 1024").fetchone()[0])  # type: ignore[index]
            if self.hnsw_build_memory_kb > server_kb:
                conn.execute("SELECT set_config('maintenance_work_mem', %s, false)", (f"{self.hnsw_build_memory_kb}kB",))
            try:
                build_hnsw(conn, dims)
            except psycopg.Error as exc:
                if not (exc.sqlstate or "").startswith("53"):
                    raise
                # out of memory or of shared memory (a parallel build takes all of
                # maintenance_work_mem as shared memory, more than a container's /dev/shm may
                # hold): once more without parallel workers, which take only what they use
                log.warning("HNSW index build for %d-d vectors ran out of resources (%s); building it "
                            "again without parallel workers", dims, self.clean(str(exc)).strip())
                _drop_invalid_hnsw(conn, dims)
                conn.execute("SET max_parallel_maintenance_workers = 0")
                build_hnsw(conn, dims)
            self._hnsw_failed.pop(dims, None)
            return hnsw_index(conn, dims) is not None
        except psycopg.Error as exc:
            self._build_failed(dims, exc)
            return False
        finally:
            conn.close()

    def _build_failed(self, dims: int, exc: BaseException) -> None:
        self._hnsw_failed[dims] = time.monotonic()
        log.warning("could not build the HNSW index for %d-d vectors (searches stay exact; tried again in %d "
                    "minutes): %s", dims, _HNSW_RETRY_SECONDS // 60, self.error("PostgreSQL error", exc))

    def set_aside(self, exc: BaseException) -> str:
        """Nothing to move: the server keeps its data consistent. The agent's rows are dropped
        so that the next sync rebuilds them, and its data version moves, so that every process
        holding the agent's index (caches, a trusted change journal) sees the rows go."""
        with self.connection() as conn, conn.transaction():
            for table in ("clawmem_chunks", "clawmem_files", "clawmem_meta"):
                conn.execute(f"DELETE FROM {table} WHERE agent = %s", (self.agent_id,))
            conn.execute("UPDATE clawmem_agents SET data_version = data_version + 1 WHERE agent = %s", (self.agent_id,))
        return "nowhere (its rows were dropped)"


class PostgresStore(Store):
    """An open handle on one agent's index (``generation`` set: a generation being built)."""

    vector_extension = True
    fts_available = True

    def __init__(self, backend: PostgresBackend, agent: str, *, generation: int | None = None, create: bool = True) -> None:
        self.backend = backend
        self.agent = agent
        self._gen = generation
        self._closed = False
        #: The data versions this handle's own write transactions committed (ascending; the
        #: latest :data:`_OWN_KEPT` at most) and how many older ones were folded into a count (each
        #: at or below ``_own_floor``); held (``_own_gate``) from before a commit of this handle
        #: goes out until it is recorded (see :meth:`others_version`).
        self._own: list[int] = []
        self._own_folded = 0
        self._own_floor = -1
        self._own_gate = threading.RLock()
        self._cache_token: Any = None
        self._stats: tuple[int, float] = (0, 1.0)
        self._vec_count: dict[int, int] = {}
        self._index_size: dict[int, float] = {}
        self._vec_token: Any = None
        #: ((generation, data version), keyword rows) as last counted
        self._total: tuple[tuple[int, int], int] | None = None
        #: ((generation, data version), vector counts) as last read
        self._last_counts: tuple[Any, VectorCounts] | None = None
        #: dims -> the type of the valid HNSW index over them ("halfvec" or "vector")
        self._hnsw: dict[int, str] = {}
        #: dims -> at least how many vectors of those dimensions the agent has (counted, plus
        #: those written since): when below ``exact_below``, no HNSW index is due yet
        self._vec_bound: dict[int, int] = {}
        self.vector_path = None
        if create:
            with self.backend.connection() as conn:
                conn.execute(
                    "INSERT INTO clawmem_agents (agent, generation) VALUES (%s, nextval('clawmem_generation_seq')) "
                    "ON CONFLICT (agent) DO NOTHING",
                    (agent,),
                )
        self.refresh()

    def __repr__(self) -> str:
        return f"PostgresStore({self.backend.location!r}, agent={self.agent!r})"

    @property  # type: ignore[override]
    def max_path_bytes(self) -> int:
        """The longest path a file of this agent can be keyed by (a btree entry holds the agent
        id and the path uncompressed within :data:`_BTREE_MAX_ITEM` bytes)."""
        return _BTREE_MAX_ITEM - _KEY_OVERHEAD - len(self.agent.encode("utf-8"))

    @property
    def vector_backend(self) -> str:
        return "pgvector"

    # -- plumbing ---------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _conn(self, read: bool = False) -> Iterator["psycopg.Connection"]:
        """A connection: this thread's reading block's when one is open (a search holds one
        connection at a time, so concurrent searches never wait on each other for a second), except
        for statements that are not all reads (``read`` false) inside a snapshot; else a pooled one."""
        if self._closed:
            raise StoreError(f"index {self.backend.location} is closed")
        block = self.backend._reading()
        if block is not None and block.snapshot and not read:
            raise RuntimeError("no writes inside a snapshot: its connection is in a read-only transaction")
        if block is None or block.interrupted or _writing_block(self.backend._url) is not None:
            with self.backend.connection() as conn:
                yield conn
            return
        import psycopg

        try:
            yield block.connection()
        except psycopg.Error as exc:
            block.release(discard=True)
            block.forget()
            raise self.backend.error("PostgreSQL error", exc) from None
        if block.snapshot:
            block.read.add((self.agent, self._gen))

    def reading(self, snapshot: bool = False) -> ContextManager[None]:
        return self.backend.reading(snapshot)

    def _read(self, fn: Callable[["psycopg.Connection", dict[str, Any] | None], _T]) -> _T:
        """``fn(conn, memo)``: a read, on this thread's reading block's connection when one is
        open (``memo``: what its snapshot answered for this agent so far, else ``None``), or on a
        pooled connection. A block's connection is not checked before use: a read that finds it
        lost runs again on a new one (within a snapshot, only if nothing read so far changed)."""
        if self._closed:
            raise StoreError(f"index {self.backend.location} is closed")
        block = self.backend._reading()
        if block is None or _writing_block(self.backend._url) is not None:
            with self.backend.connection() as conn:
                return fn(conn, None)
        import psycopg

        if block.interrupted:
            raise ReadInterrupted("the connection to PostgreSQL was lost during a search, and the index changed")
        key = (self.agent, self._gen)
        for attempt in range(2):
            try:
                conn = block.connection()
                memo = block.memo.setdefault(key, {}) if self._gen is None else None
                if memo is not None and not block.snapshot and memo.get("writes") != _WRITES[0]:
                    # outside a snapshot, answers are reused until this process writes (a read
                    # moments earlier: another process's write may land before or after it alike)
                    memo.clear()
                    memo["writes"] = _WRITES[0]
                out = fn(conn, memo)
            except psycopg.Error as exc:
                # gone (killed, server restarted: AdminShutdown is seen before the connection's
                # state says so) or another operational failure: once more, on a checked connection
                lost = block.lost() or isinstance(exc, psycopg.OperationalError)
                block.release(discard=True)
                block.forget()
                if not lost or attempt:
                    raise self.backend.error("PostgreSQL error", exc) from None
                log.debug("the connection of a search was lost: %s", self.backend.clean(str(exc)))
                continue
            if block.snapshot:
                block.read.add(key)
            return out
        raise AssertionError("unreachable")

    def _in_snapshot(self) -> bool:
        block = self.backend._reading()
        return block is not None and block.snapshot

    _TOKEN = "SELECT generation, data_version FROM clawmem_agents WHERE agent = %s"

    def _token(self, conn: "psycopg.Connection", memo: dict[str, Any] | None) -> tuple[int, int] | None:
        """The agent's (live generation, data version): the snapshot's, or read now."""
        if memo is not None and "token" in memo:
            return memo["token"]  # type: ignore[no-any-return]
        row = conn.execute(self._TOKEN, (self.agent,)).fetchone()
        token = (int(row[0]), int(row[1])) if row else None
        if memo is not None:
            memo["token"] = token
        return token

    @staticmethod
    def _remember(memo: dict[str, Any] | None, rows: Iterable[Sequence[Any]]) -> None:
        """Keep ``(id, path, source, start_line, end_line, pending)`` of chunks read in a snapshot."""
        if memo is None:
            return
        meta, pending = memo.setdefault("meta", {}), memo.setdefault("pending", set())
        for cid, path, source, start, end, pend in rows:
            if cid is None:
                continue
            meta[cid] = (path, source, start, end)
            if pend:
                pending.add(cid)

    def writing(self) -> ContextManager[None]:
        return self.backend.writing()

    @contextlib.contextmanager
    def _tx(self) -> Iterator["psycopg.Connection"]:
        """A write transaction: holds the agent's row lock and bumps its data version."""
        with self._write() as (conn, _):
            yield conn

    @contextlib.contextmanager
    def _write(self, read_generation: bool = True) -> Iterator[tuple["psycopg.Connection", Any]]:
        """A write transaction (see :meth:`_tx`) and the generation it writes (the live one,
        read under the agent's row lock, or the one being built); without ``read_generation``,
        the live one is a SQL expression over the agent (a ``%s`` parameter) and nothing waits
        for the server before the block's own statements. Pipelined: statements whose results
        are not read go with the next one that is, the ``COMMIT`` with the last."""
        self.backend.check_lock()
        _WRITES[0] += 1
        try:
            with self._write_tx(read_generation) as out:
                yield out
        finally:
            _WRITES[0] += 1

    @contextlib.contextmanager
    def _write_tx(self, read_generation: bool) -> Iterator[tuple["psycopg.Connection", Any]]:
        row: Sequence[Any] | None = None
        gate = self._own_gate
        gated = False
        try:
            with self._conn() as conn, conn.pipeline(), conn.transaction():
                cur = conn.execute(
                    "UPDATE clawmem_agents SET data_version = data_version + 1 WHERE agent = %s "
                    "RETURNING generation, data_version",
                    (self.agent,),
                )
                if self._gen is not None:
                    yield conn, self._gen
                elif not read_generation:
                    yield conn, "(SELECT generation FROM clawmem_agents WHERE agent = %s)"
                else:
                    row = cur.fetchone()
                    yield conn, int(row[0]) if row else -1  # an agent nobody has indexed: no rows
                gate.acquire()  # the COMMIT goes out as the blocks end
                gated = True
            # committed (a commit whose outcome is unknown raised above: never counted as ours)
            if row is None:
                row = cur.fetchone()
            if row is not None:
                self._own_commit(int(row[1]))
        finally:
            if gated:
                gate.release()

    def _own_commit(self, version: int) -> None:
        """Record that this handle's transaction committed the agent's data ``version``."""
        with self._own_gate:
            if version <= self._own_floor:
                self._own_folded += 1
                return
            bisect.insort(self._own, version)
            if len(self._own) > _OWN_KEPT:
                fold = len(self._own) - _OWN_KEPT // 2
                self._own_floor = self._own[fold - 1]
                self._own_folded += fold
                del self._own[:fold]

    def others_version(self) -> Any:
        """A token of the commits to the agent's index by every connection but this handle's own
        write transactions (other processes, other handles of this process): the data version
        (bumped by one by every write transaction, under the agent's row lock) less the versions
        this handle committed. Only a commit known to have succeeded counts as this handle's (one
        rolled back, or whose outcome is unknown, counts as another's: a walk more, never one
        less). A version read while this handle's commit is on its way is counted once that
        commit is recorded: the count waits for it (a round trip at most)."""
        token = self._read(self._token)
        if token is None:
            return (self._gen, None)
        gen, version = token
        with self._own_gate:
            if version < self._own_floor:  # read before the versions still kept (a stale read)
                return (self._gen, gen, version, None)
            return (self._gen, gen, version - self._own_folded - bisect.bisect_right(self._own, version))

    def _generation(self, conn: "psycopg.Connection") -> int:
        if self._gen is not None:
            return self._gen
        row = conn.execute("SELECT generation FROM clawmem_agents WHERE agent = %s", (self.agent,)).fetchone()
        if row is None:
            return -1  # an agent nobody has indexed: no rows
        return int(row[0])

    #: The live generation of the agent, as a SQL expression over the ``%(agent)s`` parameter.
    _LIVE = "(SELECT generation FROM clawmem_agents WHERE agent = %(agent)s)"

    def _g(self) -> str:
        return str(int(self._gen)) if self._gen is not None else self._LIVE

    # -- identity and bookkeeping -----------------------------------------------------------------

    def _get(self, key: str) -> str | None:
        with self._conn(read=True) as conn:
            row = conn.execute(
                f"SELECT value FROM clawmem_meta WHERE agent = %(agent)s AND generation = {self._g()} AND key = %(key)s",
                {"agent": self.agent, "key": key},
            ).fetchone()
        return row[0] if row else None

    def _set(self, key: str, value: str) -> None:
        with self._tx() as conn:
            conn.execute(
                f"INSERT INTO clawmem_meta (agent, generation, key, value) VALUES (%(agent)s, {self._g()}, %(key)s, "
                f"%(value)s) ON CONFLICT (agent, generation, key) DO UPDATE SET value = excluded.value",
                {"agent": self.agent, "key": key, "value": value},
            )

    def get_meta(self) -> dict[str, Any] | None:
        raw = self._get(META_KEY)
        if raw is None:
            return None
        try:
            value = json.loads(raw)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    def set_meta(self, meta: dict[str, Any]) -> None:
        self._set(META_KEY, json.dumps(meta, sort_keys=True))

    def get_value(self, key: str) -> str | None:
        return self._get(f"value:{key}")

    def set_value(self, key: str, value: str) -> None:
        self._set(f"value:{key}", value)

    def data_version(self) -> Any:
        return (self._gen, self._read(self._token))

    def refresh(self) -> None:
        dims = self._get("vector_dims")
        self.vector_dims = int(dims) if dims else None

    # -- files and chunks -------------------------------------------------------------------------

    def file_hashes(self, source: str) -> dict[str, str]:
        return {path: state[1] for path, state in self.file_states(source).items()}

    def file_states(self, source: str) -> dict[str, FileState]:
        with self._conn(read=True) as conn:
            rows = conn.execute(
                f"SELECT path, hash, size, mtime, ctime, ino FROM clawmem_files WHERE agent = %(agent)s "
                f"AND generation = {self._g()} AND source = %(source)s",
                {"agent": self.agent, "source": source},
            ).fetchall()
        return {r[0]: (r[0], r[1], int(r[2]), int(r[3]), int(r[4]), int(r[5])) for r in rows}

    def file_text(self, source: str, path: str) -> tuple[str, int] | None:
        """The text of an indexed file as last indexed, and its mtime (ms); ``None`` if not indexed."""
        with self._conn(read=True) as conn:
            row = conn.execute(
                f"SELECT content, mtime FROM clawmem_files WHERE agent = %(agent)s AND generation = {self._g()} "
                f"AND source = %(source)s AND path = %(path)s",
                {"agent": self.agent, "source": source, "path": path},
            ).fetchone()
        if row is None or row[0] is None:
            return None
        return row[0], int(row[1])

    def file_paths(self, source: str = "memory") -> list[str]:
        """Paths of the indexed files of ``source``."""
        return sorted(self.file_states(source))

    def _delete(self, conn: "psycopg.Connection", gen: int, source: str, paths: list[str]) -> None:
        conn.execute(
            "DELETE FROM clawmem_chunks WHERE agent = %s AND generation = %s AND source = %s AND path = ANY(%s)",
            (self.agent, gen, source, paths),
        )

    def _chunk_values(self, c: ChunkRow, gen: int, now: int) -> tuple[Any, ...]:
        terms: str | None = None
        doc_len = 0
        text = _pg_text(c.text)
        if not c.window:
            counts, doc_len = self.backend.terms.counts(text)
            terms = _tsvector(counts)
        emb = list(c.embedding) if c.embedding else None
        return (self.agent, gen, c.id, c.path, c.source, c.start_line, c.end_line, c.hash, c.model, text,
                int(c.window), terms, doc_len, len(emb) if emb else None, _vec(emb) if emb else None, now,
                int(c.pending))

    def replace_files(self, items: list[tuple[FileRow, list[ChunkRow]]]) -> None:
        now = _now_ms()
        dims = next((len(c.embedding) for _, chunks in items for c in chunks if c.embedding), None)
        by_source: dict[str, list[str]] = {}
        for file, _ in items:
            by_source.setdefault(file.source, []).append(file.path)
        rows = []
        seen: set[str] = set()
        with self._write() as (conn, gen):
            for _, chunks in items:
                for c in chunks:
                    if c.id not in seen:  # identical pieces of one chunk: one row
                        seen.add(c.id)
                        rows.append(self._chunk_values(c, gen, now))
            for source, paths in by_source.items():
                self._delete(conn, gen, source, paths)
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO clawmem_files (agent, generation, source, path, hash, mtime, size, content, ctime, ino) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (agent, generation, source, path) "
                    "DO UPDATE SET hash = excluded.hash, mtime = excluded.mtime, size = excluded.size, "
                    "content = excluded.content, ctime = excluded.ctime, ino = excluded.ino",
                    [(self.agent, gen, f.source, f.path, f.hash, f.mtime, f.size, f.text if f.text is None else _pg_text(f.text),
                      f.ctime, f.ino) for f, _ in items],
                )
                if rows:
                    cur.executemany(
                        "INSERT INTO clawmem_chunks (agent, generation, id, path, source, start_line, end_line, hash, "
                        "model, text, part, terms, doc_len, dims, embedding, updated_at, pending) VALUES "
                        "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s::tsvector, %s, "
                        "%s, %s::vector, %s, %s)",
                        rows,
                    )
            if dims and dims != self.vector_dims:
                conn.execute(
                    "INSERT INTO clawmem_meta (agent, generation, key, value) VALUES (%s, %s, 'vector_dims', %s) "
                    "ON CONFLICT (agent, generation, key) DO UPDATE SET value = excluded.value",
                    (self.agent, gen, str(dims)),
                )
        if dims:
            self.vector_dims = dims
            self._maybe_build_hnsw(dims, sum(1 for r in rows if r[14] is not None))

    def touch_files(self, files: Sequence[FileRow]) -> None:
        with self._write() as (conn, gen):
            with conn.cursor() as cur:
                cur.executemany(
                    "UPDATE clawmem_files SET mtime = %s, size = %s, ctime = %s, ino = %s WHERE agent = %s "
                    "AND generation = %s AND source = %s AND path = %s",
                    [(f.mtime, f.size, f.ctime, f.ino, self.agent, gen, f.source, f.path) for f in files],
                )

    def delete_files(self, source: str, paths: Iterable[str]) -> None:
        paths = list(paths)
        with self._write() as (conn, gen):
            self._delete(conn, gen, source, paths)
            conn.execute(
                "DELETE FROM clawmem_files WHERE agent = %s AND generation = %s AND source = %s AND path = ANY(%s)",
                (self.agent, gen, source, paths),
            )

    # -- vectors after keywords --------------------------------------------------------------------

    @_again_if_lost
    def pending_chunks(self, limit: int, after: int = 0, paths: Sequence[str] | None = None) -> list[tuple[int, ChunkRow]]:
        if paths is not None and not paths:
            return []
        where = "" if paths is None else " AND path = ANY(%(paths)s)"
        with self._conn(read=True) as conn:
            rows = conn.execute(
                f"SELECT rid, id, path, source, start_line, end_line, hash, model, text FROM clawmem_chunks "
                f"WHERE agent = %(agent)s AND generation = {self._g()} AND pending = 1 AND rid > %(after)s{where} "
                f"ORDER BY rid LIMIT %(limit)s",
                {"agent": self.agent, "after": int(after), "limit": int(limit),
                 "paths": list(paths)[:500] if paths is not None else None},
            ).fetchall()
        return [(int(r[0]), ChunkRow(*r[1:], pending=True)) for r in rows]

    @_again_if_lost
    def set_vectors(self, items: Sequence[tuple[str, Sequence[float] | None, list[ChunkRow]]]) -> int:
        now = _now_ms()
        dims = next((len(v) for _, v, _ in items if v), None) or next(
            (len(w.embedding) for _, _, ws in items for w in ws if w.embedding), None
        )
        first: dict[str, tuple[Sequence[float] | None, list[ChunkRow]]] = {}
        for cid, vec, windows in items:
            first.setdefault(cid, (vec, windows))
        if not first:
            return 0
        with self._write(read_generation=False) as (conn, gen):
            # One statement a chunk, by its unique key, sent together: a single join against the
            # batch may be planned as a scan of every pending row of the agent (statistics lag
            # behind a keyword phase that just wrote them). A chunk no longer pending (replaced
            # or deleted since it was read) is not updated and returns nothing. Without window
            # rows to add, nothing is read before the COMMIT: one round trip in all.
            live = isinstance(gen, str)
            cur = conn.cursor()
            cur.executemany(
                "UPDATE clawmem_chunks SET embedding = %s::vector, dims = %s, pending = 0, updated_at = %s "
                f"WHERE agent = %s AND generation = {gen if live else '%s'} AND id = %s AND pending = 1 RETURNING id",
                [(_vec(v) if v else None, len(v) if v else None, now, self.agent, self.agent if live else gen, cid)
                 for cid, (v, _) in first.items()],
                returning=True,
            )
            rows: list[tuple[str]] | None = None
            windows: list[tuple[Any, ...]] = []
            if any(ws for _, ws in first.values()):
                rows = self._all_results(cur)
                if live:
                    gen = self._generation(conn)
                windows = [self._chunk_values(w, gen, now) for (cid,) in rows for w in first[cid][1]]
            if windows:
                with conn.cursor() as wcur:
                    wcur.executemany(
                        "INSERT INTO clawmem_chunks (agent, generation, id, path, source, start_line, end_line, "
                        "hash, model, text, part, terms, doc_len, dims, embedding, updated_at, pending) VALUES "
                        "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s::tsvector, "
                        "%s, %s, %s::vector, %s, %s) ON CONFLICT (agent, generation, id) DO NOTHING",
                        windows,
                    )
            if dims and dims != self.vector_dims:  # (nothing is written when no chunk was completed)
                conn.execute(
                    f"INSERT INTO clawmem_meta (agent, generation, key, value) SELECT %s, {gen if live else '%s'}, "
                    "'vector_dims', %s WHERE EXISTS (SELECT 1 FROM clawmem_chunks WHERE agent = %s AND updated_at = %s "
                    "AND id = ANY(%s) AND pending = 0) "
                    "ON CONFLICT (agent, generation, key) DO UPDATE SET value = excluded.value",
                    (self.agent, self.agent if live else gen, str(dims), self.agent, now, list(first)),
                )
        if rows is None:
            rows = self._all_results(cur)
        cur.close()
        done = len(rows)
        if dims and done:
            self.vector_dims = dims
            self._maybe_build_hnsw(dims, sum(1 for (cid,) in rows if first[cid][0])
                                   + sum(1 for w in windows if w[14] is not None))
        return done

    @staticmethod
    def _all_results(cur: "psycopg.Cursor[Any]") -> list[Any]:
        """The rows of every statement an ``executemany(..., returning=True)`` ran."""
        rows: list[Any] = []
        while True:
            rows.extend(cur.fetchall())
            if not cur.nextset():
                return rows

    def pending_ids(self, ids: Iterable[str]) -> set[str]:
        ids = list(dict.fromkeys(ids))
        if not ids:
            return set()

        def run(conn: "psycopg.Connection", memo: dict[str, Any] | None) -> set[str]:
            known = memo.get("meta", {}) if memo is not None else {}
            if all(i in known for i in ids):  # read with the candidates in this snapshot
                return set(ids) & memo["pending"]  # type: ignore[index]
            rows = conn.execute(
                f"SELECT id FROM clawmem_chunks WHERE agent = %(agent)s AND generation = {self._g()} "
                f"AND pending = 1 AND id = ANY(%(ids)s)",
                {"agent": self.agent, "ids": ids},
            ).fetchall()
            return {r[0] for r in rows}

        return self._read(run)

    @_again_if_lost
    def vector_counts(self) -> VectorCounts:
        if self._gen is not None:  # a generation being built
            with self._conn(read=True) as conn:
                row = conn.execute(
                    f"SELECT count(*), coalesce(sum(pending), 0), "
                    f"coalesce(sum(CASE WHEN pending = 1 THEN length(text) END), 0) FROM clawmem_chunks "
                    f"WHERE agent = %(agent)s AND generation = {self._g()} AND part = 0",
                    {"agent": self.agent},
                ).fetchone()
            total, pending, chars = (int(x) for x in row)  # type: ignore[union-attr]
            return VectorCounts(total - pending, total, chars)
        # Asked on every search: the pending rows through their partial index, and the total kept
        # per data version (read with the version, in one statement, when it changed).
        return self._read(self._vector_counts)

    def _vector_counts(self, conn: "psycopg.Connection", memo: dict[str, Any] | None) -> VectorCounts:
        if memo is not None:
            if "vectors" in memo:
                return memo["vectors"]  # type: ignore[no-any-return]
            last = self._last_counts
            if last is not None and "token" in memo and memo["token"] == last[0]:  # same version, same counts
                memo["vectors"] = last[1]
                return last[1]
        known = self._total
        row = conn.execute(
            "SELECT a.generation, a.data_version, p.n, p.chars, "
            "CASE WHEN (a.generation, a.data_version) IS DISTINCT FROM (%(g)s::bigint, %(v)s::bigint) THEN "
            "(SELECT count(*) FROM clawmem_chunks AS c WHERE c.agent = a.agent AND c.generation = a.generation "
            "AND c.part = 0) END FROM clawmem_agents AS a CROSS JOIN LATERAL (SELECT count(*) AS n, "
            "coalesce(sum(length(c.text)), 0) AS chars FROM clawmem_chunks AS c WHERE c.agent = a.agent "
            "AND c.generation = a.generation AND c.pending = 1 AND c.part = 0) AS p WHERE a.agent = %(agent)s",
            {"agent": self.agent, "g": known[0][0] if known else None, "v": known[0][1] if known else None},
        ).fetchone()
        if row is None:
            out = VectorCounts(0, 0, 0)
        else:
            if row[4] is not None or known is None:
                known = self._total = ((row[0], row[1]), int(row[4] or 0))
            total, pending = known[1], int(row[2])
            out = VectorCounts(total - pending, total, int(row[3]))
        token = (int(row[0]), int(row[1])) if row else None
        self._last_counts = (token, out)
        if memo is not None:
            memo["vectors"] = out
            memo.setdefault("token", token)
        return out

    def has_content(self) -> bool:
        def run(conn: "psycopg.Connection", memo: dict[str, Any] | None) -> bool:
            if memo is not None:  # in a search: with the counts it asks for next
                return self._vector_counts(conn, memo).total > 0
            row = conn.execute(
                f"SELECT 1 FROM clawmem_chunks WHERE agent = %(agent)s AND generation = {self._g()} LIMIT 1",
                {"agent": self.agent},
            ).fetchone()
            return row is not None

        return self._read(run)

    def get_chunk_meta(self, ids: Iterable[str]) -> dict[str, tuple[str, str, int, int]]:
        return self._chunks_by_id(ids, texts=False)

    def get_chunks(self, ids: Iterable[str]) -> dict[str, ChunkRow]:
        return self._chunks_by_id(ids, texts=True)

    def _chunks_by_id(self, ids: Iterable[str], texts: bool) -> dict[str, Any]:
        """Chunks by id: ``(path, source, start_line, end_line)`` or, with ``texts``, whole
        :class:`ChunkRow` s. In a block of reads, what it already answered is reused (a search's
        candidates came with their paths and pending flags: :meth:`_remember`), and what is read
        here is kept for the block the same way; only the ids it has not seen are asked for."""
        ids = list(dict.fromkeys(ids))
        if not ids:
            return {}

        def run(conn: "psycopg.Connection", memo: dict[str, Any] | None) -> dict[str, Any]:
            memo = {} if memo is None else memo
            known: dict[str, Any] = memo.setdefault("chunks" if texts else "meta", {})
            missing = [i for i in ids if i not in known]
            if missing:
                rows = conn.execute(
                    f"SELECT id, path, source, start_line, end_line, pending{', hash, model, text' if texts else ''} "
                    f"FROM clawmem_chunks WHERE agent = %(agent)s AND generation = {self._g()} AND id = ANY(%(ids)s)",
                    {"agent": self.agent, "ids": missing},
                ).fetchall()
                self._remember(memo, (r[:6] for r in rows))
                if texts:
                    known.update((r[0], ChunkRow(*r[:5], *r[6:])) for r in rows)
            return {i: known[i] for i in ids if i in known}

        return self._read(run)

    # -- search -----------------------------------------------------------------------------------

    def _corpus_stats(self, conn: "psycopg.Connection") -> tuple[int, float]:
        """Rows and average length of the keyword index (FTS5's N and avgdl), kept per data version."""
        token = conn.execute("SELECT generation, data_version FROM clawmem_agents WHERE agent = %s", (self.agent,)).fetchone()
        token = (self._gen, token)
        if token != self._cache_token:
            row = conn.execute(
                f"SELECT count(*), coalesce(sum(doc_len), 0) FROM clawmem_chunks WHERE agent = %(agent)s "
                f"AND generation = {self._g()} AND part = 0",
                {"agent": self.agent},
            ).fetchone()
            n, total = int(row[0]), float(row[1])  # type: ignore[index]
            self._stats = (n, total / n if n else 1.0)
            self._cache_token = token
        return self._stats

    # The keyword side in process: the agent's row lengths and the postings of the terms searched
    # so far are kept (KEYWORD_CACHE) for one data version of the agent. Every statement that
    # reads them or answers from them also reads the version, in the same snapshot: a write by any
    # process (each write transaction bumps the version) is seen by the next search.

    _VERSION = "SELECT a.generation, a.data_version{cols} FROM clawmem_agents AS a {join} WHERE a.agent = %(agent)s"

    def _kw_key(self) -> tuple[str, str]:
        return (self.backend._url, self.agent)

    def _load_keyword_stats(self, conn: "psycopg.Connection") -> _KeywordStats:
        import numpy as np

        row = conn.execute(
            self._VERSION.format(
                cols=", s.rids, s.lens",
                join="CROSS JOIN LATERAL (SELECT string_agg(c.rid::text, ',' ORDER BY c.rid) AS rids, "
                "string_agg(c.doc_len::text, ',' ORDER BY c.rid) AS lens FROM clawmem_chunks AS c "
                "WHERE c.agent = a.agent AND c.generation = a.generation AND c.part = 0) AS s",
            ),
            {"agent": self.agent},
        ).fetchone()
        if row is None:
            return _KeywordStats(None, self._ints(None), self._ints(None, "float64"))
        return _KeywordStats((row[0], row[1]), self._ints(row[2]), self._ints(row[3], "float64"))

    #: Per lexeme of ``%(tokens)s``: the agent's keyword rows holding it (``{where}``) and its count in
    #: each (a row's tsvector cut down to the tokens: a lexeme's positions count its occurrences).
    _POSTINGS = (
        "SELECT x.lexeme, string_agg(c.rid::text, ',' ORDER BY c.rid) AS rids, "
        "string_agg(array_length(x.positions, 1)::text, ',' ORDER BY c.rid) AS tfs "
        "FROM clawmem_chunks AS c CROSS JOIN LATERAL "
        "unnest(ts_filter(setweight(c.terms, 'A', %(tokens)s::text[]), '{{a}}')) AS x "
        "WHERE c.agent = a.agent AND c.generation = a.generation AND c.part = 0 AND {where} GROUP BY x.lexeme"
    )

    @staticmethod
    def _ints(text: str | None, dtype: str = "int64") -> "np.ndarray":
        import numpy as np

        return np.array(text.split(","), dtype=dtype) if text else np.zeros(0, dtype=dtype)

    def _refresh_keyword_stats(self, conn: "psycopg.Connection", stats: _KeywordStats) -> _KeywordStats | None:
        """``stats`` carried to the agent's current data version without reading again what did
        not change: the rows added since (all above the rows held: an agent's writes are serialised
        by its row in ``clawmem_agents``), and the rows deleted. ``None`` when the generation changed."""
        top = int(stats.rids[-1]) if stats.rows else 0
        tokens = list(stats.terms)
        snapshot = self._in_snapshot()
        with (contextlib.nullcontext() if snapshot else conn.transaction()):
            if not snapshot:
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")  # one snapshot
            rows = conn.execute(
                self._VERSION.format(
                    cols=", o.kept, n.rids, n.lens, p.lexeme, p.rids, p.tfs",
                    join="CROSS JOIN LATERAL (SELECT count(*) AS kept FROM clawmem_chunks AS c WHERE c.agent = a.agent "
                    "AND c.generation = a.generation AND c.part = 0 AND c.rid <= %(top)s) AS o "
                    "CROSS JOIN LATERAL (SELECT string_agg(c.rid::text, ',' ORDER BY c.rid) AS rids, "
                    "string_agg(c.doc_len::text, ',' ORDER BY c.rid) AS lens FROM clawmem_chunks AS c "
                    "WHERE c.agent = a.agent AND c.generation = a.generation AND c.part = 0 AND c.rid > %(top)s) AS n "
                    f"LEFT JOIN LATERAL ({self._POSTINGS.format(where='c.rid > %(top)s')}) AS p ON true",
                ),
                {"agent": self.agent, "top": top, "tokens": tokens},
            ).fetchall()
            if not rows or stats.token is None or rows[0][0] != stats.token[0]:
                return None
            if rows[0][1] < stats.token[1]:
                # a search's snapshot older than the statistics (another thread brought them up to
                # date meanwhile): they cannot be carried back; that search asks the server
                raise _StaleKeywords("the statistics are newer than the search's snapshot")
            live = None
            if int(rows[0][2]) != stats.rows:  # rows were deleted: which ones
                row = conn.execute(
                    "SELECT string_agg(rid::text, ',' ORDER BY rid) FROM clawmem_chunks WHERE agent = %(agent)s "
                    "AND generation = %(gen)s AND part = 0 AND rid <= %(top)s",
                    {"agent": self.agent, "gen": rows[0][0], "top": top},
                ).fetchone()
                live = self._ints(row[0] if row else None)
        postings = {r[5]: (self._ints(r[6]), self._ints(r[7])) for r in rows if r[5] is not None}
        return stats.advance((rows[0][0], rows[0][1]), live, self._ints(rows[0][3]), self._ints(rows[0][4], "float64"),
                             postings)

    def _load_postings(self, conn: "psycopg.Connection", stats: _KeywordStats, tokens: list[str]) -> dict[str, tuple[Any, Any]]:
        """Read the postings of ``tokens`` into ``stats``; :class:`_StaleKeywords` when the agent's
        data version is no longer that of ``stats``."""
        import numpy as np

        rows = conn.execute(
            self._VERSION.format(
                cols=", p.lexeme, p.rids, p.tfs",
                join=f"LEFT JOIN LATERAL ({self._POSTINGS.format(where='c.terms @@ %(query)s::tsquery')}) AS p ON true",
            ),
            {"agent": self.agent, "tokens": tokens, "query": _tsquery(tokens)},
        ).fetchall()
        token = (rows[0][0], rows[0][1]) if rows else None
        if token != stats.token:
            raise _StaleKeywords("the agent's keyword rows changed")
        got = {r[2]: r for r in rows if r[2] is not None}
        out = {}
        for t in tokens:
            r = got.get(t)
            out[t] = stats.add(t, self._ints(r[3] if r else None), self._ints(r[4] if r else None))
        return out

    def _keyword_postings(self, conn: "psycopg.Connection", tokens: list[str], stale: _KeywordStats | None = None,
                          ) -> tuple[_KeywordStats, dict[str, tuple[Any, Any]], bool]:
        """The agent's keyword statistics with the postings of ``tokens`` (read where missing), and
        whether their data version was just checked (else the caller checks it). ``stale``:
        statistics found out of date (they are brought up to date)."""
        key = self._kw_key()
        for _ in range(_KEYWORD_ATTEMPTS):
            stats = KEYWORD_CACHE.get(key)
            checked = False
            if stats is None or stats is stale:
                fresh = self._refresh_keyword_stats(conn, stats) if stats is not None else None
                stats = fresh if fresh is not None else self._load_keyword_stats(conn)
                KEYWORD_CACHE.put(key, stats)
                checked = True
            entries = {t: stats.terms.get(t) for t in tokens}
            missing = [t for t, e in entries.items() if e is None]
            if missing:
                try:
                    entries.update(self._load_postings(conn, stats, missing))
                except _StaleKeywords:
                    stale = stats
                    continue
                KEYWORD_CACHE.grew(key)
                checked = True
            return stats, entries, checked  # type: ignore[return-value]
        raise _StaleKeywords("the agent's keyword rows kept changing")

    def _from_keyword_cache(self, tokens: list[str], answer: Callable[..., Any]) -> Any:
        """``answer(conn, memo, stats, entries, checked)`` on the agent's cached keyword statistics
        (the postings of ``tokens`` in ``entries``; ``checked``: their data version was just read),
        asked again on refreshed statistics while it returns :data:`_STALE`. None while a
        generation is being built or when the rows kept changing: the caller asks the server."""
        if self._gen is not None:  # a generation being built: straight from the tables
            return None

        def run(conn: "psycopg.Connection", memo: dict[str, Any] | None) -> Any:
            stale = None
            for _ in range(_KEYWORD_ATTEMPTS):
                try:
                    stats, entries, checked = self._keyword_postings(conn, tokens, stale)
                except _StaleKeywords:
                    break
                result = answer(conn, memo, stats, entries, checked)
                if result is not _STALE:
                    return result
                stale = stats
            return None

        found = self._read(run)
        if found is None:
            log.debug("keyword statistics of agent %r kept changing: scored in SQL", self.agent)
        return found

    def keyword_search(self, terms: list[str], limit: int) -> list[tuple[str, float]]:
        tokens = self.backend.terms.query(terms)
        if not tokens or limit <= 0:
            return []

        def answer(conn: "psycopg.Connection", memo: dict[str, Any] | None, stats: _KeywordStats,
                   entries: dict[str, Any], _: bool) -> Any:
            best = stats.search([entries[t] for t in tokens], int(limit))
            # the ids of the best rows (and what search asks next about them), and the version they
            # were scored at (one statement)
            rows = conn.execute(
                self._VERSION.format(
                    cols=", c.rid, c.id, c.path, c.source, c.start_line, c.end_line, c.pending",
                    join="LEFT JOIN clawmem_chunks AS c ON c.rid = ANY(%(rids)s) AND c.agent = a.agent "
                    "AND c.generation = a.generation",
                ),
                {"agent": self.agent, "rids": [rid for rid, _ in best]},
            ).fetchall()
            token = (rows[0][0], rows[0][1]) if rows else None
            if token != stats.token:
                return _STALE
            if memo is not None:
                memo.setdefault("token", token)
                self._remember(memo, (r[3:] for r in rows))
            ids = {r[2]: r[3] for r in rows}
            return [(ids[rid], rank) for rid, rank in best if rid in ids]

        found = self._from_keyword_cache(tokens, answer)
        return found if found is not None else self._keyword_search_sql(tokens, limit)

    def _keyword_search_sql(self, tokens: list[str], limit: int) -> list[tuple[str, float]]:
        """The keyword query scored by the server (every matching row; same scores)."""
        return self._read(lambda conn, memo: self._keyword_rows_sql(conn, tokens, limit))

    def _keyword_rows_sql(self, conn: "psycopg.Connection", tokens: list[str], limit: int) -> list[tuple[str, float]]:
        n, avgdl = self._corpus_stats(conn)
        if not n:
            return []
        # FTS5's bm25(): idf = ln((N - n + 0.5) / (n + 0.5)), at least 1e-6; each term adds
        # idf * f * (k1 + 1) / (f + k1 * (1 - b + b * D / avgdl)); the rank is minus the sum.
        # Each matching row's tsvector is cut down to the query's lexemes once; a lexeme's
        # positions count its occurrences (tf); the rows per lexeme give its document frequency.
        rows = conn.execute(
            f"""
            WITH m AS MATERIALIZED (
                SELECT rid, id, doc_len, ts_filter(setweight(terms, 'A', %(tokens)s::text[]), '{{a}}') AS hit
                FROM clawmem_chunks
                WHERE agent = %(agent)s AND generation = {self._g()} AND part = 0
                  AND terms @@ %(query)s::tsquery),
            u AS MATERIALIZED (
                SELECT m.rid, m.id, m.doc_len, x.lexeme, array_length(x.positions, 1)::float8 AS f
                FROM m CROSS JOIN LATERAL unnest(m.hit) AS x),
            d AS (
                SELECT lexeme, ln((%(n)s - count(*) + 0.5) / (count(*) + 0.5)) AS idf FROM u GROUP BY lexeme)
            SELECT u.id, -sum(CASE WHEN d.idf <= 0 THEN 1e-6 ELSE d.idf END
                              * (u.f * %(k1p)s) / (u.f + %(k1)s * (1 - %(b)s + %(b)s * u.doc_len / %(avgdl)s))) AS r
            FROM u JOIN d USING (lexeme)
            GROUP BY u.rid, u.id ORDER BY r, u.rid LIMIT %(limit)s
            """,
            {"tokens": tokens, "agent": self.agent, "query": _tsquery(tokens), "n": float(n), "k1p": _K1 + 1.0,
             "k1": _K1, "b": _B, "avgdl": avgdl, "limit": int(limit)},
        ).fetchall()
        return [(r[0], float(r[1])) for r in rows]

    def term_hits(self, terms: list[str]) -> tuple[int, list[int]] | None:
        per_term = [self.backend.terms.query([term]) for term in terms]
        tokens = list(dict.fromkeys(t for toks in per_term for t in toks))

        def answer(conn: "psycopg.Connection", memo: dict[str, Any] | None, stats: _KeywordStats,
                   entries: dict[str, Any], checked: bool) -> Any:
            if not checked and self._token(conn, memo) != stats.token:  # no round trip in a snapshot that read it
                return _STALE
            # a term of several tokens: the rows holding all of them
            return stats.rows, [stats.rows_with_all([entries[t] for t in toks]) if toks else 0 for toks in per_term]

        found = self._from_keyword_cache(tokens, answer)
        if found is not None:
            return found  # type: ignore[no-any-return]
        return self._read(lambda conn, memo: self._term_hits_sql(conn, per_term))

    def _term_hits_sql(self, conn: "psycopg.Connection", per_term: list[list[str]]) -> tuple[int, list[int]]:
        n, _ = self._corpus_stats(conn)
        out = []
        for toks in per_term:
            if not toks:
                out.append(0)
                continue
            q = " & ".join(_tsquery([t]) for t in toks)  # a term of several tokens: all of them
            row = conn.execute(
                f"SELECT count(*) FROM clawmem_chunks WHERE agent = %(agent)s AND generation = {self._g()} "
                "AND part = 0 AND terms @@ %(q)s::tsquery",
                {"agent": self.agent, "q": q},
            ).fetchone()
            out.append(int(row[0]))  # type: ignore[index]
        return int(n), out

    def vector_search(self, query: Sequence[float], limit: int) -> list[tuple[str, float]]:
        dims = len(query)
        if not dims or limit <= 0:
            return []
        rows = self._read(lambda conn, memo: self._vector_rows(conn, memo, _vec(query), dims, int(limit)))
        out = []
        for cid, d in rows:
            if d is not None and math.isfinite(d):
                out.append((cid, 1.0 - float(d)))
        return out

    #: What the vector query returns of each row besides its distance (search asks for it next).
    _VECTOR_COLS = "id, path, source, start_line, end_line, pending"

    def _vector_rows(self, conn: "psycopg.Connection", memo: dict[str, Any] | None, q: str, dims: int,
                     limit: int) -> list[tuple[str, float]]:
        token = self._token(conn, memo)
        if (self._gen, token) != self._vec_token:  # vectors counted per data version
            self._vec_count, self._vec_token = {}, (self._gen, token)
            self._index_size = {}
        count = self._vec_count.get(dims)
        if count is None:
            row = conn.execute(
                f"SELECT count(*) FROM clawmem_chunks WHERE agent = %(agent)s AND generation = {self._g()} "
                f"AND dims = {dims}",
                {"agent": self.agent},
            ).fetchone()
            count = self._vec_count[dims] = int(row[0])  # type: ignore[index]
        if not count:
            return []
        params = {"agent": self.agent, "q": q, "limit": limit}
        kind = self._hnsw_type(conn, dims) if count >= self.backend.exact_below else None
        if kind is None or count * count < self.backend.hnsw_visit_cost * limit * self._index_rows(conn, dims):
            rows = conn.execute(
                f"SELECT embedding <=> %(q)s::vector AS d, {self._VECTOR_COLS} FROM clawmem_chunks "
                f"WHERE agent = %(agent)s AND generation = {self._g()} AND dims = {dims} ORDER BY d, rid LIMIT %(limit)s",
                params,
            ).fetchall()
        else:
            ef = max(self.backend.hnsw_ef_search, min(limit, 1000))
            # The settings hold for this query only (rolled back with it), sent with it in one round trip.
            with self._rolled_back(conn):
                # one statement; the agent's rows by the btree, then a sort, can look cheaper on
                # stale statistics (enable_sort off)
                conn.execute(
                    "SELECT set_config('hnsw.ef_search', %s, true), set_config('hnsw.iterative_scan', %s, true), "
                    "set_config('enable_sort', 'off', true)",
                    (str(ef), self.backend.hnsw_iterative_scan),
                )
                # the graph walk orders by the index's own expression; the candidates are then
                # ranked by their full-precision distance (the heap row is read anyway)
                rows = conn.execute(
                    f"WITH c AS MATERIALIZED (SELECT rid, embedding <=> %(q)s::vector AS d, {self._VECTOR_COLS} "
                    f"FROM clawmem_chunks WHERE agent = %(agent)s AND generation = {self._g()} AND dims = {dims} "
                    f"ORDER BY embedding::{kind}({dims}) <=> %(q)s::{kind}({dims}) LIMIT %(limit)s) "
                    f"SELECT d, {self._VECTOR_COLS} FROM c ORDER BY d, rid",
                    params,
                ).fetchall()
        self._remember(memo, (r[1:] for r in rows))
        return [(r[1], r[0]) for r in rows]

    @contextlib.contextmanager
    def _rolled_back(self, conn: "psycopg.Connection") -> Iterator[None]:
        """Statements whose effects (``SET LOCAL``-like settings) end with them, pipelined: in a
        search's snapshot up to a savepoint (that snapshot's transaction is this store's, not
        psycopg's), else in a transaction of their own."""
        if self._in_snapshot():
            conn.execute("SAVEPOINT clawmem_settings")
            yield
            conn.execute("ROLLBACK TO SAVEPOINT clawmem_settings")
            return
        with conn.pipeline(), conn.transaction(force_rollback=True):
            yield

    def _index_rows(self, conn: "psycopg.Connection", dims: int) -> float:
        """The planner's estimate of the rows in the (all agents') HNSW index for ``dims``; 0 if unknown."""
        rows = self._index_size.get(dims)
        if rows is None:
            row = conn.execute(
                "SELECT reltuples FROM pg_class WHERE oid = to_regclass(%s)", (_hnsw_name(self._hnsw[dims], dims),)
            ).fetchone()
            rows = self._index_size[dims] = max(0.0, float(row[0])) if row else 0.0
        return rows

    def _hnsw_type(self, conn: "psycopg.Connection", dims: int) -> str | None:
        """The type of the valid HNSW index over ``dims``-dimensional vectors, None without one."""
        kind = self._hnsw.get(dims)
        if kind is None:
            kind = hnsw_index(conn, dims)
            if kind is not None:
                self._hnsw[dims] = kind
        return kind

    def _maybe_build_hnsw(self, dims: int, written: int) -> None:
        """Build the HNSW index for ``dims``-dimensional vectors once an agent has enough of them
        (one index per dimension count, shared by every agent). ``written``: vectors just written.
        The agent's vectors are counted only when the last count plus those written since could
        reach the threshold (not after every batch of a vector phase)."""
        if dims in self._hnsw or hnsw_type(dims) is None:
            return
        bound = self._vec_bound.get(dims)
        if bound is not None:
            bound = self._vec_bound[dims] = bound + written
            if bound < self.backend.exact_below:
                return
        with self._conn() as conn:
            if self._hnsw_type(conn, dims):
                return
            row = conn.execute(
                f"SELECT count(*) FROM clawmem_chunks WHERE agent = %(agent)s AND generation = {self._g()} "
                f"AND dims = {dims}",
                {"agent": self.agent},
            ).fetchone()
            self._vec_bound[dims] = int(row[0])  # type: ignore[index]
            if self._vec_bound[dims] < self.backend.exact_below:
                return
        self.backend.build_hnsw(dims)

    # -- embedding cache --------------------------------------------------------------------------

    @_again_if_lost
    def cache_get(self, provider: str, model: str, provider_key: str, hashes: list[str]) -> dict[str, list[float]]:
        if not hashes:
            return {}
        with self._conn(read=True) as conn:
            rows = conn.execute(
                "SELECT hash, embedding::real[] FROM clawmem_embedding_cache WHERE provider = %s AND model = %s "
                "AND provider_key = %s AND hash = ANY(%s)",
                (provider, model, provider_key, list(hashes)),
            ).fetchall()
        return {h: [float(x) for x in v] for h, v in rows if v}

    @_again_if_lost
    def cache_put(self, provider: str, model: str, provider_key: str, items: dict[str, Sequence[float]]) -> None:
        entries = [(h, _vec(v)) for h, v in items.items() if len(v)]
        if not entries:
            return
        with self._conn() as conn:  # one statement: atomic without a transaction around it
            conn.execute(
                "INSERT INTO clawmem_embedding_cache (provider, model, provider_key, hash, dims, embedding, updated_at) "
                "SELECT %(provider)s, %(model)s, %(key)s, u.hash, vector_dims(u.emb::vector), u.emb::vector, %(now)s "
                "FROM unnest(%(hashes)s::text[], %(embs)s::text[]) AS u(hash, emb) "
                "ON CONFLICT (provider, model, provider_key, hash) DO UPDATE SET embedding = excluded.embedding, "
                "dims = excluded.dims, updated_at = excluded.updated_at",
                {"provider": provider, "model": model, "key": provider_key, "now": _now_ms(),
                 "hashes": [h for h, _ in entries], "embs": [e for _, e in entries]},
            )

    def cache_prune(self, max_entries: int) -> int:
        """Evict the oldest entries beyond ``max_entries`` among those no agent uses. The cache is
        shared by every agent of the database, so one agent's ``cache.max_entries`` never evicts
        what any agent's index holds (the vectors of its chunks and windows, in any generation) nor
        the calibration vectors every agent's searches use: evicting them would cost that agent
        provider calls at its next rebuild. It bounds the rest (vectors of text no index holds
        any more)."""
        from ..calibration import BACKGROUND_TEXTS
        from ..chunking import sha256

        with self._conn() as conn:
            count = int(conn.execute("SELECT count(*) FROM clawmem_embedding_cache").fetchone()[0])  # type: ignore[index]
            if count <= max_entries:
                return 0
            cur = conn.execute(
                "DELETE FROM clawmem_embedding_cache d USING ("
                " SELECT provider, model, provider_key, hash FROM ("
                "  SELECT e.provider, e.model, e.provider_key, e.hash,"
                "   row_number() OVER (ORDER BY e.updated_at DESC, e.hash DESC) AS n"
                "  FROM clawmem_embedding_cache e"
                "  WHERE NOT EXISTS (SELECT 1 FROM clawmem_chunks c WHERE c.hash = e.hash)"
                "   AND NOT (e.hash = ANY(%(keep)s))"
                " ) ranked WHERE n > %(max)s"
                ") x WHERE d.provider = x.provider AND d.model = x.model AND d.provider_key = x.provider_key "
                "AND d.hash = x.hash",
                {"keep": [sha256(t) for t in BACKGROUND_TEXTS], "max": int(max_entries)},
            )
            return max(0, cur.rowcount)

    # -- generations ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def rebuild(self) -> Iterator["PostgresStore"]:
        """A new generation of this agent's index; the switch to it is one transaction."""
        with self._conn() as conn:
            gen = int(conn.execute("SELECT nextval('clawmem_generation_seq')").fetchone()[0])  # type: ignore[index]
        tmp = PostgresStore(self.backend, self.agent, generation=gen, create=False)
        try:
            yield tmp
            with self._tx() as conn:
                conn.execute("UPDATE clawmem_agents SET generation = %s WHERE agent = %s", (gen, self.agent))
            self.vector_dims = tmp.vector_dims
            self._cache_token = None
        except BaseException:
            with contextlib.suppress(StoreError):
                self._drop_generations(keep_live=True)
            raise
        finally:
            tmp.close()
        with contextlib.suppress(StoreError):
            self._drop_generations(keep_live=True)

    def _drop_generations(self, keep_live: bool) -> int:
        with self._conn() as conn, conn.transaction():
            live = self._generation(conn)
            n = 0
            for table in ("clawmem_chunks", "clawmem_files", "clawmem_meta"):
                cur = conn.execute(f"DELETE FROM {table} WHERE agent = %s AND generation <> %s", (self.agent, live))
                n += cur.rowcount or 0
        return n

    def remove_leftovers(self) -> int:
        """Rows of generations that are not live (a rebuild that crashed, or an old generation not
        yet dropped); call with the sync lock held. Also moves vectors stored out of line (an agent
        indexed under schema version 2) into their rows, once per agent."""
        n = self._drop_generations(keep_live=True)
        self._inline_vectors()
        return n

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

    # -- errors -----------------------------------------------------------------------------------

    def is_corruption(self, exc: BaseException) -> bool:
        return isinstance(exc, CorruptIndexError)

    # -- status -----------------------------------------------------------------------------------

    def counts(self) -> StoreCounts:
        self.refresh()
        with self._conn(read=True) as conn:
            rows = conn.execute(
                f"SELECT 'f', source, count(*) FROM clawmem_files WHERE agent = %(agent)s AND generation = {self._g()} "
                f"GROUP BY source UNION ALL SELECT 'c', source, count(*) FROM clawmem_chunks WHERE agent = %(agent)s "
                f"AND generation = {self._g()} AND part = 0 GROUP BY source UNION ALL "
                f"SELECT 'e', '', count(*) FROM clawmem_embedding_cache",
                {"agent": self.agent},
            ).fetchall()
        by_source: dict[str, list[int]] = {}
        cache = 0
        for kind, source, n in rows:
            if kind == "e":
                cache = int(n)
                continue
            entry = by_source.setdefault(source, [0, 0])
            entry[0 if kind == "f" else 1] = int(n)
        files = sum(v[0] for v in by_source.values())
        chunks = sum(v[1] for v in by_source.values())
        return StoreCounts(files, chunks, {k: (v[0], v[1]) for k, v in by_source.items()}, cache)

    def close(self) -> None:
        self._closed = True


#: The index types the store searches through, preferred first. Earlier versions built ``vector``
#: indexes; they are still used where they exist.
_HNSW_TYPES = ("halfvec", "vector")


def _hnsw_name(kind: str, dims: int) -> str:
    return f"clawmem_chunks_hnsw_half_{int(dims)}" if kind == "halfvec" else f"clawmem_chunks_hnsw_{int(dims)}"


def hnsw_type(dims: int) -> str | None:
    """The type the store builds its HNSW index for ``dims``-dimensional vectors in: ``halfvec``
    (half the size of ``vector``, up to 4,000 dimensions); None above pgvector's limit (exact search)."""
    return "halfvec" if 0 < dims <= _HNSW_MAX_DIMS["halfvec"] else None


def hnsw_index(conn: "psycopg.Connection", dims: int) -> str | None:
    """The type of the valid HNSW index over ``dims``-dimensional vectors, None without one (an index
    still being built, or left invalid by a build that died, does not count)."""
    for kind in _HNSW_TYPES:
        row = conn.execute(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", (_hnsw_name(kind, dims),)
        ).fetchone()
        if row and row[0]:
            return kind
    return None


def _drop_invalid_hnsw(conn: "psycopg.Connection", dims: int) -> None:
    """Drop the HNSW indexes over ``dims`` left invalid by a build that died (the caller holds the
    build lock, so none is being built)."""
    for kind in _HNSW_TYPES:
        row = conn.execute(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", (_hnsw_name(kind, dims),)
        ).fetchone()
        if row and not row[0]:
            conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {_hnsw_name(kind, dims)}")


def build_hnsw(conn: "psycopg.Connection", dims: int) -> None:
    """Create the HNSW (cosine) index over ``dims``-dimensional vectors (all agents) on ``conn``
    (autocommit), without blocking writers: ``halfvec``, so the graph takes half the memory and
    disk of full-precision vectors (searches rank its candidates at full precision)."""
    kind = hnsw_type(dims)
    if kind is None:
        raise ValueError(f"pgvector cannot index {dims}-dimensional vectors with HNSW")
    conn.execute(
        f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {_hnsw_name(kind, dims)} ON clawmem_chunks "
        f"USING hnsw ((embedding::{kind}({int(dims)})) {kind}_cosine_ops) WHERE dims = {int(dims)}"
    )
