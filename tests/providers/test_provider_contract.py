"""The scenarios every remote provider must pass, through its real client against a local server:
success, 429 → 502 → success (3 calls), quota → EmbeddingQuotaError, timeout, malformed bodies."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from clawmem_core.errors import EmbeddingError, EmbeddingQuotaError

from .providers_wire import WIRES, Wire
from .wire import FakeServer, Reply


def assert_vectors(got: list[list[float]], want: list[list[float]]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g == pytest.approx(w, rel=1e-6)

NAMES = sorted(WIRES)


@pytest.fixture(params=NAMES)
def wire(request: pytest.FixtureRequest) -> Wire:
    sdk = {"openai": "openai", "mistral": "mistralai", "voyage": "voyageai", "gemini": "httpx", "ollama": "httpx"}
    pytest.importorskip(sdk[request.param])
    return WIRES[request.param]


def test_success(wire: Wire, server: FakeServer, fast_retry: Any) -> None:
    server.route("POST", wire.docs_path, wire.ok)
    server.route("POST", wire.query_path, wire.ok)
    emb = wire.make(server, fast_retry)
    texts = ["alpha", "beta gamma", "δ"]
    assert_vectors(emb.embed_documents(texts), wire.expected(texts))
    assert emb.embed_query("what now") == pytest.approx(wire.expected(["what now"])[0])
    assert emb.embed_documents([]) == []
    assert emb.embed_query("   ") == []  # a blank query costs no call
    assert len(server.requests) == 2


def test_async_success(wire: Wire, server: FakeServer, fast_retry: Any) -> None:
    server.route("POST", wire.docs_path, wire.ok)
    server.route("POST", wire.query_path, wire.ok)
    emb = wire.make(server, fast_retry)

    async def go() -> tuple[Any, Any]:
        return await emb.aembed_documents(["one", "three"]), await emb.aembed_query("q")

    docs, query = asyncio.run(go())
    assert_vectors(docs, wire.expected(["one", "three"]))
    assert query == pytest.approx(wire.expected(["q"])[0])
    docs2 = asyncio.run(emb.aembed_documents(["x"]))  # a second event loop works too
    assert_vectors(docs2, wire.expected(["x"]))


def test_429_then_502_then_success(wire: Wire, server: FakeServer, fast_retry: Any, sleeps: Any) -> None:
    server.script("POST", wire.docs_path,
                  [wire.error(429, "Too Many Requests: rate limit reached", None), wire.error(502, "Bad Gateway", None)],
                  then=wire.ok)
    emb = wire.make(server, fast_retry)
    assert_vectors(emb.embed_documents(["abc"]), wire.expected(["abc"]))
    assert len(server.calls("POST", wire.docs_path)) == 3
    assert sleeps.delays == [0.5, 1.0]


def test_async_retries_too(wire: Wire, server: FakeServer, fast_retry: Any, sleeps: Any) -> None:
    server.script("POST", wire.query_path, [wire.error(503, "Service Unavailable", None)], then=wire.ok)
    emb = wire.make(server, fast_retry)
    assert asyncio.run(emb.aembed_query("abc")) == pytest.approx(wire.expected(["abc"])[0])
    assert len(server.calls("POST", wire.query_path)) == 2 and sleeps.delays == [0.5]


def test_persistent_5xx_gives_up_after_four_attempts(wire: Wire, server: FakeServer, fast_retry: Any,
                                                    sleeps: Any) -> None:
    server.route("POST", wire.docs_path, wire.error(503, "Service Unavailable", None))
    emb = wire.make(server, fast_retry)
    with pytest.raises(EmbeddingError) as info:
        emb.embed_documents(["abc"])
    assert not isinstance(info.value, EmbeddingQuotaError)
    assert wire.name in str(info.value)
    assert len(server.calls("POST", wire.docs_path)) == 4
    assert sleeps.delays == [0.5, 1.0, 2.0]


def test_non_retryable_client_error(wire: Wire, server: FakeServer, fast_retry: Any) -> None:
    server.route("POST", wire.docs_path, wire.error(400, "invalid input", None))
    emb = wire.make(server, fast_retry)
    with pytest.raises(EmbeddingError, match="400|invalid input"):
        emb.embed_documents(["abc"])
    assert len(server.calls("POST", wire.docs_path)) == 1


def test_quota_error_is_final(wire: Wire, server: FakeServer, fast_retry: Any) -> None:
    server.route("POST", wire.docs_path,
                 wire.error(429, "You exceeded your current quota, please check your plan and billing details.",
                            "insufficient_quota"))
    emb = wire.make(server, fast_retry)
    with pytest.raises(EmbeddingQuotaError, match="quota"):
        emb.embed_documents(["abc"])
    assert len(server.calls("POST", wire.docs_path)) == 1


@pytest.mark.parametrize("call", ["query", "documents"])
def test_timeout(wire: Wire, server: FakeServer, fast_retry: Any, call: str) -> None:
    # The server holds its answer until released (10 s at most): only a client that gives up at the timeout it
    # was given for this kind of call (query_timeout for a query, timeout for documents; the other one is 60 s)
    # raises; one that waits longer gets the answer and the test fails.
    release = threading.Event()
    held = lambda req: Reply(**{**wire.ok(req).__dict__, "hold": release, "delay": 10.0})  # noqa: E731
    server.route("POST", wire.query_path, held)
    server.route("POST", wire.docs_path, held)
    timeouts = {"timeout": 0.2, "query_timeout": 60.0} if call == "documents" else {"timeout": 60.0, "query_timeout": 0.2}
    emb = wire.make(server, fast_retry, **timeouts)
    try:
        with pytest.raises(EmbeddingError, match="(?i)time"):
            emb.embed_query("slow") if call == "query" else emb.embed_documents(["slow"])
        assert server.answered == []  # the client gave up while the server still held the answer
        assert len(server.calls("POST")) == 1  # and did not retry
    finally:
        release.set()


def test_malformed_responses(wire: Wire, server: FakeServer, fast_retry: Any) -> None:
    assert wire.malformed
    for body, message in wire.malformed:
        server.route("POST", wire.docs_path, Reply(200, body))
        emb = wire.make(server, fast_retry)
        before = len(server.calls("POST", wire.docs_path))
        with pytest.raises(EmbeddingError, match=message):
            emb.embed_documents(["a", "b"])
        assert len(server.calls("POST", wire.docs_path)) == before + 1  # never retried


def test_non_json_body(wire: Wire, server: FakeServer, fast_retry: Any) -> None:
    server.route("POST", wire.docs_path, Reply(200, raw=b"<html>gateway</html>", content_type="text/html"))
    emb = wire.make(server, fast_retry)
    with pytest.raises(EmbeddingError):
        emb.embed_documents(["a"])
