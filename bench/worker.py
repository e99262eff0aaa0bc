"""Speed phases, each run in its own process (``python -m bench.worker TASK_JSON``) so that peak memory and
cold-start effects belong to that phase alone. The result is printed as one JSON line prefixed ``RESULT ``."""

from __future__ import annotations

import json
import os
import resource
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from .metrics import percentile


def _rss_mb() -> float:
    try:
        import psutil

        return psutil.Process().memory_info().rss / 2**20
    except Exception:
        return float("nan")


def _peak_mb() -> float:
    """Peak resident memory of this process. VmHWM, because Linux carries ``ru_maxrss`` over from the parent
    across fork and exec (a worker started by a process holding a model would report the parent's peak)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1024.0 if sys.platform != "darwin" else 2**20)


def _choice(spec: str):
    from .embedders import resolve

    return resolve(spec)


def _clean_status(st: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in st.items():
        if isinstance(v, str) and (os.sep in v or v.startswith("~")):
            continue  # no machine paths in results
        if isinstance(v, (str, int, float, bool)) or v is None:
            out[k] = v
        elif isinstance(v, dict):
            out[k] = _clean_status(v)
    return out


def _pcts(xs: list[float]) -> dict[str, float]:
    ms = [1000 * x for x in xs]
    return {"p50_ms": percentile(ms, 50), "p95_ms": percentile(ms, 95), "mean_ms": sum(ms) / len(ms) if ms else 0.0,
            "n": len(ms)}


# -- phase: full index, no-op sync, one-file-changed sync ------------------------------------------------------


def sync_seconds(mem: Any, target: Path, repeats: int) -> tuple[list[float], list[float], list[int]]:
    """``repeats`` no-op syncs of a live index, then as many one-file syncs (a line appended to ``target``
    before each; the file restored afterwards): the seconds of each, and the files each one-file sync indexed."""
    noop = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        mem.sync()
        noop.append(time.perf_counter() - t0)
    original = target.read_bytes()
    one_file, indexed = [], []
    try:
        for i in range(repeats):
            with target.open("ab") as fh:
                fh.write(f"- benchmark edit {i}: moved the launch review to Friday.\n".encode())
            t0 = time.perf_counter()
            rep = mem.sync()
            one_file.append(time.perf_counter() - t0)
            indexed.append(rep.files_indexed)
    finally:
        target.write_bytes(original)
        mem.sync()
    return noop, one_file, indexed


def timed_syncs(mem: Any, target: Path, repeats: int) -> dict[str, Any]:
    """:func:`sync_seconds` as ``noop_sync`` and ``one_file_sync`` percentiles, and the files each
    one-file sync indexed (``one_file_sync_files_indexed``)."""
    noop, one_file, indexed = sync_seconds(mem, target, repeats)
    return {"noop_sync": _pcts(noop), "one_file_sync": _pcts(one_file), "one_file_sync_files_indexed": indexed}


def task_index(t: dict[str, Any]) -> dict[str, Any]:
    from . import engine

    ws, sd = Path(t["workspace"]), Path(t["state_dir"])
    if sd.exists():
        shutil.rmtree(sd)
    sd.mkdir(parents=True)
    choice = _choice(t["embedder"])
    rss0 = _rss_mb()
    res: dict[str, Any] = {"embedder": t["embedder"], "rss_before_mb": rss0}
    with engine.open_index(ws, sd, choice) as mem:
        t0 = time.perf_counter()
        report = mem.sync(force=True)
        res["index_seconds"] = time.perf_counter() - t0
        res["peak_rss_mb"] = _peak_mb()
        st = engine.status_dict(mem)
        res["status"] = _clean_status(st)
        res["sync_report"] = repr(report)[:300]
        chunks = st.get("chunks") or st.get("chunk_count")
        files = st.get("files") or st.get("file_count")
        res["chunks"], res["files"] = chunks, files
        if chunks:
            res["chunks_per_s"] = chunks / res["index_seconds"]
        res.update(timed_syncs(mem, ws / t["edit_file"], t.get("repeats", 5)))
    # a new instance on the same index: open + no-op sync (what a fresh process pays)
    xs = []
    for _ in range(3):
        t0 = time.perf_counter()
        with engine.open_index(ws, sd, choice) as mem:
            mem.sync()
        xs.append(time.perf_counter() - t0)
    res["open_noop_sync"] = _pcts(xs)
    res["index_bytes"] = engine.index_size_bytes(sd)
    res["peak_rss_mb"] = max(res["peak_rss_mb"], _peak_mb())
    return res


# -- phase: search latency and exact-vector comparison ----------------------------------------------------------


def _timed_search(mem: Any, queries: list[str], emb: Any, k: int, min_score: float, warm: int = 10):
    mem.sync()  # a new instance's first search would start a background sync; settle it first
    for q in queries[:warm]:
        mem.search(q, max_results=k, min_score=min_score, record=False)
    incl, excl = [], []
    for q in queries:
        e0 = getattr(emb, "query_seconds", 0.0)
        t0 = time.perf_counter()
        mem.search(q, max_results=k, min_score=min_score, record=False)
        dt = time.perf_counter() - t0
        incl.append(dt)
        excl.append(dt - (getattr(emb, "query_seconds", 0.0) - e0))
    return incl, excl


def task_search(t: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    from . import engine
    from .embedders import EmbedderChoice, QueryModelEmbedder, ZeroCostEmbedder, resolve

    ws = Path(t["workspace"])
    kw_sd, vec_sd = Path(t["keyword_state_dir"]), Path(t["vector_state_dir"])
    qs_en, qs_zh = t["queries_en"], t["queries_zh"]
    queries = qs_en + qs_zh
    rss0 = _rss_mb()
    res: dict[str, Any] = {"queries": len(queries)}

    # keyword side: the keyword-only index
    kw = EmbedderChoice(label="none", provider="none")
    with engine.open_index(ws, kw_sd, kw) as mem:
        en, _ = _timed_search(mem, qs_en, None, 6, 0.35)
        zh, _ = _timed_search(mem, qs_zh, None, 6, 0.35)
        res["keyword"] = {**_pcts(en + zh), "en": _pcts(en), "zh": _pcts(zh)}

    zero = ZeroCostEmbedder(dims=t.get("dims", 384))
    zc = EmbedderChoice(label="zero", embedder=zero)
    with engine.open_index(ws, vec_sd, zc, mode="vector") as mem:
        incl, excl = _timed_search(mem, queries, zero, 6, 0.35)
        res["vector"] = {"excluded": _pcts(excl), "included_zero": _pcts(incl)}
        # recall@10 of clawmem's vector side against exact search
        db = engine.store_path(mem, vec_sd)
        chunks = engine.read_chunks(db)
        key = {(c.path, c.start_line, c.end_line): i for i, c in enumerate(chunks)}
        mat = zero.vectors([c.text for c in chunks]).astype(np.float32)
        qv = zero.vectors(queries).astype(np.float32)
        exact = []
        for q in qv:
            s = mat @ q
            top = np.argpartition(-s, 10)[:10] if len(s) > 10 else np.arange(len(s))
            exact.append(set(top[np.argsort(-s[top])].tolist()))
        rec, unmatched = [], 0
        for q, ex in zip(queries, exact):
            got = []
            for h in mem.search(q, max_results=10, min_score=0.0, record=False):
                i = key.get((h.path, int(h.start_line), int(h.end_line)))
                if i is None:
                    unmatched += 1
                else:
                    got.append(i)
            rec.append(len(ex.intersection(got)) / max(1, len(ex)))
        res["vector"]["recall@10"] = float(np.mean(rec)) if rec else float("nan")
        res["vector"]["unmatched_results"] = unmatched
    with engine.open_index(ws, vec_sd, zc, mode="hybrid") as mem:
        incl, excl = _timed_search(mem, queries, zero, 6, 0.35)
        res["hybrid"] = {"excluded": _pcts(excl), "included_zero": _pcts(incl)}
    res["peak_rss_mb"] = _peak_mb()
    res["rss_before_mb"] = rss0

    # query embedding included: a real query model over the same (zero-cost) index
    qm_label, qm = None, None
    for spec in t.get("query_models", ["local", "hash-384"]):
        try:
            qm = resolve(spec).embedder
            qm = getattr(qm, "inner", qm)  # uncached: every query pays its embedding
            qm_label = spec
            if qm is not None:
                break
        except Exception as exc:
            res.setdefault("query_model_skipped", {})[spec] = str(exc)[:200]
    if qm is not None:
        qe = QueryModelEmbedder(qm, dims=t.get("dims", 384))
        qc = EmbedderChoice(label="zero", embedder=qe)
        res["query_model"] = qm_label
        for mode in ("vector", "hybrid"):
            with engine.open_index(ws, vec_sd, qc, mode=mode) as mem:
                incl, _ = _timed_search(mem, queries[: t.get("included_queries", 100)], qe, 6, 0.35)
                res[mode]["included"] = _pcts(incl)

    # exact baselines on the same vectors: sqlite-vec brute force (vec0) and a NumPy matrix in RAM
    res["exact"] = _exact_baselines(mat, qv, exact)
    res["n_vectors"] = int(mat.shape[0])
    return res


def _exact_baselines(mat, qv, exact) -> dict[str, Any]:
    import apsw
    import numpy as np
    import sqlite_vec

    out: dict[str, Any] = {}
    # NumPy
    xs, rec = [], []
    for q, ex in zip(qv, exact):
        t0 = time.perf_counter()
        s = mat @ q
        k = min(10, len(s))
        top = np.argpartition(-s, k - 1)[:k]
        top = top[np.argsort(-s[top])]
        xs.append(time.perf_counter() - t0)
        rec.append(len(ex.intersection(top.tolist())) / max(1, len(ex)))
    out["numpy"] = {**_pcts(xs), "recall@10": float(np.mean(rec))}
    # sqlite-vec vec0 brute force, in memory
    conn = apsw.Connection(":memory:")
    conn.enable_load_extension(True)
    conn.load_extension(sqlite_vec.loadable_path())
    dims = mat.shape[1]
    conn.execute(f"CREATE VIRTUAL TABLE v USING vec0(embedding float[{dims}] distance_metric=cosine)")
    t0 = time.perf_counter()
    with conn:
        conn.executemany("INSERT INTO v(rowid, embedding) VALUES (?, ?)",
                         ((i + 1, mat[i].tobytes()) for i in range(mat.shape[0])))
    out["sqlite_vec_build_s"] = time.perf_counter() - t0
    xs, rec = [], []
    for q, ex in zip(qv, exact):
        blob = q.astype(np.float32).tobytes()
        t0 = time.perf_counter()
        rows = conn.execute("SELECT rowid FROM v WHERE embedding MATCH ? AND k = 10", (blob,)).fetchall()
        xs.append(time.perf_counter() - t0)
        rec.append(len(ex.intersection(r[0] - 1 for r in rows)) / max(1, len(ex)))
    out["sqlite_vec"] = {**_pcts(xs), "recall@10": float(np.mean(rec))}
    conn.close()
    return out


TASKS = {"index": task_index, "search": task_search}


def main(argv: list[str]) -> int:
    task = json.loads(argv[0])
    t0 = time.perf_counter()
    try:
        res = TASKS[task["task"]](task)
        res["ok"] = True
    except Exception as exc:  # reported, not raised: one failing phase must not sink the run
        import traceback

        res = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}
    res["wall_seconds"] = time.perf_counter() - t0
    sys.stdout.write("RESULT " + json.dumps(res, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
