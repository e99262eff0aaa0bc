"""What every remote provider shares: API keys, headers, response checks, retries and batching."""

from __future__ import annotations

import asyncio
import importlib
import logging
import weakref
from typing import TYPE_CHECKING, Any, Callable, Generator, Mapping, Sequence, TypeVar

from ..errors import MissingDependencyError
from .base import Embedder, provider_key_of
from .limits import max_input_bytes
from .responses import check_count
from .retry import RetryPolicy, redact

if TYPE_CHECKING:
    from .batch_api import BatchRunner, ProviderBatchBackend

log = logging.getLogger("clawmem.embeddings")

T = TypeVar("T")

#: Headers that carry credentials: left out of ``provider_key``.
AUTH_HEADERS = frozenset({"authorization", "x-goog-api-key", "api-key", "x-api-key", "proxy-authorization"})
#: Seconds a batch of documents may take (OpenClaw: 2 min remote).
DOCUMENT_TIMEOUT = 120.0
#: Seconds a query may take (OpenClaw: 60 s remote).
QUERY_TIMEOUT = 60.0


def import_sdk(module: str, extra: str, provider: str) -> Any:
    """Import an optional SDK, or raise :class:`MissingDependencyError` naming the pip extra."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(
            f"the {provider} embedding provider needs the '{module.split('.')[0]}' package: "
            f"pip install 'clawmem-py[{extra}]' ({exc})"
        ) from None


def strip_model_prefix(model: str, prefix: str | Sequence[str], default: str, *, repeat: bool = False) -> str:
    """``model`` without a leading provider ``prefix`` (``"openai/"``); empty → ``default``.

    ``prefix`` may be several prefixes; with ``repeat`` they are stripped until none is left
    (``"google/models/x"`` → ``"x"``), otherwise the first that matches is stripped once.
    """
    prefixes = (prefix,) if isinstance(prefix, str) else tuple(prefix)
    m = (model or "").strip()
    stripped = True
    while stripped:
        stripped = False
        for p in prefixes:
            if m.startswith(p):
                m, stripped = m[len(p):], repeat
                break
    return m or default


def public_headers(headers: Mapping[str, str], secrets: Sequence[str | None] = ()) -> dict[str, str]:
    """Headers without credentials (for ``provider_key``): auth headers and any value holding a key."""
    out: dict[str, str] = {}
    for name, value in headers.items():
        if name.lower() in AUTH_HEADERS:
            continue
        if any(s and s in str(value) for s in secrets):
            continue
        out[str(name)] = str(value)
    return dict(sorted(out.items()))


#: Loggers of the client libraries (and their children) whose records are scrubbed of API keys.
SDK_LOGGERS = ("openai", "voyage", "voyageai", "mistralai", "httpx", "httpx2", "httpcore", "urllib3", "aiohttp")


class _SecretFilter(logging.Filter):
    """Replaces any registered API key in a log record's message with ``***``."""

    def __init__(self) -> None:
        super().__init__("clawmem-secrets")
        self.secrets: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secrets:
            return True
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken record is not ours to fix
            return True
        cleaned = redact(message, self.secrets)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


_SECRET_FILTER = _SecretFilter()


def guard_secret(secret: str | None) -> None:
    """Keep ``secret`` out of the client libraries' log records (filters their loggers)."""
    if not secret or len(secret) < 4:
        return
    _SECRET_FILTER.secrets.add(secret)
    names = [n for n in list(logging.root.manager.loggerDict)
             if any(n == p or n.startswith(p + ".") for p in SDK_LOGGERS)]
    for name in set(names) | set(SDK_LOGGERS):
        logger = logging.getLogger(name)
        if _SECRET_FILTER not in logger.filters:
            logger.addFilter(_SECRET_FILTER)


class RemoteEmbedder(Embedder):
    """Base of the HTTP providers: retries every call, hides the API key, and routes document
    batches through the provider's batch API when ``remote.batch.enabled``.

    The constructor is shared: a subclass sets ``default_base_url`` and writes the hooks it needs,
    called in this order: ``_import_client_library`` (its SDK, ``client_library``, or ``httpx``, so
    that a missing package is the first error), ``_normalize_model``, ``_check_options`` (before any client is opened),
    ``_resolve_base_url`` and ``_open_clients``. Subclasses implement ``_request`` (one call for
    documents or a query, no retry) and may override its async twin ``_arequest``; they set
    ``self._batch`` to a :class:`BatchRunner` when their provider has a batch API.
    """

    #: Requested vector size, for providers that take one (part of ``provider_key`` when set).
    dimensions: int | None = None
    #: The API's base URL when ``base_url`` is not given.
    default_base_url: str = ""
    #: The provider's SDK as (module, pip extra), imported into ``self._sdk`` first thing.
    client_library: tuple[str, str] | None = None
    _sdk: Any

    def __init__(
        self,
        *,
        api_key: str | None,
        model: str = "",
        base_url: str | None = None,
        headers: Mapping[str, str] | None = None,
        dimensions: int | None = None,
        timeout: float = DOCUMENT_TIMEOUT,
        query_timeout: float = QUERY_TIMEOUT,
        retry: RetryPolicy | None = None,
    ) -> None:
        self._import_client_library()
        self.model = self._normalize_model(model)
        self._check_options()
        self.max_input_bytes = max_input_bytes(self.provider, self.model)
        if dimensions is not None:
            self.dimensions = dimensions
        self.base_url = self._resolve_base_url(base_url).rstrip("/")
        self.headers = dict(headers or {})
        self.timeout = float(timeout)
        self.query_timeout = float(query_timeout)
        self.retry = retry or RetryPolicy()
        self.__api_key = api_key
        guard_secret(api_key)
        self._batch: BatchRunner | None = None
        self._aclients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()
        self._open_clients()

    # -- construction hooks ---------------------------------------------------------------------

    def _import_client_library(self) -> None:
        """Import the provider's client library (``client_library`` into ``self._sdk`` by default)."""
        if self.client_library is not None:
            module, extra = self.client_library
            self._sdk = import_sdk(module, extra, self.provider)

    def _normalize_model(self, model: str) -> str:
        """The model name the API takes (a provider prefix stripped, empty → the default)."""
        return model

    def _check_options(self) -> None:
        """Refuse settings the provider cannot take, before any client is opened."""

    def _resolve_base_url(self, base_url: str | None) -> str:
        """The API's base URL: ``base_url``, else ``default_base_url``."""
        return base_url or self.default_base_url

    def _open_clients(self) -> None:
        """Open the provider's clients (the last step of construction)."""

    # -- batch API ------------------------------------------------------------------------------

    def _batch_backend(self) -> "ProviderBatchBackend":
        """The provider's batch protocol; providers with a batch API override this."""
        raise NotImplementedError(f"{self.provider} has no batch API")

    def enable_batch(self, config: Any, **runner_options: Any) -> None:
        """Route document batches through the provider's batch API (``config`` is ``remote.batch``)."""
        from .batch_api import BatchRunner

        self._batch = BatchRunner.from_config(self._batch_backend(), config, **runner_options)

    # -- secrets ------------------------------------------------------------------------------

    @property
    def _api_key(self) -> str | None:
        return self.__api_key

    def _redact(self, text: str) -> str:
        return redact(text, [self.__api_key])

    def _key_settings(self) -> dict[str, Any]:
        """Settings that change vectors; subclasses add theirs. Never holds a secret."""
        settings: dict[str, Any] = {
            "provider": self.provider,
            "baseUrl": self.base_url,
            "model": self.model,
            "headers": public_headers(self.headers, [self.__api_key]),
        }
        if self.dimensions:
            settings["dimensions"] = self.dimensions
        return settings

    @property
    def provider_key(self) -> str:
        return provider_key_of(self._key_settings())

    @property
    def batch(self) -> "BatchRunner | None":
        """The batch-API runner (``None`` when batching is off or unsupported)."""
        return self._batch

    @property
    def batch_active(self) -> bool:
        """True when ``embed_documents`` goes through the provider's batch API: the indexer should
        then pass all pending chunks in one call rather than 8000-byte groups."""
        return self._batch is not None and self._batch.active

    # -- what subclasses implement --------------------------------------------------------------

    def _request(self, texts: list[str], query: bool) -> list[list[float]]:
        """Embed ``texts`` in one call: documents, or (``query``) a single search query."""
        raise NotImplementedError

    async def _arequest(self, texts: list[str], query: bool) -> list[list[float]]:
        return await asyncio.to_thread(self._request, texts, query)

    def _timeout_for(self, query: bool) -> float:
        return self.query_timeout if query else self.timeout

    def _request_documents(self, texts: list[str]) -> list[list[float]]:
        return self._request(texts, False)

    def _request_query(self, text: str) -> list[float]:
        return self._request([text], True)[0]

    async def _arequest_documents(self, texts: list[str]) -> list[list[float]]:
        return await self._arequest(texts, False)

    async def _arequest_query(self, text: str) -> list[float]:
        return (await self._arequest([text], True))[0]

    # -- Embedder -------------------------------------------------------------------------------

    def _call(self, fn: Callable[[], T]) -> T:
        return self.retry.call(fn, provider=self.provider, secrets=[self.__api_key])

    async def _acall(self, fn: Callable[[], Any]) -> Any:
        return await self.retry.acall(fn, provider=self.provider, secrets=[self.__api_key])

    def embed_documents_plain(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed with the provider's ordinary endpoint (never the batch API)."""
        texts = list(texts)
        vectors = self._call(lambda: self._request_documents(texts))
        check_count(vectors, len(texts), self.provider)
        return vectors

    def _embed_documents(self, texts: list[str]) -> list[list[float]]:
        if self._batch is not None and self._batch.active:
            return self._batch.embed(texts, self.embed_documents_plain)
        return self.embed_documents_plain(texts)

    def _embed_query(self, text: str) -> list[float]:
        if not text.strip():
            return []
        return self._call(lambda: self._request_query(text))

    async def _aembed_documents(self, texts: list[str]) -> list[list[float]]:
        if self._batch is not None and self._batch.active:
            # Batch jobs poll for minutes: run the whole flow in a worker thread.
            return await asyncio.to_thread(self._embed_documents, texts)
        vectors = await self._acall(lambda: self._arequest_documents(texts))
        check_count(vectors, len(texts), self.provider)
        return vectors

    async def _aembed_query(self, text: str) -> list[float]:
        if not text.strip():
            return []
        return await self._acall(lambda: self._arequest_query(text))

    def _async_client(self, factory: Callable[[], T]) -> T:
        """One async client per running event loop (clients cannot move between loops)."""
        loop = asyncio.get_running_loop()
        client = self._aclients.get(loop)
        if client is None:
            client = factory()
            self._aclients[loop] = client
        return client

    def __repr__(self) -> str:
        return f"{type(self).__name__}(provider={self.provider!r}, model={self.model!r}, base_url={self.base_url!r})"


#: A provider's HTTP protocol written once for sync and async use: it yields each request as
#: ``(url, JSON body, timeout)``, is sent the response, and returns the vectors.
Exchange = Generator[tuple[str, dict[str, Any], float], Any, list[list[float]]]


class HttpxEmbedder(RemoteEmbedder):
    """A provider spoken to directly with ``httpx`` (JSON POSTs). Subclasses write ``_exchange`` and
    ``request_headers``; the same exchange runs on the sync client and on one async client per event
    loop."""

    _httpx: Any

    def _import_client_library(self) -> None:
        self._httpx = import_httpx(self.provider, self.provider)

    def _open_clients(self) -> None:
        self._client = self._httpx.Client(timeout=self.timeout, verify=shared_ssl_context())

    def request_headers(self) -> dict[str, str]:
        raise NotImplementedError

    def _exchange(self, texts: list[str], query: bool) -> Exchange:
        raise NotImplementedError

    def _new_async_client(self) -> Any:
        return self._httpx.AsyncClient(timeout=self.timeout, verify=shared_ssl_context())

    def _request(self, texts: list[str], query: bool) -> list[list[float]]:
        exchange = self._exchange(texts, query)
        try:
            url, body, timeout = next(exchange)
            while True:
                response = self._client.post(url, json=body, headers=self.request_headers(), timeout=timeout)
                url, body, timeout = exchange.send(response)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    async def _arequest(self, texts: list[str], query: bool) -> list[list[float]]:
        client = self._async_client(self._new_async_client)
        exchange = self._exchange(texts, query)
        try:
            url, body, timeout = next(exchange)
            while True:
                response = await client.post(url, json=body, headers=self.request_headers(), timeout=timeout)
                url, body, timeout = exchange.send(response)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    def close(self) -> None:
        self._client.close()


def import_httpx(provider: str, extra: str) -> Any:
    return import_sdk("httpx", extra, provider)


_SSL_CONTEXT: list[Any] = []


def shared_ssl_context() -> Any:
    """One TLS context for every HTTP client we create (building one loads the CA bundle, which
    costs tens of milliseconds per client). Built as httpx builds it (certifi, ``SSL_CERT_FILE``)."""
    if not _SSL_CONTEXT:
        for name in ("httpx", "httpx2"):
            try:
                factory = getattr(importlib.import_module(name), "create_ssl_context", None)
            except ImportError:
                continue
            if factory is not None:
                _SSL_CONTEXT.append(factory())
                break
        else:
            import ssl

            _SSL_CONTEXT.append(ssl.create_default_context())
    return _SSL_CONTEXT[0]
