"""Memory and time of reading and syncing one huge memory file (keyword-only).

    python -m bench.studies.big_files [--mb 200] [--skip-full-sync]

Each operation runs in a fresh process; its peak resident memory (``ru_maxrss``) is printed beside
the file size, with the baseline of a process that only imported clawmem. The file is made once
under ``bench/results/raw/big-files/`` and reused.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
RAW = HERE / "results" / "raw" / "big-files"

CHILD = r"""
import json, os, resource, sys, time
from clawmem_core import MemoryConfig, MemoryIndex
ws, state, op, mb = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
out = {}
if op == "baseline":
    pass
elif op.startswith("get"):
    mem = MemoryIndex(ws, state_dir=state, config=MemoryConfig(provider="none"))
    if op == "get-2-lines":
        r = mem.read("memory/huge.md", from_line=1_000_000, lines=2)
    else:
        r = mem.read("memory/huge.md")
    out = {"chars": len(r.text), "truncated": r.truncated, "total_lines": r.total_lines}
    mem.close()
else:
    limit = 16 * 1024 * 1024 if op == "sync-default" else (mb + 8) * 1024 * 1024
    cfg = MemoryConfig.from_dict({"provider": "none", "sync": {"max_file_bytes": limit}})
    mem = MemoryIndex(ws, state_dir=state, config=cfg)
    rep = mem.sync(force=True)
    out = {"indexed": rep.files_indexed, "skipped": rep.files_skipped, "chunks": rep.chunks_indexed}
    mem.close()
out["seconds"] = time.perf_counter() - started
out["peak_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
out["import_kb"] = base
print(json.dumps(out))
"""


def make_file(mb: int) -> Path:
    ws = RAW / f"ws-{mb}mb"
    target = ws / "memory" / "huge.md"
    if target.exists() and target.stat().st_size >= mb * 1024 * 1024:
        return ws
    target.parent.mkdir(parents=True, exist_ok=True)
    words = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima 灯塔 咖啡".split()
    rng = random.Random(7)
    with open(target, "w", encoding="utf-8") as fh:
        size = 0
        while size < mb * 1024 * 1024:
            line = " ".join(rng.choice(words) for _ in range(12)) + "\n"
            fh.write(line)
            size += len(line.encode("utf-8"))
    (ws / "MEMORY.md").write_text("# Long term\n\njazz\n", encoding="utf-8")
    return ws


def run(ws: Path, op: str, mb: int) -> dict:
    state = RAW / f"state-{op}"
    proc = subprocess.run([sys.executable, "-c", CHILD, str(ws), str(state), op, str(mb)],
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--skip-full-sync", action="store_true", help="skip indexing the whole file (the slow part)")
    args = ap.parse_args(argv)
    t = time.perf_counter()
    ws = make_file(args.mb)
    size_mb = (ws / "memory" / "huge.md").stat().st_size / 1e6
    print(f"file: {size_mb:.0f} MB (made or reused in {time.perf_counter() - t:.1f} s)")
    ops = ["baseline", "get-2-lines", "get-whole", "sync-default"] + ([] if args.skip_full_sync else ["sync-raised-limit"])
    base_mb = None
    print(f"{'operation':<20}{'peak RSS MB':>12}{'over baseline MB':>18}{'/ file size':>12}{'seconds':>9}  result")
    for op in ops:
        r = run(ws, op, args.mb)
        peak = r["peak_kb"] / 1024
        base_mb = peak if op == "baseline" else base_mb
        extra = peak - (base_mb or 0)
        shown = {k: v for k, v in r.items() if k not in ("peak_kb", "import_kb", "seconds")}
        print(f"{op:<20}{peak:>12.0f}{extra:>18.0f}{extra / size_mb:>12.2f}{r['seconds']:>9.1f}  {shown}")


if __name__ == "__main__":
    main()
