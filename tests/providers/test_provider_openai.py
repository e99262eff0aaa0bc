"""OpenAI provider through the real ``openai`` SDK against a local OpenAI-wire server."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

pytest.importorskip("openai")

from clawmem_core.config import BatchConfig
from clawmem_core.embeddings.openai import OpenAIEmbedder
from clawmem_core.errors import EmbeddingError, EmbeddingQuotaError

from .wire import API_KEY, FakeServer, Reply, Request, jsonl, multipart_parts, vec


def embeddings_reply(req: Request) -> Reply:
    body = req.json
    inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
    data = [{"object": "embedding", "index": i, "embedding": vec(len(t))} for i, t in enumerate(inputs)]
    return Reply(200, {"object": "list", "data": data, "model": body["model"],
                       "usage": {"prompt_tokens": 3, "total_tokens": 3}})


def error_reply(status: int, message: str, code: str | None = None, type_: str = "server_error") -> Reply:
    return Reply(status, {"error": {"message": message, "type": type_, "code": code, "param": None}})


def make(server: FakeServer, retry: Any, **kw: Any) -> OpenAIEmbedder:
    return OpenAIEmbedder(api_key=API_KEY, base_url=server.url + "/v1", retry=retry, **kw)


def test_success_sends_model_input_auth_and_headers(server: FakeServer, fast_retry: Any) -> None:
    server.route("POST", "/v1/embeddings", embeddings_reply)
    emb = make(server, fast_retry, headers={"X-Team": "memory"}, dimensions=4)
    vectors = emb.embed_documents(["alpha", "beta gamma"])
    assert vectors == [vec(5), vec(10)]  # stored as returned: not normalised
    (req,) = server.calls("POST", "/v1/embeddings")
    assert req.json == {"input": ["alpha", "beta gamma"], "model": "text-embedding-3-small",
                        "encoding_format": "float", "dimensions": 4}
    assert req.header("Authorization") == f"Bearer {API_KEY}"
    assert req.header("X-Team") == "memory"
    assert emb.embed_query("q") == vec(1)
    assert server.calls("POST", "/v1/embeddings")[-1].json["input"] == ["q"]


def test_429_then_502_then_success_makes_three_calls(server: FakeServer, fast_retry: Any, sleeps: Any) -> None:
    server.script("POST", "/v1/embeddings",
                  [error_reply(429, "Rate limit reached", "rate_limit_exceeded"), error_reply(502, "Bad gateway")],
                  then=embeddings_reply)
    emb = make(server, fast_retry)
    assert emb.embed_documents(["x"]) == [vec(1)]
    assert len(server.calls("POST", "/v1/embeddings")) == 3
    assert sleeps.delays == [0.5, 1.0]


def test_retries_give_up_after_four_attempts(server: FakeServer, fast_retry: Any, sleeps: Any) -> None:
    server.route("POST", "/v1/embeddings", error_reply(503, "overloaded"))
    emb = make(server, fast_retry)
    with pytest.raises(EmbeddingError, match="503"):
        emb.embed_documents(["x"])
    assert len(server.calls("POST", "/v1/embeddings")) == 4
    assert sleeps.delays == [0.5, 1.0, 2.0]


def test_quota_error_is_not_retried(server: FakeServer, fast_retry: Any) -> None:
    server.route("POST", "/v1/embeddings",
                 error_reply(429, "You exceeded your current quota, please check your plan and billing details.",
                             "insufficient_quota", "insufficient_quota"))
    emb = make(server, fast_retry)
    with pytest.raises(EmbeddingQuotaError, match="quota"):
        emb.embed_documents(["x"])
    assert len(server.calls("POST", "/v1/embeddings")) == 1


def test_timeout_becomes_embedding_error(server: FakeServer, fast_retry: Any) -> None:
    release = threading.Event()  # the server answers only when released (10 s at most)
    server.route("POST", "/v1/embeddings", Reply(200, {"data": []}, hold=release, delay=10.0))
    emb = make(server, fast_retry, timeout=60.0, query_timeout=0.15)
    try:
        with pytest.raises(EmbeddingError, match="(?i)timed out"):
            emb.embed_query("slow")
        assert server.answered == []  # the query's own timeout fired, before any answer
        assert len(server.calls("POST", "/v1/embeddings")) == 1  # timeouts are not retried
    finally:
        release.set()


@pytest.mark.parametrize("body, message", [
    ({"object": "list", "data": [], "model": "m", "usage": {"prompt_tokens": 1, "total_tokens": 1}}, "expected 2"),
    ({"object": "list", "data": [{"index": 0, "object": "embedding"}, {"index": 1, "object": "embedding"}],
      "model": "m", "usage": {"prompt_tokens": 1, "total_tokens": 1}}, "data\\[0\\].embedding"),
    ({"object": "list", "data": [{"index": 0, "embedding": ["a", 1]}, {"index": 1, "embedding": [1, 2]}],
      "model": "m", "usage": {"prompt_tokens": 1, "total_tokens": 1}}, "non-numeric"),
])
def test_malformed_responses(server: FakeServer, fast_retry: Any, body: Any, message: str) -> None:
    server.route("POST", "/v1/embeddings", Reply(200, body))
    emb = make(server, fast_retry)
    with pytest.raises(EmbeddingError, match=message):
        emb.embed_documents(["a", "b"])
    assert len(server.calls("POST", "/v1/embeddings")) == 1


def test_async_paths(server: FakeServer, fast_retry: Any) -> None:
    server.script("POST", "/v1/embeddings", [error_reply(500, "boom")], then=embeddings_reply)
    emb = make(server, fast_retry)

    async def go() -> tuple[Any, Any]:
        return await emb.aembed_documents(["one", "three"]), await emb.aembed_query("two")

    docs, query = asyncio.run(go())
    assert docs == [vec(3), vec(5)] and query == vec(3)
    assert len(server.calls("POST", "/v1/embeddings")) == 3


def test_provider_key_tracks_vector_settings_not_secrets(server: FakeServer) -> None:
    a = OpenAIEmbedder(api_key=API_KEY, base_url=server.url + "/v1", headers={"Authorization": f"Bearer {API_KEY}"})
    b = OpenAIEmbedder(api_key="sk-other-key-123456", base_url=server.url + "/v1")
    c = OpenAIEmbedder(api_key=API_KEY, base_url=server.url + "/v1", dimensions=256)
    d = OpenAIEmbedder(api_key=API_KEY, base_url=server.url + "/v2")
    assert a.provider_key == b.provider_key
    assert len({a.provider_key, c.provider_key, d.provider_key}) == 3
    assert a.max_input_bytes == 8192 and a.input_limit == 8000


# -- Batch API ----------------------------------------------------------------------------------

class OpenAIBatchServer:
    """Files + /batches state machine: a batch is in_progress for ``polls`` status reads."""

    def __init__(self, server: FakeServer, polls: int = 2, final: str = "completed") -> None:
        self.server, self.polls, self.final = server, polls, final
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        server.route("POST", "/v1/files", self.upload)
        server.route("POST", "/v1/batches", self.create)
        server.route("GET", r"/v1/batches/[^/]+", self.status)
        server.route("GET", r"/v1/files/[^/]+/content", self.content)
        server.route("POST", "/v1/embeddings", embeddings_reply)

    def upload(self, req: Request) -> Reply:
        parts = multipart_parts(req)
        fields = {h.get("content-disposition", "").split('name="')[1].split('"')[0]: p for h, p in parts}
        assert fields["purpose"] == b"batch"
        fid = f"file-in-{len(self.files)}"
        self.files[fid] = fields["file"]
        return Reply(200, {"id": fid, "object": "file", "bytes": len(fields["file"]), "created_at": 1,
                           "filename": "memory-embeddings.jsonl", "purpose": "batch", "status": "processed"})

    def batch_obj(self, bid: str) -> dict[str, Any]:
        b = self.batches[bid]
        return {"id": bid, "object": "batch", "endpoint": "/v1/embeddings", "input_file_id": b["input"],
                "completion_window": "24h", "status": b["status"], "created_at": 1,
                "output_file_id": b.get("output"), "errors": None}

    def create(self, req: Request) -> Reply:
        body = req.json
        bid = f"batch_{len(self.batches)}"
        self.batches[bid] = {"input": body["input_file_id"], "status": "validating", "reads": 0, "req": body}
        return Reply(200, self.batch_obj(bid))

    def status(self, req: Request) -> Reply:
        bid = req.path.rsplit("/", 1)[1]
        b = self.batches[bid]
        b["reads"] += 1
        if b["reads"] > self.polls:
            b["status"] = self.final
            if self.final == "completed":
                out = []
                for line in jsonl(self.files[b["input"]]):
                    out.append({"id": "r", "custom_id": line["custom_id"], "error": None,
                                "response": {"status_code": 200, "request_id": "q",
                                             "body": {"object": "list", "data": [
                                                 {"object": "embedding", "index": 0,
                                                  "embedding": vec(len(line["body"]["input"]) + 100)}]}}})
                fid = f"file-out-{bid}"
                self.files[fid] = "\n".join(__import__("json").dumps(o) for o in out).encode()
                b["output"] = fid
        else:
            b["status"] = "in_progress"
        return Reply(200, self.batch_obj(bid))

    def content(self, req: Request) -> Reply:
        fid = req.path.split("/")[3]
        return Reply(200, raw=self.files[fid], content_type="application/octet-stream")


def test_batch_flow_end_to_end(server: FakeServer, fast_retry: Any, sleeps: Any) -> None:
    batch = OpenAIBatchServer(server, polls=2)
    emb = make(server, fast_retry)
    emb.enable_batch(BatchConfig(enabled=True, poll_interval_ms=5), sleep=sleeps)
    vectors = emb.embed_documents(["aa", "bbbb", "c"])
    assert vectors == [vec(102), vec(104), vec(101)]
    assert not server.calls("POST", "/v1/embeddings")  # nothing through the plain endpoint
    (create,) = server.calls("POST", "/v1/batches")
    assert create.json["completion_window"] == "24h" and create.json["endpoint"] == "/v1/embeddings"
    lines = jsonl(batch.files[create.json["input_file_id"]])
    assert [(l["method"], l["url"], l["body"]["input"], l["body"]["model"]) for l in lines] == [
        ("POST", "/v1/embeddings", "aa", "text-embedding-3-small"),
        ("POST", "/v1/embeddings", "bbbb", "text-embedding-3-small"),
        ("POST", "/v1/embeddings", "c", "text-embedding-3-small")]
    assert len(server.calls("GET", r"/v1/batches/.*")) == 3
    assert 0.005 in sleeps.delays
    assert emb.batch is not None and emb.batch.failures == 0 and emb.batch.active and emb.batch_active


def test_transient_batch_create_failure_is_retried(server: FakeServer, fast_retry: Any, sleeps: Any) -> None:
    batch = OpenAIBatchServer(server, polls=0)
    server.script("POST", "/v1/batches", [error_reply(503, "try later")], then=batch.create)
    emb = make(server, fast_retry)
    emb.enable_batch(BatchConfig(enabled=True, poll_interval_ms=1), sleep=sleeps)
    assert emb.embed_documents(["x"]) == [vec(101)]
    assert len(server.calls("POST", "/v1/batches")) == 2


def test_two_batch_failures_disable_batching(server: FakeServer, fast_retry: Any, sleeps: Any) -> None:
    OpenAIBatchServer(server, polls=0, final="failed")
    emb = make(server, fast_retry)
    emb.enable_batch(BatchConfig(enabled=True, poll_interval_ms=1), sleep=sleeps)
    runner = emb.batch
    assert runner is not None
    assert emb.embed_documents(["one"]) == [vec(3)]  # fell back to plain embedding
    assert runner.failures == 1 and runner.active
    assert emb.embed_documents(["two"]) == [vec(3)]
    assert runner.failures == 2 and not runner.active and not emb.batch_active
    batches_before = len(server.calls("POST", "/v1/batches"))
    assert emb.embed_documents(["three"]) == [vec(5)]
    assert len(server.calls("POST", "/v1/batches")) == batches_before == 2  # no more batch calls
    assert len(server.calls("POST", "/v1/embeddings")) == 3


def test_batch_success_resets_failure_count(server: FakeServer, fast_retry: Any, sleeps: Any) -> None:
    srv = OpenAIBatchServer(server, polls=0, final="failed")
    emb = make(server, fast_retry)
    emb.enable_batch(BatchConfig(enabled=True, poll_interval_ms=1), sleep=sleeps)
    emb.embed_documents(["one"])
    assert emb.batch is not None and emb.batch.failures == 1
    srv.final = "completed"
    assert emb.embed_documents(["one"]) == [vec(103)]
    assert emb.batch.failures == 0 and emb.batch.active


def test_batch_timeout_is_retried_once_then_disables(server: FakeServer, fast_retry: Any, sleeps: Any) -> None:
    OpenAIBatchServer(server, polls=10_000)
    clock = {"t": 0.0}

    def fake_sleep(seconds: float) -> None:
        clock["t"] += seconds

    emb = make(server, fast_retry)
    emb.enable_batch(BatchConfig(enabled=True, poll_interval_ms=20_000, timeout_minutes=1),
                     sleep=fake_sleep, clock=lambda: clock["t"])
    assert emb.embed_documents(["x"]) == [vec(1)]  # plain fallback after two timed-out batches
    assert len(server.calls("POST", "/v1/batches")) == 2
    assert emb.batch is not None and not emb.batch.active  # a retried timeout counts twice


def test_wait_false_falls_back(server: FakeServer, fast_retry: Any, sleeps: Any) -> None:
    OpenAIBatchServer(server, polls=5)
    emb = make(server, fast_retry)
    emb.enable_batch(BatchConfig(enabled=True, wait=False), sleep=sleeps)
    assert emb.embed_documents(["x"]) == [vec(1)]
    assert emb.batch is not None and "remote.batch.wait" in (emb.batch.last_error or "")
