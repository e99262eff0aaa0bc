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
from clawmem_core.calibration import BACKGROUND_LATIN, BACKGROUND_TEXTS, blind_scripts
from clawmem_core.search import (
    VECTOR_DOUBT_FLOOR,
    VECTOR_FULL,
    VECTOR_VOUCHES,
    VOCABULARY_FULL,
    query_confidence,
    query_script,
    select_confident,
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
    assert query_confidence(1.0, 1.0) == 1.0
    assert query_confidence(0.0, None) == 0.0
    assert query_confidence(VOCABULARY_FULL / 2, None) == pytest.approx(0.5)
    assert query_confidence(1.0, VECTOR_FULL * 0.8) == pytest.approx(max(0.8, VECTOR_DOUBT_FLOOR))
    assert query_confidence(1.0, 0.0) == VECTOR_DOUBT_FLOOR
    # A strong vector match vouches for a query whose words the index does not know (a paraphrase).
    assert query_confidence(0.0, VECTOR_VOUCHES) == 1.0
    assert query_confidence(0.0, 0.3) == pytest.approx(0.3 / VECTOR_VOUCHES)
    for vocab in (None, 0.0, 0.2, 0.7, 1.0, math.nan):
        for best in (None, 0.0, 0.1, 0.3, 0.9, math.nan, -1.0, 5.0):
            assert 0.0 <= query_confidence(vocab, best) <= 1.0


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
