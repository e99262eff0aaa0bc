"""Fixtures for the provider tests: a local wire-protocol server and instant retry sleeps."""

from __future__ import annotations

from typing import Iterator

import pytest

from clawmem_core.embeddings.retry import RetryPolicy

from .wire import FakeServer, SleepRecorder


@pytest.fixture
def server() -> Iterator[FakeServer]:
    srv = FakeServer()
    yield srv
    srv.close()


@pytest.fixture
def sleeps() -> SleepRecorder:
    return SleepRecorder()


@pytest.fixture
def fast_retry(sleeps: SleepRecorder) -> RetryPolicy:
    return RetryPolicy(sleep=sleeps, async_sleep=sleeps.asleep, rand=lambda: 0.0)
