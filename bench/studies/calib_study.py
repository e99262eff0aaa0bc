"""Per-query candidates for ``bench.studies.calibrated``: keyword hits (FTS5 ranks and the query terms' document
frequencies) from the keyword-only index, the best-window cosine of every chunk from the model's index, and the
query's cosines to the calibration passages, for the real questions and the foreign ones, pickled.

``python -m bench.studies.calib_study CACHE LABEL[,LABEL] OUT.pkl [WORKSPACE,...]`` (LoCoMo EN and ZH; vectors from ``bench.studies.fusion``'s
cache ``CACHE``); :func:`main_scifact` does the same on a SciFact subset (``bench.scifact_subset``)."""

from __future__ import annotations

import math
import os
import pickle
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from clawmem_core.calibration import BACKGROUND_TEXTS, blind_scripts

from . import fusion as F
from ..data import default_data_dir, load_locomo, load_scifact
from ..metrics import Span, covered_gold


@dataclass
class Q:
    """Candidates keyed by chunk (path, start, end)."""

    keys: list[tuple[str, int, int]]
    bm25: np.ndarray  # |rank| or 0
    kw_pos: np.ndarray
    cos: np.ndarray  # best window cosine, nan when not a vector candidate
    vec_pos: np.ndarray
    idf_mass: float  # sum idf of query terms (absent terms at the n=0 idf)
    idf_present: float
    bg: np.ndarray  # cos of query to the background passages
    gold: list | None
    ncos_all: np.ndarray | None = None
    terms: list | None = None
    n_docs: int = 0
    matched: list | None = None  # per candidate: the query terms its chunk holds (keyword candidates)
    text: str = ""  # the query
    blind: frozenset | None = None  # scripts the embedder cannot tell apart (calibration.blind_scripts)


def term_stats(view_mem, q: str):
    from clawmem_core.index import MAX_QUERY_TERM_CHARS, MAX_QUERY_TERMS
    from clawmem_core.store.sqlite import quote_fts
    from clawmem_core.text import search_terms

    store = view_mem._store
    n_docs = store.conn.execute("SELECT count(*) FROM chunks").fetchall()[0][0]
    terms = search_terms(q[:MAX_QUERY_TERM_CHARS])[:MAX_QUERY_TERMS]
    mass = present = 0.0
    stats = []
    for t in terms:
        n = store.conn.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?", (quote_fts(t),)).fetchall()[0][0]
        idf = max(1e-6, math.log((n_docs - n + 0.5) / (n + 0.5)))
        mass += idf
        stats.append((t, n))
        if n:
            present += idf
    return mass, present, stats, n_docs


def matched_terms(store, terms: list[str], text: str) -> frozenset:
    """The query terms ``text`` holds, by the FTS5 tokenizer's own tokens (stemmed)."""
    import apsw

    from clawmem_core.store.sqlite import FTS_TOKENIZERS
    from clawmem_core.text import index_document

    name, *args = [a.strip("'") for a in FTS_TOKENIZERS[store.fts_tokenizer].split()]
    tok = store.conn.fts5_tokenizer(name, args)
    doc = {t for toks in tok(index_document(text).encode("utf-8"), apsw.FTS5_TOKENIZE_DOCUMENT, None, include_offsets=False) for t in toks}
    out = set()
    for term in terms:
        got = tok(term.encode("utf-8"), apsw.FTS5_TOKENIZE_QUERY, None, include_offsets=False)
        if got and all(any(t in doc for t in toks) for toks in got):
            out.add(term)
    return frozenset(out)


def build(label: str, ws: Path, state: Path, mdl: F.Models, real: list, foreign: list[str]):
    """Per query Q objects (real then foreign)."""
    mem0, kview = F.open_view(ws, state / "none")
    mem1, vview = F.open_view(ws, state / label, F._proxy_embedder(label, mdl.input_limit(label)))
    try:
        dvecs = mdl.vectors(label, "doc", vview.texts)
        texts = [q.text for q in real]
        qv = mdl.vectors(label, "query", texts) if texts else np.zeros((0, dvecs.shape[1]))
        fv = mdl.vectors(label, "query", foreign) if foreign else np.zeros((0, dvecs.shape[1]))
        bgv = mdl.vectors(label, "doc", list(BACKGROUND_TEXTS))
        blind = blind_scripts([list(map(float, v)) for v in bgv])
        vkeys = [(p, s, e) for p, s, e in zip(vview.paths, vview.starts, vview.ends)]
        out = []
        for qtext, qvec, gold in [(q.text, qv[i], q.gold_lines or ("beir", frozenset(q.relevant_paths))) for i, q in enumerate(real)] + [(t, fv[i], None) for i, t in enumerate(foreign)]:
            kw = kview.keyword(qtext)
            keys: dict[tuple, int] = {}
            for r, _ in kw:
                keys.setdefault((kview.paths[r], kview.starts[r], kview.ends[r]), len(keys))
            cos_all = dvecs @ qvec
            best: dict[tuple, float] = {}
            for i, k in enumerate(vkeys):
                c = float(cos_all[i])
                if c > best.get(k, -9):
                    best[k] = c
            vorder = sorted(best, key=lambda k: -best[k])[: F.POOL]
            for k in vorder:
                keys.setdefault(k, len(keys))
            n = len(keys)
            bm = np.zeros(n); kp = np.zeros(n, dtype=int); cs = np.full(n, np.nan); vp = np.zeros(n, dtype=int)
            for i, (r, rank) in enumerate(kw):
                j = keys[(kview.paths[r], kview.starts[r], kview.ends[r])]
                if kp[j] == 0:
                    bm[j] = abs(rank); kp[j] = i + 1
            for i, k in enumerate(vorder):
                cs[keys[k]] = best[k]; vp[keys[k]] = i + 1
            mass, present, stats, nd = term_stats(mem0, qtext)
            matched: list = [frozenset()] * n
            for r, _ in kw:
                j = keys[(kview.paths[r], kview.starts[r], kview.ends[r])]
                if not matched[j]:
                    matched[j] = matched_terms(mem0._store, [t for t, _ in stats], kview.texts[r])
            out.append(Q(list(keys), bm, kp, cs, vp, mass, present, bgv @ qvec, gold, None, stats, nd, matched, qtext,
                         blind))
        return out
    finally:
        mem0.close(); mem1.close()


def main():
    data = default_data_dir()
    cache = Path(sys.argv[1])
    labels = sys.argv[2].split(",")
    out = Path(sys.argv[3])
    mdl = F.Models(cache)
    only = {w for w in (sys.argv[4] if len(sys.argv) > 4 else "").split(",") if w}  # workspaces to run (all when empty)
    en = load_locomo(data / "locomo", "locomo-en", "en")
    zh = load_locomo(data / "locomo-zh", "locomo-zh", "zh")
    sci = load_scifact(data / "scifact", limit=100)
    sci_q = [q.text for q in sci.queries] + F.OFF_TOPIC
    res = {}
    for label in labels:
        for ds in (en, zh):
            by_ws: dict[Path, list] = {}
            for q in ds.queries:
                by_ws.setdefault(q.workspace, []).append(q)
            for ws, qs in sorted(by_ws.items()):
                if only and ws.name not in only:
                    continue
                if ds is en:
                    foreign = sci_q + ([q.text for q in zh.queries] if ws.name != "conv-26" else [])
                else:
                    foreign = sci_q + [q.text for q in en.queries if q.workspace.name in ("conv-30", "conv-41")]
                state = cache / "state" / ds.name / ws.name
                res[(label, ds.name, ws.name)] = build(label, ws, state, mdl, qs, foreign)
                F.log(f"{label} {ds.name} {ws.name} done")
    out.write_bytes(pickle.dumps(res))


def main_scifact():
    """python -c: SciFact subset (bench.scifact_subset) with LoCoMo questions as foreign queries."""
    data = default_data_dir()
    cache = Path(sys.argv[1]); labels = sys.argv[2].split(","); out = Path(sys.argv[3]); sub = Path(sys.argv[4])
    mdl = F.Models(cache)
    en = load_locomo(data / "locomo", "locomo-en", "en")
    zh = load_locomo(data / "locomo-zh", "locomo-zh", "zh")
    sci = load_scifact(sub)
    foreign = [q.text for q in en.queries[::8]] + [q.text for q in zh.queries[::3]]
    res = {}
    for label in labels:
        # One state directory per subset: its indexes are per workspace (two subsets must not share one).
        res[(label, "scifact", "sub")] = build(label, sci.workspaces[0], cache / "state" / f"scifact-{sub.name}", mdl, sci.queries, foreign)
        F.log(f"{label} scifact done")
    out.write_bytes(pickle.dumps(res))


if __name__ == "__main__":
    main()
