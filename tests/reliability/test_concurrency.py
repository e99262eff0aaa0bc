"""Several processes syncing, writing and searching one index at once (scripts/stress.py):
no error (no "database is locked"), no half-built index seen by a reader, no line lost."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "stress.py"


def _stress():
    # imported by name so that spawned processes can import it too
    if str(SCRIPT.parent) not in sys.path:
        sys.path.insert(0, str(SCRIPT.parent))
    import stress

    return stress


def check(report: dict) -> None:
    assert report["errors"] == 0, report["error_samples"]
    assert report["regressions"] == 0, "a reader saw the index shrink (a half-built index)"
    assert report["lines_lost_markdown"] == 0 and report["lines_lost_index"] == 0
    assert report["integrity_ok"] and report["temp_files_left"] == 0
    assert report["write_ops"] > 0 and report["read_ops"] > 0


def test_writers_and_readers_short_run(tmp_path: Path) -> None:
    check(_stress().run(tmp_path, writers=3, readers=2, seconds=4))


@pytest.mark.stress
def test_writers_and_readers_stress(tmp_path: Path) -> None:
    seconds = float(os.environ.get("CLAWMEM_STRESS_SECONDS", "60"))
    report = _stress().run(tmp_path, writers=4, readers=4, seconds=seconds)
    print(report)
    check(report)
