"""Each remote provider's wire protocol as a local test server speaks it (success, errors, bad bodies)."""

from __future__ import annotations

import base64
import math
import struct
from dataclasses import dataclass, field
from typing import Any, Callable

from clawmem_core.config import MemoryConfig, RemoteConfig
from clawmem_core.embeddings.base import Embedder
from clawmem_core.embeddings.registry import create_provider

from .wire import API_KEY, FakeServer, Reply, Request, vec


def unit(v: list[float]) -> list[float]:
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v]


def _openai_like_ok(req: Request) -> Reply:
    body = req.json
    inputs = body.get("input", body.get("inputs"))
    inputs = inputs if isinstance(inputs, list) else [inputs]
    data = [{"object": "embedding", "index": i, "embedding": vec(len(t))} for i, t in enumerate(inputs)]
    return Reply(200, {"id": "emb-1", "object": "list", "data": data, "model": body["model"],
                       "usage": {"prompt_tokens": 3, "total_tokens": 3, "completion_tokens": 0}})


def _voyage_ok(req: Request) -> Reply:
    body = req.json
    data = []
    for i, t in enumerate(body["input"]):
        v = vec(len(t))
        emb: Any = base64.b64encode(struct.pack(f"<{len(v)}f", *v)).decode() \
            if body.get("encoding_format") == "base64" else v
        data.append({"object": "embedding", "embedding": emb, "index": i})
    return Reply(200, {"object": "list", "data": data, "model": body["model"], "usage": {"total_tokens": 5}})


def _gemini_ok(req: Request) -> Reply:
    body = req.json
    if req.path.endswith(":embedContent"):
        return Reply(200, {"embedding": {"values": vec(len(body["content"]["parts"][0]["text"]))}})
    return Reply(200, {"embeddings": [{"values": vec(len(r["content"]["parts"][0]["text"]))}
                                      for r in body["requests"]]})


def _ollama_ok(req: Request) -> Reply:
    body = req.json
    if req.path == "/api/embed":
        return Reply(200, {"model": body["model"], "embeddings": [vec(len(t)) for t in body["input"]]})
    return Reply(200, {"embedding": vec(len(body["prompt"]))})


def _openai_error(status: int, message: str, code: str | None = None) -> Reply:
    return Reply(status, {"error": {"message": message, "type": code or "server_error", "code": code, "param": None}})


def _mistral_error(status: int, message: str, code: str | None = None) -> Reply:
    return Reply(status, {"object": "error", "message": message, "type": code or "api_error", "code": code})


def _voyage_error(status: int, message: str, code: str | None = None) -> Reply:
    return Reply(status, {"detail": f"{message} {code or ''}".strip()})


def _gemini_error(status: int, message: str, code: str | None = None) -> Reply:
    word = {429: "RESOURCE_EXHAUSTED", 502: "UNAVAILABLE", 503: "UNAVAILABLE", 500: "INTERNAL"}.get(status, "FAILED_PRECONDITION")
    return Reply(status, {"error": {"code": status, "message": f"{message} {code or ''}".strip(), "status": word}})


def _ollama_error(status: int, message: str, code: str | None = None) -> Reply:
    return Reply(status, {"error": f"{message} {code or ''}".strip()})


@dataclass
class Wire:
    """How one provider is reached and answered. ``expected`` maps the server's raw vectors to
    what the embedder returns (normalised or not)."""

    name: str
    docs_path: str
    query_path: str
    ok: Callable[[Request], Reply]
    error: Callable[[int, str, str | None], Reply]
    normalized: bool
    base_suffix: str = ""
    malformed: list[tuple[Any, str]] = field(default_factory=list)

    def make(self, server: FakeServer, retry: Any = None, *, headers: dict[str, str] | None = None,
             **options: Any) -> Embedder:
        config = MemoryConfig(provider=self.name,  # type: ignore[arg-type]
                              remote=RemoteConfig(base_url=server.url + self.base_suffix, api_key=API_KEY,
                                                  headers=headers or {}))
        return create_provider(self.name, config, environ={}, retry=retry, **options)

    def expected(self, texts: list[str]) -> list[list[float]]:
        raw = [vec(len(t)) for t in texts]
        return [unit(v) for v in raw] if self.normalized else raw


_openai_bad = [
    ({"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [1.0, 2.0]}], "model": "m",
      "usage": {"prompt_tokens": 1, "total_tokens": 1}}, "expected 2 embeddings, got 1"),
    ({"object": "list", "data": [{"object": "embedding", "index": 0}, {"object": "embedding", "index": 1}],
      "model": "m", "usage": {"prompt_tokens": 1, "total_tokens": 1}}, "not a vector"),
]

WIRES = {
    "openai": Wire("openai", "/v1/embeddings", "/v1/embeddings", _openai_like_ok, _openai_error, False, "/v1",
                   _openai_bad + [({"object": "list", "data": [{"index": 0, "embedding": [1, "x"]},
                                                               {"index": 1, "embedding": [1, 2]}],
                                    "model": "m", "usage": {"prompt_tokens": 1, "total_tokens": 1}}, "non-numeric")]),
    "mistral": Wire("mistral", "/v1/embeddings", "/v1/embeddings", _openai_like_ok, _mistral_error, False, "/v1",
                    [({**b, "id": "x"}, m) for b, m in _openai_bad]
                    + [({"id": "x", "object": "list", "model": "m", "usage": {"prompt_tokens": 1, "total_tokens": 1},
                         "data": [{"index": 0, "embedding": ["x"]}, {"index": 1, "embedding": [1.0]}]},
                        "(?i)validation|non-numeric")]),
    "voyage": Wire("voyage", "/v1/embeddings", "/v1/embeddings", _voyage_ok, _voyage_error, False, "/v1",
                   [({"object": "list", "data": [{"embedding": [1.0, 2.0], "index": 0}], "model": "m",
                      "usage": {"total_tokens": 1}}, "expected 2 embeddings, got 1"),
                    ({"object": "list", "data": [{"index": 0}, {"index": 1}], "model": "m",
                      "usage": {"total_tokens": 1}}, "malformed"),
                    ({"object": "list", "data": [{"embedding": [1.0, None], "index": 0},
                                                 {"embedding": [1.0, 2.0], "index": 1}], "model": "m",
                      "usage": {"total_tokens": 1}}, "non-numeric")]),
    "gemini": Wire("gemini", r"/v1beta/models/gemini-embedding-001:batchEmbedContents",
                   r"/v1beta/models/gemini-embedding-001:embedContent", _gemini_ok, _gemini_error, True, "/v1beta",
                   [({"embeddings": [{"values": [1.0]}]}, "expected 2 embeddings, got 1"),
                    ({"embeddings": [{"values": [1.0]}, {"other": 1}]}, r"embeddings\[1\].values"),
                    ({"embeddings": [{"values": [1.0, "2"]}, {"values": [1.0]}]}, "non-numeric"),
                    ({"predictions": []}, "no 'embeddings' list")]),
    "ollama": Wire("ollama", "/api/embed", "/api/embed", _ollama_ok, _ollama_error, True, "",
                   [({"model": "m", "embeddings": [[1.0]]}, "expected 2 embeddings, got 1"),
                    ({"model": "m"}, "no 'embeddings' list"),
                    ({"model": "m", "embeddings": [[1.0, True], [1.0]]}, "non-numeric")]),
}
