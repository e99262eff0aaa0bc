"""``ClawmemRetriever``: clawmem search as a LangChain retriever."""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import ensure_config, var_child_runnable_config
from pydantic import ConfigDict, Field

from clawmem_core import SearchResult
from clawmem_core.registry import MemoryResolver

from .session import session_key_of
from .tools import MemorySource, amemory_for_call, memory_for_call

_IGNORED_KWARGS = frozenset({"verbose"})


def document_metadata(hit: SearchResult) -> dict[str, Any]:
    """A hit's metadata in LangChain's convention: ``source`` is the file path (as citation prompts expect);
    clawmem's source kind (``memory`` / ``sessions``) is ``memory_source``."""
    metadata = hit.metadata()
    metadata["memory_source"] = metadata.pop("source")
    metadata["source"] = hit.path
    return metadata


def result_to_document(hit: SearchResult) -> Document:
    """One search hit as a ``Document``: the snippet as content, the chunk id as ``id``."""
    return Document(
        id=hit.id or None,
        page_content=hit.snippet,
        metadata=document_metadata(hit),
    )


class ClawmemRetriever(BaseRetriever):
    """Hybrid search over a clawmem memory workspace.

    Setup:
        .. code-block:: python

            from clawmem_core import MemoryIndex
            from langchain_clawmem import ClawmemRetriever

            retriever = ClawmemRetriever(memory=MemoryIndex("~/agent-workspace"), k=4)

    Invoke:
        .. code-block:: python

            docs = retriever.invoke("what music do I like")
            docs = retriever.invoke("what music do I like", k=2)   # per call
            docs[0].metadata["citation"]                         # "MEMORY.md#L8-L10"

    ``k`` and ``min_score`` default to the index configuration (6 and 0.35). Each ``Document``
    has the chunk id as ``id`` and ``source`` (the file path, as for LangChain's loaders), ``path``,
    ``start_line``, ``end_line``, ``score``, ``vector_score``, ``text_score``, ``memory_source``
    (``memory`` or ``sessions``) and ``citation`` as metadata. The hits are recorded in the recall log (they
    reach the model), under ``session_key`` or the LangGraph thread.

    ``memory`` may be a :class:`~clawmem_core.registry.MemoryResolver`: each call then searches the memory of
    the user its config names (``retriever.invoke(q, config={"configurable": {"user_id": "alice"}})``, or the
    LangGraph run it is part of: its runtime context or ``config["configurable"]``). No user, or a refused one,
    is a :class:`~clawmem_core.errors.ConfigError`, nothing read.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory: MemorySource
    """The memory index to search, or a resolver naming the user's per call."""
    k: int | None = Field(default=None, ge=1)
    """Number of documents to return (``None``: the index's ``query.max_results``)."""
    min_score: float | None = Field(default=None, ge=0.0, le=1.0)
    """Minimum score (``None``: the index's ``query.min_score``)."""
    session_key: str | None = None
    """The session the searches are recorded under in the recall log (``None``: the LangGraph thread, if any)."""

    def _options(self, kwargs: dict[str, Any]) -> tuple[int | None, float | None]:
        k = kwargs.pop("k", self.k)
        min_score = kwargs.pop("min_score", self.min_score)
        unknown = sorted(set(kwargs) - _IGNORED_KWARGS)
        if unknown:
            raise TypeError(f"ClawmemRetriever got unexpected argument(s): {', '.join(unknown)}")
        return k, min_score

    def invoke(self, input: str, config: RunnableConfig | None = None, **kwargs: Any) -> list[Document]:
        if not isinstance(self.memory, MemoryResolver):
            return super().invoke(input, config, **kwargs)
        token = var_child_runnable_config.set(ensure_config(config))  # the call's user, for the search below
        try:
            return super().invoke(input, config, **kwargs)
        finally:
            var_child_runnable_config.reset(token)

    async def ainvoke(self, input: str, config: RunnableConfig | None = None, **kwargs: Any) -> list[Document]:
        if not isinstance(self.memory, MemoryResolver):
            return await super().ainvoke(input, config, **kwargs)
        token = var_child_runnable_config.set(ensure_config(config))
        try:
            return await super().ainvoke(input, config, **kwargs)
        finally:
            var_child_runnable_config.reset(token)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        k, min_score = self._options(kwargs)
        with memory_for_call(self.memory) as mem:
            hits = mem.search(query, max_results=k, min_score=min_score, session_key=session_key_of(self.session_key))
        return [result_to_document(h) for h in hits]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        k, min_score = self._options(kwargs)
        async with amemory_for_call(self.memory) as mem:
            hits = await mem.asearch(
                query, max_results=k, min_score=min_score, session_key=session_key_of(self.session_key)
            )
        return [result_to_document(h) for h in hits]
