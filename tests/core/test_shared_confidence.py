"""A shared namespace never changes how the agent's own memory answers (SQLite and PostgreSQL,
English and Chinese): a question about nothing in either memory still finds nothing, the agent's
own notes keep their scores, and a note only the namespace holds is still found. Each index
searched is judged by its own term statistics and candidates (the confidence signals of the
calibrated fusion, ``clawmem_core.search.query_confidence``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clawmem_core import MemoryIndex
from clawmem_core.testing import HashEmbedder

TEAM = {
    "MEMORY.md": "# Team\n\nThe deploy freeze starts on Fridays at noon.\n\n部署冻结从每周五中午开始。\n",
    "memory/review.md": "- The quarterly review moved to the large meeting room.\n- 季度评审改到大会议室举行。\n",
}
ALICE = {
    "MEMORY.md": "# Alice\n\nAlice prefers green tea in the morning.\n\nAlice 早上喜欢喝绿茶。\n",
    "memory/budget.md": "- Budget meeting with the manager on Wednesday afternoon.\n- 周三下午和经理开预算会议。\n",
}
#: Other notes of each memory (BM25 needs more than two rows to tell terms apart).
FILLER = [
    ("The bike needs new brake pads before the spring ride.", "自行车春季骑行前需要换新的刹车片。"),
    ("The landlord will fix the kitchen sink on Thursday.", "房东周四来修厨房的水槽。"),
    ("Book the dentist appointment for next month.", "预约下个月的牙医。"),
    ("The library card expires in December.", "借书证十二月到期。"),
    ("Renew the car insurance before it lapses.", "车险到期前要续保。"),
    ("The sourdough starter lives in the fridge.", "酸面种放在冰箱里。"),
]
for i, (en, zh) in enumerate(FILLER):
    (TEAM if i % 2 else ALICE)[f"memory/misc-{i}.md"] = f"- {en}\n- {zh}\n"
    (ALICE if i % 2 else TEAM)[f"memory/other-{i}.md"] = f"- {zh}\n- {en}\n"
QUESTIONS = {
    "en": {"unrelated": "what is the weather like on mars?", "own": "what tea does Alice drink in the morning?",
           "partial": "which tea did Alice order for the picnic?", "team": "when does the deploy freeze start?"},
    "zh": {"unrelated": "火星上的天气怎么样？", "own": "Alice 早上喝什么茶？", "partial": "Alice 野餐时点了什么茶？",
           "team": "部署冻结什么时候开始？"},
}


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    return root


@pytest.fixture(params=["embedder", "keywords"])
def memories(request: pytest.FixtureRequest, tmp_path: Path, store_config: dict[str, Any]
             ) -> tuple[Path, dict[str, Any], HashEmbedder | None]:
    """The team's memory indexed under agent ``team``, and alice's workspace; with a (hashing)
    embedder, or keyword-only."""
    emb = HashEmbedder() if request.param == "embedder" else None
    with MemoryIndex(_write(tmp_path / "team", TEAM), agent_id="team", config={"store": store_config},
                     embedder=emb, state_dir=tmp_path / "s") as team:
        team.sync()
    return _write(tmp_path / "alice", ALICE), store_config, emb


def _search(tmp_path: Path, memories: tuple[Path, dict[str, Any], HashEmbedder | None], query: str,
            shared: list[str]) -> list[tuple[str, float]]:
    ws, store, emb = memories
    with MemoryIndex(ws, agent_id="alice", config={"store": store, "shared": shared}, embedder=emb,
                     state_dir=tmp_path / "s") as mem:
        mem.sync()
        return [(h.path, h.score) for h in mem.search(query, max_results=10)]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_an_unrelated_question_finds_nothing_with_or_without_the_namespace(
        tmp_path: Path, memories: tuple[Path, dict[str, Any], HashEmbedder | None], lang: str) -> None:
    q = QUESTIONS[lang]["unrelated"]
    assert _search(tmp_path, memories, q, []) == []
    assert _search(tmp_path, memories, q, ["team"]) == []


@pytest.mark.parametrize("kind", ["own", "partial"])
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_agents_own_notes_keep_their_scores(tmp_path: Path, memories: tuple[Path, dict[str, Any], HashEmbedder | None],
                                                lang: str, kind: str) -> None:
    q = QUESTIONS[lang][kind]
    alone = _search(tmp_path, memories, q, [])
    shared = _search(tmp_path, memories, q, ["team"])
    if kind == "own":
        assert alone and alone[0][0] == "MEMORY.md"
    # the same own results, at the same scores; the namespace adds only its own notes
    own = [h for h in shared if not h[0].startswith("@")]
    assert [p for p, _ in own] == [p for p, _ in alone]
    assert [s for _, s in own] == pytest.approx([s for _, s in alone], abs=1e-9)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_note_only_the_namespace_holds_is_found(tmp_path: Path, memories: tuple[Path, dict[str, Any], HashEmbedder | None],
                                                  lang: str) -> None:
    q = QUESTIONS[lang]["team"]
    assert [p for p, _ in _search(tmp_path, memories, q, [])] == []
    got = _search(tmp_path, memories, q, ["team"])
    assert got and got[0][0] == "@team/MEMORY.md"
    assert all(p.startswith("@team/") for p, _ in got)
