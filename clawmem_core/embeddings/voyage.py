"""Voyage embeddings (``voyage-4-large``) via the ``voyageai`` SDK, with ``input_type`` document vs query.

Vectors are stored as returned. The Voyage SDK sends only its own ``Authorization`` and
``Content-Type`` headers, so ``remote.headers`` reach Voyage only on batch API calls (made with
``httpx``; the SDK has no batch API). Batch jobs use Voyage's files + ``/batches`` protocol with a
``12h`` completion window.
"""

from __future__ import annotations

import json
import logging
from contextlib import contextmanager
from typing import Any, Iterator, Mapping, Sequence

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
    import_httpx,
    shared_ssl_context,
    strip_model_prefix,
)
from .responses import as_vector, expect_list, http_error, response_json
from .retry import MalformedResponseError, RetryPolicy

log = logging.getLogger("clawmem.embeddings")

DEFAULT_BASE_URL = "https://api.voyageai.com/v1"
DEFAULT_MODEL = "voyage-4-large"
ENV_KEYS = ("VOYAGE_API_KEY",)


def normalize_voyage_model(model: str) -> str:
    """Strip a ``voyage/`` prefix; empty → ``voyage-4-large``."""
    return strip_model_prefix(model, "voyage/", DEFAULT_MODEL)


@contextmanager
def _sdk_response_errors() -> Iterator[None]:
    """The SDK fails to read a malformed body with these errors: report them as malformed responses."""
    try:
        yield
    except (KeyError, AttributeError, TypeError, ValueError) as exc:
        raise MalformedResponseError(f"voyage embeddings: malformed response: {type(exc).__name__}: {exc}") from None


class VoyageEmbedder(RemoteEmbedder):
    """Embeddings from Voyage's ``/v1/embeddings`` (documents as ``document``, queries as ``query``)."""

    provider = "voyage"
    normalize = False
    client_library = ("voyageai", "voyage")
    default_base_url = DEFAULT_BASE_URL

    def _normalize_model(self, model: str) -> str:
        return normalize_voyage_model(model)

    def _open_clients(self) -> None:
        sdk, api_key = self._sdk, self._api_key
        if self.headers:
            log.warning("voyage: remote.headers are sent on batch API calls only (the voyageai SDK drops them)")
        # Our RetryPolicy governs retries: max_retries=0 makes one attempt.
        self._docs = sdk.Client(api_key=api_key, max_retries=0, timeout=self.timeout, base_url=self.base_url)
        self._queries = sdk.Client(api_key=api_key, max_retries=0, timeout=self.query_timeout, base_url=self.base_url)

    def _parse(self, result: Any, expected: int) -> list[list[float]]:
        vectors = expect_list(getattr(result, "embeddings", None), expected, "voyage", "embeddings")
        return [as_vector(v, "voyage", f"data[{i}].embedding") for i, v in enumerate(vectors)]

    def _embed_params(self, query: bool) -> dict[str, Any]:
        return {"model": self.model, "input_type": "query" if query else "document",
                "output_dimension": self.dimensions}

    def _request(self, texts: list[str], query: bool) -> list[list[float]]:
        client = self._queries if query else self._docs
        with _sdk_response_errors():
            result = client.embed(texts, **self._embed_params(query))
        return self._parse(result, len(texts))

    async def _arequest(self, texts: list[str], query: bool) -> list[list[float]]:
        client = self._sdk.AsyncClient(api_key=self._api_key, max_retries=0, timeout=self._timeout_for(query),
                                       base_url=self.base_url)
        with _sdk_response_errors():
            result = await client.embed(texts, **self._embed_params(query))
        return self._parse(result, len(texts))

    def _batch_backend(self) -> "VoyageBatchBackend":
        """Document batches go through Voyage's batch API."""
        return VoyageBatchBackend(self)


class VoyageBatchBackend(ProviderBatchBackend):
    """Voyage's files + ``/batches`` protocol over ``httpx``."""

    provider = "voyage"
    embedder: VoyageEmbedder
    endpoint = "/v1/embeddings"
    completion_window = "12h"

    def __init__(self, embedder: VoyageEmbedder, retry: RetryPolicy | None = None) -> None:
        super().__init__(embedder, retry)
        self._httpx = import_httpx("voyage", "voyage")

    def _send(self, method: str, path: str, **kwargs: Any) -> Any:
        """One HTTP call (no retry)."""
        emb = self.embedder
        headers = {**emb.headers, "Authorization": f"Bearer {emb._api_key}"}
        with self._httpx.Client(timeout=emb.timeout, verify=shared_ssl_context()) as client:
            return client.request(method, f"{emb.base_url}{path}", headers=headers, **kwargs)

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self._call(lambda: response_json(self._send(method, path, **kwargs), "voyage"))

    def _text(self, path: str) -> str:
        def once() -> str:
            response = self._send("GET", path)
            if response.status_code >= 400:
                raise http_error("voyage", response.status_code, response.text)
            return str(response.text)

        return self._call(once)

    def submit(self, texts: Sequence[str], custom_ids: Sequence[str]) -> BatchJob:
        lines = [json.dumps({"custom_id": cid, "body": {"input": [text]}}) for cid, text in zip(custom_ids, texts)]
        payload = ("\n".join(lines) + "\n").encode("utf-8")
        uploaded = self._json("POST", "/files", data={"purpose": "batch"},
                              files={"file": ("memory-embeddings.jsonl", payload, "application/jsonl")})
        file_id = uploaded.get("id") if isinstance(uploaded, dict) else None
        if not file_id:
            raise BatchError("voyage embedding batch file upload failed: missing file id")
        params: dict[str, Any] = {"model": self.embedder.model, "input_type": "document"}
        if self.embedder.dimensions:
            params["output_dimension"] = self.embedder.dimensions
        created = self._json("POST", "/batches", json={
            "input_file_id": file_id,
            "endpoint": self.endpoint,
            "completion_window": self.completion_window,
            "request_params": params,
            "metadata": {"source": "clawmem-memory"},
        })
        return self._job(created)

    def refresh(self, job: BatchJob) -> BatchJob:
        return self._job(self._json("GET", f"/batches/{job.id}"))

    def results(self, job: BatchJob) -> Mapping[str, Any]:
        output = self._output_of(job)
        return openai_style_results(parse_jsonl(self._text(f"/files/{output}/content"), "voyage"))

    def _job(self, data: Any) -> BatchJob:
        if not isinstance(data, dict):
            raise BatchError("voyage embedding batch: malformed batch object")
        status = str(data.get("status") or "")
        return BatchJob(
            id=str(data.get("id") or ""),
            state=batch_state(status),
            status=status,
            output=data.get("output_file_id"),
            error=str(data.get("error_file_id")) if data.get("error_file_id") and status != "completed" else None,
            raw=data,
        )
