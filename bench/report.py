"""The results page: ``bench/results/RESULTS.md`` with tables, and PNG plots beside it, regenerated from the
JSON files of the runs (``bench/results/<profile>.json``)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"
PROFILES = ("quick", "full", "smoke")


def _f(x: Any, nd: int = 2, unit: str = "") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if isinstance(x, (int, float)):
        return f"{x:.{nd}f}{unit}"
    return str(x)


def _get(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def _table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def _system_order(names: list[str]) -> list[str]:
    def key(n: str) -> tuple:
        base = n.split("[")[0].replace("+mmr", "")
        return ({"rank-bm25": 0, "keyword": 1, "vector": 2, "hybrid": 3}.get(base, 9), n.split("]")[0], "+mmr" in n)

    return sorted(names, key=key)


# -- targets ----------------------------------------------------------------------------------------------------


def targets(res: dict[str, Any]) -> list[list[str]]:
    rows: list[list[str]] = []

    def add(name: str, value: Any, ok: bool | None, fmt: str) -> None:
        rows.append([name, fmt if value is not None else "not measured",
                     "–" if ok is None or value is None else ("✅" if ok else "❌")])

    sp = res.get("speed") or {}
    scales = sp.get("scales") or {}
    if not scales:
        return targets_quality(res, rows, add)

    big = max((int(k) for k in scales), default=None)
    s = scales.get(str(big)) if big else None
    h = _get(s, "search", "hybrid", "excluded", "p50_ms")
    add(f"hybrid search p50 warm at {big or '?'} chunks × 384 dims < 15 ms (100k for the full profile)", h,
        h is not None and h < 15, f"{_f(h)} ms")
    rec = [(_get(v, "search", "vector", "recall@10")) for v in scales.values()]
    rec = [r for r in rec if r is not None]
    add("vector recall@10 vs exact ≥ 0.99 (worst scale)", min(rec) if rec else None,
        bool(rec) and min(rec) >= 0.99, _f(min(rec) if rec else None, 3))
    per1k = []
    for v in scales.values():
        noop = _get(v, "index_keyword", "noop_sync", "p50_ms")
        files = _get(v, "index_keyword", "files") or v.get("files")
        if noop is not None and files:
            per1k.append((noop / files * 1000, files, noop))
    if per1k:
        worst = max(per1k)
        add("no-op sync over 1,000 files < 100 ms", worst[0], worst[0] < 100,
            f"{worst[0]:.1f} ms per 1,000 files ({worst[2]:.1f} ms for {worst[1]} files)")
    else:
        add("no-op sync over 1,000 files < 100 ms", None, None, "")
    thr = [_get(v, "index_keyword", "chunks_per_s") for v in scales.values()]
    thr = [t for t in thr if t]
    add("keyword-only indexing ≥ 5,000 chunks/s (slowest scale)", min(thr) if thr else None,
        bool(thr) and min(thr) >= 5000, f"{_f(min(thr) if thr else None, 0)} chunks/s")
    imp = _get(sp, "import", "median_ms")
    add("import clawmem_core < 150 ms", imp, imp is not None and imp < 150, f"{_f(imp, 0)} ms")
    cli = [_get(v, "cold_cli", "median_ms") for v in scales.values()]
    cli = [c for c in cli if c is not None]
    add("cold `clawmem search` keyword-only < 0.5 s (largest scale)", cli[-1] if cli else None,
        bool(cli) and cli[-1] < 500, f"{_f(cli[-1] if cli else None, 0)} ms")

    return targets_quality(res, rows, add)


def targets_quality(res: dict[str, Any], rows: list[list[str]], add: Any) -> list[list[str]]:
    q = _get(res, "quality", "datasets") or {}
    for ds in ("locomo-en", "locomo-zh"):
        systems = _get(q, ds, "systems") or {}
        kw = _get(systems, "keyword", "overall", "hit@5")
        bm = _get(systems, "rank-bm25", "overall", "hit@5")
        hy = [(n, _get(v, "overall", "hit@5")) for n, v in systems.items() if n.startswith("hybrid[") and "+mmr" not in n]
        if kw is not None and bm is not None:
            add(f"{ds}: keyword-only > rank-bm25 (hit@5)", kw, kw > bm, f"{kw:.3f} vs {bm:.3f}")
        for n, v in hy:
            if v is not None and kw is not None:
                add(f"{ds}: {n} > keyword-only (hit@5)", v, v > kw, f"{v:.3f} vs {kw:.3f}")
    en = _get(q, "locomo-en", "systems", "keyword", "overall", "hit@5")
    zh = _get(q, "locomo-zh", "systems", "keyword", "overall", "hit@5")
    if en is not None and zh is not None:
        add("Chinese keyword-only within 0.05 hit@5 of English", zh, en - zh <= 0.05,
            f"ZH {zh:.3f} vs EN {en:.3f} (gap {en - zh:+.3f})")
    label, same = same_questions(_get(res, "quality") or {})
    en_same = _get(same, "keyword", "hit@5")
    if en_same is not None and zh is not None:
        add(f"Chinese keyword-only within 0.05 hit@5 of English on the same questions ({label})", zh,
            en_same - zh <= 0.05, f"ZH {zh:.3f} vs EN {en_same:.3f} (gap {en_same - zh:+.3f})")
    return rows


def same_questions(q: dict[str, Any]) -> tuple[str, dict[str, dict[str, float]]]:
    """English scores over the conversations the Chinese set was translated from (the same questions):
    ``(conversations, {system: {metric: value, "n": questions}})``, from each workspace's scores weighted by
    its question count. Empty when a run lacks either set or per-workspace scores."""
    ds = _get(q, "datasets") or {}
    zh_ws = _get(ds, "locomo-zh", "systems", "keyword", "by_workspace") or {}
    en = _get(ds, "locomo-en", "systems") or {}
    out: dict[str, dict[str, float]] = {}
    for name, s in en.items():
        parts = [(s.get("by_workspace") or {}).get(w) for w in zh_ws]
        if not zh_ws or any(p is None or not p.get("n") for p in parts):
            continue
        n = sum(p["n"] for p in parts)
        out[name] = {"n": n, **{m: sum(p[m] * p["n"] for p in parts) / n for m in parts[0] if m != "n"}}
    return ", ".join(sorted(zh_ws)), out


# -- sections ---------------------------------------------------------------------------------------------------


def quality_section(q: dict[str, Any]) -> str:
    parts = []
    for name, ds in (q.get("datasets") or {}).items():
        systems = ds.get("systems") or {}
        order = _system_order(list(systems))
        per = f" of {ds['lines_per_chunk']:.1f} lines on average" if ds.get("lines_per_chunk") else ""
        parts.append(f"#### {name} ({ds.get('queries')} queries, {ds.get('chunks')} chunks{per}"
                     + (f", skipped {ds['skipped']}" if ds.get("skipped") else "") + ")\n")
        if ds.get("query_embedding_ms"):
            parts.append("Query embedding, once per question (not in ms/query): " + ", ".join(
                f"{k} {v:.1f} ms" for k, v in ds["query_embedding_ms"].items()) + ".\n")
        if ds.get("kind") == "beir":
            rows = [[n, _f(_get(systems, n, "overall", "ndcg@10"), 3), _f(_get(systems, n, "overall", "recall@100"), 3),
                     _f(_get(systems, n, "search_ms_mean"), 1)] for n in order]
            parts.append(_table(["system", "nDCG@10", "recall@100", "ms/query"], rows))
        else:
            ms = ["hit@1", "hit@5", "hit@10", "recall@5", "recall@10"]
            rows = [[n] + [_f(_get(systems, n, "overall", m), 3) for m in ms] + [_f(_get(systems, n, "search_ms_mean"), 1)]
                    for n in order]
            parts.append(_table(["system"] + ms + ["ms/query"], rows))
            label, same = same_questions(q) if ds.get("language") == "zh" else ("", {})
            both = [n for n in order if n in same]
            if both:
                parts.append(f"\nThe same questions in English (locomo-en on {label}, n={same[both[0]]['n']}):\n")
                head = ["system", "EN hit@1", "ZH hit@1", "EN hit@5", "ZH hit@5", "gap hit@5", "EN recall@5",
                        "ZH recall@5"]
                rows = []
                for n in both:
                    e, z = same[n], _get(systems, n, "overall") or {}
                    gap = e["hit@5"] - z["hit@5"] if z.get("hit@5") is not None else None
                    rows.append([n, _f(e.get("hit@1"), 3), _f(z.get("hit@1"), 3), _f(e.get("hit@5"), 3),
                                 _f(z.get("hit@5"), 3), "–" if gap is None else f"{gap:+.3f}",
                                 _f(e.get("recall@5"), 3), _f(z.get("recall@5"), 3)])
                parts.append(_table(head, rows))
            cats = sorted({c for s in systems.values() for c in (s.get("by_category") or {})})
            if cats:
                parts.append("\nhit@5 by category (n = questions):\n")
                head = ["system"] + [f"{c} (n={_get(systems, order[0], 'by_category', c, 'n')})" for c in cats]
                rows = [[n] + [_f(_get(systems, n, "by_category", c, "hit@5"), 3) for c in cats] for n in order]
                parts.append(_table(head, rows))
        parts.append("")
    if q.get("skipped_embedders"):
        parts.append("Embedders skipped: " + "; ".join(f"`{k}`: {v}" for k, v in q["skipped_embedders"].items()))
    return "\n".join(parts)


def speed_section(sp: dict[str, Any]) -> str:
    scales = sp.get("scales") or {}
    if not scales:
        return "_not run_"
    keys = sorted(scales, key=int)
    col = [f"{int(k):,}" for k in keys]

    def row(label: str, fn) -> list[str]:
        vals = []
        for k in keys:
            try:
                vals.append(fn(scales[k]))
            except Exception:
                vals.append("–")
        return [label] + vals

    def lat(path: tuple, nd=2):
        return lambda s: f"{_f(_get(s, *path, 'p50_ms'), nd)} / {_f(_get(s, *path, 'p95_ms'), nd)}"

    mib = lambda b: _f(b / 2**20 if b else None, 1)  # noqa: E731
    rows = [
        row("files", lambda s: f"{_get(s, 'index_keyword', 'files') or s.get('files'):,}"),
        row("chunks indexed", lambda s: f"{_get(s, 'index_keyword', 'chunks'):,}"),
        row("Markdown size (MiB)", lambda s: mib(s.get("bytes"))),
        row("full index, keyword-only: s (chunks/s)", lambda s: f"{_f(_get(s, 'index_keyword', 'index_seconds'), 1)} "
            f"({_f(_get(s, 'index_keyword', 'chunks_per_s'), 0)})"),
        row("full index, zero-cost 384-d embedder: s (chunks/s)", lambda s: f"{_f(_get(s, 'index_zero', 'index_seconds'), 1)} "
            f"({_f(_get(s, 'index_zero', 'chunks_per_s'), 0)})"),
        row("no-op sync, live instance (ms p50)", lambda s: _f(_get(s, "index_keyword", "noop_sync", "p50_ms"), 1)),
        row("open + no-op sync, new instance (ms p50)", lambda s: _f(_get(s, "index_keyword", "open_noop_sync", "p50_ms"), 1)),
        row("one file changed sync, keyword / zero-cost (ms p50)",
            lambda s: f"{_f(_get(s, 'index_keyword', 'one_file_sync', 'p50_ms'), 1)} / "
            f"{_f(_get(s, 'index_zero', 'one_file_sync', 'p50_ms'), 1)}"),
        row("keyword search, keyword-only index (ms p50 / p95)", lat(("search", "keyword"))),
        row("  English queries (ms p50 / p95)", lat(("search", "keyword", "en"))),
        row("  Chinese queries (ms p50 / p95)", lat(("search", "keyword", "zh"))),
        row("vector search, query embedding excluded (ms p50 / p95)", lat(("search", "vector", "excluded"))),
        row("vector search, query embedding included (ms p50 / p95)", lat(("search", "vector", "included"))),
        row("hybrid search, query embedding excluded (ms p50 / p95)", lat(("search", "hybrid", "excluded"))),
        row("hybrid search, query embedding included (ms p50 / p95)", lat(("search", "hybrid", "included"))),
        row("clawmem vector recall@10 vs exact", lambda s: _f(_get(s, "search", "vector", "recall@10"), 3)),
        row("exact: NumPy matrix in RAM (ms p50 / p95)", lat(("search", "exact", "numpy"))),
        row("exact: sqlite-vec vec0 brute force (ms p50 / p95)", lat(("search", "exact", "sqlite_vec"))),
        row("cold `clawmem search`, keyword-only (ms, median)", lambda s: _f(_get(s, "cold_cli", "median_ms"), 0)),
        row("peak RSS: keyword index / zero-cost index / search (MiB)",
            lambda s: f"{_f(_get(s, 'index_keyword', 'peak_rss_mb'), 0)} / {_f(_get(s, 'index_zero', 'peak_rss_mb'), 0)} / "
            f"{_f(_get(s, 'search', 'peak_rss_mb'), 0)}"),
        row("index on disk: keyword-only / with 384-d vectors (MiB)",
            lambda s: f"{mib(_get(s, 'index_keyword', 'index_bytes'))} / {mib(_get(s, 'index_zero', 'index_bytes'))}"),
    ]
    out = [_table(["chunks (target)"] + col, rows)]
    qm = {_get(scales[k], "search", "query_model") for k in keys} - {None}
    if qm:
        out.append(f"\nQuery embedding included: queries embedded by `{', '.join(sorted(qm))}`"
                   + (" (a non-semantic stand-in for a real model)" if qm <= {"hash-384"} else "")
                   + ", over the same index of zero-cost vectors.")
    errs = []
    for k in keys:
        for phase in ("index_keyword", "index_zero", "search", "cold_cli"):
            e = _get(scales[k], phase)
            if isinstance(e, dict) and e.get("ok") is False:
                errs.append(f"- {int(k):,} / {phase}: `{e.get('error')}`")
    if errs:
        out.append("\nFailures:\n" + "\n".join(errs))
    return "\n".join(out)


# -- plots ------------------------------------------------------------------------------------------------------


def plots(res: dict[str, Any], out_dir: Path, tag: str) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:
        return []
    made = []
    scales = _get(res, "speed", "scales") or {}
    pts = []
    for k, s in sorted(scales.items(), key=lambda kv: int(kv[0])):
        n = _get(s, "index_keyword", "chunks") or int(k)
        pts.append((n, s))
    if pts:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        series = [
            ("keyword (FTS5)", ("search", "keyword", "p50_ms")),
            ("vector (clawmem)", ("search", "vector", "excluded", "p50_ms")),
            ("hybrid (clawmem)", ("search", "hybrid", "excluded", "p50_ms")),
            ("exact NumPy in RAM", ("search", "exact", "numpy", "p50_ms")),
            ("exact sqlite-vec vec0", ("search", "exact", "sqlite_vec", "p50_ms")),
        ]
        for label, path in series:
            xy = [(n, _get(s, *path)) for n, s in pts if _get(s, *path)]
            if xy:
                ax.plot([x for x, _ in xy], [y for _, y in xy], marker="o", label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("chunks in the index (384-d vectors)")
        ax.set_ylabel("p50 latency, warm, query embedding excluded (ms)")
        ax.axhline(15, color="grey", lw=0.8, ls="--")
        ax.text(pts[0][0], 15 * 1.08, "15 ms target", color="grey", fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        ax.set_title("Search latency against index size")
        fig.tight_layout()
        name = f"latency-{tag}.png"
        fig.savefig(out_dir / name, dpi=110)
        plt.close(fig)
        made.append(name)
    q = _get(res, "quality", "datasets") or {}
    loc = [(n, d) for n, d in q.items() if d.get("kind") == "locomo"]
    if loc:
        fig, axes = plt.subplots(1, len(loc), figsize=(6.5 * len(loc), 4.5), squeeze=False)
        for ax, (name, d) in zip(axes[0], loc):
            systems = d.get("systems") or {}
            order = [n for n in _system_order(list(systems)) if "+mmr" not in n]
            cats = sorted({c for s in systems.values() for c in (s.get("by_category") or {})}) + ["all"]
            width = 0.8 / max(1, len(order))
            for i, n in enumerate(order):
                ys = [(_get(systems, n, "overall", "hit@5") if c == "all" else _get(systems, n, "by_category", c, "hit@5")) or 0
                      for c in cats]
                ax.bar([j + i * width for j in range(len(cats))], ys, width, label=n)
            ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cats))])
            ax.set_xticklabels(cats, fontsize=8)
            ax.set_ylim(0, 1)
            ax.set_ylabel("hit@5")
            ax.set_title(f"{name}: hit@5 by question category")
            ax.legend(fontsize=7)
            ax.grid(True, axis="y", alpha=0.3)
        fig.tight_layout()
        name = f"quality-{tag}.png"
        fig.savefig(out_dir / name, dpi=110)
        plt.close(fig)
        made.append(name)
    return made


# -- page -------------------------------------------------------------------------------------------------------


def env_line(env: dict[str, Any]) -> str:
    pk = ", ".join(f"{k} {v}" for k, v in (env.get("packages") or {}).items())
    load = ""
    if env.get("load_start") is not None:
        load = f" · load average {env.get('load_start')} at start, {env.get('load_end', '?')} at end"
    return (f"{env.get('when', '?')} · commit `{env.get('commit', '?')}` · Python {env.get('python')} · "
            f"{env.get('platform')} · {env.get('cpus')} CPUs{load} · SQLite {env.get('sqlite')} · {pk}")


def write(out_dir: Path = RESULTS_DIR) -> Path:
    runs = []
    order = {p: i for i, p in enumerate(PROFILES)}
    files = sorted(out_dir.glob("*.json"), key=lambda p: (order.get(p.stem.split("-")[0], 9), p.stem))
    for p in files:
        if p.stem.split("-")[0] in order and (p.stem != "smoke" or len(files) == 1):
            runs.append((p.stem, json.loads(p.read_text())))
    lines = [
        "# clawmem benchmark results",
        "",
        "Generated by `python -m bench run` (or `python -m bench report` from the saved JSON); see "
        "[../README.md](../README.md) for what each number means and how to reproduce it.",
        "",
    ]
    fusion = out_dir / "fusion.md"  # written by ``python -m bench.studies.calibrated --out``
    if fusion.exists():
        lines += ["## Fusion, abstention and reranking (`python -m bench.studies.calibrated`)", "",
                  fusion.read_text(encoding="utf-8").strip(), ""]
    abstention = out_dir / "abstention.md"  # intro + ``python -m bench.studies.calibrated --out`` (query confidence)
    if abstention.exists():
        lines += ["## Abstention: the query's confidence (`python -m bench.studies.calibrated`)", "",
                  abstention.read_text(encoding="utf-8").strip(), ""]
    freshness = out_dir / "freshness.md"  # written by ``python -m bench.studies.freshness``
    if freshness.exists():
        lines += ["## Per-search freshness (`python -m bench.studies.freshness`)", "",
                  freshness.read_text(encoding="utf-8").strip(), ""]
    matrix = out_dir / "matrix.md"  # written by ``python -m bench.matrix``
    if matrix.exists():
        lines += ["## Embedders x fusion x reranking, end to end (`python -m bench.matrix`)", "",
                  matrix.read_text(encoding="utf-8").strip(), ""]
    postgres = out_dir / "POSTGRES.md"  # written by ``python -m bench.postgres``
    if postgres.exists():
        body = postgres.read_text(encoding="utf-8").strip().split("\n", 1)[-1].replace("\n## ", "\n### ")
        lines += ["## SQLite against PostgreSQL (`python -m bench.postgres`)", "", body.strip(), ""]
    for prof, res in runs:
        lines += [f"## Profile `{prof}`", "", env_line(res.get("env") or {}), ""]
        if res.get("notes"):
            lines += [f"- {n}" for n in res["notes"]] + [""]
        lines += ["### Targets", "", _table(["target", "measured", ""], targets(res)), ""]
        if res.get("quality"):
            q = res["quality"]
            lines += ["### Retrieval quality", "",
                      "Search with `min_score=0` (ranking only); LoCoMo: top 10 chunks, category 5 skipped; "
                      "SciFact: top 200 chunks, documents ranked by their best chunk. "
                      f"rank-bm25 tokenisation: {q.get('tokenization')}.", "", quality_section(q), ""]
        if res.get("speed"):
            lines += ["### Speed and scale", "",
                      "Generated workspaces (daily notes, session archives, topic notes, MEMORY.md; "
                      f"{int(100 * (_get(res, 'config', 'zh_share') or 0.25))}% Chinese files). Search: "
                      "default `max_results=6`, `min_score=0.35`, warm, 10 warm-up queries; "
                      "recall@10 is against exact search over the same vectors.", "",
                      speed_section(res["speed"]), ""]
        for img in plots(res, out_dir, prof):
            lines += [f"![{img}]({img})", ""]
    page = out_dir / "RESULTS.md"
    page.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return page
