"""Embedders: the interface, providers (imported lazily), the cache key, framework bridges."""

from .base import Embedder

__all__ = ["Embedder"]
