"""Mistral embeddings (``mistral-embed``) via the ``mistralai`` SDK. Vectors are stored as returned."""

from __future__ import annotations

from typing import Any

from .remote import (
    RemoteEmbedder,
    import_sdk,
    shared_ssl_context,
    strip_model_prefix,
)
from .responses import parse_embedding_data

#: The SDK appends ``/v1/embeddings`` to its server URL.
DEFAULT_SERVER_URL = "https://api.mistral.ai"
DEFAULT_MODEL = "mistral-embed"
ENV_KEYS = ("MISTRAL_API_KEY",)


def normalize_mistral_model(model: str) -> str:
    """Strip a ``mistral/`` prefix; empty → ``mistral-embed``."""
    return strip_model_prefix(model, "mistral/", DEFAULT_MODEL)


def server_url_of(base_url: str | None) -> str:
    """The SDK's server URL: OpenClaw-style base URLs end in ``/v1``, which the SDK adds itself."""
    url = (base_url or DEFAULT_SERVER_URL).rstrip("/")
    return url.removesuffix("/v1")


class MistralEmbedder(RemoteEmbedder):
    """Embeddings from Mistral's ``/v1/embeddings``."""

    provider = "mistral"
    normalize = False
    client_library = ("mistralai.client", "mistral")

    def _normalize_model(self, model: str) -> str:
        return normalize_mistral_model(model)

    def _resolve_base_url(self, base_url: str | None) -> str:
        return server_url_of(base_url)

    def _open_clients(self) -> None:
        utils = import_sdk("mistralai.client.utils", "mistral", "mistral")
        # Our RetryPolicy governs retries: the SDK's own are off.
        self._no_retries = utils.RetryConfig("none", utils.BackoffStrategy(1, 1, 1.0, 1), False)
        self._http = import_sdk("mistralai.client.sdk", "mistral", "mistral").httpx  # the HTTP library the SDK uses
        self._client = self._new_client()

    def _new_client(self) -> Any:
        http = self._http
        return self._sdk.Mistral(
            api_key=self._api_key,
            server_url=self.base_url,
            retry_config=self._no_retries,
            timeout_ms=int(self.timeout * 1000),
            client=http.Client(follow_redirects=True, verify=shared_ssl_context()),
            async_client=http.AsyncClient(follow_redirects=True, verify=shared_ssl_context()),
        )

    def _kwargs(self, timeout: float) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"model": self.model, "timeout_ms": max(1, int(timeout * 1000))}
        if self.headers:
            kwargs["http_headers"] = dict(self.headers)
        if self.dimensions:
            kwargs["output_dimension"] = self.dimensions
        return kwargs

    def _parse(self, response: Any, expected: int) -> list[list[float]]:
        return parse_embedding_data(response, expected, "mistral")

    def _request(self, texts: list[str], query: bool) -> list[list[float]]:
        response = self._client.embeddings.create(inputs=texts, **self._kwargs(self._timeout_for(query)))
        return self._parse(response, len(texts))

    async def _arequest(self, texts: list[str], query: bool) -> list[list[float]]:
        client = self._async_client(self._new_client)
        response = await client.embeddings.create_async(inputs=texts, **self._kwargs(self._timeout_for(query)))
        return self._parse(response, len(texts))

    def close(self) -> None:
        self._client.sdk_configuration.client.close()
