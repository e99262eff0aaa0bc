"""The shared retry policy: what is retried, how long it waits, and what becomes a quota error."""

from __future__ import annotations

import asyncio

import pytest

from clawmem_core.embeddings.retry import (
    MalformedResponseError,
    ProviderHTTPError,
    RetryPolicy,
    is_retryable,
    redact,
)
from clawmem_core.errors import EmbeddingError, EmbeddingQuotaError


def failing(messages: list[Exception], result: str = "ok"):  # type: ignore[no-untyped-def]
    calls = {"n": 0}

    def fn() -> str:
        calls["n"] += 1
        if messages:
            raise messages.pop(0)
        return result

    return fn, calls


def test_delays_double_with_jitter_and_cap() -> None:
    policy = RetryPolicy(max_retries=6, rand=lambda: 1.0)
    assert [policy.delay(i) for i in range(6)] == [0.6, 1.2, 2.4, 4.8, 8.0, 8.0]
    assert RetryPolicy(rand=lambda: 0.0).delay(0) == 0.5


def test_tokens_per_day_is_retried() -> None:
    slept: list[float] = []
    fn, calls = failing([RuntimeError("Too many tokens per day")])
    assert RetryPolicy(sleep=slept.append, rand=lambda: 0.0).call(fn, provider="p") == "ok"
    assert calls["n"] == 2 and slept == [0.5]


@pytest.mark.parametrize("message, retryable", [
    ("rate_limit_exceeded", True), ("Too Many Requests", True), ("Resource has been exhausted (e.g. check quota)", True),
    ("cloudflare 520", True), ("HTTP 503", True), ("invalid input", False),
    ("value 0.512 out of range", False), ("429 insufficient_quota", False),
])
def test_message_classification(message: str, retryable: bool) -> None:
    assert is_retryable(RuntimeError(message)) is retryable


def test_status_codes_decide_when_present() -> None:
    assert is_retryable(ProviderHTTPError("429 slow down", 429))
    assert is_retryable(ProviderHTTPError("502 bad gateway", 502))
    assert not is_retryable(ProviderHTTPError("400 bad", 400))
    assert not is_retryable(MalformedResponseError("bad body 503"))


def test_quota_errors_are_final_and_typed() -> None:
    fn, calls = failing([RuntimeError("Error code: 429 - insufficient_quota: You exceeded your current quota")])
    with pytest.raises(EmbeddingQuotaError):
        RetryPolicy(sleep=lambda s: None).call(fn, provider="openai")
    assert calls["n"] == 1


def test_gives_up_after_three_retries_with_secret_redacted() -> None:
    slept: list[float] = []
    errors: list[Exception] = [RuntimeError("500 server error for key sk-abc-123456") for _ in range(5)]
    fn, calls = failing(errors)
    with pytest.raises(EmbeddingError) as info:
        RetryPolicy(sleep=slept.append, rand=lambda: 0.0).call(fn, provider="openai", secrets=["sk-abc-123456"])
    assert calls["n"] == 4 and slept == [0.5, 1.0, 2.0]
    assert "sk-abc-123456" not in str(info.value) and "***" in str(info.value)
    assert str(info.value).startswith("openai embeddings failed: ")
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_async_policy_uses_async_sleep() -> None:
    slept: list[float] = []

    async def asleep(seconds: float) -> None:
        slept.append(seconds)

    errors: list[Exception] = [RuntimeError("429"), RuntimeError("502")]

    async def fn() -> str:
        if errors:
            raise errors.pop(0)
        return "done"

    policy = RetryPolicy(async_sleep=asleep, rand=lambda: 0.0, sleep=lambda s: pytest.fail("sync sleep used"))
    assert asyncio.run(policy.acall(fn, provider="p")) == "done"
    assert slept == [0.5, 1.0]


def test_redact_ignores_short_or_empty_secrets() -> None:
    assert redact("a key abcd here", ["abcd", None, "", "ab"]) == "a key *** here"
