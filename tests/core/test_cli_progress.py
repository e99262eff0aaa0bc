"""The command line's progress (not a terminal: plain lines on stderr) and the first search of a
new workspace, which answers after the keyword phase and says how far the vectors are."""

from __future__ import annotations

import json
import re
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
    # (the elapsed times are the machine's: their format is checked, not their value)
    assert re.fullmatch(r"clawmem: keywords: 0/3 files · elapsed \d+:\d\d · eta --:--", lines[0])
    assert any(line.startswith("clawmem: keywords: 3/3 files · elapsed ") for line in lines)
    assert re.match(r"clawmem: vectors: 0/3 chunks · elapsed \d+:\d\d · eta --:--", lines[-2])
    assert lines[-1].startswith("clawmem: vectors: 3/3 chunks · ") and "eta" not in lines[-1]
    assert "\x1b" not in err and "\r" not in err  # no terminal control codes in a pipe


def test_first_search_embeds_with_progress_then_answers_hybrid(ws: Path, capsys: pytest.CaptureFixture[str],
                                                             every_line: None) -> None:
    code, out, err = run(capsys, "search", "kubernetes billing", "--json", "--workspace", str(ws))
    payload: dict[str, Any] = json.loads(out)
    assert code == 0
    assert payload["results"][0]["path"] == "memory/2026-01-05.md"
    assert payload["vectors"] == {"done": 3, "total": 3} and payload["stale"] is False
    lines = err.splitlines()
    assert "clawmem: keywords: 3/3 files" in err
    assert any(re.match(r"clawmem: vectors: 0/3 chunks · elapsed \d+:\d\d · eta", line) for line in lines)
    assert any(line.startswith("clawmem: vectors: 3/3 chunks · ") for line in lines)
    assert lines[-1].startswith("clawmem: answered by hybrid search (keywords and ")
    assert "3/3 chunks embedded" in lines[-1]
    code, out, _ = run(capsys, "status", "--workspace", str(ws))
    assert "Vectors: 3/3 chunks embedded" in out.splitlines()


def test_search_wait_zero_answers_by_keyword_and_says_how_to_get_vectors(
        ws: Path, capsys: pytest.CaptureFixture[str], every_line: None) -> None:
    code, out, err = run(capsys, "search", "kubernetes billing", "--json", "--wait", "0", "--workspace", str(ws))
    payload: dict[str, Any] = json.loads(out)
    assert code == 0
    assert payload["results"][0]["path"] == "memory/2026-01-05.md"
    assert payload["vectors"] == {"done": 0, "total": 3}
    assert "clawmem: vectors:" not in err  # no vector phase was run
    note = err.splitlines()[-1]
    assert note.startswith("clawmem: answered by keyword search (vectors 0/3 chunks embedded)")
    assert "clawmem index" in note and "--wait" in note
    code, out, _ = run(capsys, "status", "--workspace", str(ws))
    assert "Vectors: 0/3 chunks embedded" in out.splitlines()
    # The next search (default wait) embeds them and answers hybrid.
    code, out, err = run(capsys, "search", "kubernetes billing", "--json", "--workspace", str(ws))
    assert json.loads(out)["vectors"] == {"done": 3, "total": 3}
    assert err.splitlines()[-1].startswith("clawmem: answered by hybrid search (keywords and ")


class SlowEmbedder(HashEmbedder):
    """Each document call takes 0.4 s: a search waiting 0.5 s gets at most two calls done."""

    def _embed_documents(self, texts: list[str]) -> list[list[float]]:
        import time

        time.sleep(0.4)
        return super()._embed_documents(texts)


def test_search_answers_when_its_wait_runs_out_hybrid_where_vectors_exist(
        make_workspace: WorkspaceFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CLAWMEM_STATE_DIR", str(tmp_path / "cli-state"))
    monkeypatch.setattr(registry, "resolve_embedder",
                        lambda config, *a, **kw: registry.EmbedderSelection(SlowEmbedder(), "auto"))
    files = {f"memory/notes/n{i:02d}.md": f"# Note {i}\n\nThe walrus number {i} likes herring.\n" for i in range(60)}
    ws = make_workspace(files | {"memory/zh.md": "# 笔记\n\n今天和小明玩成语接龙游戏，他赢了。\n"})
    code, out, err = run(capsys, "search", "成语接龙", "--json", "--wait", "0.5", "--workspace", str(ws))
    payload = json.loads(out)
    assert code == 0 and payload["results"][0]["path"] == "memory/zh.md"  # last in index order: no vector yet
    done, total = payload["vectors"]["done"], payload["vectors"]["total"]
    assert 0 < done < total == 61
    note = err.splitlines()[-1]
    assert note.startswith(f"clawmem: answered by hybrid search where vectors exist (vectors {done}/61 chunks "
                           "embedded; the rest match by keyword)")
    code, out, err = run(capsys, "search", "walrus", "--json", "--wait", "inf", "--workspace", str(ws))
    assert json.loads(out)["vectors"] == {"done": 61, "total": 61}  # later searches carry on from there


@pytest.mark.parametrize("wait", ["-1", "soon", "nan"])
def test_search_wait_must_be_seconds(ws: Path, capsys: pytest.CaptureFixture[str], wait: str) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["search", "billing", "--wait", wait, "--workspace", str(ws)])
    assert exc.value.code == 2
    assert "--wait" in capsys.readouterr().err


def test_quick_syncs_stay_quiet_in_a_pipe(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "index", "--workspace", str(ws))
    assert code == 0 and err == ""  # seconds of work: no progress lines by default
    code, out, _ = run(capsys, "status", "--workspace", str(ws))
    assert "Vectors: 3/3 chunks embedded" in out.splitlines()


def test_search_help_names_the_defaults_in_effect(capsys: pytest.CaptureFixture[str]) -> None:
    from clawmem_core.config import FUSION_DEFAULTS

    with pytest.raises(SystemExit):
        main(["search", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"else {FUSION_DEFAULTS['calibrated'][2]:g};" in text and "0.35)" not in text.replace("openclaw)", "")
    assert "--wait SECONDS" in text and "(default 30;" in text and "--wait 0" in text
