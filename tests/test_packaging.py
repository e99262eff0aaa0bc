"""What the extras install: a user following the README gets what it promises."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def _extras() -> dict[str, list[str]]:
    return tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["optional-dependencies"]


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0].lower() for r in requirements}


def test_notebooks_extra_installs_a_jupyter_front_end() -> None:
    names = _names(_extras()["notebooks"])
    assert names & {"notebook", "jupyterlab"}
    assert {"nbclient", "ipykernel"} <= names  # and what running them needs


def test_mcp_extra_and_the_test_extra_bring_the_mcp_sdk() -> None:
    extras = _extras()
    assert "mcp" in _names(extras["mcp"])
    test = " ".join(extras["test"])
    assert re.search(r"clawmem-py\[[^\]]*\bmcp\b", test)
