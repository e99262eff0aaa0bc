"""Embedding models' input limits (OpenClaw's table, applied to UTF-8 bytes; the indexer caps at 8000)."""

from __future__ import annotations

_KNOWN: dict[str, int] = {
    "openai:text-embedding-3-small": 8192,
    "openai:text-embedding-3-large": 8192,
    "openai:text-embedding-ada-002": 8191,
    "gemini:text-embedding-004": 2048,
    "gemini:gemini-embedding-001": 2048,
    "gemini:gemini-embedding-2-preview": 8192,
    "voyage:voyage-3": 32000,
    "voyage:voyage-3-lite": 16000,
    "voyage:voyage-code-3": 32000,
}


def max_input_bytes(provider: str, model: str) -> int:
    """The model's input limit; other gemini and local models 2048, anything else 8192."""
    known = _KNOWN.get(f"{provider}:{model.strip().lower()}")
    if known is not None:
        return known
    if provider in ("gemini", "local"):
        return 2048
    return 8192
