"""Agent ids are exact strings on both backends: no Unicode normalisation, no case folding (the
decision and its reasons are in docs/decisions.md). Ids that look the same but differ in Unicode
form (NFC / NFD: an accented Latin name, Hangul, a CJK compatibility ideograph) or in case are
different agents, each with its own index; an index filed under a non-NFC id keeps being found
under that id, whole, and the other form never touches it."""

from __future__ import annotations

import unicodedata
from pathlib import Path
from typing import Any, Iterator

import pytest

from clawmem_core import MemoryIndex
from clawmem_core.errors import PathNotAllowedError
from clawmem_core.store.base import MissingIndexError
from clawmem_core.tools import get_payload

from .test_index_backends import write

#: (NFC, NFD) pairs: different code points, the same text to a reader.
FORMS = [
    ("Jos\u00e9", "Jose\u0301"),            # accented Latin
    ("\ud300", "\u1110\u1175\u11b7"),        # Hangul syllable and its jamo
    ("\u8c48\u5718\u968a", "\uf900\u5718\u968a"),  # a CJK compatibility ideograph: NFC and NFD both map U+F900 to U+8C48
]


def _secret(i: int) -> str:
    return f"zqform{i}word"


def _open(ws: Path | None, agent: str, tmp: Path, store_config: dict[str, Any], **cfg: Any) -> MemoryIndex:
    return MemoryIndex(ws, agent_id=agent, config={"store": store_config, "provider": "none", **cfg},
                       state_dir=tmp / "state")


@pytest.fixture
def agents(tmp_path: Path, store_config: dict[str, Any]) -> Iterator[dict[str, MemoryIndex]]:
    """One workspace per id: both forms of each pair, and "Team" / "team"; each its own secret."""
    ids = [a for pair in FORMS for a in pair] + ["Team", "team"]
    out: dict[str, MemoryIndex] = {}
    try:
        for i, agent in enumerate(ids):
            ws = write(tmp_path / f"ws{i}", {"MEMORY.md": f"# Notes {i}\n\nThe code is {_secret(i)} 机密{i}号.\n"})
            out[agent] = _open(ws, agent, tmp_path, store_config)
            assert out[agent].sync().files_indexed == 1
        yield out
    finally:
        for mem in out.values():
            mem.close()


def test_the_pairs_really_differ_only_in_form() -> None:
    for nfc, nfd in FORMS:
        assert nfc != nfd and unicodedata.normalize("NFC", nfd) == nfc
        assert unicodedata.is_normalized("NFC", nfc) and not unicodedata.is_normalized("NFC", nfd)


def test_each_form_and_case_is_its_own_agent(agents: dict[str, MemoryIndex]) -> None:
    ids = list(agents)
    for i, agent in enumerate(ids):
        mem = agents[agent]
        assert mem.agent_id == agent  # kept as given, not normalised
        assert [r.path for r in mem.search(_secret(i), min_score=0)] == ["MEMORY.md"]
        others = [_secret(j) for j in range(len(ids)) if j != i]
        for q in [*others, "code is", "机密"]:
            assert all(not any(s in r.snippet for s in others) for r in mem.search(q, max_results=20, min_score=0)), (agent, q)
        assert mem.status().files == 1


def test_an_index_filed_under_a_non_nfc_id_is_found_whole_under_it(tmp_path: Path, store_config: dict[str, Any]) -> None:
    """What an index built under an NFD id (as any earlier version built it) meets now: the same
    id finds it whole (nothing to re-index, its replica answers); the NFC form is another agent,
    whose syncs leave it untouched."""
    nfc, nfd = FORMS[0]
    old_ws = write(tmp_path / "old", {"MEMORY.md": "# Old\n\nThe code is zqoldword.\n",
                                       "memory/2026-01-02.md": "- 旧的笔记 zqoldnote\n"})
    with _open(old_ws, nfd, tmp_path, store_config) as mem:
        assert mem.sync().files_indexed == 2
    with _open(old_ws, nfd, tmp_path, store_config) as mem:  # reopened: the same index, nothing re-indexed
        assert mem.sync().files_indexed == 0 and mem.status().files == 2
        assert [r.path for r in mem.search("zqoldnote", min_score=0)] == ["memory/2026-01-02.md"]
    new_ws = write(tmp_path / "new", {"MEMORY.md": "# New\n\nThe code is zqnewword.\n"})
    with _open(new_ws, nfc, tmp_path, store_config) as mem:  # the NFC form: its own, new index
        assert mem.sync().files_indexed == 1 and mem.status().files == 1
        assert mem.search("zqoldnote", min_score=0) == [] and mem.read("memory/2026-01-02.md").missing
        mem.sync(force=True)
    # still whole after the other form's syncs: through a replica on PostgreSQL (the store is all it
    # has), with the workspace on SQLite (which has no replicas)
    with _open(None if store_config else old_ws, nfd, tmp_path, store_config) as mem:
        assert [r.path for r in mem.search("zqoldnote", min_score=0)] == ["memory/2026-01-02.md"]
        assert "zqoldword" in mem.read("MEMORY.md").text
        assert mem.status().files == 2
        if mem.workspace is not None:
            assert mem.sync().files_indexed == 0
    with _open(None if store_config else new_ws, nfc, tmp_path, store_config) as mem:
        assert [r.path for r in mem.search("zqnewword", min_score=0)] == ["MEMORY.md"]
        assert mem.search("zqoldword", min_score=0) == []
    if store_config:
        with pytest.raises(MissingIndexError):  # a form nobody indexed: a clear error, nothing created
            _open(None, unicodedata.normalize("NFD", "\ud300"), tmp_path, store_config)
    else:  # one file per id, named by the id as given
        names = {p.name for p in (tmp_path / "state" / "memory").glob("*.sqlite")}
        assert {f"{nfd}.sqlite", f"{nfc}.sqlite"} <= names


def test_a_shared_namespace_is_the_exact_id(tmp_path: Path, store_config: dict[str, Any]) -> None:
    """``shared: [NFC]`` reads the NFC agent's index only; a path naming the NFD form (or another
    case) of a granted namespace is refused, not routed to either."""
    nfc, nfd = FORMS[0]
    for agent, word in ((nfc, "zqnfcword"), (nfd, "zqnfdword"), ("TEAM", "zqupperword")):
        ws = write(tmp_path / f"ws-{word}", {"MEMORY.md": f"# Team\n\nThe code is {word}.\n"})
        with _open(ws, agent, tmp_path, store_config) as mem:
            mem.sync()
    alice_ws = write(tmp_path / "alice", {"MEMORY.md": "# Alice\n\nAlice drinks green tea.\n"})
    with _open(alice_ws, "alice", tmp_path, store_config, shared=[nfc, "team"]) as alice:
        hits = alice.search("zqnfcword zqnfdword zqupperword", max_results=10, min_score=0)
        assert [r.path for r in hits] == [f"@{nfc}/MEMORY.md"]
        assert "zqnfcword" in alice.read(f"@{nfc}/MEMORY.md").text
        for path in (f"@{nfd}/MEMORY.md", "@TEAM/MEMORY.md"):
            with pytest.raises(PathNotAllowedError):
                alice.read(path)
            payload = get_payload(alice, path)
            assert "zqnfdword" not in str(payload) and "zqupperword" not in str(payload)
