"""A disk cache of embedding vectors for the benchmarks: one SQLite file, vectors keyed by the model, the kind of
text (``"d"`` a document, ``"q"`` a query: some models embed them differently) and the text's hash.

The product keeps its own embedding cache inside each index; this one sits in front of the model so that a
benchmark that builds several indexes with one model (e.g. whole chunks through a LangChain ``Embeddings`` and
the same model behind a remote-style API stub), or that is run again on a loaded machine, embeds each text once.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from array import array
from pathlib import Path
from typing import Callable, Sequence


class VectorCache:
    """``documents(model, texts, embed)`` / ``query(model, text, embed)``: the cached vectors, the missing ones
    computed by ``embed`` and stored. Safe to share between threads (one lock)."""

    def __init__(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False, timeout=60)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS v (model TEXT, kind TEXT, h TEXT, vec BLOB, "
                         "PRIMARY KEY (model, kind, h))")
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def _hash(text: str) -> str:
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()

    def _get(self, model: str, kind: str, hashes: Sequence[str]) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        with self._lock:
            for i in range(0, len(hashes), 500):
                part = list(hashes[i:i + 500])
                rows = self._db.execute(
                    f"SELECT h, vec FROM v WHERE model = ? AND kind = ? AND h IN ({','.join('?' * len(part))})",
                    [model, kind, *part]).fetchall()
                for h, blob in rows:
                    a = array("f")
                    a.frombytes(blob)
                    out[h] = a.tolist()
        return out

    def _put(self, model: str, kind: str, hashes: Sequence[str], vecs: Sequence[Sequence[float]]) -> None:
        with self._lock, self._db:
            self._db.executemany("INSERT OR REPLACE INTO v VALUES (?, ?, ?, ?)",
                                 [(model, kind, h, array("f", v).tobytes()) for h, v in zip(hashes, vecs)])

    def documents(self, model: str, texts: Sequence[str], embed: Callable[[list[str]], Sequence[Sequence[float]]],
                  kind: str = "d") -> list[list[float]]:
        hashes = [self._hash(t) for t in texts]
        have = self._get(model, kind, hashes)
        todo = list(dict.fromkeys(t for t, h in zip(texts, hashes) if h not in have))
        self.hits += len(texts) - len(todo)
        self.misses += len(todo)
        if todo:
            vecs = [list(map(float, v)) for v in embed(todo)]
            th = [self._hash(t) for t in todo]
            self._put(model, kind, th, vecs)
            have.update(zip(th, vecs))
        return [have[h] for h in hashes]

    def query(self, model: str, text: str, embed: Callable[[str], Sequence[float]]) -> list[float]:
        return self.documents(model, [text], lambda ts: [embed(ts[0])], kind="q")[0]
