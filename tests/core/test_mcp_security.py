"""``clawmem mcp --transport http`` on a network: Host/Origin checks whatever the bind address,
bearer tokens, the refusal to listen off loopback without them, ``--read-only``, a stateless
transport (no session table one client can fill) and the access log; against a real server
process over real HTTP. Also: the server on ``mcp`` 1.x (what ``langchain-mcp-adapters``
installs), the ``session_key`` reaching the tools, and a replica never offering ``memory_write``."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

pytest.importorskip("mcp")
httpx = pytest.importorskip("httpx")

from mcp import Client, StdioServerParameters  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

from clawmem_core import MemoryIndex  # noqa: E402
from clawmem_core.errors import ConfigError, MissingDependencyError  # noqa: E402
from clawmem_core.mcp_server import (  # noqa: E402
    MCP_REQUIREMENT,
    TOKEN_ENV,
    _require_mcp,
    allowed_hosts_for,
    create_server,
    is_loopback,
    load_tokens,
)

from .conftest import SAMPLE_FILES, WorkspaceFactory, tree_digest  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TOKEN = "tok-4f9c2b7e1a6d8c3f5e0b9a7d"
OTHER_TOKEN = "tok-0000000000000000000000"
HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
#: A query whose text must never reach the access log.
SECRET_QUERY = "espresso 秘密-query-7c1e"


class ServerProcess:
    """A ``clawmem mcp --transport http`` child process; its stderr lines are collected."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self.url = ""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def wait_ready(self, timeout: float = 90) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                found = re.search(r" at (http://\S+)", line)
                if found:
                    self.url = found.group(1)
                    return self.url
            if self.proc.poll() is not None:
                self._reader.join(5)
                raise AssertionError("the server exited: " + "\n".join(self.lines))
            time.sleep(0.05)
        raise AssertionError("the server did not start: " + "\n".join(self.lines))

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        self._reader.join(10)
        return "\n".join(self.lines)

    def rpc(self, method: str, params: dict[str, Any] | None = None, *, headers: dict[str, str] | None = None,
            url: str | None = None) -> httpx.Response:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
        return httpx.post(url or self.url, headers={**HEADERS, **(headers or {})}, json=body, timeout=60)


def _env(tmp_path: Path, first_on_path: Path | None = None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and k != TOKEN_ENV}
    env["CLAWMEM_STATE_DIR"] = str(tmp_path / "server-state")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(first_on_path or ""), str(REPO), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def spawn(ws: Path, tmp_path: Path, *args: str, first_on_path: Path | None = None,
          **env: str) -> ServerProcess:
    command = [sys.executable, "-m", "clawmem_core.cli", "--workspace", str(ws), "--provider", "none", "mcp",
               "--transport", "http", "--port", "0", "--no-watch", *args]
    proc = subprocess.Popen(command, env=_env(tmp_path, first_on_path, **env), cwd=str(tmp_path),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, encoding="utf-8")
    return ServerProcess(proc)


@pytest.fixture
def servers() -> Iterator[list[ServerProcess]]:
    started: list[ServerProcess] = []
    yield started
    for server in started:
        server.stop()


@pytest.fixture
def ws(make_workspace: WorkspaceFactory) -> Path:
    return make_workspace(SAMPLE_FILES)


def _start(servers: list[ServerProcess], ws: Path, tmp_path: Path, *args: str, **env: str) -> ServerProcess:
    server = spawn(ws, tmp_path, *args, **env)
    servers.append(server)
    server.wait_ready()
    return server


def _result(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    return response.json()["result"]


def _search(server: ServerProcess, query: str, **headers: str) -> dict[str, Any]:
    result = _result(server.rpc("tools/call", {"name": "memory_search", "arguments": {"query": query}},
                                headers=headers))
    return json.loads(result["content"][0]["text"])


WRITE = {"name": "memory_write", "arguments": {"text": "- attacker was here", "target": "long_term"}}


# -- 16: Host and Origin, whatever the bind address -------------------------------------------------


def test_a_foreign_host_is_refused_on_every_loopback_address(servers: list[ServerProcess], ws: Path,
                                                             tmp_path: Path) -> None:
    """127.0.0.2 is loopback too but was outside the SDK's own list: a DNS-rebound page (Host:
    attacker.example) read MEMORY.md and appended to it."""
    server = _start(servers, ws, tmp_path, "--host", "127.0.0.2")
    assert server.url.startswith("http://127.0.0.2:")
    before = tree_digest(ws)
    rebound = {"host": "attacker.example"}
    for method, params in (("tools/list", {}), ("tools/call", WRITE),
                           ("tools/call", {"name": "memory_get", "arguments": {"path": "MEMORY.md"}})):
        refused = server.rpc(method, params, headers=rebound)
        assert refused.status_code == 421 and "allowed-host" in refused.json()["error"]
    assert tree_digest(ws) == before
    # the bind address itself and the loopback names are served
    assert _search(server, "espresso")["results"][0]["path"] == "MEMORY.md"


def test_a_foreign_origin_is_refused(servers: list[ServerProcess], ws: Path, tmp_path: Path) -> None:
    server = _start(servers, ws, tmp_path, "--host", "127.0.0.2")
    before = tree_digest(ws)
    for origin in ("http://attacker.example", "http://attacker.example:80", "null", "file://"):
        refused = server.rpc("tools/call", WRITE, headers={"origin": origin})
        assert refused.status_code == 403, origin
    assert tree_digest(ws) == before
    port = server.url.split(":")[2].split("/")[0]
    assert server.rpc("tools/list", headers={"origin": f"http://127.0.0.2:{port}"}).status_code == 200


def test_allowed_host_adds_a_name(servers: list[ServerProcess], ws: Path, tmp_path: Path) -> None:
    server = _start(servers, ws, tmp_path, "--allowed-host", "memory.lan")
    assert server.rpc("tools/list", headers={"host": "memory.lan:8765"}).status_code == 200
    assert server.rpc("tools/list", headers={"host": "memory.lan.evil.example"}).status_code == 421
    assert server.rpc("tools/list", headers={"host": "evil-memory.lan"}).status_code == 421


def test_allowed_hosts_and_loopback() -> None:
    assert allowed_hosts_for("127.0.0.1") == ("127.0.0.1", "localhost", "[::1]")
    assert allowed_hosts_for("0.0.0.0") == ("127.0.0.1", "localhost", "[::1]")  # a wildcard names no host
    assert allowed_hosts_for("::1") == ("127.0.0.1", "localhost", "[::1]")
    assert allowed_hosts_for("10.1.2.3", ["Mem.LAN", "box:9000"]) == (
        "127.0.0.1", "localhost", "[::1]", "10.1.2.3", "mem.lan", "box:9000")
    with pytest.raises(ConfigError, match="allowed host"):
        allowed_hosts_for("127.0.0.1", ["box:http"])
    assert is_loopback("127.0.0.2") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("192.168.1.5")
    assert not is_loopback("memory.lan")


# -- 16: tokens ------------------------------------------------------------------------------------


def test_tokens_are_required_when_given(servers: list[ServerProcess], ws: Path, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps([OTHER_TOKEN, TOKEN]), encoding="utf-8")
    server = _start(servers, ws, tmp_path, "--tokens", str(tokens))
    before = tree_digest(ws)
    for headers in ({}, {"authorization": "Bearer wrong-token-000000000"}, {"authorization": f"Basic {TOKEN}"},
                    {"authorization": f"Bearer {TOKEN}x"}, {"authorization": f"Bearer {TOKEN[:-1]}"}):
        refused = server.rpc("tools/call", WRITE, headers=headers)
        assert refused.status_code == 401, headers
        assert refused.headers["www-authenticate"].startswith("Bearer")
    assert tree_digest(ws) == before
    for token in (TOKEN, OTHER_TOKEN):
        assert _search(server, "espresso", authorization=f"Bearer {token}")["results"][0]["path"] == "MEMORY.md"
    # a right token does not excuse a foreign Host
    assert server.rpc("tools/list", headers={"authorization": f"Bearer {TOKEN}", "host": "attacker.example"}
                      ).status_code == 421
    log = server.stop()
    assert TOKEN not in log and OTHER_TOKEN not in log and "wrong-token" not in log


def test_the_token_from_the_environment(servers: list[ServerProcess], ws: Path, tmp_path: Path) -> None:
    server = _start(servers, ws, tmp_path, **{TOKEN_ENV: TOKEN})
    assert server.rpc("tools/list").status_code == 401
    assert server.rpc("tools/list", headers={"authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_a_non_loopback_bind_needs_tokens_or_insecure(servers: list[ServerProcess], ws: Path,
                                                      tmp_path: Path) -> None:
    refused = spawn(ws, tmp_path, "--host", "0.0.0.0")
    servers.append(refused)
    assert refused.proc.wait(90) == 1
    message = refused.stop()
    assert "refusing to serve MCP on 0.0.0.0 without tokens" in message and "--insecure" in message
    assert "--tokens" in message and "Traceback" not in message

    insecure = _start(servers, ws, tmp_path, "--host", "0.0.0.0", "--insecure", "--read-only")
    assert insecure.url.startswith("http://0.0.0.0:")
    local = insecure.url.replace("//0.0.0.0:", "//127.0.0.1:")
    assert insecure.rpc("tools/list", url=local).status_code == 200


def test_token_files_must_be_a_list_of_tokens(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    cases = {
        json.dumps({TOKEN: "agent-a"}): "can be read by other users (mode 644); chmod 600",
        json.dumps(42): "holds int: expected a JSON list of token strings",
        json.dumps(TOKEN): "holds a string: expected a JSON list",
        json.dumps([TOKEN, 42]): "entry 2: a token must be a string",
        json.dumps(["short"]): "entry 1: a token must be at least 16 characters",
        json.dumps([f" {TOKEN}"]): "must not hold spaces",
        json.dumps([]): "lists no token",
        "[" + TOKEN: "is not JSON",
    }
    for text, expected in cases.items():
        path.write_text(text, encoding="utf-8")
        path.chmod(0o644)
        with pytest.raises(ConfigError, match=re.escape(expected)) as caught:
            load_tokens(path, env={})
        assert TOKEN not in str(caught.value) and "short" not in str(caught.value)
    with pytest.raises(ConfigError, match="cannot be read"):
        load_tokens(tmp_path / "missing.json", env={})
    path.write_text(json.dumps([TOKEN]), encoding="utf-8")
    assert [t.token for t in load_tokens(path, env={TOKEN_ENV: OTHER_TOKEN})] == [TOKEN, OTHER_TOKEN]
    assert TOKEN not in repr(load_tokens(path, env={}))
    assert load_tokens(None, env={}) == ()


# -- 16: --read-only and the access log --------------------------------------------------------------


def test_read_only_leaves_memory_write_out(servers: list[ServerProcess], ws: Path, tmp_path: Path) -> None:
    server = _start(servers, ws, tmp_path, "--read-only")
    names = {t["name"] for t in _result(server.rpc("tools/list"))["tools"]}
    assert names == {"memory_search", "memory_get"}
    before = tree_digest(ws)
    attempt = server.rpc("tools/call", WRITE).json()
    assert "error" in attempt or attempt["result"]["isError"] is True
    assert tree_digest(ws) == before
    assert "memory_search, memory_get;" in server.lines[0]  # the start line says what is served


def test_one_access_log_line_per_call_without_arguments_or_tokens(servers: list[ServerProcess], ws: Path,
                                                                  tmp_path: Path) -> None:
    server = _start(servers, ws, tmp_path, **{TOKEN_ENV: TOKEN})
    auth = {"authorization": f"Bearer {TOKEN}"}
    assert "results" in _search(server, SECRET_QUERY, **auth)
    server.rpc("tools/call", {"name": "memory_get", "arguments": {"path": "memory/../../etc/passwd"}}, headers=auth)
    server.rpc("tools/call", {"name": "drop\ntable-secret", "arguments": {}}, headers=auth)
    server.rpc("tools/list", headers={"authorization": "Bearer guessed-token-123456"})
    log = server.stop()
    lines = [line for line in log.splitlines() if line.startswith("clawmem mcp: ")]
    assert len(lines) == 4, log
    stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4}"
    assert re.fullmatch(rf"clawmem mcp: {stamp} 127\.0\.0\.1:\d+ POST /mcp tools/call memory_search ok 200 \d+ms",
                        lines[0]), lines[0]
    assert re.fullmatch(rf".* POST /mcp tools/call memory_get tool-error 200 \d+ms", lines[1]), lines[1]
    assert re.fullmatch(rf".* POST /mcp tools/call unknown-tool rpc-error 200 \d+ms", lines[2]), lines[2]
    assert re.fullmatch(rf".* POST /mcp refused 401 \(.*\) \d+ms", lines[3]), lines[3]
    for secret in (TOKEN, "guessed-token", "秘密", "7c1e", "espresso", "passwd", "table-secret"):
        assert secret not in log


# -- 17: stateless: one client cannot fill a session table ---------------------------------------------


def test_no_client_can_hold_sessions(servers: list[ServerProcess], ws: Path, tmp_path: Path) -> None:
    """The SDK's stateful default kept up to 10,000 sessions for 30 minutes each, so one client could
    open them all and every other client got 503. Stateless, the server keeps none."""
    server = _start(servers, ws, tmp_path)
    init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "greedy", "version": "1"}}
    with httpx.Client(headers=HEADERS, timeout=60) as greedy:
        for i in range(40):
            reply = greedy.post(server.url, json={"jsonrpc": "2.0", "id": i, "method": "initialize", "params": init})
            assert reply.status_code == 200
            assert "mcp-session-id" not in reply.headers  # nothing is kept for this client
    # another client, with the SDK's own client, is served
    async def other() -> dict[str, Any]:
        async with Client(server.url) as client:
            return (await client.call_tool("memory_search", {"query": "espresso"})).structured_content

    assert asyncio.run(other())["results"][0]["path"] == "MEMORY.md"


# -- 31: the session key reaches the tools ------------------------------------------------------------


@pytest.mark.asyncio
async def test_the_session_key_reaches_every_search(make_workspace: WorkspaceFactory, open_index: Any) -> None:
    """citations auto: a group chat's key turns the Source lines off; a direct chat keeps them."""
    mem = open_index(make_workspace(SAMPLE_FILES), embedder="hash")
    cited = {}
    for key in (None, "telegram:direct:dana", "discord:group:42", "slack/channel/general"):
        async with Client(create_server(mem, session_key=key)) as client:
            payload = (await client.call_tool("memory_search", {"query": "espresso"})).structured_content
        top = payload["results"][0]
        cited[key] = "Source: MEMORY.md" in top["snippet"] and top["citation"] is not None
    assert cited == {None: True, "telegram:direct:dana": True, "discord:group:42": False,
                     "slack/channel/general": False}


def test_the_cli_passes_its_session_key(servers: list[ServerProcess], ws: Path, tmp_path: Path) -> None:
    server = _start(servers, ws, tmp_path, "--session-key", "discord:group:42")
    top = _search(server, "espresso")["results"][0]
    assert top["citation"] is None and "Source:" not in top["snippet"]


# -- 18: mcp 1.x, what langchain-mcp-adapters installs --------------------------------------------------


def test_an_unsupported_mcp_is_one_line_naming_the_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    import clawmem_core.mcp_server as server

    monkeypatch.setattr(server, "_mcp_version", lambda: (1, 9, 4))
    with pytest.raises(MissingDependencyError) as caught:
        _require_mcp()
    assert str(caught.value) == (f"the MCP server needs {MCP_REQUIREMENT}, found mcp 1.9.4: "
                                 f"pip install '{MCP_REQUIREMENT}'")


@pytest.fixture(scope="session")
def mcp1(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``mcp`` 1.x installed into a temporary directory (not the environment), with the two small
    packages it needs that 2.x does not."""
    version = request.param
    target = tmp_path_factory.mktemp(f"mcp-{version}")
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
             "--target", str(target), f"mcp=={version}", "httpx-sse>=0.4,<1", "pydantic-settings>=2.5.2,<3",
             "python-dotenv>=1.0,<2"],
            capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"mcp {version} could not be installed: {exc}")
    if done.returncode != 0:
        pytest.skip(f"mcp {version} could not be installed (is the package index reachable?): "
                    f"{done.stderr.strip().splitlines()[-1:] or done.returncode}")
    return target


@pytest.mark.parametrize("mcp1", ["1.24.0", "1.30.0"], indirect=True)
def test_the_server_runs_on_mcp_1(mcp1: Path, servers: list[ServerProcess], ws: Path, tmp_path: Path) -> None:
    probe = subprocess.run([sys.executable, "-c", "import importlib.metadata as m, mcp; print(m.version('mcp'))"],
                           env=_env(tmp_path, mcp1), capture_output=True, text=True, timeout=120)
    assert probe.stdout.strip().startswith("1."), probe.stderr

    server = spawn(ws, tmp_path, **{TOKEN_ENV: TOKEN}, first_on_path=mcp1)
    servers.append(server)
    server.wait_ready()
    auth = {"authorization": f"Bearer {TOKEN}"}
    assert server.rpc("tools/list").status_code == 401
    assert server.rpc("tools/list", headers={**auth, "host": "attacker.example"}).status_code == 421
    names = [t["name"] for t in _result(server.rpc("tools/list", headers=auth))["tools"]]
    assert names == ["memory_search", "memory_get", "memory_write"]
    assert _search(server, "espresso", **auth)["results"][0]["path"] == "MEMORY.md"
    wrote = json.loads(_result(server.rpc("tools/call", {"name": "memory_write", "arguments": {
        "text": "- 王芳 prefers oolong", "target": "long_term"}}, headers=auth))["content"][0]["text"])
    assert wrote["path"] == "MEMORY.md"
    bad = _result(server.rpc("tools/call", {"name": "memory_get", "arguments": {"path": "MEMORY.md", "from": 0}},
                             headers=auth))
    assert bad["isError"] is True and "from" in json.loads(bad["content"][0]["text"])["error"]
    assert _search(server, "王芳 oolong", **auth)["results"][0]["path"] == "MEMORY.md"
    assert "Traceback" not in server.stop()

    # stdio, with the 2.x client of this process talking to the 1.x server
    params = StdioServerParameters(command=sys.executable, env=_env(tmp_path, mcp1), cwd=str(tmp_path), args=[
        "-m", "clawmem_core.cli", "--workspace", str(ws), "--provider", "none", "mcp", "--no-watch", "--read-only"])

    async def stdio() -> tuple[set[str], dict[str, Any]]:
        async with Client(params, read_timeout_seconds=120) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            found = await client.call_tool("memory_search", {"query": "oolong"})
            return tools, found.structured_content

    tools, found = asyncio.run(stdio())
    assert tools == {"memory_search", "memory_get"} and found["results"][0]["path"] == "MEMORY.md"


# -- 19: a replica never offers memory_write ----------------------------------------------------------


def test_a_replica_server_does_not_list_memory_write(tmp_path: Path, pg_url: str) -> None:
    team = tmp_path / "team"
    (team / "memory").mkdir(parents=True)
    (team / "MEMORY.md").write_text("# Team\n\nThe deploy freeze starts on Fridays.\n", encoding="utf-8")
    with MemoryIndex(team, agent_id="team", config={"store": {"url": pg_url}, "provider": "none"},
                     state_dir=tmp_path / "team-state") as mem:
        mem.sync()
    with MemoryIndex(None, agent_id="team", config={"store": {"url": pg_url}, "provider": "none"},
                     state_dir=tmp_path / "replica-state") as replica:

        async def session() -> tuple[set[str], dict[str, Any]]:
            async with Client(create_server(replica)) as client:
                tools = {t.name for t in (await client.list_tools()).tools}
                found = (await client.call_tool("memory_search", {"query": "deploy freeze"})).structured_content
                with pytest.raises(MCPError, match="unknown tool 'memory_write'"):
                    await client.call_tool("memory_write", {"text": "a note"})
                return tools, found

        tools, found = asyncio.run(session())
    assert tools == {"memory_search", "memory_get"}
    assert found["replica"] is True and found["results"][0]["path"] == "MEMORY.md"


def test_http_flags_with_stdio_are_a_clear_error(ws: Path, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "clawmem_core.cli", "--workspace", str(ws), "--provider", "none",
                           "mcp", "--insecure", "--allowed-host", "memory.lan"], env=_env(tmp_path),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip() == ("clawmem: error: --allowed-host, --insecure: only for --transport http (a stdio "
                                   "server answers only the client that started it)")
