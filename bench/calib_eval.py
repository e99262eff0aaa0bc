"""Scratch evaluation of fusion methods on calib_study pickles."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import numpy as np

from .calib_study import Q  # noqa: F401  (unpickling)
from .metrics import Span, covered_gold


def sat(q):
    return np.where(q.kw_pos > 0, q.bm25 / (1 + q.bm25), 0.0)


def tcov(q):
    return np.minimum(1.0, q.bm25 / q.idf_mass) if q.idf_mass > 0 else np.zeros_like(q.bm25)


def cosz(q):
    return np.nan_to_num(q.cos, nan=0.0)


def vcal(q, stat="max", k=0.0):
    bg = q.bg
    lvl = {"max": bg.max(), "mean": bg.mean(), "p90": np.quantile(bg, 0.9), "mk": bg.mean() + k * bg.std()}[stat]
    lvl = min(lvl, 0.999)
    return np.where(np.isnan(q.cos), 0.0, np.clip((np.nan_to_num(q.cos) - lvl) / (1 - lvl), 0, 1))


def rrf(q, wv=0.5, wt=0.5, k=60):
    s = np.where(q.kw_pos > 0, wt / (k + q.kw_pos), 0) + np.where(q.vec_pos > 0, wv / (k + q.vec_pos), 0)
    return s * (k + 1)


def METHODS():
    m = {
        "kw": lambda q: np.where(q.kw_pos > 0, sat(q), -1.0),
        "openclaw": lambda q: 0.7 * cosz(q) + 0.3 * sat(q),
        "rrf": lambda q: rrf(q),
        "kwcov": lambda q: np.where(q.kw_pos > 0, tcov(q), -1.0),
        "vcal": lambda q: vcal(q),
    }
    for w in (0.3, 0.4, 0.5, 0.6):
        m[f"cal{w}"] = (lambda w: lambda q: w * vcal(q) + (1 - w) * tcov(q))(w)
    for w in (0.5,):
        m[f"calmean{w}"] = (lambda w: lambda q: w * vcal(q, "mean") + (1 - w) * tcov(q))(w)
        m[f"calp90{w}"] = (lambda w: lambda q: w * vcal(q, "p90") + (1 - w) * tcov(q))(w)
        m[f"calmk2{w}"] = (lambda w: lambda q: w * vcal(q, "mk", 2) + (1 - w) * tcov(q))(w)
    return m


def evaluate(qs, fn, thresholds):
    h1 = []; h5 = []; fr = {t: [] for t in thresholds}; h5t = {t: [] for t in thresholds}
    for q in qs:
        s = fn(q)
        order = np.lexsort((np.arange(len(s)), -s))
        order = [i for i in order if s[i] > -1]
        spans = [Span(*q.keys[i]) for i in order]
        if q.gold is None:
            top = s[order[0]] if order else -1
            for t in thresholds:
                fr[t].append(1.0 if top >= t and top > 0 else 0.0)
        elif isinstance(q.gold, tuple) and q.gold and q.gold[0] == "beir":
            from .metrics import ndcg_at, rank_documents
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


def main():
    res = {}
    for p in sys.argv[1].split(","):
        res.update(pickle.loads(Path(p).read_bytes()))
    thresholds = [float(x) for x in (sys.argv[2] if len(sys.argv) > 2 else "0.1,0.2,0.3,0.35,0.4,0.5").split(",")]
    only = sys.argv[3].split(",") if len(sys.argv) > 3 else None
    groups: dict[tuple, list] = {}
    for (label, ds, ws), qs in res.items():
        groups.setdefault((label, ds), []).extend(qs)
    for (label, ds), qs in groups.items():
        print(f"## {label} {ds}: {sum(q.gold is not None for q in qs)} real, {sum(q.gold is None for q in qs)} foreign")
        for name, fn in METHODS().items():
            if only and name not in only:
                continue
            h1, h5, fr, h5t = evaluate(qs, fn, thresholds)
            curve = " ".join(f"{t}:{fr[t]:.2f}/{h5t[t]:.3f}" for t in thresholds)
            print(f"{name:12s} h1 {h1:.3f} h5 {h5:.3f} | {curve}")



def _extra(m):
    m["nor"] = lambda q: 1 - (1 - tcov(q)) * (1 - vcal(q))
    m["max"] = lambda q: np.maximum(tcov(q), vcal(q)) + 1e-3 * (tcov(q) + vcal(q))
    for w in (0.2, 0.3):
        m[f"nor_w{w}"] = (lambda w: lambda q: 1 - (1 - tcov(q)) * (1 - w * 2 * vcal(q).clip(0, 0.5)))(w)
    m["sum"] = lambda q: np.minimum(1.0, tcov(q) + vcal(q))
    m["sum.5"] = lambda q: np.minimum(1.0, tcov(q) + 0.5 * vcal(q))
    return m


_M = METHODS
METHODS = lambda: _extra(_M())  # noqa: E731


import math as _math
import re as _re

_CJK = _re.compile(r"^[\u3400-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af]{2}$")


def mass_variant(q, mode):
    tot = 0.0
    for t, n in q.terms:
        idf = max(1e-6, _math.log((q.n_docs - n + 0.5) / (n + 0.5)))
        if n == 0 and mode == "nobigram" and _CJK.match(t):
            continue
        if n == 0 and mode == "present":
            continue
        if n == 0 and mode == "half":
            idf *= 0.5
        tot += idf
    return tot


def tcov_v(q, mode):
    m = mass_variant(q, mode)
    return np.minimum(1.0, q.bm25 / m) if m > 0 else np.zeros_like(q.bm25)


def _extra2(m):
    for mode in ("nobigram", "half"):
        m[f"kw_{mode}"] = (lambda mode: lambda q: np.where(q.kw_pos > 0, tcov_v(q, mode), -1.0))(mode)
        m[f"sum.5_{mode}"] = (lambda mode: lambda q: np.minimum(1.0, tcov_v(q, mode) + 0.5 * vcal(q)))(mode)
        m[f"nor_{mode}"] = (lambda mode: lambda q: 1 - (1 - tcov_v(q, mode)) * (1 - vcal(q)))(mode)
        m[f"cal.3_{mode}"] = (lambda mode: lambda q: 0.3 * vcal(q) + 0.7 * tcov_v(q, mode))(mode)
    return m


_M2 = METHODS
METHODS = lambda: _extra2(_M2())  # noqa: E731


if __name__ == "__main__":
    main()
