"""``clawmem mcp --transport http --tokens FILE`` for many users: a token file mapping each bearer
token to an agent; one server process, each caller seeing only its own agent's memory (SQLite with
a workspace per agent under ``--workspaces-root``, and PostgreSQL), over real HTTP."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")
httpx = pytest.importorskip("httpx")

from clawmem_core.errors import ConfigError  # noqa: E402
from clawmem_core.mcp_server import load_tokens  # noqa: E402

from .test_mcp_security import ServerProcess, _env, servers  # noqa: E402,F401 (servers: the fixture)

ALICE = "alice-token-5b1e9d7c3a2f8e60"
BOB = "bob-token-0c7f2e9a4d1b6e83"
CAROL = "carol-token-9e3d1c7b5a2f0e46"
READER = "reader-token-7a6c2e0d9b4f1e35"
UNKNOWN = "nobody-token-1f2e3d4c5b6a7980"
ENGLISH = "# Alice\n\nAlice takes her espresso with oat milk every morning.\n"
CHINESE = "# 小明\n\n小明每天早上喝乌龙茶，他不喝咖啡。\n"


def _token_file(path: Path, mapping: Any, mode: int = 0o600) -> Path:
    path.write_text(json.dumps(mapping, ensure_ascii=False), encoding="utf-8")
    path.chmod(mode)
    return path


def _spawn(tmp_path: Path, tokens: Path, *args: str, store: str | None = None) -> ServerProcess:
    own = tmp_path / "own"
    own.mkdir(exist_ok=True)
    command = [sys.executable, "-m", "clawmem_core.cli", "--workspace", str(own), "--provider", "none",
               *(("--store", store) if store else ()),
               "mcp", "--transport", "http", "--port", "0", "--no-watch", "--tokens", str(tokens), *args]
    proc = subprocess.Popen(command, env=_env(tmp_path), cwd=str(tmp_path), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, encoding="utf-8")
    return ServerProcess(proc)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "agents"
    for agent, text in (("alice", ENGLISH), ("bob", CHINESE), ("carol", "# Carol\n\nCarol plays the cello.\n")):
        (root / agent / "memory").mkdir(parents=True)
        (root / agent / "MEMORY.md").write_text(text, encoding="utf-8")
    return root


def _start(servers: list[ServerProcess], tmp_path: Path, tokens: Path, *args: str,
           store: str | None = None) -> ServerProcess:
    server = _spawn(tmp_path, tokens, *args, store=store)
    servers.append(server)
    server.wait_ready()
    return server


def _auth(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def _call(server: ServerProcess, token: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    response = server.rpc("tools/call", {"name": name, "arguments": arguments}, headers=_auth(token))
    assert response.status_code == 200, response.text
    return response.json()["result"]


def _paths_and_text(server: ServerProcess, token: str, query: str) -> str:
    return json.dumps(_call(server, token, "memory_search", {"query": query})["structuredContent"],
                      ensure_ascii=False)


def _tools(server: ServerProcess, token: str) -> set[str]:
    response = server.rpc("tools/list", headers=_auth(token))
    assert response.status_code == 200, response.text
    return {t["name"] for t in response.json()["result"]["tools"]}


def _two_users(servers: list[ServerProcess], tmp_path: Path, root: Path, store: str | None = None) -> None:
    tokens = _token_file(tmp_path / "users.json", {ALICE: "alice", BOB: {"agent": "bob"},
                                                    READER: {"agent": "alice", "read_only": True}})
    server = _start(servers, tmp_path, tokens, "--workspaces-root", str(root), store=store)
    # each caller finds its own notes, never the other's (English and Chinese)
    alice = _paths_and_text(server, ALICE, "espresso oat milk")
    assert "oat milk" in alice and "乌龙茶" not in alice
    assert "乌龙茶" not in _paths_and_text(server, ALICE, "乌龙茶")
    bob = _paths_and_text(server, BOB, "乌龙茶")
    assert "乌龙茶" in bob and "espresso" not in bob
    assert "espresso" not in _paths_and_text(server, BOB, "espresso oat milk")
    # memory_get reads the caller's own files only
    own = json.dumps(_call(server, BOB, "memory_get", {"path": "MEMORY.md"}), ensure_ascii=False)
    assert "乌龙茶" in own and "espresso" not in own
    for path in ("../alice/MEMORY.md", str(root / "alice" / "MEMORY.md")):
        other = json.dumps(_call(server, BOB, "memory_get", {"path": path}), ensure_ascii=False)
        assert "espresso" not in other
    # a read-only token: no memory_write listed, and a write is refused (nothing written)
    assert _tools(server, ALICE) == {"memory_search", "memory_get", "memory_write"}
    assert _tools(server, READER) == {"memory_search", "memory_get"}
    refused = server.rpc("tools/call", {"name": "memory_write", "arguments": {"text": "- reader was here"}},
                         headers=_auth(READER))
    assert "reader was here" not in (root / "alice" / "MEMORY.md").read_text(encoding="utf-8")
    assert refused.status_code != 200 or "error" in refused.json() or refused.json()["result"].get("isError")
    written = _call(server, ALICE, "memory_write", {"text": "- Alice bought a bike", "target": "long_term"})
    assert not written.get("isError"), written
    assert "bought a bike" in (root / "alice" / "MEMORY.md").read_text(encoding="utf-8")
    assert "bought a bike" not in (root / "bob" / "MEMORY.md").read_text(encoding="utf-8")
    # no token or an unknown one: 401
    assert server.rpc("tools/list").status_code == 401
    assert server.rpc("tools/list", headers=_auth(UNKNOWN)).status_code == 401
    log = server.stop()
    assert "agent=alice" in log and "agent=bob" in log
    for token in (ALICE, BOB, READER, UNKNOWN):
        assert token not in log


def test_two_tokens_two_agents_on_sqlite(servers: list[ServerProcess], tmp_path: Path, root: Path) -> None:
    _two_users(servers, tmp_path, root)


def test_two_tokens_two_agents_on_postgresql(servers: list[ServerProcess], tmp_path: Path, root: Path,
                                             pg_url: str) -> None:
    _two_users(servers, tmp_path, root, pg_url)


def test_a_token_file_others_can_read_is_refused_at_start(tmp_path: Path, root: Path) -> None:
    tokens = _token_file(tmp_path / "users.json", {ALICE: "alice"}, mode=0o644)
    server = _spawn(tmp_path, tokens, "--workspaces-root", str(root))
    assert server.proc.wait(120) == 1
    text = server.stop()
    assert "can be read by other users (mode 644); chmod 600" in text and "Traceback" not in text
    assert ALICE not in text


def test_mapped_tokens_on_sqlite_need_a_workspaces_root(tmp_path: Path) -> None:
    tokens = _token_file(tmp_path / "users.json", {ALICE: "alice"})
    server = _spawn(tmp_path, tokens)
    assert server.proc.wait(120) == 1
    assert "--workspaces-root DIR" in server.stop()


def _poll(check: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout  # a guard only: the loop ends as soon as the check holds
    while True:
        got = check()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def test_the_token_file_is_read_again_when_it_changes(servers: list[ServerProcess], tmp_path: Path,
                                                      root: Path) -> None:
    tokens = _token_file(tmp_path / "users.json", {ALICE: "alice", BOB: "bob"})
    server = _start(servers, tmp_path, tokens, "--workspaces-root", str(root))
    assert server.rpc("tools/list", headers=_auth(CAROL)).status_code == 401
    # a bad new file keeps the tokens in force and says why
    _token_file(tokens, {ALICE: "alice", BOB: 42})
    assert server.rpc("tools/list", headers=_auth(ALICE)).status_code == 200  # the file is looked at per request
    assert _poll(lambda: any("tokens read before stay in force" in line for line in server.lines))
    assert server.rpc("tools/list", headers=_auth(BOB)).status_code == 200
    # a third token added (a new file moved in place, as editors and deploy tools do)
    fresh = _token_file(tmp_path / "users.json.new", {ALICE: "alice", BOB: "bob", CAROL: "carol"})
    os.replace(fresh, tokens)
    assert _poll(lambda: server.rpc("tools/list", headers=_auth(CAROL)).status_code == 200)
    assert "cello" in _paths_and_text(server, CAROL, "cello")
    assert "cello" not in _paths_and_text(server, ALICE, "cello")
    # a token taken out is refused
    _token_file(tokens, {ALICE: "alice"})
    assert _poll(lambda: server.rpc("tools/list", headers=_auth(BOB)).status_code == 401)
    log = server.stop()
    assert CAROL not in log and BOB not in log


def test_the_list_form_serves_the_servers_own_index(servers: list[ServerProcess], tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps([ALICE, BOB]), encoding="utf-8")  # readable by others: allowed, as before
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "MEMORY.md").write_text(CHINESE, encoding="utf-8")
    server = _start(servers, tmp_path, tokens)
    for token in (ALICE, BOB):
        assert "乌龙茶" in _paths_and_text(server, token, "乌龙茶")
        assert _tools(server, token) == {"memory_search", "memory_get", "memory_write"}
    assert server.rpc("tools/list", headers=_auth(UNKNOWN)).status_code == 401


def test_token_objects_are_checked(tmp_path: Path) -> None:
    path = tmp_path / "users.json"
    cases = {
        json.dumps({ALICE: 42}): "expected an agent id",
        json.dumps({ALICE: {"agent": "alice", "admin": True}}): "unknown key(s) 'admin'",
        json.dumps({ALICE: {"read_only": True}}): '"agent" must be an agent id',
        json.dumps({ALICE: {"agent": "alice", "read_only": "yes"}}): '"read_only" must be true or false',
        json.dumps({ALICE: {"agent": "alice", "shared": "team"}}): '"shared" must be a list',
        json.dumps({"short": "alice"}): "at least 16 characters",
        json.dumps({}): "maps no token",
    }
    for text, expected in cases.items():
        _token_file(path, {})
        path.write_text(text, encoding="utf-8")
        with pytest.raises(ConfigError, match=re.escape(expected)) as caught:
            load_tokens(path, env={})
        assert ALICE not in str(caught.value)
    _token_file(path, {ALICE: "alice", BOB: {"agent": "bob", "read_only": True, "shared": ["team"]}})
    alice, bob = load_tokens(path, env={})
    assert (alice.agent, alice.read_only, alice.shared) == ("alice", False, None)
    assert (bob.agent, bob.read_only, bob.shared) == ("bob", True, ("team",))
    assert ALICE not in repr(alice)


def test_a_tokens_shared_namespaces_on_postgresql(servers: list[ServerProcess], tmp_path: Path, root: Path,
                                                  pg_url: str) -> None:
    from clawmem_core import MemoryIndex

    team = tmp_path / "team"
    (team / "memory").mkdir(parents=True)
    (team / "MEMORY.md").write_text("# Team\n\nThe deploy freeze starts on Fridays.\n", encoding="utf-8")
    with MemoryIndex(team, agent_id="team", config={"store": {"url": pg_url}, "provider": "none"},
                     state_dir=tmp_path / "team-state") as mem:
        mem.sync()
    tokens = _token_file(tmp_path / "users.json", {ALICE: "alice", BOB: {"agent": "bob", "shared": ["team"]}})
    server = _start(servers, tmp_path, tokens, "--workspaces-root", str(root), store=pg_url)
    assert "deploy freeze" in _paths_and_text(server, BOB, "deploy freeze Fridays")
    assert "deploy freeze" not in _paths_and_text(server, ALICE, "deploy freeze Fridays")
