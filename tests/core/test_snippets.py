"""Snippets show the part of the chunk that matched (SPEC 6), in English and Chinese."""

from __future__ import annotations

import regex
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clawmem_core import MemoryConfig
from clawmem_core.config import HybridConfig, QueryConfig
from clawmem_core.snippets import ELLIPSIS, SNIPPET_MAX_CHARS, build_snippet
from clawmem_core.text import search_terms
from clawmem_core.tools import search_payload

from .conftest import IndexFactory, WorkspaceFactory, keyword_only

FILLER = "- Weekly sync: routine notes about the roadmap, budget review and hiring plans."
ZH_FILLER = "- 周会：例行讨论了路线图、预算评审和招聘计划的进展。"


def memory_file(filler: str, special: str, at: int, total: int = 21) -> str:
    """``total`` lines, ``special`` on line ``at`` (1-based), the rest ``filler``."""
    lines = [f"{filler} ({i})" for i in range(1, total + 1)]
    lines[at - 1] = special
    return "\n".join(lines) + "\n"


def graphemes_whole(original: str, shown: str) -> bool:
    """``shown`` (ellipses removed) is a stretch of ``original`` cut only at grapheme boundaries."""
    body = shown.strip(ELLIPSIS).strip("\n")
    start = original.find(body)
    if start < 0:
        return False
    bounds = {0, *(m.end() for m in regex.finditer(r"\X", original))}
    return start in bounds and start + len(body) in bounds


# -- the module -------------------------------------------------------------------------------


def test_a_short_chunk_is_shown_whole() -> None:
    snip = build_snippet("line one\nline two", 4, 5, search_terms("two"))
    assert (snip.text, snip.start_line, snip.end_line) == ("line one\nline two", 4, 5)


@pytest.mark.parametrize("filler, special, query", [
    (FILLER, "- Priya (SRE): owns the on-call rotation and the Grafana dashboards.", "Priya on-call Grafana"),
    (ZH_FILLER, "- 王芳（运维）：负责值班轮换和监控大盘。", "谁负责值班轮换"),
])
@pytest.mark.parametrize("at", [1, 11, 20])
def test_the_snippet_shows_the_matching_line(filler: str, special: str, query: str, at: int) -> None:
    total = 21 if filler == FILLER else 40  # a Chinese chunk holds fewer characters (one token each)
    text = memory_file(filler, special, at, total).rstrip("\n")
    assert len(text) > SNIPPET_MAX_CHARS
    snip = build_snippet(text, 1, total, search_terms(query))
    assert special in snip.text and len(snip.text) <= SNIPPET_MAX_CHARS
    assert snip.start_line <= at <= snip.end_line and (snip.start_line, snip.end_line) != (1, total)
    shown = snip.text.split("\n")
    body = [line for line in shown if line != ELLIPSIS]
    file_lines = text.split("\n")
    assert body == file_lines[snip.start_line - 1 : snip.end_line]  # the citation names the lines shown
    assert (shown[0] == ELLIPSIS) == (snip.start_line > 1)  # cut text is marked
    assert (shown[-1] == ELLIPSIS) == (snip.end_line < total)


def test_the_best_window_covers_the_most_terms() -> None:
    lines = [FILLER] * 30
    lines[3] = "- Dana likes jazz."
    lines[25] = "- Dana Whitfield booked the jazz club in Porto."
    snip = build_snippet("\n".join(lines), 1, 30, search_terms("Dana Whitfield jazz Porto"))
    assert "Dana Whitfield booked" in snip.text and snip.start_line <= 26 <= snip.end_line


def test_a_vector_hit_without_term_matches_shows_the_chunk_start() -> None:
    text = memory_file(FILLER, FILLER, 1).rstrip("\n")
    snip = build_snippet(text, 1, 21, search_terms("quantum chromodynamics"))
    assert snip.start_line == 1 and snip.text.startswith(FILLER) and snip.text.endswith(f"\n{ELLIPSIS}")
    assert len(snip.text) <= SNIPPET_MAX_CHARS


def test_a_long_english_line_is_cut_at_word_boundaries() -> None:
    line = ("lorem ipsum dolor sit amet " * 40) + "the Grafana dashboard for billing" + (" consectetur adipiscing" * 40)
    snip = build_snippet(line, 7, 7, search_terms("grafana billing"))
    assert "the Grafana dashboard for billing" in snip.text and len(snip.text) <= SNIPPET_MAX_CHARS
    assert snip.text.startswith(ELLIPSIS) and snip.text.endswith(ELLIPSIS)
    body = snip.text[len(ELLIPSIS) : -len(ELLIPSIS)]
    start = line.index(body)
    assert line[start - 1] == " " and line[start + len(body)] == " "  # whole words only
    assert (snip.start_line, snip.end_line) == (7, 7)


def test_a_long_chinese_line_is_cut_between_characters_keeping_graphemes() -> None:
    line = "今天玩了很久的游戏。" * 80 + "然后讨论了成语接龙的规则👩‍👩‍👧和奖励。" + "明天继续。" * 200
    snip = build_snippet(line, 3, 3, search_terms("成语接龙"))
    assert "成语接龙" in snip.text and len(snip.text) <= SNIPPET_MAX_CHARS
    assert snip.text.startswith(ELLIPSIS) and snip.text.endswith(ELLIPSIS)
    assert graphemes_whole(line, snip.text)


@settings(max_examples=60, deadline=None)
@given(
    prefix=st.integers(min_value=600, max_value=760),
    cluster=st.sampled_from(["👨‍👩‍👧‍👦", "🇨🇳", "é", "각", "👍🏽", "ก่"]),
)
def test_cuts_never_split_a_grapheme(prefix: int, cluster: str) -> None:
    line = "字" * prefix + cluster * 60 + "尾巴" * 200
    snip = build_snippet(line, 1, 1, search_terms("尾巴"))
    assert len(snip.text) <= SNIPPET_MAX_CHARS and graphemes_whole(line, snip.text)
    head = "字" * prefix + cluster * 60 + "字" * 400
    snip = build_snippet(head + "尾巴", 1, 1, search_terms("尾巴"))
    assert graphemes_whole(head + "尾巴", snip.text)


def test_pieces_of_one_long_line_keep_the_chunks_range() -> None:
    """Transcript chunks map to JSONL lines, and a chunk's line count may differ from its range:
    the snippet still shows the match, and the citation names the whole chunk."""
    text = "\n".join([FILLER] * 12 + ["User: the Lisbon offsite is in May"] + [FILLER] * 12)
    snip = build_snippet(text, 40, 90, search_terms("Lisbon offsite"))
    assert "Lisbon offsite" in snip.text and (snip.start_line, snip.end_line) == (40, 90)


# -- through search ---------------------------------------------------------------------------


@pytest.mark.parametrize("special, query", [
    ("- Priya (SRE): owns the on-call rotation and the Grafana dashboards.", "Priya on-call Grafana"),
    ("- 王芳（运维）：负责值班轮换和监控大盘。", "谁负责值班轮换"),
])
def test_search_results_show_and_cite_the_match(make_workspace: WorkspaceFactory, open_index: IndexFactory,
                                                special: str, query: str) -> None:
    # A Chinese chunk holds about 400 characters (one token each): with English mixed in it is longer
    filler = FILLER if special.isascii() else "- 周会 weekly sync: reviewed roadmap, budget and hiring plans 例行讨论"
    ws = make_workspace({"MEMORY.md": memory_file(filler, special, 12)})
    mem = open_index(ws, embedder=None, config=keyword_only())
    [hit] = mem.search(query, max_results=1)
    assert hit.start_line < 12 < hit.end_line  # the chunk's range
    assert len(mem._store.get_chunks([hit.id])[hit.id].text) > SNIPPET_MAX_CHARS  # too long to show whole
    assert special in hit.snippet and len(hit.snippet) <= SNIPPET_MAX_CHARS
    assert hit.snippet_start_line <= 12 <= hit.snippet_end_line
    assert hit.citation == f"MEMORY.md#L{hit.snippet_start_line}-L{hit.snippet_end_line}"
    [item] = search_payload(mem, query, 1)["results"]
    assert (item["startLine"], item["endLine"]) == (hit.start_line, hit.end_line)
    assert item["citation"] == hit.citation and item["snippet"].endswith(f"Source: {hit.citation}")
    got = mem.read("MEMORY.md", from_line=hit.snippet_start_line,
                   lines=hit.snippet_end_line - hit.snippet_start_line + 1)
    assert special in got.text  # memory_get on the cited lines returns what the snippet showed


def test_vector_side_hits_get_match_snippets_too(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    special = "- Priya (SRE): owns the on-call rotation and the Grafana dashboards."
    ws = make_workspace({"MEMORY.md": memory_file(FILLER, special, 18)})
    config = MemoryConfig(query=QueryConfig(hybrid=HybridConfig(enabled=False), min_score=0.0))
    mem = open_index(ws, config=config)
    hits = mem.search("Priya on-call Grafana", max_results=3)
    assert hits and all(len(h.snippet) <= SNIPPET_MAX_CHARS for h in hits)
    best = next(h for h in hits if h.start_line <= 18 <= h.end_line)
    assert special in best.snippet and best.snippet_start_line <= 18 <= best.snippet_end_line


def test_cli_search_prints_the_snippet_lines(make_workspace: WorkspaceFactory, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from clawmem_core.cli import main

    special = "- Priya (SRE): owns the on-call rotation and the Grafana dashboards."
    ws = make_workspace({"MEMORY.md": memory_file(FILLER, special, 12)})
    monkeypatch.setenv("CLAWMEM_STATE_DIR", str(tmp_path / "cli-state"))
    assert main(["search", "Priya on-call Grafana", "--max-results", "1", "--workspace", str(ws)]) == 0
    head, *rest = capsys.readouterr().out.splitlines()
    start, end = map(int, head.split(" ", 1)[1].rsplit(":", 1)[1].split("-"))
    assert start > 1 and start <= 12 <= end and special in rest


def test_the_example_workspace_shows_priya(tmp_path: Path) -> None:
    """The reported case: MEMORY.md:1-21 came back without line 20, where Priya is."""
    from clawmem_core import MemoryIndex

    example = Path(__file__).resolve().parents[2] / "examples" / "workspace"
    with MemoryIndex(example, config=keyword_only(), state_dir=tmp_path / "example-state") as mem:
        hit = mem.search("Priya on-call Grafana", max_results=1)[0]
    assert hit.path == "MEMORY.md" and "Priya (SRE): owns the on-call rotation" in hit.snippet
    assert hit.snippet_start_line <= 20 <= hit.snippet_end_line
