"""Fixtures for the core engine tests: workspaces of real Markdown files, a state directory for
the SQLite index, and indexes built with the deterministic :class:`HashEmbedder`."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from clawmem_core import MemoryConfig, MemoryIndex
from clawmem_core.testing import HashEmbedder

API_KEY_VARS = (
    "OPENAI_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "VOYAGE_API_KEY",
    "MISTRAL_API_KEY",
)


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads real API keys or writes the user's ``~/.clawmem``."""
    for var in API_KEY_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CLAWMEM_STATE_DIR", str(tmp_path / "default-state"))


def write_files(root: Path, files: dict[str, str | bytes]) -> Path:
    """Write ``{relative path: content}`` under ``root`` (parents created); return ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    for rel, content in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content, encoding="utf-8")
    return root


def tree_digest(root: Path) -> dict[str, str]:
    """SHA-256 of every regular ``.md`` file under ``root`` (symlinks not followed)."""
    out: dict[str, str] = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            p = Path(dirpath) / name
            if name.endswith(".md") and not p.is_symlink() and p.is_file():
                out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


WorkspaceFactory = Callable[..., Path]


@pytest.fixture
def make_workspace(tmp_path: Path) -> WorkspaceFactory:
    """``make_workspace({"MEMORY.md": "...", "memory/2026-01-05.md": "..."}, name="ws")``."""

    def make(files: dict[str, str | bytes] | None = None, name: str = "ws") -> Path:
        return write_files(tmp_path / name, files or {})

    return make


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


IndexFactory = Callable[..., MemoryIndex]


@pytest.fixture
def open_index(state_dir: Path) -> Iterator[IndexFactory]:
    """Open a :class:`MemoryIndex` (closed at teardown). Defaults: a fresh :class:`HashEmbedder`
    and the test's state directory."""
    opened: list[MemoryIndex] = []

    def open_(workspace: Path, *, embedder: Any = "hash", config: MemoryConfig | None = None,
              state: Path | None = None, agent_id: str = "main", reranker: Any = None) -> MemoryIndex:
        if embedder == "hash":
            embedder = HashEmbedder()
        mem = MemoryIndex(workspace, agent_id=agent_id, config=config, embedder=embedder,
                          state_dir=state or state_dir, reranker=reranker)
        opened.append(mem)
        return mem

    yield open_
    for mem in opened:
        mem.close()


def keyword_only() -> MemoryConfig:
    """A configuration without an embedding provider (FTS-only search)."""
    return MemoryConfig(provider="none")


SAMPLE_FILES: dict[str, str] = {
    "MEMORY.md": "# Preferences\n\nI like jazz music and espresso.\nMy editor is vim.\n",
    "memory/2026-01-05.md": "# Standup\n\nDeployed the billing service to kubernetes.\nPostgres migration done.\n",
    "memory/projects/roadmap.md": "# Roadmap\n\nShip the search feature in March.\nHire a designer.\n",
}
