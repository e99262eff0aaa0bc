"""The sqlite-vec table (``chunks_vec``) agrees with the chunks' own vectors whatever wrote the
index: an all-zero vector, an index written with vectors disabled or without the extension, and
rows a writer without the extension could not delete."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from clawmem_core import MemoryIndex
from clawmem_core.testing import HashEmbedder

from .conftest import write_files

try:
    import sqlite_vec  # noqa: F401

    HAS_VEC = True
except ImportError:  # pragma: no cover - the test extra installs it
    HAS_VEC = False

pytestmark = pytest.mark.skipif(not HAS_VEC, reason="sqlite-vec is not installed")


class ZeroForBlank(HashEmbedder):
    """Gives an all-zero vector for texts containing "blank" (what sanitising a model's NaN
    output yields)."""

    def _embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[0.0] * self.dims if "blank" in t else v for t, v in zip(texts, super()._embed_documents(texts))]


def vec_config(enabled: bool) -> dict:
    return {"store": {"vector": {"enabled": enabled}}, "query": {"min_score": 0}}


def cosine(a: list[float], b: list[float]) -> float:
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(x * x for x in b))
    return sum(x * y for x, y in zip(a, b)) / (na * nb) if na and nb else 0.0


def check_vector_scores(mem: MemoryIndex, queries: list[str]) -> int:
    """Every vector hit's score is the cosine of the query with that chunk's own text (served by
    sqlite-vec: a fresh index answers its first queries through the extension)."""
    emb = HashEmbedder()
    checked = 0
    for q in queries:
        hits = mem._store.vector_search(emb.embed_query(q), 20)
        texts = mem._store.get_chunks([cid for cid, _ in hits])
        for cid, score in hits:
            want = cosine(emb.embed_query(q), emb._vector(texts[cid].text))
            assert score == pytest.approx(want, abs=1e-5), (q, texts[cid].text[:60])
            checked += 1
    return checked


def test_all_zero_vector_does_not_break_search(make_workspace, tmp_path: Path) -> None:
    ws = make_workspace({"MEMORY.md": "I like jazz and espresso.\n", "memory/a.md": "a blank page\n",
                         "memory/b.md": "jazz records and vinyl\n"})
    with MemoryIndex(ws, embedder=ZeroForBlank(), state_dir=tmp_path / "s", config=vec_config(True)) as mem:
        mem.sync()
    with MemoryIndex(ws, embedder=ZeroForBlank(), state_dir=tmp_path / "s", config=vec_config(True)) as mem:
        assert mem._store.vector_extension
        for q in ("blank page", "jazz", "espresso jazz vinyl"):  # sqlite-vec, then the matrix
            hits = mem.search(q, max_results=5)
            assert all(math.isfinite(h.score) for h in hits)
        assert mem.search("jazz", max_results=5)[0].path in ("MEMORY.md", "memory/b.md")


@pytest.mark.parametrize("first", ["vectors-disabled", "no-extension"])
def test_index_written_without_the_vector_table_is_searched_and_updated(make_workspace, tmp_path: Path,
                                                                        monkeypatch, first: str) -> None:
    ws = make_workspace({"MEMORY.md": "I like jazz and espresso.\n", "memory/a.md": "tea notes\n"})
    state = tmp_path / "s"
    with monkeypatch.context() as m:
        if first == "no-extension":  # sqlite-vec cannot load in the first process
            m.setattr("clawmem_core.store.sqlite.schema._sqlite_vec_path", lambda: str(tmp_path / "missing" / "vec0"))
        cfg = vec_config(first != "vectors-disabled")
        with MemoryIndex(ws, embedder=HashEmbedder(), state_dir=state, config=cfg) as mem:
            mem.sync()
            assert not mem._store.vector_extension
    with MemoryIndex(ws, embedder=HashEmbedder(), state_dir=state, config=vec_config(True)) as mem:
        assert mem._store.vector_extension
        assert not mem.needs_full_reindex()
        assert mem.search("jazz espresso")[0].path == "MEMORY.md"
        mem.write("the espresso machine broke")  # a write through the extension
        assert "espresso machine" in mem.search("espresso machine broke")[0].snippet
        assert check_vector_scores(mem, ["jazz espresso", "tea notes", "espresso machine broke"]) > 0


def test_rows_left_by_a_writer_without_the_extension_are_never_served(make_workspace, tmp_path: Path) -> None:
    files = {f"memory/n{i}.md": f"note {i} about topic{i} and more words{i}\n" for i in range(6)}
    files["memory/z.md"] = "alpha bravo charlie delta echo foxtrot\n"  # the last chunk written: the highest rowid
    ws = make_workspace(files)
    state = tmp_path / "s"
    with MemoryIndex(ws, embedder=HashEmbedder(), state_dir=state, config=vec_config(True)) as mem:
        mem.sync()
    # A writer without sqlite-vec replaces the last file: its old rowid is reused by new text.
    (ws / "memory" / "z.md").write_text("kilo lima mike november oscar papa\n", encoding="utf-8")
    with MemoryIndex(ws, embedder=HashEmbedder(), state_dir=state, config=vec_config(False)) as mem:
        mem.sync()
    with MemoryIndex(ws, embedder=HashEmbedder(), state_dir=state, config=vec_config(True)) as mem:
        assert mem._store.vector_extension
        assert check_vector_scores(mem, ["alpha bravo charlie delta", "kilo lima mike"]) > 0
        hits = mem.search("alpha bravo charlie delta echo foxtrot", max_results=3)
        assert all("kilo" not in h.snippet or h.vector_score < 0.5 for h in hits)
        mem.sync(force=False)
        assert check_vector_scores(mem, ["alpha bravo charlie delta", "kilo lima mike", "note 3 topic3"]) > 0
