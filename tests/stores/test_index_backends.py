"""Sync and search through ``MemoryIndex`` on both backends, and the same answers from each."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from clawmem_core import MemoryIndex
from clawmem_core.testing import HashEmbedder

NOTES = {
    "MEMORY.md": "# Preferences\n\nI like jazz music and espresso.\nMy editor is vim.\n",
    "memory/2026-01-05.md": "# Standup\n\n- Deployed the billing service to production.\n- Zebra team owns search.\n",
    "memory/2026-01-06.md": "# 中文笔记\n\n今天我们玩了成语接龙游戏。\n周末去杭州西湖散步，喝了龙井茶。\n",
    "memory/projects/atlas.md": "# Atlas\n\nAtlas is the mapping project. Running benchmarks nightly; the runner is flaky.\n",
    "memory/people.md": "# People\n\nAlice prefers tea. Bob plays the saxophone in a jazz band.\n",
}
QUERIES = ["jazz", "what music do I like", "billing production", "成语", "龙井茶 杭州", "benchmark runner",
           "saxophone band", "nothing matches this at all qqq",
           "jazz production on January 5, 2026", "2026年1月6日 西湖"]  # a named day: its note counts twice


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    return root


def age(root: Path, seconds: float = 60) -> None:
    """Date every file back, so size and mtime are trusted (past the racy window)."""
    t = time.time() - seconds
    for p in root.rglob("*.md"):
        os.utime(p, (t, t))


def open_index(ws: Path, tmp: Path, store: dict[str, Any], *, embedder: Any = None, agent: str = "main",
               **config: Any) -> MemoryIndex:
    cfg: dict[str, Any] = {"store": dict(store), **config}
    if embedder is None:
        cfg.setdefault("provider", "none")
    return MemoryIndex(ws, agent_id=agent, config=cfg, embedder=embedder, state_dir=tmp / "state")


def answers(mem: MemoryIndex, q: str) -> list[tuple[str, int, int, float]]:
    return [(r.path, r.start_line, r.end_line, r.score) for r in mem.search(q, max_results=6, min_score=0)]


def same_answers(a: list[tuple[str, int, int, float]], b: list[tuple[str, int, int, float]]) -> bool:
    """Same results in the same order, scores within float32 noise."""
    return len(a) == len(b) and all(x[:3] == y[:3] and abs(x[3] - y[3]) < 1e-5 for x, y in zip(a, b))


@pytest.mark.parametrize("hybrid", [False, True], ids=["keyword", "hybrid"])
def test_postgres_answers_exactly_as_sqlite(tmp_path: Path, pg_url: str, hybrid: bool) -> None:
    ws = write(tmp_path / "ws", NOTES)
    emb = (lambda: HashEmbedder()) if hybrid else (lambda: None)
    with open_index(ws, tmp_path, {}, embedder=emb()) as lite, \
            open_index(ws, tmp_path, {"url": pg_url}, embedder=emb()) as pg:
        lite.sync()
        pg.sync()
        for q in QUERIES:
            assert same_answers(answers(pg, q), answers(lite, q)), q
        assert answers(pg, "jazz")  # not vacuous


def test_sync_is_incremental(tmp_path: Path, store_config: dict[str, Any]) -> None:
    ws = write(tmp_path / "ws", NOTES)
    age(ws)
    emb = HashEmbedder()
    with open_index(ws, tmp_path, store_config, embedder=emb) as mem:
        first = mem.sync()
        assert first.full and first.files_indexed == len(NOTES)
        again = mem.sync()
        assert (again.files_indexed, again.files_unchanged) == (0, len(NOTES))
        write(ws, {"memory/people.md": "# People\n\nCarol collects vinyl records.\n"})
        (ws / "memory/projects/atlas.md").unlink()
        write(ws, {"memory/new.md": "# New\n\nA marmot lives in the garden.\n"})
        rep = mem.sync()
        assert not rep.full and (rep.files_indexed, rep.files_deleted) == (2, 1)
        assert [r.path for r in mem.search("vinyl records")] == ["memory/people.md"]
        assert mem.search("saxophone") == []
        assert mem.search("mapping project atlas", min_score=0) == [] or all(
            r.path != "memory/projects/atlas.md" for r in mem.search("mapping project atlas", min_score=0))
        assert [r.path for r in mem.search("marmot garden")] == ["memory/new.md"]
        st = mem.status()
        assert (st.files, st.dirty) == (len(NOTES), False)


def test_model_change_reindexes_into_a_new_generation(tmp_path: Path, store_config: dict[str, Any]) -> None:
    ws = write(tmp_path / "ws", NOTES)
    with open_index(ws, tmp_path, store_config, embedder=HashEmbedder(dims=32, model="m1")) as mem:
        mem.sync()
        assert mem.status().vector["dims"] == 32
    with open_index(ws, tmp_path, store_config, embedder=HashEmbedder(dims=48, model="m2")) as mem:
        assert mem.needs_full_reindex()
        rep = mem.sync()
        assert rep.full and rep.embeddings_computed > 0
        st = mem.status()
        assert (st.files, st.vector["dims"], st.model) == (len(NOTES), 48, "m2")
        assert [r.path for r in mem.search("saxophone jazz band")][0] == "memory/people.md"


def test_search_before_any_sync_indexes_first(tmp_path: Path, store_config: dict[str, Any]) -> None:
    ws = write(tmp_path / "ws", NOTES)
    with open_index(ws, tmp_path, store_config) as mem:
        assert [r.path for r in mem.search("espresso")] == ["MEMORY.md"]


def test_shared_embedding_cache_embeds_each_text_once(tmp_path: Path, pg_url: str) -> None:
    ws_a = write(tmp_path / "a", NOTES)
    ws_b = write(tmp_path / "b", NOTES)
    first, second = HashEmbedder(), HashEmbedder()
    with open_index(ws_a, tmp_path, {"url": pg_url}, embedder=first, agent="alice") as a:
        a.sync()
    with open_index(ws_b, tmp_path, {"url": pg_url}, embedder=second, agent="bob") as b:
        rep = b.sync()
        assert rep.embeddings_cached > 0 and rep.embeddings_computed == 0
        assert second.texts_embedded == 0
