"""``ClawmemMemoryBlock``: a block for LlamaIndex's ``Memory`` that recalls relevant notes."""

from __future__ import annotations

import logging
from typing import Any, List, Optional

from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock
from llama_index.core.bridge.pydantic import ConfigDict, Field
from llama_index.core.memory.memory import BaseMemoryBlock

from clawmem_core import MemoryIndex, SearchResult
from clawmem_core.tools import citations_enabled

log = logging.getLogger("clawmem")


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
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str = Field(default="clawmem_recall", description="The name of the memory block.")
    memory: MemoryIndex = Field(description="The clawmem index to search.")
    max_results: Optional[int] = Field(default=3, ge=1, description="Snippets recalled per turn (None: the index default).")
    min_score: Optional[float] = Field(default=None, description="Minimum score (None: the index default).")
    retrieval_context_window: int = Field(
        default=1, ge=1, description="How many of the latest user messages form the query."
    )
    session_key: Optional[str] = Field(default=None, description="Chat key for citations='auto' (groups drop citations).")
    accept_short_term_memory: bool = Field(default=False)

    def _query(self, messages: Optional[List[ChatMessage]]) -> str:
        users = [m for m in messages or [] if m.role == MessageRole.USER]
        texts = []
        for message in users[-self.retrieval_context_window :]:
            text = "".join(b.text for b in message.blocks if isinstance(b, TextBlock))
            if text.strip():
                texts.append(text.strip())
        return "\n".join(texts)

    def format_results(self, hits: List[SearchResult]) -> str:
        """Snippets separated by blank lines, each followed by ``Source: <citation>`` when
        citations are on."""
        cite = citations_enabled(self.memory.config.citations, self.session_key)
        parts = [f"{h.snippet.strip()}\nSource: {h.citation}" if cite else h.snippet.strip() for h in hits]
        return "\n\n".join(parts)

    async def _aget(self, messages: Optional[List[ChatMessage]] = None, **block_kwargs: Any) -> str:
        query = self._query(messages)
        if not query:
            return ""
        try:
            hits = await self.memory.asearch(query, max_results=self.max_results, min_score=self.min_score)
        except Exception as exc:  # recall is best effort: never break the agent's turn
            log.warning("memory recall failed: %s", exc)
            return ""
        return self.format_results(hits)

    async def _aput(self, messages: List[ChatMessage]) -> None:
        """Nothing is stored: write memory as Markdown files."""
        return None
