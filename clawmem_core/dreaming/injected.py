"""Text that clawmem itself put into a conversation, recognised so it is never learned again as new memory.

clawmem injects recalled memory in three shapes: the LangChain middleware's auto-recall section
(``## Recalled memory`` + "Notes from memory that may be relevant to the latest message:"), the LlamaIndex
memory block (``<clawmem_recall>…</clawmem_recall>``, inside LlamaIndex's ``<memory>`` wrapper) and the Memory
Recall prompt section (``## Memory Recall``). Each snippet of a recall is followed by ``Source: path#Lx-Ly``.
In a transcript these may appear with their newlines collapsed (one message is one line).
"""

from __future__ import annotations

import re

__all__ = ["INJECTED_MARKERS", "strip_injected", "has_injected", "RECALL_BLOCK_TAG"]

RECALL_BLOCK_TAG = "clawmem_recall"
#: Literal texts that only clawmem's own injections contain.
INJECTED_MARKERS: tuple[str, ...] = (
    "## Recalled memory",
    "Notes from memory that may be relevant to the latest message",
    "## Memory Recall",
    f"<{RECALL_BLOCK_TAG}>",
    f"</{RECALL_BLOCK_TAG}>",
)
_TAGGED = re.compile(rf"<{RECALL_BLOCK_TAG}>.*?(?:</{RECALL_BLOCK_TAG}>|\Z)", re.S)
_EMPTY_MEMORY = re.compile(r"<memory>\s*</memory>")
_SECTION = re.compile(r"(?:^|(?<=\s))## (?:Recalled memory|Memory Recall)\b.*?(?=\n## |\Z)", re.S)
#: A ``Source: path#L..`` citation, as every recalled snippet is followed by.
_CITATION = re.compile(r"Source: \S+#L\d+(?:-L\d+)?")


def has_injected(text: str) -> bool:
    """Whether ``text`` holds any part of a clawmem injection (a marker or a recall citation)."""
    return any(m in text for m in INJECTED_MARKERS) or _CITATION.search(text) is not None


def strip_injected(text: str) -> str:
    """``text`` without clawmem's injected recall: tagged blocks, the auto-recall and Memory Recall sections
    (to the next ``## `` heading, or to the end), then any line still holding a recall citation."""
    out = _TAGGED.sub("", text)
    out = _EMPTY_MEMORY.sub("", out)
    out = _SECTION.sub("", out)
    return "\n".join(line for line in out.split("\n") if not _CITATION.search(line) and not has_injected(line))
