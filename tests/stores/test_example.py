"""The README's shared-memory example runs: two agents, one team memory, a replica."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_shared_memory_example_runs(pg_url: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "shared_memory.py"), "--url", pg_url],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    assert "team indexed: 2 files" in out
    assert out.count("@team/MEMORY.md#L") == 2  # both agents see the team memory
    bob_private = out.split("bob searches 'Nightingale project':", 1)[1].splitlines()[1]
    assert bob_private.strip() == "(nothing)"  # and never each other's notes
    assert "alice's replica searches 'Nightingale':\n    memory/" in out
    assert "'fromIndex': True" in out and "'disabled': True" in out
