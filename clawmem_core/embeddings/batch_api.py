"""Provider batch APIs (OpenAI ``/batches``, Gemini async batch, Voyage batch) behind one runner.

A :class:`BatchRunner` takes a provider-specific :class:`BatchBackend` (submit a job, refresh its
state, read its results) and adds OpenClaw's policy: poll every ``poll_interval_ms`` up to
``timeout_minutes``; a timed-out job is retried once; any failure falls back to plain embedding
for that call and counts; a success resets the count; at 2 failures (or when the provider says
the batch endpoint does not exist) batching is off for the life of the embedder.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence

from ..errors import EmbeddingError
from .responses import as_vector
from .retry import RetryPolicy, batch_call_policy

log = logging.getLogger("clawmem.embeddings")

#: Requests per batch job (OpenAI, Gemini and Voyage all accept 50,000).
MAX_BATCH_REQUESTS = 50_000
#: Failures after which batching is disabled.
FAILURE_LIMIT = 2

PENDING, COMPLETED, FAILED = "pending", "completed", "failed"


class BatchError(EmbeddingError):
    """A provider batch job failed (create, state, or results)."""

    attempts: int = 1


class BatchTimeoutError(BatchError):
    """A batch job did not finish within ``timeout_minutes``."""


class BatchUnavailableError(BatchError):
    """The provider has no batch endpoint for this model/base URL: batching is disabled at once."""


@dataclass
class BatchJob:
    """A submitted job. ``state`` is ``pending``, ``completed`` or ``failed``; ``status`` is the
    provider's own word for it."""

    id: str
    state: str
    status: str = ""
    output: str | None = None
    error: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)


class BatchBackend(Protocol):
    """One provider's batch wire protocol (each HTTP call retried on 429/5xx by the backend)."""

    provider: str
    max_requests: int

    def submit(self, texts: Sequence[str], custom_ids: Sequence[str]) -> BatchJob:
        """Upload the inputs and create the job."""

    def refresh(self, job: BatchJob) -> BatchJob:
        """Fetch the job's current state."""

    def results(self, job: BatchJob) -> Mapping[str, Any]:
        """Download a completed job's output: custom id → vector (or an error message string)."""


def normalize_state(status: str, *, completed: Sequence[str], failed: Sequence[str]) -> str:
    s = (status or "").strip().lower()
    for prefix in ("batch_state_", "job_state_"):
        if s.startswith(prefix):
            s = s[len(prefix):]
    if s in completed:
        return COMPLETED
    if s in failed:
        return FAILED
    return PENDING


#: States shared by OpenAI-style APIs (OpenAI, Voyage) and Gemini.
COMPLETED_STATES = ("completed", "succeeded", "done")
FAILED_STATES = ("failed", "expired", "cancelled", "canceled", "cancelling")


def batch_state(status: str) -> str:
    """``pending``, ``completed`` or ``failed`` for a provider's batch status (shared state words)."""
    return normalize_state(status, completed=COMPLETED_STATES, failed=FAILED_STATES)


class ProviderBatchBackend:
    """What the providers' batch backends share: each HTTP call retried with the batch policy,
    and the embedder's API key kept out of errors."""

    provider: str
    max_requests = MAX_BATCH_REQUESTS

    def __init__(self, embedder: Any, retry: RetryPolicy | None = None) -> None:
        self.embedder = embedder
        self.retry = retry or batch_call_policy(embedder.retry.sleep)

    def redact(self, text: str) -> str:
        return str(self.embedder._redact(text))

    def _call(self, fn: Callable[[], Any]) -> Any:
        return self.retry.call(fn, provider=self.provider, secrets=[self.embedder._api_key])

    def _output_of(self, job: BatchJob) -> str:
        """The output file of a completed job."""
        if not job.output:
            raise BatchError(f"{self.provider} embedding batch {job.id} completed without output file")
        return job.output


class BatchRunner:
    """Runs document embeddings through a provider batch API, with OpenClaw's fallback policy.

    ``sleep`` and ``clock`` are injectable so tests poll in milliseconds. Thread-safe.
    """

    def __init__(
        self,
        backend: BatchBackend,
        *,
        enabled: bool = True,
        wait: bool = True,
        concurrency: int = 2,
        poll_interval_ms: float = 2000,
        timeout_minutes: float = 60,
        sleep: Callable[[float], Any] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backend = backend
        self.enabled = enabled
        self.wait = wait
        self.concurrency = max(1, int(concurrency))
        self.poll_interval = max(0.0, float(poll_interval_ms) / 1000.0)
        self.timeout = max(0.0, float(timeout_minutes) * 60.0)
        self.sleep = sleep
        self.clock = clock
        self.failures = 0
        self.last_error: str | None = None
        self.disabled_reason: str | None = None
        self.jobs_submitted = 0
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, backend: BatchBackend, config: Any, **kwargs: Any) -> "BatchRunner":
        """Build from a ``BatchConfig`` (``remote.batch``)."""
        return cls(
            backend,
            enabled=bool(config.enabled),
            wait=bool(config.wait),
            concurrency=config.concurrency,
            poll_interval_ms=config.poll_interval_ms,
            timeout_minutes=config.timeout_minutes,
            **kwargs,
        )

    @property
    def active(self) -> bool:
        """True while batching is enabled and has not been disabled by failures."""
        return self.enabled and self.disabled_reason is None

    # -- policy ----------------------------------------------------------------------------------

    def embed(self, texts: list[str], plain: Callable[[list[str]], list[list[float]]]) -> list[list[float]]:
        """Embed through the batch API; on failure, count it and embed with ``plain`` instead."""
        if not self.active:
            return plain(texts)
        try:
            vectors = self._run_with_timeout_retry(texts)
        except Exception as exc:  # noqa: BLE001 - any batch failure falls back to plain embedding
            if not isinstance(exc, EmbeddingError):
                redact = getattr(self.backend, "redact", lambda s: s)
                exc = BatchError(redact(f"{self.backend.provider} embedding batch failed: {type(exc).__name__}: {exc}"))
            self._record_failure(exc)
            return plain(texts)
        with self._lock:
            self.failures = 0
        return vectors

    def _record_failure(self, exc: EmbeddingError) -> None:
        provider = self.backend.provider
        with self._lock:
            if isinstance(exc, BatchUnavailableError):
                self.failures += FAILURE_LIMIT
            else:
                self.failures += max(1, getattr(exc, "attempts", 1))
            self.last_error = str(exc)
            if self.failures >= FAILURE_LIMIT:
                self.disabled_reason = str(exc)
            count, disabled = self.failures, self.disabled_reason is not None
        log.warning(
            "%s embedding batch failed (%d/%d); %s; falling back to plain embedding: %s",
            provider, count, FAILURE_LIMIT, "disabling batch" if disabled else "keeping batch enabled", exc,
        )

    def _run_with_timeout_retry(self, texts: list[str]) -> list[list[float]]:
        try:
            return self.run(texts)
        except BatchTimeoutError as exc:
            log.warning("%s embedding batch timed out; retrying once: %s", self.backend.provider, exc)
            try:
                return self.run(texts)
            except EmbeddingError as retry_exc:
                retry_exc.attempts = 2  # type: ignore[attr-defined]
                raise

    # -- one run ---------------------------------------------------------------------------------

    def run(self, texts: list[str]) -> list[list[float]]:
        """Submit, wait for and collect batch jobs for ``texts`` (no fallback). Raises :class:`BatchError`."""
        size = max(1, int(getattr(self.backend, "max_requests", MAX_BATCH_REQUESTS)))
        groups = [texts[i:i + size] for i in range(0, len(texts), size)]
        if len(groups) == 1 or self.concurrency == 1:
            parts = [self._run_group(g) for g in groups]
        else:
            with ThreadPoolExecutor(max_workers=min(self.concurrency, len(groups))) as pool:
                parts = list(pool.map(self._run_group, groups))
        return [v for part in parts for v in part]

    def _run_group(self, texts: list[str]) -> list[list[float]]:
        provider = self.backend.provider
        ids = [f"clawmem-{i}" for i in range(len(texts))]
        job = self.backend.submit(texts, ids)
        with self._lock:
            self.jobs_submitted += 1
        if not job.id:
            raise BatchError(f"{provider} embedding batch create failed: missing batch id")
        if job.state == PENDING and not self.wait:
            raise BatchError(
                f"{provider} embedding batch {job.id} submitted; enable remote.batch.wait to await completion"
            )
        deadline = self.clock() + self.timeout
        while job.state == PENDING:
            if self.clock() >= deadline:
                raise BatchTimeoutError(
                    f"{provider} embedding batch {job.id} timed out after {self.timeout:g}s (still {job.status})"
                )
            self.sleep(self.poll_interval)
            job = self.backend.refresh(job)
        if job.state == FAILED:
            detail = f": {job.error}" if job.error else ""
            raise BatchError(f"{provider} embedding batch {job.id} {job.status or 'failed'}{detail}")
        results = self.backend.results(job)
        vectors: list[list[float]] = []
        errors: list[str] = []
        missing = 0
        for cid in ids:
            value = results.get(cid)
            if value is None:
                missing += 1
            elif isinstance(value, str):
                errors.append(f"{cid}: {value}")
            else:
                try:
                    vectors.append(as_vector(value, provider, f"batch result {cid}"))
                except EmbeddingError as exc:
                    errors.append(str(exc))
        if errors:
            raise BatchError(f"{provider} embedding batch {job.id} failed: {'; '.join(errors[:5])}")
        if missing:
            raise BatchError(f"{provider} embedding batch {job.id} missing {missing} embedding responses")
        return vectors


def parse_jsonl(text: str, provider: str) -> list[dict[str, Any]]:
    """Parse a JSONL batch output file (blank lines skipped)."""
    import json

    out: list[dict[str, Any]] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError:
            raise BatchError(f"{provider} embedding batch output line {n} is not JSON") from None
        if isinstance(item, dict):
            out.append(item)
    return out


def openai_style_results(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """Map OpenAI/Voyage batch output lines (``{custom_id, response: {status_code, body}, error}``)
    to custom id → vector, or an error message."""
    out: dict[str, Any] = {}
    for line in lines:
        cid = line.get("custom_id")
        if not isinstance(cid, str):
            continue
        error = line.get("error")
        raw_response = line.get("response")
        response: dict[str, Any] = raw_response if isinstance(raw_response, dict) else {}
        raw_body = response.get("body")
        body: dict[str, Any] = raw_body if isinstance(raw_body, dict) else {}
        status = response.get("status_code")
        if isinstance(error, dict) and error.get("message"):
            out[cid] = str(error["message"])
        elif isinstance(body.get("error"), dict) and body["error"].get("message"):
            out[cid] = str(body["error"]["message"])
        elif isinstance(status, int) and status >= 400:
            out[cid] = f"status {status}"
        else:
            data = body.get("data")
            first = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else {}
            out[cid] = first.get("embedding", []) if first else []
    return out
