"""The command line, round 3: a search while another process embeds the index's vectors answers
at once and says so; a replica's ``status`` says it is a replica; ``--shared`` names the shared
namespaces to search."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from clawmem_core import MemoryIndex, progress
from clawmem_core.cli import main
from clawmem_core.embeddings import registry
from clawmem_core.testing import HashEmbedder

from .conftest import write_files

ROOT = Path(__file__).resolve().parents[2]
FIRST = {
    "MEMORY.md": "# Memory\n\n- Kubernetes billing alerts go to the ops channel.\n",
    "memory/tea.md": "- Alice prefers green tea in the morning.\n",
    "memory/zh.md": "- 周三下午和经理开预算会议。\n",
}
LATER = {f"memory/later-{i}.md": f"- Later note {i} about kubernetes billing and topic{i}.\n" for i in range(5)}


def run(capsys: pytest.CaptureFixture[str], *argv: str, guard: float = 120.0) -> tuple[int, str, str]:
    """``clawmem ARGV`` in this process; the test fails (instead of hanging) when it has not
    answered within ``guard`` seconds."""
    box: list[int] = []
    worker = threading.Thread(target=lambda: box.append(main(list(argv))), daemon=True)
    worker.start()
    worker.join(guard)
    assert box, f"clawmem {' '.join(argv)} did not answer"
    out, err = capsys.readouterr()
    return box[0], out, err


@pytest.fixture
def cli_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's embedder: the deterministic one (the holder process uses the same), and plain
    progress lines from the start of each phase."""
    monkeypatch.setattr(registry, "resolve_embedder",
                        lambda config, *a, **kw: registry.EmbedderSelection(HashEmbedder(), "auto"))
    monkeypatch.setattr(progress, "PLAIN_DELAY_SECONDS", 0.0)


@pytest.mark.parametrize("query", ["kubernetes billing", "预算会议"])
def test_a_search_while_another_process_embeds_answers_at_once(
        tmp_path: Path, store_config: dict[str, Any], cli_embedder: None, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, query: str) -> None:
    state = tmp_path / "state"
    ws = write_files(tmp_path / "ws", FIRST)
    with MemoryIndex(ws, agent_id="main", config={"store": store_config}, embedder=HashEmbedder(),
                     state_dir=state) as mem:
        mem.sync()  # three chunks with their vectors
    write_files(ws, LATER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    url = store_config.get("url")
    holder = subprocess.Popen([sys.executable, str(Path(__file__).with_name("vector_holder.py")), str(ws), str(state),
                               *([url] if url else [])], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env)
    try:
        line = holder.stdout.readline()  # type: ignore[union-attr]
        assert line.strip() == "embedding", holder.stderr.read()  # type: ignore[union-attr]
        common = ["--workspace", str(ws), "--agent", "main", *(["--store", url] if url else [])]
        monkeypatch.setenv("CLAWMEM_STATE_DIR", str(state))
        # --wait as long as it gets: the answer comes at once all the same
        code, out, err = run(capsys, *common, "search", query, "--json", "--wait", "3600")
        assert code == 0, err
        payload = json.loads(out)
        assert payload["vectors"] == {"done": 3, "total": 8}  # this search embedded nothing
        assert payload["results"], payload
        assert "clawmem: vectors:" not in err  # no vector phase, no frozen progress line
        note = err.splitlines()[-1]
        assert note.startswith("clawmem: answered by hybrid search where vectors exist (vectors 3/8 chunks embedded")
        assert "another process is embedding the rest" in note
    finally:
        holder.kill()
        holder.wait()
    # the killed process left no lock behind: the next search embeds the rest itself
    code, out, err = run(capsys, *common, "search", query, "--json", "--wait", "3600")
    assert code == 0, err
    assert json.loads(out)["vectors"] == {"done": 8, "total": 8}
    assert "another process" not in err and "clawmem: vectors: 8/8 chunks" in err
