"""Memory per call in LlamaIndex: one ``FunctionAgent`` (one set of tools, one recall block, one retriever)
serving two users over a ``MemoryResolver`` (one SQLite file and one workspace per user). The user is named in
the run's workflow ``Context`` (its store or the agent state) or with ``memory_user()``; each run sees only its
user's notes, and a run naming no user is a clear error that opens nobody's memory."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Iterator, Sequence

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.agent.workflow import FunctionAgent, ToolCallResult  # noqa: E402
from llama_index.core.base.llms.types import ChatMessage, MessageRole  # noqa: E402
from llama_index.core.memory import Memory  # noqa: E402
from llama_index.core.tools import FunctionTool  # noqa: E402
from llama_index.core.workflow import Context  # noqa: E402

from clawmem_core.errors import ConfigError  # noqa: E402
from clawmem_core.registry import MemoryIndexes, MemoryResolver  # noqa: E402
from llama_index_clawmem import (  # noqa: E402
    ClawmemFlushBlock,
    ClawmemMemoryBlock,
    ClawmemRetriever,
    ClawmemToolSpec,
    create_memory_tools,
    create_memory_write_tool,
    memory_user,
)
from llama_index_clawmem.testing import NOTHING_FOUND, ScriptedRecallLLM  # noqa: E402

from .two_users import NOTES, two_users  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince20"),
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince211"),
    pytest.mark.filterwarnings("ignore::UserWarning"),  # the workflow state store on serializing Memory
]

TERMS = [{"alice": "cello", "bob": "bicycles"}, {"alice": "乌龙茶", "bob": "饺子"}]


@pytest.fixture
def resolver(tmp_path: Path) -> Iterator[MemoryResolver]:
    """Two users, one SQLite file and one workspace each (max_open=1: each switch of user reopens)."""
    yield from two_users(tmp_path, {})


@pytest.fixture
def resolver_on(tmp_path: Path, store_config: dict[str, Any]) -> Iterator[MemoryResolver]:
    """The same, on SQLite and on one PostgreSQL database."""
    yield from two_users(tmp_path, store_config)


@pytest.fixture
def fresh(resolver: MemoryResolver) -> Iterator[MemoryResolver]:
    """The same users, nobody's memory open yet."""
    resolver.indexes.close()
    indexes = MemoryIndexes({"provider": "none"}, workspace_root=resolver.indexes.workspace_of("alice").parent,  # type: ignore[union-attr]
                            state_dir=resolver.indexes.state_dir)
    with indexes:
        yield MemoryResolver(indexes)


async def _context(agent: FunctionAgent, user: str | None, *, in_state: bool = False) -> Context:
    ctx = Context(agent)
    if user is not None:
        if in_state:
            await ctx.store.set("state", {"user_id": user})
        else:
            await ctx.store.set("user_id", user)
    return ctx


async def _run(agent: FunctionAgent, question: str, ctx: Context | None = None, **kwargs: Any) -> tuple[list[ToolCallResult], str]:
    handler = agent.run(user_msg=question, ctx=ctx, **kwargs)
    results = [ev async for ev in handler.stream_events() if isinstance(ev, ToolCallResult)]
    return results, str(await handler)


def _agents(resolver: MemoryResolver) -> list[FunctionAgent]:
    # state_prompt: the agent state (which may name the user) is not written into the scripted model's query
    spec = ClawmemToolSpec(resolver)
    return [FunctionAgent(tools=create_memory_tools(resolver), llm=ScriptedRecallLLM(), state_prompt="{msg}"),
            FunctionAgent(tools=spec.to_tool_list(), llm=ScriptedRecallLLM(), system_prompt=spec.recall_prompt(),
                          state_prompt="{msg}")]


@pytest.mark.parametrize("terms", TERMS)
async def test_one_agent_two_users_each_sees_only_their_own_notes(resolver: MemoryResolver, terms: dict[str, str]) -> None:
    for agent in _agents(resolver):
        for user, other in (("alice", "bob"), ("bob", "alice"), ("alice", "bob")):
            for in_state in (False, True):
                ctx = await _context(agent, user, in_state=in_state)
                results, answer = await _run(agent, terms[user], ctx)
                assert [r.tool_name for r in results] == ["memory_search", "memory_get"], answer
                assert terms[user] in results[1].tool_output.raw_output["text"]
                assert terms[user] in answer
                # the other user's term, asked in this user's run, finds nothing
                results, answer = await _run(agent, terms[other], await _context(agent, user, in_state=in_state))
                assert [r.tool_name for r in results] == ["memory_search"]
                assert results[0].tool_output.raw_output["results"] == [] and answer == NOTHING_FOUND


async def test_concurrent_runs_of_one_agent_stay_apart(resolver_on: MemoryResolver) -> None:
    agent = _agents(resolver_on)[0]

    async def ask(user: str, question: str) -> str:
        return (await _run(agent, question, await _context(agent, user)))[1]

    answers = await asyncio.gather(*(ask(u, q) for _ in range(3) for u in NOTES for q in ("cello", "饺子")))
    for (user, question), answer in zip([(u, q) for _ in range(3) for u in NOTES for q in ("cello", "饺子")], answers):
        owner = "alice" if question == "cello" else "bob"
        assert (question in answer) == (user == owner), (user, question, answer)


async def test_memory_user_names_the_user_outside_the_context(resolver: MemoryResolver) -> None:
    agent = _agents(resolver)[0]
    with memory_user("bob"):
        _, answer = await _run(agent, "bicycles")
    assert "bicycles" in answer
    search = create_memory_tools(resolver, include=["memory_search"])[0]
    with memory_user("alice"):
        assert "cello" in search.call(query="cello").raw_output["results"][0]["snippet"]
        assert search.call(query="饺子").raw_output["results"] == []
        assert "乌龙茶" in (await search.acall(query="乌龙茶")).raw_output["results"][0]["snippet"]
    # the Context and memory_user() naming two users: an error, not a guess
    with memory_user("alice"):
        results, _ = await _run(agent, "bicycles", await _context(agent, "bob"))
    assert results[0].tool_output.is_error and "two users" in results[0].tool_output.raw_output["error"]


async def test_no_user_is_a_clear_error_and_reads_nothing(fresh: MemoryResolver) -> None:
    write = create_memory_write_tool(fresh)
    agent = FunctionAgent(tools=[*create_memory_tools(fresh), write], llm=ScriptedRecallLLM())
    results, answer = await _run(agent, "cello 乌龙茶", await _context(agent, None))
    [search] = results
    assert search.tool_output.is_error and "'user_id'" in search.tool_output.raw_output["error"]
    assert search.tool_output.raw_output["results"] == [] and "cello" not in search.tool_output.content
    assert answer == NOTHING_FOUND
    for tool, args in ((create_memory_tools(fresh)[1], {"path": "MEMORY.md"}), (write, {"text": "x", "target": "long_term"})):
        out = await tool.acall(**args)
        assert out.is_error and "user_id" in out.raw_output["error"] and "cello" not in out.content
        assert tool.call(**args).is_error
    with memory_user("alice"):  # a refused user
        only_bob = MemoryResolver(fresh.indexes, agent_of=lambda u: u if u == "bob" else None)
        out = await create_memory_tools(only_bob)[0].acall(query="cello")
        assert out.is_error and "'alice' has no memory here" in out.raw_output["error"]
    with pytest.raises(ConfigError):
        with memory_user(""):
            pass
    assert fresh.indexes.open_agents() == []


async def test_memory_write_writes_into_the_callers_workspace_only(resolver: MemoryResolver) -> None:
    write = create_memory_write_tool(resolver)
    with memory_user("bob"):
        out = await write.acall(text="Prefers aisle seats. 靠过道的座位。", target="long_term")
    assert not out.is_error and out.raw_output["path"] == "MEMORY.md"
    root = resolver.indexes.workspace_of("bob").parent  # type: ignore[union-attr]
    assert "aisle seats" in (root / "bob" / "MEMORY.md").read_text(encoding="utf-8")
    assert (root / "alice" / "MEMORY.md").read_text(encoding="utf-8") == NOTES["alice"]
    search = create_memory_tools(resolver, include=["memory_search"])[0]
    with memory_user("alice"):
        assert (await search.acall(query="靠过道 aisle")).raw_output["results"] == []
    with memory_user("bob"):
        assert "靠过道" in (await search.acall(query="靠过道 aisle")).raw_output["results"][0]["snippet"]


class RecordingLLM(ScriptedRecallLLM):
    """The scripted LLM, keeping the messages of its latest call."""

    def _respond(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        self.__dict__["seen"] = list(messages)
        return super()._respond(messages, **kwargs)


def _recalled(llm: RecordingLLM) -> str:
    return "\n".join(m.content or "" for m in llm.__dict__["seen"] if m.role == MessageRole.SYSTEM)


@pytest.mark.parametrize("terms", TERMS)
async def test_one_recall_block_serves_each_run_its_users_notes(resolver: MemoryResolver, terms: dict[str, str]) -> None:
    llm = RecordingLLM()
    agent = FunctionAgent(tools=[], llm=llm)
    block = ClawmemMemoryBlock(memory=resolver, max_results=2)
    for user, other in (("alice", "bob"), ("bob", "alice")):
        memory = Memory.from_defaults(session_id=f"chat-{user}", memory_blocks=[block])
        await _run(agent, terms[user], await _context(agent, user), memory=memory)
        assert terms[user] in _recalled(llm) and terms[other] not in _recalled(llm)
        memory = Memory.from_defaults(session_id=f"chat-{user}-2", memory_blocks=[block])
        await _run(agent, terms[other], await _context(agent, user), memory=memory)
        assert "Source:" not in _recalled(llm)  # the other user's note is not in this user's memory
    with memory_user("bob"):  # outside an agent run
        content = await Memory.from_defaults(session_id="s", memory_blocks=[block]).aget(input=terms["bob"])
    assert terms["bob"] in content[0].content


async def test_recall_block_without_a_user_raises(fresh: MemoryResolver) -> None:
    llm = RecordingLLM()
    agent = FunctionAgent(tools=[], llm=llm)
    memory = Memory.from_defaults(session_id="s", memory_blocks=[ClawmemMemoryBlock(memory=fresh)])
    with pytest.raises(ConfigError, match="user_id"):
        await _run(agent, "cello", await _context(agent, None), memory=memory)
    assert "seen" not in llm.__dict__ and fresh.indexes.open_agents() == []


async def test_flush_block_writes_into_the_callers_workspace(resolver: MemoryResolver) -> None:
    block = ClawmemFlushBlock(memory=resolver)
    with memory_user("alice"):
        await block.aput([ChatMessage(role=MessageRole.USER, content="I moved to Porto. 我搬到了波尔图。")])
    root = resolver.indexes.workspace_of("alice").parent  # type: ignore[union-attr]
    [daily] = (root / "alice" / "memory").glob("*.md")
    assert "波尔图" in daily.read_text(encoding="utf-8") and not (root / "bob" / "memory").exists()
    assert block.written == [f"memory/{daily.name}"]
    with pytest.raises(ConfigError, match="user_id"):
        await block.aput([ChatMessage(role=MessageRole.USER, content="nobody's note")])
    assert not (root / "bob" / "memory").exists() and "nobody" not in daily.read_text(encoding="utf-8")


async def test_retriever_in_an_agent_run_and_by_hand(resolver: MemoryResolver) -> None:
    retriever = ClawmemRetriever(resolver, similarity_top_k=2)

    async def memory_search(query: str) -> str:
        """Search memory."""
        return "\n\n".join(n.node.get_content() for n in await retriever.aretrieve(query))

    # a plain tool around the retriever (no ctx parameter): the running step's Context names the user
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(async_fn=memory_search)], llm=ScriptedRecallLLM())
    for user, term, other in (("alice", "乌龙茶", "饺子"), ("bob", "饺子", "乌龙茶")):
        results, _ = await _run(agent, term, await _context(agent, user))
        assert term in results[0].tool_output.content
        results, _ = await _run(agent, other, await _context(agent, user))
        assert other not in results[0].tool_output.content
    with memory_user("bob"):
        nodes = retriever.retrieve("bicycles")
        assert [n.node.metadata["file_path"] for n in nodes] == [str(resolver.indexes.workspace_of("bob") / "MEMORY.md")]
        assert retriever.retrieve("cello") == []
        assert "bicycles" in (await retriever.aretrieve("bicycles"))[0].node.get_content()
    with pytest.raises(ConfigError, match="user_id"):
        retriever.retrieve("cello")
    with pytest.raises(ConfigError, match="user_id"):
        await retriever.aretrieve("cello")


def test_tools_over_one_index_are_unchanged(resolver: MemoryResolver) -> None:
    with resolver.indexes.lease("alice") as mem:
        tools = create_memory_tools(mem)
        assert not any(t.requires_context for t in tools)
        assert "cello" in json.loads(tools[0].call(query="cello").content)["results"][0]["snippet"]
    assert all(t.requires_context for t in create_memory_tools(resolver))


async def test_a_sync_call_in_a_workflow_step_says_to_await(resolver: MemoryResolver) -> None:
    retriever = ClawmemRetriever(resolver)

    def lookup(query: str) -> str:
        """Search memory (synchronously, inside the agent's step)."""
        return "\n".join(n.node.get_content() for n in retriever.retrieve(query))

    agent = FunctionAgent(tools=[FunctionTool.from_defaults(fn=lookup, name="memory_search")], llm=ScriptedRecallLLM())
    results, _ = await _run(agent, "cello", await _context(agent, "alice"))
    assert results[0].tool_output.is_error and "async calls" in results[0].tool_output.content
