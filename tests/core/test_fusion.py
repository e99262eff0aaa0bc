"""Calibrated fusion (the default), abstention, small workspaces, the query deadline and the
reranking stage."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from clawmem_core import MemoryConfig
from clawmem_core.calibration import (
    BACKGROUND_TEXTS,
    background_level,
    calibrated_cosine,
    decode_vectors,
    encode_vectors,
)
from clawmem_core.rerank import Reranker, blend_by_position, wrap_reranker
from clawmem_core.search import fts_idf, query_idf_mass, text_relevance
from clawmem_core.testing import HashEmbedder
from clawmem_core.tools import asearch_payload, search_payload

from .conftest import IndexFactory, WorkspaceFactory
from .conftest import keyword_only as _keyword_only


@pytest.fixture
def keyword_only() -> MemoryConfig:
    return _keyword_only()

SMALL = {
    "MEMORY.md": "# Long-term memory\n\n- Name: Dana Whitfield. Lives in Lisbon.\n- Music: loves jazz, Miles Davis.\n"
                 "- Editor: Neovim with a light colour scheme.\n- Timezone: Europe/Lisbon.\n",
    "memory/2026-11-09.md": "# 2026-11-09\n\n- Dana bought a new mechanical keyboard.\n",
    "memory/2026-11-16.md": "# 2026-11-16\n\n- Dana prefers postmortems in the blameless format.\n",
}

NOTES = {
    "MEMORY.md": "# Memory\n\nThe billing service runs on PostgreSQL 16 with Celery workers.\n",
    "memory/2026-01-05.md": "# Standup\n\nDeployed the billing migration; rolled back the invoice exporter.\n",
    "memory/2026-01-06.md": "# Notes\n\nPriya owns the on-call rotation and the Grafana dashboards.\n",
    "memory/2026-01-07.md": "# 周会\n\n决定下个月开始使用 GitHub Actions 部署，Jenkins 年底下线。\n",
}


# -- pure maths -----------------------------------------------------------------------------------


def test_text_relevance_is_the_share_of_the_query_idf_mass() -> None:
    mass = query_idf_mass(["jazz", "kubernetes"], [1, 0], 10)
    assert mass == pytest.approx(fts_idf(10, 1) + fts_idf(10, 0))
    # a chunk holding the one present term (once, average length) scores its share of the mass
    part = -fts_idf(10, 1)
    assert text_relevance([part, part / 2], mass) == [pytest.approx(fts_idf(10, 1) / mass), pytest.approx(fts_idf(10, 1) / mass / 2)]
    # a hit above the mass: the best scores 1, the rest in BM25's proportion
    assert text_relevance([-2 * mass, -mass, -mass / 2], mass) == [1.0, 0.5, 0.25]
    assert text_relevance([0.5, -1.0], 0.0) == [0.0, 1.0]
    assert text_relevance([float("nan")], mass) == [0.0] and text_relevance([], mass) == []


def test_idf_mass_skips_absent_cjk_pairs_but_not_absent_words() -> None:
    # "有负" straddles two words of a question: absent from any text, it must not dilute the match
    assert query_idf_mass(["负面", "有负"], [3, 0], 100) == pytest.approx(fts_idf(100, 3))
    assert query_idf_mass(["负", "gina"], [3, 0], 100) == pytest.approx(fts_idf(100, 3) + fts_idf(100, 0))


def test_small_workspace_idf_floor_still_gives_meaningful_shares() -> None:
    # a term in most of 3 rows has FTS5's floored IDF 1e-6; the share is still about 1
    rows, hits = 3, 3
    idf = fts_idf(rows, hits)
    assert idf == 1e-6
    assert text_relevance([-idf * 0.9], query_idf_mass(["dana"], [hits], rows)) == [pytest.approx(0.9)]


def test_calibrated_cosine_removes_the_embedder_baseline() -> None:
    # an e5-like model: unrelated text near 0.8; MiniLM-like: near 0.1
    assert calibrated_cosine(0.8, 0.8) == 0.0
    assert calibrated_cosine(0.9, 0.8) == pytest.approx(0.5)
    assert calibrated_cosine(0.55, 0.1) == pytest.approx(0.5)
    assert calibrated_cosine(0.05, 0.1) == 0.0
    assert calibrated_cosine(0.7, math.nan) == 0.7  # no calibration: the raw cosine
    assert calibrated_cosine(float("nan"), 0.5) == 0.0
    assert background_level([0.1, 0.3, float("nan"), 0.2], 100) == 0.3
    assert background_level([0.1, 0.3, float("nan"), 0.2], 50) == pytest.approx(0.2)
    assert background_level([float(i) for i in range(11)]) == pytest.approx(9.0)  # the 90th percentile
    assert math.isnan(background_level([]))


def test_background_vectors_round_trip() -> None:
    vecs = [[0.5, -0.25, 1.0], [0.0, 2.0, -3.5]]
    assert decode_vectors(encode_vectors(vecs)) == vecs
    assert len(BACKGROUND_TEXTS) >= 40
    assert sum(1 for t in BACKGROUND_TEXTS if any("\u4e00" <= ch <= "\u9fff" for ch in t)) >= len(BACKGROUND_TEXTS) // 3


def test_blend_by_position_keeps_a_strong_first_place() -> None:
    n = 10
    reversed_scores = [float(i) for i in range(n)]  # the reranker puts the fused last first
    order = blend_by_position(n, reversed_scores, 0.5)
    assert order[0] == 0  # fused first place survives a reranker that ranks it last (ties: fused order)
    assert order != list(range(n))
    assert blend_by_position(n, reversed_scores, 0.4)[:2] == [0, 1]
    assert blend_by_position(n, reversed_scores, 1.0) == list(reversed(range(n)))
    assert blend_by_position(n, reversed_scores, 0.0) == list(range(n))
    # an agreeing reranker changes nothing; a reranker that lifts the fused 2nd above the 1st wins
    assert blend_by_position(n, [float(n - i) for i in range(n)], 0.5) == list(range(n))
    lift = [0.0] * n
    lift[1] = 9.0
    assert blend_by_position(n, lift, 0.5)[:2] == [0, 1]  # a swap of neighbours is a tie at 0.5
    assert blend_by_position(n, lift, 0.6)[:2] == [1, 0]
    assert blend_by_position(3, [float("nan"), 1.0, 0.5], 1.0) == [1, 2, 0]
    with pytest.raises(ValueError):
        blend_by_position(3, [1.0], 0.5)


# -- small workspaces, min_score as a floor (issue 12 item 3) ------------------------------------


def test_small_workspace_scores_are_not_zero(make_workspace: WorkspaceFactory, open_index: IndexFactory,
                                             keyword_only: MemoryConfig) -> None:
    mem = open_index(make_workspace(SMALL), embedder=None, config=keyword_only)
    mem.sync()
    hits = mem.search("Dana")
    assert len(hits) == 3
    assert all(h.score > 0.3 for h in hits)  # FTS5's IDF of a term in every file is 1e-6
    assert {h.path for h in hits} == set(SMALL)
    jazz = mem.search("jazz")
    assert jazz and jazz[0].path == "MEMORY.md" and jazz[0].score > 0.5


EXAMPLE_WORKSPACE = Path(__file__).resolve().parents[2] / "examples" / "workspace"


def _example_files() -> dict[str, str]:
    """The example workspace's Markdown, by relative path."""
    return {str(p.relative_to(EXAMPLE_WORKSPACE)): p.read_text(encoding="utf-8") for p in EXAMPLE_WORKSPACE.rglob("*.md")}


@pytest.mark.parametrize("query", ["Dana", "Priya", "Marco", "李伟"])
def test_the_file_that_names_the_thing_ranks_first(make_workspace: WorkspaceFactory, open_index: IndexFactory,
                                                   keyword_only: MemoryConfig, query: str) -> None:
    # MEMORY.md's one long chunk names them (e.g. "Name: Dana Whitfield", "李伟 (Li Wei): data engineer");
    # short daily notes mention them in passing, and BM25's length normalisation favoured those.
    mem = open_index(make_workspace(_example_files()), embedder=None, config=keyword_only)
    mem.sync()
    hits = mem.search(query)
    assert len(hits) >= 2 and hits[0].path == "MEMORY.md", [(h.path, h.score) for h in hits]
    assert hits[0].score == 1.0 and all(h.score < 1.0 for h in hits[1:])


@pytest.mark.parametrize("query", ["billing", "billing invoices"])
def test_the_note_named_for_the_thing_ranks_first(make_workspace: WorkspaceFactory, open_index: IndexFactory,
                                                 keyword_only: MemoryConfig, query: str) -> None:
    # MEMORY.md mentions billing in passing; memory/projects/billing.md is the note about it.
    mem = open_index(make_workspace(_example_files()), embedder=None, config=keyword_only)
    mem.sync()
    assert mem.search(query)[0].path == "memory/projects/billing.md"


def test_the_name_prior_counts_words_and_cjk_pairs_not_dates_or_single_characters(
        make_workspace: WorkspaceFactory, open_index: IndexFactory, keyword_only: MemoryConfig) -> None:
    from clawmem_core.search import name_terms, prior_ranks

    assert name_terms("memory/项目/账单.md") == {"账单"}
    assert name_terms("memory/2026-11-12.md") == set()
    assert name_terms("memory/q3-roadmap.md") == {"q3", "roadmap"}
    meta = {"n": ("memory/projects/billing.md", "memory", 1, 5), "d": ("memory/2026-11-12.md", "memory", 1, 5),
            "s": ("sessions/billing.md", "sessions", 1, 5), "m": ("MEMORY.md", "memory", 1, 5)}
    hits = [("n", -1.0), ("d", -1.0), ("s", -1.0), ("m", -1.0)]
    assert prior_ranks(hits, meta, ["billing"]) == [-2.0, -1.0, -1.0, -2.0]  # once: MEMORY.md's is not doubled
    assert prior_ranks(hits, meta, ["2026", "11"]) == [-1.0, -1.0, -1.0, -2.0]  # a date names nothing
    assert prior_ranks(hits, meta, ["bill"]) == [-1.0, -1.0, -1.0, -2.0]
    # Chinese: the note named 账单 comes first; a query sharing only one character with a name does not.
    files = {"MEMORY.md": "# Memory\n\n- 账单服务由李伟负责，每月一号出账单。\n" + "- 其他事项。\n" * 30,
             "memory/项目/账单.md": "# 账单服务\n\n" + "- 发票在每月一号生成，金额以分存储。\n" * 6 + "- 账单对账由李伟负责。\n",
             "memory/2026-11-12.md": "# 2026-11-12\n\n- 账单金额核对完毕。\n- 单元测试补齐。\n"}
    mem = open_index(make_workspace(files), embedder=None, config=keyword_only)
    mem.sync()
    assert mem.search("账单", min_score=0)[0].path == "memory/项目/账单.md"
    assert mem.search("单元测试", min_score=0)[0].path == "memory/2026-11-12.md"


def test_the_curated_prior_only_reorders_memory_md(make_workspace: WorkspaceFactory, open_index: IndexFactory,
                                                  keyword_only: MemoryConfig) -> None:
    from clawmem_core.search import prior_ranks

    meta = {"a": ("MEMORY.md", "memory", 1, 9), "b": ("memory/2026-01-01.md", "memory", 1, 3),
            "c": ("notes/MEMORY.md", "memory", 1, 3), "d": ("MEMORY.md", "sessions", 1, 3)}
    assert prior_ranks([("a", -1.0), ("b", -1.5), ("c", -1.0), ("d", -1.0), ("gone", -1.0)], meta) == [
        -2.0, -1.5, -1.0, -1.0, -1.0]
    files = {"MEMORY.md": "# Memory\n\n- 账单服务由李伟负责。\n" + "- 其他事项。\n" * 30,
             "memory/2026-11-12.md": "# 2026-11-12\n\n- 李伟请假一天。\n- 账单金额核对完毕。\n- 周会改到周四。\n"}
    mem = open_index(make_workspace(files), embedder=None, config=keyword_only)
    mem.sync()
    # Both hold both terms: MEMORY.md's long chunk comes first (BM25 alone put the short note first).
    assert mem.search("账单 李伟", min_score=0)[0].path == "MEMORY.md"
    # A query term MEMORY.md lacks keeps the note that holds the whole query first.
    assert mem.search("李伟 请假", min_score=0)[0].path == "memory/2026-11-12.md"


def test_explicit_min_score_is_a_floor(make_workspace: WorkspaceFactory, open_index: IndexFactory,
                                       keyword_only: MemoryConfig, state_dir: Path) -> None:
    mem = open_index(make_workspace(SMALL), embedder=None, config=keyword_only)
    mem.sync()
    assert mem.search("jazz", min_score=2) == []
    for ms in (0.0, 0.3, 0.6, 0.95):
        assert all(h.score >= ms for h in mem.search("Dana jazz keyboard", min_score=ms))
    oc = MemoryConfig.from_dict({"provider": "none", "query": {"hybrid": {"fusion": "openclaw"}}})
    old = open_index(make_workspace(SMALL, name="ws2"), embedder=None, config=oc, state=state_dir / "oc")
    old.sync()
    assert old.search("jazz", min_score=2) == []  # OpenClaw's relaxed fallback does not undercut it
    assert old.search("jazz", min_score=0.99) == []
    assert old.search("jazz")  # the configured min_score keeps OpenClaw's fallback


# -- abstention ------------------------------------------------------------------------------------


def test_questions_about_absent_things_return_nothing(make_workspace: WorkspaceFactory, open_index: IndexFactory,
                                                      keyword_only: MemoryConfig, state_dir: Path) -> None:
    ws = make_workspace(NOTES)
    for mem in (open_index(ws, embedder=None, config=keyword_only), open_index(ws, state=state_dir / "hybrid")):
        mem.sync()
        assert mem.search("Which enzyme catalyses the rate-limiting step of cholesterol synthesis?") == []
        assert mem.search("胆固醇合成的限速酶是哪一种?") == []
        assert mem.search("who owns the on-call rotation")[0].path == "memory/2026-01-06.md"
        assert mem.search("什么时候开始使用 GitHub Actions 部署")[0].path == "memory/2026-01-07.md"


def test_openclaw_fusion_is_bit_for_bit(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    cfg = MemoryConfig.from_dict({"query": {"hybrid": {"fusion": "openclaw"}}})
    mem = open_index(make_workspace(NOTES), config=cfg)
    mem.sync()
    assert cfg.query.effective_min_score == 0.35
    hits = mem.search("billing migration rolled back", min_score=0)
    # (path, vector, text, score) of every result, in order: the hash vectors' cosines (2/3, 1/sqrt(44),
    # 1/sqrt(120), as float32), OpenClaw's |r| / (1 + |r|) of the FTS5 rank (below 1, never exactly a share; FTS5's
    # idf floor for "billing", in two of the four notes, on MEMORY.md), and 0.7 * vector + 0.3 * text.
    expected = [
        ("memory/2026-01-05.md", 0.6666666865348816, 0.7510283896881299, 0.691975197480856),
        ("MEMORY.md", 0.1507556438446045, 1.1522952072666026e-06, 0.10552929637978532),
        ("memory/2026-01-07.md", 0.09128713607788086, 0.0, 0.0639009952545166),
    ]
    assert [h.path for h in hits] == [e[0] for e in expected]
    for h, (_, vector, text, score) in zip(hits, expected):
        assert (h.vector_score, h.text_score, h.score) == pytest.approx((vector, text, score), rel=1e-6, abs=1e-12)
        assert h.score == pytest.approx(0.7 * h.vector_score + 0.3 * h.text_score, abs=1e-9)
        assert h.text_score < 1


# -- calibration vectors -----------------------------------------------------------------------------


class CountingEmbedder(HashEmbedder):
    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.documents: list[str] = []

    def _embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.documents.extend(texts)
        return super()._embed_documents(texts)


def test_background_is_embedded_once_and_kept_in_the_index(make_workspace: WorkspaceFactory,
                                                           open_index: IndexFactory) -> None:
    ws = make_workspace(NOTES)
    emb = CountingEmbedder()
    mem = open_index(ws, embedder=emb)
    mem.sync()
    synced = len(emb.documents)
    assert not set(BACKGROUND_TEXTS) & set(emb.documents)  # sync does not pay for it
    mem.search("billing")
    mem.search("Grafana")
    assert emb.documents[synced:] == list(BACKGROUND_TEXTS)  # one call, on the first search
    mem.sync()  # a search never writes; the next sync keeps them in the embedding cache
    mem.close()
    emb2 = CountingEmbedder()
    again = open_index(ws, embedder=emb2)
    again.search("billing")
    assert not set(BACKGROUND_TEXTS) & set(emb2.documents)  # read back from the index
    assert again.search("billing").info.get("degraded") is None


# -- the query deadline ----------------------------------------------------------------------------


class SleepingEmbedder(HashEmbedder):
    """Documents at once; queries after ``delay`` seconds (or until released)."""

    def __init__(self, delay: float, **kw: Any) -> None:
        super().__init__(**kw)
        self.delay = delay
        self.release = threading.Event()

    def _embed_query(self, text: str) -> list[float]:
        self.release.wait(self.delay)
        return super()._embed_query(text)

    async def _aembed_query(self, text: str) -> list[float]:
        await asyncio.sleep(self.delay)
        return super()._embed_query(text)


def _deadline_config(ms: int = 200) -> MemoryConfig:
    return MemoryConfig.from_dict({"query": {"timeoutMs": ms}})


def test_slow_query_embedding_answers_from_the_keyword_side(make_workspace: WorkspaceFactory,
                                                            open_index: IndexFactory) -> None:
    emb = SleepingEmbedder(delay=30)
    mem = open_index(make_workspace(NOTES), embedder=emb, config=_deadline_config())
    mem.sync()
    try:
        hits = mem.search("Grafana dashboards")
        assert hits.degraded == "embedding timeout"
        assert hits and hits[0].path == "memory/2026-01-06.md"
        assert all(h.vector_score == 0 for h in hits)
        payload = search_payload(mem, "Grafana dashboards")
        assert payload["degraded"] == "embedding timeout" and payload["results"]
        assert "disabled" not in payload
    finally:
        emb.release.set()


def test_async_search_honours_the_deadline(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    emb = SleepingEmbedder(delay=30)
    mem = open_index(make_workspace(NOTES), embedder=emb, config=_deadline_config())
    mem.sync()

    async def go() -> Any:
        return await mem.asearch("Grafana dashboards"), await asearch_payload(mem, "Grafana dashboards")

    try:
        hits, payload = asyncio.run(go())
        assert hits.degraded == "embedding timeout" and hits[0].path == "memory/2026-01-06.md"
        assert payload["degraded"] == "embedding timeout"
    finally:
        emb.release.set()


def test_fast_embedding_is_not_degraded(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    mem = open_index(make_workspace(NOTES), config=_deadline_config(60_000))
    mem.sync()
    hits = mem.search("Grafana dashboards")
    assert hits.degraded is None and "degraded" not in search_payload(mem, "Grafana dashboards")


def test_timeout_ms_is_validated() -> None:
    from clawmem_core.errors import ConfigError

    for bad in (0, -5, float("nan"), "1s"):
        with pytest.raises(ConfigError):
            MemoryConfig.from_dict({"query": {"timeoutMs": bad}})


# -- the reranking stage ---------------------------------------------------------------------------


class KeywordReranker(Reranker):
    """Deterministic: scores a text by how often it holds ``word``."""

    name = "keyword"

    def __init__(self, word: str) -> None:
        self.word = word
        self.seen: list[list[str]] = []

    def rerank(self, query: str, texts: list[str]) -> list[float]:
        self.seen.append(texts)
        return [float(t.lower().count(self.word)) for t in texts]


MANY = {f"memory/2026-02-{i:02d}.md": f"# Day {i}\n\nbilling report number {i}" + (" walrus" if i == 9 else "") + "\n"
        for i in range(1, 13)}


def test_reranker_sees_the_wide_pool_and_reorders_before_the_cut(make_workspace: WorkspaceFactory,
                                                                 open_index: IndexFactory,
                                                                 keyword_only: MemoryConfig, state_dir: Path) -> None:
    ws = make_workspace(MANY)
    plain = open_index(ws, embedder=None, config=keyword_only)
    plain.sync()
    before = [h.path for h in plain.search("billing report", max_results=3, min_score=0)]
    assert "memory/2026-02-09.md" not in before
    rr = KeywordReranker("walrus")
    cfg = MemoryConfig.from_dict({"provider": "none", "query": {"rerank": {"enabled": True, "weight": 1.0}}})
    mem = open_index(ws, embedder=None, config=cfg, reranker=rr, state=state_dir / "rr")
    mem.sync()
    hits = mem.search("billing report", max_results=3, min_score=0)
    assert hits.reranked is True
    assert len(rr.seen[-1]) == 12  # the whole pool (up to rerank.candidates), not the top 3
    assert hits[0].path == "memory/2026-02-09.md"
    payload = search_payload(mem, "billing report")
    assert payload["reranked"] is True


def test_reranking_is_off_by_default_and_capped(make_workspace: WorkspaceFactory, open_index: IndexFactory,
                                                keyword_only: MemoryConfig, state_dir: Path) -> None:
    assert not MemoryConfig().query.rerank.enabled and MemoryConfig().query.rerank.provider is None
    ws = make_workspace(MANY)
    rr = KeywordReranker("walrus")
    cfg = MemoryConfig.from_dict({"provider": "none", "query": {"rerank": {"enabled": False}}})
    off = open_index(ws, embedder=None, config=cfg, reranker=rr)
    off.sync()
    assert off.search("billing report").reranked is None and rr.seen == []
    capped = MemoryConfig.from_dict({"provider": "none", "query": {"rerank": {"enabled": True, "candidates": 5}}})
    mem = open_index(ws, embedder=None, config=capped, reranker=rr, state=state_dir / "capped")
    mem.sync()
    mem.search("billing report", min_score=0)
    assert len(rr.seen[-1]) == 5


class BrokenReranker(Reranker):
    def rerank(self, query: str, texts: list[str]) -> list[float]:
        raise RuntimeError("reranker service is down")


class SleepingReranker(Reranker):
    def __init__(self) -> None:
        self.release = threading.Event()

    def rerank(self, query: str, texts: list[str]) -> list[float]:
        self.release.wait(30)
        return [0.0] * len(texts)


def test_reranker_fails_open(make_workspace: WorkspaceFactory, open_index: IndexFactory,
                             keyword_only: MemoryConfig, tmp_path: Path) -> None:
    ws = make_workspace(MANY)
    plain = open_index(ws, embedder=None, config=keyword_only)
    plain.sync()
    fused = [h.path for h in plain.search("billing report", min_score=0)]
    cfg = {"provider": "none", "query": {"timeoutMs": 60_000, "rerank": {"enabled": True, "timeoutMs": 200}}}
    sleeping = SleepingReranker()
    for name, rr in (("broken", BrokenReranker()), ("sleeping", sleeping)):
        mem = open_index(ws, embedder=None, config=MemoryConfig.from_dict(cfg), reranker=rr, state=tmp_path / name)
        mem.sync()
        hits = mem.search("billing report", min_score=0)
        assert [h.path for h in hits] == fused
        assert hits.reranked is False
        payload = search_payload(mem, "billing report", min_score=0)
        assert payload["reranked"] is False and payload["results"]
        if name == "broken":
            assert "reranker service is down" in payload["rerank_error"]
        else:  # the first search's call is still running: this one does not start another
            assert "still busy" in payload["rerank_error"]
            assert "timeout" in hits.info["rerank_error"]
    sleeping.release.set()


def test_reranker_shares_the_query_deadline(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    rr = SleepingReranker()
    emb = SleepingEmbedder(delay=30)
    cfg = MemoryConfig.from_dict({"query": {"timeoutMs": 300, "rerank": {"enabled": True, "timeoutMs": 60_000}}})
    mem = open_index(make_workspace(MANY), embedder=emb, config=cfg, reranker=rr)
    mem.sync()
    try:
        hits = mem.search("billing report", min_score=0)
        assert hits.degraded == "embedding timeout" and hits.reranked is False
    finally:
        emb.release.set()
        rr.release.set()


def test_function_and_bad_rerankers() -> None:
    from clawmem_core.errors import ConfigError

    r = wrap_reranker(lambda q, texts: [len(t) for t in texts])
    assert r.rerank("q", ["aa", "a"]) == [2.0, 1.0]
    with pytest.raises(ConfigError):
        wrap_reranker(42)


def test_langchain_document_compressor_as_reranker(make_workspace: WorkspaceFactory, open_index: IndexFactory,
                                                   keyword_only: MemoryConfig) -> None:
    pytest.importorskip("langchain_core")
    from langchain_core.documents import BaseDocumentCompressor, Document

    class WalrusFirst(BaseDocumentCompressor):
        def compress_documents(self, documents: Any, query: str, callbacks: Any = None) -> list[Document]:
            keep = [d for d in documents if "walrus" in d.page_content or "1" in d.page_content]
            return sorted(keep, key=lambda d: "walrus" not in d.page_content)

    cfg = MemoryConfig.from_dict({"provider": "none", "query": {"rerank": {"enabled": True, "weight": 1.0}}})
    mem = open_index(make_workspace(MANY), embedder=None, config=cfg, reranker=WalrusFirst())
    mem.sync()
    hits = mem.search("billing report", min_score=0, max_results=12)
    assert hits.reranked is True and hits[0].path == "memory/2026-02-09.md"
    assert len(hits) == 12  # documents the compressor drops come last, not lost


def test_llama_index_postprocessor_as_reranker(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    pytest.importorskip("llama_index.core")
    from llama_index.core.postprocessor.types import BaseNodePostprocessor

    class WalrusFirst(BaseNodePostprocessor):
        def _postprocess_nodes(self, nodes: Any, query_bundle: Any = None) -> Any:
            assert query_bundle is not None and query_bundle.query_str == "billing report"
            return sorted(nodes, key=lambda n: "walrus" not in n.node.get_content())

    cfg = MemoryConfig.from_dict({"provider": "none", "query": {"rerank": {"enabled": True, "weight": 1.0}}})
    mem = open_index(make_workspace(MANY), embedder=None, config=cfg, reranker=WalrusFirst())
    mem.sync()
    hits = mem.search("billing report", min_score=0)
    assert hits.reranked is True and hits[0].path == "memory/2026-02-09.md"


def test_local_cross_encoder_from_a_directory(tmp_path: Path) -> None:
    pytest.importorskip("sentence_transformers")
    transformers = pytest.importorskip("transformers")
    from clawmem_core.rerank import CrossEncoderReranker

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "billing", "walrus", "report", "jazz"]
    model_dir = tmp_path / "tiny-cross-encoder"
    model_dir.mkdir()
    (model_dir / "vocab.txt").write_text("\n".join(words) + "\n")
    tok = transformers.BertTokenizer(str(model_dir / "vocab.txt"))
    config = transformers.BertConfig(vocab_size=len(words), hidden_size=8, num_hidden_layers=1, num_attention_heads=1,
                                     intermediate_size=8, max_position_embeddings=64, num_labels=1)
    transformers.set_seed(0)
    transformers.BertForSequenceClassification(config).save_pretrained(str(model_dir))
    tok.save_pretrained(str(model_dir))
    rr = CrossEncoderReranker(str(model_dir))
    scores = rr.rerank("walrus", ["billing report", "walrus jazz", "jazz"])
    assert len(scores) == 3 and all(math.isfinite(s) for s in scores)
    assert rr.rerank("walrus", ["billing report", "walrus jazz", "jazz"]) == scores  # deterministic
    with pytest.raises(Exception):
        CrossEncoderReranker(str(tmp_path / "missing")).rerank("q", ["t"])  # never downloads


def test_rerank_config_is_validated() -> None:
    from clawmem_core.errors import ConfigError

    with pytest.raises(ConfigError):
        MemoryConfig.from_dict({"query": {"rerank": {"provider": "cohere"}}})
    rc = MemoryConfig.from_dict({"query": {"rerank": {"candidates": 10_000, "weight": 7}}}).query.rerank
    assert rc.candidates == 200 and rc.weight == 1.0


def test_deadline_helper_returns_errors_and_times_out() -> None:
    from clawmem_core.search import run_with_deadline

    assert run_with_deadline(lambda: 42, 5) == (True, 42)
    gate = threading.Event()
    assert run_with_deadline(lambda: gate.wait(30), 0.05) == (False, None)
    gate.set()
    with pytest.raises(ZeroDivisionError):
        run_with_deadline(lambda: 1 / 0, 5)


def test_deadline_calls_reuse_their_threads_and_a_late_call_blocks_no_other() -> None:
    """The calls run on kept worker threads (no thread started per query), each in a fresh
    context; a call that runs out of time keeps its worker while the next calls run on others."""
    import contextvars

    from clawmem_core.search import run_with_deadline

    def worker() -> threading.Thread:
        return threading.current_thread()

    first = run_with_deadline(worker, 5)[1]
    assert {run_with_deadline(worker, 5)[1] for _ in range(20)} == {first}  # one thread, kept
    gate = threading.Event()
    assert run_with_deadline(lambda: gate.wait(30), 0.05) == (False, None)  # takes the kept thread
    other = run_with_deadline(worker, 5)[1]
    assert other != first  # the late call still holds it: another thread answers, at once
    gate.set()
    var: contextvars.ContextVar[int] = contextvars.ContextVar("var", default=0)
    assert run_with_deadline(lambda: var.set(7) and var.get(), 5) == (True, 7)
    assert run_with_deadline(var.get, 5) == (True, 0)  # nothing leaks from one call to the next


def test_default_blend_weight_holds_the_fused_order_against_a_reversing_reranker() -> None:
    """At the default weight a reranker that ranks the fused order backwards (a useless one) changes
    nothing over a full candidate pool, while one that disagrees broadly still reorders."""
    rc = MemoryConfig.from_dict({}).query.rerank
    n = rc.candidates
    assert blend_by_position(n, [float(i) for i in range(n)], rc.weight) == list(range(n))
    shuffled = [float((7 * i) % n) for i in range(n)]  # a reranker with an order of its own
    order = blend_by_position(n, shuffled, rc.weight)
    assert order != list(range(n))
    top_choice = max(range(n), key=lambda i: shuffled[i])
    assert order.index(top_choice) < top_choice  # its own first choice rises


def test_a_reranker_that_ran_out_of_time_is_not_called_again_until_it_ends(
        make_workspace: WorkspaceFactory, open_index: IndexFactory, tmp_path: Path) -> None:
    """A slow reranker's call that timed out keeps running; later searches keep the fused order and
    say why instead of starting more calls behind it, and use the reranker again once it is done."""
    calls: list[str] = []

    class Slow(Reranker):
        def __init__(self) -> None:
            self.release = threading.Event()
            self.finished = threading.Event()

        def rerank(self, query: str, texts: list[str]) -> list[float]:
            calls.append(query)
            if len(calls) == 1:
                self.release.wait(30)
                self.finished.set()
            return [float(-i) for i in range(len(texts))]

    rr = Slow()
    cfg = {"provider": "none", "query": {"timeoutMs": 60_000, "rerank": {"enabled": True, "timeoutMs": 100}}}
    mem = open_index(make_workspace(MANY), embedder=None, config=MemoryConfig.from_dict(cfg), reranker=rr,
                     state=tmp_path / "slow")
    mem.sync()
    first = search_payload(mem, "billing report", min_score=0)
    assert first["reranked"] is False and "timeout" in first["rerank_error"]
    second = search_payload(mem, "report billing", min_score=0)
    assert second["reranked"] is False and "still busy" in second["rerank_error"]
    assert calls == ["billing report"]  # no second call piled up behind the first
    rr.release.set()
    assert rr.finished.wait(10)
    deadline = time.monotonic() + 10
    while True:  # the first call's thread sets its done flag right after returning
        third = search_payload(mem, "billing report", min_score=0)
        if third["reranked"] or time.monotonic() > deadline:
            break
    assert third["reranked"] is True
    assert calls[1:] and set(calls[1:]) == {"billing report"}


def test_a_query_embedding_that_ran_out_of_time_is_not_started_again_until_it_ends(
        make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    """A hung embedder (an API that does not answer, a model still loading) gets one call, not one
    per search: while it runs, searches answer from the keywords at once; once it ends, searches
    embed their queries again."""
    calls: list[str] = []

    class Hung(SleepingEmbedder):
        def _embed_query(self, text: str) -> list[float]:
            calls.append(text)
            return super()._embed_query(text)

    emb = Hung(delay=30)
    mem = open_index(make_workspace(NOTES), embedder=emb, config=_deadline_config(300))
    mem.sync()
    try:
        assert mem.search("Grafana dashboards").degraded == "embedding timeout"
        second = mem.search("Grafana panels")
        assert second.degraded == "embedding timeout" and second[0].path == "memory/2026-01-06.md"
        assert calls == ["Grafana dashboards"]
    finally:
        emb.release.set()
    emb.delay = 0
    end = time.monotonic() + 10
    while True:  # the first call's thread flags its end right after returning
        hits = mem.search("Grafana dashboards")
        if hits.degraded is None or time.monotonic() > end:
            break
    assert hits.degraded is None and calls[-1] == "Grafana dashboards" and len(calls) >= 2
