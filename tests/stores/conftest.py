"""Store backends under test: every test here runs against SQLite and against PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from clawmem_core.store.base import ChunkRow, FileRow, Store, StoreBackend

BackendFactory = Callable[..., StoreBackend]


@pytest.fixture
def make_backend(backend_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> BackendFactory:
    """``make_backend(agent="a")``: a backend of the kind under test for one agent."""
    if backend_kind == "sqlite":
        from clawmem_core.store.sqlite import SQLiteBackend

        def make(agent: str = "a", **kw: Any) -> StoreBackend:
            return SQLiteBackend(tmp_path / f"{agent}.sqlite", **kw)

        return make
    url = request.getfixturevalue("pg_url")
    from clawmem_core.store.postgres import PostgresBackend

    def make_pg(agent: str = "a", **kw: Any) -> StoreBackend:
        return PostgresBackend(url, agent, **kw)

    return make_pg


@pytest.fixture
def store(make_backend: BackendFactory) -> Iterator[Store]:
    s = make_backend().open()
    yield s
    s.close()


def chunk(path: str, i: int, text: str, vec: list[float] | None = None, source: str = "memory",
          window: bool = False) -> ChunkRow:
    return ChunkRow(f"{source}:{path}:{i}:{hash(text) & 0xFFFF:x}", path, source, i, i, f"h{i}-{len(text)}", "m",
                    text, vec, window)


def file(path: str, content: str = "x", source: str = "memory", mtime: int = 1000, ctime: int = 7, ino: int = 42) -> FileRow:
    return FileRow(path, source, f"hash-{content}", mtime, len(content), content, ctime=ctime, ino=ino)
