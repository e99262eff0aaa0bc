"""Many agents in one PostgreSQL database: whatever the query, the path or the agent id, agent A
never sees agent B's data; the URL's password never shows."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from clawmem_core import MemoryIndex
from clawmem_core.errors import ClawmemError, PathNotAllowedError, StoreError
from clawmem_core.testing import HashEmbedder

from .test_index_backends import write

AGENTS = ["alice", "bob", "x'; DROP TABLE clawmem_chunks; --", "a_c", "abc", "a%", "代理人", "b" * 200]


def _secret(i: int) -> str:
    return f"secretword{i}zz"


@pytest.fixture
def populated(tmp_path: Path, pg_url: str) -> dict[str, MemoryIndex]:
    """One workspace and index per agent, each holding its own secret word."""
    out: dict[str, MemoryIndex] = {}
    for i, agent in enumerate(AGENTS):
        ws = write(tmp_path / f"ws{i}", {
            "MEMORY.md": f"# Mine\n\nThe code is {_secret(i)} and the pet is pet{i}name.\n",
            f"memory/only-{i}.md": f"- private note {_secret(i)} 机密{i}号\n",
            "memory/common.md": "- everybody writes this same shared line about coffee\n",
        })
        mem = MemoryIndex(ws, agent_id=agent, config={"store": {"url": pg_url}}, embedder=HashEmbedder(),
                          state_dir=tmp_path / "state")
        mem.sync()
        out[agent] = mem
    yield out
    for mem in out.values():
        mem.close()


def test_no_query_reaches_another_agents_rows(populated: dict[str, MemoryIndex]) -> None:
    for i, (agent, mem) in enumerate(populated.items()):
        own = mem.search(_secret(i), min_score=0)
        assert {r.path for r in own if _secret(i) in r.snippet} == {"MEMORY.md", f"memory/only-{i}.md"}
        for j in range(len(AGENTS)):
            if j == i:
                continue
            for q in (_secret(j), f"pet{j}name", f"机密{j}号", f"{_secret(j)} OR 1=1", f"' | '{_secret(j)}"):
                for r in mem.search(q, max_results=50, min_score=0):
                    assert _secret(j) not in r.snippet and f"pet{j}name" not in r.snippet, (agent, q)
                    assert r.path in ("MEMORY.md", "memory/common.md", f"memory/only-{i}.md"), (agent, q, r.path)
        # the common line is there once: its own copy
        common = [r for r in mem.search("coffee", max_results=50, min_score=0) if r.path == "memory/common.md"]
        assert len(common) == 1
        st = mem.status()
        assert (st.files, st.chunks) == (3, 3)


def test_reads_stay_inside_the_agents_own_files(populated: dict[str, MemoryIndex]) -> None:
    alice = populated["alice"]
    assert alice.read(f"memory/only-{AGENTS.index('bob')}.md").text == ""  # not alice's file
    for bad in ("../ws1/MEMORY.md", "/etc/passwd", "memory/../../ws1/MEMORY.md"):
        with pytest.raises(PathNotAllowedError):
            alice.read(bad)


def test_resync_of_one_agent_leaves_the_others_alone(populated: dict[str, MemoryIndex]) -> None:
    alice, bob = populated["alice"], populated["bob"]
    before = [(r.path, r.start_line) for r in bob.search(_secret(1), min_score=0)]
    alice.sync(force=True)
    for p in alice.workspace.rglob("*.md"):
        p.unlink()
    alice.mark_dirty()
    alice.sync()
    assert alice.status().files == 0
    assert [(r.path, r.start_line) for r in bob.search(_secret(1), min_score=0)] == before
    assert bob.status().files == 3


def test_password_never_shows(tmp_path: Path, pg_url: str, caplog: pytest.LogCaptureFixture) -> None:
    password = "Sup3r-s3cret-pw"
    # the embedded server trusts local connections, so any password is accepted
    url = pg_url.replace("postgres:@", f"postgres:{password}@", 1)
    assert password in url
    ws = write(tmp_path / "ws", {"MEMORY.md": "- a note\n"})
    caplog.set_level(logging.DEBUG)
    cfg: dict[str, Any] = {"store": {"url": url}, "provider": "none"}
    with MemoryIndex(ws, config=cfg, state_dir=tmp_path / "s") as mem:
        mem.sync()
        shown = [repr(mem), repr(mem.config), str(mem.config.to_dict()), str(mem.status()), repr(mem._store),
                 repr(mem._stores.backend), str(mem.status().to_dict() if hasattr(mem.status(), "to_dict") else "")]
    for text in shown:
        assert password not in text
    # a server that cannot be reached: the error names the URL without its password
    bad = f"postgresql://postgres:{password}@127.0.0.1:1/nowhere?connect_timeout=2"
    with pytest.raises(ClawmemError) as err:
        MemoryIndex(ws, agent_id="other", config={"store": {"url": bad}, "provider": "none"}, state_dir=tmp_path / "s")
    assert isinstance(err.value, StoreError)
    assert password not in str(err.value) and "127.0.0.1" in str(err.value)
    assert password not in caplog.text


def test_store_url_from_the_environment(tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAWMEM_STORE_URL", pg_url)
    ws = write(tmp_path / "ws", {"MEMORY.md": "- espresso every morning\n"})
    with MemoryIndex(ws, config={"provider": "none"}, state_dir=tmp_path / "s") as mem:
        assert mem.store_path is None and mem.status().vector["backend"] == "pgvector"
        assert [r.path for r in mem.search("espresso")] == ["MEMORY.md"]
    assert not (tmp_path / "s" / "memory").exists()  # no SQLite file was made
    monkeypatch.setenv("CLAWMEM_STORE_URL", "mysql://nope")
    with pytest.raises(ClawmemError):
        MemoryIndex(ws, config={"provider": "none"}, state_dir=tmp_path / "s")


def test_cli_store_option(tmp_path: Path, pg_url: str, capsys: pytest.CaptureFixture[str],
                          monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from clawmem_core.cli import main

    monkeypatch.setenv("CLAWMEM_STATE_DIR", str(tmp_path / "state"))
    ws = write(tmp_path / "ws", {"MEMORY.md": "- the boat is called Marlin\n"})
    assert main(["--workspace", str(ws), "--store", pg_url, "--provider", "none", "index"]) == 0
    capsys.readouterr()
    assert main(["--workspace", str(ws), "--store", pg_url, "--provider", "none", "search", "Marlin", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert [r["path"] for r in payload["results"]] == ["MEMORY.md"]
    assert not (tmp_path / "state" / "memory").exists()
    assert main(["--workspace", str(ws), "--store", "sqlite:///x", "status"]) != 0
