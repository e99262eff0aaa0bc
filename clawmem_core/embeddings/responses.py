"""Checks of a provider's response, shared by the remote providers and the batch API: vectors, counts,
OpenAI-style ``data`` lists and HTTP errors, each failure a typed error naming the provider."""

from __future__ import annotations

import math
from typing import Any, Sequence

from .retry import MalformedResponseError, ProviderHTTPError


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def as_vector(value: Any, provider: str, where: str) -> list[float]:
    """Check that ``value`` is a non-empty list of numbers (non-finite values are zeroed later)."""
    if not isinstance(value, (list, tuple)) or not value:
        shown = "an empty list" if isinstance(value, (list, tuple)) else type(value).__name__
        raise MalformedResponseError(f"{provider} embeddings: malformed response: {where} is {shown}, not a vector")
    for v in value:
        if not is_number(v):
            raise MalformedResponseError(
                f"{provider} embeddings: malformed response: {where} contains a non-numeric value {v!r:.40}"
            )
    return [float(v) if math.isfinite(v) else 0.0 for v in value]


def check_count(vectors: Sequence[Any], expected: int, provider: str) -> None:
    if len(vectors) != expected:
        raise MalformedResponseError(
            f"{provider} embeddings: malformed response: expected {expected} embeddings, got {len(vectors)}"
        )


def field_of(data: Any, name: str) -> Any:
    """``data[name]`` of a JSON object or ``data.name`` of an SDK object; ``None`` when absent."""
    if isinstance(data, dict):
        return data.get(name)
    return getattr(data, name, None)


def expect_list(value: Any, expected: int, provider: str, what: str) -> list[Any]:
    """``value`` checked to be a list of ``expected`` items (``what`` names it in the error)."""
    if not isinstance(value, list):
        raise MalformedResponseError(f"{provider} embeddings: malformed response: no {what}")
    check_count(value, expected, provider)
    return value


def parse_embedding_data(response: Any, expected: int, provider: str) -> list[list[float]]:
    """The vectors of an OpenAI-style response (an SDK object or its JSON): a ``data`` list of
    ``{"index", "embedding"}`` items, put in ``index`` order."""
    data = expect_list(field_of(response, "data"), expected, provider, "'data' list")
    items = sorted(data, key=lambda d: field_of(d, "index") or 0)
    return [as_vector(field_of(d, "embedding"), provider, f"data[{i}].embedding") for i, d in enumerate(items)]


#: Bound on a provider's error body kept in memory (a cut key's 8+ character prefix is still masked).
_RAW_DETAIL_LIMIT = 20_000


def http_error(provider: str, status: int, body: str) -> ProviderHTTPError:
    """A :class:`ProviderHTTPError` with the provider's own error message when the body has one."""
    detail = body.strip()
    try:
        import json

        data = json.loads(body)
        err = data.get("error") if isinstance(data, dict) else None
        if isinstance(err, dict):
            parts = [str(err.get(k)) for k in ("status", "code", "type", "message") if err.get(k) not in (None, "")]
            detail = " ".join(dict.fromkeys(parts)) or detail
        elif isinstance(err, str):
            detail = err
        elif isinstance(data, dict) and isinstance(data.get("detail"), str):
            detail = data["detail"]
    except (ValueError, AttributeError):
        pass
    # Not cut to a display length here: the message is masked first, then cut (see ``to_embedding_error``).
    return ProviderHTTPError(f"{status} {' '.join(detail[:_RAW_DETAIL_LIMIT].split())}", status)


def response_json(response: Any, provider: str) -> Any:
    """The JSON body of an ``httpx`` response; a non-2xx status raises :class:`ProviderHTTPError`,
    a body that is not JSON raises :class:`MalformedResponseError`."""
    if response.status_code >= 400:
        raise http_error(provider, response.status_code, response.text)
    try:
        return response.json()
    except ValueError:
        raise MalformedResponseError(
            f"{provider} embeddings: malformed response: body is not JSON ({response.text[:80]!r})"
        ) from None
