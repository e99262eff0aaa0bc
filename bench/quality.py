"""Retrieval quality: LoCoMo (EN, ZH) hit@k / recall@k by category, SciFact nDCG@10 / recall@100, for
keyword-only, vector-only and hybrid search, with and without MMR, against a rank-bm25 baseline over the same
chunks."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

from . import engine
from .baseline import TOKENIZATION, BM25Baseline
from .data import Dataset, Query
from .embedders import EmbedderChoice
from .metrics import Span, doc_recall_at, hit_at, mean, ndcg_at, rank_documents, recall_at

LOCOMO_K = (1, 5, 10)
BEIR_CHUNKS = 200  # chunks asked for, so that 100 distinct documents can be ranked


def _score_locomo(results: dict[str, list[Span]], queries: list[Query]) -> dict[str, Any]:
    per_cat: dict[str, list[dict[str, float]]] = defaultdict(list)
    per_ws: dict[str, list[dict[str, float]]] = defaultdict(list)
    for q in queries:
        spans = results.get(q.qid, [])
        row = {f"hit@{k}": hit_at(spans, q.gold_lines, k) for k in LOCOMO_K}
        row.update({f"recall@{k}": recall_at(spans, q.gold_lines, k) for k in (5, 10)})
        per_cat[q.category].append(row)
        per_cat["all"].append(row)
        per_ws[q.workspace.name].append(row)

    def agg(rows: list[dict[str, float]]) -> dict[str, float]:
        return {"n": len(rows), **{m: mean(r[m] for r in rows) for m in rows[0]}} if rows else {"n": 0}

    return {"overall": agg(per_cat.pop("all", [])), "by_category": {c: agg(r) for c, r in sorted(per_cat.items())},
            "by_workspace": {w: agg(r) for w, r in sorted(per_ws.items())}}


def _score_beir(results: dict[str, list[Span]], queries: list[Query]) -> dict[str, Any]:
    nd, rc = [], []
    for q in queries:
        docs = rank_documents(results.get(q.qid, []))
        nd.append(ndcg_at(docs, q.relevant_paths, 10))
        rc.append(doc_recall_at(docs, q.relevant_paths, 100))
    return {"overall": {"n": len(queries), "ndcg@10": mean(nd), "recall@100": mean(rc)}, "by_category": {}}


def _state_dir(cache: Path, ds: Dataset, ws: Path, label: str) -> Path:
    return cache / "quality" / ds.name / ws.name / label


#: ``query.hybrid`` settings of the "hybrid-norm" rows (see ``HybridConfig.text_score``).
HYBRID_NORM = {
    "query.hybrid.text_score": "normalize",
    "query.hybrid.vector_weight": 0.5,
    "query.hybrid.text_weight": 0.5,
}


def run_dataset(ds: Dataset, choices: list[EmbedderChoice], cache: Path, log: Callable[[str], None],
                mmr: bool = True) -> dict[str, Any]:
    k = BEIR_CHUNKS if ds.kind == "beir" else max(LOCOMO_K)
    by_ws: dict[Path, list[Query]] = defaultdict(list)
    for q in ds.queries:
        by_ws[q.workspace].append(q)
    systems: dict[str, dict[str, list[Span]]] = defaultdict(dict)
    timing: dict[str, list[float]] = defaultdict(list)
    index_seconds: dict[str, float] = defaultdict(float)
    chunks_total = 0
    chunk_lines = 0
    variants = [False, True] if mmr else [False]

    for ws, queries in sorted(by_ws.items()):
        # 1. keyword-only index; its chunks feed the baseline
        kw = next(c for c in choices if c.keyword_only)
        sd = _state_dir(cache, ds, ws, "none")
        t0 = time.perf_counter()
        with engine.open_index(ws, sd, kw) as mem:
            mem.sync()
            db = engine.store_path(mem, sd)
        index_seconds["none"] += time.perf_counter() - t0
        chunks = engine.read_chunks(db) if db else []
        chunks_total += len(chunks)
        chunk_lines += sum(c.end_line - c.start_line + 1 for c in chunks)
        for use_mmr in variants:
            name = "keyword" + ("+mmr" if use_mmr else "")
            with engine.open_index(ws, sd, kw, mmr=use_mmr) as m2:
                for q in queries:
                    t = time.perf_counter()
                    systems[name][q.qid] = engine.search_spans(m2, q.text, k)
                    timing[name].append(time.perf_counter() - t)
        bm = BM25Baseline(chunks)
        for q in queries:
            t = time.perf_counter()
            systems["rank-bm25"][q.qid] = bm.search(q.text, k)
            timing["rank-bm25"].append(time.perf_counter() - t)

        # 2. each embedder: vector-only and hybrid, with and without MMR, on one index
        for ch in choices:
            if ch.keyword_only:
                continue
            sd = _state_dir(cache, ds, ws, ch.label)
            t0 = time.perf_counter()
            with engine.open_index(ws, sd, ch) as mem:
                mem.sync(progress=None)
            index_seconds[ch.label] += time.perf_counter() - t0
            # embed each question once (timed apart); the four modes then reuse the vectors
            emb = ch.embedder
            before = getattr(emb, "query_seconds", 0.0)
            for q in queries:
                emb.embed_query(q.text.replace("\x00", " ").strip())
            timing[f"query-embedding[{ch.label}]"].append((getattr(emb, "query_seconds", 0.0) - before) / max(1, len(queries)))
            for mode in ("vector", "hybrid"):
                for use_mmr in variants:
                    name = f"{mode}[{ch.label}]" + ("+mmr" if use_mmr else "")
                    with engine.open_index(ws, sd, ch, mode=mode, mmr=use_mmr) as m2:
                        for q in queries:
                            t = time.perf_counter()
                            systems[name][q.qid] = engine.search_spans(m2, q.text, k)
                            timing[name].append(time.perf_counter() - t)
            # the alternative fusion: BM25 normalised by the query's best hit, weights 0.5 / 0.5
            name = f"hybrid-norm[{ch.label}]"
            with engine.open_index(ws, sd, ch, **HYBRID_NORM) as m2:
                for q in queries:
                    t = time.perf_counter()
                    systems[name][q.qid] = engine.search_spans(m2, q.text, k)
                    timing[name].append(time.perf_counter() - t)
        log(f"  {ds.name}/{ws.name}: {len(queries)} queries, {len(chunks)} chunks")

    score = _score_beir if ds.kind == "beir" else _score_locomo
    out_systems = {}
    query_embedding_ms = {n[len("query-embedding["):-1]: 1000 * mean(v) for n, v in timing.items()
                          if n.startswith("query-embedding[")}
    for name, res in systems.items():
        s = score(res, ds.queries)
        s["search_ms_mean"] = 1000 * mean(timing[name])
        out_systems[name] = s
    return {
        "kind": ds.kind,
        "language": ds.language,
        "queries": len(ds.queries),
        "skipped": ds.skipped,
        "chunks": chunks_total,
        "lines_per_chunk": chunk_lines / chunks_total if chunks_total else None,
        "index_seconds": dict(index_seconds),
        "query_embedding_ms": query_embedding_ms,
        "systems": out_systems,
    }


def run(datasets: list[Dataset], choices: list[EmbedderChoice], cache: Path, log: Callable[[str], None],
        beir_embedders: bool = True, mmr: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {"tokenization": TOKENIZATION, "datasets": {}}
    for ds in datasets:
        use = [c for c in choices if c.keyword_only or beir_embedders or ds.kind != "beir"]
        log(f"quality: {ds.name} ({len(ds.queries)} queries; embedders: {', '.join(c.label for c in use)})")
        t0 = time.perf_counter()
        out["datasets"][ds.name] = run_dataset(ds, use, cache, log, mmr=mmr)
        out["datasets"][ds.name]["seconds"] = time.perf_counter() - t0
    for c in choices:
        if hasattr(c.embedder, "release"):
            c.embedder.release()
    return out
