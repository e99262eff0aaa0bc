"""Indexing speed, SQLite against PostgreSQL, side by side under the same load.

    python -m bench.studies.pg_indexing --scale 10000 --rounds 2

Each round indexes the same generated workspace from nothing into a new SQLite file and into a new
PostgreSQL database (the embedded server of :mod:`bench.postgres`), one store after
the other, the order alternating between rounds, with the deterministic 384-d hash embedder (the
same work for both stores). Timed apart: the keyword phase (read, chunk, write for keyword search)
and the vector phase (embed and write the vectors). Results go to ``bench/results/pg_indexing.json``
and ``bench/results/PG_INDEXING.md``; the workspace is generated once under ``bench/results/raw/``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from ..postgres import RAW, RESULTS, Server, log

KINDS = ("sqlite", "postgres")


def index_once(kind: str, ws: Path, url: str, agent: str) -> dict[str, Any]:
    """Index ``ws`` from nothing into a new store of ``kind``: seconds of each phase, chunks, load."""
    from clawmem_core import MemoryIndex
    from clawmem_core.testing import HashEmbedder

    state = Path(tempfile.mkdtemp(prefix=f"clawmem-index-{kind}-", dir=RAW))
    cfg = {"store": {"url": url} if kind == "postgres" else {}, "sync": {"on_search": False}}
    load = os.getloadavg()[0]
    with MemoryIndex(ws, agent_id=agent, config=cfg, embedder=HashEmbedder(dims=384), state_dir=state) as mem:
        t0 = time.perf_counter()
        mem.sync(vectors=False)
        t1 = time.perf_counter()
        mem.sync()
        t2 = time.perf_counter()
        chunks = mem.status().chunks
    return {"chunks": chunks, "keyword_s": t1 - t0, "vector_s": t2 - t1, "total_s": t2 - t0,
            "chunks_per_second": chunks / (t2 - t0), "load": [load, os.getloadavg()[0]]}


def run(scale: int, rounds: int) -> dict[str, Any]:
    from ..synth import generate

    ws = RAW / "pg-speed" / f"ws-{scale}"
    if not ws.exists():
        log(f"generating a workspace of about {scale} chunks")
        generate(ws, scale)
    server = Server()
    try:
        runs: dict[str, list[dict[str, Any]]] = {k: [] for k in KINDS}
        for r in range(rounds):
            # a new database each round: the embedding cache is shared by a database's agents
            url = server.database(f"indexing_{scale}_{r}")
            for kind in (KINDS if r % 2 == 0 else KINDS[::-1]):
                got = index_once(kind, ws, url, "bench")
                runs[kind].append(got)
                log(f"round {r} {kind}: {got['chunks']} chunks, keyword {got['keyword_s']:.1f} s, vector "
                    f"{got['vector_s']:.1f} s, {got['chunks_per_second']:.0f} chunks/s (load {got['load'][0]:.1f})")
    finally:
        server.close()
    out: dict[str, Any] = {"scale": scale, "rounds": rounds, "runs": runs}
    for kind in KINDS:
        out[kind] = {k: statistics.median(r[k] for r in runs[kind])
                     for k in ("keyword_s", "vector_s", "total_s", "chunks_per_second")}
    out["ratio"] = {
        "total": out["sqlite"]["chunks_per_second"] / out["postgres"]["chunks_per_second"],
        "keyword": out["postgres"]["keyword_s"] / out["sqlite"]["keyword_s"],
        "vector": out["postgres"]["vector_s"] / out["sqlite"]["vector_s"],
        "per_round": [lite["total_s"] and pg["total_s"] / lite["total_s"]
                      for lite, pg in zip(runs["sqlite"], runs["postgres"])],
    }
    return out


def report(data: dict[str, Any]) -> str:
    lines = ["# Indexing: SQLite against PostgreSQL", "",
             "Regenerate with `python -m bench.studies.pg_indexing`. The same generated workspace indexed from nothing into "
             "each store, one after the other, the order alternating between rounds (the machine's 2 cores are "
             "shared with other jobs: read the ratios, measured side by side; the load average is shown). "
             "Deterministic 384-d hash embedder, so both stores embed the same texts at the same cost; each round "
             "starts from an empty index and an empty embedding cache.", "",
             "| round | store | chunks | keyword phase s | vector phase s | chunks/s | load average |",
             "|---|---|---|---|---|---|---|"]
    for r in range(data["rounds"]):
        for kind in KINDS:
            x = data["runs"][kind][r]
            lines.append(f"| {r} | {kind} | {x['chunks']} | {x['keyword_s']:.1f} | {x['vector_s']:.1f} | "
                         f"{x['chunks_per_second']:.0f} | {x['load'][0]:.1f} -> {x['load'][1]:.1f} |")
    ratio = data["ratio"]
    lines += ["", f"Median over the rounds: PostgreSQL indexes {data['postgres']['chunks_per_second']:.0f} chunks/s against "
              f"SQLite's {data['sqlite']['chunks_per_second']:.0f}: {ratio['total']:.2f}x slower (per round: "
              + ", ".join(f"{x:.2f}x" for x in ratio["per_round"]) + f"); keyword phase {ratio['keyword']:.2f}x, "
              f"vector phase {ratio['vector']:.2f}x SQLite's time.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.studies.pg_indexing")
    ap.add_argument("--scale", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args(argv)
    RAW.mkdir(parents=True, exist_ok=True)
    data = run(a.scale, a.rounds)
    (RESULTS / "pg_indexing.json").write_text(json.dumps(data, indent=2), encoding="utf-8")
    (RESULTS / "PG_INDEXING.md").write_text(report(data), encoding="utf-8")
    print(report(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
