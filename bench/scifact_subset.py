"""A SciFact subset for slow embedders: the documents judged for a sample of queries plus random
distractors (seeded), copied into a scratch workspace (never committed: the data is non-commercial).
``python -m bench.scifact_subset OUT [--queries 150] [--distractors 600] [--seed 7] [--exclude SUBSET ...]``

``--exclude`` names earlier subsets (directories this module wrote) to stay disjoint from: their claims, and
every abstract they hold, are left out of the draw (a claim judged on an excluded abstract is left out too), so a
second subset is held-out data of the same construction and size."""

from __future__ import annotations

import argparse
import json
import random
import shutil
from pathlib import Path

from .data import default_data_dir


def build(out: Path, data: Path, n_queries: int = 150, n_distractors: int = 600, seed: int = 7,
          exclude: list[Path] | tuple[Path, ...] = ()) -> Path:
    from .data import _require

    src = data / "scifact"
    _require(src / "queries-train.jsonl", data, "scifact")
    rows = [json.loads(line) for line in (src / "queries-train.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = [r for r in rows if r.get("relevant_paths")]
    taken_q: set[str] = set()
    taken_docs: set[str] = set()
    for old in exclude:
        taken_q |= {json.loads(line)["qid"] for line in (old / "queries-train.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()}
        taken_docs |= {p.relative_to(old / "workspace").as_posix() for p in (old / "workspace" / "memory").glob("*.md")}
    rows = [r for r in rows if r["qid"] not in taken_q and not taken_docs.intersection(r["relevant_paths"])]
    rng = random.Random(seed)
    sample = rng.sample(rows, min(n_queries, len(rows)))
    judged = sorted({p for r in sample for p in r["relevant_paths"]})
    everything = sorted(p.relative_to(src / "workspace").as_posix() for p in (src / "workspace" / "memory").glob("*.md"))
    rest = sorted(set(everything) - set(judged) - taken_docs)
    picked = judged + rng.sample(rest, min(n_distractors, len(rest)))
    ws = out / "workspace"
    if ws.exists():
        shutil.rmtree(ws)
    (ws / "memory").mkdir(parents=True)
    for p in picked:
        shutil.copyfile(src / "workspace" / p, ws / p)
    with (out / "queries-train.jsonl").open("w", encoding="utf-8") as fh:
        for r in sample:
            fh.write(json.dumps(r) + "\n")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--data", type=Path, default=default_data_dir())
    ap.add_argument("--queries", type=int, default=150)
    ap.add_argument("--distractors", type=int, default=600)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--exclude", type=Path, nargs="*", default=[], help="earlier subsets to stay disjoint from")
    a = ap.parse_args()
    build(a.out, a.data, a.queries, a.distractors, a.seed, a.exclude)


if __name__ == "__main__":
    main()
