"""Scratch: grid over fusion variants, compact report."""
import pickle, sys
import numpy as np
from pathlib import Path
from .calib_study import Q  # noqa
import __main__; __main__.Q = Q
from .calib_eval import evaluate, vcal, tcov_v, sat, cosz

TH = [round(x, 3) for x in np.arange(0.05, 0.61, 0.025)]


def tfun(kind):
    def f(q):
        x = q.bm25 / max(1e-12, __import__('bench.calib_eval', fromlist=['x']).mass_variant(q, "nobigram"))
        if kind == "cap":
            return np.minimum(1.0, x)
        if kind == "exp":
            return 1 - np.exp(-x)
        if kind == "exp2":
            return 1 - np.exp(-2 * x)
        if kind == "tanh":
            return np.tanh(x)
    return f


def methods():
    m = {"kw": lambda q: np.where(q.kw_pos > 0, sat(q), -1.0), "openclaw": lambda q: 0.7 * cosz(q) + 0.3 * sat(q)}
    for kind in ("cap", "exp", "exp2", "tanh"):
        t = tfun(kind)
        m[f"kwonly-{kind}"] = (lambda t: lambda q: np.where(q.kw_pos > 0, t(q), -1.0))(t)
        for w in (0.2, 0.3, 0.4, 0.5):
            m[f"{kind}-w{w}"] = (lambda t, w: lambda q: w * vcal(q) + (1 - w) * t(q))(t, w)
    return m


def main():
    res = {}
    for p in sys.argv[1].split(","):
        res.update(pickle.loads(Path(p).read_bytes()))
    only = sys.argv[2].split(",") if len(sys.argv) > 2 else None
    groups = {}
    for (label, ds, ws), qs in res.items():
        groups.setdefault((label, ds), []).extend(qs)
    labels = sorted({l for l, _ in groups})
    for label in labels:
        print(f"## {label}")
        for name, fn in methods().items():
            if only and not any(name.startswith(o) for o in only):
                continue
            cells = []; ok = None
            for ds in ("locomo-en", "locomo-zh", "scifact"):
                if (label, ds) not in groups:
                    continue
                h1, h5, fr, h5t = evaluate(groups[(label, ds)], fn, TH)
                good = {t for t in TH if fr[t] < 0.10 and h5t[t] >= h5 - 0.01}
                ok = good if ok is None else ok & good
                cells.append(f"{ds[7:] or ds} {h1:.3f}/{h5:.3f}")
            rng = f"{min(ok):.3f}-{max(ok):.3f}" if ok else "none"
            print(f"{name:14s} " + "  ".join(cells) + f"  θ ok: {rng}")


if __name__ == "__main__":
    main()


def curve(paths, name):
    res = {}
    for p in paths.split(","):
        res.update(pickle.loads(Path(p).read_bytes()))
    groups = {}
    for (label, ds, ws), qs in res.items():
        groups.setdefault((label, ds), []).extend(qs)
    fn = methods()[name]
    for (label, ds), qs in sorted(groups.items()):
        h1, h5, fr, h5t = evaluate(qs, fn, TH)
        print(f"{label} {ds} h5 {h5:.3f}: " + " ".join(f"{t}:{fr[t]:.2f}/{h5 - h5t[t]:+.3f}" for t in TH if 0.1 <= t <= 0.35))
