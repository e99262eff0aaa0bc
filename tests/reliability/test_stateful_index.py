"""The index against the Markdown, by a hypothesis state machine: writes through ``MemoryIndex.write``, direct
edits, deletes, renames and searches, interleaved in a real workspace with a real index (keyword-only, and
hybrid with the deterministic test embedder). After every step the index must match the files: every indexed
file exists with the same content hash, every memory file is indexed, and a token just written is found.

Modest by default (a few seconds); ``CLAWMEM_STRESS=1`` runs many more examples."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from clawmem_core import MemoryConfig, MemoryIndex
from clawmem_core.discovery import list_memory_files
from clawmem_core.testing import HashEmbedder

STRESS = os.environ.get("CLAWMEM_STRESS") == "1"
TODAY = datetime.now()
#: The files a step may touch: the long-term file, today's daily note (which writes append to), others.
NAMES = ["MEMORY.md", f"memory/{TODAY:%Y-%m-%d}.md", "memory/a.md", "memory/sub/b.md", "memory/笔记.md",
         "memory/deep/er/c.md"]
WORDS = ["jazz", "espresso", "heron", "planetarium", "咖啡", "西湖", "周末", "meeting", "Dana", "build"]


class IndexMatchesMarkdown(RuleBasedStateMachine):
    embedded = False

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="clawmem-stateful-"))
        self.ws = self.root / "ws"
        (self.ws / "memory").mkdir(parents=True)
        config = MemoryConfig.from_dict({"provider": "none", "sync": {"on_search": False}})
        self.mem = MemoryIndex(self.ws, config=config, state_dir=self.root / "state",
                               embedder=HashEmbedder() if self.embedded else None)
        self.counter = 0
        #: token -> the file it was last put in (only tokens whose file still holds them)
        self.where: dict[str, str] = {}

    def teardown(self) -> None:
        self.mem.close()
        shutil.rmtree(self.root, ignore_errors=True)

    # -- helpers ------------------------------------------------------------------------------------

    def _token(self) -> str:
        self.counter += 1
        return f"tok{self.counter}q{os.getpid() % 97}z"

    def _on_disk(self) -> list[str]:
        return sorted(f.path for f in list_memory_files(self.ws).files)

    def _forget_file(self, rel: str) -> None:
        self.where = {t: p for t, p in self.where.items() if p != rel}

    def _note(self, words: list[str], token: str) -> str:
        return f"- {' '.join(words)} {token} 记录\n"

    # -- steps --------------------------------------------------------------------------------------

    @rule(where=st.sampled_from(["daily", "long_term"]), words=st.lists(st.sampled_from(WORDS), max_size=4))
    def write(self, where: str, words: list[str]) -> None:
        token = self._token()
        result = self.mem.write(self._note(words, token), target=where)
        assert result.indexed, result.index_error
        rel = result.relative_to(self.ws)
        self.where[token] = rel
        # Searchable at once: write() indexes before returning.
        assert rel in {h.path for h in self.mem.search(token, max_results=50, min_score=0)}

    @rule(name=st.sampled_from(NAMES), words=st.lists(st.sampled_from(WORDS), max_size=6),
          append=st.booleans())
    def edit(self, name: str, words: list[str], append: bool) -> None:
        token = self._token()
        path = self.ws / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if not append:
            self._forget_file(name)
        with open(path, "a" if append else "w", encoding="utf-8") as fh:
            fh.write(f"# {name}\n\n" if not append else "")
            fh.write(self._note(words, token))
        self.where[token] = name

    @precondition(lambda self: bool(self._on_disk()))
    @rule(pick=st.integers(min_value=0))
    def delete(self, pick: int) -> None:
        files = self._on_disk()
        rel = files[pick % len(files)]
        (self.ws / rel).unlink()
        self._forget_file(rel)

    @precondition(lambda self: bool(self._on_disk()))
    @rule(pick=st.integers(min_value=0), new=st.sampled_from(NAMES))
    def rename(self, pick: int, new: str) -> None:
        files = self._on_disk()
        old = files[pick % len(files)]
        if old == new:
            return
        (self.ws / new).parent.mkdir(parents=True, exist_ok=True)
        os.replace(self.ws / old, self.ws / new)
        self._forget_file(new)
        self.where = {t: (new if p == old else p) for t, p in self.where.items()}

    @precondition(lambda self: bool(self.where))
    @rule(pick=st.integers(min_value=0))
    def search(self, pick: int) -> None:
        self.mem.sync()
        tokens = sorted(self.where)
        token = tokens[pick % len(tokens)]
        hits = self.mem.search(token, max_results=50, min_score=0)
        assert self.where[token] in {h.path for h in hits}, (token, self.where[token], [h.path for h in hits])

    # -- the invariant ------------------------------------------------------------------------------

    @invariant()
    def index_matches_markdown(self) -> None:
        self.mem.sync()
        indexed = self.mem._store.file_states("memory")
        on_disk = self._on_disk()
        assert sorted(indexed) == on_disk
        for rel in on_disk:
            digest = hashlib.sha256((self.ws / rel).read_bytes()).hexdigest()
            assert indexed[rel][1] == digest, rel
        assert self.mem.status().files == len(on_disk)


class IndexMatchesMarkdownEmbedded(IndexMatchesMarkdown):
    embedded = True


_SETTINGS = settings(
    max_examples=200 if STRESS else 6,
    stateful_step_count=30 if STRESS else 10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@pytest.mark.parametrize("machine", [IndexMatchesMarkdown, IndexMatchesMarkdownEmbedded], ids=["keyword", "hybrid"])
def test_index_matches_markdown(machine: type[RuleBasedStateMachine]) -> None:
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(machine, settings=_SETTINGS)
