"""Gemini embeddings (``gemini-embedding-001``) over the Generative Language REST API with ``httpx``.

``httpx`` rather than the ``google-genai`` SDK: the REST surface needed here is three small JSON
calls (``embedContent``, ``batchEmbedContents``, ``asyncBatchEmbedContent``), which httpx speaks
without the SDK's large dependency tree, and it matches OpenClaw's wire behaviour exactly
(``x-goog-api-key`` header, task types, ``outputDimensionality``). Vectors are L2-normalised.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Mapping, Sequence

from ..errors import ConfigError
from .batch_api import (
    BatchError,
    BatchJob,
    BatchUnavailableError,
    ProviderBatchBackend,
    batch_state,
    parse_jsonl,
)
from .remote import (
    DOCUMENT_TIMEOUT,
    QUERY_TIMEOUT,
    Exchange,
    HttpxEmbedder,
    strip_model_prefix,
)
from .responses import as_vector, expect_list, http_error, response_json
from .retry import MalformedResponseError, RetryPolicy

DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com/v1beta"
DEFAULT_MODEL = "gemini-embedding-001"
ENV_KEYS = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
#: ``batchEmbedContents`` accepts at most 100 requests per call.
MAX_SYNC_BATCH = 100
#: Dimensions Gemini embedding-2 models accept (3072 is the default).
EMBEDDING_2_DIMS = (768, 1536, 3072)


def normalize_gemini_model(model: str) -> str:
    """Strip ``models/``, ``gemini/`` and ``google/`` prefixes; empty → ``gemini-embedding-001``."""
    return strip_model_prefix(model, ("models/", "gemini/", "google/"), DEFAULT_MODEL, repeat=True)


def is_embedding_2(model: str) -> bool:
    return "embedding-2" in model


def resolve_output_dimensionality(model: str, requested: int | None) -> int | None:
    """OpenClaw's rule: embedding-2 models always send it (default 3072; only 768, 1536, 3072).

    Other models send it only when it is set explicitly (gemini-embedding-001 accepts 128-3072);
    OpenClaw ignores it there, clawmem honours an explicit setting.
    """
    if is_embedding_2(model):
        dims = 3072 if requested is None else int(requested)
        if dims not in EMBEDDING_2_DIMS:
            raise ConfigError(
                f"output_dimensionality for {model} must be one of 768, 1536 or 3072; got {requested!r}"
            )
        return dims
    if requested is None:
        return None
    dims = int(requested)
    if not 1 <= dims <= 3072:
        raise ConfigError(f"output_dimensionality must be between 1 and 3072; got {requested!r}")
    return dims


class GeminiEmbedder(HttpxEmbedder):
    """Embeddings from Gemini: documents as ``RETRIEVAL_DOCUMENT``, queries as ``RETRIEVAL_QUERY``."""

    provider = "gemini"
    normalize = True
    default_base_url = DEFAULT_BASE_URL

    def __init__(
        self,
        *,
        api_key: str,
        model: str = DEFAULT_MODEL,
        base_url: str | None = None,
        headers: Mapping[str, str] | None = None,
        output_dimensionality: int | None = None,
        timeout: float = DOCUMENT_TIMEOUT,
        query_timeout: float = QUERY_TIMEOUT,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.output_dimensionality = output_dimensionality
        super().__init__(model=model, api_key=api_key, base_url=base_url, headers=headers, timeout=timeout,
                         query_timeout=query_timeout, retry=retry)

    def _normalize_model(self, model: str) -> str:
        return normalize_gemini_model(model)

    def _check_options(self) -> None:
        self.output_dimensionality = resolve_output_dimensionality(self.model, self.output_dimensionality)
        self.model_path = f"models/{self.model}"

    def _key_settings(self) -> dict[str, Any]:
        settings = super()._key_settings()
        settings["outputDimensionality"] = self.output_dimensionality
        return settings

    def request_headers(self) -> dict[str, str]:
        """The key header plus ``remote.headers`` (which win)."""
        return {"x-goog-api-key": self._api_key or "", "Content-Type": "application/json", **self.headers}

    def _request_body(self, text: str, task_type: str, with_model: bool = False) -> dict[str, Any]:
        body: dict[str, Any] = {"content": {"parts": [{"text": text}]}, "taskType": task_type}
        if with_model:
            body = {"model": self.model_path, **body}
        if self.output_dimensionality is not None:
            body["outputDimensionality"] = self.output_dimensionality
        return body

    def _parse_one(self, data: Any) -> list[float]:
        embedding = data.get("embedding") if isinstance(data, dict) else None
        if not isinstance(embedding, dict):
            raise MalformedResponseError("gemini embeddings: malformed response: no 'embedding' object")
        return as_vector(embedding.get("values"), "gemini", "embedding.values")

    def _parse_many(self, data: Any, expected: int) -> list[list[float]]:
        items = expect_list(data.get("embeddings") if isinstance(data, dict) else None, expected, "gemini",
                            "'embeddings' list")
        return [as_vector(e.get("values") if isinstance(e, dict) else None, "gemini", f"embeddings[{i}].values")
                for i, e in enumerate(items)]

    def _exchange(self, texts: list[str], query: bool) -> Exchange:
        if query:
            url = f"{self.base_url}/{self.model_path}:embedContent"
            response = yield url, self._request_body(texts[0], "RETRIEVAL_QUERY"), self.query_timeout
            return [self._parse_one(response_json(response, "gemini"))]
        url = f"{self.base_url}/{self.model_path}:batchEmbedContents"
        out: list[list[float]] = []
        for i in range(0, len(texts), MAX_SYNC_BATCH):
            group = texts[i:i + MAX_SYNC_BATCH]
            body = {"requests": [self._request_body(t, "RETRIEVAL_DOCUMENT", True) for t in group]}
            response = yield url, body, self.timeout
            out.extend(self._parse_many(response_json(response, "gemini"), len(group)))
        return out

    def _batch_backend(self) -> "GeminiBatchBackend":
        """Document batches go through ``asyncBatchEmbedContent``."""
        return GeminiBatchBackend(self)


def _dig(data: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


class GeminiBatchBackend(ProviderBatchBackend):
    """Gemini's async batch: upload a JSONL file, ``:asyncBatchEmbedContent``, poll the batch, download."""

    provider = "gemini"
    embedder: GeminiEmbedder

    def _urls(self) -> tuple[str, str]:
        """(upload base, download base): ``…/v1beta`` becomes ``…/upload/v1beta`` / ``…/download/v1beta``."""
        base = self.embedder.base_url
        if base.endswith("/v1beta"):
            root = base[: -len("/v1beta")]
            return f"{root}/upload/v1beta", f"{root}/download/v1beta"
        return f"{base}/upload", base

    def submit(self, texts: Sequence[str], custom_ids: Sequence[str]) -> BatchJob:
        emb = self.embedder
        lines = []
        for cid, text in zip(custom_ids, texts):
            request = emb._request_body(text, "RETRIEVAL_DOCUMENT")
            lines.append(json.dumps({"key": cid, "request": request}))
        jsonl = "\n".join(lines) + "\n"
        display = f"clawmem-memory-embeddings-{uuid.uuid4().hex[:12]}"
        boundary = f"clawmem-{uuid.uuid4().hex}"
        meta = json.dumps({"file": {"displayName": display, "mimeType": "application/jsonl"}})
        body = (
            f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{meta}\r\n"
            f"--{boundary}\r\nContent-Type: application/jsonl; charset=UTF-8\r\n\r\n{jsonl}\r\n"
            f"--{boundary}--\r\n"
        ).encode("utf-8")
        headers = {**emb.request_headers(), "Content-Type": f"multipart/related; boundary={boundary}",
                   "X-Goog-Upload-Protocol": "multipart"}
        upload_base, _ = self._urls()
        uploaded = self._call(lambda: response_json(
            emb._client.post(f"{upload_base}/files", params={"uploadType": "multipart"}, content=body,
                             headers=headers), "gemini"))
        file_id = _dig(uploaded, "file", "name") or _dig(uploaded, "name")
        if not file_id:
            raise BatchError("gemini embedding batch file upload failed: missing file id")

        def create() -> Any:
            response = emb._client.post(
                f"{emb.base_url}/{emb.model_path}:asyncBatchEmbedContent",
                json={"batch": {"displayName": display, "inputConfig": {"fileName": file_id}}},
                headers=emb.request_headers(),
            )
            if response.status_code == 404:
                raise BatchUnavailableError(
                    "gemini embedding batch create failed: 404 (asyncBatchEmbedContent not available for this "
                    "model/base URL); disable remote.batch.enabled or switch providers"
                )
            return response_json(response, "gemini")

        return self._job(self._call(create))

    def refresh(self, job: BatchJob) -> BatchJob:
        emb = self.embedder
        name = job.id if job.id.startswith("batches/") else f"batches/{job.id}"
        return self._job(self._call(lambda: response_json(
            emb._client.get(f"{emb.base_url}/{name}", headers=emb.request_headers()), "gemini")))

    def results(self, job: BatchJob) -> Mapping[str, Any]:
        output = self._output_of(job)
        emb = self.embedder
        name = output if output.startswith("files/") else f"files/{output}"
        _, download_base = self._urls()

        def download() -> str:
            response = emb._client.get(f"{download_base}/{name}:download", params={"alt": "media"},
                                       headers=emb.request_headers())
            if response.status_code >= 400:
                raise http_error("gemini", response.status_code, response.text)
            return str(response.text)

        out: dict[str, Any] = {}
        for line in parse_jsonl(self._call(download), "gemini"):
            key = line.get("key") or line.get("custom_id") or line.get("request_id")
            if not isinstance(key, str):
                continue
            error = _dig(line, "error", "message") or _dig(line, "response", "error", "message")
            if error:
                out[key] = str(error)
                continue
            values = _dig(line, "response", "embedding", "values") or _dig(line, "embedding", "values")
            out[key] = values if values is not None else []
        return out

    def _job(self, data: Any) -> BatchJob:
        """Read a batch or an Operation wrapping one (``metadata`` holds the batch)."""
        if not isinstance(data, dict):
            raise BatchError("gemini embedding batch: malformed batch object")
        meta = data.get("metadata")
        batch: dict[str, Any] = meta if isinstance(meta, dict) else data
        status = str(batch.get("state") or data.get("state") or "")
        if not status and data.get("done"):
            status = "FAILED" if data.get("error") else "SUCCEEDED"
        output = (
            _dig(batch, "output", "responsesFile")
            or _dig(data, "response", "output", "responsesFile")
            or _dig(data, "outputConfig", "file")
            or _dig(data, "outputConfig", "fileId")
            or _dig(data, "dest", "fileName")
        )
        return BatchJob(
            id=str(data.get("name") or batch.get("name") or ""),
            state=batch_state(status),
            status=status,
            output=output,
            error=_dig(data, "error", "message") or _dig(batch, "error", "message"),
            raw=data,
        )
