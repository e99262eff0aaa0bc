"""What the calibration background costs a hybrid search: the query's cosines to the 48 background
vectors, before (pure-Python dot products) and after (one matrix-vector product over unit vectors
kept per background object).

    python -m bench.studies.background_cosines [--dims 384,768,3072] [--rounds 300] [--searches 60]

For each dimension it prints, interleaved round by round (A then B, so both see the same load):

- ``step``: microseconds per search for the background cosines alone, old formula and new, and
  their ratio;
- ``search``: microseconds per whole hybrid search (a small SQLite index, a hash embedder of that
  dimension, the query vector cached) with the old formula patched in, and with the new one;
- the one-time costs of the new path: importing numpy in a fresh interpreter (a process that has not
  imported it yet pays this on its first hybrid search) and building the unit matrix.

The load average is printed at the start and the end. Each run is added to
``bench/results/background_cosines.md`` unless ``--no-save``.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from clawmem_core import calibration
from clawmem_core.calibration import BACKGROUND_TEXTS


def old_formula(qvec: Sequence[float], background: Sequence[Sequence[float]]) -> list[float]:
    """The computation search.py ran before (background vectors are unit vectors)."""
    norm = math.sqrt(sum(a * a for a in qvec)) or 1.0
    return [sum(a * b for a, b in zip(qvec, bg)) / norm for bg in background]


def _unit(v: list[float]) -> list[float]:
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v]


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def step_times(dims: int, rounds: int) -> dict[str, float]:
    """Per-call microseconds (median over rounds) of the old and the new background cosines."""
    rng = random.Random(dims)
    background = [_unit([rng.gauss(0, 1) for _ in range(dims)]) for _ in BACKGROUND_TEXTS]
    queries = [[rng.gauss(0, 1) for _ in range(dims)] for _ in range(16)]
    import numpy  # noqa: F401  (its import is timed apart, in a fresh interpreter)

    t0 = time.perf_counter()
    calibration.background_cosines(queries[0], background)  # builds the unit matrix once
    first = time.perf_counter() - t0
    old: list[float] = []
    new: list[float] = []
    for i in range(rounds):
        q = queries[i % len(queries)]
        t0 = time.perf_counter()
        old_formula(q, background)
        t1 = time.perf_counter()
        calibration.background_cosines(q, background)
        t2 = time.perf_counter()
        old.append(t1 - t0)
        new.append(t2 - t1)
    o, n = statistics.median(old) * 1e6, statistics.median(new) * 1e6
    return {"old_us": o, "new_us": n, "ratio": o / n, "first_call_us": first * 1e6}


def _workspace(root: Path, files: int) -> None:
    rng = random.Random(3)
    en = "garden tomato water compost basil carrot fence shed hose seed jazz piano train flight museum".split()
    zh = "番茄 浇水 堆肥 花园 胡萝卜 火车 航班 博物馆 钢琴 种子".split()
    (root / "memory").mkdir(parents=True, exist_ok=True)
    (root / "MEMORY.md").write_text("# Memory\n\nThe tomato beds get water every morning.\n", encoding="utf-8")
    for i in range(files):
        lines = [" ".join(rng.choices(en, k=10)) + f" n{i}" for _ in range(6)] + ["".join(rng.choices(zh, k=8))]
        (root / "memory" / f"2026-01-{i % 28 + 1:02d}-{i}.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def search_times(dims: int, searches: int, tmp: Path) -> dict[str, float]:
    """Per-search microseconds (median) of whole hybrid searches with the old and the new formula,
    interleaved."""
    from clawmem_core import MemoryConfig, MemoryIndex
    from clawmem_core.testing import HashEmbedder

    ws = tmp / f"ws{dims}"
    _workspace(ws, 120)
    cfg = MemoryConfig.from_dict({"sync": {"onSearch": False, "onSessionStart": False, "watch": False}})
    queries = ["tomato water", "compost basil fence", "jazz piano", "番茄 浇水", "火车 航班", "seed hose shed"]
    mem = MemoryIndex(ws, config=cfg, embedder=HashEmbedder(dims=dims), state_dir=tmp / f"state{dims}")
    try:
        mem.sync()
        for q in queries:  # warm: background embedded, query vectors cached, pages in memory
            mem.search(q)
        new_impl = calibration.background_cosines
        old: list[float] = []
        new: list[float] = []
        for i in range(searches):
            q = queries[i % len(queries)]
            for impl, out in ((old_formula, old), (new_impl, new)):
                calibration.background_cosines = impl  # type: ignore[assignment]
                try:
                    t0 = time.perf_counter()
                    mem.search(q)
                    out.append(time.perf_counter() - t0)
                finally:
                    calibration.background_cosines = new_impl  # type: ignore[assignment]
    finally:
        mem.close()
    o, n = statistics.median(old) * 1e6, statistics.median(new) * 1e6
    return {"old_us": o, "new_us": n, "ratio": o / n}


def numpy_import_ms() -> float:
    """Milliseconds to import numpy in a fresh interpreter (median of 3)."""
    code = "import time; t = time.perf_counter(); import numpy; print(time.perf_counter() - t)"
    runs = [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
            for _ in range(3)]
    return statistics.median(runs) * 1e3


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dims", default="384,768,3072")
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--searches", type=int, default=60)
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args(argv)
    dims = [int(d) for d in a.dims.split(",")]
    load_start = _load()
    print(f"load at start: {load_start}")
    rows: list[tuple[int, dict[str, float], dict[str, float]]] = []
    with tempfile.TemporaryDirectory(prefix="clawmem-bgcos-") as tmp:
        for d in dims:
            step = step_times(d, a.rounds)
            search = search_times(d, a.searches, Path(tmp))
            rows.append((d, step, search))
            print(f"{d:5d}-d  step: old {step['old_us']:8.1f} us  new {step['new_us']:6.1f} us  ratio {step['ratio']:6.1f}x"
                  f"  (first call {step['first_call_us']:.0f} us)   search: old {search['old_us']:8.0f} us"
                  f"  new {search['new_us']:8.0f} us  ratio {search['ratio']:.2f}x  load {_load()}", flush=True)
    imp = numpy_import_ms()
    load_end = _load()
    print(f"numpy import in a fresh interpreter: {imp:.0f} ms (once per process)")
    print(f"load at end: {load_end}")
    if a.no_save:
        return
    out = Path(__file__).resolve().parents[1] / "results" / "background_cosines.md"
    head = ["# Calibration background cosines per search", "",
            "`python -m bench.studies.background_cosines` (medians; old and new interleaved in one run). One section per run,",
            "newest last.", ""]
    earlier = out.read_text(encoding="utf-8").split("\n## ", 1) if out.exists() else []
    kept = "## " + earlier[1].rstrip("\n") + "\n\n" if len(earlier) == 2 else ""
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [
        f"## {stamp}: load {load_start} at start, {load_end} at end ({os.cpu_count()} CPUs)",
        "",
        "| dims | step old (us) | step new (us) | step ratio | search old (us) | search new (us) | search ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for d, step, search in rows:
        lines.append(f"| {d} | {step['old_us']:.1f} | {step['new_us']:.1f} | {step['ratio']:.1f}x | "
                     f"{search['old_us']:.0f} | {search['new_us']:.0f} | {search['ratio']:.2f}x |")
    lines += [
        "",
        f"One-time costs of the new path: numpy import {imp:.0f} ms in a fresh interpreter (paid by the first hybrid "
        "search of a process that has not imported numpy yet); first call per background object (unit matrix) "
        + ", ".join(f"{d}-d {step['first_call_us']:.0f} us" for d, step, _ in rows) + ".",
        "",
    ]
    out.write_text("\n".join(head) + "\n" + kept + "\n".join(lines).rstrip("\n") + "\n", encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
