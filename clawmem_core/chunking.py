"""Markdown -> line-aware chunks with ids (SPEC 3, OpenClaw's ``chunkMarkdown``).

A token is estimated as 4 characters, and a CJK character as one token, so a chunk holds at most
``tokens * 4`` character units. Chunks carry about ``overlap * 4`` units of whole trailing lines
into the next one. A line longer than a chunk is cut into pieces that share its line number,
never inside a grapheme (combining marks, ZWJ sequences, variation selectors stay attached).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass

from .embeddings.batching import split_utf8
from .text import char_weight, is_narrow, weighted_length


@dataclass(frozen=True)
class Chunk:
    """A piece of a file: 1-based inclusive line range, text and its SHA-256."""

    start_line: int
    end_line: int
    text: str
    hash: str


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def chunk_id(source: str, path: str, start_line: int, end_line: int, chunk_hash: str, model: str) -> str:
    """OpenClaw's chunk id: ``sha256("source:path:start:end:hash:model")``."""
    return sha256(f"{source}:{path}:{start_line}:{end_line}:{chunk_hash}:{model}")


def _extends(ch: str) -> bool:
    """True when ``ch`` belongs to the grapheme before it (so no cut may fall before it)."""
    o = ord(ch)
    return (
        unicodedata.combining(ch) != 0
        or o == 0x200D  # zero-width joiner
        or 0xFE00 <= o <= 0xFE0F  # variation selectors
        or 0x1F3FB <= o <= 0x1F3FF  # skin tone modifiers
        or 0xE0020 <= o <= 0xE007F  # emoji tag sequences
        or 0x1160 <= o <= 0x11FF  # Hangul medial vowel and final consonant jamo
        or 0xD7B0 <= o <= 0xD7FF  # Hangul jamo extended-B (vowels, finals)
        or unicodedata.category(ch) in ("Mn", "Me", "Mc")
    )


def _split_line(line: str, max_units: int) -> list[str]:
    """Cut a line into pieces of at most ``max_units`` weighted units at grapheme boundaries."""
    pieces: list[str] = []
    start = 0
    size = 0  # weight of line[start:i]
    boundary = 0  # the last index after ``start`` where a cut is allowed ...
    size_at_boundary = 0  # ... and the weight of line[start:boundary]
    prev = ""
    regional = 0  # regional indicators in a row: a flag is a pair of them
    for i, ch in enumerate(line):
        w = char_weight(ch)
        is_regional = 0x1F1E6 <= ord(ch) <= 0x1F1FF
        second_of_flag = is_regional and regional % 2 == 1
        if i > start and not _extends(ch) and prev != "\u200d" and not second_of_flag:
            boundary, size_at_boundary = i, size
        if size + w > max_units and boundary > start:
            # Cut at the last grapheme boundary, so the piece stays within the limit (only a
            # single grapheme heavier than the limit can exceed it).
            pieces.append(line[start:boundary])
            start, size = boundary, size - size_at_boundary
        size += w
        prev = ch
        regional = regional + 1 if is_regional else 0
    pieces.append(line[start:])
    return pieces


def chunk_markdown(content: str, tokens: int = 400, overlap: int = 80) -> list[Chunk]:
    """Split ``content`` into chunks (SPEC 3). Whitespace-only chunks are dropped."""
    tokens = max(1, int(tokens))
    overlap = max(0, min(int(overlap), tokens - 1))
    max_units = max(32, tokens * 4)
    overlap_units = overlap * 4

    chunks: list[Chunk] = []
    # The current chunk: parallel lists of segment text, line number and cost.
    seg_text: list[str] = []
    seg_line: list[int] = []
    seg_cost: list[int] = []
    total = 0

    def flush() -> None:
        text = "\n".join(seg_text)
        if text.strip():
            chunks.append(Chunk(seg_line[0], seg_line[-1], text, sha256(text)))

    def carry(next_cost: int) -> None:
        nonlocal seg_text, seg_line, seg_cost, total
        if overlap_units <= 0:
            seg_text, seg_line, seg_cost, total = [], [], [], 0
            return
        acc = 0
        keep = 0
        for cost in reversed(seg_cost):
            if acc >= overlap_units:
                break
            acc += cost
            keep += 1
        # The carried lines plus the next segment must still fit in one chunk.
        while keep and acc + next_cost > max_units:
            acc -= seg_cost[len(seg_cost) - keep]
            keep -= 1
        if keep:
            seg_text, seg_line, seg_cost = seg_text[-keep:], seg_line[-keep:], seg_cost[-keep:]
        else:
            seg_text, seg_line, seg_cost = [], [], []
        total = acc

    narrow = content.isascii() or is_narrow(content)  # no wide characters: weight is length
    lines = content.split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()  # a final newline ends the last line; it does not start another one
    for number, line in enumerate(lines, start=1):
        weight = len(line) if narrow or line.isascii() else weighted_length(line)
        if weight <= max_units:
            cost = weight + 1
            if seg_text and total + cost > max_units:
                flush()
                carry(cost)
            seg_text.append(line)
            seg_line.append(number)
            seg_cost.append(cost)
            total += cost
            continue
        for segment in _split_line(line, max_units):
            cost = weighted_length(segment) + 1
            if seg_text and total + cost > max_units:
                flush()
                carry(cost)
            seg_text.append(segment)
            seg_line.append(number)
            seg_cost.append(cost)
            total += cost
    if seg_text:
        flush()
    return chunks


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


#: Where a long line may be cut before falling back to spaces: after a sentence end.
_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+|(?<=[\u3002\uff01\uff1f\uff1b])")


def _cut_units(line: str, max_bytes: int) -> list[str]:
    """A line too long for one window as pieces of at most ``max_bytes``: sentences, else words,
    else plain byte cuts; the pieces concatenate back to ``line``."""
    out: list[str] = []
    parts: list[str] = []
    pos = 0
    for m in _SENTENCE_END.finditer(line):
        parts.append(line[pos : m.end()])
        pos = m.end()
    parts.append(line[pos:])
    for part in parts:
        if _utf8_len(part) <= max_bytes:
            out.append(part)
            continue
        for word in re.findall(r"\S+\s*|\s+", part):
            out.extend([word] if _utf8_len(word) <= max_bytes else split_utf8(word, max_bytes))
    return [p for p in out if p]


def embedding_windows(chunk: Chunk, max_bytes: int) -> list[Chunk]:
    """The pieces of ``chunk`` that the embedding model sees: the chunk itself when it fits in
    ``max_bytes`` UTF-8 bytes, else consecutive windows of whole lines packed up to that size (a
    longer line is cut after a sentence, else between words, else anywhere but inside a code
    point). Windows keep the chunk's line range, get their own hash and concatenate back to its
    text (whitespace-only windows are dropped)."""
    if _utf8_len(chunk.text) <= max_bytes:
        return [chunk]
    units: list[str] = []
    for line in chunk.text.splitlines(keepends=True):
        units.extend([line] if _utf8_len(line) <= max_bytes else _cut_units(line, max_bytes))
    windows: list[str] = []
    current: list[str] = []
    size = 0
    for unit in units:
        n = _utf8_len(unit)
        if current and size + n > max_bytes:
            windows.append("".join(current))
            current, size = [], 0
        current.append(unit)
        size += n
    if current:
        windows.append("".join(current))
    return [Chunk(chunk.start_line, chunk.end_line, w, sha256(w)) for w in windows if w.strip()]


def remap_lines(chunks: list[Chunk], line_map: list[int] | None) -> list[Chunk]:
    """Map content line numbers to source line numbers (session transcripts -> JSONL lines)."""
    if not line_map:
        return chunks
    out = []
    for c in chunks:
        start = line_map[min(c.start_line, len(line_map)) - 1]
        end = line_map[min(c.end_line, len(line_map)) - 1]
        out.append(Chunk(start, end, c.text, c.hash))
    return out
