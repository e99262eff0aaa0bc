"""Flushed short-term messages become long-term Markdown memory (LlamaIndex).

LlamaIndex's ``Memory`` keeps a short-term FIFO queue of chat messages; when the queue grows past
``token_limit * chat_history_token_ratio`` it flushes the oldest messages to its memory blocks. The
:class:`ClawmemFlushBlock` is a memory block that writes what it receives as a durable Markdown note, so
nothing a conversation drops from its context is lost:

.. code-block:: python

    from llama_index.core.memory import Memory
    from llama_index_clawmem.flush import ClawmemFlushBlock

    memory = Memory.from_defaults(
        session_id="dana", token_limit=30_000, memory_blocks=[ClawmemFlushBlock(memory=mem)]
    )

``mode="daily"`` (default) appends the flushed turns to today's ``memory/YYYY-MM-DD.md``;
``mode="archive"`` saves each flush as its own ``memory/YYYY-MM-DD-<slug>.md``. With an ``llm`` the block
first asks it (with the pre-compaction flush prompt) to distil the durable memories and writes only those
(nothing when it answers ``NO_REPLY``). The block injects nothing into the context; pair it with
``ClawmemMemoryBlock`` for recall. Write failures are logged, never raised into the agent.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import Any, List, Literal, Optional, Union

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.bridge.pydantic import ConfigDict, Field
from llama_index.core.memory.memory import BaseMemoryBlock

from clawmem_core import MemoryIndex
from clawmem_core.registry import MemoryResolver
from clawmem_core.flush import archive_conversation, format_conversation, is_silent_reply, slug_prompt
from clawmem_core.masking import mask_secrets

from .users import amemory_for_call

__all__ = ["ClawmemFlushBlock", "DISTIL_PROMPT", "archive_chat"]

log = logging.getLogger("clawmem")

DISTIL_PROMPT = (
    "These messages are leaving the conversation's context. Write the durable memories worth keeping from them "
    "(facts, decisions, preferences, people, open tasks) as short Markdown bullet points, and nothing else. "
    "If nothing is worth storing, reply with NO_REPLY.\n\n{conversation}"
)


def _parts(note: str, limit: int) -> List[str]:
    """``note`` in pieces of at most ``limit`` characters, cut at line ends where a line allows
    (``memory_write`` refuses a note over ``write.max_note_chars``: a long flush is written as several)."""
    limit = max(1, limit)
    parts: List[str] = []
    rest = note
    while len(rest) > limit:
        cut = rest.rfind("\n", 0, limit + 1)
        if cut <= 0:
            cut = limit
        parts.append(rest[:cut].rstrip("\n"))
        rest = rest[cut:].lstrip("\n")
    if rest or not parts:
        parts.append(rest)
    return parts


def _text(message: Any) -> str:
    content = getattr(message, "content", message)
    return content if isinstance(content, str) else str(content or "")


class ClawmemFlushBlock(BaseMemoryBlock[str]):
    """A memory block writing the messages ``Memory`` flushes from short-term memory as Markdown notes (secrets
    masked).

    ``memory`` may be a :class:`~clawmem_core.registry.MemoryResolver`: each flush then writes into the memory
    of the user the running agent's workflow ``Context`` names, else
    :func:`~llama_index_clawmem.users.memory_user`; a flush naming no user, or a refused one, raises
    :class:`~clawmem_core.errors.ConfigError` before anything is written (``written`` then lists the writes of
    every user, each path relative to that user's workspace)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str = Field(default="clawmem_flush", description="The name of the memory block.")
    memory: Union[MemoryIndex, MemoryResolver] = Field(
        description="The clawmem index to write to, or a MemoryResolver naming the user's per call."
    )
    mode: Literal["daily", "archive"] = Field(
        default="daily", description="'daily': append to memory/YYYY-MM-DD.md; 'archive': one new file per flush."
    )
    llm: Optional[Any] = Field(default=None, description="Optional LLM distilling durable memories before writing.")
    heading: str = Field(default="Conversation notes", description="Heading of each daily entry.")
    accept_short_term_memory: bool = Field(default=True)
    #: Paths (workspace-relative) written by this block, oldest first.
    written: List[str] = Field(default_factory=list, exclude=True)

    async def _aget(self, messages: Optional[List[ChatMessage]] = None, **block_kwargs: Any) -> str:
        return ""  # write-only: recall comes from memory_search / ClawmemMemoryBlock

    async def _distil(self, conversation: str) -> Optional[str]:
        if self.llm is None:
            return conversation
        reply = await self.llm.achat(
            [ChatMessage(role=MessageRole.USER, content=DISTIL_PROMPT.format(conversation=conversation))]
        )
        text = _text(reply.message).strip()
        return None if is_silent_reply(text) else text

    async def _slug(self, conversation: str) -> Optional[str]:
        if self.llm is None:
            return None
        try:
            reply = await self.llm.achat([ChatMessage(role=MessageRole.USER, content=slug_prompt(conversation))])
        except Exception as exc:
            log.warning("slug for the memory archive failed: %s", exc)
            return None
        return _text(reply.message).strip() or None

    async def _aput(self, messages: List[ChatMessage]) -> None:
        conversation = format_conversation(messages)
        if not conversation.strip():
            return
        # a resolver's missing or refused user raises here, before anything is written
        async with amemory_for_call(self.memory) as mem:
            result = await self._write(mem, conversation)
            if result is not None:
                self.written.append(result.relative_to(mem.workspace))

    async def _write(self, mem: MemoryIndex, conversation: str) -> Any:
        result = None
        try:
            note = await self._distil(conversation)
            if not note:
                return None
            note = mask_secrets(note)  # flushed messages become memory: pasted keys stay out of memory/
            if self.mode == "archive":
                slug = await self._slug(conversation)
                result = await asyncio.to_thread(archive_conversation, mem, note, slug=slug)
            else:
                stamp = datetime.now()
                heading = f"## {self.heading} ({stamp:%H:%M})"
                parts = _parts(note, mem.config.write.max_note_chars - len(heading) - 32)
                for i, part in enumerate(parts, 1):  # a long flush is kept whole, as several notes
                    label = f"{heading} ({i}/{len(parts)})" if len(parts) > 1 else heading
                    result = await asyncio.to_thread(mem.write, f"{label}\n\n{part}", "daily")
        except Exception as exc:  # never break the agent's turn over a note
            log.warning("writing flushed messages to memory failed: %s", exc)
            return None
        return result

    async def atruncate(self, content: str, tokens_to_truncate: int) -> Optional[str]:
        return ""


async def archive_chat(
    mem: MemoryIndex,
    messages: List[ChatMessage],
    *,
    slug: Optional[str] = None,
    llm: Optional[Any] = None,
    max_messages: Optional[int] = 15,
) -> Optional[str]:
    """Save a chat (e.g. ``await memory.aget_all()`` when a session ends) to ``memory/YYYY-MM-DD-<slug>.md``;
    the slug is ``slug``, else one asked from ``llm``, else a timestamp. Returns the path, or ``None`` when
    there was nothing to save."""
    text = format_conversation(messages, max_messages=max_messages)
    if not text.strip():
        return None
    chosen = slug
    if chosen is None and llm is not None:
        try:
            reply = await llm.achat([ChatMessage(role=MessageRole.USER, content=slug_prompt(text))])
            chosen = _text(reply.message).strip() or None
        except Exception as exc:
            log.warning("slug for the memory archive failed: %s", exc)
    result = await asyncio.to_thread(archive_conversation, mem, text, slug=chosen)
    return None if result is None else result.relative_to(mem.workspace)
