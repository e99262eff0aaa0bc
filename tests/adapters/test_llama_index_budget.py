"""The recall block within LlamaIndex ``Memory``'s token budget, counted by the framework's own tokenizer: the
share ``Memory`` leaves its blocks (``token_limit * (1 - chat_history_token_ratio)``), the best hit cut rather
than dropped when only a part of it fits, in English and Chinese."""

from __future__ import annotations

import re
from typing import Iterator, List

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.base.llms.types import ChatMessage, MessageRole  # noqa: E402
from llama_index.core.memory import Memory  # noqa: E402
from llama_index.core.utils import get_tokenizer  # noqa: E402

from clawmem_core import MemoryConfig, MemoryIndex  # noqa: E402
from llama_index_clawmem import ClawmemMemoryBlock  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince20"),
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince211"),
]

BROAD = "Priya Marco Porto Redis"
RECALL = re.compile(r"<clawmem_recall>\n(.*)\n</clawmem_recall>", re.S)

CHINESE_NOTE = (
    "# 数据管道\n\n"
    "- 李伟负责上海办公室的数据管道：每天凌晨两点把订单数据同步到数据仓库，早上八点前生成前一天的销售报表，"
    "报表发给财务部和运营部；同步失败时先重试三次，再给值班的工程师发告警，并在群里通知大家。"
    "- 下个季度计划把批处理任务从 Airflow 迁移到 Dagster，迁移前要先补齐每个任务的单元测试和数据校验，"
    "并且在测试环境里并行运行两周，确认两边的结果完全一致以后再切换。\n"
)


def _tokens(text: str) -> int:
    return len(get_tokenizer()(text))


def _recalled(context: List[ChatMessage]) -> str:
    """The recall block's text as ``Memory`` injected it into the system message ("" when left out)."""
    system = context[0].content if context and context[0].role == MessageRole.SYSTEM else ""
    found = RECALL.search(system or "")
    return found.group(1) if found else ""


async def _recall(block: ClawmemMemoryBlock, query: str, **memory_args: object) -> str:
    memory = Memory.from_defaults(session_id="dana", memory_blocks=[block], **memory_args)  # type: ignore[arg-type]
    await memory.aput(ChatMessage(role=MessageRole.USER, content="Hello again."))
    return _recalled(await memory.aget(input=query))


@pytest.fixture(scope="module")
def chinese_memory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MemoryIndex]:
    ws = tmp_path_factory.mktemp("zh") / "workspace"
    ws.mkdir()
    (ws / "MEMORY.md").write_text(CHINESE_NOTE, encoding="utf-8")
    mem = MemoryIndex(ws, config=MemoryConfig(provider="none"), state_dir=ws.parent / "state")
    mem.sync()
    yield mem
    mem.close()


@pytest.mark.parametrize("token_limit, budget", [(300, 90), (600, 180)])
async def test_block_fits_the_share_memory_leaves_its_blocks(
    keyword_memory: MemoryIndex, token_limit: int, budget: int
) -> None:
    hits = keyword_memory.search(BROAD, max_results=3)
    whole = ClawmemMemoryBlock(memory=keyword_memory).format_results(hits, "dana")
    assert _tokens(whole) > budget + 100  # the whole recall would overflow the budget by far
    text = await _recall(ClawmemMemoryBlock(memory=keyword_memory), BROAD, token_limit=token_limit, chat_history_token_ratio=0.7)
    assert 0 < _tokens(text) <= budget
    assert text.startswith(hits[0].snippet.strip())  # the best hit first, whole at these budgets
    assert f"Source: {hits[0].citation}" in text
    assert hits[-1].snippet.strip() not in text  # the lowest-scoring one left out


async def test_best_hit_is_cut_not_dropped_when_only_a_part_fits(keyword_memory: MemoryIndex) -> None:
    best = keyword_memory.search(BROAD, max_results=3)[0]
    budget = 30  # token_limit 100, 70 % kept for the chat history
    assert _tokens(best.snippet) > budget
    text = await _recall(ClawmemMemoryBlock(memory=keyword_memory), BROAD, token_limit=100, chat_history_token_ratio=0.7)
    assert 0 < _tokens(text) <= budget
    head, source = text.split("…\nSource: ")
    assert source == best.citation and len(head) > 20 and best.snippet.startswith(head)


async def test_chinese_snippet_is_cut_at_a_character_within_the_budget(chinese_memory: MemoryIndex) -> None:
    query = "数据管道 李伟"
    best = chinese_memory.search(query, max_results=1)[0]
    assert _tokens(best.snippet) > 60
    for token_limit in (100, 200):
        budget = int(token_limit * 0.3)
        text = await _recall(ClawmemMemoryBlock(memory=chinese_memory), query, token_limit=token_limit)
        assert 0 < _tokens(text) <= budget
        head, source = text.split("…\nSource: ")
        assert source == best.citation and best.snippet.startswith(head) and "李伟" in head
        assert "\ufffd" not in text


async def test_budget_is_counted_with_memorys_tokenizer(keyword_memory: MemoryIndex) -> None:
    # Memory counts characters here: the block must fit 60 characters, not 60 tiktoken tokens.
    text = await _recall(
        ClawmemMemoryBlock(memory=keyword_memory), BROAD, token_limit=200, chat_history_token_ratio=0.7, tokenizer_fn=list
    )
    best = keyword_memory.search(BROAD, max_results=1)[0]
    assert 0 < len(text) <= 60 and text.endswith(f"…\nSource: {best.citation}")
    assert best.snippet.startswith(text.split("…\n")[0])


async def test_max_tokens_sets_the_budget_outside_a_memory(keyword_memory: MemoryIndex, chinese_memory: MemoryIndex) -> None:
    for mem, query in ((keyword_memory, BROAD), (chinese_memory, "数据管道")):
        block = ClawmemMemoryBlock(memory=mem, max_tokens=25)
        text = await block.aget([ChatMessage(role=MessageRole.USER, content=query)], session_id="dana")
        best = mem.search(query, max_results=1)[0]
        assert 0 < _tokens(text) <= 25 and best.snippet.startswith(text.split("…\n")[0])
    # A budget not even a citation fits in: nothing is recalled rather than a snippet without its source.
    block = ClawmemMemoryBlock(memory=keyword_memory, max_tokens=3)
    assert await block.aget([ChatMessage(role=MessageRole.USER, content=BROAD)], session_id="dana") == ""


async def test_atruncate_cuts_the_best_hit_rather_than_dropping_it(keyword_memory: MemoryIndex) -> None:
    block = ClawmemMemoryBlock(memory=keyword_memory, max_tokens=10_000)
    full = await block.aget([ChatMessage(role=MessageRole.USER, content=BROAD)], session_id="dana")
    best = keyword_memory.search(BROAD, max_results=1)[0]
    cut = await block.atruncate(full, _tokens(full) - 30)
    assert cut is not None and _tokens(cut) <= 30 and cut.endswith(f"…\nSource: {best.citation}")
    assert best.snippet.startswith(cut.split("…\n")[0])
    assert await block.atruncate(cut, _tokens(cut)) is None  # nothing may stay: the block is dropped

