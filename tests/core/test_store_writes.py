"""The store's bulk writes: replacing and deleting many files at once keeps chunks, keywords and
files in step (lookups and deletes go in batches of 500 paths and row ids)."""

from __future__ import annotations

from pathlib import Path

from clawmem_core.store.base import ChunkRow, FileRow
from clawmem_core.store.sqlite import SQLiteStore


def _file(i: int, word: str, chunks: int = 2) -> tuple[FileRow, list[ChunkRow]]:
    path = f"memory/n{i:04d}.md"
    rows = [ChunkRow(f"{path}#{word}#{k}", path, "memory", k + 1, k + 1, f"h{i}-{k}", "fts-only", f"{word} note{i} part{k}", None)
            for k in range(chunks)]
    return FileRow(path, "memory", f"h{i}", 1, 2), rows


def _count(store: SQLiteStore, sql: str) -> int:
    return store.conn.execute(sql).fetchall()[0][0]


def test_many_files_replaced_and_deleted_in_one_call(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "i.sqlite", vector_enabled=False)
    try:
        store.replace_files([_file(i, "alpha") for i in range(1200)])
        assert _count(store, "SELECT count(*) FROM chunks") == 2400
        # Replacing 700 files drops all their old chunks and keywords.
        store.replace_files([_file(i, "bravo", chunks=1) for i in range(700)])
        assert _count(store, "SELECT count(*) FROM chunks") == 700 + 2 * 500
        assert len(store.keyword_search(["alpha"], 5000)) == 2 * 500
        assert len(store.keyword_search(["bravo"], 5000)) == 700
        # Deleting 1100 files (more than one batch) leaves exactly the other 100.
        store.delete_files("memory", [f"memory/n{i:04d}.md" for i in range(1100)])
        assert set(store.file_hashes("memory")) == {f"memory/n{i:04d}.md" for i in range(1100, 1200)}
        assert _count(store, "SELECT count(*) FROM chunks") == 200
        assert len(store.keyword_search(["alpha"], 5000)) == 200
        assert store.keyword_search(["bravo"], 5000) == []
    finally:
        store.close()


def test_a_write_that_sqlite_rolled_back_itself_keeps_its_real_error(tmp_path: Path) -> None:
    """SQLITE_FULL inside a write rolls the transaction back by itself: the store must not issue a second
    ROLLBACK (which fails with "no transaction is active" and hides the real error), and the data stays whole."""
    import apsw

    store = SQLiteStore(tmp_path / "i.sqlite", vector_enabled=False)
    try:
        store.replace_files([_file(i, "alpha") for i in range(20)])
        pages = _count(store, "PRAGMA page_count")
        store.conn.execute(f"PRAGMA max_page_count={pages + 2}")  # the database cannot grow: a real SQLITE_FULL
        try:
            store.replace_files([_file(i, "bravo 数据库 " * 400) for i in range(200)])
        except apsw.Error as exc:  # the store's caller maps it to "disk full" (StoreError); it must stay FullError
            assert isinstance(exc, apsw.FullError), repr(exc)
        else:
            raise AssertionError("a write past max_page_count must fail")
        assert store.conn.getautocommit()  # no transaction left open
        assert len(store.keyword_search(["alpha"], 500)) == 40  # the old rows are whole
        assert store.keyword_search(["bravo"], 500) == []
    finally:
        store.close()
