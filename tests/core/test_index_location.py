"""Where a workspace's index lives: without an agent id, each workspace has its own index (named
after the workspace's real path); an explicit agent id keeps OpenClaw's ``<agent_id>.sqlite``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from clawmem_core import MemoryIndex
from clawmem_core.cli import main
from clawmem_core.index import workspace_index_name

from .conftest import WorkspaceFactory, keyword_only


def _two(make_workspace: WorkspaceFactory) -> tuple[Path, Path]:
    a = make_workspace({"MEMORY.md": "- Alice likes jazz and the walrus project\n"}, name="a")
    b = make_workspace({"MEMORY.md": "- Bob likes opera and the narwhal project\n"}, name="b")
    return a, b


def test_two_workspaces_without_an_agent_id_keep_their_own_index(make_workspace: WorkspaceFactory,
                                                                   state_dir: Path) -> None:
    a, b = _two(make_workspace)
    with MemoryIndex(a, config=keyword_only(), state_dir=state_dir) as mem_a, \
            MemoryIndex(b, config=keyword_only(), state_dir=state_dir) as mem_b:
        assert mem_a.store_path != mem_b.store_path
        assert mem_a.store_path.parent == mem_b.store_path.parent == state_dir / "memory"
        assert mem_a.sync().full and mem_b.sync().full
        assert [h.path for h in mem_a.search("walrus narwhal project", min_score=0)] == ["MEMORY.md"]
        assert "walrus" in mem_a.search("walrus narwhal project", min_score=0)[0].snippet
        assert mem_b.search("walrus", min_score=0) == []
        assert mem_b.search("narwhal", min_score=0)[0].snippet.startswith("- Bob")
        assert mem_a.status().workspace == str(a) and mem_b.status().files == 1
    with MemoryIndex(a, config=keyword_only(), state_dir=state_dir) as mem_a:
        report = mem_a.sync()  # the other workspace's sync did not make this one rebuild
        assert not report.full and report.files_indexed == 0


def test_the_default_index_follows_the_real_path(make_workspace: WorkspaceFactory, state_dir: Path,
                                                 tmp_path: Path) -> None:
    a, _ = _two(make_workspace)
    link = tmp_path / "link-to-a"
    link.symlink_to(a)
    with MemoryIndex(a, config=keyword_only(), state_dir=state_dir) as m1, \
            MemoryIndex(link, config=keyword_only(), state_dir=state_dir) as m2, \
            MemoryIndex(os.path.relpath(a), config=keyword_only(), state_dir=state_dir) as m3:
        assert m1.store_path == m2.store_path == m3.store_path
        assert m1.store_path.name.startswith("a-") and m1.store_path.name == f"{workspace_index_name(a)}.sqlite"
    assert workspace_index_name(a) != workspace_index_name(tmp_path / "elsewhere" / "a")  # same name, other place


def test_an_explicit_agent_id_keeps_openclaw_naming(make_workspace: WorkspaceFactory, state_dir: Path) -> None:
    a, b = _two(make_workspace)
    with MemoryIndex(a, agent_id="main", config=keyword_only(), state_dir=state_dir) as mem:
        assert mem.store_path == state_dir / "memory" / "main.sqlite"
        assert mem.sessions_dir == state_dir / "agents" / "main" / "sessions"
    with MemoryIndex(b, agent_id="research", config=keyword_only(), state_dir=state_dir) as mem:
        assert mem.store_path == state_dir / "memory" / "research.sqlite"
    with MemoryIndex(b, config={"provider": "none", "store": {"path": str(state_dir / "x" / "{agent_id}.db")}},
                     state_dir=state_dir) as mem:  # {agent_id} in store.path: the derived name without one
        assert mem.store_path == state_dir / "x" / f"{workspace_index_name(b)}.db"


def test_cli_status_shows_each_workspace_and_its_own_index(make_workspace: WorkspaceFactory, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = _two(make_workspace)
    monkeypatch.setenv("CLAWMEM_STATE_DIR", str(tmp_path / "cli-state"))
    seen = {}
    for ws in (a, b):
        assert main(["--workspace", str(ws), "--provider", "none", "index"]) == 0
        capsys.readouterr()
        assert main(["--workspace", str(ws), "--provider", "none", "status", "--json"]) == 0
        st = json.loads(capsys.readouterr().out)["status"]
        assert st["workspace"] == str(ws) and st["files"] == 1
        seen[ws] = st["store_path"]
        assert main(["--workspace", str(ws), "--provider", "none", "status"]) == 0
        text = capsys.readouterr().out
        assert f"Workspace: {ws}" in text and f"Store: {seen[ws]}" in text
    assert seen[a] != seen[b]
    assert main(["--workspace", str(a), "--agent", "main", "--provider", "none", "index"]) == 0
    assert (tmp_path / "cli-state" / "memory" / "main.sqlite").is_file()
