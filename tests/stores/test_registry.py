"""The registry of indexes (:class:`MemoryIndexes`), on SQLite (one file per agent) and on
PostgreSQL (one URL, one pool): agents kept apart, the least recently used closed past the
bound but never one leased by another thread, one open for many threads asking at once, one
embedder for all, asyncio, agent ids checked."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from clawmem_core import MemoryIndex
from clawmem_core.errors import ConfigError, StoreError
from clawmem_core.registry import MemoryIndexes, SharedEmbedder
from clawmem_core.testing import HashEmbedder

NOTES = {
    "alice": "# Alice\n\nMy cat is called Whiskeralpha and I play the cello.\n",
    "bob": "# Bob\n\n我养了一只狗，名字叫旺财贝塔。我喜欢弹钢琴。\n",
    "carol": "# Carol\n\nThe boat is named Seagullgamma.\n",
    "代理人": "# 代理人\n\n我的密码提示是红灯笼德尔塔。\n",
}


class CountingEmbedder(HashEmbedder):
    """A hash embedder that counts its closes and model loads."""

    def __init__(self) -> None:
        super().__init__()
        self.closes = 0
        self.loads = 0

    def close(self) -> None:
        self.closes += 1

    def load(self) -> None:
        self.loads += 1


@pytest.fixture
def config(backend_kind: str, request: pytest.FixtureRequest) -> dict[str, Any]:
    if backend_kind == "sqlite":
        return {}
    return {"store": {"url": request.getfixturevalue("pg_url")}}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """One workspace per agent, ``<root>/<agent>/MEMORY.md``."""
    for agent, text in NOTES.items():
        (tmp_path / "ws" / agent).mkdir(parents=True)
        (tmp_path / "ws" / agent / "MEMORY.md").write_text(text, encoding="utf-8")
    return tmp_path / "ws"


def _registry(config: dict[str, Any], root: Path, tmp_path: Path, cls: type = MemoryIndexes,
              **kw: Any) -> MemoryIndexes:
    kw.setdefault("embedder", HashEmbedder())
    return cls(config, workspace_root=root, state_dir=tmp_path / "state", **kw)


def _found(mem: MemoryIndex, query: str) -> str:
    mem.sync()
    return " ".join(r.snippet for r in mem.search(query, max_results=10, min_score=0))


def test_agents_never_see_each_others_notes(config: dict[str, Any], root: Path, tmp_path: Path,
                                            backend_kind: str) -> None:
    with _registry(config, root, tmp_path) as indexes:
        alice, bob, cn = indexes.get("alice"), indexes.get("bob"), indexes.get("代理人")
        assert "Whiskeralpha" in _found(alice, "Whiskeralpha cat")
        assert "旺财贝塔" in _found(bob, "旺财贝塔")
        assert "红灯笼德尔塔" in _found(cn, "红灯笼德尔塔")
        for mem, foreign in ((alice, ["旺财贝塔", "红灯笼德尔塔"]), (bob, ["Whiskeralpha", "红灯笼德尔塔"]),
                             (cn, ["Whiskeralpha", "旺财贝塔"])):
            for word in foreign:
                assert word not in _found(mem, word), (mem.agent_id, word)
        if backend_kind == "sqlite":  # one index file per agent
            assert {p.name for p in (tmp_path / "state" / "memory").glob("*.sqlite")} >= {
                "alice.sqlite", "bob.sqlite", "代理人.sqlite"}
        else:
            assert alice.store_path is None


def test_the_same_object_while_open(config: dict[str, Any], root: Path, tmp_path: Path) -> None:
    """What an index loaded (its keyword statistics, its caches) stays with it: the registry
    hands out the same object until it closes it."""
    with _registry(config, root, tmp_path) as indexes:
        mem = indexes.get("alice")
        _found(mem, "cello")
        assert indexes.get("alice") is mem
        with indexes.lease("alice") as again:
            assert again is mem


def test_least_recently_used_is_closed_past_the_bound(config: dict[str, Any], root: Path, tmp_path: Path) -> None:
    with _registry(config, root, tmp_path, max_open=2) as indexes:
        alice = indexes.get("alice")
        bob = indexes.get("bob")
        indexes.get("alice")  # alice is now the most recently used
        carol = indexes.get("carol")
        assert indexes.open_agents() == ["alice", "carol"]
        assert "bob" not in indexes and len(indexes) == 2
        with pytest.raises(StoreError):
            bob.search("旺财贝塔")  # closed
        assert "Whiskeralpha" in _found(alice, "Whiskeralpha")
        bob2 = indexes.get("bob")  # reopened: a new object; alice is the least recently used now
        assert bob2 is not bob and "旺财贝塔" in _found(bob2, "旺财贝塔")
        assert indexes.open_agents() == ["carol", "bob"]
        with pytest.raises(StoreError):
            alice.search("cello")
        assert "Seagullgamma" in _found(carol, "Seagullgamma")


def test_a_leased_index_is_not_closed_under_its_holder(config: dict[str, Any], root: Path, tmp_path: Path) -> None:
    indexes = _registry(config, root, tmp_path, max_open=1)
    leased, others_opened = threading.Event(), threading.Event()
    seen: dict[str, Any] = {}

    def hold() -> None:
        try:
            with indexes.lease("alice") as mem:
                leased.set()
                others_opened.wait()
                seen["found"] = _found(mem, "Whiskeralpha cello")
        except BaseException as exc:  # reported to the test below
            seen["error"] = exc

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert leased.wait(60)
        for agent in ("bob", "carol", "代理人"):
            mem = indexes.get(agent)
            assert "alice" in indexes.open_agents()  # leased: kept open past the bound
            assert agent in indexes
        assert indexes.open_agents() == ["alice", "代理人"]
        others_opened.set()
        holder.join(60)
        assert "error" not in seen, seen.get("error")
        assert "Whiskeralpha" in seen["found"]
        # the lease ended: back within the bound, the least recently used (alice) closed
        assert indexes.open_agents() == ["代理人"]
        assert "红灯笼德尔塔" in _found(mem, "红灯笼德尔塔")
    finally:
        others_opened.set()
        holder.join(60)
        indexes.close()


class CountingIndexes(MemoryIndexes):
    """Counts the opens; each waits for ``gate``."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.opens: list[str] = []
        self.gate = threading.Event()

    def _open(self, agent_id: str) -> MemoryIndex:
        self.opens.append(agent_id)
        assert self.gate.wait(60)
        return super()._open(agent_id)


def test_many_threads_asking_for_one_new_agent_open_it_once(config: dict[str, Any], root: Path,
                                                            tmp_path: Path) -> None:
    n = 8
    indexes = _registry(config, root, tmp_path, cls=CountingIndexes)
    got: list[MemoryIndex] = []
    lock = threading.Lock()

    def ask() -> None:
        mem = indexes.get("bob")
        with lock:
            got.append(mem)

    threads = [threading.Thread(target=ask) for _ in range(n)]
    for t in threads:
        t.start()
    try:
        # every thread has asked (each holds its place on the agent while the open runs)
        while True:
            with indexes._lock:
                entry = indexes._entries.get("bob")
                if entry is not None and entry.leases == n:
                    break
            threading.Event().wait(0.01)
        indexes.gate.set()
        for t in threads:
            t.join(60)
        assert len(got) == n and all(m is got[0] for m in got)
        assert indexes.opens == ["bob"]
        assert "旺财贝塔" in _found(got[0], "旺财贝塔")
    finally:
        indexes.gate.set()
        indexes.close()


def test_one_embedder_for_every_agent(config: dict[str, Any], root: Path, tmp_path: Path) -> None:
    emb = CountingEmbedder()
    indexes = _registry(config, root, tmp_path, embedder=emb, max_open=1)
    shared = indexes.embedder
    assert isinstance(shared, SharedEmbedder) and shared.inner is emb
    alice = indexes.get("alice")
    assert alice.embedder is shared
    _found(alice, "cello")
    bob = indexes.get("bob")  # alice closed past the bound: the embedder stays open
    assert bob.embedder is shared and emb.closes == 0
    assert "旺财贝塔" in _found(bob, "旺财贝塔") and emb.calls >= 2  # both agents' notes through one embedder
    indexes.close()
    assert emb.closes == 1
    indexes.close()
    assert emb.closes == 1
    with pytest.raises(StoreError):
        indexes.get("alice")


def test_warm_loads_the_model_at_start(config: dict[str, Any], root: Path, tmp_path: Path) -> None:
    emb = CountingEmbedder()
    with _registry(config, root, tmp_path, embedder=emb, warm=True) as indexes:
        assert emb.loads == 1
        _found(indexes.get("alice"), "cello")
        assert emb.loads == 1
    cold = CountingEmbedder()
    with _registry(config, root, tmp_path, embedder=cold):
        assert cold.loads == 0


def test_keyword_only_from_the_config(config: dict[str, Any], root: Path, tmp_path: Path) -> None:
    with MemoryIndexes({**config, "provider": "none"}, workspace_root=root, state_dir=tmp_path / "state") as indexes:
        assert indexes.embedder is None
        assert "Seagullgamma" in _found(indexes.get("carol"), "Seagullgamma")


def test_asyncio(config: dict[str, Any], root: Path, tmp_path: Path) -> None:
    indexes = _registry(config, root, tmp_path, max_open=2)

    async def main() -> tuple[str, str, bool]:
        alice, again = await asyncio.gather(indexes.aget("alice"), indexes.aget("alice"))
        assert alice is again
        async with indexes.alease("代理人") as cn:
            found_cn = await asyncio.to_thread(_found, cn, "红灯笼德尔塔")
            await indexes.aget("bob")
            await indexes.aget("carol")
            kept = "代理人" in indexes.open_agents()
        found_alice = await asyncio.to_thread(_found, await indexes.aget("alice"), "Whiskeralpha")
        return found_cn, found_alice, kept

    try:
        found_cn, found_alice, kept = asyncio.run(main())
        assert "红灯笼德尔塔" in found_cn and "Whiskeralpha" in found_alice and kept
        assert len(indexes) == 2
    finally:
        indexes.close()


@pytest.mark.parametrize("bad", ["", "..", ".", "a/b", "..\\x", "x\x00", "\udc80", "a" * 300, 5, None])
def test_a_bad_agent_id_is_a_config_error(config: dict[str, Any], root: Path, tmp_path: Path, bad: Any) -> None:
    with _registry(config, root, tmp_path) as indexes:
        with pytest.raises(ConfigError):
            indexes.get(bad)
        with pytest.raises(ConfigError):
            with indexes.lease(bad):
                pass
        assert indexes.open_agents() == []
        assert not (root.parent / "b").exists()


def test_workspace_root_forms(backend_kind: str, config: dict[str, Any], root: Path, tmp_path: Path) -> None:
    """A callable names each agent's workspace; on PostgreSQL, ``None`` from it is a replica."""
    with MemoryIndexes(config, workspace_root=lambda a: root / a, state_dir=tmp_path / "state",
                       embedder=HashEmbedder()) as indexes:
        assert "Whiskeralpha" in _found(indexes.get("alice"), "Whiskeralpha")
    if backend_kind == "postgres":
        with MemoryIndexes(config, workspace_root=None, state_dir=tmp_path / "state",
                           embedder=HashEmbedder()) as replicas:
            mem = replicas.get("alice")
            assert mem.workspace is None
            assert "Whiskeralpha" in " ".join(r.snippet for r in mem.search("Whiskeralpha", min_score=0))
    for bad in (0, -3, True, "2"):
        with pytest.raises(ConfigError):
            MemoryIndexes(config, max_open=bad)  # type: ignore[arg-type]


def test_postgres_agents_share_one_pool_of_the_size_configured(pg_url: str, root: Path, tmp_path: Path) -> None:
    from clawmem_core.store.postgres.connection import _Connections

    config = {"store": {"url": pg_url, "pool_size": 7}}
    with _registry(config, root, tmp_path) as indexes:
        for agent in ("alice", "bob", "代理人"):
            _found(indexes.get(agent), "cello")
        pools = [p for url, p in _Connections._pools.items() if url == pg_url]
        assert len(pools) == 1 and pools[0].max_size == 7
    for bad in (0, 1.5, "3", True, 1001):
        with pytest.raises(ConfigError):
            MemoryIndexes({"store": {"url": pg_url, "pool_size": bad}})


def test_postgres_keyword_statistics_are_loaded_once_per_agent(pg_url: str, root: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """What an agent's first search loads (its keyword statistics) serves its later searches
    while the registry keeps it, whatever other agents do meanwhile."""
    from clawmem_core.store.postgres import KEYWORD_CACHE, PostgresStore

    loads: list[str] = []
    original = PostgresStore._load_keyword_stats

    def counted(self: PostgresStore, conn: Any) -> Any:
        loads.append(self.backend.agent_id)
        return original(self, conn)

    monkeypatch.setattr(PostgresStore, "_load_keyword_stats", counted)
    KEYWORD_CACHE.clear()
    with _registry({"store": {"url": pg_url}}, root, tmp_path, max_open=3) as indexes:
        alice = indexes.get("alice")
        alice.sync()
        indexes.get("bob").sync()
        loads.clear()
        assert "Whiskeralpha" in " ".join(r.snippet for r in alice.search("Whiskeralpha", min_score=0))
        assert loads == ["alice"]
        for q in ("旺财贝塔", "钢琴"):
            indexes.get("bob").search(q, min_score=0)
        for q in ("cello", "Whiskeralpha cat", "猫"):
            assert indexes.get("alice") is alice
            alice.search(q, min_score=0)
        assert loads == ["alice", "bob"]


def test_closing_an_agent_frees_what_its_searches_loaded(config: dict[str, Any], root: Path, tmp_path: Path,
                                                        backend_kind: str) -> None:
    """An index the bound closes is freed, and so is what its searches loaded into the process
    (on PostgreSQL, the agent's keyword statistics and postings): memory follows the agents
    open, not every agent the process ever served. The agents still open keep theirs."""
    import gc
    import weakref

    from clawmem_core.store.postgres import KEYWORD_CACHE

    def cached(agent: str) -> bool:
        return KEYWORD_CACHE.get((config["store"]["url"], agent)) is not None

    KEYWORD_CACHE.clear()
    with _registry(config, root, tmp_path, max_open=2) as indexes:
        for agent in ("alice", "bob"):
            _found(indexes.get(agent), "cello 钢琴")
        alice = weakref.ref(indexes.get("alice"))
        if backend_kind == "postgres":
            assert cached("alice") and cached("bob")
        _found(indexes.get("carol"), "Seagullgamma")  # bob, the least recently used, is closed
        assert indexes.open_agents() == ["alice", "carol"]
        if backend_kind == "postgres":
            assert not cached("bob")
            assert cached("alice") and cached("carol")
        _found(indexes.get("代理人"), "红灯笼德尔塔")  # then alice
        gc.collect()
        assert alice() is None
        if backend_kind == "postgres":
            assert not cached("alice") and cached("carol") and cached("代理人")
    if backend_kind == "postgres":  # closing the registry frees every agent's
        assert not cached("carol") and not cached("代理人")


def test_the_embedders_calibration_is_read_once_for_every_agent(config: dict[str, Any], root: Path,
                                                               tmp_path: Path) -> None:
    """The calibration vectors depend on the embedder alone: with one embedder for every agent,
    the registry's indexes share one set, embedded (or read) once, not once per agent opened."""
    from clawmem_core.calibration import BACKGROUND_TEXTS

    class Counting(HashEmbedder):
        backgrounds = 0

        def _embed_documents(self, texts: list[str]) -> list[list[float]]:
            if list(texts) == list(BACKGROUND_TEXTS):
                self.backgrounds += 1
            return super()._embed_documents(texts)

    emb = Counting()
    with _registry(config, root, tmp_path, embedder=emb, max_open=2) as indexes:
        for agent in ("alice", "bob", "carol"):  # carol's open closes alice: bob and carol share it still
            assert _found(indexes.get(agent), "cello 钢琴 Seagullgamma")
        assert "Whiskeralpha" in _found(indexes.get("alice"), "Whiskeralpha")
    assert emb.backgrounds == 1


def test_the_mcp_server_loads_the_model_at_start(root: Path, tmp_path: Path) -> None:
    from clawmem_core.mcp_server import _start

    emb = CountingEmbedder()
    with MemoryIndex(root / "alice", config={}, embedder=emb, state_dir=tmp_path / "state") as mem:
        _start(mem, watch=False).join(60)
        assert emb.loads == 1
        assert "Whiskeralpha" in _found(mem, "Whiskeralpha")
        assert emb.loads == 1


def test_a_model_that_fails_to_load_at_start_is_logged_not_raised(root: Path, tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    from clawmem_core.mcp_server import _start

    class Broken(CountingEmbedder):
        def load(self) -> None:
            raise OSError("model file missing")

    with MemoryIndex(root / "alice", config={}, embedder=Broken(), state_dir=tmp_path / "state") as mem:
        with caplog.at_level("WARNING", logger="clawmem"):
            _start(mem, watch=False).join(60)
        assert "model file missing" in caplog.text
