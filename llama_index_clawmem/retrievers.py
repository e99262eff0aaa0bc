"""``ClawmemRetriever``: clawmem search as a LlamaIndex retriever."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import NodeRelationship, NodeWithScore, QueryBundle, RelatedNodeInfo, TextNode

from clawmem_core import MemoryIndex, SearchResult

from .users import MemorySource, amemory_for_call, memory_for_call

#: Metadata kept out of the text an LLM sees (path and citation stay in).
LLM_EXCLUDED_METADATA = [
    "file_path", "file_name", "start_line", "end_line", "score", "vector_score", "text_score", "memory_source"
]
METADATA_KEYS = [
    "path", "file_path", "file_name", "start_line", "end_line", "score", "vector_score", "text_score",
    "memory_source", "citation",
]


def _file_path(hit: SearchResult, memory: MemoryIndex | None) -> Path:
    path = Path(hit.path)
    if memory is None or path.is_absolute():
        return path
    if hit.source == "sessions" and getattr(memory, "sessions_dir", None) is not None:
        return Path(memory.sessions_dir) / path.name
    return Path(memory.workspace) / path


def node_metadata(hit: SearchResult, memory: MemoryIndex | None = None) -> dict[str, Any]:
    """A hit's metadata in LlamaIndex's convention: ``file_path`` (absolute, when the index is given) and
    ``file_name`` as file readers set them, clawmem's source kind (``memory`` / ``sessions``) as
    ``memory_source``, and the path, lines, scores and citation."""
    metadata = hit.metadata()
    metadata["memory_source"] = metadata.pop("source", None)
    file_path = _file_path(hit, memory)
    metadata["file_path"] = str(file_path)
    metadata["file_name"] = file_path.name
    return metadata


def result_to_node(hit: SearchResult, memory: MemoryIndex | None = None) -> NodeWithScore:
    """One search hit as a scored ``TextNode``: the snippet as text, the chunk id as ``id_``, the file (its
    workspace-relative path) as the ``SOURCE`` relationship, so ``node.ref_doc_id`` names the file."""
    node = TextNode(
        id_=hit.id or hit.citation,
        text=hit.snippet,
        metadata=node_metadata(hit, memory),
        excluded_llm_metadata_keys=list(LLM_EXCLUDED_METADATA),
        excluded_embed_metadata_keys=list(METADATA_KEYS),
        relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=hit.path, metadata={"file_path": hit.path})},
    )
    return NodeWithScore(node=node, score=hit.score)


class ClawmemRetriever(BaseRetriever):
    """Hybrid search over a clawmem memory workspace.

    .. code-block:: python

        from clawmem_core import MemoryIndex
        from llama_index_clawmem import ClawmemRetriever

        retriever = ClawmemRetriever(MemoryIndex("~/agent-workspace"), similarity_top_k=4)
        nodes = retriever.retrieve("what music do I like")
        nodes[0].node.metadata["citation"]          # "MEMORY.md#L8-L10"

    ``similarity_top_k`` and ``min_score`` default to the index configuration (6 and 0.35).
    ``aretrieve`` awaits the engine's async search (the query embedding is awaited, the index
    read runs in a worker thread), so it does not block the event loop. The hits are recorded in the recall log
    (they reach the model), under ``session_key`` when given.

    ``memory`` may be a :class:`~clawmem_core.registry.MemoryResolver`: each retrieval then searches the memory
    of the user the running workflow's ``Context`` names (a retriever tool in an agent run; ``aretrieve``
    only), else :func:`~llama_index_clawmem.users.memory_user`; no user, or a refused one, is a
    :class:`~clawmem_core.errors.ConfigError` (nothing read).
    """

    def __init__(
        self,
        memory: MemorySource,
        similarity_top_k: int | None = None,
        min_score: float | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
        session_key: str | None = None,
        **kwargs: Any,
    ) -> None:
        if similarity_top_k is not None and (isinstance(similarity_top_k, bool) or similarity_top_k < 1):
            raise ValueError(f"similarity_top_k must be a positive integer, got {similarity_top_k!r}")
        self._memory = memory
        self._similarity_top_k = similarity_top_k
        self._min_score = min_score
        self.session_key = session_key
        super().__init__(callback_manager=callback_manager, verbose=verbose, **kwargs)

    @property
    def memory(self) -> MemorySource:
        return self._memory

    @property
    def similarity_top_k(self) -> int | None:
        return self._similarity_top_k

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        with memory_for_call(self._memory) as mem:
            hits = mem.search(
                query_bundle.query_str, max_results=self._similarity_top_k, min_score=self._min_score,
                session_key=self.session_key,
            )
            return [result_to_node(h, mem) for h in hits]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        async with amemory_for_call(self._memory) as mem:
            hits = await mem.asearch(
                query_bundle.query_str, max_results=self._similarity_top_k, min_score=self._min_score,
                session_key=self.session_key,
            )
            return [result_to_node(h, mem) for h in hits]
