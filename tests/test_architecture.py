"""docs/architecture.md stays true: every module it names imports, and every module of ``clawmem_core`` is named."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import clawmem_core

PAGE = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"
NAMED = re.compile(r"`((?:clawmem_core|langchain_clawmem|llama_index_clawmem)(?:\.[a-z_0-9]+)+)`")


def _named() -> set[str]:
    return set(NAMED.findall(PAGE.read_text(encoding="utf-8")))


@pytest.mark.parametrize("name", sorted(_named()))
def test_every_named_module_imports(name: str) -> None:
    importlib.import_module(name)


def _leaf_modules() -> set[str]:
    """Every module of clawmem_core that is not a package, and not private."""
    out = set()
    for info in pkgutil.walk_packages(clawmem_core.__path__, "clawmem_core."):
        if info.ispkg or any(part.startswith("_") for part in info.name.split(".")):
            continue
        out.add(info.name)
    return out


# Modules that exist to be re-exported or that hold one helper of their package, named by their package instead.
NOT_ON_THE_PAGE = {
    "clawmem_core.store.sqlite.common",
    "clawmem_core.store.postgres.store",
    "clawmem_core.store.postgres.terms",
    "clawmem_core.store.postgres.values",
    "clawmem_core.dreaming.entries",
    "clawmem_core.dreaming.errors",
    "clawmem_core.dreaming.events",
    "clawmem_core.dreaming.injected",
    "clawmem_core.dreaming.sources",
    "clawmem_core.dreaming.writer",
}


def test_every_module_of_the_core_is_on_the_page() -> None:
    missing = _leaf_modules() - _named() - NOT_ON_THE_PAGE
    assert not missing, f"docs/architecture.md does not say where these live: {sorted(missing)}"
    stale = NOT_ON_THE_PAGE - _leaf_modules()
    assert not stale, f"no longer modules: {sorted(stale)}"
