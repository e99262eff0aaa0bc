"""What searches cost while the index makes its vectors in the background: search p50 and walks
per search during the vector phase, with the change journal trusted through the index's own
vector writes (now) against every write counting as another writer's (before).

One long-lived ``MemoryIndex`` over a generated workspace: its keyword phase runs first, then its
vector phase runs in the background (a hashing embedder that sleeps ``--batch-ms`` per group of
chunks, standing in for a model or an API) while the same index is searched, the two checks
alternating query by query so that the ratio comes from one run on a shared machine:

- ``before``: any commit since the last walk costs a walk (the vector phase's batches included);
- ``now``: commits by the index's own vector phase do not (another writer's still do).

An index with no freshness check (``sync.on_search = false``), searched in the same rotation,
gives the floor (``off``). Runs on SQLite and on PostgreSQL (an embedded server; the store tells
the index's own commits from other connections' through ``Store.others_version()`` on both).

    python -m bench.studies.freshness_vectors                      # about 4k files, 10k chunks, both stores
    python -m bench.studies.freshness_vectors --chunks 2500 --queries 60 --stores postgres

Writes ``bench/results/freshness_vectors.json`` and ``freshness_vectors.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from clawmem_core import MemoryConfig, MemoryIndex
from clawmem_core.testing import HashEmbedder

from .freshness import RESULTS, load, workspace

SYSTEMS = ["off", "before", "now"]


class SlowHash(HashEmbedder):
    """Hash vectors, ``delay`` seconds per batch of documents (queries answer at once)."""

    def __init__(self, delay: float) -> None:
        super().__init__(dims=64)
        self.delay = delay

    def _embed_documents(self, texts: list[str]) -> list[list[float]]:
        time.sleep(self.delay)
        return super()._embed_documents(texts)


def run(work: Path, chunks: int, queries: int, batch_ms: float, url: str | None = None) -> dict[str, Any]:
    """One timed run on SQLite, or on the PostgreSQL database at ``url`` (emptied first)."""
    ws, manifest = workspace(work, chunks)
    state = work / f"vectors-state-{chunks}{'-pg' if url else ''}"
    if state.exists():
        import shutil

        shutil.rmtree(state)
    store = {"store": {"url": url}} if url else {}
    emb = SlowHash(batch_ms / 1000)
    mem = MemoryIndex(ws, embedder=emb, state_dir=state, config=MemoryConfig.from_dict(store))
    mem.fresh_budget = 60.0
    quiet = MemoryConfig.from_dict({"sync": {"on_search": False, "on_session_start": False}, **store})
    off = MemoryIndex(ws, embedder=SlowHash(0), config=quiet, state_dir=state)
    walks = {n: 0 for n in SYSTEMS}
    times: dict[str, list[float]] = {n: [] for n in SYSTEMS}
    current = ["off"]
    try:
        mem.sync(vectors=False)
        total = mem._store.vector_counts().total
        scan = mem._syncer.scan

        def counting(*a: Any, **k: Any) -> Any:
            walks[current[0]] += 1
            return scan(*a, **k)

        mem._syncer.scan = counting  # type: ignore[method-assign]
        qs = (manifest["queries"] * 10)[:queries]
        for q in qs[:3]:  # the journal starts on the second search; the first starts the vector phase
            mem.search(q)
            off.search(q)
        walks.update({n: 0 for n in SYSTEMS})  # the first walks (and the session-start sync's) are not timed
        load_before = load()
        i = 0
        while i < len(qs) and mem._store.vector_counts().done < total:
            q = qs[i]
            order = SYSTEMS[i % 3:] + SYSTEMS[: i % 3]
            for name in order:
                current[0] = name
                at = mem._freshness.fresh_at
                if name == "before" and at is not None:  # forget whose commits they were
                    mem._freshness.fresh_at = (at[0], at[1], None, None)
                t = time.perf_counter()
                (off if name == "off" else mem).search(q)
                times[name].append(time.perf_counter() - t)
                if name == "before" and at is not None and mem._freshness.fresh_at[2] is None:
                    mem._freshness.fresh_at = at  # no walk: leave the state as it was
            i += 1
        done = mem._store.vector_counts().done
        load_after = load()
    finally:
        off.close()
        mem.close()
    n = len(times["now"])
    p50 = {k: statistics.median(v) * 1000 for k, v in times.items()} if n else {}
    return {
        "store": "postgres" if url else "sqlite", "files": manifest["files"], "chunks": total, "queries": n, "batch_ms": batch_ms,
        "vectors_done_at_end": done, "p50_ms": p50,
        "p90_ms": {k: sorted(v)[int(0.9 * (len(v) - 1))] * 1000 for k, v in times.items()} if n else {},
        "ratio_to_off": {k: p50[k] / p50["off"] for k in SYSTEMS} if n else {},
        "walks_per_search": {k: walks[k] / n for k in SYSTEMS} if n else {},
        "load_before": load_before, "load_after": load_after, "cpus": os.cpu_count(),
    }


def markdown(runs: list[dict[str, Any]]) -> str:
    r0 = runs[0]
    lines = [
        "Searches during the vector phase: one `MemoryIndex` over a generated workspace making its vectors in the "
        f"background (hash vectors, {r0['batch_ms']:.0f} ms per group of chunks), searched with the journal trusted "
        "through its own vector writes (`now`) and with every commit counted as another writer's (`before`), "
        "alternating query by query; `off` is an index with no freshness check searched in the same rotation. "
        "PostgreSQL: an embedded server on a local socket. "
        f"{r0['cpus']} CPUs shared with other work. Regenerate with `python -m bench.studies.freshness_vectors`.",
        "",
        "| store | files (chunks) | searches | `off` p50 ms | `before` p50 ms (x off) | `now` p50 ms (x off) | "
        "walks per search before / now | vectors made | load |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        lines.append(
            f"| {r.get('store', 'sqlite')} | {r['files']:,} ({r['chunks']:,}) | {r['queries']} | {r['p50_ms']['off']:.2f} | "
            f"{r['p50_ms']['before']:.2f} ({r['ratio_to_off']['before']:.2f}x) | "
            f"{r['p50_ms']['now']:.2f} ({r['ratio_to_off']['now']:.2f}x) | "
            f"{r['walks_per_search']['before']:.2f} / {r['walks_per_search']['now']:.2f} | "
            f"{r['vectors_done_at_end']:,} of {r['chunks']:,} | {r['load_before']} → {r['load_after']} |")
    lines += ["", "Vectors made: by the end of the timed searches (the searches stop when the vector phase ends).", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chunks", type=int, default=10000, help="generated workspace size (10000: about 4k files)")
    ap.add_argument("--queries", type=int, default=150, help="timed searches per system, at most")
    ap.add_argument("--batch-ms", type=float, default=50.0, help="embedding time per group of chunks")
    ap.add_argument("--stores", default="sqlite,postgres", help="stores to run, in order (sqlite, postgres)")
    ap.add_argument("--work", type=Path, default=RESULTS / "raw" / "freshness")
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args(argv)
    a.work.mkdir(parents=True, exist_ok=True)
    stores = [x.strip() for x in a.stores.split(",") if x.strip()]
    if not stores or set(stores) - {"sqlite", "postgres"}:
        raise SystemExit("--stores takes sqlite, postgres or both")
    runs = []
    for kind in stores:
        if kind == "sqlite":
            r = run(a.work, a.chunks, a.queries, a.batch_ms)
        else:
            from ..postgres import Server

            server = Server()
            try:
                r = run(a.work, a.chunks, a.queries, a.batch_ms, url=server.database("freshness_vectors"))
            finally:
                server.close()
        if not r["queries"]:
            raise SystemExit(f"{kind}: the vector phase ended before any timed search: raise --chunks or --batch-ms")
        print(f"{kind}: {r['files']:,} files ({r['chunks']:,} chunks), {r['queries']} searches each, load "
              f"{r['load_before']} -> {r['load_after']}")
        for n in SYSTEMS:
            print(f"  {n:7s} p50 {r['p50_ms'][n]:8.2f} ms  p90 {r['p90_ms'][n]:8.2f} ms  "
                  f"{r['ratio_to_off'][n]:5.2f}x off  walks/search {r['walks_per_search'][n]:.2f}")
        runs.append(r)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "freshness_vectors.json").write_text(json.dumps({"runs": runs}, indent=2) + "\n")
    (a.out / "freshness_vectors.md").write_text(markdown(runs), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
