"""Keyword ranking with MEMORY.md's prior (``clawmem_core.search.CURATED_PRIOR``) against plain BM25 (prior
1), on LoCoMo (EN, ZH: hit@1, hit@5) and SciFact (nDCG@10, recall@100), keyword-only, through
``MemoryIndex.search`` (``min_score=0``). Each data set is indexed once; the prior is swapped between runs over
the same index.

Usage: ``python -m bench.studies.naming [--prior 1,2] [--datasets locomo-en,locomo-zh,scifact]``.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from ..data import default_data_dir, load_all
from ..metrics import Span, doc_recall_at, hit_at, mean, ndcg_at, rank_documents


def run(datasets: list[str], priors: list[float], work: Path, data: Path, limit: int | None = None) -> dict[str, Any]:
    from clawmem_core import MemoryConfig, MemoryIndex
    from clawmem_core import search as S

    out: dict[str, Any] = {}
    for ds in load_all(data, datasets, limit):
        by_ws: dict[Path, list[Any]] = defaultdict(list)
        for q in ds.queries:
            by_ws[q.workspace].append(q)
        k = 200 if ds.kind == "beir" else 10
        table: dict[str, dict[str, float]] = {}
        for h in priors:
            res: dict[str, list[Span]] = {}
            for ws, queries in sorted(by_ws.items()):
                cfg = MemoryConfig(provider="none")
                cfg.sync.watch = False
                cfg.sync.interval_minutes = 0
                cfg.sync.on_session_start = False
                sd = work / "naming" / ds.name / ws.name
                saved = S.CURATED_PRIOR
                S.CURATED_PRIOR = h
                try:
                    with MemoryIndex(str(ws), agent_id="main", config=cfg, state_dir=str(sd)) as mem:
                        mem.sync()
                        for q in queries:
                            hits = mem.search(q.text, max_results=k, min_score=0.0)
                            res[q.qid] = [Span(x.path, x.start_line, x.end_line) for x in hits]
                finally:
                    S.CURATED_PRIOR = saved
            if ds.kind == "beir":
                docs = {q.qid: rank_documents(res.get(q.qid, [])) for q in ds.queries}
                table[f"prior {h:g}"] = {
                    "ndcg@10": mean(ndcg_at(docs[q.qid], q.relevant_paths, 10) for q in ds.queries),
                    "recall@100": mean(doc_recall_at(docs[q.qid], q.relevant_paths, 100) for q in ds.queries),
                }
            else:
                table[f"prior {h:g}"] = {
                    "hit@1": mean(hit_at(res.get(q.qid, []), q.gold_lines, 1) for q in ds.queries),
                    "hit@5": mean(hit_at(res.get(q.qid, []), q.gold_lines, 5) for q in ds.queries),
                }
            print(f"{ds.name} prior {h:g}: " + ", ".join(f"{m} {v:.4f}" for m, v in table[f'prior {h:g}'].items()),
                  file=sys.stderr, flush=True)
        out[ds.name] = table
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.studies.naming")
    ap.add_argument("--prior", default="1,2")
    ap.add_argument("--datasets", default="locomo-en,locomo-zh,scifact")
    ap.add_argument("--data", type=Path, default=None)
    ap.add_argument("--work", type=Path, default=Path(__file__).resolve().parents[1] / "results" / "raw")
    ap.add_argument("--limit", type=int, default=None)
    a = ap.parse_args(argv)
    result = run(a.datasets.split(","), [float(x) for x in a.prior.split(",")], a.work, a.data or default_data_dir(),
                 a.limit)
    for name, table in result.items():
        print(f"\n{name}")
        for row, vals in table.items():
            print(f"  {row}: " + ", ".join(f"{m} {v:.4f}" for m, v in vals.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
