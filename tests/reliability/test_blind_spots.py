"""Behaviours that a mutation audit found no test pinning down: each test here fails when its
behaviour is broken (see ``scripts/reliability_mutations.py``). Real files, a real SQLite index."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from clawmem_core import MemoryConfig, MemoryIndex
from clawmem_core.errors import ClawmemError

from .conftest import tree_digest

QUIET = MemoryConfig.from_dict({"provider": "none", "sync": {"on_session_start": False, "on_search": False}})


def _paths(mem: MemoryIndex, query: str) -> list[str]:
    return [hit.path for hit in mem.search(query, min_score=0)]


def test_a_failure_inside_a_write_group_rolls_the_whole_group_back(tmp_path: Path) -> None:
    """A statement of a write group fails (a real SQLite error: a trigger aborts the insert of one
    file's chunks, after its file row was written): the group rolls back. Had it committed, the
    file's new hash would be recorded without chunks, its old text would vanish from search and
    the next sync would take it for up to date."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Long term\n\nDana drinks green tea every morning.\n", encoding="utf-8")
    note = ws / "memory" / "garden.md"
    note.write_text("# Garden\n\nThe kiwi vine climbs the north fence.\n", encoding="utf-8")
    with MemoryIndex(ws, state_dir=tmp_path / "state", config=QUIET) as mem:
        mem.sync()
        assert _paths(mem, "kiwi vine") == ["memory/garden.md"]
        index_file = Path(mem.status().store_path)

        note.write_text("# Garden\n\nThe papaya tree fruits in August.\n", encoding="utf-8")
        db = sqlite3.connect(index_file)
        with db:
            db.execute("CREATE TRIGGER refuse_papaya BEFORE INSERT ON chunks WHEN NEW.text LIKE '%papaya%' "
                       "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END")
        before = tree_digest(ws)
        with pytest.raises(ClawmemError, match="refused by the test"):
            mem.sync()
        assert tree_digest(ws) == before  # the Markdown is untouched

        # The group rolled back: the old text is still found, the old hash still recorded.
        assert _paths(mem, "kiwi vine") == ["memory/garden.md"]
        assert _paths(mem, "green tea") == ["MEMORY.md"]
        stored = db.execute("SELECT hash FROM files WHERE path = 'memory/garden.md'").fetchall()
        assert stored and stored[0][0] != hashlib.sha256(note.read_bytes()).hexdigest()

        with db:
            db.execute("DROP TRIGGER refuse_papaya")
        db.close()
        report = mem.sync()  # the file is still seen as changed, and indexed now
        assert report.files_indexed == 1
        assert _paths(mem, "papaya tree") == ["memory/garden.md"]
        assert _paths(mem, "kiwi vine") == []
