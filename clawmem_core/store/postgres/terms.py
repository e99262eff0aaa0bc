"""The keyword terms of the PostgreSQL store: FTS5's own tokenizer run in process, so that the
PostgreSQL index holds exactly the terms the SQLite index holds."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Sequence

from ...errors import ConfigError
from ...text import index_document

#: PostgreSQL refuses lexemes of 2 KiB and more (such a "word" is never searched for).
_MAX_LEXEME_BYTES = 2046


class _Terms:
    """FTS5's tokenizer for the configured ``store.fts.tokenizer``, run in process: the PostgreSQL
    index holds exactly the terms the SQLite index holds."""

    def __init__(self, tokenizer: str) -> None:
        import apsw

        from ..sqlite.schema import FTS_TOKENIZERS

        if tokenizer not in ("cjk", "unicode61"):
            raise ConfigError(f"the PostgreSQL store supports store.fts.tokenizer cjk or unicode61, not {tokenizer!r}")
        self.cjk = tokenizer == "cjk"
        self._conn = apsw.Connection(":memory:")
        name, *args = [a.strip("'") for a in FTS_TOKENIZERS[tokenizer].split()]
        self._tok = self._conn.fts5_tokenizer(name, args)
        self._doc_flag = apsw.FTS5_TOKENIZE_DOCUMENT
        self._query_flag = apsw.FTS5_TOKENIZE_QUERY
        self._lock = threading.Lock()

    def document(self, text: str) -> list[str]:
        doc = index_document(text) if self.cjk else text
        with self._lock:  # (no colocated tokens: the first of each group, as FTS5 indexes it)
            return self._tok(doc.encode("utf-8"), self._doc_flag, None, include_offsets=False,  # type: ignore[no-any-return]
                             include_colocated=False)

    def counts(self, text: str) -> tuple["Counter[str]", int]:
        """Each term of a document with its count (terms PostgreSQL cannot hold left out), and the
        document's length in tokens (all of them, as FTS5 counts it)."""
        tokens = self.document(text)
        counts = Counter(tokens)
        # a term of at most 511 characters is at most 2044 bytes: only longer ones are measured
        # (and the terms are looked at one by one only when one is that long)
        if counts and max(map(len, counts)) > _MAX_LEXEME_BYTES // 4:
            for t in [t for t in counts if len(t) > _MAX_LEXEME_BYTES // 4 and len(t.encode("utf-8")) > _MAX_LEXEME_BYTES]:
                del counts[t]
        return counts, len(tokens)

    def query(self, terms: Sequence[str]) -> list[str]:
        """The tokens of query terms (a term of several tokens counts as each of them)."""
        out: list[str] = []
        with self._lock:
            for term in terms:
                got = self._tok(term.encode("utf-8"), self._query_flag, None, include_offsets=False)
                out.extend(t[0] for t in got if t)
        return [t for t in dict.fromkeys(out) if len(t.encode("utf-8")) <= _MAX_LEXEME_BYTES]
