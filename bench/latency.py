"""Latencies the tests pin as behaviour and no longer time: how soon the watcher reports an edit and stops, how long
it takes to set up over a large tree, how soon a watched edit is searchable, how long a 1 MB query takes, and how
close to its ``query_timeout`` a provider call against a server that never answers gives up.

    python -m bench.latency                        # about half a minute
    python -m bench.latency --edits 5 --dirs 2000 --json bench/results/latency.json

Prints one line per measure (median and worst of ``--edits`` repeats where it repeats); ``--json`` also writes
them. Real files, the real watcher, a real index and a real socket; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from clawmem_core import MemoryConfig, MemoryIndex
from clawmem_core.watcher import MemoryWatcher


def _wait(predicate: Callable[[], bool], timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.002)
    return predicate()


def _summary(seconds: list[float]) -> dict[str, float]:
    return {"median_s": statistics.median(seconds), "max_s": max(seconds), "n": len(seconds)}


def watcher_report(root: Path, edits: int, debounce_ms: int) -> dict[str, float]:
    """From an append to a memory file to the watcher's callback with it (the debounce included)."""
    ws = root / "watch-ws"
    (ws / "memory").mkdir(parents=True)
    target = ws / "memory" / "note.md"
    target.write_text("# Note\n")
    got = threading.Event()
    seconds = []
    with MemoryWatcher.for_workspace(ws, lambda paths: got.set(), debounce_ms=debounce_ms):
        for i in range(edits):
            got.clear()
            started = time.perf_counter()
            with open(target, "a") as handle:
                handle.write(f"line {i}\n")
            if got.wait(60):
                seconds.append(time.perf_counter() - started)
    return _summary(seconds)


def watcher_stop(root: Path, repeats: int) -> dict[str, float]:
    """``stop()`` of a running watcher, joined."""
    ws = root / "stop-ws"
    (ws / "memory").mkdir(parents=True)
    seconds = []
    for _ in range(repeats):
        watcher = MemoryWatcher.for_workspace(ws, lambda paths: None).start()
        time.sleep(0.3)  # in its idle wait
        started = time.perf_counter()
        watcher.stop()
        seconds.append(time.perf_counter() - started)
    return _summary(seconds)


def watcher_setup(root: Path, dirs: int) -> dict[str, float]:
    """``start()`` over an extra path of ``dirs`` directories (one inotify watch each)."""
    big = root / "big"
    for i in range(dirs):
        os.makedirs(big / f"d{i // 100:03d}" / f"e{i % 100:03d}", exist_ok=True)
    ws = root / "setup-ws"
    (ws / "memory").mkdir(parents=True)
    started = time.perf_counter()
    watcher = MemoryWatcher.for_workspace(ws, lambda paths: None, [str(big)]).start()
    setup = time.perf_counter() - started
    polling = watcher.polling
    watcher.stop()
    return {"seconds": setup, "directories": dirs, "polling": polling}


def searchable_after_edit(root: Path, edits: int, debounce_ms: int) -> dict[str, float]:
    """From an append to a watched note to the first search that finds it (searches do not sync themselves)."""
    ws = root / "fresh-ws"
    (ws / "memory").mkdir(parents=True)
    note = ws / "memory" / "notes.md"
    note.write_text("# Notes\n\n- The build server is called hopper.\n", encoding="utf-8")
    cfg = MemoryConfig.from_dict({"provider": "none", "sync": {"watch_debounce_ms": debounce_ms, "on_search": False}})
    seconds = []
    with MemoryIndex(ws, config=cfg, state_dir=root / "fresh-state") as mem:
        mem.watch()
        mem.sync()
        for i in range(edits):
            word = f"quokka{i}x"
            started = time.perf_counter()
            with open(note, "a", encoding="utf-8") as handle:
                handle.write(f"- The mascot of week {i} is {word}.\n")
            if _wait(lambda: bool(mem.search(word, record=False))):
                seconds.append(time.perf_counter() - started)
    return _summary(seconds)


def huge_query(root: Path, repeats: int) -> dict[str, float]:
    """A 1 MB query against a small hybrid index (hash vectors)."""
    from clawmem_core.testing import HashEmbedder

    ws = root / "query-ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Preferences\n\nI like jazz music and espresso.\n", encoding="utf-8")
    (ws / "memory" / "2026-01-05.md").write_text("# Standup\n\nDeployed billing to kubernetes.\n", encoding="utf-8")
    query = ("jazz espresso kubernetes " * 45000)[:1_000_000]
    seconds = []
    with MemoryIndex(ws, embedder=HashEmbedder(), state_dir=root / "query-state") as mem:
        mem.sync()
        for _ in range(repeats):
            started = time.perf_counter()
            mem.search(query, record=False)
            seconds.append(time.perf_counter() - started)
    return _summary(seconds)


def provider_timeout(repeats: int, query_timeout: float) -> dict[str, Any]:
    """``embed_query`` through the OpenAI client against a server that accepts and never answers."""
    try:
        from clawmem_core.embeddings.openai import OpenAIEmbedder
        from clawmem_core.embeddings.retry import RetryPolicy
        from clawmem_core.errors import EmbeddingError
    except ImportError as exc:  # the openai extra is not installed
        return {"skipped": str(exc)}
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            held.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    emb = OpenAIEmbedder(api_key="bench", base_url=url, timeout=60.0, query_timeout=query_timeout,
                         retry=RetryPolicy(sleep=lambda s: None, rand=lambda: 0.0))
    seconds = []
    try:
        for _ in range(repeats):
            started = time.perf_counter()
            try:
                emb.embed_query("slow")
            except EmbeddingError:
                seconds.append(time.perf_counter() - started)
    finally:
        listener.close()
        for conn in held:
            conn.close()
    return {**_summary(seconds), "query_timeout_s": query_timeout} if seconds else {"skipped": "never timed out"}


def run(edits: int = 5, dirs: int = 2000, debounce_ms: int = 200, query_timeout: float = 0.2) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="clawmem-latency-") as tmp:
        root = Path(tmp)
        return {
            "debounce_ms": debounce_ms,
            "watcher report": watcher_report(root, edits, debounce_ms),
            "watcher stop": watcher_stop(root, edits),
            "watcher setup": watcher_setup(root, dirs),
            "searchable after an edit": searchable_after_edit(root, edits, debounce_ms),
            "1 MB query": huge_query(root, max(1, edits // 2)),
            "provider query timeout": provider_timeout(max(1, edits // 2), query_timeout),
        }


def describe(results: dict[str, Any]) -> list[str]:
    lines = []
    for name, r in results.items():
        if not isinstance(r, dict):
            continue
        if "skipped" in r:
            lines.append(f"{name:26} skipped: {r['skipped']}")
        elif "median_s" in r:
            extra = f" (query_timeout {r['query_timeout_s']:g} s)" if "query_timeout_s" in r else ""
            lines.append(f"{name:26} median {r['median_s'] * 1000:8.1f} ms   max {r['max_s'] * 1000:8.1f} ms"
                         f"   n={r['n']}{extra}")
        else:
            lines.append(f"{name:26} {r['seconds'] * 1000:8.1f} ms for {r['directories']} directories"
                         + (" (polling)" if r["polling"] else ""))
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--edits", type=int, default=5, help="repeats of each repeated measure")
    ap.add_argument("--dirs", type=int, default=20_000, help="directories under the extra path of the setup measure")
    ap.add_argument("--debounce-ms", type=int, default=200)
    ap.add_argument("--query-timeout", type=float, default=0.2)
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    args = ap.parse_args(argv)
    results = run(args.edits, args.dirs, args.debounce_ms, args.query_timeout)
    print(f"debounce {args.debounce_ms} ms, load {_load()}")
    for line in describe(results):
        print(line)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))
    return 0


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


if __name__ == "__main__":
    raise SystemExit(main())
