"""Two-phase indexing (SPEC 6): keyword rows for every file first, vectors after. A search answers
as soon as the keyword phase is done and says how far the vectors are; a killed vector phase
carries on where it stopped; ``sync()`` reports both phases through its progress callback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from clawmem_core import MemoryConfig, MemoryIndex
from clawmem_core.calibration import BACKGROUND_TEXTS
from clawmem_core.progress import SyncProgress
from clawmem_core.testing import HashEmbedder
from clawmem_core.tools import search_payload

from .conftest import SAMPLE_FILES, IndexFactory, WorkspaceFactory

REPO = Path(__file__).resolve().parents[2]


class GatedEmbedder(HashEmbedder):
    """Each document batch waits for a permit: :meth:`allow` gives ``n``, :meth:`release` all."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.permits = threading.Semaphore(0)
        self.opened = threading.Event()
        self.waiting = threading.Event()

    def _embed_documents(self, texts: list[str]) -> list[list[float]]:
        if texts and texts[0] in BACKGROUND_TEXTS:  # the calibration passages (a search's) pass
            return super()._embed_documents(texts)
        self.waiting.set()
        if not self.opened.is_set():
            self.permits.acquire(timeout=30)
        return super()._embed_documents(texts)

    def allow(self, n: int) -> None:
        for _ in range(n):
            self.permits.release()

    def release(self) -> None:
        self.opened.set()
        self.allow(100)


def wait_until(predicate: Callable[[], bool], timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


@pytest.fixture
def gated(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> Iterator[tuple[MemoryIndex, GatedEmbedder]]:
    files = SAMPLE_FILES | {f"memory/notes/n{i:02d}.md": f"# Note {i}\n\nThe walrus number {i} likes herring.\n" for i in range(40)}
    files["memory/zh.md"] = "# 笔记\n\n今天和小明玩成语接龙游戏，他赢了。\n"
    ws = make_workspace(files)
    emb = GatedEmbedder()
    mem = open_index(ws, embedder=emb)
    yield mem, emb
    emb.release()  # let a blocked background batch finish so the index can close


def test_search_is_hybrid_where_vectors_exist_while_vectors_are_pending(gated: tuple[MemoryIndex, GatedEmbedder]) -> None:
    mem, emb = gated
    hits = mem.search("kubernetes billing")  # a new index: keywords now, vectors in the background
    assert hits and hits[0].path == "memory/2026-01-05.md"
    assert hits.vectors == {"done": 0, "total": 44}
    assert emb.query_calls == 0  # no vector yet: the query is not embedded
    assert emb.waiting.wait(15)  # the background vector phase has started (and waits)
    assert mem.search("成语")[0].path == "memory/zh.md"
    emb.allow(1)  # one group of 16 chunks (one call), then it waits again
    assert wait_until(lambda: mem.status().vectors == {"done": 16, "total": 44})
    payload = search_payload(mem, "walrus herring")
    assert payload["vectors"] == {"done": 16, "total": 44}
    assert payload["stale"] is False and payload["mode"] == "hybrid"
    assert payload["results"]
    assert emb.query_calls == 1  # hybrid where vectors exist: the query is embedded
    store = mem._store
    hits = mem.search("walrus herring", max_results=100, min_score=0)
    walrus = [h for h in hits if h.path.startswith("memory/notes/")]
    assert len(walrus) == 40  # every note answers, with or without its vector
    pending = store.pending_ids([h.id for h in walrus])
    embedded = [h for h in walrus if h.id not in pending]
    assert embedded and len(pending) >= 24
    assert all(h.vector_score > 0 for h in embedded)  # the vector side took part for those
    # A chunk without its vector takes the mean vector score of those that have theirs.
    mean = sum(h.vector_score for h in embedded) / len(embedded)
    assert all(h.vector_score == pytest.approx(mean) for h in walrus if h.id in pending)
    assert mem.search("成语")[0].path == "memory/zh.md"  # still without its vector, still found first
    emb.release()
    assert wait_until(lambda: mem.status().vectors == {"done": 44, "total": 44})
    hits = mem.search("kubernetes billing")
    assert hits.vectors == {"done": 44, "total": 44}
    assert hits[0].path == "memory/2026-01-05.md" and hits[0].vector_score > 0


def test_sync_without_vectors_then_with(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    ws = make_workspace(SAMPLE_FILES)
    emb = HashEmbedder()
    mem = open_index(ws, embedder=emb, config=MemoryConfig.from_dict({"sync": {"on_search": False}}))
    report = mem.sync(vectors=False)
    assert (report.files_indexed, report.vectors_pending, emb.texts_embedded) == (3, 3, 0)
    assert mem.status().vectors == {"done": 0, "total": 3}
    assert mem.search("espresso")[0].path == "MEMORY.md"
    report = mem.sync()  # nothing changed on disk: only the vectors are left to do
    assert (report.files_indexed, report.vectors_completed, report.vectors_pending) == (0, 3, 0)
    assert emb.texts_embedded == 3
    assert mem.status().vectors == {"done": 3, "total": 3}
    assert mem.sync().vectors_completed == 0 and emb.texts_embedded == 3


def test_keyword_only_mode_reports_no_vectors(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    ws = make_workspace(SAMPLE_FILES)
    mem = open_index(ws, embedder=None, config=MemoryConfig(provider="none"))
    hits = mem.search("espresso")
    assert hits and hits.vectors is None and mem.status().vectors is None
    payload = search_payload(mem, "espresso")
    assert payload["vectors"] is None and payload["stale"] is False


def test_progress_callback_reports_both_phases(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    files = {f"memory/n{i:02d}.md": f"note {i} " + "about the lighthouse keeper " * 30 for i in range(40)}
    ws = make_workspace(files)
    mem = open_index(ws)
    events: list[SyncProgress] = []
    mem.sync(progress=events.append)
    keywords = [e for e in events if e.phase == "keywords"]
    vectors = [e for e in events if e.phase == "vectors"]
    assert events.index(vectors[0]) > events.index(keywords[-1])  # keywords first, then vectors
    assert [e.done for e in keywords] == list(range(41)) and {e.total for e in keywords} == {40}
    assert [e.done for e in vectors] == [0, 16, 32, 40] and {e.total for e in vectors} == {40}
    assert vectors[0].eta is None  # nothing measured yet
    assert all(e.eta is not None and e.eta >= 0 for e in vectors[1:]) and vectors[-1].eta == 0
    assert all(e.unit == "chunks" for e in vectors)
    # Nothing to embed on a second sync; a forced reindex finds every vector in the cache.
    events.clear()
    mem.sync(progress=events.append)
    assert not [e for e in events if e.phase == "vectors"]
    legacy: list[tuple[int, int, str]] = []
    mem.sync(force=True, progress=lambda done, total, label: legacy.append((done, total, label)))
    assert legacy[-1] == (40, 40, "Indexing keywords")
    assert mem.status().vectors == {"done": 40, "total": 40}


def test_watch_reports_each_reindex(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    ws = make_workspace(SAMPLE_FILES)
    mem = open_index(ws, config=MemoryConfig.from_dict({"sync": {"watch_debounce_ms": 100, "on_search": False}}))
    reports: list[Any] = []
    mem.watch(on_sync=reports.append)
    mem.sync()
    (ws / "memory" / "2026-02-01.md").write_text("Met Priya about the Grafana dashboards.\n", encoding="utf-8")
    assert wait_until(lambda: bool(reports))
    report = reports[0]
    assert (report.files_indexed, report.chunks_indexed, report.vectors_completed) == (1, 1, 1)
    from clawmem_core.cli import _reindex_line

    line = _reindex_line(report)
    assert "re-indexed: 1 file indexed, 1 chunk, 1 embedded (" in line and line.endswith("s)")


_KILLED_CHILD = textwrap.dedent("""
    import sys, time
    from clawmem_core import MemoryIndex
    from clawmem_core.testing import HashEmbedder

    class Stalls(HashEmbedder):
        def _embed_documents(self, texts):
            if self.calls == 2:
                print("stalled", self.texts_embedded, flush=True)
                time.sleep(600)  # killed here
            return super()._embed_documents(texts)

    with MemoryIndex(sys.argv[1], embedder=Stalls(), state_dir=sys.argv[2]) as mem:
        mem.sync()
""")


def test_a_killed_vector_phase_resumes_where_it_stopped(make_workspace: WorkspaceFactory, tmp_path: Path) -> None:
    files = {f"memory/n{i:02d}.md": f"note {i} about unique topic t{i}\n" for i in range(50)}
    ws = make_workspace(files)
    state = tmp_path / "state"
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_CHILD, str(ws), str(state)], stdout=subprocess.PIPE,
                            text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("stalled"), line
    embedded_before_kill = int(line.split()[1])
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    proc.stdout.close()
    quiet = MemoryConfig.from_dict({"sync": {"on_search": False, "on_session_start": False}})
    emb = HashEmbedder()
    with MemoryIndex(ws, embedder=emb, state_dir=state, config=quiet) as mem:
        vectors = mem.status().vectors
        assert vectors is not None and 0 < vectors["done"] < vectors["total"] == 50
        assert mem.search("t7 unique topic")[0].path == "memory/n07.md"  # keywords are all there
        calibration = emb.texts_embedded  # the search's calibration passages (it is hybrid where vectors exist)
        assert calibration in (0, len(BACKGROUND_TEXTS))
        report = mem.sync()
        assert report.files_indexed == 0  # the keyword phase had finished
        assert mem.status().vectors == {"done": 50, "total": 50}
    # Every text embedded once over both processes: the cache kept what the killed one did.
    assert embedded_before_kill + emb.texts_embedded - calibration == 50
