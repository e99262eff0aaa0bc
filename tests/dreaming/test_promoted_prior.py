"""``MEMORY.md``'s keyword prior (``search.CURATED_PRIOR``) is kept for what was written there, not for chunks made
of promoted entries: those repeat a note's own lines, and with the prior they took the top spot from the notes
that answer (``bench/results/consolidation.md``: hit@1 0.759 -> 0.584 in English, 0.800 -> 0.400 in Chinese)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from clawmem_core import MemoryConfig, MemoryIndex
from clawmem_core.search import promoted_only

NOTES = {
    "memory/2026-11-02.md": "# Monday\n\n- The home gateway listens on loopback only, for network safety.\n"
                            "- Router VLAN 20 carries the cameras and the doorbell.\n",
    "memory/2026-11-03.md": "# 周二\n\n网关只在本机回环地址上监听，保证家庭网络安全。\n备份每天凌晨三点运行，保存在外置硬盘上。\n",
}
PROMOTED = (
    "- The home gateway listens on loopback only, for network safety. <!-- trigger: gateway loopback --> "
    "<!-- importance: 7 -->\n  Source: memory/2026-11-02.md#L3-L3\n"
    "- 网关只在本机回环地址上监听，保证家庭网络安全。 <!-- trigger: 网关 回环 --> <!-- importance: 7 -->\n"
    "  Source: memory/2026-11-03.md#L3-L3\n"
)
QUERIES = {"gateway loopback": "memory/2026-11-02.md", "home gateway network safety": "memory/2026-11-02.md",
           "网关 回环地址": "memory/2026-11-03.md", "家庭网络安全": "memory/2026-11-03.md"}


def _ratios(tmp_path: Path, name: str, memory_md: str) -> dict[str, float]:
    """For each query, the note's score over ``MEMORY.md``'s."""
    root = tmp_path / name
    for rel, text in {**NOTES, "MEMORY.md": memory_md}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    out = {}
    with MemoryIndex(root, config=MemoryConfig(provider="none"), state_dir=tmp_path / f"{name}-state") as mem:
        mem.sync()
        for q, note in QUERIES.items():
            scores = {h.path: h.score for h in mem.search(q, min_score=0, record=False)}
            out[q] = scores[note] / scores["MEMORY.md"]
    return out


def test_promoted_entries_get_no_curated_prior(tmp_path: Path) -> None:
    promoted = _ratios(tmp_path, "promoted", PROMOTED)
    # the same text without the importance a promotion writes: entries as a person would keep them
    written = _ratios(tmp_path, "written", re.sub(r" <!-- importance: 7 -->", "", PROMOTED))
    for q in QUERIES:
        assert promoted[q] > 1.2 * written[q], (q, promoted[q], written[q])
    assert promoted["gateway loopback"] >= 1.0 and written["gateway loopback"] < 1.0


@pytest.mark.parametrize("text, expected", [
    (PROMOTED, True),
    ("# Memory\n\n" + PROMOTED, True),
    ("- Dana's cat is called Miso.\n\n" + PROMOTED, False),  # a person's entry in the chunk: the prior stays
    (re.sub(r" <!-- importance: 7 -->", "", PROMOTED), False),
    (PROMOTED.replace("Source:", "From:"), False),
    ("# Memory\n\nNo list at all. <!-- importance: 7 -->\nSource: x\n", False),
])
def test_promoted_only(text: str, expected: bool) -> None:
    assert promoted_only(text) is expected
