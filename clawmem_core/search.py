"""Hybrid search (SPEC 6): the scoring maths as pure functions, and :func:`rank`, the pipeline
that runs them over a :class:`~clawmem_core.store.base.Store`.

Flow: keyword and vector candidates -> score conversion -> weighted merge by chunk id ->
temporal decay -> sort -> MMR -> min-score filter (with OpenClaw's relaxed keyword fallback,
or strict abstention) -> cut to ``max_results``.
"""

from __future__ import annotations

import functools
import math
import re
from datetime import date, datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, Collection, Hashable, Iterable, Mapping, NamedTuple, Sequence

from .deadlines import LATE_CALLS, LateCalls, run_with_deadline  # noqa: F401 (LateCalls, run_with_deadline: re-exported)
from .errors import InvalidQueryError
from .query_days import named_days
from .results import SearchHits, SearchResult
from .snippets import SNIPPET_MAX_CHARS, build_snippet
from .text import index_terms, search_terms, similarity_tokens
from .tuning import (
    AGREEMENT_CHUNKS,
    CALIBRATED_VECTOR_WEIGHT,
    CANDIDATE_POOL,
    CURATED_PRIOR,
    FTS5_IDF_FLOOR,
    MMR_LAMBDA,
    MMR_WINDOW,
    OPENCLAW_VECTOR_WEIGHT,
    VECTOR_ALONE,
    VECTOR_CONFIRMS,
    VECTOR_DOUBT_FLOOR,
    VECTOR_DOUBT_FLOOR_STRONG,
    VECTOR_FULL,
    VECTOR_VOUCHES,
    VOCABULARY_FULL,
)

if TYPE_CHECKING:
    from .config import QueryConfig
    from .store.base import ChunkRow, Store

MAX_QUERY_TERMS = 64
#: Larger ``max_results`` are clamped (a memory tool never needs more; sqlite-vec caps k at 4096).
MAX_RESULTS = 1000
#: Only the start of a very long query is split into keyword terms.
MAX_QUERY_TERM_CHARS = 4000
MAX_QUERY_EMBED_CHARS = 8000

_LN2 = math.log(2)
_DATED = re.compile(r"(?:^|/)memory/(?:.+/)?(\d{4})-(\d{2})-(\d{2})(?:-[^/]*)?\.md$")


class Candidate(NamedTuple):
    """A chunk under consideration, with both side scores and the merged score (a tuple: search
    creates thousands per query, so it is cheap to build and to copy with ``_replace``)."""

    id: str
    path: str
    source: str
    start_line: int
    end_line: int
    snippet: str
    vector_score: float = 0.0
    text_score: float = 0.0
    score: float = 0.0
    from_keyword: bool = False


def bm25_rank_to_score(rank: float) -> float:
    """FTS5 BM25 rank (more negative is better) -> a score in (0, 1), order preserved."""
    if not math.isfinite(rank):
        return 1 / (1 + 999)
    if rank < 0:
        r = -rank
        return r / (1 + r)
    return 1 / (1 + rank)


def keyword_scores(ranks: Sequence[float], mode: str = "saturate") -> list[float]:
    """Scores of a query's keyword hits from their FTS5 ranks: ``"saturate"`` converts each rank
    on its own (:func:`bm25_rank_to_score`); ``"normalize"`` divides each ``|rank|`` by the best
    one (the best hit scores 1; ranks that are not negative score 0)."""
    if mode != "normalize":
        return [bm25_rank_to_score(r) for r in ranks]
    mags = [-r if math.isfinite(r) and r < 0 else 0.0 for r in ranks]
    best = max(mags, default=0.0)
    return [m / best if best > 0 else 0.0 for m in mags]


#: Characters of Chinese, Japanese and Korean scripts (a query's CJK runs become characters and
#: character pairs, SPEC 3).
_CJK_PAIR = re.compile(r"^[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]{2}$")


def fts_idf(rows: int, hits: int) -> float:
    """FTS5's BM25 IDF of a term in ``hits`` of ``rows`` rows, floored at 1e-6 as FTS5 floors it."""
    if rows <= 0:
        return FTS5_IDF_FLOOR
    idf = math.log((rows - hits + 0.5) / (hits + 0.5))
    return idf if idf > FTS5_IDF_FLOOR else FTS5_IDF_FLOOR


def query_idf_mass(terms: Sequence[str], hits: Sequence[int], rows: int) -> float:
    """The BM25 a chunk scores when it holds every query term once at average length: the sum of
    the terms' IDFs. A term absent from the index counts at the IDF of a term in no row, so that a
    chunk matching only part of the query scores in proportion to the part it matches, except a
    CJK character pair absent from the index: a question's runs are cut into every overlapping
    pair, and pairs that straddle two words are absent from any text, related or not."""
    total = 0.0
    for term, n in zip(terms, hits):
        if n <= 0 and _CJK_PAIR.match(term):
            continue
        total += fts_idf(rows, max(0, int(n)))
    return total


def text_relevance(ranks: Sequence[float], idf_mass: float) -> list[float]:
    """Calibrated keyword scores of a query's hits: ``|bm25| / max(idf_mass, best |bm25|)``. A chunk
    holding every query term once at average length scores about 1, a chunk holding part of the
    query about the share of the IDF mass it holds; when some chunk scores above the mass (the
    terms several times, a short chunk) the best one scores 1 and the rest in proportion, so the
    order is BM25's. Scale-free: meaningful in a workspace of three files (where FTS5's IDF of a
    term in half the files is 1e-6 and raw BM25 reads as 0.000) as in one of 100k."""
    mags = [-r if math.isfinite(r) and r < 0 else 0.0 for r in ranks]
    scale = max(idf_mass if idf_mass > 0 else 0.0, max(mags, default=0.0))
    return [m / scale if scale > 0 else 0.0 for m in mags]


_CJK_CHAR = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_LATIN_WORD = re.compile(r"[^\W\d_]+")


def query_script(query: str) -> str:
    """``"cjk"`` when a query has more CJK characters than other words (a Chinese question naming
    people in English is Chinese), else ``"latin"``."""
    cjk = len(_CJK_CHAR.findall(query))
    if not cjk:
        return "latin"
    words = len(_LATIN_WORD.findall(_CJK_CHAR.sub(" ", query)))
    return "cjk" if cjk > words else "latin"


def vocabulary_share(terms: Sequence[str], hits: Sequence[int]) -> float | None:
    """The share of a query's terms that occur anywhere in the index (``hits``: rows holding each
    term), or ``None`` for a query without terms. A CJK character pair absent from the index is not
    counted (as in :func:`query_idf_mass`: pairs straddling two words are absent from any text).
    A question about something the memory never mentions is mostly made of words it never used."""
    counted = [int(n) > 0 for t, n in zip(terms, hits) if int(n) > 0 or not _CJK_PAIR.match(t)]
    if not counted:
        return None
    return sum(counted) / len(counted)


def query_confidence(vocabulary: float | None, best_vector: float | None, agreement: float | None = None, *,
                     alone: float | None = None, floor: float = VECTOR_DOUBT_FLOOR) -> float:
    """How far a query's calibrated scores are to be trusted, in ``[0, VECTOR_CONFIRMS]``: every
    score of the query is multiplied by it (and capped at 1), so the order is unchanged.

    Keyword evidence: ``min(1, vocabulary / VOCABULARY_FULL) ** 2`` (:func:`vocabulary_share`; 1
    when ``None``): a question whose words the memory does not use is doubted faster than the share
    it lacks, since what it does share is mostly its commonest words. When the vector side ran with
    a calibration (``best_vector``: the best calibrated vector score among the query's chunks), that
    factor is at least ``best_vector / VECTOR_VOUCHES`` (a paraphrase), and it is multiplied by the
    vector side's evidence ``e / VECTOR_FULL``, bounded to ``[floor, VECTOR_CONFIRMS]``, where ``e``
    is ``max(agreement, VECTOR_ALONE * alone)``: ``agreement`` is the best calibrated vector score
    among the keyword side's first :data:`AGREEMENT_CHUNKS` chunks (``None``: counted as 0), and
    ``alone`` the vector side's best match measured against the best of as many unrelated texts as
    it had candidates (``None``: ``best_vector``). ``floor`` (:data:`VECTOR_DOUBT_FLOOR`, lower for
    an embedder that recognises meaning, :func:`vector_doubt_floor`). A question about something
    absent from the memory shares a rare word with some chunk the embedder places no closer than
    unrelated text: its scores fall below ``min_score``; a question whose two sides agree gains."""
    vocab = 1.0 if vocabulary is None or not math.isfinite(vocabulary) else max(0.0, min(1.0, vocabulary / VOCABULARY_FULL)) ** 2
    if best_vector is None or not math.isfinite(best_vector):
        return vocab
    best = max(0.0, min(1.0, best_vector))
    lone = best if alone is None or not math.isfinite(alone) else max(0.0, min(1.0, alone))
    agree = agreement if agreement is not None and math.isfinite(agreement) else 0.0
    evidence = max(max(0.0, min(1.0, agree)), VECTOR_ALONE * lone)
    vocab = max(vocab, best / VECTOR_VOUCHES)
    low = max(0.0, min(1.0, floor)) if math.isfinite(floor) else VECTOR_DOUBT_FLOOR
    return max(0.0, min(1.0, vocab)) * max(low, min(VECTOR_CONFIRMS, evidence / VECTOR_FULL))


def vector_doubt_floor(strength: float) -> float:
    """The floor of the vector side's doubt for an embedder of this
    :func:`~clawmem_core.calibration.translation_strength`: :data:`VECTOR_DOUBT_FLOOR` at 0 (or
    below), :data:`VECTOR_DOUBT_FLOOR_STRONG` from :data:`VECTOR_FULL` up, linear in between."""
    share = max(0.0, min(1.0, strength / VECTOR_FULL)) if math.isfinite(strength) else 0.0
    return VECTOR_DOUBT_FLOOR - (VECTOR_DOUBT_FLOOR - VECTOR_DOUBT_FLOOR_STRONG) * share


def fusion_weights(strength: float, evidence: float | None, text_evidence: float = 1.0) -> tuple[float, float]:
    """The calibrated fusion's default ``(vector, text)`` weights for one query: each side weighs in
    proportion to the evidence it brings for this query, in the units of :func:`query_confidence`,
    where a calibrated vector score of :data:`VECTOR_FULL` is full vector evidence as a keyword match
    of the query's whole IDF mass (score 1) is full keyword evidence. The vector side's ``evidence``
    (its best candidate against as many unrelated texts, :func:`vector_evidence`) counts in the share
    of :data:`VECTOR_FULL` the embedder's :func:`~clawmem_core.calibration.translation_strength`
    reaches (not at all for one that shows no sense of meaning: all-MiniLM-L6-v2, a bag of words);
    ``text_evidence`` is the keyword side's best calibrated score. The vector weight
    ``v / (v + t)`` (``v = evidence / VECTOR_FULL`` so counted, ``t = text_evidence``) is kept
    between the two fusions' own vector weights: never below :data:`CALIBRATED_VECTOR_WEIGHT` (an
    unproven embedder, or a query its vector side finds nothing for, is weighed as before) nor above
    :data:`OPENCLAW_VECTOR_WEIGHT` (the keyword side keeps at least OpenClaw's share). ``evidence``
    ``None`` (no calibration): the fixed weights. The weights sum to 1."""
    low = CALIBRATED_VECTOR_WEIGHT
    if evidence is None or not (math.isfinite(evidence) and math.isfinite(strength)):
        return low, 1.0 - low
    share = max(0.0, min(1.0, strength / VECTOR_FULL))
    v = max(0.0, evidence) / VECTOR_FULL * share
    t = max(0.0, min(1.0, text_evidence)) if math.isfinite(text_evidence) else 0.0
    if v <= 0:
        return low, 1.0 - low
    vw = max(low, min(OPENCLAW_VECTOR_WEIGHT, v / (v + t)))
    return vw, 1.0 - vw


def vector_evidence(vec_hits: Sequence[tuple[str, float]], to_background: Sequence[float], level: float) -> float | None:
    """How far the vector side's best candidate stands above unrelated text for this query: its
    cosine calibrated (:func:`~clawmem_core.calibration.calibrated_cosine`) against the level the
    best of as many unrelated texts reaches (:func:`~clawmem_core.calibration.best_of_level`; the
    best of many windows clears the one-text level by chance). ``None`` without a calibration."""
    from .calibration import best_of_level, calibrated_cosine

    top = max((s for _, s in vec_hits if math.isfinite(s)), default=math.nan)
    if not (to_background and math.isfinite(level)):
        return None
    if not math.isfinite(top):
        return 0.0
    many = best_of_level(to_background, len(vec_hits))
    return calibrated_cosine(top, many if math.isfinite(many) else level)


def keyword_agreement(kw_ids: Sequence[Hashable], text_scores: Sequence[float], vector_of: Mapping[Hashable, float],
                      n: int = AGREEMENT_CHUNKS) -> float:
    """The best calibrated vector score among the ``n`` chunks the keyword side scores highest
    (``vector_of``: calibrated vector score by chunk, keyed as ``kw_ids``; a chunk the vector side
    did not return counts 0): do the two sides agree on where the answer is?"""
    order = sorted(range(len(kw_ids)), key=lambda i: -text_scores[i])[:n]
    return max((vector_of.get(kw_ids[i], 0.0) for i in order), default=0.0)


def _chunk_key(meta: tuple[str, str, int, int] | None) -> tuple[str, str, int, int] | None:
    """A chunk's identity across its rows (its embedding windows share its path and line range)."""
    return None if meta is None else (meta[1], meta[0], meta[2], meta[3])


def chunk_vector_scores(vec_hits: Sequence[tuple[str, float]], meta: Mapping[str, tuple[str, str, int, int]],
                        to_background: Sequence[float], level: float) -> dict[Any, float]:
    """The calibrated vector score of each chunk the vector side returned, keyed by
    :func:`_chunk_key`: that of its best window, measured against the level the best of its windows
    reaches by chance (:func:`~clawmem_core.calibration.best_of_level`, ``n`` the windows of the
    chunk among ``vec_hits``; a chunk embedded whole is one draw, ``level``). Without the query's
    cosines to the calibration passages, against ``level``."""
    from .calibration import best_of_level, calibrated_cosines

    best: dict[Any, float] = {}
    draws: dict[Any, int] = {}
    for cid, cos in vec_hits:
        key = _chunk_key(meta.get(cid))
        if key is None or not math.isfinite(cos):
            continue
        draws[key] = draws.get(key, 0) + 1
        best[key] = max(cos, best.get(key, -math.inf))
    levels: dict[int, float] = {1: level}
    by_level: dict[float, list[Any]] = {}
    for key in best:
        n = draws[key] if to_background else 1
        if n not in levels:
            lvl = best_of_level(to_background, n)
            levels[n] = lvl if math.isfinite(lvl) else level
        by_level.setdefault(levels[n], []).append(key)
    out = dict.fromkeys(best, 0.0)  # (in the order of ``best``)
    for lvl, keys in by_level.items():
        out.update(zip(keys, calibrated_cosines([best[key] for key in keys], lvl)))
    return out


def id_prefix(cid: str) -> str:
    """``"@<ns>/"`` for a chunk id from a shared namespace (:class:`~clawmem_core.store.shared.SharedView`),
    ``""`` for one of the agent's own index (chunk ids are hex digests)."""
    if cid.startswith("@"):
        cut = cid.find("/")
        if cut > 1:
            return cid[: cut + 1]
    return ""


def index_parts(store: "Store", kw_hits: Sequence[tuple[str, float]], vec_hits: Sequence[tuple[str, float]]
                ) -> dict[str, tuple[list[int], list[int]]]:
    """The positions in ``kw_hits`` and ``vec_hits`` of each index's candidates, by
    :func:`id_prefix` (the agent's own index, ``""``, always first, even without candidates). A
    store that is one index is one part."""
    if not hasattr(store, "term_hits_by_prefix"):
        return {"": (list(range(len(kw_hits))), list(range(len(vec_hits))))}
    parts: dict[str, tuple[list[int], list[int]]] = {"": ([], [])}
    for side, hits in ((0, kw_hits), (1, vec_hits)):
        for i, (cid, _) in enumerate(hits):
            parts.setdefault(id_prefix(cid), ([], []))[side].append(i)
    return parts


def term_stats(store: "Store", terms: list[str], prefixes: Sequence[str]
               ) -> dict[str, tuple[tuple[int, list[int]] | None, str]]:
    """For each index among ``prefixes`` (:func:`index_parts`): its
    :meth:`~clawmem_core.store.base.Store.term_hits` and its keyword tokenizer."""
    if not prefixes:
        return {}
    by_prefix = getattr(store, "term_hits_by_prefix", None)
    if by_prefix is not None:
        return by_prefix(terms, prefixes)  # type: ignore[no-any-return]
    return {"": (store.term_hits(terms), getattr(store, "fts_tokenizer", ""))}


def is_curated(path: str, source: str) -> bool:
    """A chunk of the curated long-term memory (``MEMORY.md`` / ``memory.md`` at the root)."""
    return source == "memory" and path in ("MEMORY.md", "memory.md")


def name_terms(path: str) -> set[str]:
    """The terms of a file's name (its stem) that can name a thing: words and CJK character pairs,
    not numbers (daily notes are named by date) and not single characters."""
    return set(_name_terms(path))


@functools.lru_cache(maxsize=65_536)
def _name_terms(path: str) -> frozenset[str]:
    """:func:`name_terms`, kept per path (the keyword hits of every search ask again)."""
    stem = path.rsplit("/", 1)[-1]
    stem = stem[: -len(".md")] if stem.lower().endswith(".md") else stem
    return frozenset(t for t in index_terms(stem) if len(t) > 1 and not t.isdigit())


#: The importance a promoted entry carries (:mod:`clawmem_core.dreaming` writes it on every entry it
#: promotes, with a ``Source:`` line citing the note the entry came from).
_PROMOTED_MARK = re.compile(r"<!--\s*importance:\s*\d+\s*-->")


def promoted_only(text: str) -> bool:
    """Whether a chunk of ``MEMORY.md`` is made of promoted entries only: every list item carries
    its importance and the chunk cites a source. Such a chunk repeats lines of a note, which ranks
    for them on its own: :data:`CURATED_PRIOR` is kept for what was written into ``MEMORY.md``."""
    items = [line for line in text.split("\n") if line.startswith(("- ", "* "))]
    return bool(items) and "Source: " in text and all(_PROMOTED_MARK.search(line) for line in items)


def promoted_chunks(store: Any, kw_hits: Sequence[tuple[str, float]],
                    meta: dict[str, tuple[str, str, int, int]]) -> set[str]:
    """The keyword hits that are chunks of ``MEMORY.md`` made of promoted entries only
    (:func:`promoted_only`; one read of those chunks' text, none without a ``MEMORY.md`` hit)."""
    curated = [cid for cid, _ in kw_hits
               if (m := meta.get(cid)) is not None and is_curated(m[0][len(id_prefix(cid)):], m[1])]
    if not curated:
        return set()
    return {cid for cid, row in store.get_chunks(curated).items() if promoted_only(row.text)}


def prior_ranks(kw_hits: Sequence[tuple[str, float]], meta: dict[str, tuple[str, str, int, int]],
                terms: Sequence[str] = (), unboosted: Iterable[str] = (),
                days: Collection[date] = ()) -> list[float]:
    """The keyword hits' BM25 ranks, those of ``MEMORY.md`` chunks, of notes whose file name
    holds one of the query's ``terms`` and of daily notes for one of the ``days`` the query names
    (:func:`~clawmem_core.query_days.named_days`) times :data:`CURATED_PRIOR` (once, not
    compounded); the chunks in ``unboosted`` (made of promoted entries, :func:`promoted_chunks`)
    keep their rank."""
    wanted = set(terms)
    plain = set(unboosted)
    named: dict[str, bool] = {}
    out = []
    for cid, r in kw_hits:
        m = meta.get(cid)
        if m is None or m[1] != "memory" or cid in plain:
            out.append(r)
            continue
        if m[0] not in named:
            own_path = m[0][len(id_prefix(cid)):]  # a namespace's paths are "@<ns>/<path>"
            named[m[0]] = (is_curated(own_path, m[1]) or bool(wanted and not wanted.isdisjoint(_name_terms(own_path)))
                           or bool(days and date_from_path(own_path) in days))
        out.append(r * CURATED_PRIOR if named[m[0]] else r)
    return out


def truncate_snippet(text: str, limit: int = SNIPPET_MAX_CHARS) -> str:
    """At most ``limit`` characters, never ending inside a surrogate pair."""
    if len(text) <= limit:
        return text
    cut = text[:limit]
    if cut and 0xD800 <= ord(cut[-1]) <= 0xDBFF:
        cut = cut[:-1]
    return cut


def merge_hybrid(
    vector: Iterable[Candidate], keyword: Iterable[Candidate], vector_weight: float, text_weight: float
) -> list[Candidate]:
    """Union by chunk; ``score = vw * vector_score + tw * text_score``. A chunk is known by its
    source, path and line range, which its embedding windows share: its vector score is that of
    its best window. On overlap the keyword candidate (its id, hence its snippet) is kept.
    Returned unsorted (decay comes first)."""
    # (candidate, vector score, text score, snippet, from keyword), each Candidate built once at
    # the end (``_replace`` is slow at this volume).
    by_key: dict[tuple[str, str, int, int], tuple[Candidate, float, float, str, bool]] = {}
    for c in vector:
        key = (c.source, c.path, c.start_line, c.end_line)
        prev = by_key.get(key)
        if prev is None or c.vector_score > prev[1]:
            by_key[key] = (c, c.vector_score, 0.0, c.snippet, False)
    for c in keyword:
        key = (c.source, c.path, c.start_line, c.end_line)
        prev = by_key.get(key)
        if prev is None:
            by_key[key] = (c, 0.0, c.text_score, c.snippet, True)
        elif not prev[4]:
            by_key[key] = (c, prev[1], c.text_score, c.snippet or prev[3], True)
        elif c.text_score > prev[2]:  # pieces of one long line share its line range
            by_key[key] = (c, prev[1], c.text_score, c.snippet, True)
    return [
        Candidate(c.id, c.path, c.source, c.start_line, c.end_line, snippet, vs, ts, vector_weight * vs + text_weight * ts, fk)
        for c, vs, ts, snippet, fk in by_key.values()
    ]


def merge_partial(
    vector: Iterable[Candidate], keyword: Iterable[Candidate], vector_weight: float, text_weight: float,
    pending: set[str],
) -> list[Candidate]:
    """:func:`merge_hybrid` while the vector phase is under way: a keyword candidate in
    ``pending`` (its chunk has no vector yet) is given, in place of the vector score it cannot
    have, the mean vector score of the keyword candidates that have theirs. It then ranks as an
    average chunk of its keyword score would rank, neither pushed below every embedded chunk nor
    lifted above them; embedded chunks rank as in full hybrid."""
    merged = merge_hybrid(vector, keyword, vector_weight, text_weight)
    if not pending:
        return merged
    known = [c.vector_score for c in merged if c.from_keyword and c.id not in pending]
    fill = sum(known) / len(known) if known else 0.0
    return [
        c._replace(vector_score=fill, score=vector_weight * fill + text_weight * c.text_score) if c.id in pending else c
        for c in merged
    ]


def dedupe_line_ranges(ranked: Sequence[Candidate]) -> list[Candidate]:
    """Keep the best of candidates citing the same lines (pieces of a chunk split for the
    embedding model's input limit share their parent's line range)."""
    seen: set[tuple[str, str, int, int]] = set()
    out = []
    for c in ranked:
        key = (c.source, c.path, c.start_line, c.end_line)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


# -- temporal decay ---------------------------------------------------------------------------


def decay_multiplier(age_days: float, half_life_days: float) -> float:
    """``exp(-ln2 / half_life * age)``; a future date (negative age) counts as today."""
    return math.exp(-_LN2 / max(half_life_days, 1e-9) * max(0.0, age_days))


def date_from_path(path: str) -> date | None:
    """The date of a dated note: ``memory/YYYY-MM-DD.md``, also in subfolders and with a
    ``-slug`` suffix (``memory/2026/2026-01-05-standup.md``)."""
    m = _DATED.search(path)
    if not m:
        return None
    try:
        return date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    except ValueError:
        return None


def is_evergreen(path: str, source: str) -> bool:
    """``MEMORY.md``, ``memory.md`` and undated notes under ``memory/`` never decay."""
    if source != "memory":
        return False
    if path in ("MEMORY.md", "memory.md"):
        return True
    return (path.startswith("memory/") or "/memory/" in path) and date_from_path(path) is None


def apply_temporal_decay(
    items: list[Candidate],
    half_life_days: float,
    now: datetime,
    mtime_of: Callable[[str, str], float | None],
) -> list[Candidate]:
    """Multiply each score by the decay of its note's age. ``mtime_of(path, source)`` gives a
    POSIX timestamp for files that are neither dated nor evergreen (or ``None``: no decay)."""
    now_ts = now.timestamp()
    memo: dict[tuple[str, str], float] = {}
    out = []
    for c in items:
        key = (c.source, c.path)
        if key not in memo:
            d = date_from_path(c.path)
            if d is not None:
                ts: float | None = datetime(d.year, d.month, d.day, tzinfo=timezone.utc).timestamp()
            elif is_evergreen(c.path, c.source):
                ts = None
            else:
                ts = mtime_of(c.path, c.source)
            memo[key] = 1.0 if ts is None else decay_multiplier((now_ts - ts) / 86400.0, half_life_days)
        out.append(Candidate(*c[:8], c.score * memo[key], c.from_keyword))
    return out


# -- MMR --------------------------------------------------------------------------------------


def jaccard(a: set[str], b: set[str]) -> float:
    """Jaccard similarity; two empty sets are identical (1), one empty set shares nothing (0)."""
    if not a and not b:
        return 1.0
    if not a or not b:
        return 0.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


def mmr_score(relevance: float, max_similarity: float, lambda_: float) -> float:
    return lambda_ * relevance - (1 - lambda_) * max_similarity


def mmr_rerank(
    items: Sequence[Candidate], lambda_: float = MMR_LAMBDA, window: int = MMR_WINDOW, relevance: Sequence[float] | None = None
) -> list[Candidate]:
    """Greedy maximal marginal relevance over snippets of the ``window`` best items. Reorders,
    never drops. Relevance (the scores, or ``relevance`` given per item, e.g. a reranked order) is
    min-max normalised; ties go to the higher relevance."""
    items = list(items)
    if len(items) > window:
        head_rel = None if relevance is None else list(relevance)[:window]
        return mmr_rerank(items[:window], lambda_, window, head_rel) + items[window:]
    if len(items) < 2:
        return items
    lam = MMR_LAMBDA if not math.isfinite(lambda_) else max(0.0, min(1.0, lambda_))
    scores = [c.score for c in items] if relevance is None else [float(r) for r in relevance][: len(items)]
    if lam >= 1.0:
        return [items[i] for i in sorted(range(len(items)), key=lambda i: -scores[i])]
    lo, hi = min(scores), max(scores)
    rel = [1.0 if hi == lo else (s - lo) / (hi - lo) for s in scores]
    tokens = [similarity_tokens(c.snippet) for c in items]
    remaining = list(range(len(items)))
    max_sim = [0.0] * len(items)
    chosen: list[int] = []
    while remaining:
        best = max(remaining, key=lambda i: (mmr_score(rel[i], max_sim[i], lam), scores[i]))
        chosen.append(best)
        remaining.remove(best)
        for i in remaining:
            s = jaccard(tokens[i], tokens[best])
            if s > max_sim[i]:
                max_sim[i] = s
    return [items[i] for i in chosen]


# -- selection --------------------------------------------------------------------------------


def select_results(
    ranked: Sequence[Candidate],
    *,
    min_score: float,
    max_results: int,
    relaxed_floor: float,
    strict: bool = False,
) -> list[Candidate]:
    """Keep ``score >= min_score``, cut to ``max_results``. When nothing passes and there were
    keyword hits, return keyword hits scoring at least ``relaxed_floor`` (OpenClaw's relaxed
    fallback uses ``min(min_score, text_weight)``, because a keyword-only hit scores at most
    ``text_weight``), unless ``strict``: then nothing below ``min_score``, ever."""
    passing = [c for c in ranked if c.score >= min_score]
    if passing or strict:
        return passing[:max_results]
    return [c for c in ranked if c.from_keyword and c.score >= relaxed_floor][:max_results]


def select_confident(ranked: Sequence[Candidate], confidence: float, *, min_score: float, max_results: int) -> list[Candidate]:
    """The calibrated fusion's selection: each score times the query's ``confidence``
    (:func:`query_confidence`), capped at 1, kept when it reaches ``min_score`` (no fallback below
    it), in the given order, cut to ``max_results``. Scaling after ranking keeps the order even at
    confidence 0."""
    if confidence == 1.0:
        return [c if c.score <= 1.0 else c._replace(score=1.0) for c in ranked if c.score >= min_score][:max_results]
    out = []
    for c in ranked:
        score = min(1.0, c.score * confidence)
        if score >= min_score:
            out.append(c._replace(score=score))
            if len(out) >= max_results:
                break
    return out


# -- the pipeline -----------------------------------------------------------------------------


def check_args(query: Any, max_results: Any, min_score: Any, cfg: "QueryConfig") -> tuple[str, int, float]:
    """The query (NUL bytes blanked, stripped), ``max_results`` (clamped to :data:`MAX_RESULTS`) and
    ``min_score`` (clamped to [0, 1]); defaults from ``cfg``; :class:`InvalidQueryError` on bad input."""
    if not isinstance(query, str):
        raise InvalidQueryError(f"query must be a string, got {type(query).__name__}")
    k = cfg.max_results if max_results is None else max_results
    if (
        isinstance(k, bool)
        or not isinstance(k, (int, float))
        or not math.isfinite(k)
        or k < 1
        or (isinstance(k, float) and k != int(k))
    ):
        raise InvalidQueryError(f"max_results must be a positive integer, got {max_results!r}")
    ms = cfg.effective_min_score if min_score is None else min_score
    if isinstance(ms, bool) or not isinstance(ms, (int, float)) or ms != ms or ms in (float("inf"), float("-inf")):
        raise InvalidQueryError(f"min_score must be a finite number, got {min_score!r}")
    # A caller's min_score above 1 stays above every score (a floor); the configured one is in [0, 1].
    return query.replace("\x00", " ").strip(), int(min(k, MAX_RESULTS)), max(0.0, float(ms))


def _rerank_head(
    store: "Store", query: str, merged: list[Candidate], reranker: Any, cfg: "QueryConfig", seconds: float,
    info: dict[str, Any],
) -> tuple[list[Candidate], list[float] | None]:
    """Rerank the best ``rerank.candidates`` of ``merged`` (fused order), blended by position;
    fails open (fused order, ``reranked: false`` and why). Returns the new order and, when
    reranked, a relevance per candidate for MMR (the blended order, best 1)."""
    from .rerank import blend_by_position

    n = min(len(merged), cfg.rerank.candidates)
    if n < 2:
        info["reranked"] = False
        info["rerank_error"] = "fewer than two candidates"
        return merged, None
    if LATE_CALLS.busy(reranker):
        info["reranked"] = False
        info["rerank_error"] = "reranker still busy with an earlier query that ran out of time"
        return merged, None
    head = merged[:n]
    rows = store.get_chunks([c.id for c in head])
    texts = [rows[c.id].text if c.id in rows else c.snippet for c in head]
    try:
        ok, scores = LATE_CALLS.run(reranker, lambda: reranker.rerank(query, texts), seconds)
        if not ok:
            info["reranked"] = False
            info["rerank_error"] = f"reranker timeout ({seconds * 1000:.0f} ms)"
            return merged, None
        order = blend_by_position(n, list(scores), cfg.rerank.weight)
    except Exception as exc:  # fail open: the fused order stands
        info["reranked"] = False
        info["rerank_error"] = f"{type(exc).__name__}: {exc}"[:300]
        return merged, None
    info["reranked"] = True
    out = [head[i] for i in order] + merged[n:]
    rel = [1.0 - i / len(out) for i in range(len(out))]
    return out, rel


def query_terms(query: str) -> list[str]:
    """The terms :func:`rank` searches the keyword index for."""
    return search_terms(query[:MAX_QUERY_TERM_CHARS])[:MAX_QUERY_TERMS]


#: Reads of the candidate lists when a sync replaced some of them between the reads.
_CANDIDATE_READS = 3


def rank(
    store: "Store",
    cfg: "QueryConfig",
    query: str,
    qvec: Sequence[float] | None,
    k: int,
    min_score: float,
    *,
    keyword_only: bool,
    mtime_of: Callable[[str, str], float | None],
    background: Sequence[Sequence[float]] | None = None,
    explicit_min_score: bool = False,
    reranker: Any = None,
    deadline: float | None = None,
    vectors_partial: bool = False,
) -> SearchHits:
    """Search ``store``: keyword and vector candidates -> fusion -> temporal decay -> rerank ->
    MMR -> thresholds. ``qvec`` is the query's embedding (``None`` in keyword-only mode or when it
    timed out); ``background`` the embedder's vectors of the calibration passages
    (:mod:`clawmem_core.calibration`); ``explicit_min_score``: the caller gave ``min_score``, a
    floor (no relaxed fallback); ``reranker`` (a :class:`~clawmem_core.rerank.Reranker`) runs until
    ``deadline`` (a ``time.monotonic()`` value) at the latest; ``mtime_of(path, source)`` dates the
    files that decay by modification time; ``vectors_partial``: some chunks still wait for their
    vectors (they rank by their keywords, see :func:`merge_partial`)."""
    terms = query_terms(query)
    info: dict[str, Any] = {}
    args = (store, cfg, query, terms, qvec, min_score, keyword_only, mtime_of)
    extra = dict(background=background, explicit_min_score=explicit_min_score, deadline=deadline,
                 vectors_partial=vectors_partial, days=named_days(query[:MAX_QUERY_TERM_CHARS]))
    for attempt in range(_CANDIDATE_READS):
        chosen = _choose(*args, pool=CANDIDATE_POOL, k=min(k, CANDIDATE_POOL), reranker=reranker, info=info, **extra)
        if k > CANDIDATE_POOL:
            # More than the fixed pool: the first results stay those the fixed pool gives (so results
            # are monotonic in max_results), the rest come in order from the widest pool.
            shown = {(c.source, c.path, c.start_line, c.end_line) for c in chosen}
            wide = _choose(*args, pool=MAX_RESULTS, k=MAX_RESULTS, reranker=None, info={}, **extra)
            chosen += [c for c in wide if (c.source, c.path, c.start_line, c.end_line) not in shown][: k - len(chosen)]
        rows = store.get_chunks([c.id for c in chosen])
        if all(c.id in rows for c in chosen):
            break
        # a sync replaced a chosen chunk since it was ranked: rank again (never a result without its text)
    return SearchHits(results_with_snippets(store, chosen, terms, rows), info=info)


def _choose(
    store: "Store",
    cfg: "QueryConfig",
    query: str,
    terms: list[str],
    qvec: Sequence[float] | None,
    min_score: float,
    keyword_only: bool,
    mtime_of: Callable[[str, str], float | None],
    *,
    pool: int,
    k: int,
    background: Sequence[Sequence[float]] | None,
    explicit_min_score: bool,
    reranker: Any,
    deadline: float | None,
    info: dict[str, Any],
    vectors_partial: bool = False,
    days: Collection[date] = (),
) -> list[Candidate]:
    """The best ``k`` candidates of ``pool`` drawn from each side, after fusion, decay, reranking,
    MMR and thresholds."""
    import time

    from .calibration import (background_cosines, background_level, best_of_level, blind_scripts, calibrated_cosine,
                              calibrated_cosines, translation_strength)

    hybrid = cfg.hybrid
    keyword_side = keyword_only or qvec is None or (hybrid.enabled and store.fts_available)
    # The calibrated fusion ranks a query in a script the embedder cannot tell texts apart in
    # (all-MiniLM-L6-v2 on Chinese, judged from its calibration vectors) by the keyword side alone,
    # exactly as without an embedder: that embedder's cosines there are noise, and noise reorders.
    blind = (hybrid.fusion != "openclaw" and keyword_side and not keyword_only and qvec is not None
             and bool(background) and query_script(query[:MAX_QUERY_TERM_CHARS]) in blind_scripts(background))
    for _ in range(_CANDIDATE_READS):
        kw_hits = store.keyword_search(terms, pool) if keyword_side else []
        vec_hits: list[tuple[str, float]] = []
        if qvec is not None and any(v != 0 for v in qvec) and not blind:
            vec_hits = store.vector_search(qvec, pool)
        ids = {i for i, _ in kw_hits} | {i for i, _ in vec_hits}
        meta = store.get_chunk_meta(ids)
        if len(meta) == len(ids):
            break
        # a sync replaced chunks between these reads (a file's old chunks are gone, and its new
        # ones were not among the candidates): read the candidates again, not a file in neither state

    no_vectors = keyword_only or qvec is None or blind
    vw, tw = hybrid.weights
    conf = 1.0
    part_conf: dict[str, float] | None = None  # per index searched, when there are several
    if hybrid.fusion == "openclaw":
        # OpenClaw's formula; keyword-only mode keeps its conversion (scores meet min_score alone).
        mode = hybrid.text_score if not no_vectors else "saturate"
        scores = keyword_scores([r for _, r in kw_hits], mode)
        vec_scores = [s for _, s in vec_hits]
    else:
        # Each index searched (the agent's own, and each shared namespace) is scored and judged by
        # its own term statistics and candidates, exactly as a search of that index alone: its BM25
        # came from them, and a namespace must not change how the agent's own notes score.
        parts = index_parts(store, kw_hits, vec_hits)
        stats = term_stats(store, terms, [p for p, (ki, _) in parts.items() if ki])
        ranks = prior_ranks(kw_hits, meta, terms, promoted_chunks(store, kw_hits, meta), days)
        scores = [0.0] * len(kw_hits)
        for prefix, (ki, _) in parts.items():
            hits = stats.get(prefix, (None, ""))[0]
            part_ranks = [ranks[i] for i in ki]
            if hits is None:
                part_scores = keyword_scores(part_ranks, "normalize")
            else:
                part_scores = text_relevance(part_ranks, query_idf_mass(terms, hits[1], hits[0]))
            for i, v in zip(ki, part_scores):
                scores[i] = v
        level = math.nan
        to_background: list[float] = []
        if background and qvec is not None and vec_hits:
            to_background = background_cosines(qvec, background)
            level = background_level(to_background)
        vec_scores = calibrated_cosines([s for _, s in vec_hits], level)
        if keyword_side and not no_vectors and background and hybrid.vector_weight is None and hybrid.text_weight is None:
            # Default weights: each side's evidence for this query, the vector side's counted in the embedder's strength.
            vw, tw = fusion_weights(translation_strength(background), vector_evidence(vec_hits, to_background, level),
                                    max(scores, default=0.0))
            info["fusion_weights"] = [round(vw, 4), round(tw, 4)]
        if keyword_side:
            # The query's confidence scales every score (the order stands): the share of its terms
            # the index knows (no keyword hit: none), the vector side's best calibrated score, and
            # whether the vector side agrees with the chunks the keywords rank first.
            # A half-embedded index (vectors_partial) may not have embedded the chunk that answers.
            vector_say = math.isfinite(level) and not no_vectors and not vectors_partial
            if vector_say and background and query_script(query[:MAX_QUERY_TERM_CHARS]) in blind_scripts(background):
                vector_say = False  # the embedder cannot tell texts of this script apart: no say either way
            floor = vector_doubt_floor(translation_strength(background)) if vector_say and background else VECTOR_DOUBT_FLOOR
            by_chunk = chunk_vector_scores(vec_hits, meta, to_background, level) if vector_say else {}
            judged = {}
            for prefix, (ki, vi) in parts.items():
                hits, tokenizer = stats.get(prefix, (None, ""))
                if hits is not None:
                    pairs = list(zip(terms, hits[1]))
                    if tokenizer == "trigram":  # shorter terms are never searched
                        pairs = [(t, n) for t, n in pairs if len(t) >= 3]
                    vocab = vocabulary_share([t for t, _ in pairs], [n for _, n in pairs])
                else:
                    vocab = 0.0 if terms and not ki and store.fts_available else None
                best = agree = alone = None
                if vector_say:
                    best = max((vec_scores[i] for i in vi), default=0.0)
                    agree = keyword_agreement([_chunk_key(meta.get(kw_hits[i][0])) for i in ki],
                                              [scores[i] for i in ki], by_chunk)
                    # The best of all the candidates is the best of that many draws: against the level
                    # the best of as many unrelated texts reaches.
                    top = max((vec_hits[i][1] for i in vi if math.isfinite(vec_hits[i][1])), default=math.nan)
                    many = best_of_level(to_background, len(vi)) if to_background else level
                    alone = calibrated_cosine(top, many if math.isfinite(many) else level) if math.isfinite(top) else 0.0
                judged[prefix] = (query_confidence(vocab, best, agree, alone=alone, floor=floor), {
                    "vocabulary": None if vocab is None else round(vocab, 4),
                    "vector_best": None if best is None else round(best, 4),
                    "agreement": None if agree is None else round(agree, 4),
                    "vector_alone": None if alone is None else round(alone, 4),
                    "doubt_floor": round(floor, 4),
                })
            conf, signals = judged[""]
            info["confidence"] = round(conf, 4)
            info["confidence_signals"] = signals
            if len(judged) > 1:
                part_conf = {prefix: c for prefix, (c, _) in judged.items()}
                info["namespace_confidence"] = {prefix[1:-1]: {"confidence": round(c, 4), "confidence_signals": sig}
                                                for prefix, (c, sig) in judged.items() if prefix}
    # (a candidate whose metadata is gone was removed since the candidate lists were read)
    new = tuple.__new__  # (Candidate's own constructor, without its keyword handling)
    kw = [new(Candidate, (i, m[0], m[1], m[2], m[3], "", 0.0, t, 0.0, False))
          for (i, _), t in zip(kw_hits, scores) if (m := meta.get(i))]
    vec = [new(Candidate, (i, m[0], m[1], m[2], m[3], "", s, 0.0, 0.0, False))
           for (i, _), s in zip(vec_hits, vec_scores) if (m := meta.get(i))]
    if no_vectors:
        merged = merge_hybrid([], kw, 0.0, 1.0)
    elif not keyword_side:
        merged = merge_hybrid(vec, [], 1.0, 0.0)
    elif vectors_partial:
        merged = merge_partial(vec, kw, vw, tw, store.pending_ids([c.id for c in kw]))
    else:
        merged = merge_hybrid(vec, kw, vw, tw)
    if hybrid.temporal_decay.enabled:
        merged = apply_temporal_decay(merged, hybrid.temporal_decay.half_life_days, datetime.now(timezone.utc), mtime_of)
    if part_conf is not None:  # each index's scores by its own confidence (capped at 1 when selected)
        merged = [c._replace(score=c.score * part_conf.get(id_prefix(c.id), 1.0)) for c in merged]
    merged.sort(key=lambda c: (-c.score, c.path, c.start_line))
    merged = dedupe_line_ranges(merged)
    relevance = None
    if reranker is not None and merged:
        seconds = cfg.rerank.timeout_ms / 1000.0
        if deadline is not None:
            seconds = min(seconds, deadline - time.monotonic())
        if seconds <= 0:
            info["reranked"] = False
            info["rerank_error"] = "no time left before query.timeout_ms"
        else:
            merged, relevance = _rerank_head(store, query, merged, reranker, cfg, seconds, info)
    if hybrid.mmr.enabled:
        window = with_snippets(store, merged[:MMR_WINDOW])
        merged = mmr_rerank(window + merged[MMR_WINDOW:], hybrid.mmr.lambda_, relevance=relevance)
    if hybrid.fusion == "openclaw":
        # Keyword-only: when nothing reaches min_score, the best keyword hits still answer;
        # hybrid: OpenClaw's floor min(min_score, tw). A caller's own min_score is a floor.
        floor = 0.0 if no_vectors else min(min_score, tw)
        chosen = select_results(merged, min_score=min_score, max_results=k, relaxed_floor=floor,
                                strict=cfg.strict or explicit_min_score)
    else:  # calibrated scores mean the same in every index: no fallback below min_score
        chosen = select_confident(merged, 1.0 if part_conf is not None else conf, min_score=min_score, max_results=k)
    return chosen



def results_with_snippets(store: "Store", chosen: list[Candidate], terms: Sequence[str],
                          rows: "dict[str, ChunkRow] | None" = None) -> list[SearchResult]:
    """The results, each with the part of its chunk that matched ``terms`` as its snippet (a vector
    hit's row is its best embedding window) and the lines that part shows (``rows``: the chunks'
    rows, when read already)."""
    if rows is None:
        rows = store.get_chunks([c.id for c in chosen])
    out = []
    for c in chosen:
        row = rows.get(c.id)
        snip = build_snippet(row.text if row is not None else c.snippet, c.start_line, c.end_line, terms)
        out.append(SearchResult(c.path, c.start_line, c.end_line, c.score, snip.text, c.source, c.id, c.vector_score,
                                c.text_score, snip.start_line, snip.end_line))
    return out


def with_snippets(store: "Store", cands: list[Candidate]) -> list[Candidate]:
    """Fill in the snippets (text is read only for the candidates that are shown or compared)."""
    need = [c.id for c in cands if not c.snippet]
    if not need:
        return cands
    rows = store.get_chunks(need)
    return [c if c.snippet or c.id not in rows else c._replace(snippet=truncate_snippet(rows[c.id].text)) for c in cands]
