"""An API key never shows in ``repr``, ``provider_key``, exception messages or log output,
even when the server echoes it back."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from clawmem_core.config import BatchConfig, MemoryConfig, RemoteConfig
from clawmem_core.embeddings.registry import create_provider, resolve_embedder
from clawmem_core.errors import EmbeddingError

from .providers_wire import WIRES, Wire
from .wire import API_KEY, FakeServer, Reply, Request

SDK = {"openai": "openai", "mistral": "mistralai", "voyage": "voyageai", "gemini": "httpx", "ollama": "httpx"}


def echo_key(status: int, echoed: list[str] | None = None) -> Any:
    """Answers ``status`` with the credential the client sent quoted in every message field; each quoted
    credential is appended to ``echoed`` (so a test can tell the handler ran and what it received)."""

    def handler(req: Request) -> Reply:
        sent = req.header("Authorization") or req.header("x-goog-api-key") or ""
        if echoed is not None:
            echoed.append(sent)
        text = f"Incorrect API key provided: {sent}"
        return Reply(status, {"error": {"message": text, "type": "invalid_request_error", "code": "invalid_api_key"},
                              "detail": text, "message": text})
    return handler


@pytest.mark.parametrize("name", sorted(WIRES))
def test_key_never_leaks(name: str, server: FakeServer, fast_retry: Any, caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip(SDK[name])
    wire: Wire = WIRES[name]
    caplog.set_level(logging.DEBUG)  # everything the client libraries log, too
    emb = wire.make(server, fast_retry, headers={"X-Trace": "1"})
    assert API_KEY not in repr(emb) and API_KEY not in str(emb)
    assert API_KEY not in emb.provider_key
    settings = emb._key_settings()  # type: ignore[attr-defined]
    assert API_KEY not in repr(settings)

    rejected: list[str] = []
    server.route("POST", wire.docs_path, echo_key(401, rejected))
    with pytest.raises(EmbeddingError) as info:
        emb.embed_documents(["x"])
    assert API_KEY not in str(info.value) and API_KEY not in repr(info.value)
    assert "401" in str(info.value)
    # the key reached the server, whose answer (not a crash of the test's handler) quoted it back
    assert len(rejected) == 1 and API_KEY in rejected[0]
    assert [(r.method, r.path) for r in server.answered] == [("POST", wire.docs_path)]

    overloaded: list[str] = []
    server.route("POST", wire.query_path, echo_key(503, overloaded))  # retried, then given up
    with pytest.raises(EmbeddingError) as info2:
        emb.embed_query("y")
    assert API_KEY not in str(info2.value) and "503" in str(info2.value)
    assert len(overloaded) == 4 and all(API_KEY in sent for sent in overloaded)  # each attempt quoted it back
    assert len(server.answered) == 5
    assert API_KEY not in caplog.text


def test_auth_headers_are_not_part_of_provider_key(server: FakeServer) -> None:
    pytest.importorskip("httpx")

    def gemini(headers: dict[str, str], key: str) -> str:
        config = MemoryConfig(provider="gemini", remote=RemoteConfig(base_url=server.url, api_key=key, headers=headers))
        return create_provider("gemini", config, environ={}).provider_key

    base = gemini({}, API_KEY)
    assert gemini({"x-goog-api-key": API_KEY}, API_KEY) == base
    assert gemini({"Authorization": "Bearer zzz"}, API_KEY) == base
    assert gemini({}, "another-key-9999") == base
    assert gemini({"X-Region": "eu"}, API_KEY) != base


def test_key_absent_from_selection_reason_and_batch_errors(server: FakeServer, caplog: pytest.LogCaptureFixture,
                                                           sleeps: Any) -> None:
    pytest.importorskip("openai")
    caplog.set_level(logging.DEBUG)
    server.route("POST", "/v1/files", echo_key(400))
    server.route("POST", "/v1/embeddings", WIRES["openai"].ok)
    config = MemoryConfig(provider="openai", remote=RemoteConfig(
        base_url=server.url + "/v1", api_key=API_KEY, batch=BatchConfig(enabled=True, poll_interval_ms=1)))
    sel = resolve_embedder(config, environ={}, batch_options={"sleep": sleeps})
    assert sel.embedder is not None
    assert sel.embedder.embed_documents(["abc"])  # batch upload failed → plain embedding
    runner = sel.embedder.batch  # type: ignore[attr-defined]
    assert runner.failures == 1 and "Incorrect API key" in runner.last_error
    assert API_KEY not in runner.last_error
    assert API_KEY not in caplog.text and "falling back" in caplog.text


def echo_key_after(pad: int) -> Any:
    def handler(req: Request) -> Reply:
        sent = req.header("Authorization") or req.header("x-goog-api-key") or ""
        text = "x" * pad + f" Incorrect API key provided: {sent} (check your settings)"
        return Reply(401, {"error": {"message": text, "code": "invalid_api_key"}, "detail": text, "message": text})
    return handler


def _key_prefixes(text: str) -> list[str]:
    return [API_KEY[:n] for n in range(8, len(API_KEY) + 1) if API_KEY[:n] in text]


@pytest.mark.parametrize("name", sorted(WIRES))
def test_no_key_prefix_survives_the_message_length_limit(name: str, server: FakeServer, fast_retry: Any) -> None:
    """The message is masked first and cut after: a key echoed across the old cut points (500 characters of
    a provider's error body, 2000 of a described error) leaves no 8+ character prefix behind."""
    pytest.importorskip(SDK[name])
    wire: Wire = WIRES[name]
    emb = wire.make(server, fast_retry)
    seen = []
    for pad in [*range(430, 520, 9), *range(1900, 2010, 11)]:
        server.route("POST", wire.docs_path, echo_key_after(pad))
        with pytest.raises(EmbeddingError) as info:
            emb.embed_documents(["x"])
        message = str(info.value)
        seen.append(message)
        assert not _key_prefixes(message), (pad, message[-200:])
    assert any("Incorrect API key" in m for m in seen)


def test_known_key_prefixes_of_eight_characters_are_masked() -> None:
    from clawmem_core.masking import mask_and_clip, mask_known

    key = "sk-test-SECRET1234567890abcdef"
    assert mask_known(f"got Bearer {key[:12]}… (truncated)", [key]) == "got Bearer ***… (truncated)"
    assert mask_known(f"a {key[:7]} b", [key]) == f"a {key[:7]} b"  # 7 characters: not a key
    text = "y" * 480 + f" Bearer {key} end"
    assert key[:8] not in mask_and_clip(text, 500, [key])
    assert key[:8] in text[:500]  # what cutting first leaves behind
