"""Tenants and the shared store, round 3: agent ids every store can hold, a replica's typed errors,
transcripts that stay with their agent, one tenant's cache cap, one file that cannot take a memory
offline, and a PostgreSQL server that is down."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clawmem_core import MemoryIndex
from clawmem_core.errors import ConfigError, ReplicaError
from clawmem_core.testing import HashEmbedder

from .test_index_backends import write


def _open(ws: Path | None, agent: str, tmp: Path, store: dict[str, Any], **cfg: Any) -> MemoryIndex:
    return MemoryIndex(ws, agent_id=agent, config={"store": store, **cfg}, embedder=HashEmbedder(),
                       state_dir=tmp / "state")


# -- item 11: agent ids, and ClawmemStore over a replica --------------------------------------------


@pytest.mark.parametrize("bad", ["a\ud800b", "\udcff", "x" * 201, "团" * 67],
                         ids=["lone-surrogate", "undecodable-byte", "201-bytes", "201-bytes-chinese"])
def test_an_agent_id_no_store_can_hold_is_a_config_error(tmp_path: Path, store_config: dict[str, Any],
                                                          bad: str) -> None:
    """A lone surrogate (an undecodable byte of a file name) or an id too long for a file name is
    refused with the same ConfigError on both stores, and nothing is created."""
    ws = write(tmp_path / "ws", {"MEMORY.md": "# Notes\n\nThe kettle is blue. 水壶是蓝色的。\n"})
    with pytest.raises(ConfigError, match="agent_id"):
        _open(ws, bad, tmp_path, store_config)
    with pytest.raises(ConfigError, match="shared namespace"):
        _open(ws, "alice", tmp_path, store_config, shared=[bad])
    assert not (tmp_path / "state").exists() or not any((tmp_path / "state").rglob("*.sqlite"))


@pytest.mark.parametrize("good", ["团" * 66, "x" * 200, "@team", "Jose\u0301"],
                         ids=["198-bytes-chinese", "200-bytes", "at-team", "nfd"])
def test_the_longest_and_odd_agent_ids_still_work(tmp_path: Path, store_config: dict[str, Any], good: str) -> None:
    ws = write(tmp_path / "ws", {"MEMORY.md": "# Notes\n\nThe kettle is blue. 水壶是蓝色的。\n"})
    with _open(ws, good, tmp_path, store_config) as mem:
        assert mem.sync().files_indexed == 1
        assert [h.path for h in mem.search("kettle blue")] == ["MEMORY.md"]
        assert [h.path for h in mem.search("水壶")] == ["MEMORY.md"]


def test_a_lone_surrogate_agent_id_is_refused_by_the_postgres_backend_itself(pg_url: str) -> None:
    from clawmem_core.store.postgres import PostgresBackend

    with pytest.raises(ConfigError, match="lone surrogate"):
        PostgresBackend(pg_url, "a\ud800b")
    backend = PostgresBackend(pg_url, "alice")
    with pytest.raises(ConfigError, match="shared namespace"):
        backend.open_namespace("t\udcffeam")


def test_clawmem_store_over_a_replica_is_a_replica_error(tmp_path: Path, pg_url: str) -> None:
    pytest.importorskip("langgraph")
    from langchain_clawmem import ClawmemStore

    ws = write(tmp_path / "ws", {"MEMORY.md": "# Notes\n\nThe kettle is blue.\n"})
    with _open(ws, "team", tmp_path, {"url": pg_url}) as mem:
        mem.sync()
    with _open(None, "team", tmp_path, {"url": pg_url}) as replica:
        with pytest.raises(ReplicaError, match="ClawmemStore needs the workspace"):
            ClawmemStore(replica)
