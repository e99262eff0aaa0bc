"""Full reindex triggers, the embedding cache and the atomic rebuild (SPEC 4-5; OpenClaw tests
54, 55, 61 and the resume guarantee)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from clawmem_core import EmbeddingError, MemoryConfig, MemoryIndex
from clawmem_core.config import ChunkingConfig, ExperimentalConfig, FtsConfig, StoreConfig
from clawmem_core import sync as sync_module
from clawmem_core.testing import HashEmbedder
from clawmem_core.index import INDEX_FORMAT

from .conftest import SAMPLE_FILES, IndexFactory, WorkspaceFactory, keyword_only, write_files


class KeyedEmbedder(HashEmbedder):
    """A HashEmbedder whose provider settings (base URL, dimensions...) differ by ``key``."""

    def __init__(self, key: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.key = key

    @property
    def provider_key(self) -> str:
        return f"hash-settings-{self.key}"


class FailingEmbedder(HashEmbedder):
    """Fails with an embedding error on document batch number ``fail_on`` (1-based)."""

    def __init__(self, fail_on: int, **kw: Any) -> None:
        super().__init__(**kw)
        self.fail_on = fail_on

    def _embed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.calls + 1 == self.fail_on:
            self.calls += 1
            raise EmbeddingError("embedding failure")
        return super()._embed_documents(texts)


def many_files(n: int = 8) -> dict[str, str]:
    """Enough text for several 8000-byte embedding batches."""
    return {f"memory/big{i}.md": "\n".join(f"big {i} paragraph {j} " + "words and more words " * 15
                                           for j in range(30)) for i in range(n)} | {"MEMORY.md": "I like jazz.\n"}


def leftovers(store_path: Path) -> list[str]:
    return sorted(p.name for p in store_path.parent.iterdir() if ".tmp-" in p.name or ".backup-" in p.name)


# -- what triggers a full reindex (test 54) ------------------------------------------------------------


def test_nothing_changed_is_not_a_full_reindex(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    ws = make_workspace(SAMPLE_FILES)
    assert open_index(ws).sync().full is True
    again = open_index(ws).sync()
    assert again.full is False and again.files_indexed == 0


@pytest.mark.parametrize("change", ["model", "provider_key", "chunking", "overlap", "tokenizer", "provider", "format"])
def test_identity_changes_force_a_full_reindex(make_workspace: WorkspaceFactory, open_index: IndexFactory,
                                               change: str, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = make_workspace(SAMPLE_FILES)
    first = open_index(ws, embedder=KeyedEmbedder("a"))
    first.sync()
    first.search("jazz")  # embeds the embedder's calibration passages ...
    first.sync()  # ... which the next sync keeps in the embedding cache
    first.close()
    embedder: Any = KeyedEmbedder("a")
    config = MemoryConfig()
    if change == "model":
        embedder = KeyedEmbedder("a", model="hash-v2")
    elif change == "provider_key":
        embedder = KeyedEmbedder("b")
    elif change == "chunking":
        config = MemoryConfig(chunking=ChunkingConfig(tokens=64))
    elif change == "overlap":
        config = MemoryConfig(chunking=ChunkingConfig(overlap=10))
    elif change == "tokenizer":
        config = MemoryConfig(store=StoreConfig(fts=FtsConfig(tokenizer="unicode61")))
    elif change == "provider":
        embedder, config = None, keyword_only()
    elif change == "format":  # written by a clawmem whose chunking or FTS text differed
        monkeypatch.setattr("clawmem_core.index_parts.identity.INDEX_FORMAT", INDEX_FORMAT + 1)
    second = open_index(ws, embedder=embedder, config=config)
    assert second.needs_full_reindex()
    report = second.sync()
    assert report.full is True
    assert report.files_indexed == 3
    assert second.search("jazz espresso", min_score=0)[0].path == "MEMORY.md"
    if change == "model":
        assert embedder.texts_embedded > 0  # new model: nothing reusable from the cache
    if change == "format":
        assert embedder.texts_embedded == 0  # same model: the rebuild reads every vector from the cache


def test_an_index_of_an_older_keyword_format_is_rebuilt(make_workspace: WorkspaceFactory,
                                                        open_index: IndexFactory) -> None:
    import apsw

    from clawmem_core.text import FTS_FORMAT

    ws = make_workspace({"memory/a.md": "我去了ＬＧＢＴＱ支持小组\n", "memory/b.md": "we went hiking\n"})
    first = open_index(ws, embedder=None, config=keyword_only())
    first.sync()
    store_path = first.store_path
    first.close()
    # What an index written before the keyword-format version existed looks like: no fts_format,
    # and fullwidth letters stored as CJK characters (no ASCII term to match).
    conn = apsw.Connection(str(store_path))
    key = "memory_index_meta_v1"
    meta = json.loads(conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchall()[0][0])
    assert meta.pop("fts_format") == FTS_FORMAT
    conn.execute("UPDATE meta SET value=? WHERE key=?", (json.dumps(meta), key))
    conn.execute("DELETE FROM chunks_fts")
    conn.execute("INSERT INTO chunks_fts(rowid, text) SELECT rid, 'Ｌ Ｇ ＬＧ' FROM chunks WHERE path='memory/a.md'")
    conn.close()

    second = open_index(ws, embedder=None, config=keyword_only())
    assert second.needs_full_reindex()
    report = second.sync()
    assert report.full is True and report.files_indexed == 2
    assert [h.path for h in second.search("LGBTQ", min_score=0)] == ["memory/a.md"]
    assert [h.path for h in second.search("hiking", min_score=0)] == ["memory/b.md"]
    assert not second.needs_full_reindex()


def test_model_change_reembeds_and_stamps_chunks(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    import apsw

    ws = make_workspace(SAMPLE_FILES)
    open_index(ws, embedder=HashEmbedder(model="m1")).sync()
    mem = open_index(ws, embedder=HashEmbedder(model="m2"))
    mem.sync()
    conn = apsw.Connection(str(mem.store_path))
    assert {r[0] for r in conn.execute("SELECT DISTINCT model FROM chunks")} == {"m2"}
    meta = json.loads(conn.execute("SELECT value FROM meta WHERE key='memory_index_meta_v1'").fetchall()[0][0])
    assert meta["model"] == "m2"
    conn.close()


def test_changed_extra_paths_reindex_and_old_extra_files_disappear(make_workspace: WorkspaceFactory,
                                                                  open_index: IndexFactory, tmp_path: Path) -> None:
    ws = make_workspace(SAMPLE_FILES | {"team/a.md": "the zeppelin hangar plan\n"})
    write_files(tmp_path / "other", {"b.md": "the submarine dock plan\n"})
    mem = open_index(ws, config=MemoryConfig(extra_paths=["team"]))
    mem.sync()
    assert mem.search("zeppelin hangar")[0].path == "team/a.md"
    mem.close()
    mem2 = open_index(ws, config=MemoryConfig(extra_paths=[str(tmp_path / "other")]))
    report = mem2.sync()
    assert report.full is True
    assert all(h.path != "team/a.md" for h in mem2.search("zeppelin hangar", min_score=0))
    assert mem2.search("submarine dock")[0].path == "../other/b.md"
    assert mem2.status().files == 4


def test_adding_sessions_to_sources_reindexes_and_picks_up_transcripts(make_workspace: WorkspaceFactory,
                                                                       state_dir: Path, tmp_path: Path) -> None:
    ws = make_workspace(SAMPLE_FILES)
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    record = {"type": "message", "message": {"role": "user", "content": "remember the walrus password hint"}}
    (sessions / "s1.jsonl").write_text(json.dumps({"type": "session"}) + "\n" + json.dumps(record) + "\n")
    with MemoryIndex(ws, embedder=HashEmbedder(), state_dir=state_dir, sessions_dir=sessions) as mem:
        mem.sync()
        assert all(h.source == "memory" for h in mem.search("walrus password", min_score=0))
    cfg = MemoryConfig(sources=["memory", "sessions"], experimental=ExperimentalConfig(session_memory=True))
    with MemoryIndex(ws, config=cfg, embedder=HashEmbedder(), state_dir=state_dir, sessions_dir=sessions) as mem:
        assert mem.sync().full is True
        hit = mem.search("walrus password")[0]
        assert (hit.source, hit.path, hit.start_line) == ("sessions", "sessions/s1.jsonl", 2)


# -- the embedding cache (test 55) ---------------------------------------------------------------------


def test_forced_reindex_with_cache_makes_no_embedding_calls(make_workspace: WorkspaceFactory,
                                                            open_index: IndexFactory) -> None:
    ws = make_workspace(many_files(4))
    emb = HashEmbedder()
    mem = open_index(ws, embedder=emb)
    mem.sync()
    calls, texts = emb.calls, emb.texts_embedded
    assert calls > 1
    report = mem.sync(force=True)
    assert report.full is True
    assert (emb.calls, emb.texts_embedded) == (calls, texts)
    assert report.embeddings_computed == 0 and report.embeddings_cached == mem.status().chunks


def test_forced_reindex_without_cache_reembeds(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    ws = make_workspace(SAMPLE_FILES)
    emb = HashEmbedder()
    mem = open_index(ws, embedder=emb, config=MemoryConfig.from_dict({"cache": {"enabled": False}}))
    mem.sync()
    before = emb.texts_embedded
    mem.sync(force=True)
    assert emb.texts_embedded == 2 * before
    assert mem.status().cache["entries"] == 0


def test_cache_max_entries_prunes_after_full_reindex(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    ws = make_workspace(many_files(3))
    mem = open_index(ws, config=MemoryConfig.from_dict({"cache": {"maxEntries": 5}}))
    mem.sync()
    assert mem.status().cache["entries"] == 5
    assert mem.status().chunks > 5


def test_keyword_only_forced_reindex_keeps_chunks_and_edits_replace_text(make_workspace: WorkspaceFactory,
                                                                         open_index: IndexFactory) -> None:
    ws = make_workspace(SAMPLE_FILES)
    mem = open_index(ws, embedder=None, config=keyword_only())
    mem.sync()
    chunks = mem.status().chunks
    mem.sync(force=True)
    assert mem.status().chunks == chunks
    (ws / "MEMORY.md").write_text("I now prefer classical music and green tea.\n")
    mem.sync()
    assert mem.search("jazz espresso") == []
    assert mem.search("classical tea")[0].path == "MEMORY.md"


# -- atomic rebuild (test 61) and resume -----------------------------------------------------------------


def test_failed_keyword_phase_of_a_rebuild_keeps_the_previous_index(
        make_workspace: WorkspaceFactory, open_index: IndexFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = make_workspace(many_files())
    mem = open_index(ws, embedder=HashEmbedder(model="m1"))
    mem.sync()
    before = mem.status()
    old_hit = mem.search("jazz")[0]
    mem.close()
    real_chunk = sync_module.chunk_markdown
    seen: list[str] = []

    def failing_chunk(text: str, *args: Any) -> Any:
        seen.append(text)
        if len(seen) == 3:
            raise MemoryError("out of memory while chunking")
        return real_chunk(text, *args)

    monkeypatch.setattr(sync_module, "chunk_markdown", failing_chunk)
    mem2 = open_index(ws, embedder=HashEmbedder(model="m2"))  # a new model: full rebuild
    with pytest.raises(MemoryError):
        mem2.sync()
    assert leftovers(mem2.store_path) == []
    monkeypatch.setattr(sync_module, "chunk_markdown", real_chunk)
    reader = open_index(ws, embedder=HashEmbedder(model="m1"))
    after = reader.status()
    assert (after.files, after.chunks, after.model) == (before.files, before.chunks, "m1")
    assert reader.search("jazz")[0].id == old_hit.id


def test_rebuild_for_a_new_model_swaps_keywords_in_first_and_survives_a_vector_failure(
        make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    """Two-phase full reindex: the new model's keyword rows are built beside the live index and
    swapped in, its vectors follow on the live index. A provider failing in the vector phase
    leaves a searchable index (keywords, the vectors done so far), no temporary file, and the
    old model's vectors in the cache: going back embeds nothing."""
    ws = make_workspace(many_files())
    mem = open_index(ws, embedder=HashEmbedder(model="m1"))
    mem.sync()
    before = mem.status()
    old_hit = mem.search("jazz")[0]
    mem.close()
    failing = FailingEmbedder(fail_on=6, model="m2")  # after the first group of chunks
    mem2 = open_index(ws, embedder=failing)
    with pytest.raises(EmbeddingError, match="embedding failure"):
        mem2.sync()
    assert failing.calls == 6
    assert leftovers(mem2.store_path) == []
    st = mem2.status()
    assert (st.files, st.chunks, st.model) == (before.files, before.chunks, "m2")
    assert st.vectors is not None and 0 < st.vectors["done"] < st.vectors["total"] == before.chunks
    assert mem2.search("jazz")[0].path == "MEMORY.md"
    mem2.close()
    back = HashEmbedder(model="m1")
    reader = open_index(ws, embedder=back)
    reader.sync()
    assert back.texts_embedded == 0
    assert reader.status().vectors == {"done": before.chunks, "total": before.chunks}
    assert reader.search("jazz")[0].id == old_hit.id


def test_failed_forced_rebuild_without_cache_keeps_chunks(make_workspace: WorkspaceFactory,
                                                          open_index: IndexFactory) -> None:
    ws = make_workspace(many_files(4))
    no_cache = MemoryConfig.from_dict({"cache": {"enabled": False}})
    emb = FailingEmbedder(fail_on=10**9)
    mem = open_index(ws, embedder=emb, config=no_cache)
    mem.sync()
    chunks = mem.status().chunks
    emb.fail_on = emb.calls + 2
    with pytest.raises(EmbeddingError):
        mem.sync(force=True)
    assert mem.status().chunks == chunks
    assert mem.search("jazz")[0].path == "MEMORY.md"
    assert leftovers(mem.store_path) == []


def test_interrupted_rebuild_resumes_without_reembedding(make_workspace: WorkspaceFactory,
                                                         open_index: IndexFactory) -> None:
    ws = make_workspace(many_files())
    failing = FailingEmbedder(fail_on=3)
    mem = open_index(ws, embedder=failing)
    with pytest.raises(EmbeddingError):
        mem.sync()
    embedded_before_crash = failing.texts_embedded
    assert embedded_before_crash > 0
    mem.close()
    resumed = HashEmbedder()
    mem2 = open_index(ws, embedder=resumed)
    report = mem2.sync()
    total = mem2.status().chunks
    assert report.embeddings_cached == embedded_before_crash
    assert resumed.texts_embedded == total - embedded_before_crash
