"""Corrupt or foreign index state: detected, reported, rebuilt from the Markdown; the Markdown is
never modified. A full disk and a read-only state directory give a clear StoreError and leave the
old index answering."""

from __future__ import annotations

import logging
import random
import os
from pathlib import Path

import apsw
import pytest

from clawmem_core import MemoryIndex
from clawmem_core.errors import StoreError
from clawmem_core.testing import HashEmbedder

from .conftest import make_workspace, tree_digest


def db_of(state: Path) -> Path:
    return state / "memory" / "main.sqlite"


def build(ws: Path, state: Path) -> None:
    with MemoryIndex(ws, agent_id="main", embedder=HashEmbedder(), state_dir=state) as mem:
        mem.sync()


def answers(ws: Path, state: Path) -> list:
    with MemoryIndex(ws, agent_id="main", embedder=HashEmbedder(), state_dir=state) as mem:
        hits = mem.search("jazz espresso", max_results=3)
        assert mem.status().files == len(list((ws / "memory").glob("*.md"))) + 1
    assert hits and hits[0].path == "MEMORY.md"
    return hits


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return make_workspace(tmp_path / "ws", 12, "c")


def corrupt_copies(state: Path) -> list[Path]:
    return sorted((state / "memory").glob("main.sqlite.corrupt-*"))


@pytest.mark.parametrize(
    "damage",
    ["garbage", "zeros", "truncated-header", "truncated-half", "torn-pages"],
)
def test_damaged_index_is_moved_aside_and_rebuilt(ws: Path, tmp_path: Path, damage: str, caplog) -> None:
    state = tmp_path / "state"
    build(ws, state)
    db = db_of(state)
    data = db.read_bytes()
    for companion in ("-wal", "-shm"):
        Path(f"{db}{companion}").unlink(missing_ok=True)
    if damage == "garbage":
        db.write_bytes(os.urandom(len(data)))
    elif damage == "zeros":
        db.write_bytes(b"\0" * len(data))
    elif damage == "truncated-header":
        db.write_bytes(data[:50])
    elif damage == "truncated-half":
        db.write_bytes(data[: len(data) // 2])
    else:  # overwrite every page after the first with noise
        page = 4096
        noisy = bytearray(data)
        for off in range(page, len(noisy), page):
            noisy[off + 16 : off + 200] = os.urandom(184)
        db.write_bytes(bytes(noisy))
    before = tree_digest(ws)
    with caplog.at_level(logging.WARNING, logger="clawmem"):
        answers(ws, state)
    assert tree_digest(ws) == before
    assert len(corrupt_copies(state)) == 1, "the damaged file is kept aside for inspection"
    assert any("corrupt" in r.getMessage() or "not a clawmem index" in r.getMessage() for r in caplog.records)
    conn = apsw.Connection(str(db))
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    conn.close()


def test_at_most_two_corrupt_copies_are_kept(ws: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    build(ws, state)
    for _ in range(4):
        db_of(state).write_bytes(os.urandom(8192))
        for companion in ("-wal", "-shm"):
            Path(f"{db_of(state)}{companion}").unlink(missing_ok=True)
        answers(ws, state)
    assert len(corrupt_copies(state)) <= 2


def test_foreign_schema_is_rebuilt(ws: Path, tmp_path: Path) -> None:
    """An index left by an older layout (same file name, different tables) is rebuilt."""
    state = tmp_path / "state"
    db_of(state).parent.mkdir(parents=True)
    conn = apsw.Connection(str(db_of(state)))
    conn.execute(
        "CREATE TABLE chunks (id TEXT PRIMARY KEY, path TEXT, text TEXT);"
        "CREATE TABLE files (path TEXT PRIMARY KEY, hash TEXT);"
        "INSERT INTO chunks VALUES ('x', 'MEMORY.md', 'stale');"
    )
    conn.close()
    answers(ws, state)
    assert len(corrupt_copies(state)) == 1


def test_newer_schema_version_is_a_clear_error_and_left_alone(ws: Path, tmp_path: Path) -> None:
    """An index written by a newer clawmem is not destroyed by an older one."""
    state = tmp_path / "state"
    build(ws, state)
    conn = apsw.Connection(str(db_of(state)))
    conn.execute("PRAGMA user_version=99")
    conn.close()
    digest = db_of(state).read_bytes()
    with pytest.raises(StoreError, match="schema version 99"):
        MemoryIndex(ws, agent_id="main", embedder=HashEmbedder(), state_dir=state)
    assert db_of(state).read_bytes() == digest
    assert corrupt_copies(state) == []


def test_state_path_blocked_by_a_file(ws: Path, tmp_path: Path) -> None:
    """The index directory cannot be created (a file stands where it should be)."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "memory").write_text("not a directory")
    with pytest.raises(StoreError, match="cannot create the index directory"):
        MemoryIndex(ws, agent_id="main", embedder=HashEmbedder(), state_dir=state)
    assert (state / "memory").read_text() == "not a directory"


def test_index_path_is_a_directory(ws: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    db_of(state).mkdir(parents=True)
    with pytest.raises(StoreError, match="main.sqlite"):
        MemoryIndex(ws, agent_id="main", embedder=HashEmbedder(), state_dir=state)
    assert db_of(state).is_dir()


def _damage_cases(pages: int, seed: int = 11) -> list[tuple[str, int, int]]:
    """``(pattern, offset, length)`` spans to overwrite: page 2 (the first page after the schema)
    in full with each pattern, then other whole pages and spans that straddle two pages, drawn
    from a fixed seed."""
    rng = random.Random(seed)
    cases = [(p, 4096, 4096) for p in ("garbage", "zeros", "ff")]
    whole = sorted(rng.sample(range(3, pages + 1), min(6, pages - 2)))
    cases += [(rng.choice(("garbage", "zeros", "ff")), (n - 1) * 4096, 4096) for n in whole]
    cases += [(rng.choice(("garbage", "zeros", "ff")), (n - 1) * 4096 + rng.randrange(16, 4000), 4096)
              for n in sorted(rng.sample(range(2, pages), min(3, pages - 2)))]
    return cases


def _fill(pattern: str, n: int, rng: random.Random) -> bytes:
    return {"zeros": b"\0" * n, "ff": b"\xff" * n}.get(pattern) or rng.randbytes(n)


@pytest.mark.parametrize("mode", ["keyword-only", "hybrid"])
def test_damaged_pages_are_set_aside_and_rebuilt(ws: Path, tmp_path: Path, mode: str) -> None:
    """Garbage, zeros or 0xFF over one page (or a span across two) of the index: opening,
    searching and ``status`` never raise a raw SQLite error, a damaged page that is read is set
    aside and rebuilt, and a forced reindex always ends in a sound index that answers."""
    kw = {"config": {"provider": "none"}} if mode == "keyword-only" else {"embedder": HashEmbedder()}
    state = tmp_path / "state"
    with MemoryIndex(ws, state_dir=state, **kw) as mem:
        mem.sync()
        db = Path(mem.store_path)
    for companion in ("-wal", "-shm"):
        Path(f"{db}{companion}").unlink(missing_ok=True)
    good = db.read_bytes()
    before = tree_digest(ws)
    n_files = len(list((ws / "memory").glob("*.md"))) + 1
    rng = random.Random(5)
    for pattern, offset, length in _damage_cases(len(good) // 4096):
        case = f"{pattern} over bytes {offset}-{offset + length - 1}"
        for p in db.parent.glob(f"{db.name}*"):
            p.unlink()
        data = bytearray(good)
        data[offset : offset + length] = _fill(pattern, length, rng)
        db.write_bytes(bytes(data))
        with MemoryIndex(ws, state_dir=state, **kw) as mem:  # never a raw apsw error
            hits = mem.search("jazz espresso", max_results=3)
            mem.status()
            if offset % 4096 == 0:  # a whole page is either never read or detected
                assert hits and hits[0].path == "MEMORY.md", case
                assert mem.status().files == n_files, case
            mem.sync(force=True)
            hits = mem.search("jazz espresso", max_results=3)
            assert hits and hits[0].path == "MEMORY.md", case
            assert mem.status().files == n_files, case
        conn = apsw.Connection(str(db))
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)], case
        conn.close()
        if offset == 4096:
            assert len(list(db.parent.glob(f"{db.name}.corrupt-*"))) == 1, f"{case}: set aside"
    assert tree_digest(ws) == before
