"""The adapters' dependency bounds hold the installed frameworks and stop before their next major, and the scripted
stand-in models live in ``testing`` modules only."""

from __future__ import annotations

import ast
import re
from importlib.metadata import version
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")
from packaging.requirements import Requirement  # noqa: E402
from packaging.version import Version  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FRAMEWORKS = {"langchain": {"langchain-core", "langchain", "langgraph"}, "llama-index": {"llama-index-core"}}


def _extras() -> dict[str, list[Requirement]]:
    data = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    return {name: [Requirement(r) for r in reqs] for name, reqs in data["project"]["optional-dependencies"].items()}


@pytest.mark.parametrize("extra", list(FRAMEWORKS))
def test_framework_bounds_hold_the_installed_version_and_stop_at_the_next_major(extra: str) -> None:
    reqs = {r.name: r for r in _extras()[extra]}
    assert FRAMEWORKS[extra] <= set(reqs), reqs
    assert "pydantic" in reqs  # the tool schemas are pydantic models
    for name in [*FRAMEWORKS[extra], "pydantic"]:
        spec = reqs[name].specifier
        installed = Version(version(name))
        assert installed in spec, (name, installed, spec)
        upper = [s for s in spec if s.operator in ("<", "<=")]
        assert upper, f"{name} has no upper bound: {spec}"
        # the first release of the next breaking series is excluded
        bump = Version(f"{installed.major + 1}.0") if installed.major >= 1 else Version(f"0.{installed.minor + 1}.0")
        assert bump not in spec, (name, spec)


def test_scripted_models_live_in_testing_modules_only() -> None:
    fakes = re.compile(r"BaseChatModel|MockFunctionCallingLLM|MockLLM|FakeListChatModel|GenericFakeChatModel")
    for package in ("clawmem_core", "langchain_clawmem", "llama_index_clawmem"):
        for path in (REPO / package).rglob("*.py"):
            if path.name == "testing.py":
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    bases = " ".join(ast.unparse(b) for b in node.bases)
                    assert not fakes.search(bases), f"{path.relative_to(REPO)}: class {node.name}({bases})"
                if isinstance(node, ast.ImportFrom):
                    assert not (node.module or "").endswith("testing"), f"{path.relative_to(REPO)} imports {node.module}"
                if isinstance(node, ast.Import):
                    assert not any(a.name.endswith(".testing") for a in node.names), path
