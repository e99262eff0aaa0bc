"""One ``MemoryIndex`` shared by threads: parallel searches (tool calls run in worker threads,
``asearch`` uses ``asyncio.to_thread``), searches during ``write()``, ``sync()`` and watcher syncs.
No error of any kind, and every answer is right."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from pathlib import Path
from typing import Callable

import pytest

from clawmem_core import MemoryIndex, SearchResult
from clawmem_core.testing import HashEmbedder

from .conftest import make_workspace

ROUNDS = 25
SEARCHES = 300


def token_of(seed: str, i: int) -> str:
    """A word of :func:`unique_text`'s line ``i`` for ``seed``: it occurs in one file only."""
    return "token" + hashlib.sha256(f"{seed}:{i}".encode()).hexdigest()[:10]


def keyword_paths(hits: list[SearchResult]) -> list[str]:
    """Paths of the hits that matched the query's words (the test embedder's vectors are noise
    for a made-up word)."""
    return [h.path for h in hits if h.text_score > 0]


def run_threads(targets: list[Callable[[], None]]) -> list[str]:
    errors: list[str] = []
    start = threading.Barrier(len(targets))

    def wrap(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            start.wait()
            try:
                fn()
            except BaseException as exc:  # any error counts, assertion or apsw
                errors.append(f"{threading.current_thread().name}: {type(exc).__name__}: {exc}")

        return run

    threads = [threading.Thread(target=wrap(fn), name=f"t{i}") for i, fn in enumerate(targets)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    return errors


@pytest.mark.parametrize("vector", ["sqlite-vec", "numpy"])
def test_threads_search_write_and_sync_one_index(tmp_path: Path, vector: str) -> None:
    ws = make_workspace(tmp_path / "ws", 10, "th")
    config = {"store": {"vector": {"enabled": vector == "sqlite-vec"}}, "sync": {"watch_debounce_ms": 50}}
    with MemoryIndex(ws, embedder=HashEmbedder(), state_dir=tmp_path / "state", config=config) as mem:
        mem.sync()
        mem.watch()

        def searcher(offset: int) -> Callable[[], None]:
            def run() -> None:
                for r in range(ROUNDS):
                    i = (r + offset) % 10
                    hits = mem.search(token_of(f"th{i}", r % 30), max_results=10, min_score=0)
                    assert keyword_paths(hits)[:1] == [f"memory/th{i:03d}.md"], (i, hits)
                    hits = mem.search("jazz espresso", max_results=3, min_score=0)
                    assert hits and hits[0].path == "MEMORY.md", [h.path for h in hits]

            return run

        def async_searcher() -> None:
            async def main() -> None:
                for r in range(ROUNDS):
                    found = await asyncio.gather(*(mem.asearch(token_of(f"th{i}", r), 10, 0) for i in range(3)))
                    for i, hits in enumerate(found):
                        assert keyword_paths(hits)[:1] == [f"memory/th{i:03d}.md"], (i, hits)

            asyncio.run(main())

        def writer() -> None:
            for r in range(ROUNDS // 2):
                word = f"zebrawrite{r}x"
                mem.write(f"The {word} note of round {r}.")
                hits = mem.search(word, max_results=3, min_score=0)  # write() indexes before it returns
                assert hits and hits[0].path.startswith("memory/2") and word in hits[0].snippet

        def editor() -> None:
            target = ws / "memory" / "edited.md"
            for r in range(ROUNDS // 2):
                word = f"okapiedit{r}y"
                with open(target, "a", encoding="utf-8") as f:
                    f.write(f"- the {word} line\n")
                mem.sync()
                hits = mem.search(word, max_results=3, min_score=0)
                assert hits and hits[0].path == "memory/edited.md" and word in hits[0].snippet

        errors = run_threads([searcher(0), searcher(3), searcher(7), async_searcher, writer, editor])
        assert errors == []
        status = mem.status()
        assert status.files == 13 and status.chunks > 0


def test_threads_share_a_keyword_only_index(tmp_path: Path) -> None:
    """Keyword-only mode (in-process BM25 statistics, keyword token, metadata memo) under threads."""
    ws = make_workspace(tmp_path / "ws", 10, "kw")
    with MemoryIndex(ws, state_dir=tmp_path / "state", config={"provider": "none"}) as mem:
        mem.sync()

        def searcher(offset: int) -> Callable[[], None]:
            def run() -> None:
                for r in range(ROUNDS * 2):
                    i = (r + offset) % 10
                    hits = mem.search(token_of(f"kw{i}", r % 30), max_results=2, min_score=0)
                    assert hits and hits[0].path == f"memory/kw{i:03d}.md"

            return run

        def writer() -> None:
            for r in range(ROUNDS // 2):
                mem.write(f"keyword only note quagga{r}z")
                assert mem.search(f"quagga{r}z", min_score=0)[0].path.startswith("memory/2")

        assert run_threads([searcher(0), searcher(4), searcher(8), writer]) == []


def test_parallel_searches_on_one_index(tmp_path: Path) -> None:
    """Parallel tool calls: several threads searching one index at once (no sync running)."""
    ws = make_workspace(tmp_path / "ws", 10, "ps")
    with MemoryIndex(ws, embedder=HashEmbedder(), state_dir=tmp_path / "state") as mem:
        mem.sync()

        def searcher(offset: int) -> Callable[[], None]:
            def run() -> None:
                for r in range(SEARCHES):
                    i = (r + offset) % 10
                    hits = mem.search(token_of(f"ps{i}", r % 30), max_results=10, min_score=0)
                    assert keyword_paths(hits)[:1] == [f"memory/ps{i:03d}.md"], (i, hits)

            return run

        assert run_threads([searcher(k) for k in range(4)]) == []


def test_store_call_waiting_for_the_write_lock_does_not_break_other_threads(tmp_path: Path) -> None:
    """A store call blocked inside SQLite (here waiting for another connection's write lock)
    while a second thread uses the same store: the second waits its turn instead of failing."""
    import time

    import apsw

    from clawmem_core.store.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "s.sqlite", vector_enabled=False)
    store.set_meta({"identity": 1})
    other = apsw.Connection(str(tmp_path / "s.sqlite"))
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    got: dict[str, object] = {}

    def write() -> None:
        store.set_value("last_scan", "1.0")  # waits in SQLite's busy handler

    def read() -> None:
        time.sleep(0.3)  # let the writer enter SQLite first
        got["meta"] = store.get_meta()
        got["value"] = store.get_value("last_scan")

    def release() -> None:
        time.sleep(0.8)
        other.execute("COMMIT")

    try:
        assert run_threads([write, read, release]) == []
    finally:
        other.close()
        store.close()
    assert got == {"meta": {"identity": 1}, "value": "1.0"}
