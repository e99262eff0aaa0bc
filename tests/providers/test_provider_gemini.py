"""Gemini specifics: task types, key header, outputDimensionality rules, normalisation, async batch."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

pytest.importorskip("httpx")

from clawmem_core.config import BatchConfig, MemoryConfig, RemoteConfig
from clawmem_core.embeddings.gemini import GeminiEmbedder, normalize_gemini_model
from clawmem_core.embeddings.registry import create_provider
from clawmem_core.errors import ConfigError

from .providers_wire import WIRES, unit
from .wire import API_KEY, FakeServer, Reply, Request, jsonl, multipart_parts, vec

BASE = "/v1beta/models/gemini-embedding-001"


def make(server: FakeServer, retry: Any, **kw: Any) -> GeminiEmbedder:
    return GeminiEmbedder(api_key=API_KEY, base_url=server.url + "/v1beta", retry=retry, **kw)


def test_requests_carry_task_types_key_header_and_merged_headers(server: FakeServer, fast_retry: Any) -> None:
    server.route("POST", BASE + ":batchEmbedContents", WIRES["gemini"].ok)
    server.route("POST", BASE + ":embedContent", WIRES["gemini"].ok)
    emb = make(server, fast_retry, headers={"X-Proxy": "on"})
    emb.embed_documents(["doc one"])
    emb.embed_query("the query")
    docs, query = server.requests
    assert docs.json == {"requests": [{"model": "models/gemini-embedding-001",
                                       "content": {"parts": [{"text": "doc one"}]},
                                       "taskType": "RETRIEVAL_DOCUMENT"}]}
    assert query.json == {"content": {"parts": [{"text": "the query"}]}, "taskType": "RETRIEVAL_QUERY"}
    for req in (docs, query):
        assert req.header("x-goog-api-key") == API_KEY and req.header("X-Proxy") == "on"
        assert API_KEY not in req.path and not req.query  # never in the URL


def test_vectors_are_l2_normalised(server: FakeServer, fast_retry: Any) -> None:
    server.route("POST", BASE + ":embedContent", Reply(200, {"embedding": {"values": [3, 4]}}))
    assert make(server, fast_retry).embed_query("x") == pytest.approx([0.6, 0.8])


def test_more_than_100_documents_are_split(server: FakeServer, fast_retry: Any) -> None:
    server.route("POST", BASE + ":batchEmbedContents", WIRES["gemini"].ok)
    texts = [f"t{i}" for i in range(230)]
    out = make(server, fast_retry).embed_documents(texts)
    assert len(out) == 230 and out[229] == pytest.approx(unit(vec(4)))
    assert [len(r.json["requests"]) for r in server.requests] == [100, 100, 30]


def test_output_dimensionality_rules(server: FakeServer, fast_retry: Any) -> None:
    server.route("POST", r"/v1beta/models/[^:]+:embedContent", WIRES["gemini"].ok)
    e2 = make(server, fast_retry, model="gemini-embedding-2-preview")
    assert e2.output_dimensionality == 3072 and e2.max_input_bytes == 8192
    e2.embed_query("q")
    assert server.requests[-1].json["outputDimensionality"] == 3072
    assert server.requests[-1].path.endswith("gemini-embedding-2-preview:embedContent")
    assert make(server, fast_retry, model="gemini-embedding-2-preview", output_dimensionality=768).output_dimensionality == 768
    with pytest.raises(ConfigError, match="768, 1536 or 3072"):
        make(server, fast_retry, model="gemini-embedding-2-preview", output_dimensionality=1024)
    e1 = make(server, fast_retry)
    assert e1.output_dimensionality is None and e1.max_input_bytes == 2048
    e1.embed_query("q")
    assert "outputDimensionality" not in server.requests[-1].json
    explicit = make(server, fast_retry, output_dimensionality=768)
    explicit.embed_query("q")
    assert server.requests[-1].json["outputDimensionality"] == 768
    keys = {e1.provider_key, explicit.provider_key, e2.provider_key}
    assert len(keys) == 3


def test_model_names_are_normalised() -> None:
    assert normalize_gemini_model("models/gemini-embedding-001") == "gemini-embedding-001"
    assert normalize_gemini_model("gemini/text-embedding-004") == "text-embedding-004"
    assert normalize_gemini_model("google/models/x") == "x"
    assert normalize_gemini_model("") == "gemini-embedding-001"


def test_api_key_named_by_env_variable(server: FakeServer) -> None:
    config = MemoryConfig(provider="gemini", remote=RemoteConfig(base_url=server.url + "/v1beta",
                                                                 api_key="GEMINI_API_KEY"))
    server.route("POST", BASE + ":embedContent", WIRES["gemini"].ok)
    emb = create_provider("gemini", config, environ={"GEMINI_API_KEY": "g-env-key-123"})
    emb.embed_query("q")
    assert server.requests[0].header("x-goog-api-key") == "g-env-key-123"
    emb2 = create_provider("gemini", MemoryConfig(provider="gemini"), environ={"GOOGLE_API_KEY": "g-google-456"})
    assert emb2._api_key == "g-google-456"  # type: ignore[attr-defined]


# -- async batch --------------------------------------------------------------------------------

class GeminiBatchServer:
    """Upload (multipart/related), ``:asyncBatchEmbedContent`` → Operation, poll, download."""

    def __init__(self, server: FakeServer, polls: int = 1, final: str = "BATCH_STATE_SUCCEEDED") -> None:
        self.polls, self.final = polls, final
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        server.route("POST", "/upload/v1beta/files", self.upload)
        server.route("POST", BASE + ":asyncBatchEmbedContent", self.create)
        server.route("GET", r"/v1beta/batches/[^/]+", self.status)
        server.route("GET", r"/download/v1beta/files/[^/]+:download", self.download)
        server.route("POST", BASE + ":batchEmbedContents", WIRES["gemini"].ok)

    def upload(self, req: Request) -> Reply:
        assert req.query.get("uploadType") == ["multipart"]
        assert (req.header("Content-Type") or "").startswith("multipart/related")
        (meta_h, meta), (_, data) = multipart_parts(req)
        assert json.loads(meta)["file"]["mimeType"] == "application/jsonl"
        name = f"files/in{len(self.files)}"
        self.files[name] = data
        return Reply(200, {"file": {"name": name, "mimeType": "application/jsonl"}})

    def op(self, name: str) -> dict[str, Any]:
        b = self.batches[name]
        meta: dict[str, Any] = {"@type": "type.googleapis.com/google.ai.generativelanguage.v1main.EmbedContentBatch",
                                "name": name, "state": b["state"]}
        if b.get("output"):
            meta["output"] = {"responsesFile": b["output"]}
        return {"name": name, "metadata": meta, "done": b["state"] != "BATCH_STATE_PENDING"}

    def create(self, req: Request) -> Reply:
        body = req.json["batch"]
        name = f"batches/b{len(self.batches)}"
        self.batches[name] = {"input": body["inputConfig"]["fileName"], "state": "BATCH_STATE_PENDING", "reads": 0}
        return Reply(200, self.op(name))

    def status(self, req: Request) -> Reply:
        name = req.path[len("/v1beta/"):]
        b = self.batches[name]
        b["reads"] += 1
        if b["reads"] > self.polls:
            b["state"] = self.final
            if self.final.endswith("SUCCEEDED"):
                lines = [{"key": item["key"], "response": {"embedding": {
                    "values": vec(len(item["request"]["content"]["parts"][0]["text"]) + 50)}}}
                    for item in jsonl(self.files[b["input"]])]
                out = f"files/out-{name.split('/')[1]}"
                self.files[out] = "\n".join(json.dumps(x) for x in lines).encode()
                b["output"] = out
        return Reply(200, self.op(name))

    def download(self, req: Request) -> Reply:
        assert req.query.get("alt") == ["media"]
        name = req.path[len("/download/v1beta/"):-len(":download")]
        return Reply(200, raw=self.files[name], content_type="application/octet-stream")


def test_async_batch_end_to_end(server: FakeServer, fast_retry: Any, sleeps: Any) -> None:
    batch = GeminiBatchServer(server, polls=2)
    emb = make(server, fast_retry)
    emb.enable_batch(BatchConfig(enabled=True, poll_interval_ms=3), sleep=sleeps)
    out = emb.embed_documents(["ab", "abcd"])
    assert out == [pytest.approx(unit(vec(52))), pytest.approx(unit(vec(54)))]
    assert not server.calls("POST", BASE + ":batchEmbedContents")
    assert len(server.calls("GET", r"/v1beta/batches/.*")) == 3 and sleeps.delays.count(0.003) == 3
    lines = jsonl(batch.files["files/in0"])
    assert [l["request"]["taskType"] for l in lines] == ["RETRIEVAL_DOCUMENT"] * 2
    assert all(r.header("x-goog-api-key") == API_KEY for r in server.requests)
    assert all(math.isclose(sum(x * x for x in v), 1.0) for v in out)


def test_two_failed_batches_fall_back_for_good(server: FakeServer, fast_retry: Any, sleeps: Any) -> None:
    GeminiBatchServer(server, polls=0, final="BATCH_STATE_FAILED")
    emb = make(server, fast_retry)
    emb.enable_batch(BatchConfig(enabled=True, poll_interval_ms=1), sleep=sleeps)
    for _ in range(3):
        assert emb.embed_documents(["ab"]) == [pytest.approx(unit(vec(2)))]
    assert len(server.calls("POST", BASE + ":asyncBatchEmbedContent")) == 2
    assert len(server.calls("POST", BASE + ":batchEmbedContents")) == 3
    assert emb.batch is not None and not emb.batch.active and "FAILED" in (emb.batch.disabled_reason or "")


def test_batch_404_disables_batching_at_once(server: FakeServer, fast_retry: Any, sleeps: Any) -> None:
    GeminiBatchServer(server)
    server.route("POST", BASE + ":asyncBatchEmbedContent",
                 Reply(404, {"error": {"code": 404, "message": "not found", "status": "NOT_FOUND"}}))
    emb = make(server, fast_retry)
    emb.enable_batch(BatchConfig(enabled=True, poll_interval_ms=1), sleep=sleeps)
    assert emb.embed_documents(["ab"]) == [pytest.approx(unit(vec(2)))]
    assert emb.batch is not None and not emb.batch.active
    assert "asyncBatchEmbedContent not available" in (emb.batch.disabled_reason or "")
    emb.embed_documents(["ab"])
    assert len(server.calls("POST", BASE + ":asyncBatchEmbedContent")) == 1


def test_registry_enables_batch_from_config(server: FakeServer) -> None:
    config = MemoryConfig(provider="gemini", remote=RemoteConfig(
        base_url=server.url + "/v1beta", api_key=API_KEY, batch=BatchConfig(enabled=True, poll_interval_ms=1)))
    GeminiBatchServer(server, polls=0)
    emb = create_provider("gemini", config, environ={})
    assert emb.embed_documents(["abc"]) == [pytest.approx(unit(vec(53)))]
    assert server.calls("POST", BASE + ":asyncBatchEmbedContent")
