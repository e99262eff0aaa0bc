"""``ClawmemStore``: LangGraph's ``BaseStore`` on Markdown files, driven through LangGraph's own store API, a
``create_agent`` graph (``runtime.store``) and LangMem's memory tools."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Iterator

import pytest

pytest.importorskip("langgraph")
pytest.importorskip("langchain")

from langchain.agents import create_agent  # noqa: E402
from langchain.tools import ToolRuntime, tool  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402
from langgraph.store.base import InvalidNamespaceError, SearchItem  # noqa: E402

from clawmem_core import MemoryConfig, MemoryIndex  # noqa: E402
from clawmem_core.errors import PathNotAllowedError  # noqa: E402
from clawmem_core.testing import HashEmbedder  # noqa: E402
from langchain_clawmem import ClawmemStore  # noqa: E402

from .fakes import ScriptedToolModel, call  # noqa: E402


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[MemoryIndex]:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Memory\n\n- Dana prefers tea.\n", encoding="utf-8")
    index = MemoryIndex(ws, config=MemoryConfig(provider="auto"), embedder=HashEmbedder(), state_dir=tmp_path / "state")
    index.sync()
    yield index
    index.close()


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def test_items_are_markdown_files_a_person_can_read_and_edit(mem: MemoryIndex) -> None:
    store = ClawmemStore(mem)
    store.put(("users", "dana"), "food", {"content": "Dana is vegetarian and loves pastéis de nata.", "kind": "preference"})
    path = mem.workspace / "memory" / "users" / "dana" / "food.md"
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n\nDana is vegetarian and loves pastéis de nata.\n") and text.startswith("---\nkey: \"food\"\n")
    item = store.get(("users", "dana"), "food")
    assert item is not None and item.value == {"content": "Dana is vegetarian and loves pastéis de nata.", "kind": "preference"}
    assert (item.namespace, item.key) == (("users", "dana"), "food")
    # The index finds the item like any note (memory_search included).
    assert "memory/users/dana/food.md" in [h.path for h in mem.search("vegetarian pastéis", min_score=0)]
    # A person edits the body: the store and the index see the edit.
    path.write_text(text.replace("pastéis de nata", "bacalhau à brás"), encoding="utf-8")
    mem.sync()
    assert store.get(("users", "dana"), "food").value["content"].endswith("bacalhau à brás.")
    assert [i.key for i in store.search(("users",), query="bacalhau")] == ["food"]
    # A note someone drops into a namespace folder is an item too.
    (path.parent / "travel plans.md").write_text("Dana flies to Lisbon on 14 May.\n", encoding="utf-8")
    mem.sync()
    dropped = store.get(("users", "dana"), "travel plans")
    assert dropped is not None and dropped.value == {"content": "Dana flies to Lisbon on 14 May."}
    # Update keeps created_at, moves updated_at; delete removes the file.
    store.put(("users", "dana"), "food", {"content": "Dana is vegan now."})
    updated = store.get(("users", "dana"), "food")
    assert updated.created_at == item.created_at and updated.updated_at > item.updated_at
    store.delete(("users", "dana"), "food")
    assert store.get(("users", "dana"), "food") is None and not path.exists()
    assert "memory/users/dana/food.md" not in [h.path for h in mem.search("vegan", min_score=0)]  # the index forgot it


def test_search_is_clawmem_hybrid_search_with_scores_filters_and_paging(mem: MemoryIndex) -> None:
    store = ClawmemStore(mem)
    store.put(("users", "dana"), "tea", {"content": "Dana drinks green tea every morning.", "kind": "habit", "rank": 2})
    store.put(("users", "dana"), "train", {"content": "Dana takes the 08:39 train to Porto.", "kind": "travel", "rank": 5})
    store.put(("users", "marco"), "tea", {"content": "Marco hates tea; he drinks espresso.", "kind": "habit", "rank": 1})
    store.put(("teams", "infra"), "redis", {"content": "The infra team runs Redis 7 on staging.", "kind": "fact", "rank": 3})
    results = store.search(("users",), query="who drinks green tea in the morning")
    assert results and all(isinstance(r, SearchItem) for r in results)
    assert (results[0].namespace, results[0].key) == (("users", "dana"), "tea")
    scores = [r.score for r in results]
    assert all(isinstance(s, float) for s in scores) and scores == sorted(scores, reverse=True)
    assert all(r.namespace[0] == "users" for r in results)  # the prefix scopes the search
    assert "MEMORY.md" not in {r.key for r in results}
    assert [r.key for r in store.search(("users",), query="tea", filter={"kind": "habit", "rank": {"$gte": 2}})] == ["tea"]
    page = store.search(("users",), query="who drinks green tea in the morning", limit=1, offset=1)
    assert [(r.namespace, r.key) for r in page] == [(r.namespace, r.key) for r in results[1:2]]
    # Without a query: newest first, no score.
    listed = store.search(("users",))
    assert [r.key for r in listed] == ["tea", "train", "tea"] and all(r.score is None for r in listed)
    assert [r.key for r in store.search((), filter={"kind": "fact"})] == ["redis"]
    assert store.list_namespaces() == [("teams", "infra"), ("users", "dana"), ("users", "marco")]
    assert store.list_namespaces(prefix=("users",), max_depth=1) == [("users",)]
    assert store.list_namespaces(suffix=("marco",)) == [("users", "marco")]


def test_chinese_namespaces_keys_and_search(mem: MemoryIndex) -> None:
    store = ClawmemStore(mem)
    store.put(("用户", "李伟"), "饮食偏好", {"content": "李伟不吃辣，喜欢清淡的粤菜。"})
    assert (mem.workspace / "memory" / "用户" / "李伟" / "饮食偏好.md").is_file()
    hits = store.search(("用户",), query="李伟喜欢什么菜")
    assert hits and (hits[0].namespace, hits[0].key) == (("用户", "李伟"), "饮食偏好") and hits[0].score
    assert store.list_namespaces() == [("用户", "李伟")]


HOSTILE_KEYS = ["../../escape", "/etc/passwd", "a/../../b", "..", ".", ".hidden", "con", "x\\..\\y", "%2E%2E", " pad ", "k" * 600, "nul\x00byte", "line\nbreak"]


def test_hostile_namespaces_and_keys_stay_inside_the_workspace(mem: MemoryIndex, tmp_path: Path) -> None:
    store = ClawmemStore(mem, folder="agents/main")
    outside_before = _files(tmp_path) - {f for f in _files(tmp_path) if f.startswith(("ws/", "state/"))}
    for i, key in enumerate(HOSTILE_KEYS):
        for namespace in [("users",), ("/", "x"), ("/etc",), ("a\\b",), ("~",), ("%2e%2e",), (" ",), ("C:",), ("\\\\server",)]:
            store.put(namespace, key, {"content": f"note {i}"})
            got = store.get(namespace, key)
            assert got is not None and got.key == key and got.value == {"content": f"note {i}"}, (namespace, key)
    written = _files(mem.workspace)
    assert all(f.startswith("memory/agents/main/") or f in ("MEMORY.md",) for f in written), written
    assert all(len(part.encode()) <= 255 for f in written for part in f.split("/"))
    outside_after = _files(tmp_path) - {f for f in _files(tmp_path) if f.startswith(("ws/", "state/"))}
    assert outside_after == outside_before
    assert ("/", "x") in store.list_namespaces() and ("%2e%2e",) in store.list_namespaces()
    for bad in [("a.b",), ("",), ("ok", ""), ("..",), ("..", "x")]:
        with pytest.raises(InvalidNamespaceError):
            store.put(bad, "k", {"content": "x"})
    with pytest.raises(InvalidNamespaceError):
        store.put(("langgraph",), "k", {"content": "x"})
    with pytest.raises(ValueError):
        ClawmemStore(mem, folder="../outside")


def test_symlinked_namespace_folders_are_refused(mem: MemoryIndex, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("top secret\n", encoding="utf-8")
    os.symlink(outside, mem.workspace / "memory" / "linked")
    store = ClawmemStore(mem)
    with pytest.raises(PathNotAllowedError):
        store.put(("linked",), "note", {"content": "through the link"})
    assert store.get(("linked",), "secret") is None
    assert store.search(("linked",)) == [] and ("linked",) not in store.list_namespaces()
    with pytest.raises(PathNotAllowedError):
        store.delete(("linked",), "secret")
    assert _files(outside) == {"secret.md"} and (outside / "secret.md").read_text() == "top secret\n"


def test_a_symlinked_item_file_is_never_read_or_written_through(mem: MemoryIndex, tmp_path: Path) -> None:
    outside = tmp_path / "outside.md"
    outside.write_text("top secret\n", encoding="utf-8")
    folder = mem.workspace / "memory" / "users"
    folder.mkdir()
    (folder / "notes.md").write_text("A real note about Lisbon.\n", encoding="utf-8")
    os.symlink(outside, folder / "evil.md")
    store = ClawmemStore(mem)
    store.put(("users",), "tea", {"content": "Dana drinks tea."})  # the folder is a namespace: notes.md an item
    assert store.get(("users",), "evil") is None
    assert [i.key for i in store.search(("users",))] == ["tea", "notes"]
    store.put(("users",), "evil", {"content": "replaced"})  # the link itself is replaced, its target untouched
    assert outside.read_text(encoding="utf-8") == "top secret\n"
    assert not (folder / "evil.md").is_symlink() and store.get(("users",), "evil").value == {"content": "replaced"}


def test_bad_values_write_nothing(mem: MemoryIndex) -> None:
    store = ClawmemStore(mem)
    with pytest.raises(TypeError):
        store.put(("users",), "bad", {"content": object()})
    assert not (mem.workspace / "memory" / "users").exists()


def test_async_api(mem: MemoryIndex) -> None:
    store = ClawmemStore(mem)

    async def run() -> list[SearchItem]:
        await store.aput(("users", "dana"), "music", {"content": "Dana listens to fado on Sundays."})
        assert (await store.aget(("users", "dana"), "music")).value["content"].startswith("Dana listens")
        return await store.asearch(("users",), query="fado Sundays")

    hits = asyncio.run(run())
    assert hits and hits[0].key == "music" and hits[0].score is not None


# -- through the frameworks --------------------------------------------------------------------------------------


@tool
def remember(fact: str, runtime: ToolRuntime) -> str:
    """Store a fact about the user."""
    runtime.store.put(("users", "dana"), "fact-1", {"content": fact})
    return "stored"


@tool
def recall(query: str, runtime: ToolRuntime) -> str:
    """Look facts up."""
    return "\n".join(item.value["content"] for item in runtime.store.search(("users", "dana"), query=query))


def test_create_agent_tools_use_the_store_through_runtime(mem: MemoryIndex) -> None:
    store = ClawmemStore(mem)
    model = ScriptedToolModel(
        script=[
            AIMessage("", tool_calls=[call("remember", {"fact": "Dana's sister Inês lives in Coimbra."}, "r1")]),
            AIMessage("", tool_calls=[call("recall", {"query": "where does Inês live"}, "r2")]),
            AIMessage("Coimbra."),
        ]
    )
    state = create_agent(model, [remember, recall], store=store).invoke({"messages": [HumanMessage("go")]})
    results = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert results[1].content == "Dana's sister Inês lives in Coimbra."
    assert (mem.workspace / "memory/users/dana/fact-1.md").is_file()
    assert "memory/users/dana/fact-1.md" in [h.path for h in mem.search("Inês Coimbra", min_score=0)]


def test_langmem_memory_tools_work_on_clawmem(mem: MemoryIndex) -> None:
    langmem = pytest.importorskip("langmem")
    manage = langmem.create_manage_memory_tool(namespace=("memories", "{langgraph_user_id}"))
    search = langmem.create_search_memory_tool(namespace=("memories", "{langgraph_user_id}"))
    model = ScriptedToolModel(
        script=[
            AIMessage("", tool_calls=[call("manage_memory", {"content": "User prefers window seats on trains."}, "m1")]),
            AIMessage("", tool_calls=[call("search_memory", {"query": "window seats trains"}, "s1")]),
            AIMessage("Noted."),
        ]
    )
    agent = create_agent(model, [manage, search], store=ClawmemStore(mem))
    state = agent.invoke({"messages": [HumanMessage("I like window seats")]}, {"configurable": {"langgraph_user_id": "dana"}})
    created, found = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert created.status == "success" and created.content.startswith("created memory ")
    memory_id = created.content.split()[-1]
    assert (mem.workspace / "memory" / "memories" / "dana" / f"{memory_id}.md").is_file()
    assert memory_id in found.content and "window seats" in found.content and '"score"' in found.content


@pytest.mark.parametrize(
    "value",
    [
        {"content": {"food": "tea", "tags": ["a", "b"]}},  # LangMem with a schema: structured content
        {"x": "y", "n": 3},
        {"content": "multi\n\nline\n---\nwith a rule", "kind": "note"},
        {},
        {"content": ""},
        {"content": "中文内容：李伟喜欢清淡的粤菜。"},
    ],
)
def test_values_round_trip(mem: MemoryIndex, value: dict) -> None:
    store = ClawmemStore(mem)
    store.put(("t",), "k", value)
    assert store.get(("t",), "k").value == value


def test_agents_store_maps_the_first_label_to_an_agent_workspace(mem: MemoryIndex, tmp_path: Path) -> None:
    from langchain_clawmem import ClawmemAgentsStore

    ws = tmp_path / "support-ws"
    (ws / "memory").mkdir(parents=True)
    support = MemoryIndex(ws, config=MemoryConfig(provider="auto"), embedder=HashEmbedder(), state_dir=tmp_path / "support-state")
    try:
        store = ClawmemAgentsStore({"main": mem, "support": support})
        store.put(("main", "users", "dana"), "tea", {"content": "Dana drinks green tea every morning."})
        store.put(("support", "users", "dana"), "ticket", {"content": "Dana reported a broken tea kettle, ticket 42."})
        assert (mem.workspace / "memory/users/dana/tea.md").is_file() and (ws / "memory/users/dana/ticket.md").is_file()
        assert store.get(("support", "users", "dana"), "ticket").namespace == ("support", "users", "dana")
        assert store.get(("main", "users", "dana"), "ticket") is None  # agents do not see each other's items
        assert [(r.namespace[0], r.key) for r in store.search(("support",), query="tea kettle")] == [("support", "ticket")]
        everywhere = store.search((), query="Dana tea")
        assert {(r.namespace[0], r.key) for r in everywhere} == {("main", "tea"), ("support", "ticket")}
        assert all(r.score is not None for r in everywhere)
        assert store.list_namespaces() == [("main", "users", "dana"), ("support", "users", "dana")]
        assert store.list_namespaces(prefix=("support",), max_depth=2) == [("support", "users")]
        for bad in [("nobody", "users"), ("main",)]:
            with pytest.raises(InvalidNamespaceError):
                store.put(bad, "k", {"content": "x"})
    finally:
        support.close()
