"""SQLite from 1k to 1M chunks: index build (keyword and vector phase), no-op and one-file sync in a
long-lived index (the change journal running), keyword/vector/hybrid search p50/p95 in process, cold
``clawmem search`` in a new process, peak RSS of the indexing and the searching process, index size.

Vectors come from the deterministic ``HashEmbedder`` (384 dims): this measures the store, not ranking.
Each phase runs in its own process (peak RSS is that process's own). Usage::

    python -m bench.studies.scale_curve run N [--work /tmp/scale]   # one scale, JSON to <work>/scale-N.json
        [--parallel]      # the hash-vector and the keyword-only chains at the same time (cores to spare)
        [--keyword-only]  # the keyword-only chain alone
    python -m bench.studies.scale_curve build|search TASK_JSON        # the worker phases (internal)
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .. import synth
from ..data import REPO_ROOT
from ..speed import _edit_file, _env
from ..worker import _peak_mb, _pcts, timed_syncs

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
        res.update(timed_syncs(mem, ws / t["edit_file"], t.get("repeats", 7)))
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
        with tempfile.TemporaryFile() as err:
            t0 = time.perf_counter()
            p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=str(ws))
            _, status, ru = os.wait4(p.pid, 0)  # this child's own rusage (peak RSS and CPU)
            wall = time.perf_counter() - t0
            p.returncode = os.waitstatus_to_exitcode(status)
            if p.returncode != 0:
                err.seek(0)
                return {"ok": False, "error": (err.read().decode(errors="replace").strip().splitlines() or ["?"])[-1][:300]}
        if i == 0:
            continue  # the CLI's first run is not timed (as in bench/compare.py)
        walls.append(wall)
        cpus.append(ru.ru_utime + ru.ru_stime)
        peaks.append(ru.ru_maxrss / 1024)
    return {"ok": True, "median_ms": 1000 * statistics.median(walls), "min_ms": 1000 * min(walls),
            "cpu_median_ms": 1000 * statistics.median(cpus), "n": len(walls), "peak_rss_mb": max(peaks)}


def _worker(kind: str, task: dict[str, Any]) -> dict[str, Any]:
    p = subprocess.run([sys.executable, "-m", "bench.studies.scale_curve", kind, json.dumps(task)],
                       stdout=subprocess.PIPE, text=True, cwd=str(REPO_ROOT), env=_env())
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return {"ok": False, "error": f"worker exited {p.returncode}"}


def _save(work: Path, n: int, out: dict[str, Any]) -> None:
    (work / f"scale-{n}.json").write_text(json.dumps(out, indent=1))


def run_scale(n: int, work: Path, n_queries: int = 100, cli_repeats: int = 5, *, parallel: bool = False,
              hash_index: bool = True) -> dict[str, Any]:
    """One scale. ``parallel`` runs the hash-vector chain (build, then search) and the keyword-only chain (build,
    search, cold CLI) at the same time, for a machine with cores to spare; ``hash_index=False`` measures the
    keyword-only chain alone."""
    from concurrent.futures import ThreadPoolExecutor

    ws = work / f"ws-{n}"
    t0 = time.perf_counter()
    man = synth.ensure(ws, n)
    out: dict[str, Any] = {"target_chunks": n, "files_generated": man.files, "bytes": man.bytes,
                           "generate_seconds": time.perf_counter() - t0, "load_start": os.getloadavg(),
                           "parallel": parallel, "cpus": os.cpu_count()}
    _log(f"{n}: workspace {man.files} files ({out['generate_seconds']:.0f} s)")
    n_en = int(round(n_queries * (1 - man.zh_share)))
    queries = man.queries_en[:n_en] + man.queries_zh[: n_queries - n_en]
    edit = _edit_file(ws)
    vsd, ksd = work / f"state-{n}-hash", work / f"state-{n}-keyword"

    def hash_chain() -> None:
        out["build"] = _worker("build", {"workspace": str(ws), "state_dir": str(vsd), "edit_file": edit,
                                         "embedder": f"hash-{DIMS}"})
        _log(f"{n}: build {json.dumps(out['build'])[:600]}")
        _save(work, n, out)
        out["search"] = _worker("search", {"workspace": str(ws), "state_dir": str(vsd), "queries": queries,
                                           "keyword": False})
        _save(work, n, out)

    def keyword_chain() -> None:
        out["build_keyword"] = _worker("build", {"workspace": str(ws), "state_dir": str(ksd), "edit_file": edit,
                                                 "embedder": "none"})
        _log(f"{n}: keyword-only build {json.dumps(out['build_keyword'])[:600]}")
        _save(work, n, out)
        out["search_keyword"] = _worker("search", {"workspace": str(ws), "state_dir": str(ksd),
                                                   "queries": queries, "keyword": True})
        _save(work, n, out)
        out["cold_cli"] = cold_cli(ws, ksd, man.queries_en[:5] + man.queries_zh[:5], cli_repeats)
        _log(f"{n}: cold cli {out['cold_cli']}")

    chains = ([hash_chain] if hash_index else []) + [keyword_chain]
    if parallel and len(chains) > 1:
        with ThreadPoolExecutor(len(chains)) as pool:
            for f in [pool.submit(c) for c in chains]:
                f.result()
    else:
        for c in chains:
            c()
    out["load_end"] = os.getloadavg()
    return out


def _f(x: Any, fmt: str = "{:.1f}") -> str:
    return "—" if x is None else fmt.format(x)


def _g(d: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def report(work: Path, out: Path, notes: str = "") -> None:
    """Collect ``<work>/scale-N.json`` into ``<out>.json`` and a Markdown table ``<out>.md``."""
    runs = {}
    for p in sorted(work.glob("scale-*.json"), key=lambda q: int(q.stem.split("-")[1])):
        runs[p.stem.split("-")[1]] = json.loads(p.read_text())
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=str(REPO_ROOT)).stdout.strip()
    meta = {"commit": commit, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": "2 shared cores (a CI run and other benchmarks on the same cores)", "embedder": f"hash-{DIMS}"}
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "scales": runs}, indent=1))
    rows = [
        ("chunks", lambda r: _f(_g(r, "build", "chunks"), "{:,}")),
        ("files", lambda r: _f(_g(r, "build", "files"), "{:,}")),
        ("keyword phase, chunks/s (hash index)",
         lambda r: _f(_g(r, "build", "chunks") / _g(r, "build", "keyword_seconds"), "{:,.0f}") if _g(r, "build", "keyword_seconds") else "—"),
        ("vector phase, chunks/s (hash-384)",
         lambda r: _f(_g(r, "build", "vectors") / _g(r, "build", "vector_seconds"), "{:,.0f}") if _g(r, "build", "vector_seconds") else "—"),
        ("build, keyword + vector (s)",
         lambda r: _f(_g(r, "build", "keyword_seconds") + _g(r, "build", "vector_seconds"), "{:,.1f}") if _g(r, "build", "vector_seconds") else "—"),
        ("keyword-only index, chunks/s",
         lambda r: _f(_g(r, "build_keyword", "chunks") / _g(r, "build_keyword", "keyword_seconds"), "{:,.0f}") if _g(r, "build_keyword", "keyword_seconds") else "—"),
        ("no-op sync p50, keyword-only / hash (ms)",
         lambda r: f"{_f(_g(r, 'build_keyword', 'noop_sync', 'p50_ms'), '{:.2f}')} / {_f(_g(r, 'build', 'noop_sync', 'p50_ms'), '{:.2f}')}"),
        ("one-file sync p50, keyword-only / hash (ms)",
         lambda r: f"{_f(_g(r, 'build_keyword', 'one_file_sync', 'p50_ms'))} / {_f(_g(r, 'build', 'one_file_sync', 'p50_ms'))}"),
        ("one-file sync p95, keyword-only / hash (ms)",
         lambda r: f"{_f(_g(r, 'build_keyword', 'one_file_sync', 'p95_ms'))} / {_f(_g(r, 'build', 'one_file_sync', 'p95_ms'))}"),
        ("change journal running", lambda r: f"{_g(r, 'build_keyword', 'journal_running')} / {_g(r, 'build', 'journal_running')}"),
        ("keyword search p50 / p95 (ms)",
         lambda r: f"{_f(_g(r, 'search_keyword', 'keyword', 'p50_ms'))} / {_f(_g(r, 'search_keyword', 'keyword', 'p95_ms'))}"),
        ("vector search p50 / p95 (ms)",
         lambda r: f"{_f(_g(r, 'search', 'vector', 'p50_ms'))} / {_f(_g(r, 'search', 'vector', 'p95_ms'))}"),
        ("hybrid search p50 / p95 (ms)",
         lambda r: f"{_f(_g(r, 'search', 'hybrid', 'p50_ms'))} / {_f(_g(r, 'search', 'hybrid', 'p95_ms'))}"),
        ("cold `clawmem search`, median wall (ms)", lambda r: _f(_g(r, "cold_cli", "median_ms"), "{:,.0f}")),
        ("cold `clawmem search`, median CPU (ms)", lambda r: _f(_g(r, "cold_cli", "cpu_median_ms"), "{:,.0f}")),
        ("peak RSS, building hash index (MiB)", lambda r: _f(_g(r, "build", "peak_rss_mb"), "{:,.0f}")),
        ("peak RSS, building keyword-only index (MiB)", lambda r: _f(_g(r, "build_keyword", "peak_rss_mb"), "{:,.0f}")),
        ("peak RSS, vector + hybrid searching (MiB)", lambda r: _f(_g(r, "search", "peak_rss_mb"), "{:,.0f}")),
        ("peak RSS, keyword searching (MiB)", lambda r: _f(_g(r, "search_keyword", "peak_rss_mb"), "{:,.0f}")),
        ("peak RSS, cold CLI (MiB)", lambda r: _f(_g(r, "cold_cli", "peak_rss_mb"), "{:,.0f}")),
        ("index size, hash-384 (MiB)", lambda r: _f((_g(r, "build", "index_bytes") or 0) / 2**20 or None, "{:,.0f}")),
        ("index size, keyword-only (MiB)", lambda r: _f((_g(r, "build_keyword", "index_bytes") or 0) / 2**20 or None, "{:,.0f}")),
        ("Markdown (MiB)", lambda r: _f(r["bytes"] / 2**20, "{:,.0f}")),
        ("load average (1 min) at start / end",
         lambda r: f"{r['load_start'][0]:.1f} / {r['load_end'][0]:.1f}" if r.get("load_end") else f"{r['load_start'][0]:.1f} / —"),
    ]
    names = list(runs)
    lines = ["| | " + " | ".join(f"{int(n):,}" for n in names) + " |", "|---|" + "---|" * len(names)]
    for label, fn in rows:
        cells = []
        for n in names:
            try:
                cells.append(fn(runs[n]))
            except Exception:
                cells.append("—")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    md = [f"# SQLite from 1k to 1M chunks (`bench/studies/scale_curve.py`)", "",
          f"Commit {commit}, {meta['date']}; {meta['machine']}: not idle-machine figures. "
          f"Vectors from the deterministic `HashEmbedder` ({DIMS} dims): this measures the store, not ranking.", "",
          "\n".join(lines), "", notes]
    out.with_suffix(".md").write_text("\n".join(md).rstrip() + "\n")


def main(argv: list[str]) -> int:
    if argv and argv[0] == "report":
        work = Path(argv[argv.index("--work") + 1]) if "--work" in argv else Path("/tmp/scale")
        notes = Path(argv[argv.index("--notes") + 1]).read_text() if "--notes" in argv else ""
        report(work, REPO_ROOT / "bench" / "results" / "scale_curve", notes)
        return 0
    if argv and argv[0] in ("build", "search"):
        task = json.loads(argv[1])
        res = (task_build if argv[0] == "build" else task_search)(task)
        res["ok"] = True
        print("RESULT " + json.dumps(res), flush=True)
        return 0
    if argv and argv[0] == "cli":  # re-measure the cold CLI alone on an existing scale
        n = int(argv[1])
        work = Path(argv[argv.index("--work") + 1]) if "--work" in argv else Path("/tmp/scale")
        out = json.loads((work / f"scale-{n}.json").read_text())
        man = synth.ensure(work / f"ws-{n}", n)
        out["cold_cli"] = cold_cli(work / f"ws-{n}", work / f"state-{n}-keyword",
                                   man.queries_en[:5] + man.queries_zh[:5], 5)
        _log(f"{n}: cold cli {out['cold_cli']}")
        _save(work, n, out)
        return 0
    if argv and argv[0] == "run":
        n = int(argv[1])
        work = Path(argv[argv.index("--work") + 1]) if "--work" in argv else Path("/tmp/scale")
        work.mkdir(parents=True, exist_ok=True)
        _save(work, n, run_scale(n, work, parallel="--parallel" in argv, hash_index="--keyword-only" not in argv))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
