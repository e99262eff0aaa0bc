"""Abstention of the calibrated fusion: a question about something absent from the memory returns
nothing at the default ``min_score`` (the query's confidence scales its scores), while questions the
memory answers are still answered, in English and Chinese, keyword-only and hybrid."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import pytest

from clawmem_core import MemoryConfig, MemoryIndex
from clawmem_core.calibration import (
    BACKGROUND_LATIN,
    BACKGROUND_TEXTS,
    TRANSLATED_PAIRS,
    background_level,
    best_of_level,
    blind_scripts,
    calibrated_cosine,
    translation_strength,
)
from clawmem_core.search import (
    AGREEMENT_CHUNKS,
    CALIBRATED_VECTOR_WEIGHT,
    OPENCLAW_VECTOR_WEIGHT,
    VECTOR_ALONE,
    VECTOR_CONFIRMS,
    VECTOR_DOUBT_FLOOR,
    VECTOR_DOUBT_FLOOR_STRONG,
    VECTOR_FULL,
    VECTOR_VOUCHES,
    VOCABULARY_FULL,
    chunk_vector_scores,
    fusion_weights,
    keyword_agreement,
    query_confidence,
    query_script,
    select_confident,
    vector_doubt_floor,
    vector_evidence,
    vocabulary_share,
    Candidate,
)
from clawmem_core.testing import HashEmbedder
from clawmem_core.tools import search_payload

from .conftest import write_files

_EN_NOTES = [
    "Ordered compost and mulch for the vegetable garden.",
    "The hardware store delivers the new hose on Friday; the store also stocks seed trays.",
    "Pruned the apple tree and planted garlic cloves in row three.",
    "Slugs ate the lettuce seedlings; set beer traps along the beds.",
    "Turned the compost heap and added dry leaves.",
    "Sowed carrots and radishes in the raised bed by the shed.",
    "Repaired the greenhouse door hinge with a brass screw.",
    "Harvested the first strawberries; the blackbirds got half of them.",
    "Tied the climbing beans to bamboo canes.",
    "Mowed the lawn and sharpened the shears.",
    "Spread wood chips on the path between the beds.",
    "Cleaned the rain barrel filter after the storm.",
]
EN_FILES = {
    "MEMORY.md": "# Garden\n\nThe tomato beds get water every morning before work.\n"
                 "Basil grows best next to the tomatoes on the south fence.\n",
    **{f"memory/2026-03-{i + 1:02d}.md": f"- {line}\n" for i, line in enumerate(_EN_NOTES)},
}

_ZH_NOTES = [
    "给菜园订了堆肥和覆盖物。",
    "五金店周五送新水管，店里也卖育苗盘。",
    "修剪了苹果树，在第三排种了大蒜。",
    "蛞蝓吃了生菜苗，在菜畦边放了啤酒陷阱。",
    "翻了堆肥，加了干树叶。",
    "在棚屋旁的高床里播了胡萝卜和萝卜。",
    "用铜螺丝修好了温室门的合页。",
    "摘了第一批草莓，一半被乌鸫吃了。",
    "把爬藤豆绑在竹竿上。",
    "割了草坪，磨了剪刀。",
    "在菜畦之间的小路上铺了木屑。",
    "暴雨后清洗了雨水桶的过滤网。",
]
ZH_FILES = {
    "MEMORY.md": "# 花园\n\n每天早上上班前给番茄浇水。\n罗勒种在南边篱笆旁的番茄旁边长得最好。\n",
    **{f"memory/2026-03-{i + 1:02d}.md": f"- {line}\n" for i, line in enumerate(_ZH_NOTES)},
}


def _index(tmp_path: Path, files: dict[str, str], embedder: Any = None, **query: Any) -> MemoryIndex:
    ws = write_files(tmp_path / "ws", files)
    cfg = MemoryConfig() if embedder is not None else MemoryConfig(provider="none")
    for key, value in query.items():
        setattr(cfg.query, key, value)
    mem = MemoryIndex(ws, config=cfg, embedder=embedder, state_dir=tmp_path / "state")
    mem.sync()
    return mem


# -- the pieces ------------------------------------------------------------------------------


def test_vocabulary_share_counts_terms_the_index_knows() -> None:
    assert vocabulary_share(["gina", "store"], [0, 3]) == 0.5
    assert vocabulary_share(["tomato", "water"], [2, 1]) == 1.0
    # An absent CJK pair does not count (pairs straddling two words exist in no text) ...
    assert vocabulary_share(["番", "茄", "番茄", "茄浇"], [2, 2, 2, 0]) == 1.0
    # ... an absent CJK character does.
    assert vocabulary_share(["液", "氮", "液氮"], [0, 0, 0]) == 0.0
    assert vocabulary_share([], []) is None
    assert vocabulary_share(["茄浇"], [0]) is None


def test_query_confidence_bounds_and_factors() -> None:
    assert query_confidence(None, None) == 1.0
    assert query_confidence(0.0, None) == 0.0
    # The vocabulary factor falls with the square of the share below VOCABULARY_FULL.
    assert query_confidence(VOCABULARY_FULL / 2, None) == pytest.approx(0.25)
    assert query_confidence(VOCABULARY_FULL, None) == 1.0
    # Keyword-only: the vocabulary alone, never above 1.
    assert query_confidence(1.0, None) == 1.0
    # The vector side agrees with the keyword side's chunks at exactly VECTOR_FULL: unchanged.
    assert query_confidence(1.0, VECTOR_FULL, VECTOR_FULL) == pytest.approx(1.0)
    # Agreement well above it confirms (up to VECTOR_CONFIRMS) ...
    assert query_confidence(1.0, 0.9, 0.9) == pytest.approx(VECTOR_CONFIRMS)
    # ... a vector match the keyword side's chunks do not share counts at VECTOR_ALONE ...
    assert query_confidence(1.0, 0.3, 0.0) == pytest.approx(VECTOR_ALONE * 0.3 / VECTOR_FULL)
    assert query_confidence(1.0, 0.3) == pytest.approx(VECTOR_ALONE * 0.3 / VECTOR_FULL)
    assert query_confidence(1.0, 0.3, 0.3) == pytest.approx(0.3 / VECTOR_FULL)
    # ... and nothing above unrelated text doubts down to the floor, not below.
    assert query_confidence(1.0, 0.0, 0.0) == VECTOR_DOUBT_FLOOR
    # A strong vector match vouches for a query whose words the index does not know (a paraphrase).
    assert query_confidence(0.0, VECTOR_VOUCHES, VECTOR_FULL) == pytest.approx(1.0)
    assert query_confidence(0.0, 0.1, 0.0) == pytest.approx(0.1 / VECTOR_VOUCHES * VECTOR_DOUBT_FLOOR)
    # The vector side alone counts at its best-of-many score when given, the best chunk still vouches.
    assert query_confidence(1.0, 0.3, 0.0, alone=0.1) == pytest.approx(VECTOR_DOUBT_FLOOR)
    assert query_confidence(1.0, 0.3, 0.0, alone=0.3) == pytest.approx(VECTOR_ALONE * 0.3 / VECTOR_FULL)
    assert query_confidence(0.0, VECTOR_VOUCHES, 0.0, alone=0.0) == pytest.approx(VECTOR_DOUBT_FLOOR)
    # The floor is the caller's (an embedder that recognises meaning doubts further).
    assert query_confidence(1.0, 0.0, 0.0, floor=VECTOR_DOUBT_FLOOR_STRONG) == VECTOR_DOUBT_FLOOR_STRONG
    for vocab in (None, 0.0, 0.2, 0.7, 1.0, math.nan):
        for best in (None, 0.0, 0.1, 0.3, 0.9, math.nan, -1.0, 5.0):
            for agree in (None, 0.0, 0.3, math.nan, 7.0, -2.0):
                for alone in (None, 0.0, 0.5, math.nan, 3.0):
                    for floor in (VECTOR_DOUBT_FLOOR, 0.0, math.nan, 2.0):
                        assert 0.0 <= query_confidence(vocab, best, agree, alone=alone, floor=floor) <= VECTOR_CONFIRMS


def test_query_script() -> None:
    assert query_script("What did Caroline do in May?") == "latin"
    assert query_script("Caroline什么时候去了LGBTQ支持小组？") == "cjk"
    assert query_script("番茄") == "cjk"
    assert query_script("tomato basil 番") == "latin"


def _unit(rng: random.Random, dims: int) -> list[float]:
    v = [rng.gauss(0, 1) for _ in range(dims)]
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v]


def test_blind_scripts_from_the_calibration_vectors() -> None:
    rng = random.Random(7)
    n = len(BACKGROUND_TEXTS)
    distinct = [_unit(rng, 32) for _ in range(n)]
    assert blind_scripts(distinct) == frozenset()
    same = _unit(rng, 32)
    # Every Chinese passage nearly the same vector: an English-only model.
    cjk_blind = distinct[:BACKGROUND_LATIN] + [[a + 0.01 * b for a, b in zip(same, _unit(rng, 32))]
                                               for _ in range(n - BACKGROUND_LATIN)]
    assert blind_scripts(cjk_blind) == frozenset({"cjk"})
    latin_blind = [[a + 0.01 * b for a, b in zip(same, _unit(rng, 32))] for _ in range(BACKGROUND_LATIN)]
    assert blind_scripts(latin_blind + distinct[BACKGROUND_LATIN:]) == frozenset({"latin"})
    assert blind_scripts(distinct[:10]) == frozenset()  # not the calibration passages


def test_select_confident_keeps_the_order_and_scales_the_scores() -> None:
    ranked = [Candidate(str(i), f"f{i}.md", "memory", 1, 2, "", score=s) for i, s in enumerate([0.9, 0.5, 0.3, 0.1])]
    out = select_confident(ranked, 0.5, min_score=0.2, max_results=10)
    assert [c.id for c in out] == ["0", "1"]
    assert [c.score for c in out] == pytest.approx([0.45, 0.25])
    assert [c.id for c in select_confident(ranked, 0.0, min_score=0.0, max_results=3)] == ["0", "1", "2"]
    assert select_confident(ranked, 0.0, min_score=0.01, max_results=3) == []
    assert [c.id for c in select_confident(ranked, 1.0, min_score=0.3, max_results=10)] == ["0", "1", "2"]


# -- behaviour on small indexes --------------------------------------------------------------

# Questions about things absent from the memory, each sharing a word or a character with it: the
# share of the query's IDF mass their best chunk matches is above the default min_score (without the
# query's confidence they were answered), but most of their words are unknown to the index.
FOREIGN_EN = ["What did Gina design for her store?", "Did Gina promote the store at the festival?"]
FOREIGN_ZH = ["吉娜的店", "娜娜开店"]
OFF_TOPIC = ["What is the boiling point of liquid nitrogen?", "液氮在标准大气压下的沸点是多少？"]


def _abstains_where_the_match_alone_answered(mem: MemoryIndex, query: str, keyword_alone: bool = False) -> None:
    """``keyword_alone``: the query is ranked by the keyword side alone (a script the embedder cannot read)."""
    loose = mem.search(query, min_score=0)
    assert loose, "the question shares a word with the memory"
    top = loose[0]
    vw, tw = mem.config.query.hybrid.weights
    hybrid = mem.provider_info()["mode"] == "hybrid" and not keyword_alone
    unscaled = vw * top.vector_score + tw * top.text_score if hybrid else top.text_score
    assert unscaled >= mem.config.query.effective_min_score  # answered without the query's confidence
    assert loose.info["confidence"] < 1.0
    assert top.score == pytest.approx(unscaled * loose.info["confidence"], abs=1e-3)
    # The order stands: the scores are the unscaled ones times one factor.
    assert [h.score for h in loose] == sorted((h.score for h in loose), reverse=True)
    assert mem.search(query) == []


@pytest.mark.parametrize("query", FOREIGN_EN + OFF_TOPIC[:1])
def test_keyword_only_abstains_on_a_foreign_question_en(tmp_path: Path, query: str) -> None:
    mem = _index(tmp_path, EN_FILES)
    try:
        if query in FOREIGN_EN:
            _abstains_where_the_match_alone_answered(mem, query)
        assert mem.search(query) == []
    finally:
        mem.close()


@pytest.mark.parametrize("query,path", [
    ("When do I water the tomato beds?", "MEMORY.md"),
    ("garlic planted in which row", "memory/2026-03-03.md"),
    ("what ate the lettuce seedlings", "memory/2026-03-04.md"),
])
def test_keyword_only_still_answers_what_the_memory_holds_en(tmp_path: Path, query: str, path: str) -> None:
    mem = _index(tmp_path, EN_FILES)
    try:
        hits = mem.search(query)
        assert hits and hits[0].path == path
        assert hits.info.get("confidence", 1.0) == 1.0
    finally:
        mem.close()


@pytest.mark.parametrize("query", FOREIGN_ZH + OFF_TOPIC[1:])
def test_keyword_only_abstains_on_a_foreign_question_zh(tmp_path: Path, query: str) -> None:
    mem = _index(tmp_path, ZH_FILES)
    try:
        if query in FOREIGN_ZH:
            _abstains_where_the_match_alone_answered(mem, query)
        assert mem.search(query) == []
    finally:
        mem.close()


@pytest.mark.parametrize("query,path", [
    ("每天什么时候给番茄浇水？", "MEMORY.md"),
    ("大蒜种在第几排", "memory/2026-03-03.md"),
    ("谁吃了生菜苗", "memory/2026-03-04.md"),
])
def test_keyword_only_still_answers_what_the_memory_holds_zh(tmp_path: Path, query: str, path: str) -> None:
    mem = _index(tmp_path, ZH_FILES)
    try:
        hits = mem.search(query)
        assert hits and hits[0].path == path
    finally:
        mem.close()


def test_english_question_against_a_chinese_memory_abstains(tmp_path: Path) -> None:
    mem = _index(tmp_path, ZH_FILES)
    try:
        assert mem.search("When do I water the tomato beds?") == []
    finally:
        mem.close()


def test_a_caller_min_score_still_decides(tmp_path: Path) -> None:
    mem = _index(tmp_path, EN_FILES)
    try:
        loose = mem.search(FOREIGN_EN[0], min_score=0.0)
        assert loose and loose.info["confidence"] < 1.0
        assert all(0.0 <= h.score <= 1.0 for h in loose)
        assert mem.search(FOREIGN_EN[0], min_score=1.5) == []
    finally:
        mem.close()


def test_payload_of_an_abstained_search(tmp_path: Path) -> None:
    mem = _index(tmp_path, EN_FILES)
    try:
        payload = search_payload(mem, FOREIGN_EN[0])
        assert payload["results"] == []
        assert {"results", "provider", "model", "mode", "vectors", "stale"} <= set(payload)
        answered = search_payload(mem, "When do I water the tomato beds?")
        assert answered["results"] and answered["results"][0]["path"] == "MEMORY.md"
    finally:
        mem.close()


# -- hybrid: the vector side confirms, or has no say in a script it cannot read --------------


class CJKBlindEmbedder(HashEmbedder):
    """Feature hashing for Latin text; every text with CJK characters gets nearly one vector, whatever
    it says (as an English-only model embeds Chinese)."""

    def _vector(self, text: str) -> list[float]:
        if query_script(text) == "cjk":
            noise = _unit(random.Random(text), self.dims)
            vec = [(1.0 if i == 0 else 0.0) + 0.05 * b for i, b in enumerate(noise)]
            norm = math.sqrt(sum(v * v for v in vec))
            return [v / norm for v in vec]
        return super()._vector(text)


@pytest.mark.parametrize("files,real,path,foreign", [
    (EN_FILES, "tomato beds water every morning", "MEMORY.md", FOREIGN_EN[0]),
    (EN_FILES, "Which store stocks seed trays?", "memory/2026-03-02.md", "Which tree did Jon climb?"),
    (ZH_FILES, "每天早上给番茄浇水", "MEMORY.md", FOREIGN_ZH[0]),
])
def test_hybrid_answers_and_abstains(tmp_path: Path, files: dict[str, str], real: str, path: str, foreign: str) -> None:
    """The vector side confirms a question the memory answers and vetoes one it does not."""
    mem = _index(tmp_path, files, embedder=HashEmbedder(dims=256))
    try:
        hits = mem.search(real)
        assert hits and hits[0].path == path
        _abstains_where_the_match_alone_answered(mem, foreign)
    finally:
        mem.close()


def test_hybrid_vector_side_has_no_say_in_a_script_the_embedder_cannot_read(tmp_path: Path) -> None:
    mem = _index(tmp_path, ZH_FILES, embedder=CJKBlindEmbedder(dims=64))
    try:
        hits = mem.search("每天什么时候给番茄浇水？")
        assert hits and hits[0].path == "MEMORY.md"
        assert hits.info["confidence"] == 1.0  # the keyword side alone decides
        # Half of this question's words are known and its keyword score is modest: answered on the
        # keyword side's word; the blind vector side would have scaled it below min_score.
        [hit] = mem.search("草莓和蓝莓哪个先熟", max_results=1)
        assert hit.path == "memory/2026-03-08.md"
        assert mem.search(OFF_TOPIC[1]) == []
        _abstains_where_the_match_alone_answered(mem, FOREIGN_ZH[0], keyword_alone=True)
    finally:
        mem.close()


def test_keyword_agreement_reads_the_keyword_sides_first_chunks() -> None:
    vector_of = {"garden": 0.6, "store": 0.05, "番茄": 0.4, "vector-only": 0.9}
    # The keyword side's first AGREEMENT_CHUNKS chunks by score; a chunk the vector side did not return is 0.
    assert keyword_agreement(["store", "garden", "x"], [0.9, 0.5, 0.1], vector_of) == 0.6
    assert keyword_agreement(["store", "x", "y", "z", "w", "garden"], [0.9, 0.8, 0.7, 0.65, 0.62, 0.6], vector_of) == 0.05
    assert keyword_agreement(["store", "x", "y", "garden"], [0.9, 0.8, 0.7, 0.6], vector_of, n=3) == 0.05
    assert keyword_agreement(["番茄", "store"], [0.2, 0.9], vector_of) == 0.4
    # A chunk only the vector side found is not agreement.
    assert keyword_agreement(["x"], [1.0], vector_of) == 0.0
    assert keyword_agreement([], [], vector_of) == 0.0
    assert keyword_agreement(["garden", "store"], [0.1, 0.9], vector_of, n=1) == 0.05


@pytest.mark.parametrize("files,query,path", [
    (EN_FILES, "tomato beds water every morning", "MEMORY.md"),
    (ZH_FILES, "每天早上给番茄浇水", "MEMORY.md"),
])
def test_agreeing_sides_confirm_a_question_scores_capped_at_one(tmp_path: Path, files: dict[str, str], query: str,
                                                                path: str) -> None:
    """When the chunks the keywords rank first are also clearly above unrelated text for the
    embedder, the query's confidence exceeds 1: its scores rise (capped at 1), the order stands."""
    mem = _index(tmp_path, files, embedder=HashEmbedder(dims=256))
    try:
        hits = mem.search(query, min_score=0)
        assert hits[0].path == path
        conf = hits.info["confidence"]
        assert 1.0 < conf <= VECTOR_CONFIRMS
        vw, tw = mem.config.query.hybrid.weights
        for h in hits:
            unscaled = vw * h.vector_score + tw * h.text_score
            assert h.score == pytest.approx(min(1.0, unscaled * conf), abs=1e-3)
            assert h.score <= 1.0
        assert hits[0].score > vw * hits[0].vector_score + tw * hits[0].text_score
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        assert mem.search(query)[0].path == path
    finally:
        mem.close()


def test_vector_side_that_does_not_back_the_keyword_chunks_doubts(tmp_path: Path) -> None:
    """A question about something absent from the memory matches a word or two of some chunk; the
    best vector match is another chunk, and the embedder places the keyword side's chunks lower:
    the vector side's evidence is its agreement with them, and the question gets no answer (with
    the best vector score alone it was answered)."""
    mem = _index(tmp_path, EN_FILES, embedder=HashEmbedder(dims=256))
    try:
        query = "How many tomatoes were sold on Friday?"
        _abstains_where_the_match_alone_answered(mem, query)
        sig = mem.search(query, min_score=0).info["confidence_signals"]
        assert sig["agreement"] < sig["vector_best"]
        assert query_confidence(sig["vocabulary"], sig["vector_best"], sig["vector_best"]) \
            > query_confidence(sig["vocabulary"], sig["vector_best"], sig["agreement"])
    finally:
        mem.close()


@pytest.mark.parametrize("files,query", [
    (EN_FILES, "How many tomatoes were sold on Friday?"),
    (EN_FILES, "Which store stocks seed trays?"),
    (ZH_FILES, "乔恩在金店了什么？"),
    (ZH_FILES, "每天早上给番茄浇水"),
])
def test_confidence_signals_are_read_from_both_sides(tmp_path: Path, files: dict[str, str], query: str) -> None:
    """``info["confidence_signals"]``: the agreement is the best vector score among the keyword
    side's first chunks, the best vector score is over all chunks, and the confidence is made of
    them (English and Chinese)."""
    mem = _index(tmp_path, files, embedder=HashEmbedder(dims=256))
    try:
        hits = mem.search(query, min_score=0, max_results=50)
        sig = hits.info["confidence_signals"]
        assert sig["vector_best"] == pytest.approx(max(h.vector_score for h in hits), abs=1e-3)
        by_text = sorted((h for h in hits if h.text_score > 0), key=lambda h: -h.text_score)[:AGREEMENT_CHUNKS]
        assert sig["agreement"] == pytest.approx(max(h.vector_score for h in by_text), abs=1e-3)
        # the best of all candidates, against the best of as many unrelated texts: never above the best
        assert sig["vector_alone"] <= sig["vector_best"] + 1e-9
        assert sig["doubt_floor"] == VECTOR_DOUBT_FLOOR  # a hashed bag of words recognises no translation
        assert hits.info["confidence"] == pytest.approx(
            query_confidence(sig["vocabulary"], sig["vector_best"], sig["agreement"], alone=sig["vector_alone"],
                             floor=sig["doubt_floor"]), abs=1e-3)
    finally:
        mem.close()


def test_openclaw_fusion_is_untouched(tmp_path: Path) -> None:
    """OpenClaw's formula keeps its relaxed keyword fallback: the partly matching foreign question
    still gets its keyword hit, and no confidence is applied."""
    ws = write_files(tmp_path / "ws", EN_FILES)
    cfg = MemoryConfig(provider="none")
    cfg.query.hybrid.fusion = "openclaw"
    mem = MemoryIndex(ws, config=cfg, state_dir=tmp_path / "state")
    mem.sync()
    try:
        hits = mem.search(FOREIGN_EN[0])
        assert hits and "confidence" not in hits.info
    finally:
        mem.close()


# -- windows, the best of many, and the embedder's shown strength -------------------------------


def test_best_of_level_is_the_level_the_best_of_n_unrelated_texts_reaches() -> None:
    bg = [i / 10 for i in range(11)]
    assert best_of_level(bg, 1) == pytest.approx(background_level(bg))  # one draw: the 90th percentile
    # the best of two stays below q with probability q**2: the 100 * 0.9**0.5 percentile
    assert best_of_level(bg, 2) == pytest.approx(0.9 ** 0.5)
    levels = [best_of_level(bg, n) for n in (1, 2, 3, 5, 10, 100)]
    assert levels == sorted(levels) and levels[0] < levels[-1]
    assert best_of_level(bg, 10 ** 6) == pytest.approx(1.0)  # saturates at the closest passage
    assert best_of_level(bg, 0) == best_of_level(bg, 1)
    assert math.isnan(best_of_level([], 3))


def test_chunk_vector_scores_read_a_chunk_by_its_best_window_against_the_best_of_its_windows() -> None:
    """A chunk embedded as windows comes back from the vector side as window rows with their own ids
    and the chunk's path and lines: its score is its best window's, measured against the level the
    best of that many unrelated texts reaches; a chunk embedded whole keeps the one-text level."""
    bg = [i / 10 for i in range(11)]
    level = background_level(bg)
    meta = {"w1": ("notes.md", "memory", 1, 9), "w2": ("notes.md", "memory", 1, 9),
            "whole": ("MEMORY.md", "memory", 1, 3), "chunk": ("notes.md", "memory", 1, 9)}
    got = chunk_vector_scores([("w1", 0.95), ("w2", 0.92), ("whole", 0.95)], meta, bg, level)
    windowed, whole = ("memory", "notes.md", 1, 9), ("memory", "MEMORY.md", 1, 3)
    assert got[whole] == pytest.approx(calibrated_cosine(0.95, level))
    assert got[windowed] == pytest.approx(calibrated_cosine(0.95, best_of_level(bg, 2)))
    assert 0 < got[windowed] < got[whole]
    # The keyword side's row of that chunk (its own id) finds the windows' score through the chunk's key.
    keys = [(m[1], m[0], m[2], m[3]) for m in (meta["chunk"], meta["whole"])]
    assert keyword_agreement(keys[:1], [1.0], got) == got[windowed]
    # Without the query's cosines to the calibration passages: the one-text level for every chunk.
    flat = chunk_vector_scores([("w1", 0.95), ("w2", 0.92)], meta, [], level)
    assert flat[windowed] == pytest.approx(calibrated_cosine(0.95, level))


@pytest.mark.parametrize("files,query", [
    (EN_FILES, "tomato beds water every morning"),
    (ZH_FILES, "每天早上给番茄浇水"),
])
def test_windowed_embedder_backs_the_keyword_sides_chunk(tmp_path: Path, files: dict[str, str], query: str) -> None:
    """With an embedder that embeds chunks as windows, the agreement of the two sides is read
    through the chunk's windows (it read 0 when it looked the chunk's own id up among the window
    rows, so every question lost the agreement's confirmation), in English and Chinese."""
    emb = HashEmbedder(dims=256)
    emb.window_bytes = 24  # every chunk becomes several windows
    mem = _index(tmp_path, files, embedder=emb)
    try:
        hits = mem.search(query, min_score=0)
        assert hits[0].path == "MEMORY.md" and hits[0].vector_score > 0
        sig = hits.info["confidence_signals"]
        assert 0 < sig["agreement"] <= hits[0].vector_score + 1e-9
        assert hits.info["confidence"] > 1.0  # the two sides agree: confirmed
        assert mem.search(query)[0].path == "MEMORY.md"
    finally:
        mem.close()


def _translating_vectors(dims: int = 32) -> list[list[float]]:
    rng = random.Random(7)
    vecs = [[rng.gauss(0, 1) for _ in range(dims)] for _ in BACKGROUND_TEXTS]
    for en, zh in TRANSLATED_PAIRS:
        vecs[zh] = list(vecs[en])
    return vecs


def test_translation_strength_tells_an_embedder_that_recognises_meaning() -> None:
    assert translation_strength(_translating_vectors()) == pytest.approx(1.0)
    rng = random.Random(3)
    unrelated = [[rng.gauss(0, 1) for _ in range(32)] for _ in BACKGROUND_TEXTS]
    assert translation_strength(unrelated) < 0.1
    hashed = HashEmbedder(dims=256).embed_documents(list(BACKGROUND_TEXTS))
    assert translation_strength(hashed) == 0.0  # a bag of words shares no word across languages
    assert translation_strength(unrelated[:10]) == 0.0  # not the calibration passages' vectors
    assert all(BACKGROUND_TEXTS[en] != BACKGROUND_TEXTS[zh] for en, zh in TRANSLATED_PAIRS)


def test_vector_doubt_floor_follows_the_embedders_strength() -> None:
    assert vector_doubt_floor(0.0) == VECTOR_DOUBT_FLOOR
    assert vector_doubt_floor(-0.3) == VECTOR_DOUBT_FLOOR
    assert vector_doubt_floor(math.nan) == VECTOR_DOUBT_FLOOR
    assert vector_doubt_floor(VECTOR_FULL) == pytest.approx(VECTOR_DOUBT_FLOOR_STRONG)
    assert vector_doubt_floor(1.0) == pytest.approx(VECTOR_DOUBT_FLOOR_STRONG)
    assert vector_doubt_floor(VECTOR_FULL / 2) == pytest.approx((VECTOR_DOUBT_FLOOR + VECTOR_DOUBT_FLOOR_STRONG) / 2)


class TranslatingEmbedder(HashEmbedder):
    """The hash embedder, except that it embeds each Chinese calibration passage as its English
    twin: an embedder that recognises the same meaning across languages."""

    def _embed_documents(self, texts: list[str]) -> list[list[float]]:
        twin = {BACKGROUND_TEXTS[zh]: BACKGROUND_TEXTS[en] for en, zh in TRANSLATED_PAIRS}
        return super()._embed_documents([twin.get(t, t) for t in texts])


def test_an_embedder_that_recognises_translations_doubts_further(tmp_path: Path) -> None:
    """The vector side's doubt floor comes from the embedder's calibration vectors: the hash
    embedder keeps VECTOR_DOUBT_FLOOR, one that matches the passages' translations gets
    VECTOR_DOUBT_FLOOR_STRONG, and a foreign question neither backs sits on that floor."""
    query = FOREIGN_EN[0]
    got = {}
    for name, emb in (("hash", HashEmbedder(dims=256)), ("translating", TranslatingEmbedder(dims=256))):
        mem = _index(tmp_path / name, EN_FILES, embedder=emb)
        try:
            got[name] = mem.search(query, min_score=0).info
        finally:
            mem.close()
    assert got["hash"]["confidence_signals"]["doubt_floor"] == VECTOR_DOUBT_FLOOR
    sig = got["translating"]["confidence_signals"]
    assert sig["doubt_floor"] == pytest.approx(VECTOR_DOUBT_FLOOR_STRONG)
    args = (sig["vocabulary"], sig["vector_best"], sig["agreement"])
    conf = query_confidence(*args, alone=sig["vector_alone"], floor=sig["doubt_floor"])
    assert got["translating"]["confidence"] == pytest.approx(conf, abs=1e-3)
    assert conf < query_confidence(*args, alone=sig["vector_alone"], floor=VECTOR_DOUBT_FLOOR)
    assert got["translating"]["confidence"] < got["hash"]["confidence"]


# -- the calibrated fusion's weights follow the embedder's measured strength -----------------


def test_fusion_weights_follow_strength_and_the_querys_vector_evidence() -> None:
    fixed = (CALIBRATED_VECTOR_WEIGHT, 1 - CALIBRATED_VECTOR_WEIGHT)
    # No sense of meaning (all-MiniLM-L6-v2's 0 across languages, a bag of words below 0): the fixed weights,
    # whatever its vector side finds.
    for strength in (0.0, -0.4, math.nan):
        for evidence in (0.0, 0.3, 0.9):
            for text in (0.0, 0.5, 1.0):
                assert fusion_weights(strength, evidence, text) == pytest.approx(fixed)
    # No calibration, or a query the vector side finds nothing for (a foreign question): the fixed weights.
    assert fusion_weights(0.38, None) == pytest.approx(fixed)
    assert fusion_weights(0.38, math.nan) == pytest.approx(fixed)
    assert fusion_weights(0.38, 0.0) == pytest.approx(fixed)
    assert fusion_weights(0.38, 0.0, 0.0) == pytest.approx(fixed)
    # An embedder that reads meaning (multilingual-e5-small: 0.38): each side in proportion to its evidence, the
    # vector side's in units of VECTOR_FULL, the keyword side's its best score (a full match: 1).
    assert fusion_weights(0.38, VECTOR_FULL, 1.0) == pytest.approx((0.5, 0.5))
    assert fusion_weights(0.38, VECTOR_FULL / 2, 0.5) == pytest.approx((0.5, 0.5))
    assert fusion_weights(0.38, 0.3, 0.8) == pytest.approx((1.2 / 2.0, 0.8 / 2.0))
    assert fusion_weights(0.38, VECTOR_FULL) == fusion_weights(0.38, VECTOR_FULL, 1.0)
    # ... never more than OpenClaw's own vector weight (a paraphrase sharing no word), never less than the fixed one.
    assert fusion_weights(0.38, 0.3, 0.0) == pytest.approx((OPENCLAW_VECTOR_WEIGHT, 1 - OPENCLAW_VECTOR_WEIGHT))
    assert fusion_weights(0.38, 5.0, 1.0) == pytest.approx((OPENCLAW_VECTOR_WEIGHT, 1 - OPENCLAW_VECTOR_WEIGHT))
    assert fusion_weights(0.38, 0.05, 1.0) == pytest.approx(fixed)
    # An embedder half as strong as VECTOR_FULL: its evidence counts half.
    assert fusion_weights(VECTOR_FULL / 2, 2 * VECTOR_FULL, 1.0) == pytest.approx(fusion_weights(0.38, VECTOR_FULL, 1.0))
    # Monotonic: more vector evidence or strength, more vector weight; more keyword evidence, less. Sums to 1.
    grid = [-1.0, 0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 2.0]
    for s in grid:
        for t in (0.0, 0.3, 1.0):
            prev = 0.0
            for e in grid:
                vw, tw = fusion_weights(s, e, t)
                assert vw + tw == pytest.approx(1.0)
                assert CALIBRATED_VECTOR_WEIGHT <= vw <= OPENCLAW_VECTOR_WEIGHT and vw >= prev
                assert vw <= fusion_weights(s + 0.1, e, t)[0]
                assert vw >= fusion_weights(s, e, t + 0.2)[0]
                prev = vw


def test_vector_evidence_is_the_best_candidate_against_the_best_of_as_many_unrelated_texts() -> None:
    bg = [0.70 + 0.005 * i for i in range(48)]
    level = background_level(bg)
    hits = [("a", 0.95), ("b", 0.80), ("c", 0.78)]
    assert vector_evidence(hits, bg, level) == pytest.approx(calibrated_cosine(0.95, best_of_level(bg, 3)))
    assert vector_evidence(hits, bg, level) < calibrated_cosine(0.95, level)
    assert vector_evidence([], bg, level) == 0.0
    assert vector_evidence(hits, [], math.nan) is None


def _weights_and_top(mem: MemoryIndex, query: str) -> tuple[list[float] | None, Any]:
    hits = mem.search(query, min_score=0)
    return hits.info.get("fusion_weights"), hits


@pytest.mark.parametrize("files,real", [
    (EN_FILES, "tomato beds water every morning"),
    (ZH_FILES, "每天早上给番茄浇水"),
])
def test_an_embedder_that_recognises_meaning_gets_more_vector_weight(tmp_path: Path, files: dict[str, str],
                                                                     real: str) -> None:
    """The same memory and question: the embedder whose calibration vectors match the passages'
    translations ranks with more vector weight than one that does not (a bag of words), in English and
    Chinese; the weights are those the scores were made with."""
    got = {}
    for name, emb in (("hash", HashEmbedder(dims=256)), ("translating", TranslatingEmbedder(dims=256))):
        mem = _index(tmp_path / name, files, embedder=emb)
        try:
            weights, hits = _weights_and_top(mem, real)
            assert hits and hits[0].path == "MEMORY.md"
            top = hits[0]
            vw, tw = weights
            unscaled = vw * top.vector_score + tw * top.text_score
            assert top.score == pytest.approx(min(1.0, unscaled * hits.info["confidence"]), abs=1e-3)
            got[name] = (vw, tw)
        finally:
            mem.close()
    assert got["hash"] == pytest.approx((CALIBRATED_VECTOR_WEIGHT, 1 - CALIBRATED_VECTOR_WEIGHT))
    assert got["translating"][0] > got["hash"][0]
    assert got["translating"][0] <= OPENCLAW_VECTOR_WEIGHT


@pytest.mark.parametrize("files,foreign", [(EN_FILES, FOREIGN_EN[0]), (ZH_FILES, FOREIGN_ZH[0])])
def test_a_foreign_question_keeps_the_fixed_weights_and_abstains(tmp_path: Path, files: dict[str, str],
                                                                  foreign: str) -> None:
    """A question the vector side finds nothing for is weighed as before, so a strong embedder abstains
    as it did."""
    mem = _index(tmp_path, files, embedder=TranslatingEmbedder(dims=256))
    try:
        weights, _ = _weights_and_top(mem, foreign)
        assert weights[0] == pytest.approx(CALIBRATED_VECTOR_WEIGHT, abs=0.05)
        assert mem.search(foreign) == []
    finally:
        mem.close()


def test_weights_a_user_sets_are_kept(tmp_path: Path) -> None:
    mem = _index(tmp_path, EN_FILES, embedder=TranslatingEmbedder(dims=256))
    try:
        mem.config.query.hybrid.vector_weight = 0.2
        mem.config.query.hybrid.text_weight = 0.8
        weights, hits = _weights_and_top(mem, "tomato beds water every morning")
        assert weights is None
        top = hits[0]
        assert top.score == pytest.approx(min(1.0, (0.2 * top.vector_score + 0.8 * top.text_score) * hits.info["confidence"]),
                                          abs=1e-3)
    finally:
        mem.close()
