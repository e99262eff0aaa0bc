"""Finding a remote provider's API key (kept light: auto-selection checks keys before it imports
any provider module or SDK)."""

from __future__ import annotations

from typing import Mapping, Sequence

from ..errors import MissingApiKeyError

__all__ = ["resolve_api_key"]


def resolve_api_key(
    provider: str,
    configured: str | None,
    env_names: Sequence[str],
    environ: Mapping[str, str],
    *,
    required: bool = True,
) -> str | None:
    """The API key from ``remote.api_key`` or the provider's environment variables.

    A blank configured key falls back to the environment. A configured key that is exactly the
    name of one of the provider's variables (``"GEMINI_API_KEY"``) is read from that variable.
    """
    key = (configured or "").strip()
    if key and key in env_names:
        key = (environ.get(key) or "").strip()
    if not key:
        for name in env_names:
            value = (environ.get(name) or "").strip()
            if value:
                key = value
                break
    if not key and required:
        names = " or ".join(env_names)
        raise MissingApiKeyError(
            f"No API key found for provider {provider}: set remote.api_key or {names}"
        )
    return key or None
