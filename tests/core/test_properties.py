"""Property tests: chunking covers the text with exact line ranges, keyword queries never break
FTS5, and the read path checker never admits a path outside memory."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Iterator

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clawmem_core import MemoryConfig, MemoryIndex
from clawmem_core.chunking import chunk_markdown
from clawmem_core.errors import PathNotAllowedError
from clawmem_core.read import read_memory_file, resolve_memory_path
from clawmem_core.testing import HashEmbedder
from clawmem_core.text import index_document, quote_fts, search_terms, weighted_length

from .conftest import SAMPLE_FILES, write_files

FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- chunking -------------------------------------------------------------------------------------------

ATOMS = st.sampled_from([
    "a", "b", "Z", "7", " ", "  ", "\t", "_", "-", "#", ".", "中", "文", "か", "한", "é", "e\u0301",
    "😀", "👍🏽", "🇫🇷", "👨\u200d👩\u200d👧", "\r", "𠀀",
])
LINE = st.lists(ATOMS, max_size=60).map("".join) | st.builds(lambda a, n: a * n, ATOMS, st.integers(0, 300))
CONTENT = st.lists(LINE, max_size=25).map("\n".join)


@FAST
@given(content=CONTENT, tokens=st.integers(1, 60), overlap=st.integers(0, 60))
def test_chunks_cover_every_line_in_order_with_exact_ranges(content: str, tokens: int, overlap: int) -> None:
    chunks = chunk_markdown(content, tokens=tokens, overlap=overlap)
    lines = content.split("\n")
    max_units = max(32, tokens * 4)
    covered: set[int] = set()
    for c in chunks:
        assert 1 <= c.start_line <= c.end_line <= len(lines)
        assert c.text.strip()
        source = "\n".join(lines[c.start_line - 1 : c.end_line])
        assert c.text in source  # a long line may contribute only a piece
        if all(weighted_length(x) <= max_units for x in lines[c.start_line - 1 : c.end_line]):
            assert c.text == source
        assert weighted_length(c.text) <= max_units
        covered.update(range(c.start_line, c.end_line + 1))
    for number, line in enumerate(lines, start=1):
        if line.strip():
            assert number in covered, f"line {number} lost"
    for prev, nxt in zip(chunks, chunks[1:]):
        assert (prev.start_line, prev.end_line) <= (nxt.start_line, nxt.end_line)


@FAST
@given(content=CONTENT, tokens=st.integers(1, 60))
def test_without_overlap_chunks_concatenate_to_the_content(content: str, tokens: int) -> None:
    chunks = chunk_markdown(content, tokens=tokens, overlap=0)

    def squash(s: str) -> str:
        return "".join(s.split())

    assert "".join(squash(c.text) for c in chunks) == squash(content)


# -- keyword queries -----------------------------------------------------------------------------------


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture(scope="module")
def small_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MemoryIndex, MemoryIndex]]:
    root = tmp_path_factory.mktemp("prop-index")
    ws = write_files(root / "ws", dict(SAMPLE_FILES) | {"memory/zh.md": "今天玩成语接龙游戏\n",
                                                        "memory/syntax.md": 'NEAR AND OR NOT "quoted" col:x\n'})
    hybrid = MemoryIndex(ws, embedder=HashEmbedder(), state_dir=root / "s1")
    keyword = MemoryIndex(ws, config=MemoryConfig(provider="none"), state_dir=root / "s2")
    hybrid.sync()
    keyword.sync()
    yield hybrid, keyword
    hybrid.close()
    keyword.close()


QUERY_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=80) | st.lists(
    st.sampled_from(['"', "*", "NEAR(", "AND", "OR", "NOT", "-", "^", ":", "(", ")", "{", "}", "+", "jazz", "成语",
                     " ", "\x00", "'", "\\", "col:", "NEAR/3"]), max_size=20).map("".join)


@FAST
@given(query=QUERY_TEXT)
def test_keyword_query_never_raises_an_fts5_error(small_index: tuple[MemoryIndex, MemoryIndex], query: str) -> None:
    handler = _Records()
    log = logging.getLogger("clawmem")
    log.addHandler(handler)
    try:
        for mem in small_index:
            hits = mem.search(query, max_results=5, min_score=0)
            assert isinstance(hits, list) and len(hits) <= 5
    finally:
        log.removeHandler(handler)
    assert not [m for m in handler.messages if "keyword search failed" in m], handler.messages


@pytest.fixture(scope="module")
def fts_table() -> Iterator[apsw.Connection]:
    conn = apsw.Connection(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(text, tokenize=\"porter unicode61 remove_diacritics 2 "
                 "tokenchars '_'\")")
    for text in SAMPLE_FILES.values():
        conn.execute("INSERT INTO t(text) VALUES (?)", (index_document(text),))
    yield conn
    conn.close()


@FAST
@given(query=QUERY_TEXT)
def test_or_of_quoted_terms_is_always_valid_fts5(fts_table: apsw.Connection, query: str) -> None:
    terms = search_terms(query)
    if not terms:
        return
    match = " OR ".join(quote_fts(t) for t in terms)
    fts_table.execute("SELECT rowid FROM t WHERE t MATCH ?", (match,)).fetchall()


# -- read path checker ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def jail(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("jail")
    write_files(root / "outside", {"secret.md": "SECRET\n", "dir/secret.md": "SECRET\n"})
    ws = write_files(root / "ws", {"MEMORY.md": "ok\n", "memory.md": "ok\n", "memory/a.md": "ok\n",
                                    "memory/sub/b.md": "ok\n", "extra/e.md": "ok\n", "NOTES.md": "SECRET\n",
                                    "other/x.md": "SECRET\n", "memory/ü/ñ.md": "ok\n"})
    os.symlink(root / "outside" / "secret.md", ws / "memory" / "link.md")
    os.symlink(root / "outside" / "dir", ws / "memory" / "linkdir")
    os.symlink(root / "outside", ws / "extra" / "linkdir")
    os.symlink(root / "outside" / "secret.md", ws / "extra" / "link.md")
    os.symlink(ws / "other", ws / "memory" / "inner")
    return root


COMPONENTS = st.sampled_from(["..", ".", "", "memory", "MEMORY.md", "memory.md", "a.md", "sub", "b.md", "link.md",
                              "linkdir", "secret.md", "dir", "outside", "ws", "extra", "e.md", "NOTES.md", "other",
                              "x.md", "inner", "ü", "ñ.md", "~", "\u202e", "memory\\a.md", "..\\..", " "])


@FAST
@given(parts=st.lists(COMPONENTS, min_size=1, max_size=8), absolute=st.booleans())
def test_read_never_admits_a_path_outside_memory(jail: Path, parts: list[str], absolute: bool) -> None:
    ws = jail / "ws"
    raw = "/".join(parts)
    if absolute:
        raw = str(ws) + "/" + raw
    try:
        abs_path, shown = resolve_memory_path(ws, ["extra"], raw)
    except PathNotAllowedError:
        return
    real = Path(os.path.realpath(abs_path))
    allowed_roots = [ws / "memory", ws / "extra"]
    assert real.name.endswith(".md")
    assert real in (ws / "MEMORY.md", ws / "memory.md") or any(real.is_relative_to(r) for r in allowed_roots), raw
    assert not any(p.is_symlink() for p in [abs_path, *abs_path.parents] if p.is_relative_to(ws) and p != ws)
    text = read_memory_file(ws, ["extra"], raw).text
    assert "SECRET" not in text
    assert not shown.startswith("..")
