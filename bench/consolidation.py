"""Consolidation ("dreaming") measured on LoCoMo: questions replayed as recall traffic over simulated weeks,
append-only promotion into ``MEMORY.md`` at the end of each week, then

* **grounding**: how many promoted entries cite source lines holding a gold evidence line of some question;
* **later questions**: hit@1 / hit@5 before and after promotion of the questions asked *after* the traffic, those
  about the same facts (they share a gold line with a traffic question) and, as a control, the others;
* **promotion time** at 10k and 100k recall events (synthetic events on the real lines of one
  conversation, as 1- to 4-line snippet ranges);
* **search latency** with and without the recall log (inline and background writer), interleaved query by query.

Split, per conversation: its questions (category 5 and questions without gold skipped, as in the quality runs) in
``qid`` order; the first half is the *traffic* (each asked ``--repeats`` times on distinct random days of
``--weeks`` simulated weeks, through ``MemoryIndex.search`` with the defaults an agent gets, every hit recorded);
the second half is *scored*: "same facts" when it shares a gold ``(path, line)`` with a traffic question, "other
facts" otherwise. A ``MEMORY.md`` result covers a gold line when an entry within its lines cites a range holding
that line *and* the entry's text holds the line's text (a clipped entry that lost it does not count).

The data is copied to a temporary directory (it is never written in place). Clocks are injected (the recall log's
``when``, promotion's ``now``): a run takes minutes, not weeks.

``python -m bench.consolidation`` (quick: keyword-only); ``--embedder hash`` or any spec of ``bench.embedders``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from . import engine
from .data import Dataset, Query, default_data_dir, load_all
from .embedders import EmbedderChoice, resolve
from .metrics import Span, hit_at, percentile

DAY = 86400.0
#: Simulated "now" of the first traffic day: 2026-11-02 00:00 UTC (a Monday).
T0 = 1793577600.0
AGENT = "main"
RESULTS = Path(__file__).resolve().parent / "results"


# ---------------------------------------------------------------- split


@dataclass
class Split:
    traffic: list[Query]
    same: list[Query]
    other: list[Query]


def split_questions(queries: Sequence[Query]) -> Split:
    """First half (``qid`` order) is traffic; the second half is scored, "same facts" when it shares a gold line
    with a traffic question."""
    ordered = sorted(queries, key=lambda q: q.qid)
    half = (len(ordered) + 1) // 2
    traffic, later = ordered[:half], ordered[half:]
    seen = {g for q in traffic for g in q.gold_lines}
    same = [q for q in later if any(g in seen for g in q.gold_lines)]
    other = [q for q in later if not any(g in seen for g in q.gold_lines)]
    return Split(traffic, same, other)


def schedule(traffic: Sequence[Query], weeks: int, repeats: int, seed: int) -> list[tuple[float, Query]]:
    """Each traffic question asked ``repeats`` times on distinct random days; times in order, spread within
    each day."""
    rng = random.Random(seed)
    days = max(1, weeks * 7)
    by_day: dict[int, list[Query]] = defaultdict(list)
    for q in traffic:
        for d in rng.sample(range(days), min(repeats, days)):
            by_day[d].append(q)
    out = []
    for d in sorted(by_day):
        qs = by_day[d]
        rng.shuffle(qs)
        for i, q in enumerate(qs):
            out.append((T0 + d * DAY + 8 * 3600 + i * 60.0, q))
    return out


# ---------------------------------------------------------------- MEMORY.md coverage


@dataclass
class PromotedEntry:
    first_line: int
    last_line: int
    refs: list[tuple[str, int, int]]
    form: str  # match_form of the entry's body


def promoted_entries(memory_text: str) -> list[PromotedEntry]:
    from clawmem_core.dreaming.entries import entry_body, entry_sources, parse_entries
    from clawmem_core.dreaming.sources import match_form

    out = []
    for e in parse_entries(memory_text):
        refs = entry_sources(e.text)
        if not refs:
            continue
        first = memory_text.count("\n", 0, e.start) + 1
        out.append(PromotedEntry(first, first + e.text.count("\n"), [(r.path, r.start, r.end) for r in refs],
                                 match_form(entry_body(e.text))))
    return out


class GoldText:
    """The text of gold lines in a workspace copy, in :func:`match_form`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._files: dict[str, list[str]] = {}

    def form(self, path: str, line: int) -> str:
        from clawmem_core.dreaming.sources import match_form

        if path not in self._files:
            try:
                self._files[path] = (self.root / path).read_text(encoding="utf-8").split("\n")
            except OSError:
                self._files[path] = []
        lines = self._files[path]
        return match_form(lines[line - 1]) if 0 < line <= len(lines) else ""


def entry_holds(entry: PromotedEntry, path: str, line: int, gold: GoldText) -> bool:
    """The entry cites a range holding ``path:line`` and its text holds that line's text."""
    if not any(p == path and a <= line <= b for p, a, b in entry.refs):
        return False
    form = gold.form(path, line)
    return bool(form) and form in entry.form


def covered_spans(hits: Sequence[Any], entries: Sequence[PromotedEntry], gold: GoldText,
                  wanted: Sequence[tuple[str, int]]) -> list[Span]:
    """The results as spans; a ``MEMORY.md`` result becomes a span of each gold line its entries hold."""
    out: list[Span] = []
    for h in hits:
        if h.path != "MEMORY.md":
            out.append(Span(h.path, int(h.start_line), int(h.end_line)))
            continue
        inside = [e for e in entries if e.first_line <= int(h.end_line) and int(h.start_line) <= e.last_line]
        held = [(p, ln) for p, ln in wanted if any(entry_holds(e, p, ln, gold) for e in inside)]
        out.append(Span("MEMORY.md", 0, -1) if not held else Span(held[0][0], held[0][1], held[0][1]))
        out.extend(Span(p, ln, ln) for p, ln in held[1:])  # further held lines: same rank (counted once per k)
    return out


def search_rows(mem: Any, queries: Sequence[Query], entries: Sequence[PromotedEntry], gold: GoldText,
                k: int = 10) -> dict[str, tuple[bool, bool, bool]]:
    """Per question: (hit@1, hit@5, top result from ``MEMORY.md``)."""
    rows = {}
    for q in queries:
        hits = list(mem.search(q.text, max_results=k, min_score=0.0, record=False))
        # the spans of one MEMORY.md result sit at one rank: find the first result covering a gold line
        first = next((i for i, h in enumerate(hits)
                      if hit_at(covered_spans([h], entries, gold, q.gold_lines), q.gold_lines, k)), None)
        rows[q.qid] = (first == 0, first is not None and first < 5, bool(hits) and hits[0].path == "MEMORY.md")
    return rows


def aggregate(rows: dict[str, tuple[bool, bool, bool]], qids: Sequence[str]) -> dict[str, Any]:
    n = len(qids)
    return {"n": n, "hit@1": sum(rows[q][0] for q in qids) / n if n else None,
            "hit@5": sum(rows[q][1] for q in qids) / n if n else None,
            "top1_memory_md": sum(rows[q][2] for q in qids)}


GROUPS = ("same", "same_promoted", "same_not_promoted", "other")


# ---------------------------------------------------------------- one workspace


def why_key(reason: str) -> str:
    """A gate failure or skip reason without its numbers ("min_score", "overlaps the stronger candidate")."""
    if " < " in reason:
        return reason.split(" < ", 1)[1].split(" ")[0]
    if reason.startswith("MEMORY.md would hold"):
        return "size budget (MEMORY.md full)"
    if reason.startswith("entry "):
        return "entry check: " + re.sub(r"\s*'.*$", "", reason.split("': ", 1)[-1])
    return re.sub(r"\s*(?:C\d+\b.*|\(.*)$", "", reason)


def replay_workspace(src: Path, queries: Sequence[Query], all_gold: set[tuple[str, int]], choice: EmbedderChoice,
                     work: Path, *, weeks: int, repeats: int, seed: int, limit_per_run: int,
                     log: Callable[[str], None]) -> dict[str, Any]:
    """Copy ``src``, replay its traffic with weekly promotion, score before and after."""
    from clawmem_core.dreaming import PromotionConfig, RecallLog, Workspace, promote_workspace
    from clawmem_core.dreaming.sqlite_store import SqliteDreamStore

    root = work / src.name
    shutil.copytree(src, root)
    ws = Workspace(root)
    split = split_questions(queries)
    gold = GoldText(root)
    config = PromotionConfig(limit=limit_per_run, diary=True)
    out: dict[str, Any] = {"workspace": src.name, "questions": len(queries), "traffic": len(split.traffic),
                           "later_same_facts": len(split.same), "later_other_facts": len(split.other)}
    with engine.open_index(root, work / (src.name + "-state"), choice) as mem:
        mem.sync()
        scored = split.same + split.other
        before = search_rows(mem, scored, [], gold)
        store = SqliteDreamStore(mem.store_path)
        rlog = RecallLog(store, now=lambda: T0)
        plan = schedule(split.traffic, weeks, repeats, seed)
        runs = []
        searches = 0
        i = 0
        for week in range(1, weeks + 1):
            end = T0 + week * 7 * DAY
            while i < len(plan) and plan[i][0] < end:
                ts, q = plan[i]
                rlog.record(AGENT, q.text, mem.search(q.text, record=False), session_key=f"agent:{AGENT}:main", when=ts)
                searches += 1
                i += 1
            rlog.flush()
            t0 = time.perf_counter()
            report = promote_workspace(rlog, ws, AGENT, apply=True, config=config, now=end)
            secs = time.perf_counter() - t0
            gates: dict[str, int] = defaultdict(int)
            for c in report.candidates:
                for g in c.gate_failures:
                    gates[why_key(g)] += 1
                if c.skip_reason:
                    gates["skipped: " + why_key(c.skip_reason)] += 1
            for _, reason in report.skipped:
                if reason.startswith("append-only: "):  # gated and chosen, left out by the rewrite's checks
                    gates["left out: " + why_key(reason[len("append-only: "):])] += 1
            runs.append({"week": week, "searches": searches, "events": store.count_events(AGENT),
                         "candidates": len(report.candidates),
                         "promotable": sum(c.promotable for c in report.candidates),
                         "added": len(report.added), "seconds": round(secs, 3), "not_promoted_because": dict(gates)})
            log(f"  {src.name} week {week}: {searches} searches, {runs[-1]['candidates']} candidates, "
                f"{runs[-1]['promotable']} promotable, {len(report.added)} added ({secs:.2f} s)")
            if report.applied:
                mem.sync()
        rlog.close()
        memory = ws.memory_path.read_text(encoding="utf-8") if ws.memory_path.exists() else ""
        entries = promoted_entries(memory)
        traffic_gold = {g for q in split.traffic for g in q.gold_lines}

        def cites(e: PromotedEntry, golds: set[tuple[str, int]]) -> bool:
            return any(p == gp and a <= gl <= b for p, a, b in e.refs for gp, gl in golds)

        out["promoted"] = len(entries)
        out["grounded"] = sum(cites(e, all_gold) for e in entries)
        out["grounded_traffic"] = sum(cites(e, traffic_gold) for e in entries)
        out["holds_gold_text"] = sum(any(entry_holds(e, p, ln, gold) for p, ln in all_gold) for e in entries)
        promoted_qids = [q.qid for q in split.same
                         if any(entry_holds(e, p, ln, gold) for e in entries for p, ln in q.gold_lines)]
        out["same_questions_with_gold_promoted"] = len(promoted_qids)
        out["memory_chars"] = len(memory)
        out["searches"] = searches
        out["runs"] = runs
        after = search_rows(mem, scored, entries, gold)
        groups = {"same": [q.qid for q in split.same], "same_promoted": promoted_qids,
                  "same_not_promoted": [q.qid for q in split.same if q.qid not in promoted_qids],
                  "other": [q.qid for q in split.other]}
        out["before"] = {g: aggregate(before, ids) for g, ids in groups.items()}
        out["after"] = {g: aggregate(after, ids) for g, ids in groups.items()}
        # the same searches with MEMORY.md's keyword prior off (docs/decisions.md, CURATED_PRIOR): a diagnosis
        import clawmem_core.search as core_search

        prior = core_search.CURATED_PRIOR
        core_search.CURATED_PRIOR = 1.0
        try:
            no_prior = search_rows(mem, scored, entries, gold)
        finally:
            core_search.CURATED_PRIOR = prior
        out["after_no_prior"] = {g: aggregate(no_prior, ids) for g, ids in groups.items()}
        store.close()
    return out


def zero_traffic_promotes_nothing(src: Path, choice: EmbedderChoice, work: Path) -> dict[str, Any]:
    """A promotion run over an index that recorded nothing: what it adds (it must be nothing)."""
    from clawmem_core.dreaming import RecallLog, Workspace, promote_workspace
    from clawmem_core.dreaming.sqlite_store import SqliteDreamStore

    root = work / (src.name + "-zero")
    shutil.copytree(src, root)
    with engine.open_index(root, work / (src.name + "-zero-state"), choice) as mem:
        mem.sync()
        store = SqliteDreamStore(mem.store_path)
        report = promote_workspace(RecallLog(store), Workspace(root), AGENT, apply=True, now=T0 + 7 * DAY)
        store.close()
    return {"added": len(report.added), "memory_md_written": (root / "MEMORY.md").exists()}


# ---------------------------------------------------------------- promotion time at scale


def promotion_time(src: Path, queries: Sequence[Query], choice: EmbedderChoice, work: Path, scale: int,
                   seed: int) -> dict[str, Any]:
    """``scale`` synthetic recall events on the real lines of ``src`` (snippet-like ranges, Zipf-like popularity,
    real question texts, 4 weeks), then one preview and one applied promotion, timed."""
    from clawmem_core.dreaming import PromotionConfig, RecallEvent, Workspace, promote_workspace
    from clawmem_core.dreaming.recall_log import QUERY_TEXT_MAX, content_hash, normalize_text, query_hash
    from clawmem_core.dreaming.sources import is_candidate_path
    from clawmem_core.dreaming.sqlite_store import SqliteDreamStore
    from clawmem_core.masking import mask_and_clip

    root = work / f"{src.name}-scale-{scale}"
    shutil.copytree(src, root)
    state = work / f"{src.name}-scale-{scale}-state"
    with engine.open_index(root, state, choice) as mem:
        mem.sync()
        db = mem.store_path
    # snippet-like ranges, as searches record them: from each line of a chunk, 1 to 4 lines within the chunk
    rng = random.Random(seed)
    chunks = [c for c in engine.read_chunks(db) if is_candidate_path(c.path)]
    ranges = sorted({(c.path, a, min(c.end_line, a + rng.randrange(4)))
                     for c in chunks for a in range(c.start_line, c.end_line + 1)})
    files: dict[str, list[str]] = {}
    live = []
    for path, a, b in ranges:
        lines = files.setdefault(path, (root / path).read_text(encoding="utf-8").split("\n"))
        if "".join(lines[a - 1 : b]).strip():
            live.append((path, a, b, content_hash("\n".join(lines[a - 1 : b]))))
    rng.shuffle(live)
    weights = [1.0 / (i + 1) ** 0.8 for i in range(len(live))]
    texts = [mask_and_clip(normalize_text(q.text), QUERY_TEXT_MAX) for q in queries]
    qhashes = [query_hash(t) for t in texts]
    store = SqliteDreamStore(db)
    t0 = time.perf_counter()
    batch: list[RecallEvent] = []
    picks = rng.choices(range(len(live)), weights=weights, k=scale)
    for n, ci in enumerate(picks):
        path, a, b, chash = live[ci]
        qi = rng.randrange(len(texts))
        ts = T0 + rng.random() * 28 * DAY
        batch.append(RecallEvent(AGENT, ts, path, a, b, chash, rng.uniform(0.3, 0.95), 1 + n % 6, qhashes[qi],
                                 texts[qi], None, False))
        if len(batch) == 5000:
            store.add_events(batch)
            batch = []
    if batch:
        store.add_events(batch)
    insert_s = time.perf_counter() - t0
    ws = Workspace(root)
    now = T0 + 28 * DAY
    config = PromotionConfig()
    t0 = time.perf_counter()
    preview = promote_workspace(store, ws, AGENT, apply=False, config=config, now=now)
    preview_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    applied = promote_workspace(store, ws, AGENT, apply=True, config=config, now=now)
    apply_s = time.perf_counter() - t0
    count = store.count_events(AGENT)
    store.close()
    return {"events": count, "ranges": len(live), "distinct_recalled": len(set(picks)),
            "insert_s": round(insert_s, 3), "preview_s": round(preview_s, 3), "apply_s": round(apply_s, 3),
            "candidates": len(preview.candidates), "added": len(applied.added)}


# ---------------------------------------------------------------- latency


LATENCY_MODES = ("off", "buffered", "inline", "background", "inline, own file", "background, own file")
LOGGED = LATENCY_MODES[1:]


def latency(src: Path, queries: Sequence[str], choice: EmbedderChoice, work: Path, rounds: int,
            label: str) -> dict[str, Any]:
    """One copy of ``src`` and one index per mode, the queries interleaved across them query by query (the order
    of the modes rotating): ``off`` (search only), ``buffered`` (search, then ``RecallLog.record`` into a log
    that writes nothing until the timing ends: the cost of the call alone), ``inline`` (the call that fills a
    batch writes it), ``background`` (the log's own thread writes), and both again writing into a SQLite file of
    their own beside the index's instead of the index's file (``..., own file``). Each time is the search plus the
    record call. A mode's index is its own SQLite file, so one mode's writes never land on another's searches;
    the freshness walks each index makes are counted (a commit by the recall log's connection is another
    connection's write to the index file)."""
    from clawmem_core.dreaming import RecallLog
    from clawmem_core.dreaming.sqlite_store import SqliteDreamStore

    times: dict[str, list[float]] = {m: [] for m in LATENCY_MODES}
    walks = {m: 0 for m in LATENCY_MODES}
    mems: dict[str, Any] = {}
    logs: dict[str, Any] = {}
    stores: dict[str, Any] = {}
    opened = []
    try:
        for m in LATENCY_MODES:
            root = work / f"{src.name}-latency-{m}"
            shutil.copytree(src, root)
            ctx = engine.open_index(root, work / f"{src.name}-latency-{m}-state", choice)
            mem = ctx.__enter__()
            opened.append(ctx)
            mem.sync()
            for q in queries[:5]:  # warm caches; the change journal starts on the second search
                mem.search(q, record=False)
            scan = mem._syncer.scan

            def counting(*a: Any, _scan: Any = scan, _m: str = m, **k: Any) -> Any:
                walks[_m] += 1
                return _scan(*a, **k)

            mem._syncer.scan = counting
            mems[m] = mem
            if m != "off":
                own = work / f"{src.name}-latency-{m.split(',')[0]}-recall.sqlite"
                stores[m] = SqliteDreamStore(own if m.endswith("own file") else mem.store_path)
                logs[m] = RecallLog(stores[m], background=m.startswith("background"), flush_interval_s=1.0,
                                    batch_size=10**9 if m == "buffered" else 64)
        order = list(LATENCY_MODES)
        for _ in range(rounds):
            for q in queries:
                for m in order:
                    t0 = time.perf_counter()
                    hits = mems[m].search(q, record=False)
                    if m != "off":
                        logs[m].record(AGENT, q, hits)
                    times[m].append((time.perf_counter() - t0) * 1000.0)
                order = order[1:] + order[:1]
        for lg in logs.values():
            lg.close()
        written = {m: stores[m].count_events(AGENT) for m in stores}
        batches = {m: logs[m].batches_written for m in logs}
    finally:
        for st in stores.values():
            st.close()
        for ctx in reversed(opened):
            ctx.__exit__(None, None, None)
    n = len(times["off"])
    out: dict[str, Any] = {"workspace": label, "searches_per_mode": n, "events_written": written,
                           "batches_written": batches}
    for m in LATENCY_MODES:
        out[m] = {"p50_ms": round(percentile(times[m], 50), 3), "p95_ms": round(percentile(times[m], 95), 3),
                  "mean_ms": round(statistics.fmean(times[m]), 3), "walks_per_search": round(walks[m] / n, 3)}
    for m in LOGGED:
        out[m]["p50_ratio"] = round(out[m]["p50_ms"] / out["off"]["p50_ms"], 3)
        out[m]["p95_ratio"] = round(out[m]["p95_ms"] / out["off"]["p95_ms"], 3)
    return out


# ---------------------------------------------------------------- run and report


def load_avg() -> Optional[float]:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except OSError:
        return None


def run(datasets: Sequence[Dataset], choice: EmbedderChoice, work: Path, *, weeks: int, repeats: int, seed: int,
        limit_per_run: int, scales: Sequence[int], latency_queries: int, latency_rounds: int,
        synth_chunks: int = 0, log: Callable[[str], None] = print) -> dict[str, Any]:
    res: dict[str, Any] = {"embedder": choice.label, "weeks": weeks, "repeats": repeats, "seed": seed,
                           "limit_per_run": limit_per_run, "load_before": load_avg(), "datasets": {}}
    for ds in datasets:
        by_ws: dict[Path, list[Query]] = defaultdict(list)
        for q in ds.queries:
            by_ws[q.workspace].append(q)
        rows = []
        for src, qs in sorted(by_ws.items()):
            all_gold = {g for q in qs for g in q.gold_lines}
            rows.append(replay_workspace(src, qs, all_gold, choice, work / ds.name, weeks=weeks, repeats=repeats,
                                         seed=seed, limit_per_run=limit_per_run, log=log))
        res["datasets"][ds.name] = {"language": ds.language, "workspaces": rows, "total": totals(rows)}
    first = datasets[0]
    src = sorted({q.workspace for q in first.queries})[0]
    qs = [q for q in first.queries if q.workspace == src]
    res["zero_traffic"] = zero_traffic_promotes_nothing(src, choice, work / "zero")
    res["promotion_time"] = {"workspace": f"{first.name}/{src.name}", "synthetic": True,
                             "runs": [promotion_time(src, qs, choice, work / "scale", s, seed) for s in scales]}
    for r in res["promotion_time"]["runs"]:
        log(f"  promotion at {r['events']:,} events: preview {r['preview_s']} s, apply {r['apply_s']} s")
    lat_queries = [q.text for q in first.queries if q.workspace == src][:latency_queries]
    res["latency"] = [latency(src, lat_queries, choice, work / "latency", latency_rounds, f"{first.name}/{src.name}")]
    if synth_chunks:
        from . import synth

        gen = work / "synth" / f"generated-{synth_chunks}"
        man = synth.generate(gen, synth_chunks, seed=seed)
        qs = (man.queries_en + man.queries_zh)[:latency_queries]
        res["latency"].append(latency(gen, qs, choice, work / "latency-synth", latency_rounds,
                                      f"generated, {man.files:,} files"))
    for lat in res["latency"]:
        log(f"  latency on {lat['workspace']}: p50 off {lat['off']['p50_ms']} ms, "
            + ", ".join(f"{m} {lat[m]['p50_ratio']}x" for m in LOGGED))
    res["load_after"] = load_avg()
    return res


def totals(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    keys = ("questions", "traffic", "later_same_facts", "later_other_facts", "promoted", "grounded",
            "grounded_traffic", "holds_gold_text", "same_questions_with_gold_promoted", "searches")
    out: dict[str, Any] = {k: sum(r[k] for r in rows) for k in keys}
    for when in ("before", "after", "after_no_prior"):
        out[when] = {}
        for group in GROUPS:
            n = sum(r[when][group]["n"] for r in rows)
            out[when][group] = {"n": n, "top1_memory_md": sum(r[when][group]["top1_memory_md"] for r in rows)}
            for m in ("hit@1", "hit@5"):
                out[when][group][m] = (sum((r[when][group][m] or 0) * r[when][group]["n"] for r in rows) / n
                                       if n else None)
    return out


def _f(x: Any, nd: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{nd}f}"


def markdown(res: dict[str, Any]) -> str:
    lines = ["# Consolidation on LoCoMo (`bench/consolidation.py`)", "",
             f"Embedder `{res['embedder']}`; {res['weeks']} simulated weeks; each traffic question asked "
             f"{res['repeats']} times on distinct random days (seed {res['seed']}); append-only promotion (no model) "
             f"at the end of each week, at most {res['limit_per_run']} entries a run, default gates. Load average "
             f"{res['load_before']} before, {res['load_after']} after (2 shared cores).", "",
             "Split, per conversation, in `qid` order: the first half of the questions is the traffic; the second "
             "half is scored, **same facts** when it shares a gold line with a traffic question, **other facts** "
             "otherwise. A `MEMORY.md` result covers a gold line when one of its entries cites a range holding the "
             "line and the entry's text holds it. hit@k over `search(q, max_results=10, min_score=0)`.", "",
             "## Grounding", "",
             "| data set | questions (traffic / same facts / other facts) | traffic searches | promoted entries "
             "| grounded: cite a gold line of any question | cite a gold line of a traffic question "
             "| entry text holds a gold line | same-facts questions whose gold line a promoted entry holds |",
             "|---|---|---|---|---|---|---|---|"]
    for name, d in res["datasets"].items():
        t = d["total"]
        lines.append(
            f"| {name} | {t['questions']} ({t['traffic']} / {t['later_same_facts']} / {t['later_other_facts']}) "
            f"| {t['searches']} | {t['promoted']} | {t['grounded']} | {t['grounded_traffic']} | {t['holds_gold_text']} "
            f"| {t['same_questions_with_gold_promoted']} of {t['later_same_facts']} |")
    lines += ["", "## Later questions, before and after promotion", "",
              "\"same facts, promoted\" are the same-facts questions whose gold line a promoted entry holds (chosen "
              "after the run); \"not promoted\" the rest of the same-facts questions. Chunks of `MEMORY.md` made "
              "of promoted entries get no keyword prior (`search.promoted_only`). The last column repeats the "
              "after searches with the prior off for every `MEMORY.md` chunk and named note "
              "(`search.CURATED_PRIOR` = 1 instead of 2, docs/decisions.md): a diagnosis, not a setting.", "",
              "| data set | questions | n | hit@1 before | hit@1 after | change | hit@5 before | hit@5 after | change "
              "| top result from MEMORY.md after | hit@1 / hit@5 after, MEMORY.md prior off |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    labels = {"same": "same facts", "same_promoted": "same facts, promoted", "same_not_promoted":
              "same facts, not promoted", "other": "other facts (control)"}
    for name, d in res["datasets"].items():
        t = d["total"]
        for g in GROUPS:
            b, a, np_ = t["before"][g], t["after"][g], t["after_no_prior"][g]
            row = [name, labels[g], str(b["n"])]
            for m in ("hit@1", "hit@5"):
                delta = None if b[m] is None else a[m] - b[m]
                row += [_f(b[m]), _f(a[m]), "n/a" if delta is None else f"{delta:+.3f}"]
            row += [str(a["top1_memory_md"]), f"{_f(np_['hit@1'])} / {_f(np_['hit@5'])}"]
            lines.append("| " + " | ".join(row) + " |")
    lines += ["", "Weekly runs (per conversation: candidates, promotable, added; why candidates were not promoted "
              "at the last run):", ""]
    for name, d in res["datasets"].items():
        for w in d["workspaces"]:
            runs = ", ".join(f"w{r['week']} {r['candidates']}/{r['promotable']}/{r['added']}" for r in w["runs"])
            why = "; ".join(f"{k} {v}" for k, v in sorted(w["runs"][-1]["not_promoted_because"].items()))
            lines.append(f"- {name} {w['workspace']}: {runs} ({why})")
    z = res["zero_traffic"]
    lines += ["", f"Zero traffic: a run over an empty recall log added {z['added']} entries "
              f"(MEMORY.md written: {z['memory_md_written']}).", "",
              "## Promotion time", "",
              f"Synthetic recall events on the real lines of {res['promotion_time']['workspace']}: ranges of 1 to 4 "
              "lines within its chunks, as search snippets are, with Zipf-like popularity (weight 1 / rank^0.8), "
              "real question texts, scores uniform in 0.3-0.95, over 4 weeks, inserted straight into the store "
              "(the time of that insert is shown; above the default "
              "retention of 50,000 events the 100k log exists only with `RetentionPolicy.max_events` raised).", "",
              "| events | line ranges recalled (of those available) | insert (s) | candidates | preview (s) "
              "| apply (s) | added |",
              "|---|---|---|---|---|---|---|"]
    for r in res["promotion_time"]["runs"]:
        lines.append(f"| {r['events']:,} | {r['distinct_recalled']} of {r['ranges']} | {r['insert_s']} "
                     f"| {r['candidates']} | {r['preview_s']} | {r['apply_s']} | {r['added']} |")
    lines += ["", "## Search latency with the recall log", "",
              "One copy of the workspace and one index (its own SQLite file) per mode; the queries interleaved "
              "across the modes query by query, their order rotating. Each time is `search` plus "
              "`RecallLog.record` (batch 64, the log's own connection to the index file); `buffered`: the call "
              "alone (nothing written until the timing ends); `inline`: the call "
              "that fills a batch writes it; `background`: the log's thread writes; `..., own file`: the same, "
              "writing into a SQLite file of its own instead of the index's. Walks: the freshness walks "
              "per search (a commit to the index file by another connection makes the next search walk).", ""]
    for lat in res["latency"]:
        lines += [f"{lat['workspace']}, {lat['searches_per_mode']} searches per mode:", "",
                  "| mode | p50 (ms) | p95 (ms) | p50 ratio to off | p95 ratio to off | walks per search "
                  "| events written |", "|---|---|---|---|---|---|---|",
                  f"| off | {lat['off']['p50_ms']} | {lat['off']['p95_ms']} | 1 | 1 "
                  f"| {lat['off']['walks_per_search']} | 0 |"]
        for m in LOGGED:
            lines.append(f"| {m} | {lat[m]['p50_ms']} | {lat[m]['p95_ms']} | {lat[m]['p50_ratio']} "
                         f"| {lat[m]['p95_ratio']} | {lat[m]['walks_per_search']} | {lat['events_written'][m]} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.consolidation", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=None)
    ap.add_argument("--datasets", default="locomo-en,locomo-zh")
    ap.add_argument("--embedder", default="none", help="none (keyword-only, default), hash, local, ...")
    ap.add_argument("--weeks", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3, help="times each traffic question is asked (0: no traffic)")
    ap.add_argument("--limit-per-run", type=int, default=10)
    ap.add_argument("--scales", default="10000,100000")
    ap.add_argument("--latency-queries", type=int, default=150)
    ap.add_argument("--latency-rounds", type=int, default=4)
    ap.add_argument("--synth-chunks", type=int, default=10000,
                    help="also time the recall log on a generated workspace of about this many chunks (0: not)")
    ap.add_argument("--workspaces", default="", help="only these conversations (comma separated)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--name", default="consolidation")
    ap.add_argument("--work", type=Path, default=None, help="scratch directory (default: a temporary one)")
    a = ap.parse_args(argv)
    datasets = load_all(a.data or default_data_dir(), [x for x in a.datasets.split(",") if x])
    only = {w for w in a.workspaces.split(",") if w}
    if only:
        for ds in datasets:
            ds.queries = [q for q in ds.queries if q.workspace.name in only]
        datasets = [ds for ds in datasets if ds.queries]
    choice = resolve(a.embedder)
    scratch = a.work or Path(tempfile.mkdtemp(prefix="clawmem-consolidation-"))
    try:
        res = run(datasets, choice, scratch, weeks=a.weeks, repeats=a.repeats, seed=a.seed,
                  limit_per_run=a.limit_per_run, scales=[int(s) for s in a.scales.split(",") if s],
                  latency_queries=a.latency_queries, latency_rounds=a.latency_rounds, synth_chunks=a.synth_chunks,
                  log=lambda m: print(m, file=sys.stderr, flush=True))
    finally:
        if a.work is None:
            shutil.rmtree(scratch, ignore_errors=True)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / f"{a.name}.json").write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
    md = markdown(res)
    (a.out / f"{a.name}.md").write_text(md, encoding="utf-8")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
