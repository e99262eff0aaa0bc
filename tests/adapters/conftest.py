"""Shared fixtures: the example workspace copied to a temporary directory, indexed keyword-only
and with the deterministic ``HashEmbedder``."""

from __future__ import annotations

import importlib.util
import inspect
import shutil
from pathlib import Path
from typing import Iterator

import pytest

from clawmem_core import MemoryConfig, MemoryIndex
from clawmem_core.testing import HashEmbedder

_HAVE_PYTEST_ASYNCIO = importlib.util.find_spec("pytest_asyncio") is not None

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_WORKSPACE = REPO / "examples" / "workspace"


def copy_workspace(dest: Path) -> Path:
    return Path(shutil.copytree(EXAMPLE_WORKSPACE, dest / "workspace"))


def open_index(tmp: Path, *, embedder: object = None, **config: object) -> MemoryIndex:
    ws = tmp / "workspace"
    if not ws.exists():
        copy_workspace(tmp)
    cfg = MemoryConfig.from_dict({"provider": "none" if embedder is None else "auto", **config})
    mem = MemoryIndex(ws, config=cfg, embedder=embedder, state_dir=tmp / "state")
    mem.sync()
    return mem


@pytest.fixture(scope="session")
def keyword_memory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MemoryIndex]:
    """The example workspace, keyword-only (no embedder)."""
    mem = open_index(tmp_path_factory.mktemp("kw"))
    yield mem
    mem.close()


@pytest.fixture(scope="session")
def hash_memory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MemoryIndex]:
    """The example workspace, hybrid search with the deterministic ``HashEmbedder``."""
    mem = open_index(tmp_path_factory.mktemp("hash"), embedder=HashEmbedder())
    yield mem
    mem.close()


@pytest.fixture
def empty_memory(tmp_path: Path) -> Iterator[MemoryIndex]:
    """A workspace with no memory files at all."""
    ws = tmp_path / "empty"
    ws.mkdir()
    mem = MemoryIndex(ws, config=MemoryConfig(provider="none"), state_dir=tmp_path / "state")
    yield mem
    mem.close()


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object) -> Iterator[None]:
    """Mark coroutine tests here (including the inherited LangChain standard tests) for
    pytest-asyncio, whatever the project's asyncio mode. Runs inside pytest-asyncio's own
    wrapper, which then turns the marked items into async items."""
    outcome = yield
    result = outcome.get_result()
    nodes = result if isinstance(result, list) else [result]
    for node in nodes:
        if isinstance(node, pytest.Function) and inspect.iscoroutinefunction(node.obj):
            if not _HAVE_PYTEST_ASYNCIO:
                node.add_marker(pytest.mark.skip(reason="pytest-asyncio is not installed"))
            elif node.get_closest_marker("asyncio") is None:
                node.add_marker(pytest.mark.asyncio)
