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


# -- item 7: a shared namespace shares notes, never its agent's transcripts ------------------------


def _transcript(path: Path, *turns: tuple[str, str]) -> None:
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"type": "message", "message": {"role": r, "content": c}}) + "\n"
                            for r, c in turns), encoding="utf-8")


def test_a_shared_namespace_never_exposes_its_agents_transcripts(tmp_path: Path, store_config: dict[str, Any]) -> None:
    """The team indexes its notes and its session transcripts; alice (notes only) searches the
    team as a namespace: the team's notes come back, its private conversations never, by search
    (English and Chinese) or by memory_get; the team itself still finds its own transcripts."""
    from clawmem_core.errors import PathNotAllowedError
    from clawmem_core.tools import get_payload, search_payload

    team_ws = write(tmp_path / "team", {"MEMORY.md": "# Team\n\nThe zqfreeze deploy freeze starts on Fridays.\n"
                                                     "部署冻结从周五开始。\n"})
    sessions = tmp_path / "team-sessions"
    _transcript(sessions / "private-1.jsonl",
                ("user", "Between us: the zqfreeze plan hides my salary of zqsalary 95k. 我的工资是保密的秘密。"),
                ("assistant", "Noted, the zqsalary figure stays private. 工资保密。"))
    cfg = {"sources": ["memory", "sessions"], "experimental": {"session_memory": True}}
    with MemoryIndex(team_ws, agent_id="team", config={"store": store_config, **cfg}, embedder=HashEmbedder(),
                     state_dir=tmp_path / "state", sessions_dir=sessions) as team:
        team.sync()
        assert "sessions/private-1.jsonl" in [h.path for h in team.search("zqsalary", min_score=0)]
        assert "sessions/private-1.jsonl" in [h.path for h in team.search("工资保密", min_score=0)]
    alice_ws = write(tmp_path / "alice", {"MEMORY.md": "# Alice\n\nAlice likes green tea.\n"})
    with _open(alice_ws, "alice", tmp_path, store_config, shared=["team"]) as alice:
        for q in ["zqsalary", "zqsalary salary private", "工资保密", "我的工资是保密的秘密", "zqfreeze plan"]:
            hits = alice.search(q, max_results=20, min_score=0)
            assert not any("sessions/" in h.path for h in hits), (q, [h.path for h in hits])
            assert not any("zqsalary" in h.snippet or "工资" in h.snippet for h in hits), q
            payload = search_payload(alice, q, max_results=20, min_score=0)
            assert "zqsalary" not in str(payload) and "工资" not in str(payload), q
        # the team's notes are shared as before
        assert "@team/MEMORY.md" in [h.path for h in alice.search("zqfreeze deploy freeze", min_score=0)]
        assert "@team/MEMORY.md" in [h.path for h in alice.search("部署冻结", min_score=0)]
        # and no read reaches a transcript
        for path in ["@team/sessions/private-1.jsonl", "@team/sessions/private-1.md"]:
            try:
                got = alice.read(path)
            except PathNotAllowedError:
                pass
            else:
                assert got.missing and not got.text, path
            assert "zqsalary" not in str(get_payload(alice, path))


# -- item 9: one tenant's cache.max_entries never costs another tenant provider calls ---------------


def _cached_hashes(url: str) -> set[str]:
    import psycopg

    with psycopg.connect(url) as conn:
        return {r[0] for r in conn.execute("SELECT hash FROM clawmem_embedding_cache")}


def _chunk_hashes(url: str, agent: str) -> set[str]:
    import psycopg

    with psycopg.connect(url) as conn:
        return {r[0] for r in conn.execute("SELECT hash FROM clawmem_chunks WHERE agent = %s", (agent,))}


def test_one_tenants_cache_cap_never_evicts_another_tenants_vectors(tmp_path: Path, pg_url: str) -> None:
    """Bob indexes his notes and searches them; alice, on the same database with
    ``cache.max_entries: 1``, indexes and edits hers (each of her syncs prunes the shared cache).
    Bob's full reindex and his searches afterwards embed nothing: every vector (his chunks' and his
    embedder's calibration vectors) comes from the cache. Alice's cap still bounds what no index
    uses (the vectors of her notes' old versions)."""
    store = {"url": pg_url}
    bob_ws = write(tmp_path / "bob", {
        "MEMORY.md": "# Bob\n\nBob keeps bees on the roof.\n\n## Garden\n\nThe tomatoes need water daily.\n",
        "memory/2026-02-01.md": "- 鲍勃的蜜蜂在屋顶上。\n- Bob's honey sells out by March.\n",
    })
    bob_emb = HashEmbedder()
    with MemoryIndex(bob_ws, agent_id="bob", config={"store": store}, embedder=bob_emb,
                     state_dir=tmp_path / "state") as bob:
        bob.sync()
        assert bob.search("bees roof")[0].path == "MEMORY.md"  # embeds the calibration texts...
        bob.sync()  # ... which this sync caches
        assert bob_emb.texts_embedded > 0
    alice_ws = write(tmp_path / "alice", {"MEMORY.md": "# Alice\n\nAlice's first note: green tea.\n"})
    alice_cfg = {"store": store, "cache": {"max_entries": 1}}
    with MemoryIndex(alice_ws, agent_id="alice", config=alice_cfg, embedder=HashEmbedder(),
                     state_dir=tmp_path / "state") as alice:
        alice.sync()
        first = _chunk_hashes(pg_url, "alice")
        for i, text in enumerate(["Alice's second note: oolong. 乌龙茶。", "Alice's third note: matcha. 抹茶。"]):
            (alice_ws / "MEMORY.md").write_text(f"# Alice\n\n{text}\n", encoding="utf-8")
            alice.sync(force=bool(i))
        assert alice.search("matcha")[0].path == "MEMORY.md"
    cached = _cached_hashes(pg_url)
    assert _chunk_hashes(pg_url, "bob") <= cached  # bob's vectors all survived alice's cap
    assert not (first - _chunk_hashes(pg_url, "alice")) & cached  # alice's stale ones went
    bob_emb = HashEmbedder()
    with MemoryIndex(bob_ws, agent_id="bob", config={"store": store}, embedder=bob_emb,
                     state_dir=tmp_path / "state") as bob:
        report = bob.sync(force=True)
        assert report.full and bob_emb.texts_embedded == 0 and bob_emb.calls == 0
        assert bob.search("bees roof")[0].path == "MEMORY.md"
        assert bob.search("蜜蜂")[0].path == "memory/2026-02-01.md"
    assert bob_emb.texts_embedded == 0


# -- item 6: one long path never takes an agent's memory offline -------------------------------------


def _long_dirs(total: int) -> str:
    """Nested directory names (each within NAME_MAX's 255 bytes) of about ``total`` bytes in all,
    incompressible (hex digests), so that no store can squeeze them under a size limit."""
    import hashlib

    parts, size, i = [], 0, 0
    while size < total:
        name = "".join(hashlib.sha256(f"{i}-{j}".encode()).hexdigest() for j in range(4))[:240]
        parts.append(name)
        size += len(name) + 1
        i += 1
    return "/".join(parts)


@pytest.mark.parametrize("agent", ["main", "长" * 66], ids=["short-agent", "long-agent"])
def test_a_file_with_a_very_long_path_never_takes_the_memory_offline(tmp_path: Path, store_config: dict[str, Any],
                                                                     agent: str) -> None:
    """A note whose workspace-relative path is about 3 KB (legal on Linux, nested directories)
    sits beside ordinary notes: every sync succeeds, the ordinary notes stay searchable (English
    and Chinese) and no search answers ``disabled``; the long one is indexed or reported (sync
    and status), never silently lost."""
    from clawmem_core.tools import search_payload

    ws = write(tmp_path / "ws", {"MEMORY.md": "# Notes\n\nThe kettle is blue. 水壶是蓝色的。\n",
                                 "memory/2026-03-01.md": "- The zqlong plan starts Monday. 计划周一开始。\n"})
    long_rel = f"memory/{_long_dirs(3000)}/deep.md"
    assert len(long_rel.encode()) > 2800
    deep = ws / long_rel
    deep.parent.mkdir(parents=True)
    deep.write_text("- The zqdeep note lives far down. 深处的笔记。\n", encoding="utf-8")
    with _open(ws, agent, tmp_path, store_config) as mem:
        report = mem.sync()
        indexed = not any(long_rel in s for s in report.files_skipped)
        assert report.files_indexed == 2 + indexed
        if not indexed:
            assert any(s.startswith(long_rel) and "too long" in s for s in report.files_skipped), report.files_skipped
            assert any(long_rel in i and "too long" in i for i in mem.status().issues)
        for q, path in [("kettle blue", "MEMORY.md"), ("水壶", "MEMORY.md"), ("zqlong plan", "memory/2026-03-01.md"),
                        ("计划周一", "memory/2026-03-01.md")]:
            payload = search_payload(mem, q)
            assert not payload.get("disabled") and payload["results"][0]["path"] == path, payload
        deep_hits = [h.path for h in mem.search("zqdeep", min_score=0)]
        assert (deep_hits[0] == long_rel) if indexed else (long_rel not in deep_hits), deep_hits
        # searches keep syncing first: an edit beside the long file is found, still not disabled
        (ws / "memory" / "2026-03-02.md").write_text("- The zqafter note came later. 后来的笔记。\n", encoding="utf-8")
        payload = search_payload(mem, "zqafter")
        assert not payload.get("disabled") and payload["results"][0]["path"] == "memory/2026-03-02.md", payload
        again = mem.sync()
        assert again.files_indexed == 0 and not again.full
    # a new process over the same index: the same answers, no error
    with _open(ws, agent, tmp_path, store_config) as mem:
        payload = search_payload(mem, "水壶")
        assert not payload.get("disabled") and payload["results"][0]["path"] == "MEMORY.md", payload


@pytest.mark.parametrize("agent", ["a", "x" * 200, "团" * 66], ids=["short", "longest", "chinese"])
def test_the_postgres_path_limit_is_one_every_key_can_hold(pg_url: str, agent: str) -> None:
    """A path of exactly ``max_path_bytes`` (incompressible hex and Chinese) is written and
    found; the limit leaves room for the longest agent id."""
    from clawmem_core.store.postgres import PostgresBackend

    from .conftest import chunk, file

    store = PostgresBackend(pg_url, agent).open()
    try:
        limit = store.max_path_bytes
        assert limit is not None and limit >= 2400
        for tail in ("", "笔记"):
            head = f"memory/{tail}"
            dirs = _long_dirs(limit)
            path = (head + dirs)[: limit - 3 - (len(head.encode()) - len(head))] + ".md"
            assert len(path.encode()) in (limit, limit - 1), len(path.encode())
            store.replace_files([(file(path, "zqlimit 界限"), [chunk(path, 1, "zqlimit 界限")])])
            assert path in store.file_states("memory")
            assert store.keyword_search(["zqlimit"], 5)
            store.delete_files("memory", [path])
    finally:
        store.close()


# -- item 10: a PostgreSQL server that is down is said so by the query's deadline ---------------------


class _SocketProxy:
    """A real PostgreSQL server behind a Unix-socket forwarder that can be switched off (every
    connection cut, the socket gone: the server is down to its clients) and on again."""

    def __init__(self, server: Any, database_url: str, tmp: Path) -> None:
        import os
        import tempfile
        from urllib.parse import parse_qs, urlsplit

        parts = urlsplit(database_url)
        sockdir = parse_qs(parts.query)["host"][0]
        port = str(parts.port or 5432)
        self.target = os.path.join(sockdir, f".s.PGSQL.{port}")
        self.dir = tempfile.mkdtemp(prefix="clawmem-proxy-")  # short: a socket path has ~100 bytes
        self.path = os.path.join(self.dir, f".s.PGSQL.{port}")
        self.url = f"postgresql://{parts.username}:@{parts.path}?host={self.dir}&port={port}"
        self.start()

    def start(self) -> None:
        import socket
        import threading

        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(64)
        self.conns: list[Any] = []
        threading.Thread(target=self._accept, args=(self.listener, self.conns), daemon=True).start()

    def _accept(self, listener: Any, conns: list[Any]) -> None:
        import socket
        import threading

        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(self.target)
            except OSError:
                client.close()
                continue
            conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a: Any, b: Any) -> None:
        import socket

        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def stop(self) -> None:
        import os
        import socket

        self.listener.close()
        os.unlink(self.path)
        for s in self.conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


def test_a_search_with_postgres_down_says_unreachable_by_its_deadline(tmp_path: Path, pg_server: Any,
                                                                      pg_url: str) -> None:
    """The server goes away under a working index: a search fails with StoreUnreachableError
    having waited for a pooled connection no longer than its deadline (``query.timeout_ms``; the
    pool's own timeout is 30 s), and the next search does not wait at all; memory_search answers
    ``disabled`` and says the store is unreachable. Once the server is back, searches answer."""
    import asyncio

    from clawmem_core.store.base import StoreUnreachableError
    from clawmem_core.tools import search_payload

    proxy = _SocketProxy(pg_server, pg_url, tmp_path)
    ws = write(tmp_path / "ws", {"MEMORY.md": "# Notes\n\nThe kettle is blue. 水壶是蓝色的。\n"})
    try:
        with _open(ws, "main", tmp_path, {"url": proxy.url}, query={"timeout_ms": 300}) as mem:
            mem.sync()
            assert mem.search("kettle")[0].path == "MEMORY.md"
            proxy.stop()
            with pytest.raises(StoreUnreachableError, match="unreachable") as first:
                mem.search("kettle")
            assert 0 <= first.value.waited <= 0.3  # the deadline's wait, not the pool's 30 s
            with pytest.raises(StoreUnreachableError) as second:
                mem.search("水壶")
            assert second.value.waited == 0.0  # known down: no wait
            with pytest.raises(StoreUnreachableError) as third:
                asyncio.run(mem.asearch("kettle"))
            assert third.value.waited == 0.0
            payload = search_payload(mem, "kettle")
            assert payload["disabled"] is True and "unreachable" in payload["error"], payload
            assert "not a provider problem" in payload["warning"]
            proxy.start()
            assert mem.search("kettle")[0].path == "MEMORY.md"
            assert mem.search("水壶")[0].path == "MEMORY.md"
            assert search_payload(mem, "kettle")["results"][0]["path"] == "MEMORY.md"
    finally:
        from clawmem_core.store.postgres import PostgresBackend

        PostgresBackend.close_pools(proxy.url)
