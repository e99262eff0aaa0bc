"""Grouping texts into provider calls and splitting over-long chunks."""

from __future__ import annotations

from typing import Iterator, Sequence

from .base import MAX_INPUT_BYTES


def batches_by_bytes(texts: Sequence[str], max_bytes: int = MAX_INPUT_BYTES) -> Iterator[list[int]]:
    """Yield lists of indexes into ``texts``, each batch at most ``max_bytes`` UTF-8 bytes.

    A single text larger than the budget goes alone in its batch (chunks are split to the
    model's limit beforehand, see :func:`split_utf8`).
    """
    batch: list[int] = []
    size = 0
    for i, text in enumerate(texts):
        n = len(text.encode("utf-8"))
        if batch and size + n > max_bytes:
            yield batch
            batch, size = [], 0
        batch.append(i)
        size += n
    if batch:
        yield batch


def split_utf8(text: str, max_bytes: int) -> list[str]:
    """Cut ``text`` into pieces of at most ``max_bytes`` UTF-8 bytes, never inside a code point
    or a surrogate pair; the pieces concatenate back to ``text``."""
    if max_bytes < 4:
        raise ValueError("max_bytes must be at least 4")
    if len(text.encode("utf-8")) <= max_bytes:
        return [text]
    pieces: list[str] = []
    start = 0
    size = 0
    for i, ch in enumerate(text):
        n = len(ch.encode("utf-8", "surrogatepass"))
        if size + n > max_bytes:
            pieces.append(text[start:i])
            start, size = i, 0
        size += n
    pieces.append(text[start:])
    return [p for p in pieces if p]
