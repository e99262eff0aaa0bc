"""Mistral and Ollama specifics: endpoints, bodies, headers, legacy Ollama API, normalisation."""

from __future__ import annotations

from typing import Any

import pytest

from clawmem_core.config import MemoryConfig, RemoteConfig
from clawmem_core.embeddings.registry import create_provider

from .providers_wire import WIRES
from .wire import API_KEY, FakeServer, Reply, Request, vec


def test_mistral_request_shape(server: FakeServer, fast_retry: Any) -> None:
    pytest.importorskip("mistralai")
    from clawmem_core.embeddings.mistral import MistralEmbedder, server_url_of

    server.route("POST", "/v1/embeddings", WIRES["mistral"].ok)
    emb = MistralEmbedder(api_key=API_KEY, base_url=server.url + "/v1", headers={"X-Req": "7"}, retry=fast_retry)
    assert emb.embed_documents(["hello", "hi"]) == [vec(5), vec(2)]  # stored as returned
    (req,) = server.requests
    assert req.path == "/v1/embeddings"
    assert req.json["model"] == "mistral-embed" and req.json["input"] == ["hello", "hi"]
    assert req.header("Authorization") == f"Bearer {API_KEY}" and req.header("X-Req") == "7"
    assert server_url_of("https://api.mistral.ai/v1/") == "https://api.mistral.ai"
    assert server_url_of(None) == "https://api.mistral.ai"


def test_ollama_embed_endpoint_without_key(server: FakeServer, fast_retry: Any) -> None:
    pytest.importorskip("httpx")
    server.route("POST", "/api/embed", lambda req: Reply(200, {"embeddings": [[3, 4] for _ in req.json["input"]]}))
    config = MemoryConfig(provider="ollama", remote=RemoteConfig(base_url=server.url + "/v1"))  # /v1 dropped
    emb = create_provider("ollama", config, environ={}, retry=fast_retry)
    assert emb.model == "nomic-embed-text"
    assert emb.embed_documents(["a", "b"]) == [pytest.approx([0.6, 0.8])] * 2
    (req,) = server.requests
    assert req.json == {"model": "nomic-embed-text", "input": ["a", "b"]}
    assert req.header("Authorization") is None


def test_ollama_legacy_endpoint_for_old_servers(server: FakeServer, fast_retry: Any) -> None:
    pytest.importorskip("httpx")
    server.route("POST", "/api/embed", Reply(404, raw=b"404 page not found", content_type="text/plain"))
    server.route("POST", "/api/embeddings", lambda req: Reply(200, {"embedding": [3, 4]}))
    from clawmem_core.embeddings.ollama import OllamaEmbedder

    emb = OllamaEmbedder(base_url=server.url, retry=fast_retry)
    assert emb.embed_documents(["x", "y"]) == [pytest.approx([0.6, 0.8])] * 2
    assert emb.embed_query("z") == pytest.approx([0.6, 0.8])
    assert emb.legacy_endpoint
    assert len(server.calls("POST", "/api/embed")) == 1  # probed once, then remembered
    assert [r.json for r in server.calls("POST", "/api/embeddings")] == [
        {"model": "nomic-embed-text", "prompt": p} for p in ("x", "y", "z")]


def test_ollama_missing_model_is_an_error_not_a_legacy_switch(server: FakeServer, fast_retry: Any) -> None:
    pytest.importorskip("httpx")
    from clawmem_core.embeddings.ollama import OllamaEmbedder
    from clawmem_core.errors import EmbeddingError

    server.route("POST", "/api/embed", Reply(404, {"error": 'model "nope" not found, try pulling it first'}))
    emb = OllamaEmbedder(base_url=server.url, model="nope", retry=fast_retry)
    with pytest.raises(EmbeddingError, match="not found"):
        emb.embed_query("q")
    assert not emb.legacy_endpoint


def test_ollama_host_from_environment(server: FakeServer) -> None:
    pytest.importorskip("httpx")
    host = server.url.split("://", 1)[1]
    server.route("POST", "/api/embed", lambda req: Reply(200, {"embeddings": [[1, 0]]}))
    emb = create_provider("ollama", MemoryConfig(provider="ollama"), environ={"OLLAMA_HOST": host})
    assert emb.embed_query("q") == [1.0, 0.0]
    assert server.requests


def _record_auth(req: Request) -> Reply:
    return Reply(200, {"embeddings": [[1, 1]]})


def test_ollama_optional_key_is_sent(server: FakeServer) -> None:
    pytest.importorskip("httpx")
    server.route("POST", "/api/embed", _record_auth)
    config = MemoryConfig(provider="ollama", remote=RemoteConfig(base_url=server.url, api_key=API_KEY))
    create_provider("ollama", config, environ={}).embed_query("q")
    assert server.requests[0].header("Authorization") == f"Bearer {API_KEY}"
