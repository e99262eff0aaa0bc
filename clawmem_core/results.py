"""The result types of the public API."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Optional


def citation_for(path: str, start_line: int, end_line: int) -> str:
    """``path#L5`` for one line, ``path#L5-L7`` for a range."""
    return f"{path}#L{start_line}" if start_line == end_line else f"{path}#L{start_line}-L{end_line}"


@dataclass(frozen=True)
class SearchResult:
    """One ranked snippet. ``start_line``/``end_line`` are the chunk's lines; the snippet shows the
    part that matched, lines ``snippet_start_line``..``snippet_end_line`` (the citation). ``vector_score``
    and ``text_score`` show how ``score`` was made."""

    path: str
    start_line: int
    end_line: int
    score: float
    snippet: str
    source: Literal["memory", "sessions"] | str = "memory"
    id: str = ""
    vector_score: float = 0.0
    text_score: float = 0.0
    #: The file lines the snippet shows (0: the chunk's lines).
    snippet_start_line: int = 0
    snippet_end_line: int = 0
    #: The shared namespace the result comes from (``None``: the agent's own memory); its path
    #: then starts with ``@<namespace>/``.
    namespace: str | None = None

    @property
    def citation(self) -> str:
        """``path#Lstart-Lend`` of the lines the snippet shows."""
        return citation_for(self.path, self.snippet_start_line or self.start_line,
                            self.snippet_end_line or self.end_line)

    def metadata(self) -> dict[str, Any]:
        """Where the snippet comes from and how it scored: the metadata of the adapters'
        ``Document`` / ``TextNode``."""
        return {
            "path": self.path,
            "start_line": self.start_line,
            "end_line": self.end_line,
            "score": self.score,
            "vector_score": self.vector_score,
            "text_score": self.text_score,
            "source": self.source,
            "citation": self.citation,
        }

    def to_payload(self) -> dict[str, Any]:
        """The ``memory_search`` result shape (camelCase, SPEC 10)."""
        return {
            "path": self.path,
            "startLine": self.start_line,
            "endLine": self.end_line,
            "score": round(self.score, 6),
            "snippet": self.snippet,
            "source": self.source,
            "citation": self.citation,
            **({"namespace": self.namespace} if self.namespace else {}),
        }


class SearchHits(list):  # type: ignore[type-arg]
    """The results of a search (a ``list`` of :class:`SearchResult`), and what the index could
    give: ``stale`` when changes on disk were not synced before answering (too many for the
    search to wait for, or another sync held the index), ``vectors`` as
    ``{"done": n, "total": N}`` chunks embedded (``None`` in keyword-only mode); and how they were
    made, :attr:`info`: ``degraded`` (e.g. ``"embedding timeout"``: answered from the keyword
    side), ``reranked`` (a reranker is configured: whether it reordered) and ``rerank_error``."""

    stale: bool
    vectors: Optional[dict[str, int]]

    def __init__(self, results: Any = (), *, stale: bool = False, vectors: Optional[dict[str, int]] = None,
                 info: Optional[dict[str, Any]] = None) -> None:
        super().__init__(results)
        self.stale = stale
        self.vectors = vectors
        self.info: dict[str, Any] = dict(info or {})

    @property
    def degraded(self) -> str | None:
        return self.info.get("degraded")

    @property
    def reranked(self) -> bool | None:
        return self.info.get("reranked")




@dataclass(frozen=True)
class ReadResult:
    """Lines read from a memory file (``memory_get``). ``truncated``: the text was cut at the
    character cap; ``next_from`` is then the line to continue from (None when none follows)."""

    path: str
    text: str
    from_line: int
    to_line: int
    total_lines: int
    truncated: bool = False
    next_from: Optional[int] = None
    #: The file does not exist (the text is empty).
    missing: bool = False
    #: Read from the index's copy of the file as last indexed (a replica without the workspace,
    #: or a shared namespace), not from the Markdown on disk.
    from_index: bool = False

    def to_payload(self) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "path": self.path,
            "text": self.text,
            "from": self.from_line,
            "lines": max(0, self.to_line - self.from_line + 1) if self.text else 0,
            "totalLines": self.total_lines,
        }
        if self.truncated:
            payload["truncated"] = True
            payload["nextFrom"] = self.next_from
        if self.missing:
            payload["missing"] = True
        if self.from_index:
            payload["fromIndex"] = True
            payload["note"] = "read from the memory index's copy of the file as last indexed, not from the workspace"
        return payload


@dataclass
class SyncReport:
    """What one sync did."""

    full: bool = False
    reason: str = ""
    files_scanned: int = 0
    files_indexed: int = 0
    files_unchanged: int = 0
    files_deleted: int = 0
    files_skipped: list[str] = field(default_factory=list)
    #: Transcript lines that are not JSON (or nested too deeply to parse): skipped.
    lines_skipped: int = 0
    chunks_indexed: int = 0
    embeddings_computed: int = 0
    embeddings_cached: int = 0
    #: Chunks given their vectors by the vector phase of this sync.
    vectors_completed: int = 0
    #: Chunks still waiting for vectors when the sync returned (0 after a complete sync; more
    #: when only the keyword phase ran, or the vector phase was stopped).
    vectors_pending: int = 0
    #: Another process was embedding this index's pending chunks: this sync left them to it.
    vectors_elsewhere: bool = False
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class IndexStatus:
    """What ``status()`` reports (SPEC 13)."""

    agent_id: str
    workspace: str
    store_path: str
    files: int
    chunks: int
    by_source: dict[str, dict[str, int]]
    provider: str
    requested_provider: str
    model: str
    mode: Literal["hybrid", "vector", "fts-only"] | str
    dirty: bool
    sources: list[str]
    extra_paths: list[str]
    vector: dict[str, Any]
    fts: dict[str, Any]
    cache: dict[str, Any]
    fallback: Optional[dict[str, Any]] = None
    issues: list[str] = field(default_factory=list)
    files_on_disk: int | None = None
    #: ``{"done": chunks with vectors, "total": chunks}``; ``None`` in keyword-only mode.
    vectors: Optional[dict[str, int]] = None
    #: On a replica (no workspace here): ``{"agent": the agent it answers for, "workspace": the
    #: syncing process's workspace, "last_sync": when that process last synced (ISO 8601, UTC),
    #: or None}``; ``None`` elsewhere. A replica's ``files_on_disk`` is ``None``.
    replica: Optional[dict[str, Any]] = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
