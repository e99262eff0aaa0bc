"""Smoke test of ``bench.consolidation`` on a tiny LoCoMo-style conversation (English and Chinese): it runs end to
end in seconds. Benchmarks are not tests: nothing here asserts a timing, only relations between the figures."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("clawmem_core.dreaming")

from bench import consolidation  # noqa: E402
from bench.data import Query  # noqa: E402

FACTS_EN = [
    "Ann adopted a puppy named Biscuit from the shelter in Porto.",
    "Bob moved his pottery class to Tuesday evenings at the harbour studio.",
    "Ann is training for the Lisbon half marathon in October.",
    "Bob's sister Clara teaches violin at the conservatory.",
]
FACTS_ZH = [
    "安妮从波尔图的收容所领养了一只叫饼干的小狗。",
    "鲍勃把陶艺课改到了每周二晚上的港口工作室。",
    "安妮正在为十月的里斯本半程马拉松训练。",
    "鲍勃的姐姐克拉拉在音乐学院教小提琴。",
]
QUESTIONS_EN = [
    ["What is the name of Ann's puppy?", "Where did Ann adopt Biscuit?", "Which shelter did the puppy come from?"],
    ["When is Bob's pottery class?", "Where is the pottery studio?", "Which evening does Bob do pottery?"],
    ["Which race is Ann training for?", "When is the Lisbon half marathon?", "What is Ann training for?"],
    ["What does Clara teach?", "Where does Bob's sister teach violin?", "Who is Bob's sister?"],
]
QUESTIONS_ZH = [
    ["安妮的小狗叫什么名字?", "安妮在哪里领养了饼干?", "小狗来自哪个收容所?"],
    ["鲍勃的陶艺课在什么时候?", "陶艺工作室在哪里?", "鲍勃哪天晚上上陶艺课?"],
    ["安妮在为什么比赛训练?", "里斯本半程马拉松在几月?", "安妮在训练什么?"],
    ["克拉拉教什么?", "鲍勃的姐姐在哪里教小提琴?", "鲍勃的姐姐是谁?"],
]


def _data(root: Path) -> Path:
    """One conversation per language: each fact on its own daily note among filler, three questions per fact."""
    for folder, facts, questions, other in (
            ("locomo", FACTS_EN, QUESTIONS_EN,
             ("Dan repairs vintage bicycles in his garage.", "What does Dan repair?")),
            ("locomo-zh", FACTS_ZH, QUESTIONS_ZH, ("丹在车库里修理老式自行车。", "丹修理什么?"))):
        mem = root / folder / "conv-01" / "memory"
        mem.mkdir(parents=True)
        rows = []
        for i, fact in enumerate(facts):
            day = f"2023-0{i + 1}-01"
            filler = "".join(f"- Dan: filler {j} about weather, groceries and the bus timetable.\n" for j in range(12))
            (mem / f"{day}.md").write_text(f"# {day}\n\n## Session {i + 1}\n\n- Ann: {fact}\n" + filler,
                                           encoding="utf-8")
            for j, q in enumerate(questions[i]):
                rows.append({"qid": f"conv-01/q{j * 10 + i:04d}", "workspace": "conv-01", "question": q,
                             "category": 4, "gold": [{"path": f"memory/{day}.md", "line": 5}]})
        # a fact asked about only after the traffic: the control group ("other facts")
        (mem / "2023-06-01.md").write_text(f"# 2023-06-01\n\n- Dan: {other[0]}\n", encoding="utf-8")
        rows.append({"qid": "conv-01/q0099", "workspace": "conv-01", "question": other[1], "category": 4,
                     "gold": [{"path": "memory/2023-06-01.md", "line": 3}]})
        (root / folder / "queries.jsonl").write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n",
                                                     encoding="utf-8")
    return root


def _run(tmp_path: Path, name: str, repeats: int) -> tuple[dict, str]:
    data = _data(tmp_path / f"data-{name}")
    out = tmp_path / "out"
    consolidation.main(["--data", str(data), "--weeks", "2", "--repeats", str(repeats), "--scales", "300,1200",
                        "--latency-queries", "6", "--latency-rounds", "2", "--synth-chunks", "0", "--out", str(out),
                        "--name", name, "--work", str(tmp_path / f"work-{name}")])
    res = json.loads((out / f"{name}.json").read_text(encoding="utf-8"))
    md = (out / f"{name}.md").read_text(encoding="utf-8")
    return res, md


def test_split_puts_traffic_first_and_scores_later_questions_by_shared_gold() -> None:
    ws = Path("/w")
    qs = [Query(f"c/q{i}", f"q{i}", ws, gold_lines=[("memory/a.md", line)]) for i, line in enumerate([1, 2, 1, 3])]
    split = consolidation.split_questions(list(reversed(qs)))
    assert [q.qid for q in split.traffic] == ["c/q0", "c/q1"]
    assert [q.qid for q in split.same] == ["c/q2"] and [q.qid for q in split.other] == ["c/q3"]


def test_consolidation_bench_end_to_end(tmp_path: Path) -> None:
    res, md = _run(tmp_path, "run", repeats=3)
    assert set(res["datasets"]) == {"locomo-en", "locomo-zh"}
    for name, d in res["datasets"].items():
        t = d["total"]
        assert (t["traffic"], t["later_same_facts"], t["later_other_facts"]) == (7, 5, 1)
        assert t["searches"] == 3 * t["traffic"]
        # the traffic recalls each fact's line by several distinct questions on several days: promoted, sourced
        assert t["promoted"] > 0, (name, d["workspaces"][0]["runs"])
        assert t["grounded_traffic"] <= t["grounded"] <= t["promoted"]
        assert t["holds_gold_text"] <= t["promoted"]
        assert t["same_questions_with_gold_promoted"] <= t["later_same_facts"]
        for when in ("before", "after"):
            groups = t[when]
            assert groups["same"]["n"] == groups["same_promoted"]["n"] + groups["same_not_promoted"]["n"]
            for g in consolidation.GROUPS:
                for m in ("hit@1", "hit@5"):
                    if groups[g]["n"]:
                        assert 0.0 <= groups[g][m] <= 1.0
                if groups[g]["n"]:
                    assert groups[g]["hit@1"] <= groups[g]["hit@5"]
        assert t["before"]["same"]["top1_memory_md"] == 0  # no MEMORY.md before promotion
        # the promoted facts' questions are still found first: from their note (chunks of promoted entries get no
        # keyword prior, docs/decisions.md), or from MEMORY.md when its entry holds the gold line
        promoted = t["after"]["same_promoted"]
        assert promoted["n"] > 0 and promoted["hit@1"] == 1.0
        runs = d["workspaces"][0]["runs"]
        assert [r["week"] for r in runs] == [1, 2] and sum(r["added"] for r in runs) == t["promoted"]
    # a run over an empty recall log promotes nothing and writes no MEMORY.md
    assert res["zero_traffic"] == {"added": 0, "memory_md_written": False}
    # the scale runs hold the events asked for
    assert [r["events"] for r in res["promotion_time"]["runs"]] == [300, 1200]
    # the printed ratios derive from the printed medians
    (lat,) = res["latency"]
    assert lat["searches_per_mode"] == 12
    assert lat["off"]["walks_per_search"] == 0.0  # nothing writes to the index without a log
    for mode in consolidation.LOGGED:
        row = re.search(rf"^\| {mode} \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| [\d.]+ \| (\d+) \|$", md,
                        re.M)
        assert row, md
        p50, p95, r50, r95, written = (float(x) for x in row.groups())
        off = re.search(r"^\| off \| ([\d.]+) \| ([\d.]+) \|", md, re.M)
        assert off
        assert r50 == pytest.approx(round(p50 / float(off.group(1)), 3), abs=1e-3)
        assert r95 == pytest.approx(round(p95 / float(off.group(2)), 3), abs=1e-3)
        assert written == lat["events_written"][mode] > 0  # the log wrote what it recorded
    assert "| locomo-en | same facts | " in md and "| locomo-zh | other facts (control) | " in md


def test_no_traffic_promotes_nothing_and_changes_no_ranking(tmp_path: Path) -> None:
    res, _ = _run(tmp_path, "zero", repeats=0)
    for d in res["datasets"].values():
        t = d["total"]
        assert t["searches"] == 0 and t["promoted"] == 0 and t["grounded"] == 0
        assert all(r["candidates"] == 0 and r["added"] == 0 for r in d["workspaces"][0]["runs"])
        assert t["before"] == t["after"]  # nothing was written, so every later question ranks as before
