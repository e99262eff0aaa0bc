"""Each package imports only its own framework: the core imports none."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import importlib.util

import pytest

REPO = Path(__file__).resolve().parents[2]

#: module -> (frameworks it must load, frameworks it must not load)
CASES = {
    "clawmem_core": ([], ["langchain_core", "langchain", "llama_index", "mcp", "detect_secrets", "requests",
                          "charset_normalizer", "regex", "rich", "inotify_simple", "numpy"]),
    "langchain_clawmem": (["langchain_core"], ["llama_index"]),
    "llama_index_clawmem": (["llama_index"], ["langchain_core", "langchain"]),
}


@pytest.fixture(scope="module")
def loaded_modules() -> dict[str, set[str]]:
    """Top-level modules loaded by importing each package in a fresh interpreter (run in parallel)."""
    procs = {}
    for module in CASES:
        code = (
            "import importlib, json, sys\n"
            f"importlib.import_module({module!r})\n"
            "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
        )
        procs[module] = subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO
        )
    out = {}
    for module, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=180)
        # an adapter whose framework is not installed fails to import: its test skips
        out[module] = set(json.loads(stdout.strip().splitlines()[-1])) if proc.returncode == 0 else set()
        assert proc.returncode == 0 or "ModuleNotFoundError" in stderr, stderr
    return out


@pytest.mark.parametrize("module", list(CASES))
def test_import_pulls_in_only_its_own_framework(module: str, loaded_modules: dict[str, set[str]]) -> None:
    required, forbidden = CASES[module]
    for framework in required:
        if importlib.util.find_spec(framework) is None:
            pytest.skip(f"{framework} is not installed")
    loaded = loaded_modules[module]
    assert module in loaded
    assert set(required) <= loaded
    assert not loaded & set(forbidden), f"{module} imported {sorted(loaded & set(forbidden))}"
