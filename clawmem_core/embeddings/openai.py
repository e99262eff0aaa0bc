"""OpenAI embeddings (``text-embedding-3-small``) and any OpenAI-compatible server, via the ``openai`` SDK.

Vectors are stored as returned (not re-normalised), as OpenClaw does. With ``remote.batch.enabled``
documents go through the Batch API: a JSONL file of ``/v1/embeddings`` requests is uploaded,
a batch is created with ``completion_window="24h"``, polled, and its output file downloaded.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from .batch_api import (
    BatchError,
    BatchJob,
    ProviderBatchBackend,
    batch_state,
    openai_style_results,
    parse_jsonl,
)
from .remote import (
    RemoteEmbedder,
    shared_ssl_context,
    strip_model_prefix,
)
from .responses import parse_embedding_data

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "text-embedding-3-small"
ENV_KEYS = ("OPENAI_API_KEY",)


def normalize_openai_model(model: str) -> str:
    """Strip an ``openai/`` prefix; empty → the default model."""
    return strip_model_prefix(model, "openai/", DEFAULT_MODEL)


class OpenAIEmbedder(RemoteEmbedder):
    """Embeddings from OpenAI's ``/embeddings`` endpoint (or a compatible server at ``base_url``)."""

    provider = "openai"
    normalize = False
    client_library = ("openai", "openai")
    default_base_url = DEFAULT_BASE_URL

    def _normalize_model(self, model: str) -> str:
        return normalize_openai_model(model)

    def _open_clients(self) -> None:
        self._client = self._new_client()

    def _params(self) -> dict[str, Any]:
        params: dict[str, Any] = {"model": self.model, "encoding_format": "float"}
        if self.dimensions:
            params["dimensions"] = self.dimensions
        return params

    def _parse(self, response: Any, expected: int) -> list[list[float]]:
        return parse_embedding_data(response, expected, "openai")

    def _call_params(self, query: bool) -> dict[str, Any]:
        """``_params`` plus the query timeout (documents use the client's)."""
        return {**self._params(), "timeout": self.query_timeout} if query else self._params()

    def _request(self, texts: list[str], query: bool) -> list[list[float]]:
        response = self._client.embeddings.create(input=texts, **self._call_params(query))
        return self._parse(response, len(texts))

    def _new_client(self, asynchronous: bool = False) -> Any:
        """An SDK client on our TLS context. Our RetryPolicy governs retries: the SDK's own are off."""
        sdk = self._sdk
        if asynchronous:
            client, http = sdk.AsyncOpenAI, sdk.DefaultAsyncHttpxClient
        else:
            client, http = sdk.OpenAI, sdk.DefaultHttpxClient
        return client(
            api_key=self._api_key,
            base_url=self.base_url,
            default_headers=self.headers or None,
            max_retries=0,
            timeout=self.timeout,
            http_client=http(verify=shared_ssl_context(), timeout=self.timeout),
        )

    async def _arequest(self, texts: list[str], query: bool) -> list[list[float]]:
        client = self._async_client(lambda: self._new_client(asynchronous=True))
        response = await client.embeddings.create(input=texts, **self._call_params(query))
        return self._parse(response, len(texts))

    def _batch_backend(self) -> "OpenAIBatchBackend":
        """Document batches go through the OpenAI Batch API."""
        return OpenAIBatchBackend(self)

    def close(self) -> None:
        self._client.close()


class OpenAIBatchBackend(ProviderBatchBackend):
    """OpenAI's files + ``/batches`` protocol, spoken through the SDK."""

    provider = "openai"
    embedder: OpenAIEmbedder
    endpoint = "/v1/embeddings"
    completion_window = "24h"

    def submit(self, texts: Sequence[str], custom_ids: Sequence[str]) -> BatchJob:
        body = self.embedder._params()
        lines = [
            json.dumps({"custom_id": cid, "method": "POST", "url": self.endpoint, "body": {**body, "input": text}})
            for cid, text in zip(custom_ids, texts)
        ]
        payload = ("\n".join(lines) + "\n").encode("utf-8")
        client = self.embedder._client
        uploaded = self._call(lambda: client.files.create(
            file=("memory-embeddings.jsonl", payload, "application/jsonl"), purpose="batch"))
        file_id = getattr(uploaded, "id", None)
        if not file_id:
            raise BatchError("openai embedding batch file upload failed: missing file id")
        batch = self._call(lambda: client.batches.create(
            input_file_id=file_id,
            endpoint=self.endpoint,
            completion_window=self.completion_window,
            metadata={"source": "clawmem-memory"},
        ))
        return self._job(batch)

    def refresh(self, job: BatchJob) -> BatchJob:
        client = self.embedder._client
        return self._job(self._call(lambda: client.batches.retrieve(job.id)))

    def results(self, job: BatchJob) -> Mapping[str, Any]:
        output = self._output_of(job)
        client = self.embedder._client
        content = self._call(lambda: client.files.content(output))
        return openai_style_results(parse_jsonl(content.text, "openai"))

    def _job(self, batch: Any) -> BatchJob:
        status = str(getattr(batch, "status", "") or "")
        errors = getattr(batch, "errors", None)
        error_text = None
        data = getattr(errors, "data", None) if errors is not None else None
        if data:
            error_text = "; ".join(str(getattr(e, "message", e)) for e in data)
        return BatchJob(
            id=str(getattr(batch, "id", "") or ""),
            state=batch_state(status),
            status=status,
            output=getattr(batch, "output_file_id", None),
            error=error_text,
        )
