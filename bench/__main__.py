"""``python -m bench run --profile quick|full`` runs the benchmark and writes ``bench/results/RESULTS.md``;
``python -m bench report`` rewrites the page from the saved JSON; ``python -m bench generate`` writes a
synthetic workspace."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import report
from .data import REPO_ROOT, default_data_dir

PROFILES: dict[str, dict[str, Any]] = {
    # about 5-8 minutes on 2 cores (keyword-only quality; the local model on LoCoMo only)
    "quick": {"scales": [1000, 10000], "datasets": ["locomo-en", "locomo-zh", "scifact"], "beir_embedders": False,
              "queries": 200, "cli_repeats": 5},
    "full": {"scales": [1000, 10000, 100000], "datasets": ["locomo-en", "locomo-zh", "scifact"],
             "beir_embedders": True, "queries": 300, "cli_repeats": 5},
    # seconds: for the smoke test
    "smoke": {"scales": [150], "datasets": [], "beir_embedders": False, "queries": 20, "cli_repeats": 1,
              "query_models": ["hash-384"]},
}


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def environment() -> dict[str, Any]:
    from importlib import metadata

    pk = {}
    for name in ("apsw", "sqlite-vec", "numpy", "rank-bm25"):
        try:
            pk[name] = metadata.version(name)
        except Exception:
            pass
    try:
        import apsw

        sqlite = apsw.sqlite_lib_version()
    except Exception:
        sqlite = "?"
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=str(REPO_ROOT)).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "clawmem_core"], capture_output=True,
                               text=True, cwd=str(REPO_ROOT)).stdout.strip()
        commit += "+changes" if dirty else ""
    except Exception:
        commit = "?"
    try:
        load = round(os.getloadavg()[0], 1)
    except OSError:
        load = None
    return {"when": dt.datetime.now().strftime("%Y-%m-%d %H:%M"), "commit": commit, "load_start": load,
            "python": platform.python_version(), "platform": f"{platform.system()} {platform.machine()}",
            "cpus": os.cpu_count(), "sqlite": sqlite, "packages": pk}


def cmd_run(a: argparse.Namespace) -> int:
    from . import engine

    prof = dict(PROFILES[a.profile])
    if a.scales:
        prof["scales"] = [int(x) for x in a.scales.split(",") if x]
    if a.datasets is not None:
        prof["datasets"] = [x for x in a.datasets.split(",") if x]
    out_dir = Path(a.out).resolve() if a.out else report.RESULTS_DIR
    work = Path(a.work).resolve() if a.work else out_dir / "raw"
    work.mkdir(parents=True, exist_ok=True)
    ok, why = engine.core_available()
    if not ok:
        _log(f"clawmem_core is not importable: {why}")
        return 2
    res: dict[str, Any] = {"profile": a.profile, "env": environment(), "notes": [],
                           "config": {"zh_share": a.zh_share, "scales": prof["scales"]}}
    t_start = time.perf_counter()

    if not a.skip_quality and prof["datasets"]:
        from . import quality
        from .data import load_all
        from .embedders import EmbedderUnavailable, resolve

        data_dir = Path(a.data).expanduser().resolve() if a.data else default_data_dir()
        datasets = load_all(data_dir, prof["datasets"], limit=a.limit)  # stops, naming what it looked for, if absent
        if datasets:
            choices, skipped = [], {}
            for spec in ["none"] + [e for e in a.embedder if e != "none"]:
                try:
                    choices.append(resolve(spec))
                except EmbedderUnavailable as exc:
                    _log(f"embedder {spec!r} skipped: {exc}")
                    skipped[spec] = str(exc)
            beir = prof["beir_embedders"] if a.scifact_vectors is None else a.scifact_vectors
            q = quality.run(datasets, choices, work / "cache", _log,
                            beir_embedders=beir, mmr=not a.no_mmr)
            q["skipped_embedders"] = skipped
            if not beir and any(d.kind == "beir" for d in datasets):
                res["notes"].append("SciFact is run keyword-only in this profile (embedding 5,183 abstracts with a "
                                    "local model takes about 10 minutes); pass --scifact-vectors or use the full profile")
            res["quality"] = q

    if not a.skip_speed and prof["scales"]:
        from . import speed

        if a.blas_threads:
            speed.BLAS_THREADS = a.blas_threads
            res["config"]["blas_threads"] = a.blas_threads
            res["notes"].append(f"Speed phases ran with OPENBLAS_NUM_THREADS={a.blas_threads}.")
        res["speed"] = speed.run(prof["scales"], work, _log, queries=prof["queries"], zh_share=a.zh_share,
                                 cli_repeats=prof["cli_repeats"], query_models=prof.get("query_models"))
    res["seconds"] = time.perf_counter() - t_start
    try:
        res["env"]["load_end"] = round(os.getloadavg()[0], 1)
    except OSError:
        pass
    out_dir.mkdir(parents=True, exist_ok=True)
    name = a.profile + (f"-{a.tag}" if a.tag else "")
    res["name"] = name
    (out_dir / f"{name}.json").write_text(json.dumps(res, indent=1, ensure_ascii=False, default=str) + "\n",
                                               encoding="utf-8")
    page = report.write(out_dir)
    _log(f"done in {res['seconds']:.0f} s; results: {page.relative_to(REPO_ROOT) if page.is_relative_to(REPO_ROOT) else page}")
    return 0


def cmd_report(a: argparse.Namespace) -> int:
    page = report.write(Path(a.out).resolve() if a.out else report.RESULTS_DIR)
    print(page)
    return 0


def cmd_generate(a: argparse.Namespace) -> int:
    from .synth import generate

    m = generate(Path(a.dir), a.chunks, seed=a.seed, zh_share=a.zh_share)
    print(f"{m.files} files, {m.bytes} bytes, about {m.chunks_estimate} chunks")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description="clawmem benchmark harness")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run the benchmark and write the results page")
    r.add_argument("--profile", choices=sorted(PROFILES), default="quick")
    r.add_argument("--data", help="evaluation data directory (default: ../shared/data or $CLAWMEM_BENCH_DATA)")
    r.add_argument("--embedder", action="append", default=None,
                   help="embedder for the vector and hybrid quality runs, repeatable: local, hash, zero, "
                        "or module:callable[:json-kwargs] for a LangChain/LlamaIndex embeddings class "
                        "(default: local)")
    r.add_argument("--scales", help="comma-separated chunk counts for the speed runs (overrides the profile)")
    r.add_argument("--datasets", help="comma-separated: locomo-en,locomo-zh,scifact (overrides the profile)")
    r.add_argument("--limit", type=int, help="at most N queries per data set (for trying things out)")
    r.add_argument("--scifact-vectors", action=argparse.BooleanOptionalAction, default=None,
                   help="run the embedders on SciFact too (default: in the full profile only)")
    r.add_argument("--blas-threads", type=int, help="OPENBLAS/OMP/MKL threads in the speed workers (default: "
                   "the library's own choice, one per core)")
    r.add_argument("--tag", help="save as <profile>-<tag>.json (a separate section of the results page)")
    r.add_argument("--no-mmr", action="store_true", help="skip the MMR variants")
    r.add_argument("--skip-quality", action="store_true")
    r.add_argument("--skip-speed", action="store_true")
    r.add_argument("--zh-share", type=float, default=0.25, help="share of Chinese files in generated workspaces")
    r.add_argument("--out", help="results directory (default: bench/results)")
    r.add_argument("--work", help="scratch directory for workspaces and indexes (default: <out>/raw)")
    r.set_defaults(func=cmd_run)
    rp = sub.add_parser("report", help="rewrite RESULTS.md and the plots from the saved JSON")
    rp.add_argument("--out")
    rp.set_defaults(func=cmd_report)
    g = sub.add_parser("generate", help="write a synthetic workspace")
    g.add_argument("dir")
    g.add_argument("--chunks", type=int, default=1000)
    g.add_argument("--seed", type=int, default=42)
    g.add_argument("--zh-share", type=float, default=0.25)
    g.set_defaults(func=cmd_generate)
    c = sub.add_parser("compare", help="speed of a previous commit against this tree, interleaved in one run")
    from . import compare

    compare.add_arguments(c)
    c.set_defaults(func=compare.main)
    a = p.parse_args(argv)
    if getattr(a, "embedder", "x") is None:
        a.embedder = ["local"]
    return a.func(a)


if __name__ == "__main__":
    sys.exit(main())
