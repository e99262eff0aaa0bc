"""What per-search freshness costs (SPEC 6: a search sees every change that finished before it
started): keyword-search p50 of one long-lived index, with the freshness check and without it, on
generated workspaces of about 1k, 4k and 40k files, with and without a watcher.

Systems, each its own ``MemoryIndex`` over the same index, searched interleaved (query by query,
rotating the order) so that the ratios come from one run on a shared machine:

- ``off``: no freshness check (``sync.on_search = false``, and no sync at session start, whose
  walk would run in the background at any time): the floor;
- ``walk, states fetched``: stat every file, list every directory and fetch every file's indexed
  state per search (the check before the change journal and these caches);
- ``walk``: stat every file; directory listings and file states kept while unchanged (no journal);
- ``walk + watch()``: the same with the file watcher running;
- ``journal``: the default, trusting kernel change notifications (``clawmem_core.journal``);
- ``journal + watch()``: the default with the file watcher running.

Also the no-op ``sync()`` with the file states fetched and kept (SQLite; PostgreSQL with
``--postgres 2500,10000``, on an embedded server).

    python -m bench.studies.freshness                      # 1k, 4k and 40k files; about 5 minutes
    python -m bench.studies.freshness --scales 2500 --queries 20

Writes ``bench/results/freshness.json`` and ``freshness.md`` (included in RESULTS.md by
``python -m bench report``). Generated workspaces and indexes are kept under ``bench/results/raw/``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any, Callable

from clawmem_core import MemoryConfig, MemoryIndex

RESULTS = Path(__file__).resolve().parents[1] / "results"
SYSTEMS = ["off", "walk, states fetched", "walk", "walk + watch()", "journal", "journal + watch()"]
#: Untimed searches per system before the timed ones (the journal is trusted from the third).
WARM_UP = 5


def load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def workspace(work: Path, chunks: int) -> tuple[Path, dict[str, Any]]:
    """A generated workspace (reused), its files aged a day so none is 'just written'."""
    from ..synth import generate

    ws = work / f"ws-{chunks}"
    manifest_path = work / f"ws-{chunks}.json"
    if not manifest_path.exists():
        m = generate(ws, chunks)
        old = time.time() - 86400
        for dirpath, _dirs, names in os.walk(ws):
            for name in names:
                os.utime(os.path.join(dirpath, name), (old, old))
        manifest_path.write_text(json.dumps({"files": m.files, "chunks": m.chunks_estimate,
                                             "queries": m.queries_en[:100] + m.queries_zh[:50]}))
    return ws, json.loads(manifest_path.read_text())


def open_system(name: str, ws: Path, state: Path) -> tuple[MemoryIndex, Callable[[], None]]:
    """The index of system ``name``, and what to run before each of its searches."""
    cfg: dict[str, Any] = {"provider": "none"}
    if name == "off":
        # no session-start sync either: its walk, in a background thread, would land among the timed searches
        cfg["sync"] = {"on_search": False, "on_session_start": False}
    mem = MemoryIndex(ws, config=MemoryConfig.from_dict(cfg), state_dir=state)
    mem.change_journal = name.startswith("journal")
    if name.endswith("watch()"):
        mem.watch()
    before: Callable[[], None] = (lambda: None)
    if name == "walk, states fetched":
        def before() -> None:  # what every search did before: fetch every state, list every directory
            forget_file_states(mem)
    return mem, before


def forget_file_states(mem: MemoryIndex) -> None:
    """Drop the syncer's kept file states and directory listings, as every sync did before they were kept."""
    mem._syncer._states.clear()
    mem._syncer._listings.clear()


def noop_sync_times(mem: MemoryIndex, rounds: int) -> dict[str, list[float]]:
    """Seconds of no-op syncs, alternating: file states fetched again (\"fetched\") and kept (\"kept\")."""
    times: dict[str, list[float]] = {"fetched": [], "kept": []}
    for i in range(2 * rounds):
        kind = "fetched" if i % 2 == 0 else "kept"
        if kind == "fetched":
            forget_file_states(mem)
        t = time.perf_counter()
        mem.sync()
        times[kind].append(time.perf_counter() - t)
    return times


def run_scale(work: Path, chunks: int, queries: int) -> dict[str, Any]:
    ws, manifest = workspace(work, chunks)
    state = work / f"state-{chunks}"
    with MemoryIndex(ws, config=MemoryConfig(provider="none"), state_dir=state) as mem:
        t = time.perf_counter()
        report = mem.sync()
        index_s = time.perf_counter() - t
        # the no-op sync: file states fetched each time, then kept
        noop = noop_sync_times(mem, 5)
    systems = {name: open_system(name, ws, state) for name in SYSTEMS}
    qs = (manifest["queries"] * 10)[:queries]
    times: dict[str, list[float]] = {name: [] for name in SYSTEMS}
    walks = {name: 0 for name in SYSTEMS}
    try:
        for name, (mem, before) in systems.items():  # warm-up: the journal starts on the second search
            for q in qs[:WARM_UP]:
                before()
                mem.search(q)
            scan = mem._syncer.scan

            def counting(*a: Any, _scan: Any = scan, _name: str = name, **k: Any) -> Any:
                walks[_name] += 1
                return _scan(*a, **k)

            mem._syncer.scan = counting  # type: ignore[method-assign]
        load_before = load()
        answers: dict[str, list[list[str]]] = {name: [] for name in SYSTEMS}
        for i, q in enumerate(qs):
            order = SYSTEMS[i % len(SYSTEMS):] + SYSTEMS[: i % len(SYSTEMS)]
            for name in order:
                mem, before = systems[name]
                before()
                t = time.perf_counter()
                hits = mem.search(q)
                times[name].append(time.perf_counter() - t)
                answers[name].append([h.path for h in hits])
        same = all(answers[n] == answers["off"] for n in SYSTEMS)
        journal_ok = all(systems[n][0]._freshness.journal is not None and systems[n][0]._freshness.journal.healthy
                         for n in SYSTEMS if n.startswith("journal"))
    finally:
        for mem, _ in systems.values():
            mem.close()
    p50 = {n: statistics.median(v) * 1000 for n, v in times.items()}
    p90 = {n: sorted(v)[int(0.9 * (len(v) - 1))] * 1000 for n, v in times.items()}
    return {
        "chunks": chunks, "files": report.files_scanned or manifest["files"], "index_seconds": index_s,
        "queries": len(qs), "p50_ms": p50, "p90_ms": p90,
        "ratio_to_off": {n: p50[n] / p50["off"] for n in SYSTEMS},
        "walks_per_search": {n: walks[n] / len(qs) for n in SYSTEMS},
        "noop_sync_ms": {k: statistics.median(v) * 1000 for k, v in noop.items()},
        "same_results": same, "journal_healthy": journal_ok,
        "load_before": load_before, "load_after": load(),
    }


def postgres_noop(work: Path, scales: list[int], rounds: int = 10) -> list[dict[str, Any]]:
    """The no-op ``sync()`` of a keyword-only index in PostgreSQL (embedded server): file states
    fetched (each sync, as before) against kept per data version, interleaved."""
    from ..postgres import Server

    server = Server()
    out = []
    try:
        for chunks in scales:
            ws, manifest = workspace(work, chunks)
            url = server.database(f"fresh_{chunks}")
            cfg = MemoryConfig.from_dict({"provider": "none", "store": {"url": url}})
            with MemoryIndex(ws, agent_id="bench", config=cfg, state_dir=work / f"pg-state-{chunks}") as mem:
                mem.sync()
                times = noop_sync_times(mem, rounds)
            out.append({"chunks": chunks, "files": manifest["files"], "load": load(),
                        **{f"{k}_ms": statistics.median(v) * 1000 for k, v in times.items()}})
            print(f"postgres no-op sync, {manifest['files']:,} files: fetched {out[-1]['fetched_ms']:.1f} ms, "
                  f"kept {out[-1]['kept_ms']:.1f} ms (load {out[-1]['load']})")
    finally:
        server.close()
    return out


def markdown(res: dict[str, Any]) -> str:
    lines = [
        "Keyword search (`provider=\"none\"`), one long-lived `MemoryIndex` per system over the same index, searches "
        "interleaved query by query; p50 in ms, and its ratio to `off` (no freshness check). "
        f"{res['cpus']} CPUs shared with other work; load (1/5/15 min) before and after each scale in the last column. "
        "Regenerate with `python -m bench.studies.freshness`.",
        "",
        "| files (chunks) | " + " | ".join(f"`{n}`" for n in SYSTEMS) + " | no-op `sync()` fetched / kept | load |",
        "|---|" + "---|" * len(SYSTEMS) + "---|---|",
    ]
    for r in res["scales"]:
        cells = [f"{r['p50_ms'][n]:.2f} ({r['ratio_to_off'][n]:.1f}x)" for n in SYSTEMS]
        noop = r["noop_sync_ms"]
        lines.append(f"| {r['files']:,} ({r['chunks']:,}) | " + " | ".join(cells)
                     + f" | {noop['fetched']:.1f} / {noop['kept']:.1f} | {r['load_before']} → {r['load_after']} |")
    lines += [
        "",
        "Walks per search (every memory file stat-ed): "
        + "; ".join(f"{r['files']:,} files: " + ", ".join(f"`{n}` {r['walks_per_search'][n]:.2f}" for n in SYSTEMS[1:])
                    for r in res["scales"]) + ".",
        "Every system returned the same results for every query: "
        + ("yes" if all(r["same_results"] for r in res["scales"]) else "NO") + ".",
    ]
    if res.get("postgres"):
        lines += ["", "No-op `sync()` of a keyword-only index in PostgreSQL (embedded, local socket), file states and "
                  "listings fetched every time (before) against kept per data version, interleaved, p50 ms:", "",
                  "| files (chunks) | fetched | kept | ratio | load |", "|---|---|---|---|---|"]
        for r in res["postgres"]:
            lines.append(f"| {r['files']:,} ({r['chunks']:,}) | {r['fetched_ms']:.1f} | {r['kept_ms']:.1f} | "
                         f"{r['fetched_ms'] / r['kept_ms']:.1f}x | {r['load']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scales", default="2500,10000,100000", help="chunk counts (about 1k, 4k, 40k files)")
    ap.add_argument("--queries", type=int, default=60, help="timed searches per system and scale")
    ap.add_argument("--work", type=Path, default=RESULTS / "raw" / "freshness")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--postgres", default="", help="chunk counts for the PostgreSQL no-op sync (e.g. 2500,10000)")
    a = ap.parse_args(argv)
    a.work.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {"cpus": os.cpu_count(), "scales": []}
    for chunks in [int(x) for x in a.scales.split(",") if x]:
        r = run_scale(a.work, chunks, a.queries)
        res["scales"].append(r)
        print(f"{r['files']:,} files ({chunks:,} chunks), load {r['load_before']} -> {r['load_after']}")
        for n in SYSTEMS:
            print(f"  {n:22s} p50 {r['p50_ms'][n]:8.2f} ms  p90 {r['p90_ms'][n]:8.2f} ms  "
                  f"{r['ratio_to_off'][n]:6.2f}x off  walks/search {r['walks_per_search'][n]:.2f}")
        print(f"  no-op sync(): states fetched {r['noop_sync_ms']['fetched']:.1f} ms, kept {r['noop_sync_ms']['kept']:.1f} ms;"
              f" same results: {r['same_results']}; journal healthy: {r['journal_healthy']}")
    if a.postgres:
        res["postgres"] = postgres_noop(a.work, [int(x) for x in a.postgres.split(",") if x])
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "freshness.json").write_text(json.dumps(res, indent=2) + "\n")
    (a.out / "freshness.md").write_text(markdown(res), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
