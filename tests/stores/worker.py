"""A child process for the coordination tests (killed with SIGKILL on purpose).

    worker.py WORKSPACE STATE_DIR [--store URL] [--agent ID] [--model M] [--force] [--sleep S] [--pause-after K]
              [--pause-at-file K]

prints ``ready`` once the index is open, ``paused`` before embedding batch K+1 or, with
``--pause-at-file``, in the keyword phase once K files are read (K < 0: |K| before the last), then
waits to be killed; ``done <json report>`` at the end.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from clawmem_core import MemoryIndex
from clawmem_core.progress import SyncProgress
from clawmem_core.testing import HashEmbedder


class SlowEmbedder(HashEmbedder):
    def __init__(self, sleep: float, pause_after: int, model: str) -> None:
        super().__init__(model=model)
        self.sleep = sleep
        self.pause_after = pause_after

    def _embed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.pause_after and self.calls >= self.pause_after:
            print("paused", flush=True)
            time.sleep(3600)  # waits here for SIGKILL
        time.sleep(self.sleep)
        return super()._embed_documents(texts)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("workspace")
    ap.add_argument("state")
    ap.add_argument("--store", default=None)
    ap.add_argument("--agent", default=None)
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--sleep", type=float, default=0.0)
    ap.add_argument("--pause-after", type=int, default=0)
    ap.add_argument("--model", default="hash-v1")
    ap.add_argument("--pause-at-file", type=int, default=0)
    a = ap.parse_args()

    def progress(event: SyncProgress) -> None:
        at = a.pause_at_file if a.pause_at_file > 0 else event.total + a.pause_at_file
        if a.pause_at_file and event.phase == "keywords" and 0 < at <= event.done < event.total:
            print("paused", flush=True)
            time.sleep(3600)  # waits here for SIGKILL

    config = {"store": {"url": a.store}} if a.store else {}
    emb = SlowEmbedder(a.sleep, a.pause_after, a.model)
    with MemoryIndex(a.workspace, agent_id=a.agent, config=config, embedder=emb, state_dir=a.state) as mem:
        print("ready", flush=True)
        rep = mem.sync(force=a.force, progress=progress)
        print("done " + json.dumps({"full": rep.full, "indexed": rep.files_indexed, "computed": rep.embeddings_computed}),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
