"""A searching child process for the race tests.

    search_worker.py WORKSPACE STATE_DIR NOTES STOP_FILE [--store URL]

searches, until STOP_FILE exists, for each note's version words (``topic<i>xv1 topic<i>xv2``: one
search, which must find the note in exactly one version); prints ``ready`` after its first round and ``done <json>`` at the end: the rounds
run, the errors met and the answers where a note was found in neither or both versions.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from clawmem_core import MemoryIndex
from clawmem_core.testing import HashEmbedder


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("workspace")
    ap.add_argument("state")
    ap.add_argument("notes", type=int)
    ap.add_argument("stop")
    ap.add_argument("--store", default=None)
    a = ap.parse_args()
    config = {"store": {"url": a.store} if a.store else {}, "sync": {"on_search": False, "on_session_start": False}}
    rounds, errors, torn = 0, [], []
    with MemoryIndex(a.workspace, config=config, embedder=HashEmbedder(), state_dir=a.state) as mem:
        while True:
            stop = os.path.exists(a.stop)
            for i in range(a.notes):
                path = f"memory/n{i:03d}.md"
                try:
                    hits = mem.search(f"topic{i}xv1 topic{i}xv2", max_results=4, min_score=0)
                    found = [any(r.path == path and f"topic{i}x{tag}" in r.snippet for r in hits) for tag in ("v1", "v2")]
                except Exception as exc:  # noqa: BLE001 - reported to the test
                    errors.append(f"{type(exc).__name__}: {exc}")
                    continue
                if found.count(True) != 1:
                    torn.append((rounds, path, found))
            rounds += 1
            if rounds == 1:
                print("ready", flush=True)
            if stop:
                break
    print("done " + json.dumps({"rounds": rounds, "errors": errors[:5], "torn": torn[:5]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
