"""Values as PostgreSQL takes them: text without NUL, pgvector and ``tsvector`` / ``tsquery``
literals, and the time in milliseconds the rows are stamped with."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from collections import Counter


def _now_ms() -> int:
    return int(time.time() * 1000)


def _pg_text(text: str) -> str:
    """``text`` as PostgreSQL can store it: a NUL character (text fields refuse it; SQLite keeps
    it) becomes U+FFFD, which no tokenizer indexes either."""
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def _vec(v: Sequence[float]) -> str:
    """A pgvector text literal (``[1.0, 0.5]``: pgvector skips the spaces)."""
    return str(list(map(float, v)))


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


def _tsquery(tokens: Sequence[str]) -> str:
    """``'a' | 'b'`` with every lexeme quoted (nothing in a term is tsquery syntax)."""
    return " | ".join(_quote_lexeme(t) for t in tokens)
