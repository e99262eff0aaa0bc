"""Bad input: every case gives a typed error from ``clawmem_core.errors`` or a sane result, and
leaves the Markdown byte-identical."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterator

import pytest

from clawmem_core import InvalidQueryError, MemoryConfig, MemoryIndex, WorkspaceError
from clawmem_core.errors import PathNotAllowedError, ClawmemError, ConfigError
from clawmem_core.search import MAX_QUERY_EMBED_CHARS
from clawmem_core.testing import HashEmbedder

from .conftest import SAMPLE_FILES, tree_digest, write_files

FILES: dict[str, str | bytes] = dict(SAMPLE_FILES) | {
    "memory/binary.md": b"\x00\x01\x02\xff\xfe binary \x00 quokka",
    "memory/latin1.md": "caf\xe9 cr\xe8me br\xfbl\xe9e with walrus\n".encode("latin-1"),
    "memory/crlf.md": b"windows line one\r\nwindows line two walrus\r\n",
    "memory/empty.md": b"",
    "memory/blank.md": b"   \n\n\t\n",
}

FTS_SYNTAX = ['"', '""', '"jazz', 'jazz"', "*", "jazz*", "NEAR(jazz music)", "NEAR(", "jazz AND", "AND OR NOT",
              "jazz OR", "-jazz", "^jazz", "text:jazz", "{text}: jazz", "(jazz", "jazz)", "()", "jazz + music",
              "'jazz'", "\\", "jazz\x00music", "%_", "?", "NOT", "jazz NEAR/2 music", "\u2028", "😀"]


@pytest.fixture
def env(tmp_path: Path) -> Iterator[tuple[Path, MemoryIndex, HashEmbedder]]:
    ws = write_files(tmp_path / "ws", FILES)
    before = tree_digest(ws)
    emb = HashEmbedder()
    mem = MemoryIndex(ws, embedder=emb, state_dir=tmp_path / "state")
    mem.sync()
    yield ws, mem, emb
    mem.close()
    assert tree_digest(ws) == before, "the Markdown files changed"


@pytest.mark.parametrize("query", ["", "   ", "\n\t ", "\x00"])
def test_blank_query_returns_nothing_without_embedding(env: Any, query: str) -> None:
    _, mem, emb = env
    assert mem.search(query) == []
    assert emb.query_calls == 0


def test_huge_query_is_answered_from_a_bounded_head(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # A 1 MB query costs what its head costs: the embedder gets at most MAX_QUERY_EMBED_CHARS characters, and the
    # answer is the head's, whatever the tail says (how long it takes: ``python -m bench.latency``).
    _, mem, emb = env
    embedded: list[int] = []
    real = emb._embed_query
    monkeypatch.setattr(emb, "_embed_query", lambda text: (embedded.append(len(text)), real(text))[1])
    head = ("jazz espresso kubernetes " * 45000)[:MAX_QUERY_EMBED_CHARS]
    query = head + ("designer roadmap hire " * 50000)[: 1_000_000 - len(head)]
    hits = mem.search(query)
    assert hits and hits[0].path in ("MEMORY.md", "memory/2026-01-05.md")
    assert embedded == [MAX_QUERY_EMBED_CHARS]
    assert [(h.id, h.score) for h in hits] == [(h.id, h.score) for h in mem.search(head)]


def test_huge_random_query_does_not_raise(env: Any) -> None:
    _, mem, _ = env
    import random

    rng = random.Random(7)
    words = " ".join("".join(rng.choice("abcdefghijklmnopqrstuvwxyz成语") for _ in range(rng.randint(1, 12)))
                     for _ in range(40_000))
    assert isinstance(mem.search(words[:300_000]), list)


@pytest.mark.parametrize("query", FTS_SYNTAX)
def test_fts5_syntax_in_queries_is_plain_text(env: Any, query: str) -> None:
    _, mem, _ = env
    hits = mem.search(query, min_score=0)
    assert isinstance(hits, list)
    if "jazz" in query:
        assert any(h.path == "MEMORY.md" for h in hits)


@pytest.mark.parametrize("query", FTS_SYNTAX)
def test_fts5_syntax_in_keyword_only_mode(tmp_path: Path, query: str) -> None:
    ws = write_files(tmp_path / "ws", FILES)
    with MemoryIndex(ws, config=MemoryConfig(provider="none"), state_dir=tmp_path / "s") as mem:
        hits = mem.search(query, min_score=0)
        if "jazz" in query:
            assert hits and hits[0].path == "MEMORY.md"


@pytest.mark.parametrize("query", [None, 42, 3.5, b"jazz", ["jazz"], {"q": "jazz"}, object()])
def test_non_string_query_is_a_typed_error(env: Any, query: Any) -> None:
    _, mem, _ = env
    with pytest.raises(InvalidQueryError):
        mem.search(query)


@pytest.mark.parametrize("min_score", [math.nan, math.inf, -math.inf, "0.5", None.__class__, True])
def test_bad_min_score_is_a_typed_error(env: Any, min_score: Any) -> None:
    _, mem, _ = env
    with pytest.raises(InvalidQueryError):
        mem.search("jazz", min_score=min_score)


@pytest.mark.parametrize("min_score, expect_hits", [(-1.0, True), (-1e308, True), (0.0, True), (1.5, False)])
def test_out_of_range_min_score_is_clamped(env: Any, min_score: float, expect_hits: bool) -> None:
    _, mem, _ = env
    hits = mem.search("jazz espresso", min_score=min_score)
    if expect_hits:
        assert hits and hits[0].path == "MEMORY.md"
    else:
        # Clamped to 1.0: at most the relaxed keyword fallback, never an error.
        assert all(h.score <= 1.0 for h in hits)


@pytest.mark.parametrize("max_results", [0, -1, -10**9, 2.5, math.nan, math.inf,
                                         -math.inf, "3", True, None.__class__])
def test_bad_max_results_is_a_typed_error(env: Any, max_results: Any) -> None:
    _, mem, _ = env
    with pytest.raises(InvalidQueryError):
        mem.search("jazz", max_results=max_results)


@pytest.mark.parametrize("max_results", [4096, 4097, 10**9, 3.0])
def test_huge_or_integral_float_max_results_are_sane(env: Any, max_results: Any) -> None:
    _, mem, _ = env
    hits = mem.search("jazz espresso kubernetes walrus", max_results=max_results, min_score=0)
    assert 1 <= len(hits) <= mem.status().chunks
    assert len({h.id for h in hits}) == len(hits)


def test_binary_and_non_utf8_files(env: Any) -> None:
    _, mem, _ = env
    assert all(h.path != "memory/binary.md" for h in mem.search("binary quokka", min_score=0))
    walrus = {h.path for h in mem.search("walrus", min_score=0)}
    assert {"memory/latin1.md", "memory/crlf.md"} <= walrus
    text = mem.read("memory/latin1.md").text
    assert "walrus" in text and "crème brûlée" in text and "\ufffd" not in text  # decoded as Latin-1/cp1252
    with pytest.raises(PathNotAllowedError, match="binary"):
        mem.read("memory/binary.md")  # refused, not dumped
    assert mem.read("memory/empty.md").text == "" and mem.read("memory/empty.md").total_lines == 0


def test_sync_twice_and_force_leave_files_untouched(env: Any) -> None:
    _, mem, _ = env
    mem.sync()
    mem.sync(force=True)


def test_missing_workspace(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceError):
        MemoryIndex(tmp_path / "does-not-exist", state_dir=tmp_path / "s")


def test_workspace_that_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "file.md"
    f.write_text("x")
    with pytest.raises(WorkspaceError):
        MemoryIndex(f, state_dir=tmp_path / "s")
    assert f.read_text() == "x"


@pytest.mark.parametrize("agent_id", ["", "../evil", "a/b", "a\\b", ".", "..", "x\x00y", 7])
def test_bad_agent_id(tmp_path: Path, agent_id: Any) -> None:
    with pytest.raises(ConfigError):
        MemoryIndex(tmp_path, agent_id=agent_id, state_dir=tmp_path / "s")


@pytest.mark.parametrize("config", [42, "provider=openai", {"provider": "bogus"}, {"nope": 1},
                                    {"chunking": {"tokens": "many"}}, {"query": {"minScore": math.nan}}])
def test_bad_config(tmp_path: Path, config: Any) -> None:
    with pytest.raises(ConfigError):
        MemoryIndex(tmp_path, config=config, state_dir=tmp_path / "s")


def test_corrupt_index_file_is_set_aside_and_rebuilt(tmp_path: Path) -> None:
    ws = write_files(tmp_path / "ws", SAMPLE_FILES)
    store = tmp_path / "s" / "memory" / "main.sqlite"
    store.parent.mkdir(parents=True)
    garbage = b"this is not a database" * 100
    store.write_bytes(garbage)
    with MemoryIndex(ws, agent_id="main", state_dir=tmp_path / "s", embedder=HashEmbedder()) as mem:
        mem.sync()
        assert mem.search("jazz espresso", min_score=0)
    kept = list(store.parent.glob("main.sqlite.corrupt-*"))
    assert [p.read_bytes() for p in kept if not p.name.endswith(("-wal", "-shm"))] == [garbage]


def test_closed_index_refuses_calls(tmp_path: Path) -> None:
    ws = write_files(tmp_path / "ws", SAMPLE_FILES)
    mem = MemoryIndex(ws, agent_id="main", state_dir=tmp_path / "s", embedder=HashEmbedder())
    mem.close()
    mem.close()  # twice is fine
    with pytest.raises(ClawmemError):
        mem.search("jazz")
