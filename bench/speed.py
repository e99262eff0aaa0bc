"""Speed and scale on generated workspaces: indexing throughput, no-op and one-file syncs, search latency,
exact-vector baselines, cold CLI wall time, import time, peak memory and index size."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from . import synth
from .data import REPO_ROOT


BLAS_THREADS: int | None = None


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    if BLAS_THREADS:
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = str(BLAS_THREADS)
    return env


def run_worker(task: dict[str, Any], timeout: float = 3600) -> dict[str, Any]:
    env = _env()
    proc = subprocess.run([sys.executable, "-m", "bench.worker", json.dumps(task)], capture_output=True,
                          text=True, timeout=timeout, cwd=str(REPO_ROOT), env=env)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return {"ok": False, "error": f"worker exited {proc.returncode}", "stderr": proc.stderr[-3000:]}


def import_time(repeats: int = 5) -> dict[str, Any]:
    code = "import time; t=time.perf_counter(); import clawmem_core; print(time.perf_counter()-t)"
    xs = []
    for _ in range(repeats):
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(REPO_ROOT),
                           env=_env())
        if p.returncode != 0:
            return {"ok": False, "error": p.stderr.strip().splitlines()[-1:] or ["failed"]}
        xs.append(float(p.stdout.strip().splitlines()[-1]))
    return {"ok": True, "median_ms": 1000 * statistics.median(xs), "min_ms": 1000 * min(xs)}


def _cli() -> list[str]:
    script = Path(sys.executable).parent / "clawmem"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from clawmem_core.cli import main; sys.exit(main())"]


def cold_cli_search(workspace: Path, state_dir: Path, queries: list[str], repeats: int = 5) -> dict[str, Any]:
    """Wall time of ``clawmem search`` in a new process on an existing keyword-only index."""
    env = _env()
    env["CLAWMEM_STATE_DIR"] = str(state_dir)
    forms = [
        lambda q: _cli() + ["search", q, "--workspace", str(workspace), "--provider", "none"],
        lambda q: _cli() + ["--workspace", str(workspace), "--provider", "none", "search", q],
    ]
    last_err = ""
    for form in forms:
        xs = []
        ok = True
        for i in range(repeats):
            q = queries[i % len(queries)]
            t0 = time.perf_counter()
            p = subprocess.run(form(q), capture_output=True, text=True, env=env, cwd=str(workspace))
            xs.append(time.perf_counter() - t0)
            if p.returncode != 0:
                ok = False
                last_err = (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1][:300]
                break
        if ok:
            return {"ok": True, "median_ms": 1000 * statistics.median(xs), "min_ms": 1000 * min(xs), "n": len(xs)}
    return {"ok": False, "error": last_err}


def _edit_file(ws: Path) -> str:
    daily = sorted(p for p in (ws / "memory").glob("*.md") if len(p.stem) == 10)
    pick = daily[len(daily) // 2] if daily else next(iter(sorted(ws.rglob("*.md"))))
    return pick.relative_to(ws).as_posix()


def run_scale(n: int, work: Path, log: Callable[[str], None], queries: int = 200, seed: int = 42,
              zh_share: float = 0.25, cli_repeats: int = 5, query_models: list[str] | None = None) -> dict[str, Any]:
    ws = work / "workspaces" / f"ws-{n}"
    t0 = time.perf_counter()
    man = synth.ensure(ws, n, seed=seed, zh_share=zh_share)
    log(f"speed {n}: workspace {man.files} files, {man.bytes / 2**20:.1f} MiB ({time.perf_counter() - t0:.1f} s)")
    out: dict[str, Any] = {"target_chunks": n, "files": man.files, "bytes": man.bytes}
    edit = _edit_file(ws)
    kw_sd = work / "state" / f"ws-{n}-none"
    vec_sd = work / "state" / f"ws-{n}-zero"
    for label, sd, emb in (("keyword", kw_sd, "none"), ("zero", vec_sd, "zero")):
        r = run_worker({"task": "index", "workspace": str(ws), "state_dir": str(sd), "embedder": emb,
                        "edit_file": edit, "repeats": 5})
        out[f"index_{label}"] = r
        if r.get("ok"):
            log(f"speed {n}: index {label}: {r.get('chunks')} chunks in {r['index_seconds']:.1f} s "
                f"({r.get('chunks_per_s', 0):.0f}/s), no-op sync {r['noop_sync']['p50_ms']:.1f} ms, "
                f"one-file {r['one_file_sync']['p50_ms']:.1f} ms, peak {r['peak_rss_mb']:.0f} MiB")
        else:
            log(f"speed {n}: index {label} FAILED: {r.get('error')}")
    n_en = int(round(queries * (1 - zh_share)))
    r = run_worker({"task": "search", "workspace": str(ws), "keyword_state_dir": str(kw_sd),
                    "vector_state_dir": str(vec_sd), "queries_en": man.queries_en[:n_en],
                    "queries_zh": man.queries_zh[: queries - n_en], "dims": 384,
                    "query_models": query_models or ["local", "hash-384"]})
    out["search"] = r
    if r.get("ok"):
        log(f"speed {n}: search p50 keyword {r['keyword']['p50_ms']:.2f} ms, vector "
            f"{r['vector']['excluded']['p50_ms']:.2f} ms, hybrid {r['hybrid']['excluded']['p50_ms']:.2f} ms, "
            f"recall@10 {r['vector']['recall@10']:.3f}; numpy {r['exact']['numpy']['p50_ms']:.2f} ms, "
            f"sqlite-vec {r['exact']['sqlite_vec']['p50_ms']:.2f} ms")
    else:
        log(f"speed {n}: search FAILED: {r.get('error')}")
    if out["index_keyword"].get("ok"):
        out["cold_cli"] = cold_cli_search(ws, kw_sd, man.queries_en[:5] + man.queries_zh[:5], repeats=cli_repeats)
        c = out["cold_cli"]
        log(f"speed {n}: cold clawmem search " + (f"{c['median_ms']:.0f} ms" if c.get("ok") else f"FAILED: {c['error']}"))
    return out


def run(scales: list[int], work: Path, log: Callable[[str], None], **kw: Any) -> dict[str, Any]:
    res: dict[str, Any] = {"import": import_time(), "scales": {}}
    imp = res["import"]
    log("import clawmem_core: " + (f"{imp['median_ms']:.0f} ms" if imp.get("ok") else f"FAILED {imp.get('error')}"))
    for n in scales:
        res["scales"][str(n)] = run_scale(n, work, log, **kw)
    return res
