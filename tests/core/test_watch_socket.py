"""A running ``clawmem watch`` answers ``clawmem search`` and ``get`` over a Unix socket beside its
index (:mod:`clawmem_core.watch_socket`): the same output and exit code as the command run by
itself, every edit that finished before the command is seen (SPEC 6), and anything wrong on the
way (no watcher, a stale or foreign socket, another user, another index or settings, a malformed
or oversized message, a watcher gone mid-request) makes the command run itself."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from clawmem_core import MemoryConfig, MemoryIndex, cli, watch_socket
from clawmem_core.index import workspace_index_name
from clawmem_core.watch_socket import WatchServer, answer, socket_path

from .conftest import WorkspaceFactory
from .test_change_journal import journal_running

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="served on Linux only (SO_PEERCRED)")

REPO = Path(__file__).resolve().parents[2]
FILES = {
    "MEMORY.md": "# Memory\n\n- The build server is called hopper.\n- 我们的数据库叫做青龙。\n",
    "memory/2026-01-05.md": "# Standup\n\n- Deployed the billing service to kubernetes.\n",
    "memory/2026-01-06.md": "# Standup\n\n- 今天讨论了数据库升级和缓存失效。\n",
}
COMMON = ["--provider", "none"]


@pytest.fixture
def ws(make_workspace: WorkspaceFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CLAWMEM_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv(watch_socket.ENV_SWITCH, raising=False)
    return make_workspace(FILES)


class Served:
    """An index as ``clawmem watch --provider none`` holds it (synced twice: its change journal
    runs), answering on its socket in this process."""

    def __init__(self, ws: Path, **options: Any) -> None:
        args = cli.build_parser().parse_args(["--workspace", str(ws), *COMMON, *options.pop("argv", []), "watch"])
        self.mem = MemoryIndex(ws, agent_id=args.agent, config=cli._config(args))
        self.mem.fresh_budget = 60.0
        self.mem.sync()
        self.mem.sync()
        self.server = cli._serve_cli(self.mem, args)
        assert self.server is not None
        self.path = self.server.path

    def close(self) -> None:
        self.server.close()
        self.mem.close()


@pytest.fixture
def served(ws: Path) -> Iterator[Served]:
    s = Served(ws)
    yield s
    s.close()


def ask(argv: list[str]) -> tuple[int | None, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = answer(argv, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def by_itself(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(argv)  # argv given: the command runs here, never asking a watcher
    got = capsys.readouterr()
    return code, got.out, got.err


# -- the same answer ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tail", [
    ["search", "hopper"],
    ["search", "数据库", "--json"],
    ["search", "--query", "青龙", "--max-results", "1", "--min-score", "0"],
    ["search", "nothing-like-this-anywhere"],
    ["search", "   "],  # a missing query: an error, exit 1
    ["search", "kubernetes", "--json", "--no-record", "--wait", "0"],
    ["get", "MEMORY.md"],
    ["get", "MEMORY.md", "--from", "3", "--lines", "1"],
    ["get", "memory/2026-01-06.md", "--json"],
    ["get", "memory/missing.md"],  # missing: exit 1
    ["get", "MEMORY.md", "--from", "40"],  # past the end: exit 1
    ["get", "../outside.md"],  # not a memory path: exit 1
])
def test_the_watcher_answers_as_the_command_would(served: Served, ws: Path, capsys: pytest.CaptureFixture[str],
                                                  tail: list[str]) -> None:
    argv = ["--workspace", str(ws), *COMMON, *tail]
    expected = by_itself(capsys, argv)
    got = ask(argv)
    assert got == expected
    assert served.server.served >= 1


def test_from_the_workspace_without_workspace_option(served: Served, ws: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ws)
    code, out, _ = ask([*COMMON, "search", "hopper"])
    assert code == 0 and "hopper" in out


def test_an_edit_made_just_before_is_in_the_answer(served: Served, ws: Path) -> None:
    journal_running(served.mem)
    note = ws / "memory" / "2026-01-06.md"
    for i, word in enumerate(["zeppelin", "斑马线", "quokka"]):
        with note.open("a", encoding="utf-8") as fh:
            fh.write(f"- 第{i}次: the {word} note\n")
        code, out, _ = ask(["--workspace", str(ws), *COMMON, "search", word])  # at once: no debounce waited for
        assert code == 0 and word in out, out
    (ws / "memory" / "2026-01-05.md").unlink()
    code, out, _ = ask(["--workspace", str(ws), *COMMON, "search", "kubernetes"])
    assert code == 0 and out == "No matches.\n"
    assert served.mem._freshness.journal_scans > 0  # answered from the journal, without a walk


def test_without_a_change_journal_the_watcher_walks_before_answering(ws: Path) -> None:
    """No inotify (or a file system it cannot vouch for): the watcher still answers, after checking
    every file as the command would by itself."""
    s = Served.__new__(Served)
    args = cli.build_parser().parse_args(["--workspace", str(ws), *COMMON, "watch"])
    s.mem = MemoryIndex(ws, config=cli._config(args))
    s.mem.change_journal = False
    s.mem.sync()
    s.mem.sync()
    s.server = cli._serve_cli(s.mem, args)
    try:
        assert s.mem._freshness.journal is None
        with (ws / "MEMORY.md").open("a", encoding="utf-8") as fh:
            fh.write("- 新的笔记: the wombat audit\n")
        code, out, _ = ask(["--workspace", str(ws), *COMMON, "search", "wombat"])
        assert code == 0 and "wombat audit" in out
        assert s.mem._freshness.journal_scans == 0 and s.server.served == 1
    finally:
        s.close()


def test_many_files_changed_just_before_are_all_in_the_answer(served: Served, ws: Path) -> None:
    """More changed files than a library search syncs before answering (``fresh_max_files``): the
    command still syncs them all first, as it does by itself."""
    journal_running(served.mem)
    count = served.mem.fresh_max_files + 5
    for i in range(count):
        (ws / "memory" / f"2026-02-{i + 1:02d}.md").write_text(f"- 第{i}条笔记 marker{i} entry\n", encoding="utf-8")
    code, out, _ = ask(["--workspace", str(ws), *COMMON, "search", f"marker{count - 1}"])
    assert code == 0 and f"marker{count - 1} entry" in out, out


# -- who is answered ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("change", ["agent", "provider", "config", "env", "workspace", "replica", "switch"])
def test_another_index_or_other_settings_run_the_command_itself(served: Served, ws: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch, change: str) -> None:
    argv = ["--workspace", str(ws), *COMMON, "search", "hopper"]
    if change == "agent":
        argv = ["--agent", "other", *argv]
    elif change == "provider":
        argv = ["--workspace", str(ws), "--provider", "auto", "search", "hopper"]
    elif change == "config":
        (tmp_path / "c.json").write_text(json.dumps({"query": {"maxResults": 2}}))
        argv = ["--config", str(tmp_path / "c.json"), *argv]
    elif change == "env":
        monkeypatch.setenv("OPENAI_API_KEY", "sk-not-the-watchers")
    elif change == "workspace":
        other = tmp_path / "other"
        other.mkdir()
        argv = ["--workspace", str(other), *COMMON, "search", "hopper"]
    elif change == "replica":
        argv = [*COMMON, "--store", "postgresql://localhost/x", "--agent", "a", "search", "hopper"]
    else:
        monkeypatch.setenv(watch_socket.ENV_SWITCH, "0")
    assert ask(argv) == (None, "", "")
    assert ask(["--workspace", str(ws), *COMMON, "search", "hopper"])[0] in (0, None)


def test_a_watcher_with_a_config_file_answers_only_while_it_is_unchanged(ws: Path, tmp_path: Path) -> None:
    conf = tmp_path / "c.json"
    conf.write_text(json.dumps({"query": {"maxResults": 2}}))
    s = Served(ws, argv=["--config", str(conf)])
    try:
        argv = ["--workspace", str(ws), "--config", str(conf), *COMMON, "search", "hopper"]
        assert ask(argv)[0] == 0
        conf.write_text(json.dumps({"query": {"maxResults": 3}}))
        assert ask(argv) == (None, "", "")
    finally:
        s.close()


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to connect as another user")
def test_another_user_is_refused(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    state = Path(tempfile.mkdtemp(prefix="clawmem-peer-"))  # directories another user may enter
    try:
        state.chmod(0o755)
        (state / "memory").mkdir(mode=0o755)
        monkeypatch.setenv("CLAWMEM_STATE_DIR", str(state))
        served = Served(ws)
        try:
            os.chmod(served.path, 0o666)  # even when the socket file lets them connect
            refused = served.server.refused
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:  # the other user: connects and sends a request
                try:
                    os.close(read)
                    os.setgid(65534)
                    os.setuid(65534)
                    with socket.socket(socket.AF_UNIX) as s:
                        s.settimeout(30)
                        s.connect(served.path)
                        s.sendall(b'{"v": 1}\n')
                        os.write(write, b"got:" + s.recv(100))
                except BaseException as exc:
                    os.write(write, repr(exc).encode())
                finally:
                    os._exit(0)
            os.close(write)
            with os.fdopen(read, "rb") as fh:
                got = fh.read()
            os.waitpid(pid, 0)
            # connected (not stopped by the file's mode), then hung up on without a word (before or after
            # the request was sent)
            assert got == b"got:" or got.startswith((b"ConnectionResetError", b"BrokenPipeError")), got
            for _ in range(600):  # the refusal is counted just after the connection closes
                if served.server.refused > refused:
                    break
                time.sleep(0.05)
            assert served.server.refused == refused + 1 and served.server.served == 0
        finally:
            served.close()
    finally:
        import shutil

        shutil.rmtree(state, ignore_errors=True)


def test_a_socket_of_another_user_is_not_asked(served: Served, ws: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("needs root to give the socket away")
    os.chown(served.path, 65534, 65534)
    assert ask(["--workspace", str(ws), *COMMON, "search", "hopper"]) == (None, "", "")


# -- what is found at the socket's path -----------------------------------------------------------------------------


def _path_for(ws: Path) -> str:
    path = socket_path(str(ws), None)
    assert path is not None
    return path


@pytest.mark.parametrize("kind", ["file", "symlink"])
def test_a_file_or_symlink_at_the_path_is_left_alone_and_not_served(ws: Path, tmp_path: Path, kind: str) -> None:
    path = Path(_path_for(ws))
    path.parent.mkdir(parents=True, exist_ok=True)
    target = tmp_path / "elsewhere"
    target.write_text("mine")
    if kind == "file":
        path.write_text("mine")
    else:
        path.symlink_to(target)
    with MemoryIndex(ws, config=MemoryConfig(provider="none")) as mem:
        args = cli.build_parser().parse_args(["--workspace", str(ws), *COMMON, "watch"])
        assert cli._serve_cli(mem, args) is None
    assert path.is_symlink() == (kind == "symlink") and path.read_text() == "mine" and target.read_text() == "mine"
    assert ask(["--workspace", str(ws), *COMMON, "search", "hopper"]) == (None, "", "")


def test_a_stale_socket_is_not_answered_and_the_next_watcher_replaces_it(ws: Path) -> None:
    path = _path_for(ws)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(path)  # as a killed watcher leaves it: the file, nobody listening
    dead.close()
    assert ask(["--workspace", str(ws), *COMMON, "search", "hopper"]) == (None, "", "")
    s = Served(ws)
    try:
        assert ask(["--workspace", str(ws), *COMMON, "search", "hopper"])[0] == 0
    finally:
        s.close()
    assert not os.path.exists(path)


def test_a_second_watcher_neither_serves_nor_takes_the_socket(served: Served, ws: Path) -> None:
    with MemoryIndex(ws, config=MemoryConfig(provider="none")) as mem:
        args = cli.build_parser().parse_args(["--workspace", str(ws), *COMMON, "watch"])
        assert cli._serve_cli(mem, args) is None
    assert ask(["--workspace", str(ws), *COMMON, "search", "hopper"])[0] == 0  # the first still answers
    served.server.close()
    assert not os.path.exists(served.path)


# -- bad messages and watchers that go away -------------------------------------------------------------------------


def _raw(path: str, data: bytes, *, read: bool = True) -> bytes:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(30)
        s.connect(path)
        try:
            s.sendall(data)
        except OSError:
            return b""
        if not read:
            return b""
        chunks = []
        while True:
            try:
                got = s.recv(65536)
            except OSError:
                break
            if not got:
                break
            chunks.append(got)
        return b"".join(chunks)


@pytest.mark.parametrize("data", [
    b"not json\n",
    b"\xff\xfe\n",
    b"[1, 2]\n",
    b'{"v": 999, "command": "search"}\n',
    b'{"v": 1, "command": "status", "settings": null, "call": {}}\n',
    b"x" * (watch_socket.MAX_REQUEST + 10),  # oversized, no end of line
])
def test_malformed_or_oversized_requests_are_dropped_and_serving_goes_on(served: Served, ws: Path,
                                                                        data: bytes) -> None:
    reply = _raw(served.path, data)
    assert reply in (b"", b'{"v": 1, "ok": false}\n')
    assert ask(["--workspace", str(ws), *COMMON, "search", "hopper"])[0] == 0


def test_wrong_types_in_a_call_are_refused(served: Served, ws: Path) -> None:
    good = json.loads(json.dumps({"v": 1, "command": "search", "call": {
        "query": "hopper", "query_opt": None, "max_results": 3, "min_score": None, "wait": 0.0, "json": False,
        "no_record": True}}))
    good["settings"] = watch_socket.settings(str(ws), provider="none")
    assert json.loads(_raw(served.path, json.dumps(good).encode() + b"\n").split(b"\n")[1])["code"] == 0
    for key, bad in [("max_results", "3"), ("wait", -1), ("json", 1), ("query", 5), ("extra", True)]:
        req = json.loads(json.dumps(good))
        req["call"][key] = bad
        assert _raw(served.path, json.dumps(req).encode() + b"\n") == b'{"v": 1, "ok": false}\n'


def test_a_client_that_says_nothing_does_not_hold_up_others(served: Served, ws: Path) -> None:
    silent = socket.socket(socket.AF_UNIX)
    silent.connect(served.path)  # connected, sends nothing
    try:
        assert ask(["--workspace", str(ws), *COMMON, "search", "hopper"])[0] == 0
    finally:
        silent.close()


def _fake_watcher(path: str, reply: bytes) -> threading.Thread:
    """A listener at ``path`` that reads one request and answers ``reply``, then hangs up."""
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(1)

    def run() -> None:
        conn, _ = listener.accept()
        conn.settimeout(30)
        try:
            watch_socket._read_line(conn, watch_socket.MAX_REQUEST)
            conn.sendall(reply)
        finally:
            conn.close()
            listener.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("reply", [
    b'{"v": 1, "ok": true}\n',  # accepted, then gone (killed mid-request)
    b'{"v": 1, "ok": true}\n{"v": 1, "code": 0, "out": "cut sh',  # gone in the middle of its answer
    b'{"v": 2, "ok": true}\n{"v": 2, "code": 0, "out": "", "err": ""}\n',  # another protocol
    b'{"v": 1, "ok": true}\n{"v": 1, "code": "0", "out": "", "err": ""}\n',  # malformed answer
    b'{"v": 1, "ok": true}\n{"v": 1, "code": 0, "out": "x"}\n',
    b"\n",
])
def test_a_watcher_that_goes_away_or_answers_wrong_makes_the_command_run_itself(ws: Path, reply: bytes) -> None:
    path = _path_for(ws)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    t = _fake_watcher(path, reply)
    assert ask(["--workspace", str(ws), *COMMON, "search", "hopper"]) == (None, "", "")
    t.join(30)


# -- a real `clawmem watch` -----------------------------------------------------------------------------------------


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    return env


def _clawmem(*argv: str) -> list[str]:
    return [sys.executable, "-c", "import sys; from clawmem_core.cli import main; sys.exit(main())", *argv]


def _start_watch(ws: Path, env_extra: dict[str, str] | None = None) -> subprocess.Popen[str]:
    proc = subprocess.Popen(_clawmem("--workspace", str(ws), *COMMON, "watch"), env={**_env(), **(env_extra or {})},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    path = _path_for(ws)
    deadline = time.monotonic() + 120  # waiting for it to start, not a test of speed
    while not os.path.exists(path):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"clawmem watch did not start serving: {proc.communicate()[1][-2000:]}")
        time.sleep(0.05)
    return proc


def test_a_note_edited_just_before_clawmem_search_is_found_through_a_running_watcher(ws: Path) -> None:
    proc = _start_watch(ws)
    try:
        note = ws / "memory" / "2026-01-05.md"
        with note.open("a", encoding="utf-8") as fh:
            fh.write("- The 鸭嘴兽 platypus review is on Thursday.\n")
        run = subprocess.run(_clawmem("--workspace", str(ws), *COMMON, "search", "鸭嘴兽 platypus"), env=_env(),
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0 and "鸭嘴兽 platypus review" in run.stdout, run.stderr
        # and it was the watcher that answered: the command alone, in this interpreter, loads no index
        code = ("import sys; sys.argv = ['clawmem'] + sys.argv[1:]; from clawmem_core.cli import main; "
                "rc = main(); print(rc, 'clawmem_core.index' in sys.modules, 'sqlite3' in sys.modules)")
        run = subprocess.run([sys.executable, "-c", code, "--workspace", str(ws), *COMMON, "search", "platypus"],
                             env=_env(), capture_output=True, text=True, timeout=120)
        assert run.stdout.splitlines()[-1] == "0 False False", run.stdout + run.stderr
        assert "platypus review" in run.stdout
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
    assert not os.path.exists(_path_for(ws))  # stopped: its socket is gone
    run = subprocess.run(_clawmem("--workspace", str(ws), *COMMON, "search", "platypus"), env=_env(),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "platypus review" in run.stdout  # by itself again


def test_a_watcher_killed_while_answering_leaves_the_command_to_run_itself(ws: Path) -> None:
    proc = _start_watch(ws)
    path = _path_for(ws)
    proc.kill()
    proc.wait(60)
    assert os.path.exists(path)  # SIGKILL: the socket file stays, nobody listens
    run = subprocess.run(_clawmem("--workspace", str(ws), *COMMON, "search", "hopper"), env=_env(),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "hopper" in run.stdout


# -- the client's own reading ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [
    ["search", "hopper"],
    ["-w", "/x", "search", "q", "--json"],
    ["--workspace=/x", "--agent", "a", "search", "--query", "q", "--max-results", "3", "--min-score=0.2"],
    ["search", "q", "--wait", "inf", "--no-record", "--shared", "a,b", "--shared", "c"],
    ["--shared", "a", "search", "q", "--provider", "none", "--model", "m"],
    ["get", "MEMORY.md", "--from", "2", "--lines", "5", "--json", "--config", "c.json"],
    ["search", "成语", "--store", "postgresql://u@h/db", "--workspace", "/x"],
])
def test_the_client_reads_a_command_line_as_argparse_does(argv: list[str]) -> None:
    parsed = watch_socket._parse(argv)
    assert parsed is not None
    command, common, call = parsed
    args = cli.build_parser().parse_args(argv)
    assert args.command == command
    for key in ("workspace", "agent", "config", "provider", "model", "store", "shared"):
        assert getattr(args, key) == common.get(key), key
    for key, value in call.items():
        assert getattr(args, key) == value, key


@pytest.mark.parametrize("argv", [
    ["search"], ["--help"], ["search", "--help"], ["search", "q", "--max-results", "x"], ["search", "a", "b"],
    ["search", "q", "--wait", "-1"], ["search", "q", "--wait", "nan"], ["get", "MEMORY.md", "--from", "0"],
    ["search", "q", "--max"], ["status"], ["search", "--", "-q"], ["search", "q", "--json=1"], ["get"],
    ["--version"], ["search", "q", "--min-score"], ["index"], ["-w=/x", "search", "q"], ["-w/x", "search", "q"],
])
def test_anything_else_is_left_to_argparse(argv: list[str]) -> None:
    if argv != ["search"]:
        assert watch_socket._parse(argv) is None
    else:  # no query: the watcher prints the same error as the command
        assert watch_socket._parse(argv) == ("search", {"shared": None}, {
            "query": None, "query_opt": None, "max_results": None, "min_score": None, "wait": 30.0, "json": False,
            "no_record": False})


@pytest.mark.parametrize("name", ["ws", "my notes", "笔记", "a..b--c__", "___", "x" * 80, "Ünïcode-ws"])
def test_the_socket_is_named_after_the_index(tmp_path: Path, name: str) -> None:
    ws = tmp_path / name
    ws.mkdir()
    assert watch_socket.index_name(str(ws), None) == workspace_index_name(ws)
    assert watch_socket.index_name(str(ws), "agent-7") == "agent-7"


def test_a_state_directory_too_deep_for_a_socket_path(tmp_path: Path) -> None:
    deep = "/tmp/" + "d" * 70
    path = socket_path("/tmp/ws", "agent-with-a-rather-long-name-" + "x" * 30, {"CLAWMEM_STATE_DIR": deep})
    assert path is not None and len(os.fsencode(path)) <= 107 and Path(path).name.startswith("w-")
    assert socket_path("/tmp/ws", "a", {"CLAWMEM_STATE_DIR": "/tmp/" + "d" * 120}) is None


def test_the_default_wait_is_the_cli_s() -> None:
    assert watch_socket._DEFAULT_WAIT == cli.DEFAULT_SEARCH_WAIT
