"""The tuned numbers of ranking: every constant the scoring code uses, named, in one place.

Each constant carries one line of reason and a link to the section of ``docs/decisions.md`` that
records why it has this value (and the measurement behind it). The scoring modules
(:mod:`clawmem_core.search`, :mod:`clawmem_core.calibration`, :mod:`clawmem_core.rerank`,
:mod:`clawmem_core.snippets`, :mod:`clawmem_core.store.bm25`) and the defaults of
:mod:`clawmem_core.config` import them from here; ``tests/core/test_tuning.py`` checks that every
constant is documented and that those modules hold no other tuned float literal.

Changing a value here changes search results: measure it first (``python -m bench``,
``python -m bench.matrix``, ``python -m bench.abstention``) and update the decision it links to.
"""

from __future__ import annotations

# -- the two fusions ---------------------------------------------------------------------------

#: Calibrated fusion, vector weight: both sides are on an absolute 0-1 scale and the keyword side is
#: the stronger one on every data set measured. The least vector weight a query gets: that of an embedder
#: that has not shown it reads meaning, and of a query its vector side finds nothing for.
#: docs/decisions.md#the-calibrated-fusion-is-the-default-openclaws-formula-is-a-setting
#: docs/decisions.md#the-calibrated-fusions-weights-follow-the-embedders-measured-strength
CALIBRATED_VECTOR_WEIGHT = 0.3
#: Calibrated fusion, text (keyword) weight: the complement of :data:`CALIBRATED_VECTOR_WEIGHT`.
#: docs/decisions.md#the-calibrated-fusion-is-the-default-openclaws-formula-is-a-setting
CALIBRATED_TEXT_WEIGHT = 0.7
#: Calibrated fusion, default ``min_score``: calibrated scores mean the same for every embedder, so one
#: threshold abstains on foreign questions at little recall cost.
#: docs/decisions.md#the-calibrated-fusion-is-the-default-openclaws-formula-is-a-setting
CALIBRATED_MIN_SCORE = 0.2
#: OpenClaw's fusion, vector weight: OpenClaw's own default, kept bit for bit. Also the most vector weight
#: the calibrated fusion gives a query (its keyword side keeps at least OpenClaw's share).
#: docs/decisions.md#the-calibrated-fusion-is-the-default-openclaws-formula-is-a-setting
#: docs/decisions.md#the-calibrated-fusions-weights-follow-the-embedders-measured-strength
OPENCLAW_VECTOR_WEIGHT = 0.7
#: OpenClaw's fusion, text weight: OpenClaw's own default, kept bit for bit.
#: docs/decisions.md#the-calibrated-fusion-is-the-default-openclaws-formula-is-a-setting
OPENCLAW_TEXT_WEIGHT = 0.3
#: OpenClaw's fusion, default ``min_score``: OpenClaw's own default, kept bit for bit.
#: docs/decisions.md#the-calibrated-fusion-is-the-default-openclaws-formula-is-a-setting
OPENCLAW_MIN_SCORE = 0.35

# -- calibration of the vector side ------------------------------------------------------------

#: The percentile of a query's cosines to the calibration passages taken as its "unrelated" level:
#: high enough that a chunk above it stands out from unrelated text.
#: docs/decisions.md#the-calibrated-fusion-is-the-default-openclaws-formula-is-a-setting
BACKGROUND_PERCENTILE = 90.0
#: An embedder is blind to a script when unrelated passages in it are, on average, this much more
#: alike (mean pairwise cosine) than unrelated passages in the other script (all-MiniLM-L6-v2 on
#: Chinese: 0.59 against 0.05).
#: docs/decisions.md#the-calibrated-fusion-is-the-default-openclaws-formula-is-a-setting
BLIND_MARGIN = 0.2

# -- the query's confidence (abstention) -------------------------------------------------------

#: A query counts as fully known to the index when this share of its terms occurs in it; below it,
#: its scores are scaled down (with the square of the missing share).
#: docs/decisions.md#each-querys-scores-are-scaled-by-its-confidence-the-order-is-unchanged
VOCABULARY_FULL = 0.6
#: The vector side's evidence that leaves a query's scores as they are: a calibrated vector score this
#: far above unrelated text; below it the scores are scaled down in proportion, above it up.
#: docs/decisions.md#each-querys-scores-are-scaled-by-its-confidence-the-order-is-unchanged
VECTOR_FULL = 0.25
#: The vector side alone scales a query's scores down to this share at most: a weak embedder doubts,
#: it does not veto a strong keyword match.
#: docs/decisions.md#each-querys-scores-are-scaled-by-its-confidence-the-order-is-unchanged
VECTOR_DOUBT_FLOOR = 0.7
#: The doubt floor of an embedder that recognises meaning (translation strength :data:`VECTOR_FULL` or
#: more): its doubt, when it backs none of the keyword side's chunks, is worth more.
#: docs/decisions.md#each-querys-scores-are-scaled-by-its-confidence-the-order-is-unchanged
VECTOR_DOUBT_FLOOR_STRONG = 0.4
#: The vector side scales a query's scores up by at most this factor (scores stay at most 1): two
#: independent sides that agree confirm each other, by up to a third.
#: docs/decisions.md#each-querys-scores-are-scaled-by-its-confidence-the-order-is-unchanged
VECTOR_CONFIRMS = 4 / 3
#: A vector match among chunks the keywords do not pick counts at this share: weaker evidence than one
#: the keyword side agrees with (a foreign question still lands near some chunk).
#: docs/decisions.md#each-querys-scores-are-scaled-by-its-confidence-the-order-is-unchanged
VECTOR_ALONE = 0.7
#: How many of the keyword side's best chunks are checked for the vector side's agreement: about the
#: results a search shows.
#: docs/decisions.md#each-querys-scores-are-scaled-by-its-confidence-the-order-is-unchanged
AGREEMENT_CHUNKS = 5
#: A best calibrated vector score this high vouches for the query whatever its words (a paraphrase,
#: another language): the vocabulary factor is then at least ``best / VECTOR_VOUCHES``.
#: docs/decisions.md#each-querys-scores-are-scaled-by-its-confidence-the-order-is-unchanged
VECTOR_VOUCHES = 0.35

# -- the keyword side --------------------------------------------------------------------------

#: The BM25 of ``MEMORY.md`` and of a note named for a query term counts this many times: BM25's
#: length normalisation otherwise ranks the curated memory below passing mentions in short notes.
#: docs/decisions.md#memorymd-and-notes-named-for-a-query-word-count-their-bm25-twice
CURATED_PRIOR = 2.0
#: FTS5's ``bm25()`` k1: the in-process BM25 must give FTS5's numbers.
#: docs/decisions.md#values-kept-from-openclaw-fts5-and-the-specification
BM25_K1 = 1.2
#: FTS5's ``bm25()`` b: the in-process BM25 must give FTS5's numbers.
#: docs/decisions.md#values-kept-from-openclaw-fts5-and-the-specification
BM25_B = 0.75
#: FTS5's floor on a term's BM25 IDF (a term in half the rows or more): kept so scores match FTS5's.
#: docs/decisions.md#values-kept-from-openclaw-fts5-and-the-specification
FTS5_IDF_FLOOR = 1e-6

# -- candidates, reranking, MMR, decay ---------------------------------------------------------

#: Candidates drawn from each side, fixed (OpenClaw's ``min(200, max_results * multiplier)`` at its
#: cap) so that results are monotonic in ``max_results``.
#: docs/decisions.md#values-kept-from-openclaw-fts5-and-the-specification
CANDIDATE_POOL = 200
#: ``query.hybrid.candidate_multiplier`` default: OpenClaw's setting, accepted and clamped (the pool is
#: :data:`CANDIDATE_POOL`).
#: docs/decisions.md#values-kept-from-openclaw-fts5-and-the-specification
CANDIDATE_MULTIPLIER = 4
#: ``query.max_results`` default: OpenClaw's, about what an agent reads of a search's answer.
#: docs/decisions.md#values-kept-from-openclaw-fts5-and-the-specification
MAX_RESULTS_DEFAULT = 6
#: A reranker's order counts at this weight against the fused order: a reranker that reverses the
#: fused order leaves it as it is; at 0.5 weak rerankers cost real recall.
#: docs/decisions.md#a-rerankers-order-is-blended-at-weight-025
RERANK_WEIGHT = 0.25
#: Positions are blended as ``1 / (RERANK_BLEND_K + position)``: the usual constant of reciprocal rank
#: fusion, which keeps the fused order's first places hard to overturn.
#: docs/decisions.md#a-rerankers-order-is-blended-at-weight-025
RERANK_BLEND_K = 60
#: How many of the best fused candidates a reranker sees: a few results' worth more than a search shows.
#: docs/decisions.md#a-rerankers-order-is-blended-at-weight-025
RERANK_CANDIDATES = 40
#: MMR's relevance weight against diversity (``query.hybrid.mmr.lambda``): OpenClaw's default.
#: docs/decisions.md#values-kept-from-openclaw-fts5-and-the-specification
MMR_LAMBDA = 0.7
#: MMR re-ranks this many of the best candidates: the greedy loop is quadratic, and nothing below the
#: top few dozen reaches an answer.
#: docs/decisions.md#values-kept-from-openclaw-fts5-and-the-specification
MMR_WINDOW = 60
#: Temporal decay's half-life in days (``query.hybrid.temporal_decay.half_life_days``): OpenClaw's.
#: docs/decisions.md#values-kept-from-openclaw-fts5-and-the-specification
TEMPORAL_DECAY_HALF_LIFE_DAYS = 30

# -- snippets ----------------------------------------------------------------------------------

#: A result's snippet shows at most this many characters (SPEC 6, as OpenClaw's).
#: docs/decisions.md#values-kept-from-openclaw-fts5-and-the-specification
SNIPPET_MAX_CHARS = 700
#: In choosing a snippet's lines, one CJK character as a query term weighs this much against a word or
#: a character pair: a single character says little.
#: docs/decisions.md#values-kept-from-openclaw-fts5-and-the-specification
SNIPPET_CJK_CHAR_WEIGHT = 0.25
#: How far a snippet's cut may move back to reach a space (beyond it, it falls between characters).
#: docs/decisions.md#values-kept-from-openclaw-fts5-and-the-specification
SNIPPET_WORD_REACH = 40

# -- consolidation ("dreaming") ----------------------------------------------------------------

#: Recall events are kept this many days: long enough for a fact recalled about once a month to gather the
#: recalls promotion asks for, short enough that the log stays small.
#: docs/decisions.md#consolidations-defaults
RECALL_MAX_AGE_DAYS = 90.0
#: A model's rewrite of ``MEMORY.md`` may lose at most this fraction of its prior entries: OpenClaw's
#: loss limit, so one bad answer cannot empty the file.
#: docs/decisions.md#consolidations-defaults
PROMOTION_MAX_LOSS_FRACTION = 0.25
#: A candidate's recency halves every this many days: the last two weeks' recalls lead, an old burst fades.
#: docs/decisions.md#consolidations-defaults
PROMOTION_HALF_LIFE_DAYS = 14.0

# -- indexing speed ------------------------------------------------------------------------------

#: The vector phase doubles its next group of chunks (up to the store's ``vector_group_max``) after a
#: group quicker than this (seconds), and halves it after one over twice this: a store whose
#: commits wait for a disk writes few large transactions, while a stop or a deadline is still seen
#: within about a second.
#: docs/decisions.md#the-vector-phases-group-size
VECTOR_GROUP_SECONDS = 0.25
