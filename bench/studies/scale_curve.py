"""SQLite from 1k to 1M chunks: index build (keyword and vector phase), no-op and one-file sync in a
long-lived index (the change journal running), keyword/vector/hybrid search p50/p95 in process, cold
``clawmem search`` in a new process, peak RSS of the indexing and the searching process, index size.

Vectors come from the deterministic ``HashEmbedder`` (384 dims): this measures the store, not ranking.
Each phase runs in its own process (peak RSS is that process's own). Usage::

    python -m bench.studies.scale_curve run N [--work /tmp/scale]   # one scale, JSON to <work>/scale-N.json
    python -m bench.studies.scale_curve build|search TASK_JSON        # the worker phases (internal)
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .. import synth
from ..data import REPO_ROOT
from ..speed import _edit_file, _env
from ..worker import _peak_mb, _pcts

DIMS = 384


def _choice(spec: str) -> Any:
    from ..embedders import resolve

    return resolve(spec)


def _log(msg: str) -> None:
    print(time.strftime("%H:%M:%S"), msg, file=sys.stderr, flush=True)


def task_build(t: dict[str, Any]) -> dict[str, Any]:
    """Build from scratch (keyword phase, then vector phase), then time syncs in the same long-lived index."""
    import shutil

    from .. import engine

    ws, sd = Path(t["workspace"]), Path(t["state_dir"])
    if sd.exists():
        shutil.rmtree(sd)
    sd.mkdir(parents=True)
    res: dict[str, Any] = {"embedder": t["embedder"]}
    with engine.open_index(ws, sd, _choice(t["embedder"])) as mem:
        mem.fresh_budget = 600.0
        t0 = time.perf_counter()
        rep = mem.sync(force=True, vectors=False)
        res["keyword_seconds"] = time.perf_counter() - t0
        res["chunks"] = rep.chunks_indexed
        res["files"] = rep.files_indexed
        _log(f"keyword phase: {rep.chunks_indexed} chunks, {rep.files_indexed} files, {res['keyword_seconds']:.1f} s")
        t0 = time.perf_counter()
        rep = mem.sync()
        res["vector_seconds"] = time.perf_counter() - t0
        res["vectors"] = rep.vectors_completed
        res["vectors_pending"] = rep.vectors_pending
        res["build_peak_rss_mb"] = _peak_mb()
        _log(f"vector phase: {rep.vectors_completed} vectors, {res['vector_seconds']:.1f} s")
        # a long-lived index: the second sync starts the change journal, later ones are vouched for by it
        for _ in range(2):
            mem.sync()
        fr = getattr(mem, "_freshness", None)
        journal = getattr(fr, "journal", None)
        res["journal_running"] = bool(journal is not None and getattr(journal, "healthy", False))
        xs = []
        for _ in range(t.get("repeats", 7)):
            t0 = time.perf_counter()
            mem.sync()
            xs.append(time.perf_counter() - t0)
        res["noop_sync"] = _pcts(xs)
        target = ws / t["edit_file"]
        original = target.read_bytes()
        xs, scanned = [], []
        try:
            for i in range(t.get("repeats", 7)):
                with target.open("ab") as fh:
                    fh.write(f"- benchmark edit {i}: moved the launch review to Friday.\n".encode())
                t0 = time.perf_counter()
                rep = mem.sync()
                xs.append(time.perf_counter() - t0)
                scanned.append(rep.files_indexed)
        finally:
            target.write_bytes(original)
            mem.sync()
        res["one_file_sync"] = _pcts(xs)
        res["one_file_sync_files_indexed"] = scanned
        res["journal_scans"] = getattr(fr, "journal_scans", None)
    res["index_bytes"] = engine.index_size_bytes(sd)
    res["peak_rss_mb"] = max(res["build_peak_rss_mb"], _peak_mb())
    return res


def task_search(t: dict[str, Any]) -> dict[str, Any]:
    """Warm in-process search: keyword (provider none, on the keyword-only index), or vector and hybrid (on the
    hash-vector index). A provider change would be an identity change (a full reindex): each index is opened
    only with the provider it was built with."""
    from .. import engine
    from ..embedders import EmbedderChoice

    ws, sd = Path(t["workspace"]), Path(t["state_dir"])
    queries = t["queries"]
    res: dict[str, Any] = {"queries": len(queries)}
    hashc = _choice(f"hash-{DIMS}")
    sides = (("keyword", EmbedderChoice(label="none", provider="none"), "hybrid"),) if t["keyword"] else (
        ("vector", hashc, "vector"), ("hybrid", hashc, "hybrid"))
    for name, choice, mode in sides:
        with engine.open_index(ws, sd, choice, mode=mode) as mem:
            mem.sync()
            for q in queries[:10]:
                mem.search(q, max_results=6, min_score=0.35, record=False)
            xs = []
            for q in queries:
                t0 = time.perf_counter()
                mem.search(q, max_results=6, min_score=0.35, record=False)
                xs.append(time.perf_counter() - t0)
            res[name] = _pcts(xs)
        _log(f"search {name}: p50 {res[name]['p50_ms']:.1f} ms p95 {res[name]['p95_ms']:.1f} ms")
    res["peak_rss_mb"] = _peak_mb()
    return res


def _cli() -> list[str]:
    script = Path(sys.executable).parent / "clawmem"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from clawmem_core.cli import main; sys.exit(main())"]


def cold_cli(ws: Path, sd: Path, queries: list[str], repeats: int) -> dict[str, Any]:
    """``clawmem search`` in a new process (keyword-only, ``--provider none``), as bench/compare.py runs it."""
    env = _env()
    env["CLAWMEM_STATE_DIR"] = str(sd)
    walls, cpus, peaks = [], [], []
    for i in range(repeats + 1):
        cmd = _cli() + ["search", queries[i % len(queries)], "--workspace", str(ws), "--agent", "main",
                        "--provider", "none"]
        before = os.times()
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(ws))
        wall = time.perf_counter() - t0
        after = os.times()
        if p.returncode != 0:
            return {"ok": False, "error": (p.stderr.strip().splitlines() or ["?"])[-1][:300]}
        if i == 0:
            continue  # the CLI's first run is not timed (as in bench/compare.py)
        walls.append(wall)
        cpus.append((after.children_user - before.children_user) + (after.children_system - before.children_system))
    import resource

    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {"ok": True, "median_ms": 1000 * statistics.median(walls), "min_ms": 1000 * min(walls),
            "cpu_median_ms": 1000 * statistics.median(cpus), "n": len(walls), "children_peak_rss_mb": peak_kb / 1024}


def _worker(kind: str, task: dict[str, Any]) -> dict[str, Any]:
    p = subprocess.run([sys.executable, "-m", "bench.studies.scale_curve", kind, json.dumps(task)],
                       stdout=subprocess.PIPE, text=True, cwd=str(REPO_ROOT), env=_env())
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return {"ok": False, "error": f"worker exited {p.returncode}"}


def _save(work: Path, n: int, out: dict[str, Any]) -> None:
    (work / f"scale-{n}.json").write_text(json.dumps(out, indent=1))


def run_scale(n: int, work: Path, n_queries: int = 100, cli_repeats: int = 5) -> dict[str, Any]:
    ws = work / f"ws-{n}"
    t0 = time.perf_counter()
    man = synth.ensure(ws, n)
    out: dict[str, Any] = {"target_chunks": n, "files_generated": man.files, "bytes": man.bytes,
                           "generate_seconds": time.perf_counter() - t0, "load_start": os.getloadavg()}
    _log(f"{n}: workspace {man.files} files ({out['generate_seconds']:.0f} s)")
    n_en = int(round(n_queries * (1 - man.zh_share)))
    queries = man.queries_en[:n_en] + man.queries_zh[: n_queries - n_en]
    edit = _edit_file(ws)
    vsd, ksd = work / f"state-{n}-hash", work / f"state-{n}-keyword"
    out["build"] = _worker("build", {"workspace": str(ws), "state_dir": str(vsd), "edit_file": edit,
                                     "embedder": f"hash-{DIMS}"})
    _log(f"{n}: build {json.dumps(out['build'])[:600]}")
    _save(work, n, out)
    out["search"] = _worker("search", {"workspace": str(ws), "state_dir": str(vsd), "queries": queries,
                                       "keyword": False})
    _save(work, n, out)
    out["build_keyword"] = _worker("build", {"workspace": str(ws), "state_dir": str(ksd), "edit_file": edit,
                                             "embedder": "none"})
    _log(f"{n}: keyword-only build {json.dumps(out['build_keyword'])[:600]}")
    _save(work, n, out)
    out["search_keyword"] = _worker("search", {"workspace": str(ws), "state_dir": str(ksd), "queries": queries,
                                               "keyword": True})
    _save(work, n, out)
    out["cold_cli"] = cold_cli(ws, ksd, man.queries_en[:5] + man.queries_zh[:5], cli_repeats)
    _log(f"{n}: cold cli {out['cold_cli']}")
    out["load_end"] = os.getloadavg()
    return out


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("build", "search"):
        task = json.loads(argv[1])
        res = (task_build if argv[0] == "build" else task_search)(task)
        res["ok"] = True
        print("RESULT " + json.dumps(res), flush=True)
        return 0
    if argv and argv[0] == "run":
        n = int(argv[1])
        work = Path(argv[argv.index("--work") + 1]) if "--work" in argv else Path("/tmp/scale")
        work.mkdir(parents=True, exist_ok=True)
        _save(work, n, run_scale(n, work))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
