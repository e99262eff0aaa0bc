"""Voyage's rerank API through the ``voyageai`` SDK, against a local stub of the API."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("voyageai")

from clawmem_core import MemoryConfig, MemoryIndex
from clawmem_core.rerank import VoyageReranker

from .wire import API_KEY, FakeServer, Reply, Request


def rerank_reply(req: Request) -> Reply:
    body = req.json
    docs = body["documents"]
    # relevance: how often the document holds the query's first word
    word = body["query"].split()[0].lower()
    scored = sorted(((d.lower().count(word), i) for i, d in enumerate(docs)), reverse=True)
    return Reply(200, {"object": "list", "model": body["model"], "usage": {"total_tokens": 7},
                       "data": [{"index": i, "relevance_score": float(s)} for s, i in scored]})


def test_voyage_reranker_scores_by_index(server: FakeServer) -> None:
    server.route("POST", "/v1/rerank", rerank_reply)
    rr = VoyageReranker(api_key=API_KEY, base_url=server.url + "/v1", model="rerank-2.5")
    assert rr.rerank("walrus facts", ["no", "walrus walrus", "a walrus"]) == [0.0, 2.0, 1.0]
    req = server.requests[-1]
    assert req.json["model"] == "rerank-2.5" and req.json["query"] == "walrus facts"
    assert req.header("Authorization") == f"Bearer {API_KEY}"


def test_voyage_reranking_in_a_search_and_failing_open(server: FakeServer, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    for i in range(1, 9):
        (ws / "memory" / f"2026-03-{i:02d}.md").write_text(
            f"# Day {i}\n\nbilling report {i}" + (" walrus" if i == 7 else "") + "\n", encoding="utf-8")
    monkeypatch.setenv("VOYAGE_API_KEY", API_KEY)
    server.route("POST", "/v1/rerank", lambda req: rerank_reply(Request(req.method, req.path, req.query, req.headers,
                                                                             req.body.replace(b'"billing', b'"walrus'))))
    cfg = MemoryConfig.from_dict({"provider": "none", "query": {"rerank": {
        "provider": "voyage", "baseUrl": server.url + "/v1", "weight": 1.0}}})
    with MemoryIndex(ws, config=cfg, state_dir=tmp_path / "state") as mem:
        mem.sync()
        hits = mem.search("billing report", min_score=0)
        assert hits.reranked is True and hits[0].path == "memory/2026-03-07.md"
        server.route("POST", "/v1/rerank", Reply(500, {"detail": "overloaded"}))
        down = mem.search("billing report", min_score=0)
        assert down.reranked is False and "rerank_error" in down.info
        assert down[0].path != "memory/2026-03-07.md"  # the fused order stands
