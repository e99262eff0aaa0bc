"""One-file and no-op syncs in a long-lived index, and in-process search latency (keyword, vector,
hybrid, and an exact NumPy scan of the same vectors), at about 100k chunks, for two source trees
side by side: each measurement runs in its own process with ``PYTHONPATH`` set to a tree, old and
new interleaved (the order alternating per round), so that the ratios come from one run on a
shared machine.

    git worktree add --detach /tmp/clawmem-old main
    python -m bench.studies.sync_and_vectors --old /tmp/clawmem-old --new . --work /tmp/sv

Builds (once, kept in ``--work``) a generated workspace of ``--chunks`` chunks, a keyword-only
index and a hash-embedder index (384 dimensions) with the old tree, then prints a Markdown table
of p50/p95 and their ratios (new / old). The query embedder computes each query's vector once
(its cost is not measured; the hand-off to the thread that runs it is). ``--worker`` runs one
measurement (internal).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ..worker import sync_seconds


def _percentile(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))]


def _query_embedder() -> Any:
    from clawmem_core.testing import HashEmbedder

    class Memo(HashEmbedder):  # type: ignore[misc]
        """The hash embedder, each query's vector computed once."""

        def __init__(self) -> None:
            super().__init__(dims=384)
            self.memo: dict[str, list[float]] = {}

        def _embed_query(self, text: str) -> list[float]:
            v = self.memo.get(text)
            if v is None:
                v = self.memo[text] = self._vector(text)
            return v

    return Memo()


def _open(work: Path, keyword_only: bool, mode: str = "hybrid", emb: Any = None) -> Any:
    from bench import engine
    from bench.embedders import EmbedderChoice, resolve

    ws = work / "ws"
    if keyword_only:
        return engine.open_index(ws, work / "state-keyword", resolve("none"))
    choice = EmbedderChoice(label="hash", embedder=emb) if emb is not None else resolve("hash")
    return engine.open_index(ws, work / "state-hash", choice, mode=mode)


def worker_build(work: Path, chunks: int) -> dict[str, Any]:
    from bench import synth

    synth.ensure(work / "ws", chunks)
    out = {}
    for keyword_only in (True, False):
        with _open(work, keyword_only) as mem:
            t0 = time.perf_counter()
            report = mem.sync()
            out["keyword" if keyword_only else "hash"] = [time.perf_counter() - t0, report.chunks_indexed]
    return out


def worker_sync(work: Path, keyword_only: bool, repeats: int) -> dict[str, Any]:
    res: dict[str, Any] = {}
    with _open(work, keyword_only) as mem:
        for _ in range(3):
            mem.sync()  # settle (a long-lived index: the second sync starts the change journal)
        target = sorted((work / "ws" / "memory").rglob("*.md"))[100]
        res["noop"], res["one_file"], indexed = sync_seconds(mem, target, repeats)
        assert indexed == [1] * repeats, indexed
    return {("kw_" if keyword_only else "") + k: v for k, v in res.items()}


def worker_search(work: Path, queries: int) -> dict[str, Any]:
    import numpy as np

    man = json.loads((work / "ws.manifest.json").read_text())
    qs = man["queries_en"][: queries * 2 // 3] + man["queries_zh"][: queries // 3]
    emb = _query_embedder()
    for q in qs:
        emb.embed_query(q)

    def timed(mem: Any) -> tuple[list[float], list[float]]:
        mem.sync()
        for q in qs[:10]:
            mem.search(q, max_results=6, min_score=0.35, record=False)
        wall, cpu = [], []
        for q in qs:
            c0, t0 = time.thread_time(), time.perf_counter()
            mem.search(q, max_results=6, min_score=0.35, record=False)
            wall.append(time.perf_counter() - t0)
            cpu.append(time.thread_time() - c0)
        return wall, cpu

    out: dict[str, Any] = {}
    with _open(work, True) as mem:
        out["keyword"], out["keyword_cpu"] = timed(mem)
    for mode in ("vector", "hybrid"):
        with _open(work, False, mode, emb) as mem:
            out[mode], out[mode + "_cpu"] = timed(mem)
            if mode == "vector":  # the exact scan of the same (normalised) vectors, as the store keeps them
                store = mem._store
                store.vector_search(emb.embed_query(qs[0]), 10)
                m = store._matrix[2]
                wall, cpu = [], []
                for q in qs:
                    v = np.asarray(emb.embed_query(q), dtype=np.float32)
                    c0, t0 = time.thread_time(), time.perf_counter()
                    s = m @ v
                    top = np.argpartition(-s, 9)[:10]
                    top = top[np.argsort(-s[top])]
                    wall.append(time.perf_counter() - t0)
                    cpu.append(time.thread_time() - c0)
                out["numpy"], out["numpy_cpu"] = wall, cpu
    return out


ROWS = [
    ("one-file sync, hash embedder (vectors too)", "one_file"), ("no-op sync, hash embedder", "noop"),
    ("one-file sync, keyword-only", "kw_one_file"), ("no-op sync, keyword-only", "kw_noop"),
    ("keyword search", "keyword"), ("vector search", "vector"), ("hybrid search", "hybrid"),
    ("exact NumPy scan, k=10", "numpy"),
    ("keyword search, thread CPU", "keyword_cpu"), ("vector search, thread CPU", "vector_cpu"),
    ("hybrid search, thread CPU", "hybrid_cpu"), ("exact NumPy scan, thread CPU", "numpy_cpu"),
]


def table(data: dict[str, dict[str, list[float]]]) -> str:
    lines = ["| measure | samples old/new | old p50 ms | new p50 ms | p50 new/old | old p95 ms | new p95 ms | p95 new/old |",
             "|---|---|---|---|---|---|---|---|"]
    for label, key in ROWS:
        o, n = data["old"].get(key), data["new"].get(key)
        if not o or not n:
            continue
        o50, n50, o95, n95 = (1000 * _percentile(x, p) for x, p in ((o, 50), (n, 50), (o, 95), (n, 95)))
        lines.append(f"| {label} | {len(o)}/{len(n)} | {o50:.1f} | {n50:.1f} | {n50 / o50:.2f} | {o95:.1f} | "
                     f"{n95:.1f} | {n95 / o95:.2f} |")
    for tree in ("old", "new"):
        d = data[tree]
        if d.get("vector") and d.get("numpy"):
            lines.append("")
            lines.append(f"{tree}: vector search p50 / exact NumPy scan p50 = "
                         f"{_percentile(d['vector'], 50) / _percentile(d['numpy'], 50):.2f} (wall), "
                         f"{_percentile(d['vector_cpu'], 50) / _percentile(d['numpy_cpu'], 50):.2f} (thread CPU)")
    return "\n".join(lines)


def _run(tree: str, work: Path, args: list[str]) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=".")
    # this file, run as a script in the tree measured (whose ``bench`` and ``clawmem_core`` it imports)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--work", str(work), "--worker", *args]
    p = subprocess.run(["nice", "-n", "10", *cmd], cwd=tree, env=env, capture_output=True, text=True)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])  # type: ignore[no-any-return]
    raise SystemExit(f"{tree} {args}: {p.stdout[-2000:]}\n{p.stderr[-3000:]}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", help="the old source tree (a worktree of the commit to compare with)")
    ap.add_argument("--new", default=".", help="the new source tree (default: this one)")
    ap.add_argument("--work", required=True, help="where the workspace and indexes are kept")
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=12)
    ap.add_argument("--queries", type=int, default=150)
    ap.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    work = Path(a.work).resolve()
    if a.worker:
        kind, *rest = a.worker
        if kind == "build":
            res = worker_build(work, int(rest[0]))
        elif kind == "sync":
            res = worker_sync(work, rest[0] == "keyword", int(rest[1]))
        else:
            res = worker_search(work, int(rest[0]))
        print("RESULT " + json.dumps(res))
        return
    if not a.old:
        ap.error("--old is required")
    trees = {"old": str(Path(a.old).resolve()), "new": str(Path(a.new).resolve())}
    work.mkdir(parents=True, exist_ok=True)
    print("build:", _run(trees["old"], work, ["build", str(a.chunks)]), file=sys.stderr)
    data: dict[str, dict[str, list[float]]] = {"old": {}, "new": {}}
    jobs = [["sync", "hash", str(a.repeats)], ["sync", "keyword", str(a.repeats)], ["search", str(a.queries)]]
    load = [os.getloadavg()]
    for r in range(a.rounds):
        for job in jobs:
            for tree in ("old", "new") if r % 2 == 0 else ("new", "old"):
                for k, v in _run(trees[tree], work, job).items():
                    data[tree].setdefault(k, []).extend(v)
                print(r, tree, *job, file=sys.stderr, flush=True)
    load.append(os.getloadavg())
    (work / "sync_and_vectors.json").write_text(json.dumps(data))
    print(table(data))
    print("\nload (1/5/15 min) before and after: " + " → ".join(" ".join(f"{x:.2f}" for x in l) for l in load))


if __name__ == "__main__":
    main()
