"""A child process for the reliability tests (run as a script, killed with SIGKILL on purpose).

    worker.py sync WORKSPACE STATE_DIR [--force] [--sleep SECONDS]

prints ``ready`` once the index is open, ``embedding N`` before each embedding batch (N texts
were embedded, and so cached, before it), and ``done <json report>`` at the end. With
``--pause-after K`` it prints ``paused N`` before batch K+1 and waits there to be killed; with
``--pause-at-file K`` it does so in the keyword phase, once K files were read and chunked (a
full reindex is then half-built in its temporary index; K < 0 counts from the last file).
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
    """A :class:`HashEmbedder` that sleeps per batch and reports its progress on stdout."""

    def __init__(self, sleep: float, pause_after: int) -> None:
        super().__init__()
        self.sleep = sleep
        self.pause_after = pause_after

    def _embed_documents(self, texts: list[str]) -> list[list[float]]:
        print(f"embedding {self.texts_embedded}", flush=True)
        if self.pause_after and self.calls >= self.pause_after:
            print(f"paused {self.texts_embedded}", flush=True)
            time.sleep(3600)  # waits here for SIGKILL
        time.sleep(self.sleep)
        return super()._embed_documents(texts)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["sync"])
    ap.add_argument("workspace")
    ap.add_argument("state")
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--sleep", type=float, default=0.0)
    ap.add_argument("--pause-after", type=int, default=0, help="stop before batch N+1 (to be killed there)")
    ap.add_argument("--pause-at-file", type=int, default=0, help="stop in the keyword phase after N files")
    a = ap.parse_args()
    emb = SlowEmbedder(a.sleep, a.pause_after)

    def progress(event: SyncProgress) -> None:
        # K < 0: |K| files before the end (after the first write groups)
        at = a.pause_at_file if a.pause_at_file > 0 else event.total + a.pause_at_file
        if a.pause_at_file and event.phase == "keywords" and 0 < at <= event.done < event.total:
            print(f"paused {emb.texts_embedded}", flush=True)
            time.sleep(3600)  # waits here for SIGKILL

    with MemoryIndex(a.workspace, agent_id="main", embedder=emb, state_dir=a.state) as mem:
        print("ready", flush=True)
        rep = mem.sync(force=a.force, progress=progress)
        print("done " + json.dumps({"full": rep.full, "files": rep.files_indexed, "computed": rep.embeddings_computed,
                                    "cached": rep.embeddings_cached, "texts": emb.texts_embedded}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
