"""Tool payloads and the Memory Recall prompt (SPEC 10; OpenClaw tests 72-75)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clawmem_core import EmbeddingError, EmbeddingQuotaError, MemoryConfig, MemoryIndex
from clawmem_core.results import citation_for
from clawmem_core.testing import HashEmbedder
from clawmem_core.tools import (
    ERROR_ACTION,
    ERROR_WARNING,
    ARGS_ACTION,
    ARGS_WARNING,
    GET_ARGS_ACTION,
    MEMORY_GET_DESCRIPTION,
    MEMORY_SEARCH_DESCRIPTION,
    QUOTA_ACTION,
    QUOTA_WARNING,
    citations_enabled,
    get_payload,
    memory_recall_prompt,
    memory_recall_section,
    search_error_payload,
    search_payload,
)

from .conftest import SAMPLE_FILES, IndexFactory, WorkspaceFactory, keyword_only

RESULT_KEYS = {"path", "startLine", "endLine", "score", "snippet", "source", "citation"}
MULTILINE = {"MEMORY.md": "# Prefs\n\nnothing here\n\n" + "\n".join(["jazz music every evening"] * 3) + "\n"}


class QueryFailure(HashEmbedder):
    def __init__(self, message: str, exc: type[Exception] = EmbeddingError) -> None:
        super().__init__()
        self.message, self.exc = message, exc

    def _embed_query(self, text: str) -> list[float]:
        raise self.exc(self.message)


def indexed(open_index: IndexFactory, ws: Path, citations: str = "auto", embedder: object = "hash") -> MemoryIndex:
    mem = open_index(ws, embedder=embedder, config=MemoryConfig(citations=citations))  # type: ignore[arg-type]
    mem.sync()
    return mem


def test_citation_format() -> None:
    assert citation_for("MEMORY.md", 5, 7) == "MEMORY.md#L5-L7"
    assert citation_for("memory/2026-01-05.md", 3, 3) == "memory/2026-01-05.md#L3"


def test_search_payload_shape(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    mem = indexed(open_index, make_workspace(SAMPLE_FILES))
    payload = search_payload(mem, "jazz espresso")
    assert set(payload) >= {"results", "provider", "model", "fallback", "mode"}
    assert (payload["provider"], payload["model"], payload["fallback"], payload["mode"]) == (
        "hash", "hash-v1", None, "hybrid")
    assert payload["results"] and set(payload["results"][0]) == RESULT_KEYS
    first = payload["results"][0]
    assert first["path"] == "MEMORY.md" and first["source"] == "memory"
    json.dumps(payload)  # plain JSON for the model


def test_keyword_only_payload_mode(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    mem = open_index(make_workspace(SAMPLE_FILES), embedder=None, config=keyword_only())
    mem.sync()
    payload = search_payload(mem, "kubernetes")
    assert (payload["provider"], payload["model"], payload["mode"]) == ("none", "fts-only", "fts-only")
    assert payload["results"][0]["path"] == "memory/2026-01-05.md"


def test_citations_on_add_source_line(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    mem = indexed(open_index, make_workspace(MULTILINE), citations="on")
    [hit] = search_payload(mem, "jazz music", max_results=1)["results"]
    assert hit["citation"] == f"MEMORY.md#L{hit['startLine']}-L{hit['endLine']}"
    assert hit["snippet"].endswith(f"\n\nSource: {hit['citation']}")
    assert hit["snippet"].startswith("# Prefs")


def test_citations_off_remove_citation(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    mem = indexed(open_index, make_workspace(MULTILINE), citations="off")
    [hit] = search_payload(mem, "jazz music", max_results=1)["results"]
    assert hit["citation"] is None
    assert "Source:" not in hit["snippet"]


@pytest.mark.parametrize("session_key, cited", [
    ("agent:main:discord:dm:u123", True),
    ("agent:main:discord:group:c123", False),
    ("agent:main:slack:channel:general", False),
    (None, True),
])
def test_citations_auto_depend_on_chat_type(make_workspace: WorkspaceFactory, open_index: IndexFactory,
                                            session_key: str | None, cited: bool) -> None:
    mem = indexed(open_index, make_workspace(MULTILINE), citations="auto")
    [hit] = search_payload(mem, "jazz music", max_results=1, session_key=session_key)["results"]
    assert ("Source: MEMORY.md#L" in hit["snippet"]) is cited
    assert (hit["citation"] is not None) is cited
    assert citations_enabled("auto", session_key) is cited


def test_citations_enabled_modes() -> None:
    assert citations_enabled("on", "agent:x:group:1") is True
    assert citations_enabled("off", "agent:x:dm:1") is False
    assert citations_enabled("auto", "agent:x:telegram:dm:groupie") is True  # "groupie" is not a group


@pytest.mark.parametrize("message, exc, quota", [
    ("429 insufficient_quota", EmbeddingError, True),
    ("You exceeded your current quota", EmbeddingError, True),
    ("no credits left", EmbeddingQuotaError, True),
    ("embedding provider timeout", EmbeddingError, False),
])
def test_provider_failure_payload(make_workspace: WorkspaceFactory, open_index: IndexFactory, message: str,
                                  exc: type[Exception], quota: bool) -> None:
    ws = make_workspace(SAMPLE_FILES)
    failing = QueryFailure(message, exc)
    mem = open_index(ws, embedder=failing)
    mem.sync()
    payload = search_payload(mem, "jazz")
    assert payload == {
        "results": [], "disabled": True, "unavailable": True, "error": message,
        "warning": QUOTA_WARNING if quota else ERROR_WARNING,
        "action": QUOTA_ACTION if quota else ERROR_ACTION,
    }


def test_error_payload_texts() -> None:
    assert QUOTA_WARNING == "Memory search is unavailable because the embedding provider quota is exhausted."
    assert QUOTA_ACTION == "Top up or switch embedding provider, then retry memory_search."
    assert ERROR_WARNING == "Memory search is unavailable due to an embedding/provider error."
    assert ERROR_ACTION == "Check embedding provider configuration and retry memory_search."
    assert search_error_payload(RuntimeError())["error"] == "RuntimeError"


def test_get_payload_success_and_missing(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    ws = make_workspace({"MEMORY.md": "one\ntwo\nthree\n"})
    mem = open_index(ws, embedder=None, config=keyword_only())
    assert get_payload(mem, "MEMORY.md", 2, 1) == {"path": "MEMORY.md", "text": "two", "from": 2, "lines": 1,
                                                  "totalLines": 3}
    missing = get_payload(mem, "memory/2099-01-01.md")
    assert missing == {"path": "memory/2099-01-01.md", "text": "", "from": 1, "lines": 0, "totalLines": 0,
                       "missing": True}


def test_get_payload_past_the_end_says_so(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    ws = make_workspace({"MEMORY.md": "one\ntwo\nthree\n", "memory/empty.md": ""})
    mem = open_index(ws, embedder=None, config=keyword_only())
    past = get_payload(mem, "MEMORY.md", 10, 2)
    assert past["text"] == "" and past["pastEnd"] is True and past["totalLines"] == 3
    assert "missing" not in past and "error" not in past and "disabled" not in past
    assert "pastEnd" not in get_payload(mem, "MEMORY.md", 3, 5)  # the last line is not past the end
    empty = get_payload(mem, "memory/empty.md")
    assert empty["text"] == "" and "missing" not in empty and "pastEnd" not in empty


@pytest.mark.parametrize("path", ["NOTES.md", "memory/NOPE.txt", "../x.md", "/etc/passwd", ""])
def test_get_payload_refused_path_says_what_to_fix(make_workspace: WorkspaceFactory, open_index: IndexFactory,
                                                   path: str) -> None:
    ws = make_workspace({"MEMORY.md": "m\n", "NOTES.md": "n\n"})
    mem = open_index(ws, embedder=None, config=keyword_only())
    payload = get_payload(mem, path)
    assert set(payload) == {"path", "text", "error", "action"}  # not disabled: memory is available
    assert (payload["path"], payload["text"]) == (path, "")
    assert isinstance(payload["error"], str) and payload["error"]
    assert payload["action"] == GET_ARGS_ACTION


@pytest.mark.parametrize("from_line, lines, named", [
    ("first", None, "from_line"), (0, None, "from"), (-3, 2, "from"), (1, 0, "lines"), (2, -1, "lines"),
])
def test_get_payload_bad_line_argument(make_workspace: WorkspaceFactory, open_index: IndexFactory,
                                       from_line: object, lines: object, named: str) -> None:
    mem = open_index(make_workspace({"MEMORY.md": "m\n"}), embedder=None, config=keyword_only())
    payload = get_payload(mem, "MEMORY.md", from_line, lines)
    assert "disabled" not in payload and payload["text"] == "" and named in payload["error"]
    assert payload["action"] == GET_ARGS_ACTION


def test_get_payload_binary_file_is_an_error(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    ws = make_workspace({"MEMORY.md": "m\n", "memory/blob.md": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" * 40})
    mem = open_index(ws, embedder=None, config=keyword_only())
    payload = get_payload(mem, "memory/blob.md")
    assert payload["text"] == "" and "binary" in payload["error"] and "disabled" not in payload


def test_get_payload_on_a_closed_index_is_disabled(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    mem = open_index(make_workspace({"MEMORY.md": "m\n"}), embedder=None, config=keyword_only())
    mem.close()
    payload = get_payload(mem, "MEMORY.md")
    assert payload["disabled"] is True and payload["text"] == "" and "closed" in payload["error"]


def test_get_never_creates_the_embedder(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    mem = open_index(make_workspace({"MEMORY.md": "m\n"}), embedder=QueryFailure("never"))
    assert get_payload(mem, "MEMORY.md")["text"] == "m\n"
    assert mem._embedding.selection is None


# -- prompt (test 75) -----------------------------------------------------------------------------------


def test_prompt_with_no_tools_is_empty() -> None:
    assert memory_recall_prompt(has_search=False, has_get=False) == []


def test_prompt_with_both_tools() -> None:
    lines = memory_recall_prompt()
    assert lines[0] == "## Memory Recall"
    assert lines[1] == (
        "Before answering anything about prior work, decisions, dates, people, preferences, or todos: run "
        "memory_search on MEMORY.md + memory/*.md; then use memory_get to pull only the needed lines. If low "
        "confidence after search, say you checked.")
    assert lines[2] == "Citations: include Source: <path#line> when it helps the user verify memory snippets."
    assert lines[-1] == ""
    assert memory_recall_section() == "\n".join(lines)


def test_prompt_search_only() -> None:
    text = "\n".join(memory_recall_prompt(has_get=False))
    assert "run memory_search" in text and "then use memory_get" not in text


def test_prompt_get_only() -> None:
    text = "\n".join(memory_recall_prompt(has_search=False))
    assert "run memory_get" in text and "run memory_search" not in text


def test_prompt_citations_off() -> None:
    lines = memory_recall_prompt(citations="off")
    assert ("Citations are disabled: do not mention file paths or line numbers in replies unless the user "
            "explicitly asks.") in lines
    assert not any(line.startswith("Citations: include") for line in lines)


def test_tool_descriptions() -> None:
    assert MEMORY_SEARCH_DESCRIPTION.startswith("Mandatory recall step: semantically search MEMORY.md + memory/*.md")
    assert "disabled=true" in MEMORY_SEARCH_DESCRIPTION
    assert MEMORY_GET_DESCRIPTION.startswith("Safe snippet read from MEMORY.md or memory/*.md")


def test_invalid_arguments_payload_is_not_a_provider_failure(make_workspace: WorkspaceFactory,
                                                              open_index: IndexFactory) -> None:
    mem = open_index(make_workspace(SAMPLE_FILES))
    mem.sync()
    payload = search_payload(mem, "jazz", max_results=0)
    assert payload["results"] == [] and "max_results" in payload["error"]
    assert payload["warning"] == ARGS_WARNING and payload["action"] == ARGS_ACTION
    assert "unavailable" not in payload and "disabled" not in payload  # memory is available: fix and retry
