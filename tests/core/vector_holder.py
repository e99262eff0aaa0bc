"""A second process in the middle of an index's vector phase (run as a script, killed by the test).

    vector_holder.py WORKSPACE STATE_DIR [STORE_URL]

syncs agent ``main`` with a :class:`HashEmbedder` whose first embedding call prints ``embedding``
and then waits there to be killed: the keyword phase is done, the vector phase holds its lock.
"""

from __future__ import annotations

import sys
import time

from clawmem_core import MemoryIndex
from clawmem_core.testing import HashEmbedder


class HeldEmbedder(HashEmbedder):
    def _embed_documents(self, texts: list[str]) -> list[list[float]]:
        print("embedding", flush=True)
        time.sleep(3600)  # waits here for SIGKILL
        return super()._embed_documents(texts)


def main() -> int:
    workspace, state = sys.argv[1], sys.argv[2]
    store = {"url": sys.argv[3]} if len(sys.argv) > 3 else {}
    with MemoryIndex(workspace, agent_id="main", config={"store": store}, embedder=HeldEmbedder(),
                     state_dir=state) as mem:
        mem.sync()
    return 0


if __name__ == "__main__":
    sys.exit(main())
