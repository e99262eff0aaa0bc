"""Fresh results in a long-lived index (SPEC 6): a search sees every change that finished before
it started when the sync it needs is small; otherwise it answers from the index and says so
(``stale``), while a background sync catches up."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable

from clawmem_core import MemoryConfig, MemoryIndex
from clawmem_core.testing import HashEmbedder
from clawmem_core.tools import search_payload

from .conftest import SAMPLE_FILES, IndexFactory, WorkspaceFactory


def wait_until(predicate: Callable[[], bool], timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def paths(mem: MemoryIndex, query: str) -> set[str]:
    return {h.path for h in mem.search(query)}


def test_first_search_after_an_edit_sees_it(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    ws = make_workspace(SAMPLE_FILES)
    emb = HashEmbedder()
    mem = open_index(ws, embedder=emb)
    mem.fresh_budget = 60.0  # a loaded machine must not turn this into a test of speed
    mem.sync()
    assert paths(mem, "quokka") == set()
    with open(ws / "memory" / "2026-01-05.md", "a", encoding="utf-8") as fh:
        fh.write("The office mascot is a quokka named Pip.\n")
    hits = mem.search("quokka mascot")  # no watcher, no sync(): the search syncs first
    assert [h.path for h in hits][:1] == ["memory/2026-01-05.md"] and "quokka" in hits[0].snippet
    assert hits.stale is False
    assert hits[0].vector_score > 0  # the changed file's vectors came within the budget
    assert hits.vectors == {"done": 3, "total": 3}
    # A new file (Chinese), and a deleted one, on the very next search.
    (ws / "memory" / "2026-01-06.md").write_text("今天和小明玩成语接龙游戏。\n", encoding="utf-8")
    assert paths(mem, "成语") == {"memory/2026-01-06.md"}
    (ws / "memory" / "projects" / "roadmap.md").unlink()
    assert paths(mem, "designer roadmap") == set()
    payload = search_payload(mem, "quokka mascot")
    assert payload["stale"] is False and payload["results"]


def test_keyword_only_index_sees_edits_too(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    ws = make_workspace(SAMPLE_FILES)
    mem = open_index(ws, embedder=None, config=MemoryConfig(provider="none"))
    mem.sync()
    (ws / "MEMORY.md").write_text("# Preferences\n\nI like bebop now.\n", encoding="utf-8")
    hits = mem.search("bebop")
    assert [h.path for h in hits] == ["MEMORY.md"] and hits.stale is False
    assert paths(mem, "espresso") == set()


def test_many_changes_answer_from_the_index_and_say_stale(make_workspace: WorkspaceFactory,
                                                          open_index: IndexFactory) -> None:
    ws = make_workspace(SAMPLE_FILES)
    mem = open_index(ws)
    mem.sync()
    mem.fresh_max_files = 3
    for i in range(5):
        (ws / "memory" / f"2026-03-0{i + 1}.md").write_text(f"Sprint {i}: the narwhal migration.\n", encoding="utf-8")
    hits = mem.search("kubernetes")
    assert hits.stale is True  # answered from the index as it was ...
    assert [h.path for h in hits][:1] == ["memory/2026-01-05.md"]
    payload = search_payload(mem, "narwhal")
    assert payload["stale"] in (True, False)
    # ... while a background sync brings the five files in.
    new = {f"memory/2026-03-0{i + 1}.md" for i in range(5)}
    assert wait_until(lambda: new <= paths(mem, "narwhal migration"))
    hits = mem.search("narwhal migration")
    assert hits.stale is False


def test_a_search_does_not_wait_for_a_long_sync(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    ws = make_workspace(SAMPLE_FILES)
    mem = open_index(ws)
    mem.sync()
    mem.fresh_budget = 0.2
    (ws / "MEMORY.md").write_text("# Preferences\n\nI like bebop now.\n", encoding="utf-8")
    held = threading.Event()
    done = threading.Event()

    def long_sync() -> None:
        with mem._syncing.lock:  # a sync of another thread holds the index (a watcher's, a write's)
            held.set()
            done.wait(10)

    t = threading.Thread(target=long_sync)
    t.start()
    try:
        assert held.wait(5)
        hits = mem.search("espresso")
        assert hits.stale is True and [h.path for h in hits] == ["MEMORY.md"]
    finally:
        done.set()
        t.join()
    assert wait_until(lambda: paths(mem, "bebop") == {"MEMORY.md"})


def test_syncs_on_search_off_reports_known_changes_as_stale(make_workspace: WorkspaceFactory,
                                                            open_index: IndexFactory) -> None:
    ws = make_workspace(SAMPLE_FILES)
    mem = open_index(ws, config=MemoryConfig.from_dict({"sync": {"on_search": False}}))
    mem.sync()
    assert mem.search("espresso").stale is False
    mem.mark_dirty()  # what the watcher does on a change
    assert mem.search("espresso").stale is True
