"""``MemoryIndex`` end to end on real files and a real SQLite index (SPEC 4-6, 13; OpenClaw
tests 53, 56, 63, 67 and the [beyond] search points)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import apsw
import pytest
import sqlite_vec

from clawmem_core import MemoryConfig, SearchResult
from clawmem_core.chunking import chunk_markdown
from clawmem_core.config import HybridConfig, MMRConfig, QueryConfig, TemporalDecayConfig
from clawmem_core.embeddings.base import MAX_INPUT_BYTES
from clawmem_core.testing import HashEmbedder

from .conftest import SAMPLE_FILES, IndexFactory, WorkspaceFactory, keyword_only, write_files


class RecordingEmbedder(HashEmbedder):
    """Records the UTF-8 size of each document batch."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.batch_bytes: list[int] = []

    def _embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.batch_bytes.append(sum(len(t.encode("utf-8")) for t in texts))
        return super()._embed_documents(texts)


class ExplodingEmbedder(HashEmbedder):
    """Fails on any use: proves an operation never touched the embedder."""

    def _embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise AssertionError("embedder used for documents")

    def _embed_query(self, text: str) -> list[float]:
        raise AssertionError("embedder used for a query")


def vec_connection(path: Path) -> apsw.Connection:
    conn = apsw.Connection(str(path))
    conn.enable_load_extension(True)
    conn.load_extension(sqlite_vec.loadable_path())
    return conn


def paths_of(hits: list[SearchResult]) -> list[str]:
    return [h.path for h in hits]


# -- empty index, status ------------------------------------------------------------------------


def test_empty_index_returns_nothing_without_creating_the_embedder(make_workspace: WorkspaceFactory,
                                                                    open_index: IndexFactory) -> None:
    ws = make_workspace({"README.md": "not memory"})
    mem = open_index(ws, embedder=ExplodingEmbedder())
    assert mem.search("anything at all") == []
    assert mem._embedding.selection is None


def test_empty_index_does_not_create_a_configured_provider(make_workspace: WorkspaceFactory,
                                                          open_index: IndexFactory) -> None:
    # openai without an API key would fail (or fall back) if it were created.
    ws = make_workspace({})
    mem = open_index(ws, embedder=None, config=MemoryConfig(provider="openai"))
    assert mem.search("anything") == []
    assert mem._embedding.selection is None


def test_first_search_indexes_then_answers(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    ws = make_workspace(SAMPLE_FILES)
    mem = open_index(ws)
    hits = mem.search("jazz espresso")
    assert hits and hits[0].path == "MEMORY.md"


def test_status_counts_and_no_provider_calls(make_workspace: WorkspaceFactory, open_index: IndexFactory,
                                             state_dir: Path) -> None:
    ws = make_workspace(SAMPLE_FILES)
    emb = HashEmbedder()
    mem = open_index(ws, embedder=emb)
    mem.sync()
    expected_chunks = sum(len(chunk_markdown(t)) for t in SAMPLE_FILES.values())
    st = mem.status()
    assert (st.files, st.chunks) == (3, expected_chunks)
    assert st.by_source == {"memory": {"files": 3, "chunks": expected_chunks}}
    assert st.provider == "hash" and st.model == "hash-v1" and st.mode == "hybrid"
    assert st.dirty is False
    assert st.fts["available"] is True
    assert st.cache["enabled"] is True and st.cache["entries"] == expected_chunks
    # A second, status-only instance on the same index: counts, no embedding at all.
    other = open_index(ws, embedder=ExplodingEmbedder())
    st2 = other.status()
    assert (st2.files, st2.chunks, st2.provider) == (3, expected_chunks, "hash")
    assert st2.dirty is False
    assert other._embedding.selection is None


def test_status_reports_issues(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    ws = make_workspace({"MEMORY.md": "m\n"})
    mem = open_index(ws, config=MemoryConfig(extra_paths=["missing-notes"]))
    issues = "\n".join(mem.status().issues)
    assert "memory directory missing" in issues
    assert "missing-notes" in issues


def test_results_carry_the_documented_fields(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    ws = make_workspace({"MEMORY.md": "intro\n\n" + "kubernetes deploy notes " * 60 + "\nend\n"})
    mem = open_index(ws)
    mem.sync()
    [hit] = mem.search("kubernetes deploy", min_score=0)
    assert hit.path == "MEMORY.md" and hit.source == "memory"
    assert (hit.start_line, hit.end_line) == (1, 4)  # a final newline does not open a line 5
    assert hit.citation == "MEMORY.md#L3"  # the snippet shows the matching line (cut to 700 characters)
    assert len(hit.snippet) <= 700 and "kubernetes deploy" in hit.snippet and "intro" not in hit.snippet
    assert 0 < hit.score <= 1


# -- indexing ---------------------------------------------------------------------------------------


def test_keyword_only_mode_indexes_every_chunk(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    files = {f"memory/note{i:02d}.md": "\n".join(f"token{i:02d}x{j:03d} " + "filler words here " * 8
                                                 for j in range(40)) for i in range(6)}
    ws = make_workspace(files)
    mem = open_index(ws, embedder=None, config=keyword_only())
    report = mem.sync()
    expected = sum(len(chunk_markdown(t)) for t in files.values())
    assert report.chunks_indexed == expected
    assert mem.status().chunks == expected
    assert mem.status().mode == "fts-only"
    for i in range(6):
        for j in (0, 17, 39):
            hits = mem.search(f"token{i:02d}x{j:03d}", max_results=3)
            assert hits and hits[0].path == f"memory/note{i:02d}.md"
            assert hits[0].start_line <= j + 1 <= hits[0].end_line


def test_unchanged_files_are_not_reembedded_and_deleted_files_vanish(make_workspace: WorkspaceFactory,
                                                                    open_index: IndexFactory) -> None:
    ws = make_workspace(SAMPLE_FILES)
    emb = HashEmbedder()
    mem = open_index(ws, embedder=emb)
    mem.sync()
    first = emb.texts_embedded
    report = mem.sync()
    assert report.files_indexed == 0 and emb.texts_embedded == first
    (ws / "memory" / "2026-01-05.md").write_text("# Standup\n\nRolled back the billing release.\n")
    (ws / "memory" / "projects" / "roadmap.md").unlink()
    report = mem.sync()
    assert report.files_indexed == 1 and report.files_deleted == 1
    assert mem.search("roadmap designer March", min_score=0) == [] or all(
        h.path != "memory/projects/roadmap.md" for h in mem.search("roadmap designer March", min_score=0))
    assert "Rolled back" in mem.search("rolled back billing", min_score=0)[0].snippet


def test_embedding_batches_stay_within_8000_bytes(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    big = {f"memory/big{i}.md": "\n".join(f"paragraph {i}-{j} " + "lorem ipsum dolor sit amet " * 12
                                          for j in range(120)) for i in range(3)}
    small = {"MEMORY.md": "tiny note\n"}
    ws = make_workspace(big | small)
    emb = RecordingEmbedder()
    mem = open_index(ws, embedder=emb)
    mem.sync()
    assert len(emb.batch_bytes) > 3
    assert all(b <= MAX_INPUT_BYTES for b in emb.batch_bytes)
    assert emb.texts_embedded == mem.status().chunks


def test_small_workspace_embeds_in_one_call(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    ws = make_workspace(SAMPLE_FILES)
    emb = RecordingEmbedder()
    open_index(ws, embedder=emb).sync()
    assert emb.calls == 1


def test_vector_rows_are_replaced_on_reindex(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    ws = make_workspace(SAMPLE_FILES)
    mem = open_index(ws)
    mem.sync()
    target = ws / "MEMORY.md"
    for round_ in range(3):
        target.write_text(f"# Preferences v{round_}\n\n" + f"version {round_} likes tea\n" * (round_ + 1) * 40)
        mem.sync()
        conn = vec_connection(mem.store_path)
        chunks = conn.execute("SELECT count(*) FROM chunks").fetchall()[0][0]
        vecs = conn.execute("SELECT count(*) FROM chunks_vec").fetchall()[0][0]
        orphans = conn.execute("SELECT count(*) FROM chunks_vec WHERE rowid NOT IN (SELECT rid FROM chunks)")
        assert vecs == chunks
        assert orphans.fetchall()[0][0] == 0
        conn.close()
    assert "version 2" in mem.search("version tea", min_score=0)[0].snippet


def test_binary_and_non_utf8_files_do_not_break_sync(make_workspace: WorkspaceFactory,
                                                      open_index: IndexFactory) -> None:
    ws = make_workspace(SAMPLE_FILES | {"memory/blob.md": b"\x00\x01\x02binary\x00zebra",
                                        "memory/latin1.md": "caf\xe9 au lait with quokka\n".encode("latin-1")})
    mem = open_index(ws)
    report = mem.sync()
    assert any("blob.md" in s for s in report.files_skipped)
    assert report.files_indexed == len(SAMPLE_FILES) + 1  # the binary file counts as skipped, not indexed
    hit = mem.search("quokka lait", min_score=0)[0]
    assert hit.path == "memory/latin1.md" and "café au lait" in hit.snippet  # decoded as Latin-1
    assert all(h.path != "memory/blob.md" for h in mem.search("binary zebra", min_score=0))


# -- keyword side: OR semantics, BM25 weighting, CJK ------------------------------------------------


@pytest.fixture
def ranking_ws(make_workspace: WorkspaceFactory) -> Path:
    files = {f"memory/common{i:02d}.md": f"alpha appears in this ordinary note number {i}\n" for i in range(10)}
    files |= {
        "memory/all.md": "alpha zebra quokka together in one ordinary note\n",
        "memory/zebra.md": "zebra alone in this ordinary note here today\n",
        "memory/quokka.md": "quokka alone in this ordinary note here today\n",
    }
    return make_workspace(files)


@pytest.mark.parametrize("hybrid", [False, True])
def test_keyword_ranking_is_or_with_rarer_terms_first(ranking_ws: Path, open_index: IndexFactory,
                                                      hybrid: bool) -> None:
    if hybrid:
        mem = open_index(ranking_ws, config=MemoryConfig(query=QueryConfig(hybrid=HybridConfig(
            vector_weight=0.0, text_weight=1.0))))
    else:
        mem = open_index(ranking_ws, embedder=None, config=keyword_only())
    mem.sync()
    hits = mem.search("alpha zebra quokka", max_results=20, min_score=0)
    found = paths_of(hits)
    assert found[0] == "memory/all.md"  # matches every term
    # Chunks matching only some of the terms are still found ...
    assert {"memory/zebra.md", "memory/quokka.md", "memory/common00.md"} <= set(found)
    # ... and a rare term outweighs a common one.
    assert found.index("memory/zebra.md") < found.index("memory/common00.md")
    assert found.index("memory/quokka.md") < found.index("memory/common00.md")


def test_question_words_do_not_require_all_terms(ranking_ws: Path, open_index: IndexFactory) -> None:
    mem = open_index(ranking_ws, embedder=None, config=keyword_only())
    mem.sync()
    hits = mem.search("what did I write about the zebra last winter?", min_score=0)
    assert hits and hits[0].path in ("memory/zebra.md", "memory/all.md")


CJK_FILES = {
    "memory/zh.md": "今天玩成语接龙游戏\n",
    "memory/ja.md": "昨日はしりとりをしました\n",
    "memory/ko.md": "우리는 끝말잇기를 했다\n",
    "memory/en.md": "we played chess all afternoon\n",
}


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
@pytest.mark.parametrize("query, path", [
    ("成语", "memory/zh.md"),
    ("接龙游戏", "memory/zh.md"),
    ("しりとり", "memory/ja.md"),
    ("끝말", "memory/ko.md"),
    ("끝말잇기", "memory/ko.md"),
])
def test_cjk_substring_search(make_workspace: WorkspaceFactory, open_index: IndexFactory,
                              query: str, path: str, mode: str) -> None:
    ws = make_workspace(CJK_FILES)
    mem = open_index(ws, embedder=None, config=keyword_only()) if mode == "keyword" else open_index(ws)
    mem.sync()
    hits = mem.search(query)
    assert hits, f"{query} found nothing"
    assert hits[0].path == path
    assert hits[0].text_score > 0


def test_cjk_query_with_no_shared_characters_finds_nothing(make_workspace: WorkspaceFactory,
                                                          open_index: IndexFactory) -> None:
    ws = make_workspace(CJK_FILES)
    mem = open_index(ws, embedder=None, config=keyword_only())
    mem.sync()
    assert mem.search("足球") == []


def test_cjk_multi_term_query_ranks_the_row_with_both_first(make_workspace: WorkspaceFactory,
                                                          open_index: IndexFactory) -> None:
    ws = make_workspace({"memory/a.md": "今天玩成语接龙游戏\n", "memory/b.md": "成语词典很厚\n",
                         "memory/c.md": "电脑游戏很好玩\n"})
    mem = open_index(ws, embedder=None, config=keyword_only())
    mem.sync()
    found = paths_of(mem.search("成语接龙 游戏", min_score=0))
    assert found[0] == "memory/a.md"
    assert set(found) == {"memory/a.md", "memory/b.md", "memory/c.md"}


def test_chinese_question_words_do_not_match_every_chunk(make_workspace: WorkspaceFactory,
                                                         open_index: IndexFactory) -> None:
    # 什么 / 什么时候 occur in most conversation chunks; only the content words may match.
    ws = make_workspace({"memory/camp.md": "我们在考虑下个月去露营。\n",
                         "memory/chat.md": "你在做什么？你什么时候有空？\n",
                         "memory/food.md": "什么都行，我们吃面条吧。\n"})
    mem = open_index(ws, embedder=None, config=keyword_only())
    mem.sync()
    assert paths_of(mem.search("Melanie什么时候去露营？", min_score=0)) == ["memory/camp.md"]


def test_chinese_question_ranks_the_chunk_with_the_content_words_first(make_workspace: WorkspaceFactory,
                                                                       open_index: IndexFactory) -> None:
    # Before question words were cut out, the chunk holding 了什么 twice outranked the answer.
    ws = make_workspace({"memory/a.md": "她最近在研究收养机构的资料。\n",
                         "memory/b.md": "你今天做了什么？他们说了什么？\n",
                         "memory/c.md": "研讨会上讲了很多。\n"})
    mem = open_index(ws, embedder=None, config=keyword_only())
    mem.sync()
    found = paths_of(mem.search("Caroline研究了什么？", min_score=0))
    assert found[0] == "memory/a.md"
    assert "memory/b.md" not in found


# -- thresholds -------------------------------------------------------------------------------------


def test_relaxed_fallback_versus_strict_abstention(make_workspace: WorkspaceFactory, open_index: IndexFactory,
                                                   tmp_path: Path) -> None:
    ws = make_workspace(SAMPLE_FILES)
    openclaw = {"hybrid": {"fusion": "openclaw"}}
    relaxed = open_index(ws, config=MemoryConfig.from_dict({"query": {**openclaw, "minScore": 0.95}}))
    relaxed.sync()
    # OpenClaw fusion: a configured min_score 0.95 is out of reach; the relaxed fallback still
    # returns the keyword hits.
    hits = relaxed.search("kubernetes")
    assert hits and hits[0].path == "memory/2026-01-05.md"
    assert all(h.score < 0.95 and h.score >= 0.3 * h.text_score for h in hits)
    # A min_score the caller gives is a floor, in either fusion.
    assert relaxed.search("kubernetes", min_score=0.95) == []
    strict = open_index(ws, config=MemoryConfig.from_dict({"query": {**openclaw, "strict": True}}), state=tmp_path / "strict")
    strict.sync()
    assert strict.search("kubernetes", min_score=0.95) == []
    for ms in (0.0, 0.1, 0.2, 0.3, 0.35, 0.5, 0.8):
        for q in ("kubernetes", "jazz espresso", "search feature March", "nothing matches this"):
            assert all(h.score >= ms for h in strict.search(q, min_score=ms, max_results=20))


def test_strict_keyword_only_abstains(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    ws = make_workspace(SAMPLE_FILES)
    cfg = MemoryConfig.from_dict({"provider": "none", "query": {"strict": True, "hybrid": {"fusion": "openclaw"}}})
    mem = open_index(ws, embedder=None, config=cfg)
    mem.sync()
    assert mem.search("kubernetes", min_score=0.99) == []
    assert all(h.score >= 0.2 for h in mem.search("kubernetes billing", min_score=0.2))


TOPICS = ["jazz music", "espresso coffee", "kubernetes deploy", "postgres migration", "billing invoices",
          "roadmap planning", "hiring designer", "vacation travel", "birthday gift", "python refactor"]


@pytest.fixture
def forty_notes(make_workspace: WorkspaceFactory) -> Path:
    files = {}
    for i in range(40):
        a, b = TOPICS[i % 10], TOPICS[(i * 3 + 1) % 10]
        files[f"memory/2026-01-{(i % 28) + 1:02d}-n{i}.md" if i % 2 else f"memory/topic{i}.md"] = (
            f"# Note {i}\n\nToday {a} and {b}. Follow up on {a} next week (item {i}).\n")
    files["MEMORY.md"] = "Long-term: I like jazz music and espresso coffee; deploys go through kubernetes.\n"
    return make_workspace(files)


@pytest.mark.parametrize("mmr, decay", [(False, False), (True, False), (True, True)])
def test_results_are_monotonic_in_max_results(forty_notes: Path, open_index: IndexFactory, mmr: bool,
                                               decay: bool) -> None:
    config = MemoryConfig(query=QueryConfig(hybrid=HybridConfig(mmr=MMRConfig(enabled=mmr),
                                                                temporal_decay=TemporalDecayConfig(enabled=decay))))
    mem = open_index(forty_notes, config=config)
    mem.sync()
    longest = 0
    for query in ("jazz music", "kubernetes deploy postgres", "what gift for the birthday"):
        for min_score in (0.0, 0.35):
            tops = [[h.id for h in mem.search(query, max_results=k, min_score=min_score)] for k in range(1, 14)]
            for k in range(len(tops) - 1):
                assert tops[k] == tops[k + 1][: len(tops[k])], (query, k + 1)
                assert len(tops[k]) <= k + 1
            longest = max(longest, len(tops[-1]))
    assert longest == 13  # the prefixes were really compared up to k = 13


def test_temporal_decay_end_to_end_in_subfolders(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    text = "quarterly review of the budget spreadsheet\n"
    ws = make_workspace({"memory/archive/2001-03-04-review.md": text, "memory/evergreen.md": text})
    cfg = MemoryConfig(query=QueryConfig(hybrid=HybridConfig(temporal_decay=TemporalDecayConfig(enabled=True))))
    mem = open_index(ws, config=cfg)
    mem.sync()
    hits = {h.path: h.score for h in mem.search("quarterly budget review", min_score=0)}
    assert hits["memory/evergreen.md"] > 0.3
    assert hits.get("memory/archive/2001-03-04-review.md", 0.0) < 0.001


# -- concurrency --------------------------------------------------------------------------------------


class SlowEmbedder(HashEmbedder):
    def _embed_documents(self, texts: list[str]) -> list[list[float]]:
        import time

        time.sleep(0.02)
        return super()._embed_documents(texts)


def test_search_from_a_second_index_during_a_rebuild(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    files = {f"memory/n{i}.md": f"note {i} " + "ordinary filler text " * 100 for i in range(16)}
    files["MEMORY.md"] = "I like jazz music and espresso.\n"
    ws = make_workspace(files)
    no_cache = MemoryConfig.from_dict({"cache": {"enabled": False}})
    writer = open_index(ws, embedder=SlowEmbedder(), config=no_cache)
    writer.sync()
    reader = open_index(ws, embedder=SlowEmbedder(), config=no_cache)
    errors: list[BaseException] = []
    results: list[list[str]] = []
    done = threading.Event()

    def rebuild() -> None:
        try:
            for _ in range(2):
                writer.sync(force=True)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            done.set()

    t = threading.Thread(target=rebuild)
    t.start()
    while not done.is_set():
        try:
            results.append(paths_of(reader.search("jazz espresso", max_results=1)))
        except BaseException as exc:
            errors.append(exc)
            break
    t.join()
    assert not errors, errors
    assert len(results) > 3
    assert all(r == ["MEMORY.md"] for r in results), results


# -- extra paths and async twins ----------------------------------------------------------------------


def test_tilde_and_env_extra_paths_are_indexed_and_readable(make_workspace: WorkspaceFactory, open_index: IndexFactory,
                                                            tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = write_files(tmp_path / "home", {"notes/t.md": "the tilde notes mention a narwhal\n"})
    shared = write_files(tmp_path / "shared", {"s.md": "the shared notes mention a pangolin\n"})
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CLAWMEM_TEST_SHARED", str(shared))
    ws = make_workspace(SAMPLE_FILES)
    mem = open_index(ws, config=MemoryConfig(extra_paths=["~/notes", "$CLAWMEM_TEST_SHARED"]))
    mem.sync()
    narwhal = mem.search("narwhal")[0]
    assert narwhal.path == "../home/notes/t.md"
    assert mem.read(narwhal.path).text == "the tilde notes mention a narwhal\n"
    assert mem.search("pangolin")[0].path == "../shared/s.md"


def test_async_twins_match_the_sync_api(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    import asyncio

    ws = make_workspace(SAMPLE_FILES)
    mem = open_index(ws)

    async def go() -> tuple[list[SearchResult], str]:
        await mem.async_sync()
        hits = await mem.asearch("kubernetes billing")
        text = (await mem.aread("MEMORY.md", from_line=3, lines=1)).text
        return hits, text

    hits, text = asyncio.run(go())
    assert [h.id for h in hits] == [h.id for h in mem.search("kubernetes billing")]
    assert text == "I like jazz music and espresso."


def test_temporal_decay_applies_to_session_transcripts(make_workspace: WorkspaceFactory, state_dir: Path,
                                                       tmp_path: Path) -> None:
    """A transcript's age is its file's mtime in the sessions directory (not under the workspace)."""
    import json
    import os
    import time

    from clawmem_core import MemoryIndex

    ws = make_workspace({"memory/notes.md": "unrelated\n"})
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    line = json.dumps({"type": "message", "message": {"role": "user", "content": "the quarterly budget review"}})
    for name, age_days in (("old.jsonl", 365), ("new.jsonl", 0)):
        (sessions / name).write_text(line + "\n", encoding="utf-8")
        ts = time.time() - age_days * 86400
        os.utime(sessions / name, (ts, ts))
    cfg = MemoryConfig.from_dict({"provider": "none", "sources": ["memory", "sessions"],
                                  "experimental": {"sessionMemory": True},
                                  "query": {"hybrid": {"temporalDecay": {"enabled": True}}}})
    with MemoryIndex(ws, config=cfg, state_dir=state_dir, sessions_dir=sessions) as mem:
        mem.sync()
        hits = {h.path: h.score for h in mem.search("quarterly budget review", min_score=0)}
    assert set(hits) == {"sessions/old.jsonl", "sessions/new.jsonl"}
    assert hits["sessions/old.jsonl"] < hits["sessions/new.jsonl"] / 1000  # a year is 12 half-lives


@pytest.mark.parametrize("mode", ["hybrid", "keyword-only"])
def test_results_stay_monotonic_beyond_the_candidate_pool(make_workspace: WorkspaceFactory,
                                                          open_index: IndexFactory, mode: str) -> None:
    """Asking for more than the fixed candidate pool (200 per side) never reorders the first
    results: a chunk just past a side's 200th candidate must not join the top when more are asked."""
    import random

    rng = random.Random(19)
    words = [f"w{i}" for i in range(40)]
    files = {f"memory/n{i:03d}.md": "\n".join(" ".join(rng.choice(words) for _ in range(12)) for _ in range(3)) + "\n"
             for i in range(700)}
    ws = make_workspace(files)
    mem = open_index(ws, embedder=None if mode == "keyword-only" else "hash",
                     config=MemoryConfig(provider="none") if mode == "keyword-only" else None)
    mem.sync()
    ks = [10, 150, 199, 200, 201, 230, 300, 450, 700]
    for query in ("w1 w2 w3", "w7 w30 w31 w32 w33"):
        for _ in range(3):  # past the first queries, which sqlite-vec and FTS5 answer (ties ordered otherwise)
            mem.search(query)
        tops = [[h.id for h in mem.search(query, max_results=k, min_score=0)] for k in ks]
        for small, big, k in zip(tops, tops[1:], ks):
            assert small == big[: len(small)], (query, k)
        assert len(tops[-1]) > 400  # results past the pool were really compared
        assert len(set(tops[-1])) == len(tops[-1])
