"""``ClawmemMemoryBlock``: a block for LlamaIndex's ``Memory`` that recalls relevant notes."""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any, List, Optional, Tuple

from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock
from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr
from llama_index.core.memory.memory import BaseMemoryBlock

from clawmem_core import MemoryIndex, SearchResult
from clawmem_core.tools import citations_enabled

log = logging.getLogger("clawmem")

SEPARATOR = "\n\n"
MAX_REMEMBERED = 64


class ClawmemMemoryBlock(BaseMemoryBlock[str]):
    """Recalls the memory snippets relevant to the latest user message(s) into the context.

    .. code-block:: python

        from llama_index.core.memory import Memory

        memory = Memory.from_defaults(
            session_id="dana", memory_blocks=[ClawmemMemoryBlock(memory=MemoryIndex("~/agent-workspace"))]
        )

    Read-only: the Markdown files are the source of truth, so messages put into the block are
    not stored (``accept_short_term_memory`` is false). A failing search is logged and recalls
    nothing rather than breaking the agent.

    The block respects ``Memory``'s token budget: its default ``priority`` (1) lets ``Memory`` truncate it
    (priority 0 would never be truncated), and :meth:`atruncate` drops the lowest-scoring snippets first, so
    the best ones stay. Citations follow ``session_key``, else the ``session_id`` ``Memory`` passes (a group
    or channel session drops them when citations are ``auto``).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str = Field(default="clawmem_recall", description="The name of the memory block.")
    priority: int = Field(default=1, description="Memory's truncation priority (0 = never truncate).")
    memory: MemoryIndex = Field(description="The clawmem index to search.")
    max_results: Optional[int] = Field(default=3, ge=1, description="Snippets recalled per turn (None: the index default).")
    min_score: Optional[float] = Field(default=None, description="Minimum score (None: the index default).")
    retrieval_context_window: int = Field(
        default=1, ge=1, description="How many of the latest user messages form the query."
    )
    session_key: Optional[str] = Field(
        default=None, description="Chat key for citations='auto' (None: the session_id Memory passes)."
    )
    accept_short_term_memory: bool = Field(default=False)
    #: Recent recalls: content -> its snippets with scores, for atruncate (bounded).
    _recalls: "OrderedDict[str, List[Tuple[float, str]]]" = PrivateAttr(default_factory=OrderedDict)

    def _query(self, messages: Optional[List[ChatMessage]]) -> str:
        users = [m for m in messages or [] if m.role == MessageRole.USER]
        texts = []
        for message in users[-self.retrieval_context_window :]:
            text = "".join(b.text for b in message.blocks if isinstance(b, TextBlock))
            if text.strip():
                texts.append(text.strip())
        return "\n".join(texts)

    def _parts(self, hits: List[SearchResult], session_key: Optional[str]) -> List[Tuple[float, str]]:
        cite = citations_enabled(self.memory.config.citations, session_key)
        return [(h.score, f"{h.snippet.strip()}\nSource: {h.citation}" if cite else h.snippet.strip()) for h in hits]

    def format_results(self, hits: List[SearchResult], session_key: Optional[str] = None) -> str:
        """Snippets separated by blank lines, each followed by ``Source: <citation>`` when
        citations are on."""
        return SEPARATOR.join(text for _, text in self._parts(hits, session_key or self.session_key))

    async def _aget(self, messages: Optional[List[ChatMessage]] = None, **block_kwargs: Any) -> str:
        query = self._query(messages)
        if not query:
            return ""
        try:
            hits = await self.memory.asearch(query, max_results=self.max_results, min_score=self.min_score)
        except Exception as exc:  # recall is best effort: never break the agent's turn
            log.warning("memory recall failed: %s", exc)
            return ""
        session = self.session_key or block_kwargs.get("session_id")
        parts = self._parts(hits, session if isinstance(session, str) else None)
        content = SEPARATOR.join(text for _, text in parts)
        self._recalls[content] = parts
        while len(self._recalls) > MAX_REMEMBERED:
            self._recalls.popitem(last=False)
        return content

    async def atruncate(self, content: str, tokens_to_truncate: int) -> Optional[str]:
        """``content`` without its lowest-scoring snippets, dropping as few as free ``tokens_to_truncate`` tokens
        (``None`` when nothing is left)."""
        if tokens_to_truncate <= 0:
            return content
        parts = self._recalls.get(content)
        if parts is None:
            return None  # content this block did not produce: drop it
        count = _token_counter()
        total = count(content)
        kept = sorted(range(len(parts)), key=lambda i: parts[i][0], reverse=True)
        while kept:
            kept.pop()  # the lowest score
            remaining = SEPARATOR.join(parts[i][1] for i in sorted(kept))
            if total - count(remaining) >= tokens_to_truncate:
                break
        if not kept:
            return None
        result = SEPARATOR.join(parts[i][1] for i in sorted(kept))
        self._recalls[result] = [parts[i] for i in sorted(kept)]
        return result

    async def _aput(self, messages: List[ChatMessage]) -> None:
        """Nothing is stored: write memory as Markdown files."""
        return None


def _token_counter() -> Any:
    from llama_index.core.utils import get_tokenizer

    tokenizer = get_tokenizer()
    return lambda text: len(tokenizer(text)) if text else 0
