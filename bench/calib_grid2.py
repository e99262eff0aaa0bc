"""Scratch: weight/adaptivity grid over several embedders at once."""
import pickle, sys
import numpy as np
from pathlib import Path
from .calib_study import Q  # noqa
import __main__; __main__.Q = Q
from .calib_eval import evaluate, vcal, sat, mass_variant

TH = [round(x, 3) for x in np.arange(0.1, 0.41, 0.025)]


def tcap(q):
    m = mass_variant(q, "nobigram")
    return np.minimum(1.0, q.bm25 / m) if m > 0 else np.zeros_like(q.bm25)


def tmax(q):
    m = max(mass_variant(q, "nobigram"), q.bm25.max() if len(q.bm25) else 0.0)
    return q.bm25 / m if m > 0 else np.zeros_like(q.bm25)


def methods():
    m = {"kw": lambda q: np.where(q.kw_pos > 0, sat(q), -1.0)}
    for w in (0.3, 0.4, 0.5):
        m[f"lin{w}"] = (lambda w: lambda q: w * vcal(q) + (1 - w) * tcap(q))(w)
        m[f"max{w}"] = (lambda w: lambda q: w * vcal(q) + (1 - w) * tmax(q))(w)
        continue
        for ref in (0.3, 0.5):
            def f(q, w=w, ref=ref):
                v = vcal(q); wq = w * min(1.0, v.max() / ref) if len(v) else 0
                return wq * v + (1 - wq) * tcap(q)
            m[f"adapt{w}/{ref}"] = f
    return m


def main():
    res = {}
    for p in sys.argv[1].split(","):
        res.update(pickle.loads(Path(p).read_bytes()))
    groups = {}
    for (label, ds, ws), qs in res.items():
        groups.setdefault((label, ds), []).extend(qs)
    base = {k: evaluate(v, methods()["kw"], TH) for k, v in groups.items()}
    for name, fn in methods().items():
        cells = []; ok = set(TH); worse = 0
        for key in sorted(groups):
            h1, h5, fr, h5t = evaluate(groups[key], fn, TH)
            b1, b5 = base[key][0], base[key][1]
            worse += (h1 < b1 - 1e-9) + (h5 < b5 - 1e-9)
            if key[1] != "scifact":
                ok &= {t for t in TH if fr[t] < 0.10 and h5t[t] >= h5 - 0.01}
            cells.append(f"{key[0][:9]}/{key[1][7:9] or 'sf'} {h1 - b1:+.3f}/{h5 - b5:+.3f}")
        rng = f"{min(ok):.3f}-{max(ok):.3f}" if ok else "none"
        print(f"{name:14s} worse {worse}  θ {rng} | " + " ".join(cells))


if __name__ == "__main__":
    main()
