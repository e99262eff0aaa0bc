"""The calibrated fusion ranks a query in a script the embedder cannot tell texts apart in (an English-only
model on Chinese, detected from its calibration vectors) by the keyword side alone: exactly the results of the
same memory without an embedder, so an embedder never reorders a Chinese question by noise. Other scripts,
and OpenClaw's formula, keep the vector side."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

from clawmem_core import MemoryConfig, MemoryIndex
from clawmem_core.search import query_script
from clawmem_core.testing import HashEmbedder

from .conftest import write_files

#: Marks a text the blind embedder below maps onto the query's direction (not a word: never searched).
MARK = "★"

FILES = {
    # The keyword side's best: both query words, twice.
    "memory/2026-03-01.md": "- 周五和供应商开会。供应商开会时答应下周送样品。\n",
    # Both words once, and the vector direction of the query (noise an English-only model could produce).
    "memory/2026-03-02.md": f"- {MARK}今天和供应商开会，很累，晚上去跑步了，然后早早睡觉。\n",
    "memory/2026-03-03.md": "- 给番茄浇水，罗勒长得很好。\n",
    "memory/2026-03-04.md": "- 周末去山里徒步，看到了很多鸟。\n",
    "memory/2026-03-05.md": "- The supplier meeting moved to Friday; bring the packaging samples.\n",
    "memory/2026-03-06.md": "- Watered the tomatoes before work.\n",
}


def _unit(rng: random.Random, dims: int) -> list[float]:
    v = [rng.gauss(0, 1) for _ in range(dims)]
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v]


class CJKBlindEmbedder(HashEmbedder):
    """Feature hashing for Latin text; every text with CJK characters gets nearly one vector whatever it
    says (as an English-only model embeds Chinese), except that a text holding :data:`MARK` leans to the
    second axis, as the query does: an accident of the noise that favours a text that is not the answer."""

    def _vector(self, text: str) -> list[float]:
        if query_script(text) != "cjk":
            return super()._vector(text)
        noise = _unit(random.Random(text), self.dims)
        lean = 0.6 if MARK in text else 0.0
        vec = [(1.0 if i == 0 else lean if i == 1 else 0.0) + 0.05 * b for i, b in enumerate(noise)]
        n = math.sqrt(sum(v * v for v in vec))
        return [v / n for v in vec]


def _index(tmp_path: Path, name: str, embedder: Any = None, fusion: str = "calibrated") -> MemoryIndex:
    ws = write_files(tmp_path / "ws", FILES)
    cfg = MemoryConfig() if embedder is not None else MemoryConfig(provider="none")
    cfg.query.hybrid.fusion = fusion
    mem = MemoryIndex(ws, config=cfg, embedder=embedder, state_dir=tmp_path / name)
    mem.sync()
    return mem


def _shape(hits: Any) -> list[tuple[str, int, int, float]]:
    return [(h.path, h.start_line, h.end_line, round(h.score, 9)) for h in hits]


def test_a_query_in_a_script_the_embedder_cannot_read_ranks_as_keyword_only(tmp_path: Path) -> None:
    query = f"{MARK}和供应商开会"
    hybrid = _index(tmp_path, "hybrid", CJKBlindEmbedder(dims=64))
    keyword = _index(tmp_path, "keyword")
    try:
        for q in (query, "供应商开会", "番茄浇水", "没有这回事的问题"):
            for kwargs in ({}, {"max_results": 10, "min_score": 0.0}):
                assert _shape(hybrid.search(q, **kwargs)) == _shape(keyword.search(q, **kwargs)), (q, kwargs)
        top = hybrid.search(query, max_results=3, min_score=0.0)
        assert [h.path for h in top[:2]] == ["memory/2026-03-01.md", "memory/2026-03-02.md"]
        assert all(h.vector_score == 0.0 for h in top)
        # An English query on the same index still has its vector side.
        en = hybrid.search("supplier meeting samples", max_results=3, min_score=0.0)
        assert en and en[0].path == "memory/2026-03-05.md" and en[0].vector_score > 0
    finally:
        hybrid.close()
        keyword.close()


def test_openclaw_fusion_keeps_the_vector_side_of_a_blind_script(tmp_path: Path) -> None:
    """OpenClaw's formula stays bit for bit: its 0.7 x cosine still decides, the noise included."""
    mem = _index(tmp_path, "openclaw", CJKBlindEmbedder(dims=64), fusion="openclaw")
    try:
        hits = mem.search(f"{MARK}和供应商开会", max_results=3, min_score=0.0)
        assert hits and hits[0].path == "memory/2026-03-02.md" and hits[0].vector_score > 0
    finally:
        mem.close()


def test_the_fusion_weights_of_an_embedder_blind_to_a_script(tmp_path: Path) -> None:
    """An embedder blind to Chinese shows no sense of meaning across languages (translation strength 0): a
    Chinese question stays keyword-only (no vector weight at all) and an English one keeps the fixed weights,
    however well its own vector side matches."""
    from clawmem_core.tuning import CALIBRATED_VECTOR_WEIGHT

    mem = _index(tmp_path, "weights", CJKBlindEmbedder(dims=64))
    try:
        zh = mem.search(f"{MARK}和供应商开会", max_results=3, min_score=0.0)
        assert "fusion_weights" not in zh.info and all(h.vector_score == 0.0 for h in zh)
        en = mem.search("supplier meeting samples", max_results=3, min_score=0.0)
        assert en[0].vector_score > 0
        assert en.info["fusion_weights"] == [CALIBRATED_VECTOR_WEIGHT, round(1 - CALIBRATED_VECTOR_WEIGHT, 4)]
    finally:
        mem.close()
