"""Conversations that clawmem itself turns into memory go through the secret masker before they reach
``memory/*.md``: ``archive_conversation``, ``MemoryIndex.archive_session``, LlamaIndex ``archive_chat`` and
``ClawmemFlushBlock`` (both modes), and the LangChain flush middleware's ``archive``. A key pasted into the
conversation is in neither the file nor the search results, while the rest of the conversation is. A
``memory_write`` by the model stays the model's words."""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator, Sequence

import pytest

from clawmem_core import MemoryConfig, MemoryIndex
from clawmem_core.flush import archive_conversation
from clawmem_core.writing import archive_session

NOW = datetime(2026, 3, 1, 14, 5, 9)
_BODY = "R8sKq2Vn5TzW0xLm3Yc7Hd1Pf9Jb4Ng6Qa2Ue5Iw8Oy3Xt7G"
KEY = "sk-proj-" + _BODY
TOKEN = "ghp_" + _BODY[:36]
PASSWORD = "Xk9#mP2$vL"
PASTED = (f"here is my OpenAI key {KEY} and my GitHub token {TOKEN}; "
          f"the Lisbon offsite wifi password is hunter2x and 我的密码是 {PASSWORD}")
SECRETS = (_BODY, _BODY[:36], "hunter2x", PASSWORD)


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[MemoryIndex]:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    index = MemoryIndex(ws, config=MemoryConfig(provider="none"), state_dir=tmp_path / "state")
    yield index
    index.close()


def _messages() -> list[dict[str, str]]:
    return [{"role": "user", "content": PASTED}, {"role": "assistant", "content": "Noted the Lisbon offsite."}]


def _assert_masked(mem: MemoryIndex, relpath: str) -> None:
    text = (mem.workspace / relpath).read_text(encoding="utf-8")
    for secret in SECRETS:
        assert secret not in text, (secret, text)
    assert "sk-proj-***" in text and "ghp_***" in text and "我的密码是 ***" in text
    hits = mem.search("Lisbon offsite OpenAI GitHub password", max_results=10, min_score=0)
    assert hits and hits[0].path == relpath
    shown = " ".join(h.snippet for h in hits) + mem.read(relpath).text
    assert "Lisbon offsite" in shown
    for secret in SECRETS:
        assert secret not in shown


def test_archive_conversation_masks_pasted_secrets(mem: MemoryIndex) -> None:
    result = archive_conversation(mem, _messages(), slug="offsite", now=NOW)
    assert result is not None
    _assert_masked(mem, result.relative_to(mem.workspace))


def test_archive_conversation_of_text_masks_pasted_secrets(mem: MemoryIndex) -> None:
    result = archive_conversation(mem, f"User: {PASTED}", slug="offsite", now=NOW)
    assert result is not None
    _assert_masked(mem, result.relative_to(mem.workspace))


def test_memory_index_archive_session_masks_pasted_secrets(mem: MemoryIndex) -> None:
    result = mem.archive_session(f"User: {PASTED}\nAssistant: noted", "offsite", now=NOW)
    _assert_masked(mem, result.relative_to(mem.workspace))


def test_archive_session_masks_the_file_and_the_slug(tmp_path: Path) -> None:
    result = archive_session(tmp_path, f"User: {PASTED}", slug=f"key {TOKEN}", now=NOW)
    text = result.path.read_text(encoding="utf-8")
    assert all(secret not in text for secret in SECRETS)
    assert _BODY[:36].lower() not in result.path.name and result.path.name == "2026-03-01-key-ghp.md"


def test_memory_write_keeps_the_models_words(mem: MemoryIndex) -> None:
    """``memory_write`` stores what the model wrote, as written (documented): the masker is for text that
    clawmem turns into memory itself."""
    result = mem.write(f"the deploy key is {KEY}", now=NOW)
    assert KEY in result.path.read_text(encoding="utf-8")


# -- LlamaIndex ----------------------------------------------------------------------------------------------


def _li_messages() -> list[Any]:
    pytest.importorskip("llama_index.core")
    from llama_index.core.base.llms.types import ChatMessage, MessageRole

    return [ChatMessage(role=MessageRole.USER, content=PASTED),
            ChatMessage(role=MessageRole.ASSISTANT, content="Noted the Lisbon offsite.")]


def test_llama_index_archive_chat_masks_pasted_secrets(mem: MemoryIndex) -> None:
    messages = _li_messages()
    from llama_index_clawmem.flush import archive_chat

    path = asyncio.run(archive_chat(mem, messages, slug="offsite"))
    assert path is not None
    _assert_masked(mem, path)


@pytest.mark.parametrize("mode", ["daily", "archive"])
def test_llama_index_flush_block_masks_pasted_secrets(mem: MemoryIndex, mode: str) -> None:
    messages = _li_messages()
    from llama_index_clawmem.flush import ClawmemFlushBlock

    block = ClawmemFlushBlock(memory=mem, mode=mode)
    asyncio.run(block.aput(messages))
    assert block.written
    _assert_masked(mem, block.written[0])


def test_llama_index_flush_block_masks_what_its_llm_repeats(mem: MemoryIndex) -> None:
    """A distilling model that copies the key into its summary does not get it into memory either."""
    messages = _li_messages()
    from llama_index.core.base.llms.types import ChatMessage, MessageRole
    from llama_index.core.llms.mock import MockFunctionCallingLLM

    from llama_index_clawmem.flush import ClawmemFlushBlock

    def respond(prompt: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        return ChatMessage(role=MessageRole.ASSISTANT, content=f"- {PASTED}")

    block = ClawmemFlushBlock(memory=mem, llm=MockFunctionCallingLLM(response_generator=respond))
    asyncio.run(block.aput(messages))
    _assert_masked(mem, block.written[0])


# -- LangChain -----------------------------------------------------------------------------------------------


def test_langchain_flush_middleware_archive_masks_pasted_secrets(mem: MemoryIndex) -> None:
    pytest.importorskip("langchain")
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage

    from langchain_clawmem.middleware import MemoryFlushMiddleware

    middleware = MemoryFlushMiddleware(mem, model=GenericFakeChatModel(messages=iter([])), context_window=100_000)
    out = middleware.archive([HumanMessage(PASTED), AIMessage("Noted the Lisbon offsite.")], slug="offsite", now=NOW)
    assert out is not None
    _assert_masked(mem, out["path"])
