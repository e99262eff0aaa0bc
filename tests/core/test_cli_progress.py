"""The command line's progress (not a terminal: plain lines on stderr) and the first search of a
new workspace, which answers after the keyword phase and says how far the vectors are."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from clawmem_core import progress
from clawmem_core.cli import main
from clawmem_core.embeddings import registry
from clawmem_core.testing import HashEmbedder

from .conftest import SAMPLE_FILES, WorkspaceFactory


@pytest.fixture
def ws(make_workspace: WorkspaceFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CLAWMEM_STATE_DIR", str(tmp_path / "cli-state"))
    # The CLI's embedder: the deterministic one, as if a provider had been configured.
    monkeypatch.setattr(registry, "resolve_embedder",
                        lambda config, *a, **kw: registry.EmbedderSelection(HashEmbedder(), "auto"))
    return make_workspace(SAMPLE_FILES)


@pytest.fixture
def every_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plain lines from the start of each phase (they wait a couple of seconds by default)."""
    monkeypatch.setattr(progress, "PLAIN_DELAY_SECONDS", 0.0)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_index_prints_plain_progress_lines(ws: Path, capsys: pytest.CaptureFixture[str], every_line: None) -> None:
    code, out, err = run(capsys, "index", "--workspace", str(ws))
    assert code == 0 and "3 files indexed" in out
    lines = err.splitlines()
    assert lines[0] == "clawmem: keywords: 0/3 files · elapsed 0:00 · eta --:--"
    assert any(line.startswith("clawmem: keywords: 3/3 files · elapsed ") for line in lines)
    assert lines[-2].startswith("clawmem: vectors: 0/3 chunks · elapsed 0:00 · eta --:--")
    assert lines[-1].startswith("clawmem: vectors: 3/3 chunks · ") and "eta" not in lines[-1]
    assert "\x1b" not in err and "\r" not in err  # no terminal control codes in a pipe


def test_first_search_answers_after_the_keyword_phase(ws: Path, capsys: pytest.CaptureFixture[str],
                                                      every_line: None) -> None:
    code, out, err = run(capsys, "search", "kubernetes billing", "--json", "--workspace", str(ws))
    payload: dict[str, Any] = json.loads(out)
    assert code == 0
    assert payload["results"][0]["path"] == "memory/2026-01-05.md"
    assert payload["vectors"] == {"done": 0, "total": 3} and payload["stale"] is False
    assert "clawmem: keywords: 3/3 files" in err
    assert "vectors 0/3 chunks embedded" in err and "clawmem index" in err
    code, out, _ = run(capsys, "status", "--workspace", str(ws))
    assert "Vectors: 0/3 chunks embedded" in out.splitlines()
    run(capsys, "index", "--workspace", str(ws))
    code, out, err = run(capsys, "search", "kubernetes billing", "--json", "--workspace", str(ws))
    assert json.loads(out)["vectors"] == {"done": 3, "total": 3}
    assert "chunks embedded" not in err and "clawmem: vectors" not in err  # all vectors there: no note


def test_quick_syncs_stay_quiet_in_a_pipe(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "index", "--workspace", str(ws))
    assert code == 0 and err == ""  # seconds of work: no progress lines by default
    code, out, _ = run(capsys, "status", "--workspace", str(ws))
    assert "Vectors: 3/3 chunks embedded" in out.splitlines()
