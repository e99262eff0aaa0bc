"""Keyword ranking with the naming signals (``clawmem_core.search.HEADING_WEIGHT``, ``CURATED_PRIOR``)
against plain BM25, on LoCoMo (EN, ZH: hit@1, hit@5) and SciFact (nDCG@10, recall@100), keyword-only,
through ``MemoryIndex.search`` (``min_score=0``). Each data set is indexed once; the weights are
swapped between runs over the same index.

Usage: ``python -m bench.naming [--heading 0,0.5,1] [--datasets locomo-en,locomo-zh,scifact]``.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from .data import default_data_dir, load_all
from .metrics import Span, doc_recall_at, hit_at, mean, ndcg_at, rank_documents


def run(datasets: list[str], headings: list[float], work: Path, data: Path, limit: int | None = None,
        levels: int | None = None) -> dict[str, Any]:
    import re

    from clawmem_core import MemoryConfig, MemoryIndex
    from clawmem_core import search as S

    if levels is not None:  # headings of these levels only (1: a file's title)
        S._HEADING = re.compile(r"^ {0,3}#{1,%d}\s+(.+?)\s*#*\s*$" % levels, re.MULTILINE)

    out: dict[str, Any] = {}
    for ds in load_all(data, datasets, limit):
        by_ws: dict[Path, list[Any]] = defaultdict(list)
        for q in ds.queries:
            by_ws[q.workspace].append(q)
        k = 200 if ds.kind == "beir" else 10
        table: dict[str, dict[str, float]] = {}
        for h in headings:
            res: dict[str, list[Span]] = {}
            for ws, queries in sorted(by_ws.items()):
                cfg = MemoryConfig(provider="none")
                cfg.sync.watch = False
                cfg.sync.interval_minutes = 0
                cfg.sync.on_session_start = False
                sd = work / "naming" / ds.name / ws.name
                saved = S.HEADING_WEIGHT
                S.HEADING_WEIGHT = h
                try:
                    with MemoryIndex(str(ws), agent_id="main", config=cfg, state_dir=str(sd)) as mem:
                        mem.sync()
                        for q in queries:
                            hits = mem.search(q.text, max_results=k, min_score=0.0)
                            res[q.qid] = [Span(x.path, x.start_line, x.end_line) for x in hits]
                finally:
                    S.HEADING_WEIGHT = saved
            if ds.kind == "beir":
                docs = {q.qid: rank_documents(res.get(q.qid, [])) for q in ds.queries}
                table[f"heading {h:g}"] = {
                    "ndcg@10": mean(ndcg_at(docs[q.qid], q.relevant_paths, 10) for q in ds.queries),
                    "recall@100": mean(doc_recall_at(docs[q.qid], q.relevant_paths, 100) for q in ds.queries),
                }
            else:
                table[f"heading {h:g}"] = {
                    "hit@1": mean(hit_at(res.get(q.qid, []), q.gold_lines, 1) for q in ds.queries),
                    "hit@5": mean(hit_at(res.get(q.qid, []), q.gold_lines, 5) for q in ds.queries),
                }
            print(f"{ds.name} heading {h:g}: " + ", ".join(f"{m} {v:.4f}" for m, v in table[f'heading {h:g}'].items()),
                  file=sys.stderr, flush=True)
        out[ds.name] = table
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.naming")
    ap.add_argument("--heading", default="0,0.5,1")
    ap.add_argument("--datasets", default="locomo-en,locomo-zh,scifact")
    ap.add_argument("--data", type=Path, default=None)
    ap.add_argument("--work", type=Path, default=Path(__file__).resolve().parent / "results" / "raw")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--levels", type=int, default=None, help="heading levels that count (default: the product's)")
    a = ap.parse_args(argv)
    result = run(a.datasets.split(","), [float(x) for x in a.heading.split(",")], a.work, a.data or default_data_dir(),
                 a.limit)
    for name, table in result.items():
        print(f"\n{name}")
        for row, vals in table.items():
            print(f"  {row}: " + ", ".join(f"{m} {v:.4f}" for m, v in vals.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
