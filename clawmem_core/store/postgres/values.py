"""Values as PostgreSQL takes them: text without NUL, pgvector and ``tsvector`` / ``tsquery``
literals, and the time in milliseconds the rows are stamped with."""

from __future__ import annotations

import struct
import time
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from collections import Counter

    import psycopg


def _now_ms() -> int:
    return int(time.time() * 1000)


def _pg_text(text: str) -> str:
    """``text`` as PostgreSQL can store it: a NUL character (text fields refuse it; SQLite keeps
    it) becomes U+FFFD, which no tokenizer indexes either."""
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def _vec(v: Sequence[float]) -> str:
    """A pgvector text literal (``[1.0, 0.5]``: pgvector skips the spaces)."""
    return str(list(map(float, v)))


class VectorArray:
    """Vectors sent as one binary ``vector[]`` parameter (write it ``%b::vector[]``): pgvector's
    binary form, so neither side prints or parses a float. ``oid``: the ``vector`` type's OID in
    the database (the array's elements carry it); a ``None`` vector is a NULL element."""

    __slots__ = ("oid", "vectors")

    def __init__(self, oid: int, vectors: Sequence[Sequence[float] | None]) -> None:
        self.oid = oid
        self.vectors = vectors

    def dump(self) -> bytes:
        """PostgreSQL's binary array: a header (one dimension, whether a NULL is in it, the
        element type, length, lower bound 1), then each element's length and pgvector's binary
        ``vector`` (dimensions and an unused int16, then big-endian float4s); -1 for a NULL."""
        parts = [b""]
        nulls = 0
        pack = struct.pack
        for v in self.vectors:
            if v is None:
                parts.append(b"\xff\xff\xff\xff")
                nulls = 1
                continue
            n = len(v)
            parts.append(pack(f">iHH{n}f", 4 + 4 * n, n, 0, *v))
        parts[0] = pack(">iiIii", 1, nulls, self.oid, len(self.vectors), 1)
        return b"".join(parts)


class BinaryVector:
    """One vector sent as a binary parameter (``%b::vector``): pgvector's binary ``vector``."""

    __slots__ = ("vector",)

    def __init__(self, vector: Sequence[float]) -> None:
        self.vector = vector

    def dump(self) -> bytes:
        n = len(self.vector)
        return struct.pack(f">HH{n}f", n, 0, *self.vector)


_DUMPER: Any = None


def register_binary(conn: "psycopg.Connection") -> None:
    """Teach ``conn`` to send :class:`VectorArray`, :class:`BinaryVector` and
    :class:`BinaryTsVector` values as binary parameters of unknown type (the statement's cast
    names it: ``%b::vector[]``, ``%b::vector``, ``%b::tsvector``)."""
    global _DUMPER
    if _DUMPER is None:
        from psycopg.adapt import Dumper
        from psycopg.pq import Format

        class _BinaryDumper(Dumper):
            format = Format.BINARY

            def dump(self, obj: Any) -> bytes:
                return obj.dump()  # type: ignore[no-any-return]

        _DUMPER = _BinaryDumper
    for cls in (VectorArray, BinaryVector, BinaryTsVector):
        conn.adapters.register_dumper(cls, _DUMPER)


#: PostgreSQL keeps at most 256 positions per lexeme: a term's count in one chunk is capped there.
_MAX_POSITIONS = 256


def _quote_lexeme(t: str) -> str:
    return "'" + t.replace("\\", "\\\\").replace("'", "''") + "'"


#: ``1,2,...,n`` for every n up to :data:`_MAX_POSITIONS`.
_POSITIONS = [""] + [",".join(map(str, range(1, n + 1))) for n in range(1, _MAX_POSITIONS + 1)]


def _tsvector(counts: "Counter[str]") -> str:
    """A ``tsvector`` literal holding each term with as many positions as occurrences (its tf)."""
    pos, top = _POSITIONS, _MAX_POSITIONS
    return " ".join(["'" + t.replace("\\", "\\\\").replace("'", "''") + "':" + pos[n if n < top else top]
                     for t, n in counts.items()])


#: The binary positions of a lexeme that occurs n times (1..n, weight D), by n.
_BINARY_POSITIONS = [struct.pack(f">H{n}H", n, *range(1, n + 1)) for n in range(_MAX_POSITIONS + 1)]
#: :data:`_BINARY_POSITIONS` as strings (``surrogateescape``: encoded back, the same bytes).
_BINARY_POSITIONS_STR = [p.decode("utf-8", "surrogateescape") for p in _BINARY_POSITIONS]


class BinaryTsVector:
    """A ``tsvector`` sent as a binary parameter (``%b::tsvector``): the server stores the same
    value as from :func:`_tsvector`'s literal, without parsing one. Each term with as many
    positions as occurrences (its tf, capped at 256)."""

    __slots__ = ("counts",)

    def __init__(self, counts: "Counter[str]") -> None:
        self.counts = counts

    def dump(self) -> bytes:
        """The number of lexemes, then each lexeme (UTF-8, NUL-terminated), its number of
        positions and the positions (``uint16``s, big-endian)."""
        # one string encoded once: the positions are bytes kept in a string by ``surrogateescape``
        # (which gives them back as they were); a term is a token the tokenizer returned as UTF-8,
        # so it holds no lone surrogate that could be taken for one
        pos, top = _BINARY_POSITIONS_STR, _MAX_POSITIONS
        return struct.pack(">i", len(self.counts)) + "".join(
            [t + "\0" + pos[n if n < top else top] for t, n in self.counts.items()]).encode("utf-8", "surrogateescape")


def _tsquery(tokens: Sequence[str]) -> str:
    """``'a' | 'b'`` with every lexeme quoted (nothing in a term is tsquery syntax)."""
    return " | ".join(_quote_lexeme(t) for t in tokens)
