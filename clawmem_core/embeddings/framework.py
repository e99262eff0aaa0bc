"""Use a LangChain ``Embeddings`` or a LlamaIndex ``BaseEmbedding`` as a clawmem embedder.

Neither framework is imported: objects are recognised by the module of their class (or a base
class) and by their methods. :func:`wrap_embedder` returns an :class:`Embedder` whose
``provider_key`` is derived from the object's class and model settings, never from its
credentials, so the embedding cache stays valid across runs and is never shared between two
different models.
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Any, Callable, Iterator, Sequence
from urllib.parse import urlsplit, urlunsplit

from ..errors import ConfigError, EmbeddingError
from .base import Embedder, provider_key_of

#: Attributes read, in order, for the model name.
MODEL_NAME_ATTRS = ("model", "model_name", "model_id", "model_name_or_path", "deployment_name", "deployment", "repo_id")
#: Other public, non-secret settings that change vectors; read when they hold a plain value.
SETTING_ATTRS = (
    "dimensions",
    "output_dimensionality",
    "dimensionality",
    "embed_dim",
    "size",
    "task_type",
    "input_type",
    "query_instruction",
    "text_instruction",
    "normalize",
    "truncate_dim",
)
#: Attributes holding an endpoint; kept without user info, query or fragment.
URL_ATTRS = ("base_url", "openai_api_base", "api_base", "endpoint", "azure_endpoint")

_LANGCHAIN_METHODS = ("embed_documents", "embed_query")
_LLAMA_METHODS = ("get_text_embedding_batch", "get_query_embedding")


class UnsupportedEmbedderError(ConfigError, TypeError):
    """The object given as an embedder is not one clawmem can use."""


def wrap_embedder(obj: Any, *, normalize: bool = False, max_input_bytes: int | None = None,
                  window_bytes: int | None = None) -> Embedder:
    """Return ``obj`` as an :class:`Embedder`.

    Accepts a clawmem :class:`Embedder` (returned as is), a LangChain ``Embeddings``
    (``embed_documents``/``embed_query``) or a LlamaIndex ``BaseEmbedding``
    (``get_text_embedding_batch``/``get_query_embedding``). ``normalize`` L2-normalises the
    vectors; ``max_input_bytes`` overrides the input limit (default 8000 bytes); ``window_bytes``
    embeds long chunks as windows of that size (see :attr:`Embedder.window_bytes`: worth it for a
    small local model such as all-MiniLM-L6-v2, 512 bytes).
    Anything else raises :class:`UnsupportedEmbedderError` (a ``TypeError`` and a ``ConfigError``).
    """
    if isinstance(obj, Embedder):
        return obj
    kind = detect_framework(obj)
    wrapper: FrameworkEmbedder
    if kind == "llama_index":
        wrapper = LlamaIndexEmbedder(obj)
    elif kind == "langchain":
        wrapper = LangChainEmbedder(obj)
    else:
        raise UnsupportedEmbedderError(
            f"cannot use {type(obj).__module__}.{type(obj).__qualname__} as an embedder: expected a "
            "clawmem Embedder, a LangChain Embeddings (embed_documents/embed_query) or a LlamaIndex "
            "BaseEmbedding (get_text_embedding_batch/get_query_embedding)"
        )
    wrapper.normalize = normalize
    if max_input_bytes is not None:
        wrapper.max_input_bytes = int(max_input_bytes)
    if window_bytes is not None:
        wrapper.window_bytes = int(window_bytes)
    return wrapper


def detect_framework(obj: Any) -> str | None:
    """``"llama_index"``, ``"langchain"`` or ``None``, from the class hierarchy, then the methods."""
    if isinstance(obj, type):
        return None
    modules = [getattr(cls, "__module__", "") or "" for cls in type(obj).__mro__]
    has_llama = all(callable(getattr(obj, m, None)) for m in _LLAMA_METHODS)
    has_langchain = all(callable(getattr(obj, m, None)) for m in _LANGCHAIN_METHODS)
    if has_llama and any(m.split(".")[0] == "llama_index" for m in modules):
        return "llama_index"
    if has_langchain and any(m.split(".")[0].startswith("langchain") for m in modules):
        return "langchain"
    if has_llama:
        return "llama_index"
    if has_langchain:
        return "langchain"
    return None


def model_name_of(obj: Any) -> str:
    """The object's model name from its usual attributes, else its class name."""
    for attr in MODEL_NAME_ATTRS:
        value = _plain_attr(obj, attr)
        if isinstance(value, str) and value.strip() and value.strip().lower() != "unknown":
            return value.strip()
    return type(obj).__qualname__


def _plain_attr(obj: Any, name: str) -> Any:
    """An instance attribute or field, without calling properties (which may do I/O)."""
    try:
        static = inspect.getattr_static(obj, name)
    except AttributeError:
        return None
    if isinstance(static, property) or callable(static):
        return None
    try:
        return getattr(obj, name)
    except Exception:
        return None


def _clean_url(value: str) -> str:
    parts = urlsplit(value)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", ""))


def settings_of(obj: Any) -> dict[str, Any]:
    """Public vector-changing settings of ``obj`` (dimensions, endpoint, task type...)."""
    out: dict[str, Any] = {}
    for attr in SETTING_ATTRS:
        value = _plain_attr(obj, attr)
        if isinstance(value, (str, int, float, bool)) and value != "":
            out[attr] = value
    for attr in URL_ATTRS:
        value = _plain_attr(obj, attr)
        if isinstance(value, str) and value.strip():
            out[attr] = _clean_url(value.strip())
    return out


def _as_vectors(result: Any) -> Any:
    if hasattr(result, "tolist"):
        result = result.tolist()
    if isinstance(result, (list, tuple)):
        return [list(v.tolist() if hasattr(v, "tolist") else v) for v in result]
    return result


def _as_vector(result: Any) -> list[float]:
    return list(result.tolist() if hasattr(result, "tolist") else result)


def _provider_error(exc: Exception, provider: str) -> EmbeddingError:
    from .retry import to_embedding_error

    return to_embedding_error(exc, provider)


class FrameworkEmbedder(Embedder):
    """Common part of the LangChain and LlamaIndex bridges: identity, key, and the calls, made
    through the wrapped object's methods that :attr:`methods` names."""

    framework = ""
    #: The wrapped object's methods: a batch of documents, a query, and their async twins (when the
    #: object lacks an async one, the sync one runs in a thread).
    methods: tuple[str, str, str, str] = ("", "", "", "")
    normalize = False
    query_timeout = 60.0

    def __init__(self, obj: Any) -> None:
        self.inner = obj
        self.provider = self.framework
        self.model = model_name_of(obj)
        self.class_path = f"{type(obj).__module__}.{type(obj).__qualname__}"
        self.settings = settings_of(obj)

    @property
    def provider_key(self) -> str:
        return provider_key_of(
            {
                "provider": self.provider,
                "class": self.class_path,
                "model": self.model,
                "settings": self.settings,
                "normalize": self.normalize,
            }
        )

    def _async_method(self, name: str) -> Callable[..., Any] | None:
        fn = getattr(self.inner, name, None)
        return fn if callable(fn) else None

    def _embed_documents(self, texts: list[str]) -> list[list[float]]:
        return _as_vectors(getattr(self.inner, self.methods[0])(texts))  # type: ignore[no-any-return]

    def _embed_query(self, text: str) -> list[float]:
        return _as_vector(getattr(self.inner, self.methods[1])(text))

    async def _aembed_documents(self, texts: list[str]) -> list[list[float]]:
        fn = self._async_method(self.methods[2])
        if fn is None:
            return await super()._aembed_documents(texts)
        return _as_vectors(await fn(texts))  # type: ignore[no-any-return]

    async def _aembed_query(self, text: str) -> list[float]:
        fn = self._async_method(self.methods[3])
        if fn is None:
            return await super()._aembed_query(text)
        return _as_vector(await fn(text))

    @contextlib.contextmanager
    def _provider_failures(self) -> Iterator[None]:
        """The wrapped object is the embedding provider: whatever it raises is a provider failure
        (an :class:`EmbeddingError`, quota errors recognised, secrets masked), not a crash of the
        index or a bad argument."""
        try:
            yield
        except EmbeddingError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise _provider_error(exc, self.provider) from exc

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        with self._provider_failures():
            return super().embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        with self._provider_failures():
            return super().embed_query(text)

    async def aembed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        with self._provider_failures():
            return await super().aembed_documents(texts)

    async def aembed_query(self, text: str) -> list[float]:
        with self._provider_failures():
            return await super().aembed_query(text)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(class={self.class_path!r}, model={self.model!r})"


class LangChainEmbedder(FrameworkEmbedder):
    """A LangChain ``Embeddings`` object seen as a clawmem embedder."""

    framework = "langchain"
    methods = (*_LANGCHAIN_METHODS, "aembed_documents", "aembed_query")


class LlamaIndexEmbedder(FrameworkEmbedder):
    """A LlamaIndex ``BaseEmbedding`` seen as a clawmem embedder."""

    framework = "llama_index"
    methods = (*_LLAMA_METHODS, "aget_text_embedding_batch", "aget_query_embedding")
