"""What the vector phase pays on PostgreSQL for handing its connection back after each statement.

A writing block (the vector phase) used to take one connection from the pool, checked, for its
whole length (``held``); it now takes one for each statement without the pool's check and hands it
back (``per statement``), so that a thread never holds a connection while it embeds. Each round
marks every chunk of one index pending again and runs its vector phase once per way, the order
alternating, with the deterministic hash embedder (vectors from the embedding cache, filled by an
untimed first run: what is timed is the store's side). ``held`` is the old block, put back for the run.

    python -m bench.studies.pg_vector_connections --chunks 3000 --rounds 6

Prints the vector phase's seconds per way, chunks per second and the ratio of medians, with the load,
and writes them to ``bench/results/pg_vector_connections.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

from .freshness import load, workspace
from ..postgres import RAW, Server


@contextlib.contextmanager
def held_blocks() -> Iterator[None]:
    """The writing block as it was: one connection, checked by the pool, for the whole block."""
    from clawmem_core.store import postgres as pg

    real_writing, real_use = pg.PostgresBackend.writing, pg.PostgresBackend._block_connection

    @contextlib.contextmanager
    def writing(self: Any) -> Iterator[None]:
        with real_writing(self):
            try:
                yield
            finally:
                block = pg._writing_block(self._url)
                if block is not None and block.depth == 1 and block.conn is not None:
                    self.pool.putconn(block.conn)
                    block.conn = None

    @contextlib.contextmanager
    def use(self: Any, block: Any) -> Iterator[Any]:
        if block.conn is None:
            block.conn = self.pool.getconn(timeout=30)
        yield block.conn

    pg.PostgresBackend.writing, pg.PostgresBackend._block_connection = writing, use  # type: ignore[method-assign]
    try:
        yield
    finally:
        pg.PostgresBackend.writing, pg.PostgresBackend._block_connection = real_writing, real_use  # type: ignore[method-assign]


def run(chunks: int, rounds: int, url: str | None = None, work: Path = RAW) -> dict[str, Any]:
    """Timed rounds on the database at ``url`` (an embedded server's, started for the run, without it)."""
    from clawmem_core import MemoryIndex
    from clawmem_core.testing import HashEmbedder

    work.mkdir(parents=True, exist_ok=True)
    ws, manifest = workspace(work / "freshness", chunks)
    server = Server() if url is None else None
    times: dict[str, list[float]] = {"held": [], "per statement": []}
    loads = [load()]
    try:
        if server is not None:
            url = server.database("vector_connections")
        cfg = {"store": {"url": url}, "sync": {"on_search": False, "on_session_start": False}}
        state = Path(tempfile.mkdtemp(prefix="clawmem-vconn-", dir=work))
        with MemoryIndex(ws, agent_id="bench", config=cfg, embedder=HashEmbedder(dims=384), state_dir=state) as mem:
            mem.sync()  # (untimed: the vectors go to the embedding cache)
            total = mem._store.vector_counts().total
            import psycopg

            for r in range(rounds):
                for way in (("held", "per statement") if r % 2 == 0 else ("per statement", "held")):
                    with psycopg.connect(url, autocommit=True) as conn:
                        conn.execute("UPDATE clawmem_chunks SET pending = 1, embedding = NULL, dims = NULL "
                                     "WHERE agent = 'bench' AND part = 0")
                        conn.execute("DELETE FROM clawmem_chunks WHERE agent = 'bench' AND part = 1")
                        conn.execute("UPDATE clawmem_agents SET data_version = data_version + 1 WHERE agent = 'bench'")
                    ctx = held_blocks() if way == "held" else contextlib.nullcontext()
                    with ctx:
                        t = time.perf_counter()
                        mem.sync()  # nothing changed on disk: the vector phase alone
                        times[way].append(time.perf_counter() - t)
                    assert mem._store.vector_counts().pending == 0
                loads.append(load())
    finally:
        if server is not None:
            server.close()
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"files": manifest["files"], "chunks": total, "rounds": rounds, "seconds": times, "median_s": med,
            "chunks_per_s": {k: total / v for k, v in med.items()},
            "ratio": med["per statement"] / med["held"], "loads": loads}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chunks", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results" / "pg_vector_connections.md")
    a = ap.parse_args(argv)
    r = run(a.chunks, a.rounds)
    print(f"{r['files']:,} files, {r['chunks']:,} chunks, {r['rounds']} rounds; load {' | '.join(r['loads'])}")
    for k in ("held", "per statement"):
        print(f"  {k:14s} median {r['median_s'][k]:7.2f} s  ({r['chunks_per_s'][k]:7.1f} chunks/s)  "
              f"runs {', '.join(f'{x:.2f}' for x in r['seconds'][k])}")
    print(f"  per statement / held: {r['ratio']:.3f}")
    if a.out is not None:
        a.out.write_text("\n".join([
            "The vector phase on PostgreSQL (embedded server, local socket), its connection held for the whole writing "
            "block (`held`, the old block) against one taken without the pool's check for each statement and handed "
            "back (`per statement`, now), interleaved round by round; vectors from the embedding cache. "
            "Regenerate with `python -m bench.studies.pg_vector_connections`.",
            "",
            "| files (chunks) | rounds | `held` median s (chunks/s) | `per statement` median s (chunks/s) | ratio | load |",
            "|---|---|---|---|---|---|",
            f"| {r['files']:,} ({r['chunks']:,}) | {r['rounds']} | {r['median_s']['held']:.2f} "
            f"({r['chunks_per_s']['held']:.0f}) | {r['median_s']['per statement']:.2f} "
            f"({r['chunks_per_s']['per statement']:.0f}) | {r['ratio']:.3f} | {r['loads'][0]} → {r['loads'][-1]} |",
            "",
        ]), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
