"""Several processes on one agent's index, on both backends: no duplicates, no partial state after
a kill, and (PostgreSQL) a lost connection mid-sync leaves nothing half-written."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clawmem_core import MemoryIndex
from clawmem_core.errors import StoreError
from clawmem_core.testing import HashEmbedder

WORKER = Path(__file__).resolve().parent / "worker.py"
ROOT = Path(__file__).resolve().parents[2]


def notes(root: Path, n: int, tag: str = "v1") -> Path:
    (root / "memory").mkdir(parents=True, exist_ok=True)
    (root / "MEMORY.md").write_text("# Long term\n\nI like jazz.\n", encoding="utf-8")
    for i in range(n):
        lines = [f"# Note {i} {tag}", ""]
        for j in range(12):
            h = hashlib.sha256(f"{tag}:{i}:{j}".encode()).hexdigest()
            lines.append(f"- {tag} fact {i}.{j}: token{h[:10]} word{h[10:18]} topic{i}x{tag}")
        (root / "memory" / f"n{i:03d}.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def worker(ws: Path, state: Path, store: dict[str, Any], *args: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, str(WORKER), str(ws), str(state), *args]
    if store.get("url"):
        cmd += ["--store", store["url"]]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def wait_for(proc: subprocess.Popen[str], word: str) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(word):
            return
    raise AssertionError(f"worker ended before {word!r}: {proc.stderr.read() if proc.stderr else ''}")


def open_index(ws: Path, state: Path, store: dict[str, Any], model: str = "hash-v1") -> MemoryIndex:
    return MemoryIndex(ws, config={"store": dict(store)}, embedder=HashEmbedder(model=model), state_dir=state)


def same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """Equal fingerprints, scores within float32 noise."""
    return a[:2] == b[:2] and len(a[2]) == len(b[2]) and all(
        x[:2] == y[:2] and abs(x[2] - y[2]) < 1e-5 for x, y in zip(a[2], b[2]))


def fingerprint(mem: MemoryIndex) -> tuple[Any, ...]:
    """What the index holds, as search sees it (files, chunks, and the answer to a few queries)."""
    st = mem.status()
    hits = tuple((r.path, r.start_line, r.score) for q in ("jazz", "topic3xv1", "topic3xv2", "fact 7.2")
                 for r in mem.search(q, max_results=4, min_score=0))
    return st.files, st.chunks, hits


def test_two_processes_syncing_one_agent(tmp_path: Path, store_config: dict[str, Any]) -> None:
    ws = notes(tmp_path / "ws", 24)
    state = tmp_path / "state"
    procs = [worker(ws, state, store_config, "--sleep", "0.02") for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    with open_index(ws, state, store_config) as mem:
        got = fingerprint(mem)
        assert mem.sync().files_indexed == 0
    with open_index(ws, tmp_path / "fresh", {}) as ref:
        ref.sync()
        assert same(got, fingerprint(ref))


@pytest.mark.parametrize("phase", ["keywords", "vectors"])
@pytest.mark.parametrize("force", [True, False], ids=["full", "incremental"])
def test_kill_mid_sync_leaves_old_or_new_and_the_next_sync_finishes(tmp_path: Path, store_config: dict[str, Any],
                                                                    force: bool, phase: str) -> None:
    ws = notes(tmp_path / "ws", 30)
    state = tmp_path / "state"
    with open_index(ws, state, store_config) as mem:
        mem.sync()
        before = fingerprint(mem)
    if not force:
        notes(ws, 30, tag="v2")  # every file changes
    # full: a model change rebuilds everything into a new generation; incremental: every file changed
    model = "hash-v2" if force else "hash-v1"
    pause = ["--pause-at-file", "-1"] if phase == "keywords" else ["--pause-after", "2"]
    proc = worker(ws, state, store_config, *pause, "--model", model)
    wait_for(proc, "paused")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    if force and phase == "keywords":
        with open_index(ws, state, store_config, model="hash-v1") as mem:
            assert same(fingerprint(mem), before)  # the new generation never became visible
    with open_index(ws, state, store_config, model=model) as mem:
        files = mem._store.file_states("memory")
        assert len(files) == 31
        vectors = mem._store.vector_counts()
        if phase == "vectors":  # the keyword phase had finished (a full one: switched in whole)
            assert vectors.total == 31 and 0 <= vectors.done < 31
        rep = mem.sync()
        if phase == "keywords":
            assert rep.files_indexed > 0 and rep.full == force
        else:
            assert rep.files_indexed == 0 and not rep.full and rep.vectors_completed == 31 - vectors.done
        after = fingerprint(mem)
        assert mem._store.remove_leftovers() == 0  # nothing left behind by the killed rebuild
    with open_index(ws, tmp_path / "fresh", {}, model=model) as ref:
        ref.sync()
        assert same(after, fingerprint(ref))


def _cut(url: str) -> None:
    """Drop every other connection of this database from the server side."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                     "WHERE datname = current_database() AND pid <> pg_backend_pid()")


class _Cutter(HashEmbedder):
    """Drops every connection of this database from the server side at its second batch."""

    def __init__(self, url: str, model: str) -> None:
        super().__init__(model=model)
        self.url = url

    def _embed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.calls == 1:
            import psycopg

            with psycopg.connect(self.url, autocommit=True) as conn:
                conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                             "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        return super()._embed_documents(texts)


def test_connection_loss_mid_sync(tmp_path: Path, pg_url: str) -> None:
    ws = notes(tmp_path / "ws", 30)
    state = tmp_path / "state"
    store = {"url": pg_url}
    quiet = {"store": store, "sync": {"on_search": False, "on_session_start": False}}
    with open_index(ws, state, store) as mem:
        mem.sync()
        before = fingerprint(mem)
    # a model change: the full reindex loses every connection half-way through its keyword phase
    with MemoryIndex(ws, config={"store": store}, embedder=HashEmbedder(model="hash-v2"), state_dir=state) as mem:
        with pytest.raises(StoreError):
            mem.sync(progress=lambda ev: ev.phase == "keywords" and ev.done == 15 and _cut(pg_url))
        with MemoryIndex(ws, config=quiet, embedder=HashEmbedder(), state_dir=state) as reader:
            assert same(fingerprint(reader), before)  # the old generation still answers, whole
            assert reader._store.get_meta()["model"] == "hash-v1"
        rep = mem.sync()  # the next sync finishes the job
        assert rep.full and mem._store.get_meta()["model"] == "hash-v2"
        after = fingerprint(mem)
        assert mem._store.remove_leftovers() == 0
    with open_index(ws, tmp_path / "fresh", {}, model="hash-v2") as ref:
        ref.sync()
        assert same(after, fingerprint(ref))


def test_threads_search_while_another_thread_syncs(tmp_path: Path, store_config: dict[str, Any]) -> None:
    """Readers in other threads see each file group old or new, never half-written, and never fail."""
    import threading

    ws = notes(tmp_path / "ws", 12)
    errors: list[BaseException] = []
    seen_mixed: list[str] = []
    with open_index(ws, tmp_path / "state", store_config) as mem:
        mem.sync()
        stop = threading.Event()

        def reader() -> None:
            while not stop.is_set():
                try:
                    for r in mem.search("fact topic", max_results=20, min_score=0):
                        tags = {t for t in ("v1", "v2", "v3") if f"{t} fact" in r.snippet}
                        if len(tags) > 1:  # one chunk holds lines of one version only
                            seen_mixed.append(r.snippet)
                except BaseException as exc:  # noqa: BLE001 - reported below
                    errors.append(exc)
                    return

        threads = [threading.Thread(target=reader) for _ in range(3)]
        for t in threads:
            t.start()
        for tag in ("v2", "v3", "v2"):
            notes(ws, 12, tag=tag)
            mem.mark_dirty()
            mem.sync()
        stop.set()
        for t in threads:
            t.join(30)
        assert not errors, errors[:1]
        assert not seen_mixed
        assert mem.status().files == 13
        assert {r.path for r in mem.search("topic3xv2", min_score=0)} >= {"memory/n003.md"}

def test_connection_loss_in_the_vector_phase(tmp_path: Path, pg_url: str) -> None:
    """Connections lost while embedding (after the keyword phase switched the new generation in):
    the vector phase carries on over new connections and completes."""
    ws = notes(tmp_path / "ws", 30)
    state = tmp_path / "state"
    store = {"url": pg_url}
    with open_index(ws, state, store) as mem:
        mem.sync()
    cutter = _Cutter(pg_url, "hash-v2")
    with MemoryIndex(ws, config={"store": store}, embedder=cutter, state_dir=state) as mem:
        rep = mem.sync()
        assert cutter.calls >= 2 and rep.full and rep.vectors_pending == 0
        assert mem._store.get_meta()["model"] == "hash-v2"
        assert mem.status().vectors == {"done": 31, "total": 31}
        after = fingerprint(mem)
    with open_index(ws, tmp_path / "fresh", {}, model="hash-v2") as ref:
        ref.sync()
        assert same(after, fingerprint(ref))
