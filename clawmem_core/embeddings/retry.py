"""Retry policy shared by the remote embedding providers.

OpenClaw retries an embedding call up to 3 times (4 attempts) when the error looks like a rate
limit, a 429 or a 5xx, waiting 0.5 s, then 1 s, 2 s... (each delay times ``1 + rand * 0.2``,
capped at 8 s). Quota errors (``insufficient_quota``) are final: retrying cannot help, so they
become :class:`~clawmem_core.errors.EmbeddingQuotaError` at once. The sleep functions are
injectable so tests run in milliseconds.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterable, TypeVar

from ..errors import EmbeddingError, EmbeddingQuotaError
from ..masking import mask_and_clip, mask_known

T = TypeVar("T")

#: OpenClaw's pattern of retryable error messages (a status number must stand alone: not ``0.512``).
RETRYABLE_MESSAGE = re.compile(
    r"(rate[_ ]limit|too many requests|(?<![\d.])(?:429|5\d\d)(?!\d|\.\d)|resource has been exhausted|cloudflare"
    r"|tokens per day)",
    re.IGNORECASE,
)
#: Messages meaning the account is out of quota or credit: never retried.
QUOTA_MESSAGE = re.compile(
    r"(insufficient[_ ]quota|quota[_ ]exhausted|quota (?:has been |is )?exhausted"
    r"|billing[_ ]hard[_ ]limit|credit balance is too low)",
    re.IGNORECASE,
)


class MalformedResponseError(EmbeddingError):
    """The provider answered 2xx with something that is not the expected embeddings."""


class ProviderHTTPError(EmbeddingError):
    """A non-2xx answer from a provider called over plain HTTP (carries the status code)."""

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


#: Longest provider error message shown (cut after masking, never before).
MESSAGE_LIMIT = 1000


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """Replace every occurrence of each secret (4+ characters) in ``text`` with ``***``, and every run of 8 or
    more of its first characters (a key cut short)."""
    return mask_known(text, secrets)


def status_of(exc: BaseException) -> int | None:
    """The HTTP status carried by an SDK or HTTP exception, when there is one."""
    for attr in ("status_code", "http_status", "status"):
        value = getattr(exc, attr, None)
        if isinstance(value, int) and not isinstance(value, bool) and 100 <= value < 600:
            return value
    response = getattr(exc, "response", None)
    value = getattr(response, "status_code", None)
    if isinstance(value, int) and 100 <= value < 600:
        return value
    return None


def _is_timeout(exc: BaseException) -> bool:
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(names & {"TimeoutError", "Timeout", "TimeoutException", "APITimeoutError",
                         "ReadTimeout", "ConnectTimeout", "ServerTimeoutError"})


def describe(exc: BaseException) -> str:
    """A one-line description of a provider error: status code (if any) and message."""
    status = status_of(exc)
    message = " ".join(str(exc).split()) or type(exc).__name__
    if _is_timeout(exc) and "timed out" not in message.lower() and "timeout" not in message.lower():
        message = f"request timed out ({message})"
    extras = [str(v) for v in (getattr(exc, "code", None), getattr(exc, "type", None))
              if isinstance(v, str) and v and v not in message]
    if extras:
        message = f"{message} ({', '.join(dict.fromkeys(extras))})"
    if status is not None and str(status) not in message[:24]:
        message = f"{status} {message}"
    return message


def is_quota_error(message: str) -> bool:
    return bool(QUOTA_MESSAGE.search(message))


def is_retryable(exc: BaseException, message: str | None = None) -> bool:
    """True for rate limits, 429 and 5xx (by status code, else by OpenClaw's message pattern)."""
    if isinstance(exc, MalformedResponseError):
        return False
    message = describe(exc) if message is None else message
    if is_quota_error(message):
        return False
    status = status_of(exc)
    if status is not None and (status == 429 or 500 <= status < 600):
        return True
    return bool(RETRYABLE_MESSAGE.search(message))


def to_embedding_error(exc: BaseException, provider: str, secrets: Iterable[str | None] = ()) -> EmbeddingError:
    """Wrap any provider failure into :class:`EmbeddingError` (quota → :class:`EmbeddingQuotaError`),
    with the API key and anything shaped like a secret masked, then cut to :data:`MESSAGE_LIMIT`."""
    secrets = tuple(secrets)
    if isinstance(exc, EmbeddingError) and not isinstance(exc, ProviderHTTPError):
        text = mask_and_clip(str(exc), MESSAGE_LIMIT, secrets)
        if text == str(exc):
            return exc
        try:
            return type(exc)(text)
        except TypeError:  # a subclass with another constructor
            return EmbeddingError(text)
    message = mask_and_clip(describe(exc), MESSAGE_LIMIT, secrets)
    prefix = f"{provider} embeddings failed: "
    if message.startswith(f"{provider} embeddings"):
        prefix = ""
    if is_quota_error(message):
        return EmbeddingQuotaError(prefix + message)
    return EmbeddingError(prefix + message)


@dataclass
class RetryPolicy:
    """How failed provider calls are retried. ``sleep``/``async_sleep``/``rand`` are injectable."""

    max_retries: int = 3
    base_delay: float = 0.5
    max_delay: float = 8.0
    jitter: float = 0.2
    sleep: Callable[[float], Any] = field(default=time.sleep, repr=False)
    async_sleep: Callable[[float], Awaitable[Any]] = field(default=asyncio.sleep, repr=False)
    rand: Callable[[], float] = field(default=random.random, repr=False)

    def delay(self, retry_index: int) -> float:
        """Seconds to wait before retry number ``retry_index`` (0-based)."""
        base = self.base_delay * (2 ** retry_index)
        return min(self.max_delay, base * (1 + self.rand() * self.jitter))

    def call(self, fn: Callable[[], T], *, provider: str, secrets: Iterable[str | None] = ()) -> T:
        """Run ``fn``, retrying retryable failures; raise :class:`EmbeddingError` otherwise."""
        secrets = tuple(secrets)
        attempt = 0
        while True:
            try:
                return fn()
            except Exception as exc:  # noqa: BLE001 - every provider failure is classified here
                error = to_embedding_error(exc, provider, secrets)
                if attempt >= self.max_retries or not is_retryable(exc, str(error)):
                    raise error from None
                self.sleep(self.delay(attempt))
                attempt += 1

    async def acall(self, fn: Callable[[], Awaitable[T]], *, provider: str,
                    secrets: Iterable[str | None] = ()) -> T:
        """Async twin of :meth:`call`."""
        secrets = tuple(secrets)
        attempt = 0
        while True:
            try:
                return await fn()
            except Exception as exc:  # noqa: BLE001
                error = to_embedding_error(exc, provider, secrets)
                if attempt >= self.max_retries or not is_retryable(exc, str(error)):
                    raise error from None
                await self.async_sleep(self.delay(attempt))
                attempt += 1


#: OpenClaw's ``postJsonWithRetry`` for batch API calls: 3 attempts, 0.3 s to 2 s.
def batch_call_policy(sleep: Callable[[float], Any] = time.sleep) -> RetryPolicy:
    return RetryPolicy(max_retries=2, base_delay=0.3, max_delay=2.0, sleep=sleep)
