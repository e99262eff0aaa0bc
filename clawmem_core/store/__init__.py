"""Index stores behind one small interface."""

from .base import ChunkRow, FileRow, Store, StoreCounts

__all__ = ["Store", "ChunkRow", "FileRow", "StoreCounts"]
