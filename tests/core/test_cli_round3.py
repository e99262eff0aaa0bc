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
        # the library: left to the other process at once, or once the time given is up
        with MemoryIndex(ws, agent_id="main", config={"store": store_config}, embedder=HashEmbedder(),
                         state_dir=state) as mem:
            for kw in ({"wait_for_others": False, "vector_seconds": 3600.0}, {"vector_seconds": 0.0}):
                report = mem.sync(**kw)  # type: ignore[arg-type]
                assert report.vectors_elsewhere and report.vectors_pending == 5 and not report.vectors_completed
    finally:
        holder.kill()
        holder.wait()
    # the killed process left no lock behind: the next search embeds the rest itself
    code, out, err = run(capsys, *common, "search", query, "--json", "--wait", "3600")
    assert code == 0, err
    assert json.loads(out)["vectors"] == {"done": 8, "total": 8}
    assert "another process" not in err and "clawmem: vectors: 8/8 chunks" in err


TEAM = {
    "MEMORY.md": "# Team\n\nThe deploy freeze starts on Fridays at noon.\n",
    "memory/freeze.md": "- 部署冻结从每周五中午开始。\n",
}


def test_a_replica_s_status_says_it_is_a_replica(tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CLAWMEM_STATE_DIR", str(tmp_path / "state"))
    team = write_files(tmp_path / "team", TEAM)
    code, _, err = run(capsys, "--workspace", str(team), "--store", pg_url, "--agent", "team", "--provider", "none",
                       "index")
    assert code == 0, err
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    common = ["--store", pg_url, "--agent", "team", "--provider", "none"]
    code, out, err = run(capsys, *common, "status")
    assert code == 0, err
    lines = out.splitlines()
    assert "Replica of agent team: answering from the store as its syncing process left it" in out
    replicates = next(line for line in lines if line.startswith("Replicates: "))
    assert f"workspace {team} (on the syncing machine), last synced 20" in replicates
    assert "Indexed: 2 files · 2 chunks" in lines  # not "2/0 files": nothing to count here
    assert not any(line.startswith("Dirty:") for line in lines)
    code, out, _ = run(capsys, *common, "status", "--json")
    st = json.loads(out)["status"]
    assert st["files_on_disk"] is None and st["replica"]["agent"] == "team"
    assert st["replica"]["workspace"] == str(team) and st["replica"]["last_sync"].endswith("Z")
    # a workspace's status is no replica's
    code, out, _ = run(capsys, "--workspace", str(team), *common, "status", "--json")
    st = json.loads(out)["status"]
    assert st["replica"] is None and st["files_on_disk"] == 2


@pytest.fixture
def team_and_alice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The team's memory indexed as agent ``team`` in the state directory; alice's workspace."""
    monkeypatch.setenv("CLAWMEM_STATE_DIR", str(tmp_path / "state"))
    with MemoryIndex(write_files(tmp_path / "team", TEAM), agent_id="team", config={"provider": "none"},
                     state_dir=tmp_path / "state") as mem:
        mem.sync()
    return write_files(tmp_path / "alice", {"MEMORY.md": "# Alice\n\n- Alice prefers green tea.\n"})


@pytest.mark.parametrize("query", ["deploy freeze Fridays", "部署冻结"])
def test_shared_names_the_namespaces_to_search(team_and_alice: Path, capsys: pytest.CaptureFixture[str],
                                               query: str) -> None:
    common = ["--workspace", str(team_and_alice), "--agent", "alice", "--provider", "none"]
    code, out, err = run(capsys, *common, "search", "--json", query)
    assert code == 0 and json.loads(out)["results"] == [], err
    for shared in (["--shared", "team"], ["--shared", "team,ghost"], ["--shared", "ghost", "--shared", " team "]):
        code, out, err = run(capsys, *common, *shared, "search", "--json", query)
        results = json.loads(out)["results"]
        assert code == 0 and results and results[0]["path"].startswith("@team/"), (shared, err)
    # after the command too, and in status: each namespace, and the one that does not exist
    code, out, _ = run(capsys, *common, "status", "--json", "--shared", "team,ghost")
    issues = json.loads(out)["status"]["issues"]
    assert any("'ghost'" in i for i in issues) and not any("'team'" in i for i in issues)


@pytest.mark.parametrize("bad", ["../team", "a/b", ","])
def test_a_bad_shared_namespace_is_one_error_line(team_and_alice: Path, capsys: pytest.CaptureFixture[str],
                                                  bad: str) -> None:
    code, out, err = run(capsys, "--workspace", str(team_and_alice), "--provider", "none", "--shared", bad,
                         "search", "tea")
    if bad == ",":  # names nothing: as without the flag
        assert code == 0 and "green tea" in out
        return
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 1 and not out and len(lines) == 1, err
    assert lines[0].startswith("clawmem: error: ") and "shared namespace" in lines[0] and repr(bad) in lines[0]


@pytest.mark.parametrize("argv", [["--help"], ["search", "--help"], ["status", "--help"]])
def test_help_documents_shared(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--shared ID[,ID...]" in text and "repeatable or comma-separated" in text


def test_readme_documents_shared() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Command line", 1)[1].split("\n## ", 1)[0]
    assert "`--shared ID` (repeatable or comma-separated" in section
