"""What every part of the SQLite store uses: the store's lock around its methods, vectors as
blobs, the time rows are stamped with, and sqlite-vec's errors read as a damaged index."""

from __future__ import annotations

import contextlib
import functools
import time
from array import array
from typing import Any, Callable, Iterator, Sequence, TypeVar

import apsw

from ...errors import StoreError

class VectorTableError(StoreError):
    """sqlite-vec failed on ``chunks_vec``: its pages are damaged (the index is rebuilt)."""


@contextlib.contextmanager
def _vec_errors() -> Iterator[None]:
    """sqlite-vec reports damaged shadow-table pages as plain SQL errors ("vectors blob read
    error", "could not read validity bitmap", ...): they mean a damaged index."""
    try:
        yield
    except apsw.SQLError as exc:
        raise VectorTableError(f"the vector table of the index is damaged: {exc}") from None


def _blob(vec: Sequence[float]) -> bytes:
    return array("f", vec).tobytes()


def _unblob(blob: bytes) -> list[float]:
    a = array("f")
    a.frombytes(blob)
    return a.tolist()


def _now_ms() -> int:
    return int(time.time() * 1000)


_F = TypeVar("_F", bound=Callable[..., Any])


def _locked(method: _F, *, follow: bool = True) -> _F:
    """Run a store method holding the store's lock: one apsw connection serves one thread at a
    time, and the caches it keeps (BM25 statistics, vector matrix, candidate metadata) change
    with it. A read-only handle first follows its file (see :meth:`SQLiteStore._follow_file`)."""

    @functools.wraps(method)
    def run(self: "SQLiteStore", *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            if follow and self.read_only:
                self._follow_file()
            return method(self, *args, **kwargs)

    return run  # type: ignore[return-value]


_T = TypeVar("_T")


def _batches(items: Sequence[_T], size: int = 500) -> Iterator[tuple[Sequence[_T], str]]:
    """``items`` in slices of ``size`` (within SQLite's bound on a statement's parameters), each
    with its placeholders (``?,?,?``)."""
    for i in range(0, len(items), size):
        part = items[i : i + size]
        yield part, ",".join("?" * len(part))
