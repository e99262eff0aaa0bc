"""Memory per request: one compiled ``create_agent`` graph serving two users, each call's tools, prompt and
auto-recall acting on the memory of the user its config names (a ``MemoryResolver`` over ``MemoryIndexes``,
one SQLite file and one workspace per user), and a call naming no user answered with a clear error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest

pytest.importorskip("langchain")

from langchain.agents import create_agent  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage  # noqa: E402

from clawmem_core.errors import ConfigError  # noqa: E402
from clawmem_core.registry import MemoryIndexes, MemoryResolver  # noqa: E402
from langchain_clawmem import ClawmemMiddleware, ClawmemToolkit  # noqa: E402

from .fakes import ScriptedToolModel, call  # noqa: E402
from .two_users import NOTES, two_users  # noqa: E402

@pytest.fixture
def resolver(tmp_path: Path) -> Iterator[MemoryResolver]:
    yield from two_users(tmp_path)


@pytest.fixture
def fresh_resolver(resolver: MemoryResolver) -> Iterator[MemoryResolver]:
    """The same users, nobody's memory open yet."""
    resolver.indexes.close()
    indexes = MemoryIndexes({"provider": "none"}, workspace_root=resolver.indexes.workspace_of("alice").parent,  # type: ignore[union-attr]
                            state_dir=resolver.indexes.state_dir)
    with indexes:
        yield MemoryResolver(indexes)


def _user(user: str | None) -> dict[str, Any]:
    return {"configurable": {"user_id": user}} if user else {}


def _tool_payloads(result: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in result["messages"] if isinstance(m, ToolMessage)]


def _search_texts(message: ToolMessage) -> str:
    return " ".join(r["snippet"] for r in message.artifact["results"])


@pytest.mark.parametrize("terms", [{"alice": "cello", "bob": "bicycles"}, {"alice": "乌龙茶", "bob": "饺子"}])
def test_each_user_searches_only_their_own_memory(resolver: MemoryResolver, terms: dict[str, str]) -> None:
    model = ScriptedToolModel(script=[AIMessage("", tool_calls=[call("memory_search", {"query": terms["alice"]}, "s1"),
                                                                call("memory_search", {"query": terms["bob"]}, "s2")]),
                                      AIMessage("done")])
    agent = create_agent(model, [], middleware=[ClawmemMiddleware(resolver)])  # one compiled graph for both
    for user, other in (("alice", "bob"), ("bob", "alice"), ("alice", "bob")):
        model.calls.clear()
        result = agent.invoke({"messages": [HumanMessage("what do you know?")]}, config=_user(user))
        found = {m.tool_call_id: m for m in _tool_payloads(result)}
        mine, theirs = (found["s1"], found["s2"]) if user == "alice" else (found["s2"], found["s1"])
        assert mine.status == "success" and theirs.status == "success", (mine.content, theirs.content)
        assert terms[user] in _search_texts(mine)
        assert all(hit["path"] == "MEMORY.md" for hit in mine.artifact["results"])
        assert theirs.artifact["results"] == []  # the other user's note is not in this user's memory


def test_memory_write_writes_into_the_callers_workspace_only(resolver: MemoryResolver) -> None:
    model = ScriptedToolModel(script=[
        AIMessage("", tool_calls=[call("memory_write", {"text": "Prefers aisle seats. 靠过道的座位。", "target": "long_term"}, "w1")]),
        AIMessage("", tool_calls=[call("memory_search", {"query": "aisle seats 靠过道"}, "s1")]),
        AIMessage("done"),
    ])
    agent = create_agent(model, [], middleware=[ClawmemMiddleware(resolver, write=True)])
    result = agent.invoke({"messages": [HumanMessage("remember: aisle seats")]}, config=_user("bob"))
    write, search = _tool_payloads(result)
    assert write.status == "success" and write.artifact["path"] == "MEMORY.md", write.content
    assert "靠过道" in _search_texts(search)
    root = resolver.indexes.workspace_of("bob").parent  # type: ignore[union-attr]
    assert "aisle seats" in (root / "bob" / "MEMORY.md").read_text(encoding="utf-8")
    assert (root / "alice" / "MEMORY.md").read_text(encoding="utf-8") == NOTES["alice"]
    # alice, on the same graph, does not find bob's note
    model.script[:] = [AIMessage("", tool_calls=[call("memory_search", {"query": "aisle seats 靠过道"}, "s2")]),
                       AIMessage("done")]
    model.calls.clear()
    [search] = _tool_payloads(agent.invoke({"messages": [HumanMessage("seats?")]}, config=_user("alice")))
    assert search.status == "success" and search.artifact["results"] == []


def _recalled(model: ScriptedToolModel) -> str:
    first = model.calls[-1][0]
    assert isinstance(first, SystemMessage)
    return first.text


def test_auto_recall_injects_only_the_callers_notes(resolver: MemoryResolver) -> None:
    model = ScriptedToolModel(script=[AIMessage("ok")])
    agent = create_agent(model, [], system_prompt="You help.",
                         middleware=[ClawmemMiddleware(resolver, auto_recall=True)])
    for message, owner, term in (("cello", "alice", "cello"), ("饺子", "bob", "饺子")):
        for user in ("alice", "bob"):
            agent.invoke({"messages": [HumanMessage(message)]}, config=_user(user))
            prompt = _recalled(model)
            assert "## Memory Recall" in prompt
            if user == owner:
                assert "## Recalled memory" in prompt and term in prompt
            else:
                assert "## Recalled memory" not in prompt and term not in prompt


def test_the_user_may_come_from_the_runtime_context(resolver: MemoryResolver) -> None:
    model = ScriptedToolModel(script=[AIMessage("", tool_calls=[call("memory_search", {"query": "bicycles"}, "s1")]),
                                      AIMessage("done")])
    agent = create_agent(model, [], middleware=[ClawmemMiddleware(resolver, auto_recall=True)], context_schema=dict)
    result = agent.invoke({"messages": [HumanMessage("bicycles")]}, context={"user_id": "bob"})
    [msg] = _tool_payloads(result)
    assert "bicycles" in _search_texts(msg)
    assert "bicycles" in _recalled(model) and "cello" not in _recalled(model)


def test_no_user_is_a_clear_error_and_reads_nothing(resolver: MemoryResolver) -> None:
    resolver.indexes.close()  # nothing open: a call without a user must not open anyone's memory
    fresh = MemoryIndexes({"provider": "none"}, workspace_root=resolver.indexes.workspace_of("alice").parent,  # type: ignore[union-attr]
                          state_dir=resolver.indexes.state_dir)
    with fresh:
        users = MemoryResolver(fresh)
        # the tools: an error payload naming what is missing
        model = ScriptedToolModel(script=[AIMessage("", tool_calls=[call("memory_search", {"query": "cello 乌龙茶"}, "s1"),
                                                                    call("memory_get", {"path": "MEMORY.md"}, "g1")]),
                                          AIMessage("done")])
        agent = create_agent(model, [], middleware=[ClawmemMiddleware(users)])
        search, get = _tool_payloads(agent.invoke({"messages": [HumanMessage("hi")]}))
        for msg in (search, get):
            assert msg.status == "error"
            assert "user_id" in msg.artifact["error"]
        assert search.artifact["results"] == [] and get.artifact["text"] == ""
        assert "cello" not in json.dumps(search.artifact) + json.dumps(get.artifact)
        # auto-recall: an exception, before the model is called
        model = ScriptedToolModel(script=[AIMessage("ok")])
        agent = create_agent(model, [], middleware=[ClawmemMiddleware(users, auto_recall=True)])
        with pytest.raises(ConfigError, match="user_id"):
            agent.invoke({"messages": [HumanMessage("cello")]}, config={"configurable": {"user_id": ""}})
        assert model.calls == []
        assert fresh.open_agents() == []


def test_a_refused_user_is_an_error(resolver: MemoryResolver) -> None:
    only_alice = MemoryResolver(resolver.indexes, agent_of=lambda user: user if user == "alice" else None)
    tools = ClawmemToolkit(memory=only_alice).get_tools()
    search = next(t for t in tools if t.name == "memory_search")
    msg = search.invoke(call("memory_search", {"query": "bicycles"}, "s1"), config=_user("bob"))
    assert msg.status == "error" and "'bob' has no memory here" in msg.artifact["error"]
    with pytest.raises(ConfigError, match="has no memory"):
        with only_alice.resolve("mallory"):
            pass
    with pytest.raises(ConfigError):
        with only_alice.resolve("../alice"):
            pass


def test_the_async_path_resolves_per_call_too(resolver: MemoryResolver) -> None:
    import asyncio

    model = ScriptedToolModel(script=[AIMessage("", tool_calls=[call("memory_search", {"query": "饺子"}, "s1")]),
                                      AIMessage("done")])
    agent = create_agent(model, [], middleware=[ClawmemMiddleware(resolver, auto_recall=True)])

    async def run(user: str | None) -> dict[str, Any]:
        model.calls.clear()
        return await agent.ainvoke({"messages": [HumanMessage("饺子")]}, config=_user(user))

    [bob] = _tool_payloads(asyncio.run(run("bob")))
    assert "饺子" in _search_texts(bob) and "饺子" in _recalled(model)
    [alice] = _tool_payloads(asyncio.run(run("alice")))
    assert alice.status == "success" and alice.artifact["results"] == []
    assert "## Recalled memory" not in _recalled(model)
    with pytest.raises(ConfigError, match="user_id"):
        asyncio.run(run(None))


# -- the retriever --------------------------------------------------------------------------------------------


def test_the_retriever_searches_the_memory_of_the_user_its_config_names(resolver: MemoryResolver) -> None:
    import asyncio

    from langchain_clawmem import ClawmemRetriever

    retriever = ClawmemRetriever(memory=resolver, k=2)
    for user, term, other in (("alice", "乌龙茶", "饺子"), ("bob", "bicycles", "cello")):
        docs = retriever.invoke(term, config=_user(user))
        assert docs and term in docs[0].page_content and all(other not in d.page_content for d in docs)
        assert retriever.invoke(other, config=_user(user)) == []
        assert term in asyncio.run(retriever.ainvoke(term, config=_user(user)))[0].page_content
    with pytest.raises(ConfigError, match="user_id"):
        retriever.invoke("cello")
    with pytest.raises(ConfigError, match="user_id"):
        asyncio.run(retriever.ainvoke("cello", config={"configurable": {"thread_id": "t"}}))


def test_the_retriever_inside_a_graph_run_takes_the_runs_user(resolver: MemoryResolver) -> None:
    from langchain_core.tools import tool

    from langchain_clawmem import ClawmemRetriever

    retriever = ClawmemRetriever(memory=resolver, k=2)

    @tool
    def lookup(query: str) -> str:
        """Search memory."""
        return "\n".join(d.page_content for d in retriever.invoke(query))  # no config: the run's user

    model = ScriptedToolModel(script=[AIMessage("", tool_calls=[call("lookup", {"query": "饺子"}, "l1")]), AIMessage("done")])
    agent = create_agent(model, [lookup], context_schema=dict)
    for kwargs, found in (({"config": _user("bob")}, True), ({"context": {"user_id": "bob"}}, True),
                          ({"config": _user("alice")}, False)):
        model.calls.clear()
        [msg] = _tool_payloads(agent.invoke({"messages": [HumanMessage("饺子?")]}, **kwargs))
        assert ("饺子" in msg.content) == found, (kwargs, msg.content)


# -- the pre-compaction flush -----------------------------------------------------------------------------------

FILLER = "We went through the roadmap, the budget lines and the hiring plans in detail. " * 80


def _flush_script(note: str) -> list[AIMessage]:
    # the flush turn writes the note, then answers NO_REPLY; the agent's own turn answers "ok"
    return [AIMessage("", tool_calls=[call("memory_write", {"text": note}, "w1")]), AIMessage("NO_REPLY"), AIMessage("ok")]


def test_the_flush_writes_into_the_callers_memory_only(resolver: MemoryResolver) -> None:
    from langchain_clawmem import MemoryFlushMiddleware

    root = resolver.indexes.workspace_of("alice").parent  # type: ignore[union-attr]
    for user, note in (("alice", "Alice's flat is in Porto. 爱丽丝住在波尔图。"), ("bob", "Bob's bike shop opens at 9.")):
        model = ScriptedToolModel(script=_flush_script(note))
        flush = MemoryFlushMiddleware(resolver, model=model, context_window=3000, reserve_tokens=1000,
                                      soft_threshold_tokens=1000)
        agent = create_agent(model, [], middleware=[flush])
        agent.invoke({"messages": [HumanMessage(FILLER)]}, config=_user(user))
        [daily] = (root / user / "memory").glob("*.md")
        assert note in daily.read_text(encoding="utf-8")
    assert "Porto" not in "".join(p.read_text(encoding="utf-8") for p in (root / "bob").rglob("*.md"))
    assert "bike" not in "".join(p.read_text(encoding="utf-8") for p in (root / "alice").rglob("*.md"))
    with resolver.indexes.lease("alice") as mem:
        assert mem.search("波尔图")[0].path.startswith("memory/")
    # archive: into the named user's memory
    saved = flush.archive([HumanMessage("we planned the bike tour"), AIMessage("ok")], slug="tour", user="bob")
    assert saved is not None and (root / "bob" / saved["path"]).exists()


def test_the_flush_without_a_user_raises_and_writes_nothing(fresh_resolver: MemoryResolver) -> None:
    from langchain_clawmem import MemoryFlushMiddleware

    model = ScriptedToolModel(script=_flush_script("nobody's note"))
    flush = MemoryFlushMiddleware(fresh_resolver, model=model, context_window=3000, reserve_tokens=1000,
                                  soft_threshold_tokens=1000)
    agent = create_agent(model, [], middleware=[flush])
    with pytest.raises(ConfigError, match="user_id"):
        agent.invoke({"messages": [HumanMessage(FILLER)]})
    with pytest.raises(ConfigError, match="user_id"):
        flush.archive([HumanMessage("hello"), AIMessage("ok")], slug="x")
    assert model.calls == [] and fresh_resolver.indexes.open_agents() == []
    root = fresh_resolver.indexes.workspace_of("alice").parent  # type: ignore[union-attr]
    assert not any((root / user / "memory").exists() for user in NOTES)
