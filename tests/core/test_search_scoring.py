"""Scoring maths of hybrid search (SPEC 6; OpenClaw tests 2-21): BM25 conversion, merge,
temporal decay, MMR and the min-score selection."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any
from datetime import datetime, timedelta, timezone

import pytest

from clawmem_core.search import (
    Candidate,
    apply_temporal_decay,
    bm25_rank_to_score,
    date_from_path,
    decay_multiplier,
    is_evergreen,
    jaccard,
    merge_hybrid,
    mmr_rerank,
    mmr_score,
    select_results,
    truncate_snippet,
)
from clawmem_core.config import HybridConfig, MemoryConfig, QueryConfig, TemporalDecayConfig
from clawmem_core.text import similarity_tokens

NOW = datetime(2026, 2, 10, tzinfo=timezone.utc)


def cand(cid: str, score: float = 0.0, *, path: str | None = None, snippet: str = "", source: str = "memory",
         start: int = 1, end: int = 1, vector: float = 0.0, text: float = 0.0, kw: bool = False) -> Candidate:
    return Candidate(cid, path or f"memory/{cid}.md", source, start, end, snippet, vector, text, score, kw)


def no_mtime(path: str, source: str) -> float | None:
    raise AssertionError(f"mtime asked for {path}")


# -- BM25 rank -> score (tests 2-3) --------------------------------------------------------------


def test_bm25_rank_conversion_values() -> None:
    assert bm25_rank_to_score(0) == pytest.approx(1.0)
    assert bm25_rank_to_score(1) == pytest.approx(0.5)
    assert bm25_rank_to_score(10) < bm25_rank_to_score(1)
    assert bm25_rank_to_score(-100) == pytest.approx(1.0, abs=0.01)
    assert bm25_rank_to_score(-3) == pytest.approx(3 / 4)


def test_bm25_more_negative_rank_scores_higher() -> None:
    a, b, c = bm25_rank_to_score(-4.2), bm25_rank_to_score(-2.1), bm25_rank_to_score(-0.5)
    assert a > b > c
    assert len({a, b, c}) == 3
    assert all(0 < s < 1 for s in (a, b, c))


@pytest.mark.parametrize("rank", [math.nan, math.inf, -math.inf])
def test_bm25_non_finite_rank_scores_one_in_a_thousand(rank: float) -> None:
    assert bm25_rank_to_score(rank) == pytest.approx(0.001)


# -- merge (tests 4-5) ---------------------------------------------------------------------------


def test_merge_is_a_weighted_union() -> None:
    vec = [cand("v", vector=0.9, snippet="vector snippet")]
    kw = [cand("k", text=1.0, snippet="keyword snippet", kw=True)]
    merged = {c.id: c for c in merge_hybrid(vec, kw, 0.7, 0.3)}
    assert set(merged) == {"v", "k"}
    assert merged["v"].score == pytest.approx(0.63)
    assert merged["k"].score == pytest.approx(0.3)
    assert merged["k"].from_keyword and not merged["v"].from_keyword


def test_merge_same_id_keeps_keyword_snippet_and_sums_scores() -> None:
    vec = [cand("x", vector=0.2, snippet="from vector")]
    kw = [cand("x", text=1.0, snippet="from keyword", kw=True)]
    merged = merge_hybrid(vec, kw, 0.5, 0.5)
    assert len(merged) == 1
    assert merged[0].snippet == "from keyword"
    assert merged[0].score == pytest.approx(0.5 * 0.2 + 0.5 * 1.0)
    assert merged[0].vector_score == pytest.approx(0.2) and merged[0].text_score == pytest.approx(1.0)


def test_merge_keeps_vector_snippet_when_keyword_snippet_empty() -> None:
    merged = merge_hybrid([cand("x", vector=0.5, snippet="vec")], [cand("x", text=0.5, snippet="")], 0.7, 0.3)
    assert merged[0].snippet == "vec"


def test_config_weights_are_normalised_to_sum_one() -> None:
    h = MemoryConfig.from_dict({"query": {"hybrid": {"vectorWeight": 2, "textWeight": 2}}}).query.hybrid
    assert h.weights == (pytest.approx(0.5), pytest.approx(0.5))
    # Both zero: the fusion's defaults (calibrated 0.3 / 0.7, OpenClaw 0.7 / 0.3).
    h = MemoryConfig.from_dict({"query": {"hybrid": {"vectorWeight": 0, "textWeight": 0}}}).query.hybrid
    assert h.weights == (pytest.approx(0.3), pytest.approx(0.7))
    h = MemoryConfig.from_dict({"query": {"hybrid": {"vectorWeight": 0, "textWeight": 0, "fusion": "openclaw"}}}).query.hybrid
    assert h.weights == (pytest.approx(0.7), pytest.approx(0.3))
    assert MemoryConfig().query.hybrid.weights == (pytest.approx(0.3), pytest.approx(0.7))
    # One set: the other takes the fusion's default, then both are normalised.
    h = MemoryConfig.from_dict({"query": {"hybrid": {"vectorWeight": 0.7}}}).query.hybrid
    assert h.weights == (pytest.approx(0.5), pytest.approx(0.5))


# -- temporal decay (tests 6-11) -----------------------------------------------------------------


def test_decay_multiplier_follows_the_half_life() -> None:
    assert decay_multiplier(10, 30) == pytest.approx(math.exp(-math.log(2) / 30 * 10))
    assert decay_multiplier(30, 30) == pytest.approx(0.5)
    assert decay_multiplier(0, 30) == pytest.approx(1.0)
    assert decay_multiplier(-5, 30) == pytest.approx(1.0)  # future counts as today


def test_score_decays_proportionally_with_age() -> None:
    item = cand("a", 0.8, path="memory/2026-01-31.md")  # 10 days before NOW
    [out] = apply_temporal_decay([item], 30, NOW, no_mtime)
    assert out.score == pytest.approx(0.8 * math.exp(-math.log(2) / 30 * 10))


def test_evergreen_files_never_decay() -> None:
    items = [cand("m", 1.0, path="MEMORY.md"), cand("l", 0.9, path="memory.md"),
             cand("p", 0.75, path="memory/projects.md"), cand("n", 0.6, path="memory/team/people.md")]
    out = apply_temporal_decay(items, 30, NOW, no_mtime)
    assert [c.score for c in out] == [1.0, 0.9, 0.75, 0.6]


def test_old_dated_note_ranks_below_a_fresh_one_after_decay() -> None:
    items = [cand("old", 0.95, path="memory/2025-01-01.md"), cand("new", 0.8, path="memory/2026-02-10.md")]
    out = sorted(apply_temporal_decay(items, 30, NOW, no_mtime), key=lambda c: -c.score)
    assert [c.id for c in out] == ["new", "old"]
    assert out[0].score == pytest.approx(0.8)


def test_future_today_and_ancient_dates() -> None:
    items = [cand("future", 0.9, path="memory/2099-01-01.md"), cand("today", 0.8, path="memory/2026-02-10.md"),
             cand("ancient", 1.0, path="memory/2000-01-01.md")]
    out = {c.id: c.score for c in apply_temporal_decay(items, 30, NOW, no_mtime)}
    assert out["future"] == pytest.approx(0.9)
    assert out["today"] == pytest.approx(0.8)
    assert out["ancient"] < 0.001


def test_files_outside_memory_use_their_mtime() -> None:
    thirty_days_ago = (NOW - timedelta(days=30)).timestamp()
    asked: list[tuple[str, str]] = []

    def mtime(path: str, source: str) -> float | None:
        asked.append((path, source))
        return thirty_days_ago

    items = [cand("s", 1.0, path="sessions/thread.jsonl", source="sessions"), cand("x", 1.0, path="../team/x.md")]
    out = apply_temporal_decay(items, 30, NOW, mtime)
    assert [c.score for c in out] == [pytest.approx(0.5), pytest.approx(0.5)]
    assert ("sessions/thread.jsonl", "sessions") in asked


def test_mtime_lookup_is_memoised_per_file_and_missing_mtime_means_no_decay() -> None:
    calls: list[str] = []

    def mtime(path: str, source: str) -> float | None:
        calls.append(path)
        return None

    items = [cand("a", 0.7, path="notes/x.md", start=1), cand("b", 0.6, path="notes/x.md", start=20)]
    out = apply_temporal_decay(items, 30, NOW, mtime)
    assert calls == ["notes/x.md"]
    assert [c.score for c in out] == [0.7, 0.6]


@pytest.mark.parametrize(
    "path, expected",
    [
        ("memory/2026-01-05.md", (2026, 1, 5)),
        ("memory/sub/2026-01-05.md", (2026, 1, 5)),  # [beyond] subfolder
        ("memory/2026/01/2026-01-05.md", (2026, 1, 5)),
        ("memory/2026-01-05-standup.md", (2026, 1, 5)),  # [beyond] -slug suffix
        ("memory/2026-01-05-1430.md", (2026, 1, 5)),
        ("memory/team/2026-01-05-retro-notes.md", (2026, 1, 5)),
        ("memory/2026-13-45.md", None),  # not a real date
        ("memory/2026-02-30.md", None),
        ("memory/notes-2026-01-05.md", None),
        ("memory/projects.md", None),
        ("notes/2026-01-05.md", None),  # outside memory/
        ("MEMORY.md", None),
    ],
)
def test_date_from_path(path: str, expected: tuple[int, int, int] | None) -> None:
    d = date_from_path(path)
    assert (None if d is None else (d.year, d.month, d.day)) == expected


def test_dated_notes_in_subfolders_and_with_slugs_decay() -> None:
    items = [cand("sub", 1.0, path="memory/journal/2026-01-11.md"),
             cand("slug", 1.0, path="memory/2026-01-11-standup.md")]
    out = apply_temporal_decay(items, 30, NOW, no_mtime)
    assert [c.score for c in out] == [pytest.approx(0.5), pytest.approx(0.5)]


def test_evergreen_rules() -> None:
    assert is_evergreen("MEMORY.md", "memory") and is_evergreen("memory.md", "memory")
    assert is_evergreen("memory/projects.md", "memory")
    assert not is_evergreen("memory/2026-01-05.md", "memory")
    assert not is_evergreen("memory/sub/2026-01-05-x.md", "memory")
    assert not is_evergreen("notes/x.md", "memory")
    assert not is_evergreen("MEMORY.md", "sessions")


def test_undated_notes_under_an_extra_paths_memory_folder_are_evergreen() -> None:
    items = [cand("team", 1.0, path="../team/memory/notes.md"),
             cand("abs", 1.0, path="/srv/team/memory/projects/roadmap.md"),
             cand("daily", 1.0, path="../team/memory/2026-01-11.md")]
    out = apply_temporal_decay(items, 30, NOW, no_mtime)
    assert [c.score for c in out] == [1.0, 1.0, pytest.approx(0.5)]
    assert is_evergreen("../team/memory/notes.md", "memory")
    assert not is_evergreen("../team/notes.md", "memory")


def test_extra_path_memory_notes_keep_their_score_under_decay(tmp_path: Path, open_index: Any) -> None:
    """Through a real index: an extra path's undated ``memory/notes.md`` a year old keeps its full
    score, the same text in a dated daily note (or outside ``memory/``) of that age decays."""
    text = "quarterly review of the budget spreadsheet\n"
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Preferences\n\nI like jazz music.\n", encoding="utf-8")
    team = tmp_path / "team"
    (team / "memory").mkdir(parents=True)
    year_ago = datetime.now(timezone.utc) - timedelta(days=365)
    files = [team / "memory" / "notes.md", team / "memory" / f"{year_ago:%Y-%m-%d}.md", team / "plain.md"]
    for f in files:
        f.write_text(text, encoding="utf-8")
        os.utime(f, (year_ago.timestamp(), year_ago.timestamp()))

    def scores(decay: bool) -> dict[str, float]:
        hybrid = HybridConfig(temporal_decay=TemporalDecayConfig(enabled=decay, half_life_days=30))
        config = MemoryConfig(extra_paths=[str(team)], query=QueryConfig(hybrid=hybrid))
        mem = open_index(ws, config=config)
        mem.sync()
        hits = {h.path: h.score for h in mem.search("quarterly budget review", min_score=0)}
        mem.close()
        return hits

    plain, decayed = scores(False), scores(True)
    notes, daily, loose = "../team/memory/notes.md", f"../team/memory/{year_ago:%Y-%m-%d}.md", "../team/plain.md"
    assert plain[notes] == plain[daily] == plain[loose] > 0.5  # the same text: the same score without decay
    assert decayed[notes] == pytest.approx(plain[notes])  # evergreen: not decayed
    assert decayed.get(daily, 0.0) < 0.001 * plain[daily]  # 2 ** -(365 / 30)
    assert decayed.get(loose, 0.0) < 0.001 * plain[loose]  # outside memory/: decayed by its mtime


# -- MMR (tests 13-21) ---------------------------------------------------------------------------


def test_jaccard() -> None:
    assert jaccard({"a", "b"}, {"a", "b"}) == 1.0
    assert jaccard({"a"}, {"b"}) == 0.0
    assert jaccard(set(), set()) == 1.0
    assert jaccard({"a"}, set()) == 0.0 and jaccard(set(), {"a"}) == 0.0
    assert jaccard({"a", "b", "c"}, {"b", "c", "d"}) == pytest.approx(0.5)
    assert jaccard({"a", "b", "c"}, {"c", "d"}) == jaccard({"c", "d"}, {"a", "b", "c"})


def test_text_similarity_is_case_and_order_insensitive() -> None:
    assert jaccard(similarity_tokens("Hello World"), similarity_tokens("world HELLO")) == 1.0


def test_mmr_score_formula() -> None:
    assert mmr_score(0.8, 0.5, 1) == pytest.approx(0.8)
    assert mmr_score(0.8, 0.5, 0) == pytest.approx(-0.5)
    assert mmr_score(0.8, 0.6, 0.5) == pytest.approx(0.1)
    assert mmr_score(1.0, 0.5, 0.7) == pytest.approx(0.55)


def test_mmr_trivial_inputs() -> None:
    assert mmr_rerank([]) == []
    one = [cand("a", 1.0, snippet="x")]
    out = mmr_rerank(one)
    assert out == one and out is not one


FRUIT = [cand("1", 1.0, snippet="apple banana cherry"), cand("2", 0.9, snippet="apple banana date"),
         cand("3", 0.8, snippet="elderberry fig grape")]


def test_mmr_lambda_zero_picks_the_most_different_second() -> None:
    assert [c.id for c in mmr_rerank(FRUIT, 0.0)][:2] == ["1", "3"]


def test_mmr_lambda_is_clamped() -> None:
    assert [c.id for c in mmr_rerank(FRUIT, 1.5)] == ["1", "2", "3"]
    assert [c.id for c in mmr_rerank(FRUIT, -0.5)][:2] == ["1", "3"]
    assert [c.id for c in mmr_rerank(FRUIT, math.nan)] == [c.id for c in mmr_rerank(FRUIT, 0.7)]


def test_mmr_balances_relevance_and_diversity() -> None:
    items = [cand("a", 1.0, snippet="machine learning neural networks"),
             cand("b", 0.95, snippet="machine learning deep networks"),
             cand("c", 0.9, snippet="database sql queries"),
             cand("d", 0.85, snippet="machine learning algorithms")]
    out = mmr_rerank(items, 0.5)
    assert out[1].id == "c"
    assert sorted(c.id for c in out) == ["a", "b", "c", "d"]  # reorders, never drops


def test_mmr_identical_content() -> None:
    items = [cand("a", 1.0, snippet="same text"), cand("b", 0.9, snippet="same text"),
             cand("c", 0.8, snippet="other words")]
    assert [c.id for c in mmr_rerank(items, 0.5)][1] == "c"
    same = [cand(str(i), 1.0 - i / 10, snippet="same text") for i in range(3)]
    assert len(mmr_rerank(same, 0.5)) == 3
    equal = [cand(str(i), 0.5, snippet=f"text {i}") for i in range(4)]
    assert sorted(c.id for c in mmr_rerank(equal, 0.7)) == ["0", "1", "2", "3"]


def test_mmr_negative_scores_keep_the_higher_first() -> None:
    items = [cand("low", -0.5, snippet="a b"), cand("high", -0.1, snippet="c d")]
    assert mmr_rerank(sorted(items, key=lambda c: -c.score), 0.7)[0].id == "high"


def test_mmr_keeps_fields_and_two_chunks_of_one_file() -> None:
    items = [cand("x1", 1.0, path="/a.ts", start=1, end=5, snippet="alpha beta gamma"),
             cand("x2", 0.9, path="/a.ts", start=10, end=15, snippet="alpha beta gamma delta"),
             cand("y", 0.8, path="/c.ts", start=1, end=2, snippet="zeta eta theta")]
    out = mmr_rerank(items, 0.5)
    assert out[1].path == "/c.ts"
    assert {(c.path, c.start_line, c.end_line, c.snippet, c.score) for c in out} == {
        (c.path, c.start_line, c.end_line, c.snippet, c.score) for c in items}


def test_mmr_uses_cjk_unigrams_and_bigrams() -> None:
    # Without CJK tokens all three snippets would have empty token sets (similarity 1), and
    # diversity could not tell the near-duplicate Chinese note from the different one.
    items = [cand("a", 1.0, snippet="今天我们讨论了部署方案"),
             cand("b", 0.95, snippet="今天我们讨论了部署方案和时间"),
             cand("c", 0.9, snippet="周末去公园散步看花")]
    assert [c.id for c in mmr_rerank(items, 0.5)] == ["a", "c", "b"]


#: Two themes (a, c: fruit; b, d: instruments), f half of each, e unrelated. Each candidate's
#: penalty is its *largest* similarity to the results already chosen: with the mean, the minimum,
#: the last or the first chosen result, or the sum, the order from the third pick on differs.
MMR_THEMES = {
    "en": (["apple banana cherry grape", "violin cello flute drum", "apple banana cherry kiwi",
            "violin cello flute harp", "apple banana violin cello", "river mountain forest lake"],
           ["a", "b", "e", "f", "c", "d"]),
    "zh": (["苹果香蕉樱桃葡萄", "小提琴大提琴长笛鼓", "苹果香蕉樱桃猕猴桃", "小提琴大提琴长笛竖琴",
            "苹果香蕉小提琴大提琴", "河流高山森林湖泊"],
           ["a", "b", "e", "c", "f", "d"]),
}


@pytest.mark.parametrize("lang", sorted(MMR_THEMES))
def test_mmr_penalises_the_largest_similarity_to_the_chosen(lang: str) -> None:
    snippets, expected = MMR_THEMES[lang]
    items = [cand(cid, score, snippet=text)
             for cid, score, text in zip("abcdfe", [1.0, 0.9, 0.8, 0.75, 0.72, 0.6], snippets)]
    assert [c.id for c in mmr_rerank(items, 0.5)] == expected


def test_mmr_defaults_off_with_lambda_point_seven() -> None:
    mmr = MemoryConfig().query.hybrid.mmr
    assert (mmr.enabled, mmr.lambda_) == (False, 0.7)


# -- selection -----------------------------------------------------------------------------------


RANKED = [cand("v", 0.5, vector=0.7), cand("k1", 0.29, text=0.97, kw=True), cand("k2", 0.2, text=0.66, kw=True)]


def test_select_filters_by_min_score_and_cuts() -> None:
    out = select_results(RANKED, min_score=0.25, max_results=6, relaxed_floor=0.25)
    assert [c.id for c in out] == ["v", "k1"]
    assert [c.id for c in select_results(RANKED, min_score=0.0, max_results=2, relaxed_floor=0.0)] == ["v", "k1"]


def test_relaxed_fallback_returns_keyword_hits_above_the_floor() -> None:
    out = select_results(RANKED, min_score=0.9, max_results=6, relaxed_floor=min(0.9, 0.25))
    assert [c.id for c in out] == ["k1"]  # keyword hits only, at least the floor


def test_strict_selection_never_returns_below_min_score() -> None:
    assert select_results(RANKED, min_score=0.9, max_results=6, relaxed_floor=0.25, strict=True) == []
    out = select_results(RANKED, min_score=0.25, max_results=6, relaxed_floor=0.0, strict=True)
    assert all(c.score >= 0.25 for c in out) and len(out) == 2


def test_snippet_is_at_most_700_characters_and_pair_safe() -> None:
    assert truncate_snippet("a" * 1000) == "a" * 700
    assert truncate_snippet("short") == "short"
    utf16ish = "a" * 699 + "\ud83d\ude00"  # a surrogate pair as two code units
    assert truncate_snippet(utf16ish) == "a" * 699


def test_keyword_scores_saturate_by_default_and_normalize_on_request() -> None:
    from clawmem_core.search import keyword_scores

    ranks = [-12.0, -6.0, -3.0, 0.5]
    assert keyword_scores(ranks) == [bm25_rank_to_score(r) for r in ranks]
    assert keyword_scores(ranks, "normalize") == [1.0, 0.5, 0.25, 0.0]
    assert keyword_scores([], "normalize") == []
    assert keyword_scores([0.0, float("nan")], "normalize") == [0.0, 0.0]


def test_normalized_keyword_scores_change_the_hybrid_balance(tmp_path: Path) -> None:
    from clawmem_core import MemoryConfig, MemoryIndex
    from clawmem_core.config import HybridConfig, QueryConfig
    from clawmem_core.testing import HashEmbedder

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    for i in range(30):
        (ws / "memory" / f"note-{i}.md").write_text(f"note {i} about gardening and tomatoes {i}\n")
    (ws / "memory" / "target.md").write_text("the zephyrine protocol was approved on tuesday\n")
    results = {}
    for mode in ("saturate", "normalize"):
        cfg = MemoryConfig(query=QueryConfig(hybrid=HybridConfig(text_score=mode, fusion="openclaw")))
        with MemoryIndex(ws, config=cfg, embedder=HashEmbedder(), state_dir=tmp_path / mode) as mem:
            mem.sync()
            hits = mem.search("zephyrine protocol", min_score=0)
            results[mode] = hits
    best = {m: next(h for h in r if h.path == "memory/target.md") for m, r in results.items()}
    assert best["normalize"].text_score == 1.0
    assert 0 < best["saturate"].text_score < 1.0
