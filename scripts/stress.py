"""Opt-in stress run: N writer and M reader processes on one workspace and one index.

    python scripts/stress.py --writers 4 --readers 4 --seconds 60

Writers append unique lines (half through ``MemoryIndex.write``, half straight into their own
Markdown file followed by ``sync``; writer 0 forces a full reindex every 10th round). Readers
search and read ``status`` in a loop, with background sync on search enabled. At the end the
parent syncs once more and checks that every line written is in the Markdown and in the index.
Prints (and returns) operations done, errors (expected 0, "database is locked" counted apart),
index regressions seen by readers (a half-built index would show fewer files; expected 0) and
lines lost (expected 0).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any


def _open(ws: str, state: str) -> Any:
    from clawmem_core import MemoryIndex
    from clawmem_core.testing import HashEmbedder

    return MemoryIndex(ws, agent_id="main", embedder=HashEmbedder(), state_dir=state)


def _writer(i: int, ws: str, state: str, deadline: float, out: Any) -> None:
    res: dict[str, Any] = {"role": "writer", "ops": 0, "errors": [], "lines": []}
    try:
        mem = _open(ws, state)
        own = Path(ws) / "memory" / f"writer-{i}.md"
        n = 0
        while time.time() < deadline:
            line = f"stress w{i} n{n} marker w{i}x{n}q"
            try:
                if n % 2 == 0:
                    mem.write(line)
                else:
                    with open(own, "a", encoding="utf-8") as f:
                        f.write(f"- {line}\n")
                    mem.sync(force=(i == 0 and n % 10 == 9))
                res["lines"].append(line)
                res["ops"] += 1
            except Exception as exc:  # counted, the run goes on
                res["errors"].append(f"{type(exc).__name__}: {exc}")
            n += 1
        mem.close()
    except Exception:
        res["errors"].append(traceback.format_exc())
    out.put(res)


def _reader(j: int, ws: str, state: str, deadline: float, out: Any) -> None:
    res: dict[str, Any] = {"role": "reader", "ops": 0, "errors": [], "regressions": 0}
    try:
        mem = _open(ws, state)
        rng = random.Random(j)
        best = 0
        while time.time() < deadline:
            try:
                hits = mem.search(rng.choice(["jazz espresso", "stress marker", "kubernetes billing", "w0x1q"]))
                files = mem.status().files
                if files < best:
                    res["regressions"] += 1
                best = max(best, files)
                if not isinstance(hits, list):
                    raise AssertionError("search did not return a list")
                res["ops"] += 2
            except Exception as exc:
                res["errors"].append(f"{type(exc).__name__}: {exc}")
        mem.close()
    except Exception:
        res["errors"].append(traceback.format_exc())
    out.put(res)


def run(workdir: str | Path, writers: int = 4, readers: int = 4, seconds: float = 60.0) -> dict[str, Any]:
    import apsw

    work = Path(workdir)
    ws, state = work / "ws", work / "state"
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    (ws / "MEMORY.md").write_text("# Long term\n\nI like jazz and espresso.\n", encoding="utf-8")
    (ws / "memory" / "notes.md").write_text("# Ops\n\nDeployed the billing service to kubernetes.\n", encoding="utf-8")
    with _open(str(ws), str(state)) as mem:
        mem.sync()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    start = time.time()
    deadline = start + seconds + 3  # spawned processes need a moment to import
    procs = [ctx.Process(target=_writer, args=(i, str(ws), str(state), deadline, out)) for i in range(writers)]
    procs += [ctx.Process(target=_reader, args=(j, str(ws), str(state), deadline, out)) for j in range(readers)]
    for p in procs:
        p.start()
    results = [out.get(timeout=seconds + 600) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    with _open(str(ws), str(state)) as mem:
        mem.sync()
    markdown = "\n".join(p.read_text(encoding="utf-8") for p in sorted(ws.rglob("*.md")))
    conn = apsw.Connection(str(state / "memory" / "main.sqlite"))
    indexed = "\n".join(r[0] for r in conn.execute("SELECT text FROM chunks"))
    ok = conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    conn.close()
    lines = [line for r in results for line in r.get("lines", [])]
    errors = [e for r in results for e in r["errors"]]
    report = {
        "writers": writers,
        "readers": readers,
        "seconds": round(time.time() - start, 1),
        "write_ops": sum(r["ops"] for r in results if r["role"] == "writer"),
        "read_ops": sum(r["ops"] for r in results if r["role"] == "reader"),
        "errors": len(errors),
        "locked_errors": sum("locked" in e for e in errors),
        "error_samples": errors[:5],
        "regressions": sum(r.get("regressions", 0) for r in results),
        "lines_written": len(lines),
        "lines_lost_markdown": sum(line not in markdown for line in lines),
        "lines_lost_index": sum(line not in indexed for line in lines),
        "integrity_ok": ok,
        "temp_files_left": len(list((state / "memory").glob("*.tmp-*"))),
    }
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--readers", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--workdir", help="where to build the workspace (a temporary directory by default)")
    a = ap.parse_args(argv)
    if a.workdir:
        report = run(a.workdir, a.writers, a.readers, a.seconds)
    else:
        with tempfile.TemporaryDirectory(prefix="clawmem-stress-") as tmp:
            report = run(tmp, a.writers, a.readers, a.seconds)
    print(json.dumps(report, indent=2))
    bad = report["errors"] or report["regressions"] or report["lines_lost_markdown"] or report["lines_lost_index"]
    return 1 if bad or not report["integrity_ok"] or report["temp_files_left"] else 0


if __name__ == "__main__":
    sys.exit(main())
