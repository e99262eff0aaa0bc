"""Each package imports only its own framework: the core imports none."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
import sys

import pytest

REPO = Path(__file__).resolve().parents[2]

CASES = [
    ("clawmem_core", ["langchain_core", "langchain", "llama_index"]),
    ("langchain_clawmem", ["llama_index"]),
    ("llama_index_clawmem", ["langchain_core", "langchain"]),
]


@pytest.mark.parametrize(("module", "forbidden"), CASES, ids=[c[0] for c in CASES])
def test_import_pulls_in_no_other_framework(module: str, forbidden: list[str]) -> None:
    code = (
        "import importlib, json, sys\n"
        f"importlib.import_module({module!r})\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True, cwd=REPO)
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert module in loaded
    assert not loaded & set(forbidden), f"{module} imported {sorted(loaded & set(forbidden))}"


def test_adapters_import_their_own_framework() -> None:
    code = (
        "import sys, langchain_clawmem, llama_index_clawmem.testing, langchain_clawmem.testing\n"
        "print('langchain_core' in sys.modules, 'llama_index' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True, cwd=REPO)
    assert out.stdout.split() == ["True", "True"]
