"""Query-side keyword techniques for paraphrased questions (Chinese first), keyword-only, on two disjoint halves.

Chinese questions that ask in other words than the memory used (网上 against 线上, 集市 against 展会) are where
keyword search still fails. This study measures query-side techniques that need no model, each through the
product's own ``MemoryIndex.search()`` (``provider="none"``, real indexes built by ``sync()``), against the
keyword terms as they are (``base``):

- ``prf``: pseudo-relevance feedback in its textbook form (RM3, Lavrenko & Croft 2001; Abdul-Jaleel et al. 2004):
  the keyword side's first ``PRF_DOCS`` chunks for the query are read, each term of theirs weighs
  ``sum over those chunks of (share of the chunk's terms) x (the chunk's share of the BM25 mass)``, times its IDF in
  the index (the tiny indexes here have no stop list for names and chat words), and the ``PRF_TERMS`` best terms
  that are not already in the query, not function words, not digits and not a single CJK character join the
  query's terms (FTS5 weighs each term by its own IDF: the expansion cannot be down-weighted there, so it is
  kept short);
- ``prf-mix``: the same expansion, interpolated as RM3 does: the chunks are ranked by ``(1 - PRF_MIX) x`` their
  BM25 for the query (normalised by the best) ``+ PRF_MIX x`` their BM25 for the expansion terms alone (idem);
  the original terms stay the query's terms for everything else (confidence, snippets);
- ``cooc``: co-occurrence expansion from the whole index rather than the top hits: for each content term of the
  query (a word, or a CJK character pair, that the index holds), the chunks holding it (up to ``COOC_CHUNKS``)
  are read, and the terms whose share of those chunks most exceeds their share of the index (lift, with at
  least ``COOC_SUPPORT`` chunks in common) are candidates; the ``PRF_TERMS`` best (by lift x the chunks in
  common) join the query;
- ``words``: CJK word-level terms beside the character pairs: each 3- and 4-character piece of a query's CJK run
  that the index holds (as a phrase of consecutive character pairs, which the index's character pairs
  spell; the index is the dictionary) joins the query as one more term, so that a chunk holding the whole word
  outranks one holding its pieces apart; English: each pair of adjacent query words the index holds as a phrase
  (``words-cjk``: the CJK pieces only);
- ``siblings``: for each term of the query the index does not hold (a CJK character pair, or an English word
  of five letters or more), the terms of the query's first keyword hits that keep one of its morphemes: a
  character pair sharing one character in the same place, not a function character (网上 -> 线上, 领养 -> 收养),
  or a word sharing its first five letters; a pair only where the index uses it as a word (it is in at least
  ``PRF_MIX`` of the rows of its rarer character; ``siblings:DOCS:TERMS:0`` drops that filter); at most two per
  absent term, ``PRF_TERMS`` in all, added to the keyword search only (the query's own terms still judge its
  confidence);
- ``siblings-words``: ``siblings`` for the absent character pairs that stand for a word only: a pair next to a
  pair the index holds most likely straddles two words (一幅|日出 gives 幅日; the index is the dictionary);
- ``no-chars`` (a control, not a candidate): the query's single CJK characters left out, to see how much of the
  paraphrases the character terms already catch (网上 and 线上 share 上).

A technique's settings can follow its name: ``prf-mix:DOCS:TERMS:MIX`` (``prf-mix:10:10:0.5`` is RM3 as Anserini
sets it by default: 10 feedback documents, 10 terms, the original query at weight 0.5).

Splits (as ``bench.studies.fusion_strength``): LoCoMo English by conversation (A: conv-26, conv-41, conv-43; B:
conv-30, conv-42), LoCoMo Chinese and the SciFact subset by question order (A even, B odd); ``scifact-b`` is a
second SciFact subset sharing no claim and no abstract with the first.

Also reported: the misses each technique fixes and breaks (hit@5 of the ranking, per question; a *paraphrase
miss* is a question keyword-only misses at 5 whose gold lines hold under half of the question's content terms),
the foreign questions answered at the default ``min_score`` (``bench.abstention``'s foreign sets), and the search
time per question, every technique timed on the same question one after the other (ratios to ``base``).

Usage::

    python -m bench.studies.zh_paraphrase --work DIR [--datasets locomo-en,locomo-zh,scifact,scifact-b]
        [--techniques base,prf,prf-mix,cooc,words] [--out FILE.json] [--markdown FILE.md]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from ..data import default_data_dir
from ..matrix import _git_commit, config, datasets, log, make_setup
from ..metrics import Span, hit_at, mean, ndcg_at, rank_documents
from .fusion_strength import half_of

TECHNIQUES = ("base", "prf", "prf-mix", "cooc", "words", "words-cjk", "siblings", "siblings-words", "no-chars")
#: Chunks read for the feedback, expansion terms added, weight of the expansion in ``prf-mix``.
PRF_DOCS = 5
PRF_TERMS = 5
PRF_MIX = 0.3
#: ``cooc``: chunks read per query term, and chunks a candidate must share with it.
COOC_CHUNKS = 50
COOC_SUPPORT = 2


def _content(term: str) -> bool:
    """A term worth adding: not a function word, not digits, not one CJK character."""
    from clawmem_core.text import STOPWORDS

    if term in STOPWORDS or term.isdigit() or len(term) < 2:
        return False
    return not (term.isascii() and len(term) < 3)


class Techniques:
    """The query terms of each technique for one store (``search_terms`` replaced while a technique runs)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.name = "base"
        self.docs, self.terms_n, self.mix = PRF_DOCS, PRF_TERMS, PRF_MIX
        self.query = ""
        self._texts: dict[str, list[str]] = {}
        self._rows: int | None = None

    # -- helpers -------------------------------------------------------------------------------
    def _kw(self, terms: list[str], limit: int) -> list[tuple[str, float]]:
        return type(self.store).keyword_search(self.store, terms, limit)

    def _chunk_terms(self, ids: list[str]) -> dict[str, list[str]]:
        from clawmem_core.text import index_terms

        need = [i for i in ids if i not in self._texts]
        if need:
            for cid, row in self.store.get_chunks(need).items():
                self._texts[cid] = index_terms(row.text)
        return {i: self._texts[i] for i in ids if i in self._texts}

    def _df(self, terms: list[str]) -> tuple[int, dict[str, int]]:
        got = self.store.term_hits(terms)
        if got is None:
            return 0, {}
        rows, hits = got
        return rows, dict(zip(terms, hits))

    def _idf(self, rows: int, n: int) -> float:
        return math.log((rows - n + 0.5) / (n + 0.5)) if rows > 0 else 0.0

    # -- techniques ----------------------------------------------------------------------------
    def prf_terms(self, terms: list[str]) -> list[str]:
        hits = self._kw(terms, self.docs)
        if not hits:
            return []
        mags = [max(0.0, -r) for _, r in hits]
        total = sum(mags) or 1.0
        texts = self._chunk_terms([i for i, _ in hits])
        weight: Counter[str] = Counter()
        for (cid, _), m in zip(hits, mags):
            words = [t for t in texts.get(cid, []) if _content(t)]
            if not words:
                continue
            for t, c in Counter(words).items():
                weight[t] += (c / len(words)) * (m / total)
        have = set(terms)
        cands = [t for t, _ in weight.most_common(60) if t not in have]
        if not cands:
            return []
        rows, df = self._df(cands)
        scored = sorted(cands, key=lambda t: -weight[t] * max(0.0, self._idf(rows, df.get(t, 0))))
        return [t for t in scored if df.get(t, 0) > 0][:self.terms_n]

    def cooc_terms(self, terms: list[str]) -> list[str]:
        rows, df = self._df(terms)
        seeds = [t for t in terms if _content(t) and df.get(t, 0) > 0]
        if not seeds or rows <= 0:
            return []
        score: Counter[str] = Counter()
        have = set(terms)
        cand_df: dict[str, int] = {}
        per_seed: list[tuple[int, Counter[str]]] = []
        for s in seeds:
            ids = [i for i, _ in self._kw([s], COOC_CHUNKS)]
            texts = self._chunk_terms(ids)
            together: Counter[str] = Counter()
            for cid in ids:
                together.update({t for t in texts.get(cid, []) if _content(t) and t not in have})
            per_seed.append((len(ids), together))
            cand_df.update(dict.fromkeys(together))
        cands = list(cand_df)
        if not cands:
            return []
        _, cdf = self._df(cands)
        for n_seed, together in per_seed:
            for t, c in together.items():
                if c < COOC_SUPPORT or not cdf.get(t):
                    continue
                lift = (c / n_seed) / (cdf[t] / rows)
                if lift > 1.0:
                    score[t] = max(score[t], lift * c)
        return [t for t, _ in score.most_common(self.terms_n)]

    def word_terms(self, query: str, terms: list[str], latin: bool = True) -> list[str]:
        from clawmem_core.text import _CJK_RUN_RE, _SPLIT_CJK_RE, _WORD_RE, STOPWORDS, _query_segments, fold_width

        phrases: list[str] = []
        for word in _WORD_RE.findall(fold_width(query).lower()):
            for part in _SPLIT_CJK_RE.split(word):
                if part and _CJK_RUN_RE.match(part):
                    for seg in _query_segments(part):
                        for n in (3, 4):
                            for i in range(len(seg) - n + 1):
                                piece = seg[i:i + n]
                                phrases.append(" ".join(piece[j:j + 2] for j in range(n - 1)))
        words = [w for w in _WORD_RE.findall(fold_width(query).lower()) if w.isascii()] if latin else []
        for a, b in zip(words, words[1:]):
            if a not in STOPWORDS and b not in STOPWORDS:
                phrases.append(f"{a} {b}")
        phrases = [p for p in dict.fromkeys(phrases) if p not in terms]
        if not phrases:
            return []
        _, df = self._df(phrases)
        return [p for p in phrases if df.get(p, 0) > 0]

    def terms(self, base: Callable[..., list[str]], query: str, stopwords: bool = True) -> list[str]:
        self.query = query
        terms = base(query, stopwords)
        kind = self.kind
        if kind == "prf":
            return terms + self.prf_terms(terms)
        if kind == "cooc":
            return terms + self.cooc_terms(terms)
        if kind in ("words", "words-cjk"):
            return terms + self.word_terms(query, terms, latin=kind == "words")
        if kind == "no-chars":
            kept = [t for t in terms if not (len(t) == 1 and not t.isascii())]
            return kept or terms
        return terms

    @property
    def kind(self) -> str:
        return self.name.split(":", 1)[0]

    def select(self, spec: str) -> None:
        """``name`` or ``name:docs:terms:mix`` (the feedback settings of ``prf``, ``prf-mix``, ``cooc``)."""
        self.name = spec
        parts = spec.split(":")
        self.docs, self.terms_n, self.mix = PRF_DOCS, PRF_TERMS, PRF_MIX
        if len(parts) == 4:
            self.docs, self.terms_n, self.mix = int(parts[1]), int(parts[2]), float(parts[3])

    def sibling_terms(self, terms: list[str]) -> list[str]:
        """Terms of the query's first ``docs`` keyword hits that keep one morpheme of a query term the index lacks:
        a CJK character pair sharing a character, in the same place, that is not a function character (网上 ->
        线上); a word sharing its first five letters or more (the index stems English already)."""
        from clawmem_core.text import STOPWORDS

        rows, df = self._df(terms)
        absent = [t for t in terms if df.get(t, 0) == 0 and (_pair(t) or (t.isascii() and t.isalpha() and len(t) >= 5))]
        if self.kind == "siblings-words":
            absent = [t for t in absent if not _pair(t) or t in self._lone_pairs(df)]
        if not absent:
            return []
        hits = self._kw(terms, max(self.docs, 10))
        texts = self._chunk_terms([i for i, _ in hits])
        seen: Counter[str] = Counter()
        for cid, _ in hits:
            seen.update(set(texts.get(cid, [])))
        have = set(terms)
        out: list[str] = []
        for t in absent:
            if _pair(t):
                sib = [c for c in seen if _pair(c) and c not in have
                       and ((c[0] == t[0] and c[1] != t[1] and t[0] not in STOPWORDS)
                            or (c[1] == t[1] and c[0] != t[0] and t[1] not in STOPWORDS))]
            else:
                sib = [c for c in seen if c.isascii() and c not in have and len(c) >= 5 and c[:5] == t[:5]]
            if sib and _pair(t) and self.mix > 0:
                # keep the pairs the index uses as words: most rows holding its rarer character hold the pair
                _, cdf = self._df(sib + [ch for c in sib for ch in c])
                sib = [c for c in sib if cdf.get(c, 0) >= self.mix * min(cdf.get(c[0], 0), cdf.get(c[1], 0))
                       and cdf.get(c, 0) > 0]
            out += sorted(sib, key=lambda c: -seen[c])[:2]
        return list(dict.fromkeys(out))[: self.terms_n]

    def _lone_pairs(self, df: dict[str, int]) -> set[str]:
        """The query's CJK character pairs whose neighbouring pairs in the question the index lacks too: with the
        index as the dictionary, a pair next to a pair the index holds most likely straddles two words (一幅|日出
        gives 幅日), one between pairs it lacks is a word of its own the memory does not use (去一次海滩: 海滩)."""
        from clawmem_core.text import _CJK_RUN_RE, _SPLIT_CJK_RE, _WORD_RE, _query_segments, fold_width

        out: set[str] = set()
        for word in _WORD_RE.findall(fold_width(self.query).lower()):
            for part in _SPLIT_CJK_RE.split(word):
                if not (part and _CJK_RUN_RE.match(part)):
                    continue
                for seg in _query_segments(part):
                    pairs = [seg[i:i + 2] for i in range(len(seg) - 1)]
                    missing = self._df([p for p in pairs if p not in df])[1]
                    held = {p: (df.get(p) if p in df else missing.get(p, 0)) > 0 for p in pairs}
                    for i, p in enumerate(pairs):
                        if not held[p] and not (i > 0 and held[pairs[i - 1]]) and not (
                                i + 1 < len(pairs) and held[pairs[i + 1]]):
                            out.add(p)
        return out

    def keyword_search(self, terms: list[str], limit: int) -> list[tuple[str, float]]:
        """``prf-mix``: RM3's interpolation of the query's ranking with the expansion's; ``siblings``: the
        keyword search with the siblings of the query's absent terms (the query's own terms stay its terms for
        the confidence and the snippets)."""
        if self.kind in ("siblings", "siblings-words"):
            extra = self.sibling_terms(terms)
            return self._kw(terms + extra, limit)
        first = self._kw(terms, limit)
        if self.kind != "prf-mix" or not first:
            return first
        extra = self.prf_terms(terms)
        if not extra:
            return first
        second = self._kw(extra, limit)
        best1 = max((-r for _, r in first), default=0.0) or 1.0
        best2 = max((-r for _, r in second), default=0.0) or 1.0
        mixed: dict[str, float] = {}
        for cid, r in first:
            mixed[cid] = (1 - self.mix) * (-r / best1)
        for cid, r in second:
            mixed[cid] = mixed.get(cid, 0.0) + self.mix * (-r / best2)
        order = sorted(mixed.items(), key=lambda kv: -kv[1])[:limit]
        return [(cid, -v * best1) for cid, v in order]


def _pair(term: str) -> bool:
    from clawmem_core.search import _CJK_PAIR

    return bool(_CJK_PAIR.match(term))


def _install(tech: Techniques) -> Callable[[], None]:
    import clawmem_core.search as search_mod

    base = search_mod.search_terms
    search_mod.search_terms = lambda q, stopwords=True: tech.terms(base, q, stopwords)  # type: ignore[assignment]
    tech.store.keyword_search = tech.keyword_search

    def undo() -> None:
        search_mod.search_terms = base
        del tech.store.keyword_search

    return undo


def _content_terms(text: str) -> set[str]:
    from clawmem_core.text import search_terms

    return {t for t in search_terms(text) if _content(t)}


def run(ds: Any, work: Path, names: list[str], foreign: Callable[[Path], list[str]] | None,
        embedder: str = "none") -> dict[str, Any]:
    """Every question of ``ds`` searched with each technique in turn; per-question rows and foreign answers.
    ``embedder``: one of ``bench.matrix``'s setups (``none``: keyword-only)."""
    from clawmem_core import MemoryIndex

    from ..vector_cache import VectorCache

    cache = None if embedder == "none" else VectorCache(work / "vectors.sqlite")
    setup = make_setup(embedder, None, cache)
    k = 200 if ds.kind == "beir" else 10
    rows: list[dict[str, Any]] = []
    foreign_rows: list[dict[str, Any]] = []
    index = {q.qid: i for i, q in enumerate(ds.queries)}
    for ws in ds.workspaces:
        state = work / ds.name / ws.name if embedder == "none" else work / embedder / ds.name / ws.name
        state.mkdir(parents=True, exist_ok=True)
        with MemoryIndex(str(ws), agent_id="main", config=config(setup, "calibrated", {}), embedder=setup.embedder,
                         state_dir=str(state)) as mem:
            mem.sync()
            setup.warm_queries([q.text for q in ds.queries if q.workspace == ws] + (foreign(ws) if foreign else []))
            tech = Techniques(mem._store)
            undo = _install(tech)
            try:
                for q in (q for q in ds.queries if q.workspace == ws):
                    gold_text = ""
                    if ds.kind == "locomo":
                        by_path: dict[str, list[str]] = {}
                        for path, line in q.gold_lines:
                            lines = by_path.setdefault(path, (ws / path).read_text(encoding="utf-8").splitlines())
                            gold_text += " " + (lines[line - 1] if 0 < line <= len(lines) else "")
                    row: dict[str, Any] = {"qid": q.qid, "half": half_of(ds.name, index[q.qid], ws.name),
                                           "text": q.text}
                    if gold_text:
                        want = _content_terms(q.text)
                        row["gold_share"] = (len(want & _content_terms(gold_text)) / len(want)) if want else 1.0
                    for name in names:
                        tech.select(name)
                        t0 = time.perf_counter()
                        ranking = mem.search(q.text, max_results=k, min_score=0.0, record=False)
                        t1 = time.perf_counter()
                        default = mem.search(q.text, record=False)
                        got = [Span(h.path, int(h.start_line), int(h.end_line)) for h in ranking]
                        dflt = [Span(h.path, int(h.start_line), int(h.end_line)) for h in default]
                        if ds.kind == "beir":
                            docs, ddocs = rank_documents(got), rank_documents(dflt)
                            cell = {"hit@1": float(bool(docs[:1]) and docs[0] in q.relevant_paths),
                                    "hit@5": float(bool(q.relevant_paths.intersection(docs[:5]))),
                                    "ndcg@10": ndcg_at(docs, q.relevant_paths, 10),
                                    "hit@5 default": float(bool(q.relevant_paths.intersection(ddocs[:5])))}
                        else:
                            cell = {"hit@1": hit_at(got, q.gold_lines, 1), "hit@5": hit_at(got, q.gold_lines, 5),
                                    "hit@5 default": hit_at(dflt, q.gold_lines, 5)}
                        cell["ms"] = (t1 - t0) * 1000
                        cell["answered"] = float(bool(dflt))
                        row[name] = cell
                    rows.append(row)
                for text in (foreign(ws) if foreign else []):
                    frow: dict[str, Any] = {"text": text, "workspace": ws.name}
                    for name in names:
                        tech.select(name)
                        frow[name] = float(bool(mem.search(text, record=False)))
                    foreign_rows.append(frow)
            finally:
                undo()
                tech.select("base")
    return {"dataset": ds.name, "kind": ds.kind, "rows": rows, "foreign": foreign_rows, "embedder": embedder}


def _cell(rows: list[dict[str, Any]], name: str, key: str) -> float:
    return mean([r[name][key] for r in rows])


def summary(res: dict[str, Any]) -> list[str]:
    """One row per technique over every data set (all questions)."""
    sets = res["datasets"]
    head = ["technique"] + [d["dataset"] for d in sets] + ["foreign answered"] + \
        [f"{d['dataset']} paraphrase fixed / broken" for d in sets if d["kind"] == "locomo"] + ["time x base"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for n in res["techniques"]:
        cells = [f"`{n}`"]
        for d in sets:
            rows = d["rows"]
            if d["kind"] == "beir":
                cells.append(f"{_cell(rows, n, 'ndcg@10'):.3f}")
            else:
                cells.append(f"{_cell(rows, n, 'hit@1'):.3f} / {_cell(rows, n, 'hit@5'):.3f}")
        cells.append(" / ".join(f"{mean([r[n] for r in d['foreign']]):.3f}" for d in sets if d["foreign"]) or "-")
        for d in sets:
            if d["kind"] != "locomo":
                continue
            rows = d["rows"]
            para = [r for r in rows if not r["base"]["hit@5"] and r.get("gold_share", 1.0) < 0.5]
            fixed = sum(1 for r in para if r[n]["hit@5"])
            broken = sum(1 for r in rows if r[n]["hit@5"] < r["base"]["hit@5"])
            cells.append(f"{fixed} of {len(para)} / {broken}")
        ratios = []
        for d in sets:
            base = mean([r["base"]["ms"] for r in d["rows"]]) or 1.0
            ratios.append(f"{mean([r[n]['ms'] for r in d['rows']]) / base:.2f}")
        cells.append(" / ".join(ratios))
        out.append("| " + " | ".join(cells) + " |")
    return out


def markdown(res: dict[str, Any]) -> str:
    names = res["techniques"]
    env = res["env"]
    out = [
        f"Commit `{env['commit']}` · {env['when']} · load average {env['load_start']} at start, {env['load_end']} at "
        f"end · {env['cpus']} CPUs. Embedder: `{res.get('embedder', 'none')}` (`none`: keyword-only). Every figure "
        "from `MemoryIndex.search()` at the defaults (calibrated fusion).",
        "",
        f"Settings: PRF_DOCS={PRF_DOCS}, PRF_TERMS={PRF_TERMS}, PRF_MIX={PRF_MIX}, COOC_CHUNKS={COOC_CHUNKS}, "
        f"COOC_SUPPORT={COOC_SUPPORT}.",
        "",
        "### In short (all questions): the ranking's hit@1 / hit@5 (SciFact: nDCG@10), foreign questions answered at "
        "the defaults, paraphrase misses fixed at 5 / questions whose hit@5 it breaks, search time against `base`",
        "",
        *summary(res),
        "",
        "### Ranking (min_score 0): hit@1 / hit@5 (SciFact: nDCG@10 / hit@5), per half; difference to `base` in brackets",
        "",
        "| data set | half | n | " + " | ".join(names) + " |",
        "|---|---|---|" + "---|" * len(names),
    ]
    for d in res["datasets"]:
        beir = d["kind"] == "beir"
        halves = sorted({r["half"] for r in d["rows"]}) + ["all"]
        for h in halves:
            rows = [r for r in d["rows"] if h == "all" or r["half"] == h]
            keys = ("ndcg@10", "hit@5") if beir else ("hit@1", "hit@5")
            base = [_cell(rows, "base", key) for key in keys]
            cells = []
            for n in names:
                v = [_cell(rows, n, key) for key in keys]
                if n == "base":
                    cells.append(" / ".join(f"{x:.3f}" for x in v))
                else:
                    cells.append(" / ".join(f"{x:.3f} ({x - b:+.3f})" for x, b in zip(v, base)))
            out.append(f"| {d['dataset']} | {h} | {len(rows)} | " + " | ".join(cells) + " |")
    out += ["", "### At the defaults (`search(q)`): hit@5, questions answered, foreign questions answered", "",
            "| data set | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for d in res["datasets"]:
        rows, fr = d["rows"], d["foreign"]
        cells = []
        for n in names:
            f = f", foreign {mean([r[n] for r in fr]):.3f} of {len(fr)}" if fr else ""
            cells.append(f"{_cell(rows, n, 'hit@5 default'):.3f}, answered {_cell(rows, n, 'answered'):.3f}{f}")
        out.append(f"| {d['dataset']} | " + " | ".join(cells) + " |")
    out += ["", "### Misses fixed and broken (hit@5 of the ranking, against `base`); paraphrase misses", "",
            "A *paraphrase miss*: `base` misses it at 5 and the gold lines hold under half of the question's content "
            "terms (words, CJK character pairs).", "",
            "| data set | technique | fixed | broken | paraphrase misses fixed (of base's) |", "|---|---|---|---|---|"]
    for d in res["datasets"]:
        if d["kind"] == "beir":
            continue
        rows = d["rows"]
        para = [r for r in rows if not r["base"]["hit@5"] and r.get("gold_share", 1.0) < 0.5]
        for n in names[1:]:
            fixed = sum(1 for r in rows if r[n]["hit@5"] > r["base"]["hit@5"])
            broken = sum(1 for r in rows if r[n]["hit@5"] < r["base"]["hit@5"])
            pf = sum(1 for r in para if r[n]["hit@5"])
            out.append(f"| {d['dataset']} | {n} | {fixed} | {broken} | {pf} of {len(para)} |")
    out += ["", "### Search time per question (ranking call, ms, median and mean; ratio of means to `base`)", "",
            "| data set | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for d in res["datasets"]:
        rows = d["rows"]
        base = mean([r["base"]["ms"] for r in rows]) or 1.0
        cells = []
        for n in names:
            ms = sorted(r[n]["ms"] for r in rows)
            cells.append(f"{ms[len(ms) // 2]:.1f} / {mean(ms):.1f} (x{mean(ms) / base:.2f})")
        out.append(f"| {d['dataset']} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--data", type=Path, default=None)
    ap.add_argument("--datasets", default="locomo-en,locomo-zh,scifact,scifact-b")
    ap.add_argument("--techniques", default=",".join(TECHNIQUES))
    ap.add_argument("--no-foreign", action="store_true")
    ap.add_argument("--embedder", default="none", help="a bench.matrix setup (default none: keyword-only)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--markdown", type=Path, default=None)
    ap.add_argument("--markdown-only", action="store_true", help="rewrite --markdown from --out")
    a = ap.parse_args(argv)
    if a.markdown_only:
        res = json.loads(a.out.read_text(encoding="utf-8"))
        a.markdown.write_text(markdown(res), encoding="utf-8")
        return 0
    data = a.data or default_data_dir()
    names = ["base"] + [n for n in a.techniques.split(",") if n and n != "base"]
    unknown = [n for n in names if n.split(":", 1)[0] not in TECHNIQUES]
    if unknown:
        raise SystemExit(f"unknown technique {unknown[0]!r} ({', '.join(TECHNIQUES)})")
    env = {"commit": _git_commit(), "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "load_start": round(os.getloadavg()[0], 2), "cpus": os.cpu_count()}
    sets = datasets(data, a.work, a.datasets.split(","))
    foreign_of: dict[str, Any] = {}
    if not a.no_foreign:
        from ..abstention import foreign_sets

        sci = next((d for d in sets if d.name == "scifact"), None)
        if sci is None:
            sci = datasets(data, a.work, ["scifact"])[0]
        foreign_of = foreign_sets(data, [q.text for q in sci.queries])
    out = []
    for ds in sets:
        log(f"{ds.name}: {len(ds.queries)} questions x {len(names)} techniques")
        out.append(run(ds, a.work, names, foreign_of.get("scifact" if ds.name == "scifact-b" else ds.name), a.embedder))
    env["load_end"] = round(os.getloadavg()[0], 2)
    res = {"env": env, "techniques": names, "datasets": out, "embedder": a.embedder}
    if a.out:
        a.out.write_text(json.dumps(res, ensure_ascii=False), encoding="utf-8")
    md = markdown(res)
    if a.markdown:
        a.markdown.write_text(md, encoding="utf-8")
    sys.stdout.write(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
