"""PostgreSQL keyword search with several large agents in one process, old code against new, and
SQLite on the same data, interleaved query by query in one run.

    python -m bench.studies.pg_keywords build --scale 100000 --old /path/to/old/checkout
    python -m bench.studies.pg_keywords run --scale 100000 --old /path/to/old/checkout --searches 600

``build`` generates three workspaces of about ``scale`` chunks (seeds 42, 43, 44) and indexes them,
keyword-only, as agents ``a0``-``a2`` into the PostgreSQL database ``kw_<scale>_old`` with the old
code (a subprocess with the old checkout first on ``PYTHONPATH``), and into three SQLite indexes.
The new code's database is a copy of it (``CREATE DATABASE ... TEMPLATE``), opened and synced by
the new code (which upgrades the schema in place and writes what its keyword search keeps at index
time: that sync is timed, with the sizes of both databases). Everything is kept in the cache of
:mod:`bench.postgres` (``$CLAWMEM_PGBENCH_DIR``).

``run`` starts three worker processes, each opening the three agents: PostgreSQL with the old code,
PostgreSQL with the new code, SQLite with the new code. Searches are drawn in a skewed mix (agents
by weight 6:3:1, queries Zipf-distributed over each agent's query list) and sent to the workers in
turn, each search to all three before the next (the order rotating), so that the machine's load
weighs on all alike. A search is "first" the first time its query is searched for in that agent,
else "warm". Reported: p50/p95 of keyword (``Store.keyword_search``, 200 candidates) and of the
whole search (``MemoryIndex.search``, keyword-only: no embedder), and the ratios.
Results go to ``bench/results/pg_keywords.json`` and ``bench/results/pg_keywords.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ..postgres import RESULTS, Server, cache_dir, log

AGENTS = ("a0", "a1", "a2")
SEEDS = (42, 43, 44)
WEIGHTS = (6, 3, 1)
ROOT = Path(__file__).resolve().parents[2]


def workspace(n: int, i: int) -> tuple[Path, list[str]]:
    from ..synth import generate

    ws, manifest = cache_dir() / f"kw-ws-{n}-{i}", cache_dir() / f"kw-ws-{n}-{i}.queries.json"
    if not manifest.exists():
        log(f"generating workspace {i} of about {n} chunks")
        m = generate(ws, n, seed=SEEDS[i])
        manifest.write_text(json.dumps(m.queries_en + m.queries_zh), encoding="utf-8")
    return ws, json.loads(manifest.read_text(encoding="utf-8"))


def _cfg(url: str) -> dict[str, Any]:
    return {"provider": "none", "store": {"url": url} if url else {}, "sync": {"on_search": False}}


def _state(kind: str, n: int, i: int) -> Path:
    return cache_dir() / f"kw-{kind}-{n}-{i}"


def _with_code(code: Path) -> str:
    """Python that imports ``clawmem_core`` from the checkout at ``code`` (its modules then come from
    there), and the rest (this bench) from this checkout."""
    return (f"import sys; sys.path.insert(0, {str(code)!r}); import clawmem_core; "
            f"assert clawmem_core.__file__.startswith({str(code)!r}); sys.path[0] = {str(ROOT)!r}\n")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


# -- the worker: one code version, one store kind, three agents -----------------------------------


def worker(kind: str, n: int, url: str) -> None:
    """Answers ``[agent index, query, mode]`` lines on stdin with the seconds the search took."""
    from clawmem_core import MemoryIndex
    from clawmem_core.search import MAX_QUERY_TERMS, search_terms

    mems = []
    for i in range(len(AGENTS)):
        ws, _ = workspace(n, i)
        mems.append(MemoryIndex(ws, agent_id=AGENTS[i], config=_cfg(url), state_dir=_state(kind, n, i)))
    settled = [0.0]
    store_type = type(mems[0]._store)
    settle = getattr(store_type, "settle", None)
    if settle is not None:  # the time a sync spends writing the keyword postings
        def timed(self: Any) -> None:
            t = time.perf_counter()
            settle(self)
            settled[0] += time.perf_counter() - t

        store_type.settle = timed
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        i, q, mode = json.loads(line)
        mem = mems[i]
        settled[0] = 0.0
        t = time.perf_counter()
        if mode == "kw":
            mem._store.keyword_search(search_terms(q[:4000])[:MAX_QUERY_TERMS], 200)
        elif mode == "sync":
            rep = mem.sync()
            assert rep.files_indexed == 1, rep
        else:
            mem.search(q, max_results=6, record=False)
        print(json.dumps([time.perf_counter() - t, settled[0]]), flush=True)
    for mem in mems:
        mem.close()


class Worker:
    def __init__(self, name: str, code: Path, kind: str, n: int, url: str) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _with_code(code) + f"from bench.studies.pg_keywords import worker; worker({kind!r}, {n}, {url!r})"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=_env(), cwd=str(ROOT))
        assert json.loads(self.proc.stdout.readline())["ready"]  # type: ignore[union-attr]

    def ask(self, i: int, q: str, mode: str) -> float:
        return self.ask2(i, q, mode)[0]

    def ask2(self, i: int, q: str, mode: str) -> tuple[float, float]:
        """Seconds the request took, and of it the keyword postings' writing."""
        self.proc.stdin.write(json.dumps([i, q, mode]) + "\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]
        total, settle = json.loads(self.proc.stdout.readline())  # type: ignore[union-attr]
        return float(total), float(settle)

    def close(self) -> None:
        self.proc.stdin.close()  # type: ignore[union-attr]
        self.proc.wait(timeout=120)


# -- build ----------------------------------------------------------------------------------------


def _index(code: Path, kind: str, n: int, url: str, agents: int = len(AGENTS)) -> dict[str, Any]:
    """Index the agents with the code at ``code`` (a subprocess); seconds and chunks."""
    script = _with_code(code) + (
        "import json, time\n"
        "from clawmem_core import MemoryIndex\n"
        "from bench.studies.pg_keywords import workspace, _cfg, _state, AGENTS\n"
        "out = []\n"
        "from clawmem_core.store import postgres as _pg\n"
        "_spent = [0.0]\n"
        "_settle = getattr(_pg.PostgresStore, 'settle', None)\n"
        "def _timed(self, _s=_settle):\n"
        "    t = time.perf_counter(); _s(self); _spent[0] += time.perf_counter() - t\n"
        "if _settle is not None: _pg.PostgresStore.settle = _timed\n"
        f"for i in range({agents}):\n"
        f"    ws, _ = workspace({n}, i)\n"
        f"    with MemoryIndex(ws, agent_id=AGENTS[i], config=_cfg({url!r}), state_dir=_state({kind!r}, {n}, i)) as m:\n"
        "        _spent[0] = 0.0; t = time.perf_counter(); rep = m.sync(); s = time.perf_counter() - t\n"
        "        in_sync = _spent[0]\n"
        "        t = time.perf_counter(); settle = getattr(m._store, 'settle', None)\n"
        "        settle and settle()  # what the first sync that changes something writes after an upgrade\n"
        "        out.append({'seconds': s, 'files': rep.files_indexed, 'chunks': m.status().chunks,\n"
        "                    'settle_seconds': time.perf_counter() - t, 'settle_in_sync_seconds': in_sync})\n"
        "print(json.dumps(out))\n"
    )
    got = subprocess.run([sys.executable, "-c", script], env=_env(), cwd=str(ROOT), check=True, capture_output=True,
                         text=True)
    return {"agents": json.loads(got.stdout.strip().splitlines()[-1])}


def _sizes(url: str) -> dict[str, int]:
    import psycopg

    with psycopg.connect(url) as conn:
        out = {"database": conn.execute("SELECT pg_database_size(current_database())").fetchone()[0],
               "chunks_table": conn.execute("SELECT pg_total_relation_size('clawmem_chunks')").fetchone()[0],
               "terms_column": conn.execute("SELECT sum(pg_column_size(terms)) FROM clawmem_chunks").fetchone()[0]}
        if conn.execute("SELECT to_regclass('clawmem_postings') IS NOT NULL").fetchone()[0]:
            out["postings_table"] = conn.execute("SELECT pg_total_relation_size('clawmem_postings')").fetchone()[0]
        return {k: int(v or 0) for k, v in out.items()}


def build(server: Server, n: int, old: Path, new: bool = True) -> dict[str, Any]:
    for i in range(len(AGENTS)):
        workspace(n, i)
    marker = cache_dir() / f"kw-built-{n}.json"
    rec: dict[str, Any] = json.loads(marker.read_text()) if marker.exists() else {}
    if "old" not in rec:
        url = server.database(f"kw_{n}_old", fresh=True)
        log(f"indexing 3 x {n} into PostgreSQL with the old code")
        rec["old"] = {**_index(old, "pg-old", n, url), "load": os.getloadavg()}
        rec["old"]["sizes"] = _sizes(url)
        marker.write_text(json.dumps(rec, indent=2))
    if "sqlite" not in rec:
        log(f"indexing 3 x {n} into SQLite")
        rec["sqlite"] = {**_index(ROOT, "sqlite", n, ""), "load": os.getloadavg()}
        marker.write_text(json.dumps(rec, indent=2))
    if new and "new" not in rec:
        import psycopg

        from clawmem_core.store.postgres import PostgresBackend

        PostgresBackend.close_pools()
        with psycopg.connect(server.pg.get_uri(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS kw_{n}_new WITH (FORCE)")
            conn.execute(f"CREATE DATABASE kw_{n}_new TEMPLATE kw_{n}_old")
        url = str(server.pg.get_uri(f"kw_{n}_new"))
        log("upgrading a copy with the new code (the first sync writes the keyword postings)")
        rec["new"] = {**_index(ROOT, "pg-new", n, url), "load": os.getloadavg()}
        rec["new"]["sizes"] = _sizes(url)
        marker.write_text(json.dumps(rec, indent=2))
    return rec


def write_cost(server: Server, n: int, old: Path, rounds: int) -> dict[str, Any]:
    """One agent of about ``n`` chunks indexed from nothing, keyword-only, by the old code and the
    new (a new database each), alternating: sync seconds and sizes."""
    import shutil

    workspace(n, 0)
    out: dict[str, Any] = {"scale": n, "load_start": os.getloadavg(), "old": [], "new": []}
    for r in range(rounds):
        for name in (("old", "new") if r % 2 == 0 else ("new", "old")):
            url = server.database(f"kw_w{n}_{name}", fresh=True)
            shutil.rmtree(_state(f"w-{name}", n, 0), ignore_errors=True)
            rec = _index(old if name == "old" else ROOT, f"w-{name}", n, url, agents=1)
            rec["sizes"] = _sizes(url)
            rec["load"] = os.getloadavg()
            out[name].append(rec)
            log(f"write {name}: {rec['agents'][0]['seconds']:.1f} s (writing the postings "
                f"{rec['agents'][0]['settle_in_sync_seconds']:.1f} s of it), {rec['sizes']}")
            from clawmem_core.store.postgres import PostgresBackend

            PostgresBackend.close_pools()
            server.drop(f"kw_w{n}_{name}")
    out["load_end"] = os.getloadavg()
    return out


# -- run ------------------------------------------------------------------------------------------


def _pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] * 1000 if xs else float("nan")


def _copy_of_new(server: Server, n: int) -> str:
    """The URL of ``kw_<n>_cmp``: a copy of the new code's database (made once, kept), for old code
    of the same schema."""
    import psycopg

    name = f"kw_{n}_cmp"
    with psycopg.connect(server.pg.get_uri(), autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            log(f"copying kw_{n}_new to {name} for the old code")
            conn.execute(f"CREATE DATABASE {name} TEMPLATE kw_{n}_new STRATEGY FILE_COPY")
    return str(server.pg.get_uri(name))


def run(server: Server, n: int, old: Path, searches: int, seed: int, edits: int = 8,
        old_db: str = "old") -> dict[str, Any]:
    """``old_db``: ``old``, the old code reads the database it built (``build``); ``new``, a copy
    of the new code's (old code that reads the new schema); ``same``, the new code's database
    itself (the same pages for both: searches only, no one-file syncs)."""
    queries = [workspace(n, i)[1] for i in range(len(AGENTS))]
    old_url = {"new": lambda: _copy_of_new(server, n), "same": lambda: str(server.pg.get_uri(f"kw_{n}_new")),
               "old": lambda: str(server.pg.get_uri(f"kw_{n}_old"))}[old_db]()
    if old_db == "same":
        edits = 0
    workers = {
        "pg_old": Worker("pg_old", old, "pg-old", n, old_url),
        "pg_new": Worker("pg_new", ROOT, "pg-new", n, str(server.pg.get_uri(f"kw_{n}_new"))),
        "sqlite": Worker("sqlite", ROOT, "sqlite", n, ""),
    }
    rng = random.Random(seed)
    zipf = [1.0 / (r + 1) for r in range(len(queries[0]))]
    seen: set[tuple[int, str, str]] = set()
    times: dict[str, dict[str, list[float]]] = {w: {} for w in workers}
    load = {"start": os.getloadavg()}
    names = list(workers)
    try:
        for k in range(searches):
            i = rng.choices(range(len(AGENTS)), WEIGHTS)[0]
            q = rng.choices(queries[i], zipf)[0]
            mode = "kw" if k % 2 else "hyb"
            phase = "first" if (i, q, "any") not in seen else "warm"
            seen.add((i, q, "any"))
            order = names[k % 3:] + names[:k % 3]
            for w in order:
                times[w].setdefault(f"{mode}_{phase}", []).append(workers[w].ask(i, q, mode))
            if (k + 1) % 100 == 0:
                log(f"{k + 1} searches")
        # one-file syncs of agent a0 (a note appended to one file, then each process syncs)
        ws, _ = workspace(n, 0)
        files = sorted((ws / "memory").rglob("*.md"))
        for k in range(edits):
            f = rng.choice(files)
            with open(f, "a", encoding="utf-8") as fh:
                fh.write(f"\n\nedit {k} at {time.time():.3f}: the team moved the deploy window again\n")
            for w in names[k % 3:] + names[:k % 3]:
                total, settle = workers[w].ask2(0, "", "sync")
                times[w].setdefault("one_file_sync", []).append(total)
                times[w].setdefault("one_file_sync_settle", []).append(settle)
    finally:
        for w in workers.values():
            w.close()
    load["end"] = os.getloadavg()
    out: dict[str, Any] = {"scale": n, "searches": searches, "load": load, "old_db": old_db, "by": {}}
    for w, t in times.items():
        for mode in ("hyb", "kw"):
            t[f"{mode}_all"] = t.get(f"{mode}_first", []) + t.get(f"{mode}_warm", [])
        out["by"][w] = {key: {"n": len(xs), "p50_ms": statistics.median(xs) * 1000, "p95_ms": _pct(xs, 0.95)}
                        for key, xs in sorted(t.items())}
    return out


def report(rec: dict[str, Any], res: dict[str, Any], commit: str, old_commit: str) -> str:
    by = res["by"]
    lines = [
        "# PostgreSQL keyword search: three large agents in one process",
        "",
        f"Commit {commit} against {old_commit} (old), {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"load average {res['load']['start'][0]:.1f} at the start, {res['load']['end'][0]:.1f} at the end "
        f"(2 shared cores, other work running: compare ratios, not absolute figures).",
        "",
        f"Three agents of about {res['scale']:,} chunks each (synthetic workspaces, seeds {SEEDS}), keyword-only, one "
        f"process per store and code version, {res['searches']} searches in a skewed mix (agents 6:3:1, "
        "queries Zipf over 400 per agent), each sent to the three processes in turn. `hyb`: `MemoryIndex.search` "
        "(no embedder: the keyword side and the search's own work); `kw`: `Store.keyword_search` (200 candidates). "
        "`first`: the query's first search in that agent in the process; `warm`: a repeat.",
        "",
        "Reproduce: `python -m bench.studies.pg_keywords build --scale N --old OLD_CHECKOUT` then `... run`.",
        "",
        "| measure | SQLite p50 / p95 ms | PG old p50 / p95 ms | PG new p50 / p95 ms | new/old p50, p95 | new/SQLite p50, p95 |",
        "|---|---|---|---|---|---|",
    ]
    for key in sorted(by["pg_new"]):
        s, o, nw = by["sqlite"].get(key), by["pg_old"].get(key), by["pg_new"][key]
        if not (s and o) or key.endswith("_settle"):
            continue
        lines.append(
            f"| {key} (n={nw['n']}) | {s['p50_ms']:.1f} / {s['p95_ms']:.1f} | {o['p50_ms']:.1f} / {o['p95_ms']:.1f} | "
            f"{nw['p50_ms']:.1f} / {nw['p95_ms']:.1f} | {nw['p50_ms'] / o['p50_ms']:.2f}, {nw['p95_ms'] / o['p95_ms']:.2f} | "
            f"{nw['p50_ms'] / s['p50_ms']:.2f}, {nw['p95_ms'] / s['p95_ms']:.2f} |")
    for w in ("pg_old", "pg_new", "sqlite"):
        b = by[w]
        if "hyb_first" in b and "hyb_warm" in b:
            lines.append("")
            lines.append(f"- {w}: first use / warm (whole search, p50): {b['hyb_first']['p50_ms'] / b['hyb_warm']['p50_ms']:.2f}x; "
                         f"keyword: {b['kw_first']['p50_ms'] / b['kw_warm']['p50_ms']:.2f}x")
    if "one_file_sync_settle" in by["pg_new"]:
        st = by["pg_new"]["one_file_sync_settle"]
        lines += ["", f"- of the new code's one-file sync, writing the keyword postings (`settle`): p50 "
                      f"{st['p50_ms']:.1f} ms, p95 {st['p95_ms']:.1f} ms"]
    lines += ["", "## Index time and size", ""]
    for k in ("old", "new", "sqlite"):
        if k in rec:
            secs = sum(a["seconds"] for a in rec[k]["agents"])
            chunks = sum(a["chunks"] for a in rec[k]["agents"])
            settle = sum(a.get("settle_seconds", 0.0) for a in rec[k]["agents"])
            lines.append(f"- {k}: {chunks:,} chunks, sync {secs:.0f} s in all, then writing the keyword postings "
                         f"{settle:.1f} s (load {rec[k]['load'][0]:.1f})"
                         + (f"; sizes {rec[k]['sizes']}" if "sizes" in rec[k] else ""))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.studies.pg_keywords")
    ap.add_argument("part", choices=["build-old", "build", "run", "write"])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--scale", type=int, default=100_000)
    ap.add_argument("--old", required=True, help="a checkout of the old commit")
    ap.add_argument("--searches", type=int, default=600)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--old-db", choices=["old", "new", "same"], default="old",
                    help="the database the old code reads: the one it built, or a copy of the new code's "
                    "(old code of the same schema), or the new code's database itself (searches only)")
    ap.add_argument("--out", default="pg_keywords", help="results go to bench/results/OUT.json and OUT.md")
    a = ap.parse_args(argv)
    old = Path(a.old).resolve()
    server = Server() if a.part == "write" else Server(cache_dir() / "pgdata")
    try:
        if a.part == "write":
            res = write_cost(server, a.scale, old, a.rounds)
            (RESULTS / f"pg_keywords_write_{a.scale}.json").write_text(json.dumps(res, indent=2))
            return 0
        rec = build(server, a.scale, old, new=a.part != "build-old")
        if a.part == "run":
            res = run(server, a.scale, old, a.searches, a.seed, old_db=a.old_db)
            commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                    text=True).stdout.strip()
            old_commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=old, capture_output=True,
                                        text=True).stdout.strip()
            (RESULTS / f"{a.out}.json").write_text(json.dumps({"build": rec, "run": res}, indent=2))
            (RESULTS / f"{a.out}.md").write_text(report(rec, res, commit, old_commit))
            print(report(rec, res, commit, old_commit))
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
