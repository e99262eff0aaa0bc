"""Smoke test of ``bench.studies.zh_paraphrase`` on a tiny generated workspace (a real index, no model): each
technique builds the terms it says it builds, and the study's report comes out. Nothing here asserts a timing."""

from __future__ import annotations

from pathlib import Path

from bench.data import Dataset, Query
from bench.studies import zh_paraphrase as zp

LINES = [
    "- Melanie: 我们全家周末去海边玩了一整天，孩子们在沙滩上堆城堡。",
    "- Caroline: 我上周通过了收养机构的面试，离组建家庭又近了一步。",
    "- Melanie: 我最近在画一幅日落，颜色让我觉得很平静。",
    "- Caroline: 我在线上服装店买了一条裙子，准备去参加展会。",
    "- Melanie: We went camping in the mountains and roasted marshmallows by the campfire.",
    "- Caroline: I started volunteering at the youth center last month.",
]


def _workspace(root: Path) -> Path:
    ws = root / "conv-00"
    (ws / "memory").mkdir(parents=True)
    body = "# 2023-05-08\n\n## Session 1 · 8 May, 2023 · Caroline & Melanie\n\n" + "\n".join(LINES) + "\n"
    (ws / "memory" / "2023-05-08.md").write_text(body, encoding="utf-8")
    return ws


def test_each_technique_builds_its_terms_and_the_study_reports(tmp_path: Path) -> None:
    from clawmem_core import MemoryIndex
    from clawmem_core.text import search_terms

    from bench.matrix import config, make_setup

    ws = _workspace(tmp_path / "data")
    with MemoryIndex(str(ws), agent_id="main", config=config(make_setup("none", None), "calibrated", {}),
                     state_dir=str(tmp_path / "state")) as mem:
        mem.sync()
        tech = zp.Techniques(mem._store)
        # 海滩 is not in the memory: 海边 and 沙滩 each keep one of its characters, in its place.
        tech.select("siblings")
        assert set(tech.sibling_terms(search_terms("海滩"))) == {"海边", "沙滩"}
        # 服装店 is held whole: its word-level term is the phrase of its consecutive character pairs.
        tech.select("words-cjk")
        assert "服装 装店" in tech.terms(lambda t, s=True: search_terms(t, s), "Caroline在哪家服装店买了裙子？")
        tech.select("prf")
        extra = tech.prf_terms(search_terms("Melanie去海边做了什么？"))
        assert extra and all(t not in search_terms("Melanie去海边做了什么？") for t in extra)
        tech.select("no-chars")
        assert all(len(t) > 1 for t in tech.terms(lambda t, s=True: search_terms(t, s), "收养面试"))

    gold = [("memory/2023-05-08.md", 5), ("memory/2023-05-08.md", 6), ("memory/2023-05-08.md", 9)]
    queries = [Query("q0", "Melanie和孩子们去了哪里？", ws, gold_lines=[gold[0]]),
               Query("q1", "Caroline什么时候通过领养面试的？", ws, gold_lines=[gold[1]]),
               Query("q2", "What did Melanie roast while camping?", ws, gold_lines=[gold[2]])]
    ds = Dataset("locomo-zh", "locomo", "zh", queries, [ws])
    names = ["base", "prf", "prf-mix:3:3:0.1", "words", "siblings"]
    got = zp.run(ds, tmp_path / "work", names, lambda _ws: ["How is the Black-Scholes formula derived?"])
    assert [r["qid"] for r in got["rows"]] == ["q0", "q1", "q2"]
    assert all(set(names) <= set(r) for r in got["rows"]) and len(got["foreign"]) == 1
    env = {"commit": "x", "when": "now", "load_start": 0, "load_end": 0, "cpus": 2}
    md = zp.markdown({"env": env, "techniques": names, "datasets": [got], "embedder": "none"})
    assert "| locomo-zh | all | 3 |" in md and "prf-mix:3:3:0.1" in md
