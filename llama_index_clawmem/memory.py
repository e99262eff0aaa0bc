"""``ClawmemMemoryBlock``: a block for LlamaIndex's ``Memory`` that recalls relevant notes."""

from __future__ import annotations

import logging
import math
import sys
from collections import OrderedDict
from typing import Any, Callable, List, NamedTuple, Optional, Union

import regex
from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock
from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr
from llama_index.core.memory.memory import BaseMemoryBlock, Memory

from clawmem_core import MemoryIndex, SearchResult
from clawmem_core.registry import MemoryResolver
from clawmem_core.tools import citations_enabled

from clawmem_core.dreaming.schedule import MAX_TRIGGERED, read_triggered

from .users import amemory_for_call

log = logging.getLogger("clawmem")

SEPARATOR = "\n\n"
MAX_REMEMBERED = 64
#: Marks a snippet cut to fit the token budget.
ELLIPSIS = "…"
#: A snippet after the first is only cut when this many of its tokens still fit (a shorter stub is noise).
MIN_CUT_TOKENS = 8
#: How far (a fraction of the kept text) a cut may step back to end at a space or line break.
WORD_BACKTRACK = 0.2

_GRAPHEME = regex.compile(r"\X")


class _Part(NamedTuple):
    score: float
    snippet: str
    source: str  # "\nSource: <citation>", or "" when citations are off

    @property
    def text(self) -> str:
        return self.snippet + self.source


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

    The recalled text fits a token budget, counted with the ``Memory``'s own ``tokenizer_fn``: ``max_tokens``,
    else the share ``Memory`` leaves its blocks (``token_limit`` minus the ``chat_history_token_ratio`` reserved
    for the chat history). Snippets go in best first; the first one that does not fit whole is cut to the
    tokens left (marked ``…``, its ``Source:`` line kept) and the rest are left out. When ``Memory`` asks for
    more room (:meth:`atruncate`), the lowest-scoring snippets go first and the best one is cut rather than
    dropped. The default ``priority`` (1) lets ``Memory`` truncate the block (0 would never truncate it).
    Citations follow ``session_key``, else the ``session_id`` ``Memory`` passes (a group or channel session
    drops them when citations are ``auto``).

    Each search is recorded in the recall log under ``session_key``, else ``Memory``'s ``session_id``.
    ``trigger_recall=True`` puts first, without a search, up to 3 promoted ``MEMORY.md`` entries whose trigger
    phrases (``<!-- trigger: ... -->``) appear in the latest user message.

    ``memory`` may be a :class:`~clawmem_core.registry.MemoryResolver`: one block (and one ``Memory``) then serves
    many users, each read recalling from the memory of the user the running agent's workflow ``Context`` names
    (``await ctx.store.set("user_id", ...)``), else :func:`~llama_index_clawmem.users.memory_user`; a read
    naming no user, or a refused one, raises :class:`~clawmem_core.errors.ConfigError` (nothing recalled).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str = Field(default="clawmem_recall", description="The name of the memory block.")
    priority: int = Field(default=1, description="Memory's truncation priority (0 = never truncate).")
    memory: Union[MemoryIndex, MemoryResolver] = Field(
        description="The clawmem index to search, or a MemoryResolver naming the user's per call."
    )
    max_results: Optional[int] = Field(default=3, ge=1, description="Snippets recalled per turn (None: the index default).")
    min_score: Optional[float] = Field(default=None, description="Minimum score (None: the index default).")
    retrieval_context_window: int = Field(
        default=1, ge=1, description="How many of the latest user messages form the query."
    )
    session_key: Optional[str] = Field(
        default=None, description="Chat key for citations='auto' (None: the session_id Memory passes)."
    )
    max_tokens: Optional[int] = Field(
        default=None,
        ge=0,
        description="The most tokens the recalled text may take (None: the share the calling Memory leaves its "
        "blocks, token_limit * (1 - chat_history_token_ratio); no limit outside a Memory).",
    )
    tokenizer_fn: Optional[Callable[[str], List[Any]]] = Field(
        default=None,
        exclude=True,
        description="Counts tokens (None: the calling Memory's tokenizer_fn, else LlamaIndex's default tokenizer).",
    )
    trigger_recall: bool = Field(
        default=False, description="Also recall promoted entries whose trigger phrases are in the message."
    )
    accept_short_term_memory: bool = Field(default=False)
    #: Recent recalls: content -> its snippets with scores, for atruncate (bounded).
    _recalls: "OrderedDict[str, List[_Part]]" = PrivateAttr(default_factory=OrderedDict)

    def _query(self, messages: Optional[List[ChatMessage]]) -> str:
        users = [m for m in messages or [] if m.role == MessageRole.USER]
        texts = []
        for message in users[-self.retrieval_context_window :]:
            text = "".join(b.text for b in message.blocks if isinstance(b, TextBlock))
            if text.strip():
                texts.append(text.strip())
        return "\n".join(texts)

    def _parts(self, hits: List[SearchResult], session_key: Optional[str]) -> List[_Part]:
        cite = citations_enabled(self.memory.config.citations, session_key)
        return [_Part(h.score, h.snippet.strip(), f"\nSource: {h.citation}" if cite else "") for h in hits]

    def _triggered(self, messages: Optional[List[ChatMessage]], session: Optional[str], mem: MemoryIndex) -> List[_Part]:
        """Promoted entries triggered by the latest user message, as parts ranked above every search hit."""
        if not self.trigger_recall:
            return []
        latest = self._latest_user_text(messages)
        try:
            found = read_triggered(getattr(mem, "workspace", None), latest, limit=MAX_TRIGGERED)
        except Exception as exc:  # best effort, as recall
            log.warning("trigger recall failed: %s", exc)
            return []
        cite = citations_enabled(self.memory.config.citations, session)
        return [_Part(2.0, e.text, f"\nSource: {e.citation}" if cite else "") for e in found]

    @staticmethod
    def _latest_user_text(messages: Optional[List[ChatMessage]]) -> str:
        users = [m for m in messages or [] if m.role == MessageRole.USER]
        if not users:
            return ""
        return "".join(b.text for b in users[-1].blocks if isinstance(b, TextBlock)).strip()

    def format_results(self, hits: List[SearchResult], session_key: Optional[str] = None) -> str:
        """Snippets separated by blank lines, each followed by ``Source: <citation>`` when
        citations are on (the whole text, before any token budget)."""
        return SEPARATOR.join(p.text for p in self._parts(hits, session_key or self.session_key))

    def _counter(self, memory: Optional[Memory]) -> Callable[[str], int]:
        tokenizer = self.tokenizer_fn or (memory.tokenizer_fn if memory is not None else None) or _default_tokenizer()
        return lambda text: len(tokenizer(text)) if text else 0

    def _budget(self, memory: Optional[Memory]) -> Optional[int]:
        if self.max_tokens is not None:
            return self.max_tokens
        if memory is None:
            return None
        reserved = memory.token_limit * memory.chat_history_token_ratio
        return max(0, math.floor(memory.token_limit - reserved + 1e-9))

    def _remember(self, content: str, parts: List[_Part]) -> str:
        if content:
            self._recalls[content] = parts
            self._recalls.move_to_end(content)
            while len(self._recalls) > MAX_REMEMBERED:
                self._recalls.popitem(last=False)
        return content

    async def _aget(self, messages: Optional[List[ChatMessage]] = None, **block_kwargs: Any) -> str:
        memory = _calling_memory(self)
        query = self._query(messages)
        if not query:
            return ""
        session = self.session_key or block_kwargs.get("session_id")
        session = session if isinstance(session, str) else None
        # a resolver's missing or refused user raises here: recall never falls back to other memory
        async with amemory_for_call(self.memory) as mem:
            triggered = self._triggered(messages, session, mem)
            try:
                hits = await mem.asearch(query, max_results=self.max_results, min_score=self.min_score, session_key=session)
            except Exception as exc:  # recall is best effort: never break the agent's turn
                log.warning("memory recall failed: %s", exc)
                hits = []
        seen = {p.source for p in triggered}
        parts = triggered + [p for p in self._parts(hits, session) if not p.source or p.source not in seen]
        if not parts:
            return ""
        budget = self._budget(memory)
        if budget is not None:
            parts = _fit(parts, budget, self._counter(memory))
        return self._remember(SEPARATOR.join(p.text for p in parts), parts)

    async def atruncate(self, content: str, tokens_to_truncate: int) -> Optional[str]:
        """``content`` made ``tokens_to_truncate`` tokens shorter: the lowest-scoring snippets go first and the
        best one is cut to what is left rather than dropped (``None`` when not even a part of it fits)."""
        if tokens_to_truncate <= 0:
            return content
        parts = self._recalls.get(content)
        if parts is None:
            return None  # content this block did not produce: drop it
        count = self._counter(_calling_memory(self))
        order = sorted(range(len(parts)), key=lambda i: parts[i].score, reverse=True)
        fitted = _fit([parts[i] for i in order], count(content) - tokens_to_truncate, count)
        if not fitted:
            return None
        kept = [part for _, part in sorted(zip(order, fitted))]  # back in the order they were recalled
        return self._remember(SEPARATOR.join(p.text for p in kept), kept)

    async def _aput(self, messages: List[ChatMessage]) -> None:
        """Nothing is stored: write memory as Markdown files."""
        return None


def _fit(parts: List[_Part], budget: int, count: Callable[[str], int]) -> List[_Part]:
    """The longest run of ``parts`` (best first) whose joined text takes at most ``budget`` tokens, the first
    part that does not fit whole cut to the tokens left."""
    kept: List[_Part] = []
    for part in parts:
        if count(SEPARATOR.join([*(p.text for p in kept), part.text])) <= budget:
            kept.append(part)
            continue
        head = SEPARATOR.join(p.text for p in kept) + (SEPARATOR if kept else "")
        cut = _cut(part, lambda text: count(head + text) <= budget)
        if cut is not None and (not kept or count(cut.snippet) >= MIN_CUT_TOKENS):
            kept.append(cut)
        break
    return kept


def _cut(part: _Part, fits: Callable[[str], bool]) -> Optional[_Part]:
    """``part`` with the longest head of its snippet (whole characters, ending at a word break where one is
    near) such that ``fits`` accepts its text; ``None`` when not even one character fits."""
    ends = [m.end() for m in _GRAPHEME.finditer(part.snippet)]

    def at(end: int) -> _Part:
        return part._replace(snippet=part.snippet[:end].rstrip() + ELLIPSIS)

    lo, hi = 0, len(ends)  # ends[:lo] are known to fit; invariant: lo == 0 or fits(at(ends[lo - 1]))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(at(ends[mid - 1]).text):
            lo = mid
        else:
            hi = mid - 1
    if lo == 0:
        return None
    end = ends[lo - 1]
    space = max(part.snippet.rfind(" ", 0, end + 1), part.snippet.rfind("\n", 0, end + 1))
    if space > 0 and end - space <= WORD_BACKTRACK * end and part.snippet[:space].strip():
        shorter = at(space)
        if fits(shorter.text):
            return shorter
    return at(end)


def _calling_memory(block: ClawmemMemoryBlock) -> Optional[Memory]:
    """The ``Memory`` whose ``aget`` is asking ``block`` for its content, found among the callers (LlamaIndex
    passes a block its messages and ``session_id``, not the budget); ``None`` outside a ``Memory``."""
    frame = sys._getframe(1)
    for _ in range(8):
        frame = frame.f_back  # type: ignore[assignment]
        if frame is None:
            return None
        owner = frame.f_locals.get("self")
        if isinstance(owner, Memory) and any(b is block for b in owner.memory_blocks):
            return owner
    return None


def _default_tokenizer() -> Callable[[str], List[Any]]:
    from llama_index.core.utils import get_tokenizer

    return get_tokenizer()
