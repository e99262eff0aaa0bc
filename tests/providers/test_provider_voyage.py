"""Voyage specifics: input_type document vs query, base64 transport, batch API end to end."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

pytest.importorskip("voyageai")

from clawmem_core.config import BatchConfig
from clawmem_core.embeddings.voyage import VoyageEmbedder, normalize_voyage_model

from .providers_wire import WIRES
from .wire import API_KEY, FakeServer, Reply, Request, jsonl, multipart_parts, vec


def make(server: FakeServer, retry: Any, **kw: Any) -> VoyageEmbedder:
    return VoyageEmbedder(api_key=API_KEY, base_url=server.url + "/v1", retry=retry, **kw)


def test_input_type_and_body(server: FakeServer, fast_retry: Any) -> None:
    server.route("POST", "/v1/embeddings", WIRES["voyage"].ok)
    emb = make(server, fast_retry, dimensions=1024)
    assert emb.embed_documents(["chunk"]) == [vec(5)]
    assert emb.embed_query("q?") == vec(2)
    docs, query = (r.json for r in server.requests)
    assert docs["input_type"] == "document" and query["input_type"] == "query"
    assert docs["model"] == "voyage-4-large" and docs["input"] == ["chunk"] and docs["output_dimension"] == 1024
    assert docs["encoding_format"] == "base64"  # the SDK's transport; decoded back to floats
    assert server.requests[0].header("Authorization") == f"Bearer {API_KEY}"


def test_plain_float_lists_are_accepted(server: FakeServer, fast_retry: Any) -> None:
    server.route("POST", "/v1/embeddings", Reply(200, {"object": "list", "model": "m", "usage": {"total_tokens": 1},
                                                       "data": [{"embedding": [0.25, -1.5], "index": 0}]}))
    assert make(server, fast_retry).embed_query("x") == [0.25, -1.5]  # stored as returned


def test_model_names() -> None:
    assert normalize_voyage_model("") == "voyage-4-large"
    assert normalize_voyage_model("voyage/voyage-large-2") == "voyage-large-2"


def test_custom_headers_warn(server: FakeServer, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="clawmem.embeddings"):
        make(server, None, headers={"X-Org": "a"})
    assert "batch API calls only" in caplog.text


class VoyageBatchServer:
    """Voyage's files + /batches (OpenAI-style, 12h window) state machine."""

    def __init__(self, server: FakeServer, polls: int = 1, final: str = "completed") -> None:
        self.polls, self.final = polls, final
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        server.route("POST", "/v1/files", self.upload)
        server.route("POST", "/v1/batches", self.create)
        server.route("GET", r"/v1/batches/[^/]+", self.status)
        server.route("GET", r"/v1/files/[^/]+/content", self.content)
        server.route("POST", "/v1/embeddings", WIRES["voyage"].ok)

    def upload(self, req: Request) -> Reply:
        parts = {h["content-disposition"].split('name="')[1].split('"')[0]: p for h, p in multipart_parts(req)}
        assert parts["purpose"] == b"batch"
        fid = f"file-{len(self.files)}"
        self.files[fid] = parts["file"]
        return Reply(200, {"id": fid, "object": "file", "purpose": "batch"})

    def obj(self, bid: str) -> dict[str, Any]:
        b = self.batches[bid]
        return {"id": bid, "object": "batch", "status": b["status"], "output_file_id": b.get("output"),
                "error_file_id": None}

    def create(self, req: Request) -> Reply:
        body = req.json
        bid = f"batch-{len(self.batches)}"
        self.batches[bid] = {"status": "validating", "reads": 0, "body": body}
        return Reply(200, self.obj(bid))

    def status(self, req: Request) -> Reply:
        bid = req.path.rsplit("/", 1)[1]
        b = self.batches[bid]
        b["reads"] += 1
        b["status"] = "in_progress"
        if b["reads"] > self.polls:
            b["status"] = self.final
            if self.final == "completed":
                out = [{"custom_id": l["custom_id"], "response": {"status_code": 200, "body": {
                    "data": [{"embedding": vec(len(l["body"]["input"][0]) + 7), "index": 0}]}}}
                    for l in jsonl(self.files[b["body"]["input_file_id"]])]
                fid = f"out-{bid}"
                self.files[fid] = "\n".join(json.dumps(o) for o in out).encode()
                b["output"] = fid
        return Reply(200, self.obj(bid))

    def content(self, req: Request) -> Reply:
        return Reply(200, raw=self.files[req.path.split("/")[3]], content_type="application/jsonl")


def test_batch_end_to_end(server: FakeServer, fast_retry: Any, sleeps: Any) -> None:
    srv = VoyageBatchServer(server, polls=2)
    emb = make(server, fast_retry, headers={"X-Org": "team"})
    emb.enable_batch(BatchConfig(enabled=True, poll_interval_ms=4), sleep=sleeps)
    assert emb.embed_documents(["abc", "a"]) == [vec(10), vec(8)]
    assert not server.calls("POST", "/v1/embeddings")
    (create,) = server.calls("POST", "/v1/batches")
    assert create.json["completion_window"] == "12h" and create.json["endpoint"] == "/v1/embeddings"
    assert create.json["request_params"] == {"model": "voyage-4-large", "input_type": "document"}
    assert [l["body"]["input"] for l in jsonl(srv.files[create.json["input_file_id"]])] == [["abc"], ["a"]]
    for req in server.requests:  # batch calls carry the key and the custom headers
        assert req.header("Authorization") == f"Bearer {API_KEY}" and req.header("X-Org") == "team"
    assert len(server.calls("GET", r"/v1/batches/.*")) == 3 and sleeps.delays == [0.004] * 3


def test_batch_failures_fall_back_then_disable(server: FakeServer, fast_retry: Any, sleeps: Any) -> None:
    srv = VoyageBatchServer(server, polls=0, final="failed")
    emb = make(server, fast_retry)
    emb.enable_batch(BatchConfig(enabled=True, poll_interval_ms=1), sleep=sleeps)
    assert emb.embed_documents(["abc"]) == [vec(3)]
    assert emb.batch is not None and emb.batch.failures == 1 and emb.batch.active
    srv.final = "expired"
    assert emb.embed_documents(["abc"]) == [vec(3)]
    assert not emb.batch.active and "expired" in (emb.batch.disabled_reason or "")
    emb.embed_documents(["abc"])
    assert len(server.calls("POST", "/v1/batches")) == 2 and len(server.calls("POST", "/v1/embeddings")) == 3


def test_batch_result_errors_fail_the_batch(server: FakeServer, fast_retry: Any, sleeps: Any) -> None:
    srv = VoyageBatchServer(server, polls=0)

    def broken_content(req: Request) -> Reply:
        line = {"custom_id": "clawmem-0", "response": {"status_code": 400,
                                                      "body": {"error": {"message": "input too long"}}}}
        return Reply(200, raw=json.dumps(line).encode())

    server.route("GET", r"/v1/files/[^/]+/content", broken_content)
    emb = make(server, fast_retry)
    emb.enable_batch(BatchConfig(enabled=True, poll_interval_ms=1), sleep=sleeps)
    assert emb.embed_documents(["abc"]) == [vec(3)]
    assert emb.batch is not None and "input too long" in (emb.batch.last_error or "")
    assert srv.batches
