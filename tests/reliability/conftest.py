"""Fixtures for the reliability tests: real processes, real files, real SQLite.

The ``stress`` marker is registered here; stress tests are skipped unless ``--run-stress`` is
given or ``CLAWMEM_STRESS=1`` is set.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Iterator

import pytest

HERE = Path(__file__).resolve().parent
WORKER = HERE / "worker.py"
API_KEY_VARS = ("OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "VOYAGE_API_KEY", "MISTRAL_API_KEY")


def pytest_addoption(parser: pytest.Parser) -> None:
    try:
        parser.addoption("--run-stress", action="store_true", default=False, help="run the long stress tests")
    except ValueError:  # registered by another conftest
        pass


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "stress: long multi-process stress run (opt-in: --run-stress or CLAWMEM_STRESS=1)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-stress", default=False) or os.environ.get("CLAWMEM_STRESS") == "1":
        return
    skip = pytest.mark.skip(reason="stress test: pass --run-stress or set CLAWMEM_STRESS=1")
    for item in items:
        if "stress" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in API_KEY_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CLAWMEM_STATE_DIR", str(tmp_path / "default-state"))


def unique_text(seed: str, n_lines: int = 30) -> str:
    """Distinct, searchable Markdown (every chunk differs, so every chunk is embedded)."""
    lines = [f"# Note {seed}", ""]
    for i in range(n_lines):
        h = hashlib.sha256(f"{seed}:{i}".encode()).hexdigest()
        lines.append(f"- {seed} fact {i}: token{h[:10]} word{h[10:18]} more{h[18:30]} detail {h[30:60]}")
    return "\n".join(lines) + "\n"


def make_workspace(root: Path, n_files: int, prefix: str = "f", lines: int = 30) -> Path:
    (root / "memory").mkdir(parents=True, exist_ok=True)
    (root / "MEMORY.md").write_text("# Long term\n\nI like jazz and espresso.\n", encoding="utf-8")
    for i in range(n_files):
        (root / "memory" / f"{prefix}{i:03d}.md").write_text(unique_text(f"{prefix}{i}", lines), encoding="utf-8")
    return root


def tree_digest(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            p = Path(dirpath) / name
            if not p.is_symlink() and p.is_file():
                out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def run_worker(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(WORKER), *args], capture_output=True, text=True, timeout=timeout)


def start_worker(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1
    )


def _can_mount() -> bool:
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        return False
    return True


@pytest.fixture
def mount_point(tmp_path: Path) -> Iterator[callable]:
    """``mount_point(kind)``: a real read-only bind mount (``"ro"``) or a tiny tmpfs (``"tmpfs:SIZE"``).
    Skips when mounting is not possible (not root, not Linux, no CAP_SYS_ADMIN)."""
    mounted: list[Path] = []

    def make(kind: str, source: Path | None = None) -> Path:
        if not _can_mount():
            pytest.skip("needs root on Linux to mount")
        target = tmp_path / f"mnt-{uuid.uuid4().hex[:8]}"
        target.mkdir()
        if kind == "ro":
            cmd = ["mount", "--bind", "-o", "ro", str(source), str(target)]
        else:
            cmd = ["mount", "-t", "tmpfs", "-o", f"size={kind.split(':', 1)[1]}", "tmpfs", str(target)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount: {r.stderr.strip()}")
        mounted.append(target)
        return target

    yield make
    for t in reversed(mounted):
        subprocess.run(["umount", "-l", str(t)], capture_output=True)
