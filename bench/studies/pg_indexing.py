"""Indexing speed, SQLite against PostgreSQL, side by side under the same load.

    python -m bench.studies.pg_indexing --scale 10000 --rounds 3
    python -m bench.studies.pg_indexing --scale 10000 --rounds 3 --old ../clawmem-old   # and an older checkout
    python -m bench.studies.pg_indexing --old ../clawmem-old --old main=../clawmem-main  # and two (named)

Each round indexes the same generated workspace from nothing into a new SQLite file and into a new
PostgreSQL database (the embedded server of :mod:`bench.postgres`, one server for the whole run), one
store after the other, the order rotating between rounds, with the deterministic 384-d hash embedder
(the same work for both stores: embedding is not what is measured). With ``--old``, a checkout of
another commit indexes into PostgreSQL too, in the same rounds: its ``clawmem_core`` is imported in a
process of its own (``PYTHONPATH``), as is this checkout's, so the two are measured under the same load.
Timed apart: the keyword phase (read, chunk, write for keyword search) and the vector phase (embed and
write the vectors). Results go to ``bench/results/pg_indexing.json`` and ``bench/results/PG_INDEXING.md`` (``--out``);
the workspace is generated once under ``bench/results/raw/``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import inspect
import sys
import time
from pathlib import Path
from typing import Any

from ..postgres import RAW, RESULTS, Server, log

ROOT = Path(__file__).resolve().parents[2]

def tree_cpu(pid: int) -> float:
    """CPU seconds of process ``pid`` so far: its own, those of its live children, and those of its
    children that exited (for a PostgreSQL server: the backends of the runs before, reaped by it)."""
    import psutil

    main = psutil.Process(pid)
    t = main.cpu_times()
    total = t.user + t.system + t.children_user + t.children_system
    for proc in main.children(recursive=True):
        try:
            c = proc.cpu_times()
        except psutil.Error:
            continue
        total += c.user + c.system
    return float(total)


#: Run in a process of its own, with the checkout to measure first on ``PYTHONPATH``: index the
#: workspace from nothing, print the phases' seconds as JSON.
_CHILD = "from __future__ import annotations\n" + inspect.getsource(tree_cpu) + r"""
import json, os, sys, tempfile, time
from pathlib import Path
import clawmem_core
from clawmem_core import MemoryIndex
from clawmem_core.testing import HashEmbedder

kind, ws, url, state_root, server_pid = sys.argv[1:6]


def server_cpu():
    # the server's processes' CPU seconds so far (its live children and those it reaped)
    return tree_cpu(int(server_pid)) if kind == "postgres" else 0.0


state = Path(tempfile.mkdtemp(prefix=f"clawmem-index-{kind}-", dir=state_root))
hnsw_s = [0.0]
if kind == "postgres":  # the HNSW build's own time (at the end of the vector phase, past exact_below)
    from clawmem_core.store.postgres import vectors as _v
    _build = _v._HnswBuild.build_hnsw

    def _timed_build(self, dims):
        t = time.perf_counter()
        try:
            return _build(self, dims)
        finally:
            hnsw_s[0] += time.perf_counter() - t

    _v._HnswBuild.build_hnsw = _timed_build
cfg = {"store": {"url": url} if kind == "postgres" else {}, "sync": {"on_search": False}}
load = os.getloadavg()[0]
with MemoryIndex(Path(ws), agent_id="bench", config=cfg, embedder=HashEmbedder(dims=384), state_dir=state) as mem:
    s0 = server_cpu()
    t0 = time.perf_counter()
    mem.sync(vectors=False)
    t1 = time.perf_counter()
    s1 = server_cpu()
    c1 = os.times()
    mem.sync()
    t2 = time.perf_counter()
    s2 = server_cpu()
    st = mem.status()
    chunks = st.chunks
cpu = os.times()
print(json.dumps({"chunks": chunks, "keyword_s": t1 - t0, "vector_s": t2 - t1, "total_s": t2 - t0,
                  "chunks_per_second": chunks / (t2 - t0), "client_cpu_s": cpu.user + cpu.system,
                  "client_keyword_cpu_s": c1.user + c1.system, "hnsw_build_s": hnsw_s[0], "server_keyword_cpu_s": s1 - s0, "server_vector_cpu_s": s2 - s1,
                  "load": [load, os.getloadavg()[0]], "code": os.path.dirname(os.path.dirname(clawmem_core.__file__))}))
"""


def index_once(variant: str, tree: Path, ws: Path, url: str, server_pid: int = 0) -> dict[str, Any]:
    """Index ``ws`` from nothing with the ``clawmem_core`` of ``tree``, in a new process."""
    kind = "sqlite" if variant == "sqlite" else "postgres"
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run([sys.executable, "-c", _CHILD, kind, str(ws), url, str(RAW), str(server_pid)], env=env, cwd=str(tree),
                         capture_output=True, text=True, check=False)
    if out.returncode:
        raise RuntimeError(f"{variant} failed:\n{out.stderr[-3000:]}")
    got: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    if Path(got["code"]).resolve() != tree.resolve():
        raise RuntimeError(f"{variant} imported clawmem_core from {got['code']}, not {tree}")
    return got


def _update_stats(url: str) -> dict[str, int]:
    """Rows updated in the chunks table, and how many of those updates were HOT (in place)."""
    import psycopg

    time.sleep(1.0)  # the backends' statistics reach the cumulative view at their exit
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
                           "WHERE relname = 'clawmem_chunks'").fetchone()
    return {"updates": int(row[0]), "hot_updates": int(row[1])} if row else {}


def _server_cpu(server: Server) -> float:
    """CPU seconds of the server's processes so far."""
    return tree_cpu(server.pg.get_pid())


def _olds(specs: list[str] | None) -> dict[str, Path]:
    """``--old`` arguments (``PATH`` or ``NAME=PATH``) by variant name (``postgres-old``, ``postgres-NAME``)."""
    out: dict[str, Path] = {}
    for spec in specs or []:
        name, _, path = spec.rpartition("=") if "=" in spec else ("old", "", spec)
        out[f"postgres-{name}"] = Path(path)
    return out


def run(scale: int, rounds: int, olds: dict[str, Path]) -> dict[str, Any]:
    from ..synth import generate

    ws = RAW / "pg-speed" / f"ws-{scale}"
    if not ws.exists():
        log(f"generating a workspace of about {scale} chunks")
        generate(ws, scale)
    variants = {"sqlite": ROOT, "postgres": ROOT, **olds}
    names = list(variants)
    server = Server()
    try:
        runs: dict[str, list[dict[str, Any]]] = {k: [] for k in names}
        for r in range(rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for variant in order:
                # a new database each run: the embedding cache is shared by a database's agents
                url = server.database(f"indexing_{scale}_{r}_{variant.replace('-', '_')}")
                cpu0 = _server_cpu(server)
                got = index_once(variant, variants[variant], ws, url, server.pg.get_pid())
                if variant != "sqlite":
                    got.update(_update_stats(url))  # (after a second: the backend has exited)
                    got["server_cpu_s"] = _server_cpu(server) - cpu0
                    server.drop(f"indexing_{scale}_{r}_{variant.replace('-', '_')}")
                got["round"] = r
                runs[variant].append(got)
                log(f"round {r} {variant}: {got['chunks']} chunks, keyword {got['keyword_s']:.1f} s, vector "
                    f"{got['vector_s']:.1f} s, {got['chunks_per_second']:.0f} chunks/s (load {got['load'][0]:.1f})")
    finally:
        server.close()
    out: dict[str, Any] = {"scale": scale, "rounds": rounds, "variants": names, "runs": runs,
                           "commit": _commit(ROOT), "old_commit": _commit(next(iter(olds.values()))) if olds else None,
                           "old_commits": {v: _commit(p) for v, p in olds.items()},
                           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count()}
    for v in names:
        out[v] = {k: statistics.median(x[k] for x in runs[v])
                  for k in ("keyword_s", "vector_s", "total_s", "chunks_per_second")}
    out["ratio"] = {}
    for v in names[1:]:
        out["ratio"][v] = {
            "total": statistics.median(pg["total_s"] / lite["total_s"] for lite, pg in zip(runs["sqlite"], runs[v])),
            "keyword": statistics.median(pg["keyword_s"] / lite["keyword_s"] for lite, pg in zip(runs["sqlite"], runs[v])),
            "vector": statistics.median(pg["vector_s"] / lite["vector_s"] for lite, pg in zip(runs["sqlite"], runs[v])),
            "per_round": [pg["total_s"] / lite["total_s"] for lite, pg in zip(runs["sqlite"], runs[v])],
        }
    for v in olds:
        out["ratio"][f"{v}_over_new"] = [o["total_s"] / n["total_s"] for o, n in zip(runs[v], runs["postgres"])]
    if "postgres-old" in olds:
        out["ratio"]["old_over_new"] = out["ratio"]["postgres-old_over_new"]
    return out


def _commit(tree: Path) -> str:
    got = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return got.stdout.strip() + ("+changes" if dirty else "")


def report(data: dict[str, Any]) -> str:
    names = data["variants"]
    olds = data.get("old_commits") or ({"postgres-old": data["old_commit"]} if data.get("old_commit") else {})
    old = "".join(f", `{v}` the code of commit `{c}`" for v, c in olds.items())
    lines = [f"# Indexing: SQLite against PostgreSQL ({data['scale']:,} chunks)", "",
             f"Commit `{data['commit']}`{old}, {data['date']}, {data['cpus']} CPUs shared with other jobs "
             "(the load average is shown: read the ratios, measured side by side). Regenerate with "
             f"`python -m bench.studies.pg_indexing --scale {data['scale']} --rounds {data['rounds']}"
             + "".join(" --old " + ("" if v == "postgres-old" else v[len("postgres-"):] + "=")
                       + f"<checkout of {c}>" for v, c in olds.items()) + "`.", "",
             "The same generated workspace indexed from nothing by each variant in turn (the order rotating "
             "between rounds), each in a process of its own, PostgreSQL into a new database of one embedded "
             "server (PostgreSQL 18, pgvector, default settings: `synchronous_commit` on). Deterministic 384-d "
             "hash embedder, so every variant embeds the same texts at the same cost: embedding is not what is "
             "measured. `server CPU s`: the server's processes' CPU time during the run (its backends, "
             "WAL writer, checkpointer, autovacuum; in brackets: during the keyword phase + the vector phase). `updates (HOT)`: rows of the chunks table updated, and how many in place.", "",
             "| round | variant | chunks | keyword phase s | vector phase s | chunks/s | client CPU s | server CPU s | updates (HOT) | load average |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in range(data["rounds"]):
        for v in names:
            x = data["runs"][v][r]
            upd = f"{x['updates']} ({x['hot_updates']})" if "updates" in x else ""
            server_cpu = (f"{x['server_cpu_s']:.1f} ({x['server_keyword_cpu_s']:.1f} + {x['server_vector_cpu_s']:.1f})"
                          if "server_cpu_s" in x else "")
            lines.append(f"| {r} | {v} | {x['chunks']} | {x['keyword_s']:.1f} | {x['vector_s']:.1f} | "
                         f"{x['chunks_per_second']:.0f} | {x['client_cpu_s']:.1f} | {server_cpu} | {upd} | "
                         f"{x['load'][0]:.1f} -> {x['load'][1]:.1f} |")
    lines.append("")
    for v in names[1:]:
        ratio = data["ratio"][v]
        lines.append(f"- `{v}`: {data[v]['chunks_per_second']:.0f} chunks/s against SQLite's "
                     f"{data['sqlite']['chunks_per_second']:.0f}; its time over SQLite's, median of the rounds: "
                     f"**{ratio['total']:.2f}x** (per round: " + ", ".join(f"{x:.2f}x" for x in ratio["per_round"])
                     + f"); keyword phase {ratio['keyword']:.2f}x, vector phase {ratio['vector']:.2f}x.")
    if all("server_cpu_s" in x for v in names[1:] for x in data["runs"][v]):
        for v in names[1:]:
            cpu = [(pg["client_cpu_s"] + pg["server_cpu_s"]) / lite["client_cpu_s"]
                   for lite, pg in zip(data["runs"]["sqlite"], data["runs"][v])]
            lines.append(f"- `{v}`: its CPU time (client and server) over SQLite's, median of the rounds: "
                         f"{statistics.median(cpu):.2f}x (per round: " + ", ".join(f"{x:.2f}x" for x in cpu) + ").")
    for v in names[1:]:
        builds = [x.get("hnsw_build_s", 0.0) for x in data["runs"][v]]
        if any(builds):
            lines.append(f"- `{v}`: of its vector phase, the HNSW build took, per round: "
                         + ", ".join(f"{b:.1f} s" for b in builds) + ".")
    for v in olds:
        got = data["ratio"].get(f"{v}_over_new") or data["ratio"]["old_over_new"]
        lines.append(f"- `{v}` over `postgres` (time), per round: " + ", ".join(f"{x:.2f}x" for x in got) + ".")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.studies.pg_indexing")
    ap.add_argument("--scale", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--old", action="append", metavar="[NAME=]PATH",
                    help="a checkout of an older commit, measured in the same rounds (as postgres-NAME; "
                    "NAME defaults to old); may be given more than once")
    ap.add_argument("--out", default="pg_indexing",
                    help="name of the results in bench/results/ (NAME.json, and the report in NAME in capitals .md)")
    a = ap.parse_args(argv)
    RAW.mkdir(parents=True, exist_ok=True)
    data = run(a.scale, a.rounds, _olds(a.old))
    (RESULTS / f"{a.out}.json").write_text(json.dumps(data, indent=2), encoding="utf-8")
    (RESULTS / f"{a.out.upper()}.md").write_text(report(data), encoding="utf-8")
    print(report(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
