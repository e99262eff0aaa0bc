"""SIGKILL at random points of a full reindex and of an incremental sync.

After each kill the index must open, pass SQLite's integrity check, answer searches, and hold the
old state or the new state (whole index for a full reindex; per file for an incremental sync).
A sync is two-phase: the keyword rows (of a full reindex: built aside and swapped in) come before
any embedding, so a kill while embedding finds the new keyword rows in place with vectors pending.
The next sync must remove the orphaned temporary file and must not re-embed what the killed
process had already embedded (the embedding cache is written to the live index per batch).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import time
from pathlib import Path

import apsw
import pytest

from clawmem_core import MemoryConfig, MemoryIndex
from clawmem_core.testing import HashEmbedder

from .conftest import make_workspace, start_worker, tree_digest, unique_text

SEED = int(os.environ.get("CLAWMEM_CRASH_SEED", "20260105"))


def db_of(state: Path) -> Path:
    return state / "memory" / "main.sqlite"


def snapshot(state: Path) -> dict[str, tuple[str, tuple[str, ...]]]:
    """``{path: (file hash, chunk ids)}`` read straight from the index file."""
    conn = apsw.Connection(str(db_of(state)))
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        chunks: dict[str, list[str]] = {}
        for path, cid in conn.execute("SELECT path, id FROM chunks"):
            chunks.setdefault(path, []).append(cid)
        return {p: (h, tuple(sorted(chunks.get(p, [])))) for p, h in conn.execute("SELECT path, hash FROM files")}
    finally:
        conn.close()


def temp_files(state: Path) -> list[str]:
    return sorted(p.name for p in (state / "memory").glob("*.tmp-*"))


def sync_in_process(ws: Path, state: Path, force: bool = False) -> HashEmbedder:
    emb = HashEmbedder()
    with MemoryIndex(ws, agent_id="main", embedder=emb, state_dir=state) as mem:
        mem.sync(force=force)
    return emb


def kill_during(proc, delay: float | None = None) -> int:
    """SIGKILL the child once it paused (``--pause-after``) or, with ``delay``, that many seconds
    after it opened the index (a random point: embedding, writing, swapping). Returns how many
    texts it had embedded and cached for sure."""
    confirmed = 0
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(("embedding ", "paused ")):
            confirmed = int(line.split()[1])
        if line.startswith("paused ") or line.startswith("done") or (delay is not None and line.startswith("ready")):
            break
    if delay:
        time.sleep(delay)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    proc.stdout.close()
    proc.stderr.close()
    return confirmed


def after_kill_is_old(state: Path, old: dict) -> bool:
    return snapshot(state) == old


def pending_vectors(state: Path) -> int:
    conn = apsw.Connection(str(db_of(state)))
    try:
        return conn.execute("SELECT count(*) FROM chunks WHERE pending = 1").fetchall()[0][0]
    finally:
        conn.close()


NO_AUTO_SYNC = MemoryConfig.from_dict({"sync": {"on_session_start": False, "on_search": False}})


def search_answers(ws: Path, state: Path) -> None:
    """The index opens and answers as the kill left it (no background sync repairs it first)."""
    emb = HashEmbedder()
    with MemoryIndex(ws, agent_id="main", embedder=emb, state_dir=state, config=NO_AUTO_SYNC) as mem:
        hits = mem.search("jazz espresso", max_results=3)
        assert hits and hits[0].path == "MEMORY.md"
    assert emb.texts_embedded == 0


@pytest.fixture(scope="module")
def full_case(tmp_path_factory: pytest.TempPathFactory):
    """An index of 8 files, then 24 new files on disk: the reference old and new states."""
    root = tmp_path_factory.mktemp("full")
    ws = make_workspace(root / "ws", 8, "old")
    template = root / "template"
    sync_in_process(ws, template)
    old = snapshot(template)
    # more than one write group (512 chunks), so a kill in the last group's embedding comes after
    # the first group was written: a reindex that is not built aside would show half of it
    make_workspace(ws, 130, "new", lines=40)
    ref = root / "ref"
    shutil.copytree(template, ref)
    ref_emb = sync_in_process(ws, ref, force=True)
    new = snapshot(ref)
    assert ref_emb.texts_embedded > 512 and old != new
    return ws, template, old, new, ref_emb.texts_embedded, ref_emb.calls


def kill_args(rng: random.Random, round_: int, calls: int = 0) -> tuple[list[str], float | None]:
    """Round 0 pauses at a random early batch, round 1 in the last write group (deterministic
    kill points mid-embedding); later rounds kill at a random time, which also lands in the
    writes and the final swap."""
    if round_ == 0:
        return ["--pause-after", str(rng.randint(1, 14))], None
    if round_ == 1:
        return ["--pause-after", str(calls - 1 if calls else rng.randint(1, 14))], None
    return ["--sleep", "0.002"], rng.uniform(0.0, 1.0)


@pytest.mark.parametrize("round_", range(4))
def test_sigkill_during_full_reindex(full_case, tmp_path: Path, round_: int) -> None:
    ws, template, old, new, needed, calls = full_case
    rng = random.Random(SEED + round_)
    state = tmp_path / "state"
    shutil.copytree(template, state)
    before = tree_digest(ws)
    args, delay = kill_args(rng, round_, calls)
    proc = start_worker("sync", str(ws), str(state), "--force", *args)
    confirmed = kill_during(proc, delay)
    if round_ < 2:  # killed while embedding: the keyword phase had swapped the new rows in
        assert snapshot(state) == new, "the keyword phase must swap in before the vectors"
        assert pending_vectors(state) > 0

    after_kill = snapshot(state)
    assert after_kill in (old, new), "a killed full reindex left a half-built index"
    search_answers(ws, state)  # the index opens and answers

    emb = sync_in_process(ws, state)  # resumes from the embedding cache
    assert snapshot(state) == new
    assert emb.texts_embedded <= needed - confirmed, (
        f"resumed reindex embedded {emb.texts_embedded} texts; {confirmed} of {needed} were already cached"
    )
    assert temp_files(state) == [], "an orphaned temporary index was left behind"
    assert tree_digest(ws) == before


def test_sigkill_during_the_keyword_phase_of_a_full_reindex(full_case, tmp_path: Path) -> None:
    """Killed just before the last file of a full reindex (its first write group of 512 chunks
    written): the half-built keyword index sits in the temporary file, the live index is the old
    one exactly."""
    ws, template, old, new, needed, _calls = full_case
    state = tmp_path / "state"
    shutil.copytree(template, state)
    proc = start_worker("sync", str(ws), str(state), "--force", "--pause-at-file", "-1")
    kill_during(proc)
    assert after_kill_is_old(state, old), "a killed keyword phase left a half-built index live"
    assert pending_vectors(state) == 0
    search_answers(ws, state)
    emb = sync_in_process(ws, state)
    assert snapshot(state) == new
    assert emb.texts_embedded <= needed
    assert temp_files(state) == []


@pytest.fixture(scope="module")
def incremental_case(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("incr")
    ws = make_workspace(root / "ws", 16, "inc")
    template = root / "template"
    sync_in_process(ws, template)
    old = snapshot(template)
    for i in range(0, 16, 2):  # change half the files, add new ones, delete one
        p = ws / "memory" / f"inc{i:03d}.md"
        p.write_text(p.read_text() + unique_text(f"more{i}", 20), encoding="utf-8")
    make_workspace(ws, 10, "add")
    (ws / "memory" / "inc015.md").unlink()
    ref = root / "ref"
    shutil.copytree(template, ref)
    needed = sync_in_process(ws, ref).texts_embedded
    new = snapshot(ref)
    return ws, template, old, new, needed


@pytest.mark.parametrize("round_", range(4))
def test_sigkill_during_incremental_sync(incremental_case, tmp_path: Path, round_: int) -> None:
    ws, template, old, new, needed = incremental_case
    rng = random.Random(SEED * 7 + round_)
    state = tmp_path / "state"
    shutil.copytree(template, state)
    args, delay = kill_args(rng, round_)
    proc = start_worker("sync", str(ws), str(state), *args)
    confirmed = kill_during(proc, delay)

    after_kill = snapshot(state)
    for path, entry in after_kill.items():  # each file is wholly old or wholly new
        assert entry in (old.get(path), new.get(path)), f"{path} is half-indexed after a kill"
    search_answers(ws, state)

    emb = sync_in_process(ws, state)
    assert snapshot(state) == new
    assert emb.texts_embedded <= needed - confirmed
    assert temp_files(state) == []


def test_orphaned_temp_files_do_not_accumulate(full_case, tmp_path: Path) -> None:
    """Many killed rebuilds in a row leave at most the last one's temporary file, and the next
    sync removes it."""
    ws, template, _old, _new, _needed, _calls = full_case
    state = tmp_path / "state"
    shutil.copytree(template, state)
    for _ in range(3):
        proc = start_worker("sync", str(ws), str(state), "--force", "--pause-at-file", "20")
        kill_during(proc)
        assert len(temp_files(state)) <= 1
    sync_in_process(ws, state)
    assert temp_files(state) == []
    size = sum(p.stat().st_size for p in (state / "memory").iterdir())
    assert size < 20 * 1024 * 1024
