"""Many users per worker: one process serving a skewed stream of searches across many agents.

    python -m bench.many_users                                   # the issue's size (see results/many_users.md)
    python -m bench.many_users --agents 40 --searches 300 --scale 0.1 --sqlite-agents 20   # about a minute

Every agent lives in one PostgreSQL database (an embedded server, as ``bench.postgres`` starts it).
Two worker processes serve the same Zipf-distributed stream of searches, batch by batch, one after
the other (the order alternating): ``registry`` keeps one :class:`~clawmem_core.registry.MemoryIndexes`
bounded at ``--max-open`` indexes; ``naive`` opens a :class:`~clawmem_core.index.MemoryIndex` per
request and closes it after the search (one shared embedder instance, which favours it). Each
worker serves ``--concurrency`` requests of a batch at once, in threads. Reported per worker:
p50/p95 latency of a request (open + search (+ close)), apart for the first search of an agent in the
process (cold), an agent opened again after the registry closed it (reopened) and the rest (warm);
the worker's resident memory; the connections it holds (``pg_stat_activity``, sampled during the
run, by ``application_name``); how many agents' keyword statistics it keeps in memory.

Populating: ``--templates`` distinct generated workspaces (``bench.synth``, sizes spread over
``--min-chunks``..``--max-chunks``) are synced for real; each agent is then a copy of the template
nearest its size, made inside PostgreSQL by ``INSERT ... SELECT`` over every table that has an
``agent`` column (found in the catalog, so a table added later is copied too), with the agent id and
a new generation rewritten. Copies are written agent after agent, as a sync writes them. The run
checks that copies answer as their template does, and that a sync of a copy against its template's
files finds nothing to do. The SQLite variant (``--sqlite-agents``) copies each template's index file
and its Markdown once per agent (one file and one workspace per agent; a real sync of each, its vectors from
the embedding cache) and runs the same workers with ``--max-open`` scaled to the
same share of the agents.

Vectors come from the deterministic hash embedder (``clawmem_core.testing.HashEmbedder``, ``--dims``
384): it is not a model and stands in for none. This measures the store and the registry, not ranking.
Searches pass ``record=False`` (no recall log writes).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
MODES = ("registry", "naive", "registry-unfreed", "registry-own-calibration")
#: What each worker mode is, as the results page labels it.
LABELS = {"registry": "registry", "naive": "naive (a `MemoryIndex` per request)",
          "registry-unfreed": "registry, closed agents' keyword statistics left in memory (as before)",
          "registry-own-calibration": "registry, each index its own calibration vectors (as before)"}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _config(url: str | None, pool_size: int | None) -> dict[str, Any]:
    store: dict[str, Any] = {}
    if url:
        store["url"] = url
        if pool_size:
            store["pool_size"] = pool_size
    return {"store": store, "sync": {"watch": False, "interval_minutes": 0, "on_session_start": False}}


def _pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


# -- the plan: sizes, templates, the stream ------------------------------------------------------


def plan(args: argparse.Namespace) -> dict[str, Any]:
    """Agent sizes (log-uniform), the template each agent copies, and the stream of requests."""
    rng = random.Random(args.seed)
    lo, hi = max(1, int(args.min_chunks * args.scale)), max(2, int(args.max_chunks * args.scale))
    t = max(1, args.templates)
    tsizes = [round(lo * (hi / lo) ** (i / max(1, t - 1))) for i in range(t)]
    agents = []
    for i in range(args.agents):
        size = lo * (hi / lo) ** rng.random()
        tpl = min(range(t), key=lambda j: abs(math.log(tsizes[j]) - math.log(size)))
        agents.append({"agent": f"user-{i:05d}", "template": tpl})
    return {"template_sizes": tsizes, "agents": agents}


def zipf_stream(n_agents: int, n: int, s: float, seed: int) -> list[int]:
    """``n`` agent indexes, Zipf(``s``) over popularity ranks given to agents at random."""
    rng = random.Random(seed)
    ranks = list(range(n_agents))
    rng.shuffle(ranks)  # popularity unrelated to size or name
    weights = [1.0 / (r + 1) ** s for r in range(n_agents)]
    picks = rng.choices(range(n_agents), weights=weights, k=n)
    return [ranks[p] for p in picks]


# -- populating ----------------------------------------------------------------------------------


def sync_templates(work: Path, sizes: list[int], url: str | None, dims: int, seed: int) -> list[dict[str, Any]]:
    """Generate and sync the template workspaces (agent ``tpl-NN``) into the store."""
    from clawmem_core import MemoryIndex
    from clawmem_core.testing import HashEmbedder

    from .synth import generate

    out = []
    for i, size in enumerate(sizes):
        ws = work / "templates" / f"tpl-{i:02d}"
        if not ws.is_dir():
            generate(ws, size, seed=seed + i)
        man = json.loads((ws.parent / f"{ws.name}.manifest.json").read_text())
        t0 = time.perf_counter()
        with MemoryIndex(ws, agent_id=f"tpl-{i:02d}", config=_config(url, None), embedder=HashEmbedder(dims),
                         state_dir=work / ("state-pg" if url else "state-sqlite")) as mem:
            rep = mem.sync()
            chunks = mem.status().chunks if hasattr(mem.status(), "chunks") else rep.chunks_indexed
            # a search embeds the embedder's calibration vectors and the next sync caches them, as
            # in any index that has been searched and synced: the copies have them in their cache
            mem.search(man["queries_en"][0], record=False)
            mem.sync()
        queries = man["queries_en"][:60] + man["queries_zh"][:20]
        out.append({"agent": f"tpl-{i:02d}", "workspace": str(ws), "chunks": int(chunks), "files": man["files"],
                    "seconds": time.perf_counter() - t0, "queries": queries})
    return out


def agent_tables(conn: Any) -> dict[str, list[str]]:
    """Every table with an ``agent`` column -> its columns (those filled by a sequence left out)."""
    rows = conn.execute(
        "SELECT c.table_name, c.column_name, coalesce(c.column_default, '') FROM information_schema.columns c "
        "WHERE c.table_schema = current_schema() AND c.table_name IN (SELECT table_name FROM "
        "information_schema.columns WHERE table_schema = current_schema() AND column_name = 'agent') "
        "ORDER BY c.table_name, c.ordinal_position").fetchall()
    out: dict[str, list[str]] = {}
    for table, col, default in rows:
        if not default.startswith("nextval("):
            out.setdefault(table, []).append(col)
    return out


def clone_pg(url: str, copies: dict[str, list[str]]) -> dict[str, Any]:
    """Copy template agent -> new agents, every per-agent table, in PostgreSQL. ``copies``: template
    agent id -> the new agent ids."""
    import psycopg

    t0 = time.perf_counter()
    rows_copied: dict[str, int] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        tables = agent_tables(conn)
        assert "clawmem_agents" in tables and "clawmem_chunks" in tables, tables
        for tpl, news in copies.items():
            if not news:
                continue
            with conn.transaction():
                gen = conn.execute("SELECT generation FROM clawmem_agents WHERE agent = %s", (tpl,)).fetchone()[0]
                for new in news:
                    new_gen = conn.execute("SELECT nextval('clawmem_generation_seq')").fetchone()[0]
                    # clawmem_agents first (its row serialises the agent's writes), then the rest
                    for table in ["clawmem_agents"] + sorted(t for t in tables if t != "clawmem_agents"):
                        cols = tables[table]
                        sel = []
                        for c in cols:
                            if c == "agent":
                                sel.append("%(new)s")
                            elif c == "generation":
                                sel.append("%(gen)s::bigint")
                            else:
                                sel.append(c)
                        where = "agent = %(tpl)s" + (" AND generation = %(old)s" if "generation" in cols else "")
                        order = " ORDER BY rid" if table == "clawmem_chunks" else ""
                        cur = conn.execute(
                            f"INSERT INTO {table} ({', '.join(cols)}) SELECT {', '.join(sel)} FROM {table} "
                            f"WHERE {where}{order}",
                            {"new": new, "gen": new_gen, "tpl": tpl, "old": gen})
                        rows_copied[table] = rows_copied.get(table, 0) + max(0, cur.rowcount)
        conn.execute("ANALYZE")
    return {"seconds": time.perf_counter() - t0, "rows": rows_copied, "tables": sorted(tables)}


def clone_sqlite(state: Path, root: Path, templates: list[dict[str, Any]], copies: dict[str, list[str]],
                 dims: int) -> dict[str, Any]:
    """One workspace and one index file per agent: the template's Markdown copied to
    ``root/<agent>`` and its index file under the agent's name, then a real sync of each agent
    (the copied files are new files to it: it indexes them again, every vector from the index's
    embedding cache, so that it embeds nothing)."""
    from clawmem_core import MemoryIndex
    from clawmem_core.testing import HashEmbedder

    t0 = time.perf_counter()
    ws_of = {t["agent"]: Path(t["workspace"]) for t in templates}
    embedded = indexed = files = 0
    for tpl, news in copies.items():
        src = state / "memory" / f"{tpl}.sqlite"
        for new in news:
            shutil.copytree(ws_of[tpl], root / new, dirs_exist_ok=True)
            shutil.copyfile(src, state / "memory" / f"{new}.sqlite")
            with MemoryIndex(root / new, agent_id=new, config=_config(None, None), embedder=HashEmbedder(dims),
                             state_dir=state) as mem:
                rep = mem.sync()
            embedded += rep.embeddings_computed
            indexed += rep.chunks_indexed
            files += 1
    return {"seconds": time.perf_counter() - t0, "agents": files, "chunks_indexed_by_the_syncs": indexed,
            "embeddings_computed_by_the_syncs": embedded}


def verify_copies(url: str | None, state: Path, templates: list[dict[str, Any]], copies: dict[str, list[str]],
                  dims: int, root: Path | None = None) -> dict[str, Any]:
    """A copy answers as its template does (same ids, same scores), and a sync of a copy against the
    template's files finds nothing to do (its files, chunks and meta are consistent)."""
    from clawmem_core import MemoryIndex
    from clawmem_core.testing import HashEmbedder

    checked, same = 0, 0
    synced: dict[str, Any] = {}
    for tpl in templates[:: max(1, len(templates) // 3)]:
        news = copies.get(tpl["agent"]) or []
        if not news:
            continue
        new = news[-1]
        cfg = _config(url, None)
        wa = None if url else tpl["workspace"]
        wb = None if url else root / new  # type: ignore[operator]
        with MemoryIndex(wa, agent_id=tpl["agent"], config=cfg, embedder=HashEmbedder(dims), state_dir=state) as a, \
                MemoryIndex(wb, agent_id=new, config=cfg, embedder=HashEmbedder(dims), state_dir=state) as b:
            for q in tpl["queries"][:10]:
                ha = [(h.path, h.start_line, round(h.score, 9)) for h in a.search(q, record=False)]
                hb = [(h.path, h.start_line, round(h.score, 9)) for h in b.search(q, record=False)]
                checked += 1
                same += ha == hb
        if not synced and url:
            with MemoryIndex(tpl["workspace"], agent_id=new, config=cfg, embedder=HashEmbedder(dims),
                             state_dir=state) as c:
                rep = c.sync()
            synced = {"agent": new, "files_indexed": rep.files_indexed, "files_deleted": rep.files_deleted,
                      "chunks_indexed": rep.chunks_indexed, "full": rep.full,
                      "embeddings_computed": rep.embeddings_computed}
    return {"queries": checked, "identical": same, "sync_of_a_copy": synced}


# -- the worker ----------------------------------------------------------------------------------


def _rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _keyword_cache() -> dict[str, int]:
    """Agents whose PostgreSQL keyword statistics this process keeps, and their rows + postings."""
    try:
        from clawmem_core.store.postgres import KEYWORD_CACHE
    except Exception:
        return {}
    stats = dict(getattr(KEYWORD_CACHE, "_stats", {}))
    return {"agents": len(stats), "rows_and_postings": int(sum(getattr(s, "size", 0) for s in stats.values()))}


def worker(args: argparse.Namespace) -> int:
    """Serve batches of ``[agent, query]`` read as JSON lines from stdin; answer on stdout."""
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing else may write to the protocol's stream
    from clawmem_core import MemoryIndex
    from clawmem_core.registry import MemoryIndexes
    from clawmem_core.testing import HashEmbedder

    cfg = _config(args.url, args.pool_size)
    state = Path(args.state)
    emb = HashEmbedder(args.dims)
    if args.worker == "registry-unfreed":  # the registry as it was: closing an agent left its statistics
        from clawmem_core import MemoryIndex

        MemoryIndex._forget_cached = lambda self: None  # type: ignore[method-assign]
    if args.worker == "registry-own-calibration":  # the registry as it was: each index its own
        from clawmem_core import MemoryIndex

        MemoryIndex._share_calibration = lambda self, calibration: None  # type: ignore[method-assign]
    root = Path(args.root) if args.root else None  # SQLite: the agents' workspaces (<root>/<agent>)
    indexes = (MemoryIndexes(cfg, max_open=args.max_open, state_dir=state, embedder=emb, workspace_root=root)
               if args.worker.startswith("registry") else None)
    seen: set[str] = set()
    pool = ThreadPoolExecutor(max(1, args.concurrency))

    def serve(agent: str, query: str, kind: str) -> dict[str, Any]:
        t0 = time.perf_counter()
        if indexes is not None:
            with indexes.lease(agent) as mem:
                t1 = time.perf_counter()
                hits = mem.search(query, record=False)
                t2 = time.perf_counter()
            t3 = time.perf_counter()
        else:
            mem = MemoryIndex(root / agent if root else None, agent_id=agent, config=cfg, embedder=emb, state_dir=state)
            try:
                t1 = time.perf_counter()
                hits = mem.search(query, record=False)
                t2 = time.perf_counter()
            finally:
                mem.close()
            t3 = time.perf_counter()
        return {"kind": kind, "ms": (t3 - t0) * 1000, "open_ms": (t1 - t0) * 1000, "search_ms": (t2 - t1) * 1000,
                "hits": len(hits)}

    for line in sys.stdin:
        msg = json.loads(line)
        if "batch" in msg:
            jobs = []
            batch_agents: set[str] = set()
            for agent, query in msg["batch"]:
                if agent not in seen:
                    kind = "cold"
                elif indexes is not None and agent not in batch_agents and agent not in indexes:
                    kind = "reopened"
                else:
                    kind = "warm"
                seen.add(agent)
                batch_agents.add(agent)
                jobs.append(pool.submit(serve, agent, query, kind))
            reply: dict[str, Any] = {"results": [j.result() for j in jobs]}
        elif "stats" in msg:
            reply = {"rss": _rss(), "maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                     "open": len(indexes) if indexes is not None else 0, "seen": len(seen),
                     "keyword_cache": _keyword_cache(), "fds": len(os.listdir("/proc/self/fd"))}
        else:
            break
        out.write(json.dumps(reply) + "\n")
        out.flush()
    if indexes is not None:
        indexes.close()
    pool.shutdown()
    return 0


class Worker:
    def __init__(self, mode: str, store: str, url: str | None, state: Path, args: argparse.Namespace,
                 max_open: int) -> None:
        self.mode = mode
        self.app = f"clawmem-bench-{store}-{mode}"
        env = dict(os.environ, PGAPPNAME=self.app)
        cmd = [sys.executable, "-m", "bench.many_users", "--worker", mode, "--state", str(state),
               "--max-open", str(max_open), "--dims", str(args.dims), "--concurrency", str(args.concurrency)]
        if url:
            cmd += ["--url", url]
        else:
            cmd += ["--root", str(state.parent / "agents")]
        if args.pool_size:
            cmd += ["--pool-size", str(args.pool_size)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True,
                                     cwd=str(HERE.parent))

    def ask(self, msg: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.mode} ended (exit status {self.proc.wait()})")
        return json.loads(line)

    def close(self) -> None:
        try:
            self.ask({"quit": True}) if self.proc.poll() is None else None
        except Exception:
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class ConnectionSampler(threading.Thread):
    """Samples ``pg_stat_activity`` every ``every`` seconds: most connections seen per application."""

    def __init__(self, url: str, every: float = 0.05) -> None:
        super().__init__(daemon=True)
        import psycopg

        self.conn = psycopg.connect(url, autocommit=True, application_name="clawmem-bench-sampler")
        self.every = every
        self.most: dict[str, int] = {}
        self.most_active: dict[str, int] = {}
        self.stop = threading.Event()

    def sample(self) -> dict[str, int]:
        rows = self.conn.execute(
            "SELECT application_name, count(*), count(*) FILTER (WHERE state = 'active') FROM pg_stat_activity "
            "WHERE backend_type = 'client backend' GROUP BY 1").fetchall()
        now = {}
        for app, n, active in rows:
            now[app] = int(n)
            self.most[app] = max(self.most.get(app, 0), int(n))
            self.most_active[app] = max(self.most_active.get(app, 0), int(active))
        return now

    def run(self) -> None:
        while not self.stop.wait(self.every):
            try:
                self.sample()
            except Exception:
                return

    def close(self) -> None:
        self.stop.set()
        self.join(timeout=5)
        self.conn.close()


def serve_stream(store: str, url: str | None, state: Path, agents: list[dict[str, Any]],
                 templates: list[dict[str, Any]], args: argparse.Namespace, max_open: int,
                 n_searches: int) -> dict[str, Any]:
    """The two workers serve one stream, batch by batch, alternating which goes first."""
    picks = zipf_stream(len(agents), n_searches, args.zipf, args.seed + 7)
    qrng = random.Random(args.seed + 11)
    stream = []
    for p in picks:
        a = agents[p]
        stream.append([a["agent"], qrng.choice(templates[a["template"]]["queries"])])
    modes = args.modes
    workers = {m: Worker(m, store, url, state, args, max_open) for m in modes}
    sampler = ConnectionSampler(url) if url else None
    results: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    rss: dict[str, list[int]] = {m: [] for m in modes}
    try:
        # process-wide first costs (imports, the pool, numpy) on a template agent outside the stream
        for w in workers.values():
            w.ask({"batch": [[templates[0]["agent"], templates[0]["queries"][0]]]})
        if sampler is not None:
            sampler.start()
        step = max(1, args.concurrency)
        t0 = time.perf_counter()
        for b, i in enumerate(range(0, len(stream), step)):
            batch = stream[i:i + step]
            k = b % len(modes)
            for m in (modes[k:] + modes[:k]) if b % 2 == 0 else (modes[k:] + modes[:k])[::-1]:
                results[m] += workers[m].ask({"batch": batch})["results"]
            if b % 50 == 0:
                for m in modes:
                    rss[m].append(workers[m].ask({"stats": True})["rss"])
                if b % 500 == 0:
                    log(f"{store}: {i}/{len(stream)} searches")
        wall = time.perf_counter() - t0
        stats = {m: workers[m].ask({"stats": True}) for m in modes}
    finally:
        if sampler is not None:
            sampler.close()
        for w in workers.values():
            w.close()
    out: dict[str, Any] = {"searches": len(stream), "distinct_agents": len({s[0] for s in stream}),
                           "agents": len(agents), "max_open": max_open, "wall_seconds": wall, "modes": {}}
    for m in modes:
        rs = results[m]
        row: dict[str, Any] = {"all": _summary(rs)}
        for kind in ("cold", "reopened", "warm"):
            sub = [r for r in rs if r["kind"] == kind]
            if sub:
                row[kind] = _summary(sub)
        row["rss_mb_end"] = stats[m]["rss"] / 2**20
        row["rss_mb_peak"] = max([stats[m]["maxrss"], stats[m]["rss"]] + rss[m]) / 2**20
        row["open_at_end"] = stats[m]["open"]
        row["keyword_cache"] = stats[m]["keyword_cache"]
        row["fds"] = stats[m]["fds"]
        if sampler is not None:
            app = workers[m].app
            row["connections_most"] = sampler.most.get(app, 0)
            row["connections_most_active"] = sampler.most_active.get(app, 0)
        out["modes"][m] = row
    if "registry" in out["modes"] and "naive" in out["modes"]:
        a, b = out["modes"]["registry"]["all"], out["modes"]["naive"]["all"]
        out["ratio_p50_registry_over_naive"] = a["p50"] / b["p50"] if b["p50"] else float("nan")
        out["ratio_p95_registry_over_naive"] = a["p95"] / b["p95"] if b["p95"] else float("nan")
    return out


def _summary(rs: list[dict[str, Any]]) -> dict[str, Any]:
    ms = [r["ms"] for r in rs]
    return {"n": len(rs), "p50": statistics.median(ms), "p95": _pct(ms, 0.95), "p99": _pct(ms, 0.99),
            "mean": statistics.fmean(ms), "open_p50": statistics.median(r["open_ms"] for r in rs),
            "search_p50": statistics.median(r["search_ms"] for r in rs),
            "no_hits": sum(1 for r in rs if r["hits"] == 0)}


# -- the run -------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    import subprocess as sp

    p = plan(args)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="clawmem-many-users-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        commit = sp.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE.parent).stdout.strip()
    except OSError:
        commit = ""
    out: dict[str, Any] = {"commit": commit, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                           "load_start": os.getloadavg(), "args": {k: v for k, v in vars(args).items() if k != "worker"},
                           "template_sizes": p["template_sizes"]}
    copies: dict[str, list[str]] = {}
    for a in p["agents"]:
        copies.setdefault(f"tpl-{a['template']:02d}", []).append(a["agent"])
    try:
        if not args.no_postgres:
            from .postgres import Server

            server = None
            if args.store_url:  # an existing database, emptied of clawmem's tables by the caller
                url = args.store_url
            else:
                log("starting PostgreSQL")
                server = Server()
            try:
                if server is not None:
                    url = server.database("many_users")
                log(f"syncing {len(p['template_sizes'])} templates ({sum(p['template_sizes'])} chunks)")
                templates = sync_templates(work, p["template_sizes"], url, args.dims, args.seed)
                sync_s = sum(t["seconds"] for t in templates)
                chunks_of = {t["agent"]: t["chunks"] for t in templates}
                log(f"templates synced in {sync_s:.1f} s; copying {args.agents} agents")
                cl = clone_pg(url, copies)
                total = sum(chunks_of[f"tpl-{a['template']:02d}"] for a in p["agents"])
                log(f"copied {total} chunks in {cl['seconds']:.1f} s")
                ver = verify_copies(url, work / "state-pg", templates, copies, args.dims)
                log(f"copies checked: {ver}")
                pg: dict[str, Any] = {"templates": [{k: v for k, v in t.items() if k != "queries"} for t in templates],
                                      "template_sync_seconds": sync_s, "copy": cl, "verify": ver, "chunks": total,
                                      "sizes": _sizes([chunks_of[f"tpl-{a['template']:02d}"] for a in p["agents"]])}
                pg["stream"] = serve_stream("postgres", url, work / "state-pg", p["agents"], templates, args,
                                            args.max_open, args.searches)
                pg["pool_size"] = args.pool_size or 4
                out["postgres"] = pg
                log(f"postgres: {json.dumps(_brief(pg['stream']))}")
            finally:
                if server is not None:
                    server.close()
                else:
                    from clawmem_core.store.postgres import PostgresBackend

                    PostgresBackend.close_pools(url)
        if args.sqlite_agents:
            n = min(args.sqlite_agents, args.agents)
            agents = p["agents"][:n]
            sq_copies: dict[str, list[str]] = {}
            for a in agents:
                sq_copies.setdefault(f"tpl-{a['template']:02d}", []).append(a["agent"])
            log(f"sqlite: syncing templates, copying {n} agents")
            templates = sync_templates(work, p["template_sizes"], None, args.dims, args.seed)
            chunks_of = {t["agent"]: t["chunks"] for t in templates}
            cl = clone_sqlite(work / "state-sqlite", work / "agents", templates, sq_copies, args.dims)
            ver = verify_copies(None, work / "state-sqlite", templates, sq_copies, args.dims, work / "agents")
            log(f"copies checked: {ver}")
            max_open = max(1, round(args.max_open * n / args.agents))
            sq: dict[str, Any] = {"copy": cl, "verify": ver,
                                  "chunks": sum(chunks_of[f"tpl-{a['template']:02d}"] for a in agents),
                                  "sizes": _sizes([chunks_of[f"tpl-{a['template']:02d}"] for a in agents])}
            sq["stream"] = serve_stream("sqlite", None, work / "state-sqlite", agents, templates, args, max_open,
                                        args.sqlite_searches or max(1, round(args.searches * n / args.agents)))
            out["sqlite"] = sq
            log(f"sqlite: {json.dumps(_brief(sq['stream']))}")
    finally:
        if not args.work and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    out["load_end"] = os.getloadavg()
    return out


def _sizes(xs: list[int]) -> dict[str, int]:
    return {"min": min(xs), "median": int(statistics.median(xs)), "max": max(xs)} if xs else {}


def _brief(stream: dict[str, Any]) -> dict[str, Any]:
    return {m: {k: round(v["p50"], 1) for k, v in row.items() if isinstance(v, dict) and "p50" in v}
            for m, row in stream["modes"].items()}


def markdown(res: dict[str, Any]) -> str:
    """The results table(s) of one run."""
    lines = []
    for store in ("postgres", "sqlite"):
        if store not in res:
            continue
        r = res[store]
        s = r["stream"]
        lines += [f"### {'PostgreSQL' if store == 'postgres' else 'SQLite (one file per agent)'}: "
                  f"{s['agents']} agents, {r['chunks']:,} chunks (per agent {r['sizes']['min']}-{r['sizes']['max']}, "
                  f"median {r['sizes']['median']}), {s['searches']} searches over {s['distinct_agents']} agents, "
                  f"registry bounded at {s['max_open']}", ""]
        rows = s["modes"]
        modes = list(rows)
        lines += ["| | " + " | ".join(LABELS.get(m, m) for m in modes) + " |", "|---" * (len(modes) + 1) + "|"]

        def cell(row: dict[str, Any], kind: str, key: str) -> str:
            v = row.get(kind)
            return f"{v[key]:.1f}" if v else "-"

        def line(label: str, fn: Any) -> None:
            lines.append(f"| {label} | " + " | ".join(fn(rows[m]) for m in modes) + " |")

        for kind, label in (("all", "all requests"), ("cold", "cold (first search of an agent in the process)"),
                            ("reopened", "reopened (closed by the bound, asked again)"), ("warm", "warm")):
            if not any(kind in rows[m] for m in modes):
                continue
            line(f"{label}: n", lambda r, k=kind: str(r.get(k, {}).get("n", 0)))
            line(f"{label}: p50 / p95 ms", lambda r, k=kind: f"{cell(r, k, 'p50')} / {cell(r, k, 'p95')}")
            line(f"{label}: open p50 / search p50 ms",
                 lambda r, k=kind: f"{cell(r, k, 'open_p50')} / {cell(r, k, 'search_p50')}")
        line("RSS at end / peak MB", lambda r: f"{r['rss_mb_end']:.0f} / {r['rss_mb_peak']:.0f}")
        line("indexes open at end", lambda r: str(r["open_at_end"]))
        if any(rows[m].get("keyword_cache") for m in modes):
            line("agents with keyword statistics in memory at end (rows + postings)",
                 lambda r: f"{(r.get('keyword_cache') or {}).get('agents', '-')} "
                           f"({(r.get('keyword_cache') or {}).get('rows_and_postings', 0):,})")
        if all("connections_most" in rows[m] for m in modes):
            line("connections held, most seen (of them active)",
                 lambda r: f"{r['connections_most']} ({r['connections_most_active']})")
        line("open file descriptors at end", lambda r: str(r["fds"]))
        if "ratio_p50_registry_over_naive" in s:
            lines.append(f"| p50 / p95 ratio registry / naive | {s['ratio_p50_registry_over_naive']:.2f} / "
                         f"{s['ratio_p95_registry_over_naive']:.2f} |" + " |" * (len(modes) - 1))
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.many_users", description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", type=int, default=1000)
    ap.add_argument("--max-open", type=int, default=100)
    ap.add_argument("--searches", type=int, default=5000)
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies --min-chunks and --max-chunks")
    ap.add_argument("--min-chunks", type=int, default=200)
    ap.add_argument("--max-chunks", type=int, default=2000)
    ap.add_argument("--templates", type=int, default=24, help="distinct workspaces synced for real")
    ap.add_argument("--zipf", type=float, default=1.0, help="exponent of the agents' popularity")
    ap.add_argument("--concurrency", type=int, default=4, help="requests a worker serves at once (threads)")
    ap.add_argument("--pool-size", type=int, default=None, help="store.pool_size (unset: the default, 4)")
    ap.add_argument("--dims", type=int, default=384)
    ap.add_argument("--modes", default="registry,naive",
                    help="the workers, interleaved: registry, naive, and two registries as they were: "
                    "registry-unfreed (closing an agent left its keyword statistics in memory), "
                    "registry-own-calibration (each index read its own calibration vectors)")
    ap.add_argument("--sqlite-agents", type=int, default=200, help="0: no SQLite variant")
    ap.add_argument("--sqlite-searches", type=int, default=None)
    ap.add_argument("--no-postgres", action="store_true")
    ap.add_argument("--store-url", default=None,
                    help="an empty PostgreSQL database with pgvector to use instead of starting a server")
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--work", default=None, help="scratch directory (kept); default: a temporary one, deleted")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--json", default=None, help="write the results here (default: results/many_users.json)")
    ap.add_argument("--markdown", action="store_true", help="print the results table(s) as Markdown")
    # the worker side (internal)
    ap.add_argument("--worker", choices=MODES, help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    ap.add_argument("--state", help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    ap.add_argument("--report", default=None, metavar="JSON", help="only print the tables of a saved run")
    args = ap.parse_args(argv)
    if args.report:
        print(markdown(json.loads(Path(args.report).read_text())))
        return 0
    if not args.worker:
        args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
        if not args.modes or any(m not in MODES for m in args.modes):
            ap.error(f"--modes: a comma-separated list of {', '.join(MODES)}")
    if args.worker:
        return worker(args)
    res = run(args)
    dest = Path(args.json) if args.json else RESULTS / "many_users.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(res, indent=1, ensure_ascii=False))
    log(f"wrote {dest}")
    if args.markdown:
        print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
