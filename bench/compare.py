"""Speed, side by side: a previous commit against this tree (or two commits), interleaved in one run.

    python -m bench compare REV [REV2] [--scale 10000] [--rounds 3]

REV and REV2 are git revisions, or directories that hold a ``clawmem_core`` package (an unpacked copy, for a
machine where the history is not at hand).

Each side's ``clawmem_core`` comes from its own checkout (``git worktree add --detach`` into a temporary
directory; "this tree" is the working tree, uncommitted changes included); the harness itself always comes from
this tree, so a commit older than this script can be measured. Each side runs in its own subprocesses with a
``PYTHONPATH`` whose first entry holds only that side's ``clawmem_core``. Rounds alternate the order (A, B, then
B, A, ...) so that the machine's load, and whoever runs second, hit both sides alike. For each figure it prints
both sides' medians over the rounds, their ratio (new / old) and the median of the per-round ratios: the figure
to read on a loaded machine.

Figures (each side on its own indexes of the same generated workspace, built before the first round):

- keyword, vector and hybrid search p50 / p95, warm, in one process (the vector side and hybrid on 384-d
  zero-cost vectors, their embedding time subtracted);
- a no-op sync and a one-file sync (a line appended to one note, then the note restored with its old mtime);
- index build (keyword-only, and with zero-cost vectors) in chunks/s, on a smaller workspace (``--build-chunks``);
- cold ``clawmem search`` (a new process, keyword-only index): wall time and CPU time;
- the same while a ``clawmem watch`` of the index runs (started each round, settled before the first search):
  wall time, and CPU time of the command and of the watcher while it answered;
- ``import clawmem_core`` and its ``MemoryIndex`` in a new interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from . import synth
from .data import REPO_ROOT

#: (key, label, unit, higher_is_better)
FIGURES: list[tuple[str, str, str, bool]] = [
    ("keyword_p50", "keyword search p50", "ms", False),
    ("keyword_p95", "keyword search p95", "ms", False),
    ("keyword_p50_cpu", "keyword search p50, CPU time", "ms", False),
    ("vector_p50", "vector search p50", "ms", False),
    ("vector_p95", "vector search p95", "ms", False),
    ("vector_p50_cpu", "vector search p50, CPU time", "ms", False),
    ("hybrid_p50", "hybrid search p50", "ms", False),
    ("hybrid_p95", "hybrid search p95", "ms", False),
    ("hybrid_p50_cpu", "hybrid search p50, CPU time", "ms", False),
    ("noop_sync", "no-op sync p50", "ms", False),
    ("noop_sync_cpu", "no-op sync p50, CPU time", "ms", False),
    ("one_file_sync", "one-file sync p50", "ms", False),
    ("one_file_sync_cpu", "one-file sync p50, CPU time", "ms", False),
    ("build_keyword", "index build, keyword-only", "chunks/s", True),
    ("build_keyword_cpu", "index build, keyword-only, per CPU second", "chunks/s", True),
    ("build_vectors", "index build, zero-cost vectors", "chunks/s", True),
    ("build_vectors_cpu", "index build, zero-cost vectors, per CPU second", "chunks/s", True),
    ("cold_cli", "cold `clawmem search`", "ms", False),
    ("cold_cli_cpu", "cold `clawmem search`, CPU time", "ms", False),
    ("cold_cli_watch", "cold `clawmem search`, `clawmem watch` running", "ms", False),
    ("cold_cli_watch_cpu", "cold `clawmem search`, `clawmem watch` running, CPU time (both processes)", "ms",
     False),
    ("import", "import clawmem_core (and its MemoryIndex)", "ms", False),
    ("import_cpu", "python -c 'import clawmem_core' (and its MemoryIndex), CPU time", "ms", False),
]
PARTS = ("search", "sync", "build", "cli", "import")


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=str(REPO_ROOT), capture_output=True, text=True,
                           check=True).stdout.strip()


class Side:
    """One version of the library under test: a directory holding only its ``clawmem_core``."""

    def __init__(self, name: str, label: str, source: Path, lib: Path, state: Path) -> None:
        self.name, self.label, self.source, self.lib, self.state = name, label, source, lib, state

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(self.lib), str(REPO_ROOT)])
        for var in ("CLAWMEM_STATE_DIR", "PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX"):
            env.pop(var, None)  # both sides load their byte code as an installed package does
        return env


def _make_side(name: str, rev: str | None, tmp: Path, added: list[Path]) -> Side:
    if rev is None:
        source = REPO_ROOT
        try:
            dirty = subprocess.run(["git", "status", "--porcelain", "--", "clawmem_core"], cwd=str(REPO_ROOT),
                                   capture_output=True, text=True).stdout.strip()
            label = "this tree (" + _git("rev-parse", "--short", "HEAD") + ("+changes" if dirty else "") + ")"
        except (OSError, subprocess.CalledProcessError):  # a copy of the tree without its git history
            label = "this tree"
    elif Path(rev).is_dir():  # an unpacked copy (``git archive REV clawmem_core | tar -x -C DIR``)
        source = Path(rev).resolve()
        label = source.name
    else:
        sha = _git("rev-parse", "--verify", f"{rev}^{{commit}}")
        source = tmp / f"checkout-{name}"
        subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(source), sha], cwd=str(REPO_ROOT),
                       check=True, capture_output=True, text=True)
        added.append(source)
        label = f"{rev} ({sha[:9]})" if rev[:9] != sha[:9] else sha[:9]
    if not (source / "clawmem_core" / "__init__.py").exists():
        raise SystemExit(f"{label}: no clawmem_core package there")
    lib = tmp / f"lib-{name}"
    lib.mkdir()
    (lib / "clawmem_core").symlink_to(source / "clawmem_core", target_is_directory=True)
    return Side(name, label, source, lib, tmp / f"state-{name}")


def _worker(side: Side, task: dict[str, Any], timeout: float = 3600) -> dict[str, Any]:
    # run from the side's directory: ``-m`` puts the working directory first on the path
    proc = subprocess.run([sys.executable, "-m", "bench.compare", "--worker", json.dumps(task)],
                          capture_output=True, text=True, timeout=timeout, cwd=str(side.lib), env=side.env())
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("RESULT "):
            res = json.loads(line[len("RESULT "):])
            if not res.get("ok"):
                raise RuntimeError(f"{side.label}: {task['task']} failed: {res.get('error')}\n{res.get('traceback', '')}")
            return res
    raise RuntimeError(f"{side.label}: {task['task']} worker exited {proc.returncode}: {proc.stderr[-3000:]}")


def _cli_command() -> list[str]:
    script = Path(sys.executable).parent / "clawmem"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from clawmem_core.cli import main; sys.exit(main())"]


def _timed_run(cmd: list[str], **kw: Any) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """Wall time and CPU time (user + system, the child's own) of one subprocess."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), p


def _cpu_of(pid: int | None) -> float:
    """CPU seconds (user + system) a running process has used so far (Linux ``/proc``; 0 elsewhere)."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cold_cli(side: Side, workspace: Path, queries: list[str], repeats: int,
             watcher: int | None = None) -> tuple[list[float], list[float]]:
    """Wall and CPU times (s) of ``clawmem search`` in a new process on the side's keyword-only index
    (``watcher``: the pid of a ``clawmem watch`` of it, whose CPU time during each search is added)."""
    env = side.env()
    env["CLAWMEM_STATE_DIR"] = str(side.state / "keyword")
    walls, cpus = [], []
    for i in range(repeats):
        cmd = _cli_command() + ["search", queries[i % len(queries)], "--workspace", str(workspace),
                                "--agent", "main", "--provider", "none"]
        before = _cpu_of(watcher)
        wall, cpu, p = _timed_run(cmd, env=env, cwd=str(workspace))
        cpu += _cpu_of(watcher) - before
        if p.returncode != 0:
            raise RuntimeError(f"{side.label}: clawmem search exited {p.returncode}: {p.stderr[-1000:]}")
        walls.append(wall)
        cpus.append(cpu)
    return walls, cpus


def start_watch(side: Side, workspace: Path, settle: float = 1.0, timeout: float = 600) -> subprocess.Popen[bytes]:
    """A ``clawmem watch`` of the side's keyword-only index, returned once it has started and has used
    no CPU for ``settle`` seconds (its syncs done, its watches registered)."""
    env = side.env()
    env["CLAWMEM_STATE_DIR"] = str(side.state / "keyword")
    cmd = _cli_command() + ["watch", "--workspace", str(workspace), "--agent", "main", "--provider", "none"]
    proc = subprocess.Popen(cmd, env=env, cwd=str(workspace), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    end = time.monotonic() + timeout
    last, quiet_since = -1.0, time.monotonic()
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"{side.label}: clawmem watch exited {proc.returncode}: "
                               f"{proc.stderr.read().decode(errors='replace')[-1000:] if proc.stderr else ''}")
        used = _cpu_of(proc.pid)
        now = time.monotonic()
        if used - last > 0.02:
            last, quiet_since = used, now
        elif now - quiet_since >= settle:
            return proc
        time.sleep(0.1)
    stop_watch(proc)
    raise RuntimeError(f"{side.label}: clawmem watch did not settle within {timeout:.0f} s")


def stop_watch(proc: subprocess.Popen[bytes]) -> None:
    """Ctrl-C, as a user stops it (then killed if it does not end)."""
    import signal

    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stderr is not None:
        proc.stderr.close()


def cold_cli_watched(side: Side, workspace: Path, queries: list[str], repeats: int) -> tuple[list[float], list[float]]:
    """:func:`cold_cli` while a ``clawmem watch`` of the index runs (its first search not timed)."""
    proc = start_watch(side, workspace)
    try:
        cold_cli(side, workspace, queries[1:] + queries[:1], 1, watcher=proc.pid)
        return cold_cli(side, workspace, queries, repeats, watcher=proc.pid)
    finally:
        stop_watch(proc)


def import_seconds(side: Side, repeats: int) -> tuple[list[float], list[float]]:
    """In-process time of ``import clawmem_core`` in a new interpreter, and that process's CPU time."""
    # the package's names are loaded on first use: ask for the one a program uses
    code = ("import time; t=time.perf_counter(); import clawmem_core; clawmem_core.MemoryIndex; "
            "print(time.perf_counter()-t)")
    xs, cpus = [], []
    for _ in range(repeats):
        _, cpu, p = _timed_run([sys.executable, "-c", code], cwd=str(side.lib), env=side.env())
        if p.returncode != 0:
            raise RuntimeError(f"{side.label}: import clawmem_core failed: {p.stderr[-1000:]}")
        xs.append(float(p.stdout.split()[-1]))
        cpus.append(cpu)
    return xs, cpus


# -- the worker: one side, one process ----------------------------------------------------------------------------


def _pct(xs: list[float], q: float) -> float:
    from .metrics import percentile

    return 1000 * percentile(xs, q)


def _search(mem: Any, q: str, k: int = 6, min_score: float = 0.35, max_results: int | None = None) -> Any:
    try:
        return mem.search(q, max_results=max_results or k, min_score=min_score, record=False)
    except TypeError:  # a version without ``record``
        return mem.search(q, max_results=max_results or k, min_score=min_score)


def _timed(mem: Any, queries: list[str], emb: Any = None, warm: int = 10) -> tuple[list[float], list[float]]:
    """Wall and CPU (this process, every thread) seconds of each search, the query's embedding subtracted."""
    mem.sync()
    for q in queries[:warm]:
        _search(mem, q)
    xs, cpus = [], []
    for q in queries:
        e0 = getattr(emb, "query_seconds", 0.0)
        c0, t0 = time.process_time(), time.perf_counter()
        _search(mem, q)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        embedding = getattr(emb, "query_seconds", 0.0) - e0
        xs.append(wall - embedding)
        cpus.append(max(0.0, cpu - embedding))
    return xs, cpus


def _timed_sync(mem: Any) -> tuple[float, float]:
    c0, t0 = time.process_time(), time.perf_counter()
    mem.sync()
    return time.perf_counter() - t0, time.process_time() - c0


def _chunks(mem: Any) -> int:
    from . import engine

    st = engine.status_dict(mem)
    return int(st.get("chunks") or st.get("chunk_count") or 0)


def _task_setup(t: dict[str, Any]) -> dict[str, Any]:
    """Build the side's keyword-only and zero-cost-vector indexes of the workspace (not timed as a figure)."""
    import clawmem_core

    from . import engine
    from .embedders import EmbedderChoice, ZeroCostEmbedder

    ws, state = Path(t["workspace"]), Path(t["state"])
    out: dict[str, Any] = {"clawmem_core": str(Path(clawmem_core.__file__).parent)}
    for label, choice in (("keyword", EmbedderChoice(label="none", provider="none")),
                          ("vectors", EmbedderChoice(label="zero", embedder=ZeroCostEmbedder(dims=384)))):
        if label == "vectors" and not t.get("vectors", True):
            continue
        sd = state / label
        shutil.rmtree(sd, ignore_errors=True)
        sd.mkdir(parents=True)
        with engine.open_index(ws, sd, choice) as mem:
            t0 = time.perf_counter()
            mem.sync(force=True)
            out[f"{label}_seconds"] = time.perf_counter() - t0
            out[f"{label}_chunks"] = _chunks(mem)
    return out


def _task_round(t: dict[str, Any]) -> dict[str, Any]:
    import clawmem_core

    from . import engine
    from .embedders import EmbedderChoice, ZeroCostEmbedder

    ws, state = Path(t["workspace"]), Path(t["state"])
    queries: list[str] = t["queries"]
    parts = set(t["parts"])
    out: dict[str, Any] = {"clawmem_core": str(Path(clawmem_core.__file__).parent)}
    kw = EmbedderChoice(label="none", provider="none")
    if "search" in parts:
        with engine.open_index(ws, state / "keyword", kw) as mem:
            xs, cpus = _timed(mem, queries)
        out["keyword_p50"], out["keyword_p95"], out["keyword_p50_cpu"] = _pct(xs, 50), _pct(xs, 95), _pct(cpus, 50)
        zero = ZeroCostEmbedder(dims=384)
        zc = EmbedderChoice(label="zero", embedder=zero)
        for mode in ("vector", "hybrid"):
            with engine.open_index(ws, state / "vectors", zc, mode=mode) as mem:
                xs, cpus = _timed(mem, queries, zero)
            out[f"{mode}_p50"], out[f"{mode}_p95"], out[f"{mode}_p50_cpu"] = _pct(xs, 50), _pct(xs, 95), _pct(cpus, 50)
    if "sync" in parts:
        repeats = int(t.get("repeats", 3))
        with engine.open_index(ws, state / "keyword", kw) as mem:
            mem.sync()  # settle: another side's run may have left a trace
            runs = [_timed_sync(mem) for _ in range(repeats)]
            out["noop_sync"], out["noop_sync_cpu"] = _pct([w for w, _ in runs], 50), _pct([c for _, c in runs], 50)
            target = ws / t["edit_file"]
            original, st = target.read_bytes(), target.stat()
            runs = []
            try:
                for i in range(repeats):
                    with target.open("ab") as fh:
                        fh.write(f"- benchmark edit {i}: moved the launch review to Friday.\n".encode())
                    runs.append(_timed_sync(mem))
            finally:  # the workspace is shared by both sides: leave no trace
                target.write_bytes(original)
                os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
                mem.sync()
            out["one_file_sync"] = _pct([w for w, _ in runs], 50)
            out["one_file_sync_cpu"] = _pct([c for _, c in runs], 50)
    if "build" in parts:
        bws = Path(t["build_workspace"])
        for label, choice in (("keyword", kw),
                              ("vectors", EmbedderChoice(label="zero", embedder=ZeroCostEmbedder(dims=384)))):
            sd = Path(tempfile.mkdtemp(prefix="clawmem-compare-build-"))
            try:
                with engine.open_index(bws, sd, choice) as mem:
                    c0, t0 = time.process_time(), time.perf_counter()
                    mem.sync(force=True)
                    secs, cpu = time.perf_counter() - t0, time.process_time() - c0
                    out[f"build_{label}"] = _chunks(mem) / secs
                    out[f"build_{label}_cpu"] = _chunks(mem) / cpu
            finally:
                shutil.rmtree(sd, ignore_errors=True)
    return out


def _worker_main(arg: str) -> int:
    task = json.loads(arg)
    try:
        res = {"setup": _task_setup, "round": _task_round}[task["task"]](task)
        res["ok"] = True
    except Exception as exc:  # reported to the parent, which stops with it
        import traceback

        res = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}
    sys.stdout.write("RESULT " + json.dumps(res) + "\n")
    return 0


# -- the run -------------------------------------------------------------------------------------------------------


def summarize(rounds: list[dict[str, dict[str, float]]]) -> list[dict[str, Any]]:
    """One row per figure: each side's median over the rounds, their ratio, the median of per-round ratios."""
    rows = []
    for key, label, unit, higher in FIGURES:
        olds = [r["old"][key] for r in rounds if key in r["old"] and key in r["new"]]
        news = [r["new"][key] for r in rounds if key in r["old"] and key in r["new"]]
        if not olds:
            continue
        per_round = [n / o for o, n in zip(olds, news) if o > 0]
        old, new = statistics.median(olds), statistics.median(news)
        rows.append({"figure": key, "label": label, "unit": unit, "higher_is_better": higher, "old": old,
                     "new": new, "ratio": new / old if old > 0 else float("nan"),
                     "median_round_ratio": statistics.median(per_round) if per_round else float("nan"),
                     "rounds": len(olds)})
    return rows


def format_table(rows: list[dict[str, Any]], old_label: str, new_label: str) -> str:
    lines = [f"old: {old_label}", f"new: {new_label}", "",
             "| figure | old | new | new/old | median of round ratios |", "|---|---|---|---|---|"]
    for r in rows:
        fmt = "{:,.0f}" if r["unit"] == "chunks/s" or r["old"] >= 100 else "{:,.1f}" if r["old"] >= 10 else "{:,.2f}"
        better = " (higher is better)" if r["higher_is_better"] else ""
        lines.append(f"| {r['label']} ({r['unit']}){better} | {fmt.format(r['old'])} | {fmt.format(r['new'])} | "
                     f"{r['ratio']:.2f} | {r['median_round_ratio']:.2f} |")
    return "\n".join(lines)


def _loadavg() -> float | None:
    try:
        return round(os.getloadavg()[0], 1)
    except OSError:
        return None


def run(a: argparse.Namespace, log: Callable[[str], None] = _log) -> dict[str, Any]:
    parts = [p for p in a.parts.split(",") if p]
    bad = sorted(set(parts) - set(PARTS))
    if bad:
        raise SystemExit(f"unknown --parts {', '.join(bad)} (choose from {', '.join(PARTS)})")
    work = Path(a.work).resolve() if a.work else REPO_ROOT / "bench" / "results" / "raw" / "compare"
    ws = work / "workspaces" / f"ws-{a.scale}-seed{a.seed}"
    man = synth.ensure(ws, a.scale, seed=a.seed, zh_share=a.zh_share)
    n_en = int(round(a.queries * (1 - a.zh_share)))
    queries = man.queries_en[:n_en] + man.queries_zh[: a.queries - n_en]
    edit = next(iter(sorted(p.relative_to(ws).as_posix() for p in (ws / "memory").glob("????-??-??.md"))), None) \
        or sorted(p.relative_to(ws).as_posix() for p in ws.rglob("*.md"))[0]
    build_chunks = min(a.build_chunks, a.scale)
    bws = work / "workspaces" / f"ws-{build_chunks}-seed{a.seed + 1}"
    if "build" in parts:
        synth.ensure(bws, build_chunks, seed=a.seed + 1, zh_share=a.zh_share)
    log(f"workspace: {man.files} files, about {man.chunks_estimate} chunks; {a.rounds} rounds")
    res: dict[str, Any] = {"scale": a.scale, "files": man.files, "rounds_asked": a.rounds, "parts": parts,
                           "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load_start": _loadavg(),
                           "cpus": os.cpu_count(), "python": sys.version.split()[0]}
    added: list[Path] = []
    tmp = Path(tempfile.mkdtemp(prefix="clawmem-compare-"))
    try:
        old = _make_side("old", a.rev, tmp, added)
        new = _make_side("new", a.rev2, tmp, added)
        res["old"], res["new"] = old.label, new.label
        for side in (old, new):
            t0 = time.perf_counter()
            # byte code written once, as an installed package has it (no side compiles its sources per run)
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(side.source / "clawmem_core")],
                           env=side.env(), cwd=str(side.lib), capture_output=True, check=True)
            s = _worker(side, {"task": "setup", "workspace": str(ws), "state": str(side.state),
                               "vectors": "search" in parts})
            if Path(s["clawmem_core"]).resolve() != (side.source / "clawmem_core").resolve():
                raise RuntimeError(f"{side.label}: imported clawmem_core from {s['clawmem_core']}")
            res[f"setup_{side.name}"] = {k: v for k, v in s.items() if k != "clawmem_core"}
            if "cli" in parts:
                cold_cli(side, ws, queries, 1)  # the CLI's first run (its first search of this index) is not timed
            log(f"{side.label}: indexes built in {time.perf_counter() - t0:.1f} s "
                f"({s.get('keyword_chunks')} chunks)")
        rounds: list[dict[str, dict[str, float]]] = []
        for i in range(a.rounds):
            order = (old, new) if i % 2 == 0 else (new, old)
            rnd: dict[str, dict[str, float]] = {}
            for side in order:
                r: dict[str, float] = {}
                if set(parts) & {"search", "sync", "build"}:
                    w = _worker(side, {"task": "round", "workspace": str(ws), "state": str(side.state),
                                       "queries": queries, "parts": parts, "repeats": a.sync_repeats,
                                       "edit_file": edit, "build_workspace": str(bws)})
                    r.update({k: v for k, v in w.items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
                if "cli" in parts:
                    walls, cpus = cold_cli(side, ws, queries, a.cli_repeats)
                    r["cold_cli"], r["cold_cli_cpu"] = 1000 * statistics.median(walls), 1000 * statistics.median(cpus)
                    walls, cpus = cold_cli_watched(side, ws, queries, a.cli_repeats)
                    r["cold_cli_watch"] = 1000 * statistics.median(walls)
                    r["cold_cli_watch_cpu"] = 1000 * statistics.median(cpus)
                if "import" in parts:
                    walls, cpus = import_seconds(side, a.cli_repeats)
                    r["import"], r["import_cpu"] = 1000 * statistics.median(walls), 1000 * statistics.median(cpus)
                rnd[side.name] = r
            rounds.append(rnd)
            log(f"round {i + 1}/{a.rounds} done (load {_loadavg()})")
        res["rounds"] = rounds
        res["load_end"] = _loadavg()
        res["summary"] = summarize(rounds)
        return res
    finally:
        for path in added:
            subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=str(REPO_ROOT),
                           capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("rev", help="the old commit (any git revision, or a directory holding its clawmem_core)")
    p.add_argument("rev2", nargs="?", default=None, help="the new commit, or a directory (default: this working tree)")
    p.add_argument("--scale", type=int, default=10000, help="chunks in the generated workspace (default 10000)")
    p.add_argument("--rounds", type=int, default=3, help="rounds, each running both sides (default 3)")
    p.add_argument("--queries", type=int, default=60, help="queries per search mode per round (default 60)")
    p.add_argument("--sync-repeats", type=int, default=3, help="no-op and one-file syncs per round (default 3)")
    p.add_argument("--cli-repeats", type=int, default=3,
                   help="cold CLI searches and imports per side per round (default 3)")
    p.add_argument("--build-chunks", type=int, default=3000,
                   help="chunks of the workspace indexed from scratch each round (default 3000, at most --scale)")
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {','.join(PARTS)}")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--zh-share", type=float, default=0.25)
    p.add_argument("--work", help="where generated workspaces are kept (default bench/results/raw/compare)")
    p.add_argument("--json", help="also write the rounds and the summary to this file")


def main(a: argparse.Namespace) -> int:
    res = run(a)
    print(format_table(res["summary"], res["old"], res["new"]))
    print(f"\n{res['scale']} chunks ({res['files']} files), {len(res['rounds'])} rounds, load "
          f"{res['load_start']} -> {res['load_end']}, {res['cpus']} CPUs")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        raise SystemExit(_worker_main(sys.argv[2]))
    ap = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.split("\n\n")[0])
    add_arguments(ap)
    raise SystemExit(main(ap.parse_args()))
