"""LangChain and LlamaIndex embedders used through ``wrap_embedder``, with the real frameworks."""

from __future__ import annotations

import asyncio
import hashlib
import math
from typing import Any

import pytest

from clawmem_core.embeddings.base import Embedder
from clawmem_core.embeddings.framework import (
    LangChainEmbedder,
    LlamaIndexEmbedder,
    UnsupportedEmbedderError,
    detect_framework,
    wrap_embedder,
)
from clawmem_core.errors import ConfigError

DIMS = 12


def _vec(seed: str, text: str) -> list[float]:
    digest = hashlib.sha256(f"{seed}|{text}".encode()).digest()
    return [b / 255.0 - 0.5 for b in digest[:DIMS]]


class OwnEmbedder(Embedder):
    provider = "own"
    model = "own-v1"

    def _embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [_vec("own", t) for t in texts]

    def _embed_query(self, text: str) -> list[float]:
        return _vec("own", text)


def test_own_embedder_is_returned_as_is() -> None:
    own = OwnEmbedder()
    assert wrap_embedder(own) is own


@pytest.mark.parametrize("obj", [object(), "text-embedding-3-small", 42, None, OwnEmbedder])
def test_anything_else_is_refused_clearly(obj: Any) -> None:
    with pytest.raises(UnsupportedEmbedderError, match="LangChain Embeddings") as info:
        wrap_embedder(obj)
    assert isinstance(info.value, TypeError) and isinstance(info.value, ConfigError)


class DuckLangChain:
    """No framework base class: recognised by its methods."""

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name

    def embed_documents(self, texts: list[str]) -> Any:
        import numpy as np

        return np.array([_vec(self.model_name, t) for t in texts])

    def embed_query(self, text: str) -> Any:
        import numpy as np

        return np.array(_vec(self.model_name, "q:" + text))

    @property
    def api_key(self) -> str:
        raise AssertionError("the api key must never be read")


class DuckLlama:
    model_id = "duck-llama"

    def get_text_embedding_batch(self, texts: list[str], **kwargs: Any) -> list[list[float]]:
        return [_vec("duck", t) for t in texts]

    def get_query_embedding(self, query: str) -> list[float]:
        return _vec("duck", query)


def test_duck_typed_objects_without_a_framework() -> None:
    lc = wrap_embedder(DuckLangChain("duck-lc"))
    assert isinstance(lc, LangChainEmbedder) and lc.provider == "langchain" and lc.model == "duck-lc"
    assert lc.embed_documents(["a", "b"]) == [pytest.approx(_vec("duck-lc", t)) for t in ("a", "b")]
    assert isinstance(lc.embed_query("a"), list) and lc.embed_query("a") == pytest.approx(_vec("duck-lc", "q:a"))
    assert asyncio.run(lc.aembed_documents(["a"])) == lc.embed_documents(["a"])
    li = wrap_embedder(DuckLlama())
    assert isinstance(li, LlamaIndexEmbedder) and li.provider == "llama_index" and li.model == "duck-llama"
    assert asyncio.run(li.aembed_query("x")) == li.embed_query("x")


# -- LangChain ------------------------------------------------------------------------------------


def test_langchain_fake_embedding_sync_and_async() -> None:
    fake_mod = pytest.importorskip("langchain_core.embeddings")
    inner = fake_mod.DeterministicFakeEmbedding(size=DIMS)
    emb = wrap_embedder(inner)
    assert detect_framework(inner) == "langchain"
    assert isinstance(emb, LangChainEmbedder) and emb.provider == "langchain"
    assert emb.model == "DeterministicFakeEmbedding"
    texts = ["first note", "second note", "first note"]
    docs = emb.embed_documents(texts)
    assert docs == [pytest.approx(v) for v in inner.embed_documents(texts)]
    assert docs[0] == docs[2] and docs[0] != docs[1] and len(docs[0]) == DIMS
    assert emb.embed_query("first note") == pytest.approx(inner.embed_query("first note"))

    async def run() -> tuple[list[list[float]], list[float]]:
        return await emb.aembed_documents(texts), await emb.aembed_query("second note")

    adocs, aquery = asyncio.run(run())
    assert adocs == docs and aquery == pytest.approx(docs[1])


def test_langchain_provider_key_is_stable_and_follows_model_settings() -> None:
    fake_mod = pytest.importorskip("langchain_core.embeddings")
    key = wrap_embedder(fake_mod.DeterministicFakeEmbedding(size=DIMS)).provider_key
    assert wrap_embedder(fake_mod.DeterministicFakeEmbedding(size=DIMS)).provider_key == key
    assert wrap_embedder(fake_mod.DeterministicFakeEmbedding(size=DIMS + 1)).provider_key != key
    assert wrap_embedder(fake_mod.FakeEmbeddings(size=DIMS)).provider_key != key
    assert wrap_embedder(fake_mod.DeterministicFakeEmbedding(size=DIMS), normalize=True).provider_key != key


def test_langchain_subclass_model_name_and_no_secrets() -> None:
    lc = pytest.importorskip("langchain_core.embeddings")

    class NamedEmbeddings(lc.Embeddings):  # type: ignore[name-defined, misc]
        def __init__(self, model: str, api_key: str, base_url: str) -> None:
            self.model = model
            self.api_key = api_key
            self.base_url = base_url

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [_vec(self.model, t) for t in texts]

        def embed_query(self, text: str) -> list[float]:
            return _vec(self.model, text)

    a = wrap_embedder(NamedEmbeddings("embed-small", "sk-secret-1", "https://user:pw@api.example.com/v1/?k=1"))
    b = wrap_embedder(NamedEmbeddings("embed-small", "sk-secret-2", "https://api.example.com/v1"))
    c = wrap_embedder(NamedEmbeddings("embed-large", "sk-secret-1", "https://api.example.com/v1"))
    d = wrap_embedder(NamedEmbeddings("embed-small", "sk-secret-1", "http://localhost:8080/v1"))
    assert a.model == "embed-small" and c.model == "embed-large"
    assert a.provider_key == b.provider_key
    assert len({a.provider_key, c.provider_key, d.provider_key}) == 3
    for emb in (a, b, c, d):
        assert "sk-secret" not in repr(emb) + repr(getattr(emb, "settings", ""))
        assert "pw" not in repr(getattr(emb, "settings", ""))
    assert a.embed_documents(["x"]) == [pytest.approx(_vec("embed-small", "x"))]
    # LangChain's own async default (run in an executor) is used.
    assert asyncio.run(c.aembed_query("x")) == pytest.approx(_vec("embed-large", "x"))


def test_normalize_option_l2_normalises() -> None:
    fake_mod = pytest.importorskip("langchain_core.embeddings")
    emb = wrap_embedder(fake_mod.DeterministicFakeEmbedding(size=DIMS), normalize=True, max_input_bytes=1000)
    vec = emb.embed_query("scale me")
    assert abs(math.sqrt(sum(v * v for v in vec)) - 1) < 1e-9
    assert emb.input_limit == 1000
    assert emb.embed_window == 1000  # whole chunks (up to the input limit) unless asked


def test_window_option_sets_the_embedding_window_within_the_input_limit() -> None:
    fake_mod = pytest.importorskip("langchain_core.embeddings")
    emb = wrap_embedder(fake_mod.DeterministicFakeEmbedding(size=DIMS), window_bytes=512)
    assert emb.embed_window == 512
    small = wrap_embedder(fake_mod.DeterministicFakeEmbedding(size=DIMS), max_input_bytes=300, window_bytes=512)
    assert small.embed_window == 300


# -- LlamaIndex -----------------------------------------------------------------------------------


def _llama_subclass() -> Any:
    base = pytest.importorskip("llama_index.core.embeddings")

    class HashEmbedding(base.BaseEmbedding):  # type: ignore[misc, name-defined]
        api_key: str = ""
        async_calls: int = 0

        def _get_query_embedding(self, query: str) -> list[float]:
            return _vec(self.model_name, "q:" + query)

        def _get_text_embedding(self, text: str) -> list[float]:
            return _vec(self.model_name, text)

        async def _aget_query_embedding(self, query: str) -> list[float]:
            self.async_calls += 1
            return self._get_query_embedding(query)

        async def _aget_text_embedding(self, text: str) -> list[float]:
            self.async_calls += 1
            return self._get_text_embedding(text)

    return HashEmbedding


def test_llama_index_subclass_sync_and_async() -> None:
    cls = _llama_subclass()
    inner = cls(model_name="hash-a", api_key="secret-key", embed_batch_size=2)
    emb = wrap_embedder(inner)
    assert detect_framework(inner) == "llama_index"
    assert isinstance(emb, LlamaIndexEmbedder) and emb.provider == "llama_index" and emb.model == "hash-a"
    texts = ["one", "two", "three", "one", "five"]
    docs = emb.embed_documents(texts)
    assert docs == [pytest.approx(_vec("hash-a", t)) for t in texts]
    assert emb.embed_query("one") == pytest.approx(_vec("hash-a", "q:one"))
    assert inner.async_calls == 0

    async def run() -> tuple[list[list[float]], list[float]]:
        return await emb.aembed_documents(texts), await emb.aembed_query("one")

    adocs, aquery = asyncio.run(run())
    assert adocs == docs and aquery == emb.embed_query("one")
    assert inner.async_calls == len(texts) + 1  # the framework's own async path was used


def test_llama_index_provider_key() -> None:
    cls = _llama_subclass()
    key = wrap_embedder(cls(model_name="hash-a", api_key="k1")).provider_key
    assert wrap_embedder(cls(model_name="hash-a", api_key="k2")).provider_key == key
    assert wrap_embedder(cls(model_name="hash-b", api_key="k1")).provider_key != key
    assert "k1" not in repr(wrap_embedder(cls(model_name="hash-a", api_key="k1")))


def test_llama_index_mock_embedding() -> None:
    base = pytest.importorskip("llama_index.core.embeddings")
    emb = wrap_embedder(base.MockEmbedding(embed_dim=DIMS))
    assert isinstance(emb, LlamaIndexEmbedder) and emb.model == "MockEmbedding"
    assert [len(v) for v in emb.embed_documents(["a", "b", "c"])] == [DIMS] * 3
    assert len(asyncio.run(emb.aembed_query("a"))) == DIMS
    assert wrap_embedder(base.MockEmbedding(embed_dim=DIMS)).provider_key == emb.provider_key
    assert wrap_embedder(base.MockEmbedding(embed_dim=DIMS * 2)).provider_key != emb.provider_key
    assert wrap_embedder(base.MockEmbedding(embed_dim=DIMS, model_name="mock-2")).provider_key != emb.provider_key


class _Failing:
    """Every embedding method, sync and async, of both frameworks raises what it is given."""

    model_name = "failing"

    def __init__(self, error: BaseException, with_async: bool) -> None:
        self.error = error
        if with_async:
            for name in ("aembed_documents", "aembed_query", "aget_text_embedding_batch", "aget_query_embedding"):
                setattr(self, name, self._araise)

    def _raise(self, *_: Any, **__: Any) -> Any:
        raise self.error

    async def _araise(self, *_: Any, **__: Any) -> Any:
        raise self.error


def _failing(framework: str, error: BaseException, with_async: bool) -> Any:
    obj = _Failing(error, with_async)
    names = ("embed_documents", "embed_query") if framework == "langchain" else (
        "get_text_embedding_batch", "get_query_embedding")
    for name in names:
        setattr(obj, name, obj._raise)
    return obj


@pytest.mark.parametrize("framework", ["langchain", "llama_index"])
@pytest.mark.parametrize("with_async", [True, False])
def test_what_the_wrapped_object_raises_is_a_provider_failure(framework: str, with_async: bool) -> None:
    """Any error from the framework object, in each of the four calls (the async ones through the
    object's own async methods, or its sync ones in a thread), is an ``EmbeddingError`` naming
    the framework with secrets masked; an ``EmbeddingError`` passes through as it is."""
    from clawmem_core.errors import EmbeddingError

    key = "sk-" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6"
    emb = wrap_embedder(_failing(framework, RuntimeError(f"upstream said no to key {key}"), with_async))
    assert emb.provider == framework
    calls = [lambda: emb.embed_documents(["a"]), lambda: emb.embed_query("a"),
             lambda: asyncio.run(emb.aembed_documents(["a"])), lambda: asyncio.run(emb.aembed_query("a"))]
    for call in calls:
        with pytest.raises(EmbeddingError) as exc:
            call()
        assert "upstream said no" in str(exc.value) and key not in str(exc.value)
        assert isinstance(exc.value.__cause__, RuntimeError)
    own = EmbeddingError("already typed")
    emb = wrap_embedder(_failing(framework, own, with_async))
    for call in [lambda: emb.embed_documents(["a"]), lambda: emb.embed_query("a"),
                 lambda: asyncio.run(emb.aembed_documents(["a"])), lambda: asyncio.run(emb.aembed_query("a"))]:
        with pytest.raises(EmbeddingError) as exc:
            call()
        assert exc.value is own
