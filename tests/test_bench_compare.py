"""Smoke test of ``python -m bench compare``: HEAD against this tree at a tiny scale, every part, two rounds.
Benchmarks are not tests: nothing here asserts a timing, only the run's shape."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import compare

REPO = Path(__file__).resolve().parents[1]


def test_summary_takes_medians_and_the_median_of_round_ratios() -> None:
    rounds = [{"old": {"keyword_p50": 10.0, "build_keyword": 100.0}, "new": {"keyword_p50": 5.0, "build_keyword": 300.0}},
              {"old": {"keyword_p50": 20.0, "build_keyword": 100.0}, "new": {"keyword_p50": 20.0, "build_keyword": 100.0}},
              {"old": {"keyword_p50": 40.0, "build_keyword": 100.0}, "new": {"keyword_p50": 10.0, "build_keyword": 200.0}}]
    rows = {r["figure"]: r for r in compare.summarize(rounds)}
    assert set(rows) == {"keyword_p50", "build_keyword"}  # figures not measured are left out
    kw = rows["keyword_p50"]
    assert (kw["old"], kw["new"], kw["ratio"]) == (20.0, 10.0, 0.5)
    assert kw["median_round_ratio"] == 0.5  # of 0.5, 1.0, 0.25
    assert rows["build_keyword"]["median_round_ratio"] == 2.0 and rows["build_keyword"]["higher_is_better"]
    table = compare.format_table(list(rows.values()), "old one", "new one")
    assert "| keyword search p50 (ms) | 20.0 | 10.0 | 0.50 | 0.50 |" in table


def test_compare_head_with_this_tree(tmp_path: Path) -> None:
    pytest.importorskip("clawmem_core.index")
    if subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    out = tmp_path / "compare.json"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    before = subprocess.run(["git", "worktree", "list"], cwd=REPO, capture_output=True, text=True).stdout
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "compare", "HEAD", "--scale", "120", "--rounds", "2", "--queries", "12",
         "--build-chunks", "60", "--sync-repeats", "1", "--cli-repeats", "1", "--work", str(tmp_path / "work"),
         "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["old"].startswith("HEAD") and res["new"].startswith("this tree")
    assert len(res["rounds"]) == 2
    figures = [key for key, *_ in compare.FIGURES]
    for rnd in res["rounds"]:  # every figure measured on both sides in every round
        for side in ("old", "new"):
            assert sorted(rnd[side]) == sorted(figures), (side, rnd[side])
            assert all(v > 0 and math.isfinite(v) for v in rnd[side].values())
    assert [r["figure"] for r in res["summary"]] == figures
    for row in res["summary"]:
        assert row["rounds"] == 2 and row["ratio"] > 0 and row["median_round_ratio"] > 0
    # the printed table: both labels, then one row per figure with both numbers and the two ratios
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("old: HEAD") and lines[1].startswith("new: this tree")
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| figure")]
    assert len(rows) == len(figures)
    assert all(len(line.strip("|").split("|")) == 5 for line in rows)
    # the checkout of HEAD was a temporary worktree, removed at the end
    after = subprocess.run(["git", "worktree", "list"], cwd=REPO, capture_output=True, text=True).stdout
    assert after == before


def test_a_side_can_be_an_unpacked_copy(tmp_path: Path) -> None:
    """A directory holding ``clawmem_core`` stands for a revision (a machine without the git history)."""
    copy = tmp_path / "old-copy"
    (copy / "clawmem_core").mkdir(parents=True)
    (copy / "clawmem_core" / "__init__.py").write_text("")
    work = tmp_path / "tmp"
    work.mkdir()
    added: list[Path] = []
    side = compare._make_side("old", str(copy), work, added)
    assert side.label == "old-copy" and side.source == copy.resolve()
    assert added == []  # nothing to remove afterwards: no worktree was made
    assert (side.lib / "clawmem_core").resolve() == (copy / "clawmem_core").resolve()
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SystemExit, match="no clawmem_core package"):
        compare._make_side("new", str(empty), work, added)
