"""Ollama embeddings (``nomic-embed-text``) over its HTTP API with ``httpx``. No API key needed.

Uses ``/api/embed`` (many inputs per call); a server too old for it (404 without a model error)
is switched to the legacy ``/api/embeddings`` (one ``prompt`` per call) for the embedder's life.
Vectors are L2-normalised, as OpenClaw does.
"""

from __future__ import annotations

from typing import Any, Mapping

from .remote import (
    DOCUMENT_TIMEOUT,
    QUERY_TIMEOUT,
    Exchange,
    HttpxEmbedder,
    strip_model_prefix,
)
from .responses import as_vector, expect_list, response_json
from .retry import RetryPolicy

DEFAULT_BASE_URL = "http://127.0.0.1:11434"
DEFAULT_MODEL = "nomic-embed-text"


def normalize_ollama_model(model: str) -> str:
    """Strip an ``ollama/`` prefix; empty → ``nomic-embed-text``."""
    return strip_model_prefix(model, "ollama/", DEFAULT_MODEL)


def ollama_base_url(base_url: str | None, environ: Mapping[str, str] | None = None) -> str:
    """``remote.base_url``, else ``OLLAMA_HOST``, else localhost:11434; a trailing ``/v1`` is dropped."""
    url = (base_url or (environ or {}).get("OLLAMA_HOST") or DEFAULT_BASE_URL).strip().rstrip("/")
    if "://" not in url:
        url = f"http://{url}"
    return url.removesuffix("/v1")


class OllamaEmbedder(HttpxEmbedder):
    """Embeddings from a local or remote Ollama server."""

    provider = "ollama"
    normalize = True

    def __init__(
        self,
        *,
        model: str = DEFAULT_MODEL,
        base_url: str | None = None,
        api_key: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = DOCUMENT_TIMEOUT,
        query_timeout: float = QUERY_TIMEOUT,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.legacy_endpoint = False
        super().__init__(model=model, api_key=api_key, base_url=base_url, headers=headers, timeout=timeout,
                         query_timeout=query_timeout, retry=retry)

    def _normalize_model(self, model: str) -> str:
        return normalize_ollama_model(model)

    def _resolve_base_url(self, base_url: str | None) -> str:
        return ollama_base_url(base_url)

    def _key_settings(self) -> dict[str, Any]:
        return {"provider": self.provider, "model": self.model}

    def request_headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return {**headers, **self.headers}

    def _use_legacy(self, response: Any) -> bool:
        """A 404 from ``/api/embed`` that is not "model not found" means an old server."""
        if response.status_code != 404 or "model" in response.text.lower():
            return False
        self.legacy_endpoint = True
        return True

    def _parse_embed(self, data: Any, expected: int) -> list[list[float]]:
        items = expect_list(data.get("embeddings") if isinstance(data, dict) else None, expected, "ollama",
                            "'embeddings' list")
        return [as_vector(v, "ollama", f"embeddings[{i}]") for i, v in enumerate(items)]

    def _parse_legacy(self, data: Any) -> list[float]:
        value = data.get("embedding") if isinstance(data, dict) else None
        return as_vector(value, "ollama", "embedding")

    def _exchange(self, texts: list[str], query: bool) -> Exchange:
        timeout = self._timeout_for(query)
        if not self.legacy_endpoint:
            response = yield f"{self.base_url}/api/embed", {"model": self.model, "input": texts}, timeout
            if not self._use_legacy(response):
                return self._parse_embed(response_json(response, "ollama"), len(texts))
        out: list[list[float]] = []
        for t in texts:
            response = yield f"{self.base_url}/api/embeddings", {"model": self.model, "prompt": t}, timeout
            out.append(self._parse_legacy(response_json(response, "ollama")))
        return out
