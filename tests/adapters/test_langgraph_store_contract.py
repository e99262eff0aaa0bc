"""``ClawmemStore`` keeps what it is given and behaves as LangGraph's own stores do: items of any size come back
exactly as stored, no key takes another key's file, searches rank with real scores, ordinary notes are not store
items, and the same operations give the same answers as ``InMemoryStore``."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any, Iterator

import pytest

pytest.importorskip("langgraph")

from langgraph.store.base import GetOp, ListNamespacesOp, MatchCondition, PutOp, SearchOp  # noqa: E402
from langgraph.store.memory import InMemoryStore  # noqa: E402

from clawmem_core import MemoryConfig, MemoryIndex  # noqa: E402
from clawmem_core.errors import PathNotAllowedError  # noqa: E402
from clawmem_core.testing import HashEmbedder  # noqa: E402
from clawmem_core.writing import NoteTooLargeError  # noqa: E402
from langchain_clawmem import ClawmemStore  # noqa: E402
from langchain_clawmem.store import encode_name  # noqa: E402


def _index(tmp_path: Path, provider: str = "auto") -> MemoryIndex:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    (ws / "MEMORY.md").write_text("# Memory\n\n- Dana prefers tea.\n", encoding="utf-8")
    embedder = HashEmbedder() if provider == "auto" else None
    # A generous query deadline: on a loaded machine the calibration of the embedder's cosines is never given up on.
    config = MemoryConfig.from_dict({"provider": provider, "query": {"timeout_ms": 60_000}})
    index = MemoryIndex(ws, config=config, embedder=embedder, state_dir=tmp_path / "state")
    index.sync()
    return index


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[MemoryIndex]:
    index = _index(tmp_path)
    yield index
    index.close()


def _without_updated_at(text: str) -> str:
    return re.sub(r"(?m)^updated_at: .*\n", "", text)


# -- item 12: get returns exactly what put stored ----------------------------------------------------------------

LONG_EN = "".join(f"Line {i}: Dana keeps a travel diary about Lisbon, Porto and Coimbra.\n" for i in range(1700))
LONG_ZH = "".join(f"第{i}条：李伟喜欢清淡的粤菜，周末常去广州的茶楼喝早茶。\n" for i in range(1400))


@pytest.mark.parametrize(
    "value",
    [
        {"content": LONG_EN + "THE END"},  # over 100,000 characters
        {"content": "short", "blob": "x" * 60_000, "n": 3, "tags": ["a", "b"]},  # one large field beside small ones
        {"content": LONG_ZH},  # Chinese, over 20,000 characters
        {"content": "ends with blank lines\n\n\n"},
        {"content": "\n\nstarts with blank lines"},
        {"content": "a NUL \x00 inside"},
        {"content": "a lone surrogate \ud800 inside"},
    ],
    ids=["100k", "large-field", "chinese", "trailing-newlines", "leading-newlines", "nul", "surrogate"],
)
def test_get_and_search_return_exactly_what_put_stored(mem: MemoryIndex, value: dict[str, Any]) -> None:
    store = ClawmemStore(mem)
    store.put(("users", "dana"), "diary", value)
    assert store.get(("users", "dana"), "diary").value == value
    assert [i.value for i in store.search(("users",))] == [value]
    if value["content"].strip() and "\x00" not in value["content"]:
        hits = store.search(("users",), query="Dana Lisbon 李伟 粤菜 short ends starts lone")
        assert [h.value for h in hits] == [value]


@pytest.mark.parametrize("value", [{"content": LONG_EN}, {"content": LONG_ZH, "kind": "diary", "blob": "y" * 30_000}])
def test_a_get_put_round_trip_changes_nothing(mem: MemoryIndex, value: dict[str, Any]) -> None:
    """What LangMem-style updaters do: read the item, write it back."""
    store = ClawmemStore(mem)
    store.put(("memories", "dana"), "m1", value)
    path = mem.workspace / "memory" / "memories" / "dana" / "m1.md"
    before = path.read_text(encoding="utf-8")
    item = store.get(("memories", "dana"), "m1")
    store.put(("memories", "dana"), "m1", item.value)
    assert _without_updated_at(path.read_text(encoding="utf-8")) == _without_updated_at(before)
    assert store.get(("memories", "dana"), "m1").value == value


def test_an_item_too_large_to_be_indexed_is_refused(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    mem = MemoryIndex(ws, config=MemoryConfig.from_dict({"provider": "none", "sync": {"maxFileBytes": 4000}}), state_dir=tmp_path / "state")
    try:
        store = ClawmemStore(mem)
        store.put(("users",), "ok", {"content": "李伟" * 300})  # 1,800 bytes of text fit, 6,000 do not
        with pytest.raises(NoteTooLargeError, match="4,000-byte limit"):
            store.put(("users",), "big", {"content": "李伟" * 1000})
        assert store.get(("users",), "big") is None and store.get(("users",), "ok") is not None
    finally:
        mem.close()


# -- item 13: no key takes the file of a long key shortened with a hash ------------------------------------------


def test_a_key_spelled_like_a_shortened_name_keeps_its_own_file(mem: MemoryIndex) -> None:
    store = ClawmemStore(mem)
    long_key = "conversation-summary-" + "k" * 300
    digest = hashlib.sha256(long_key.encode("utf-8")).hexdigest()[:16]
    short = f"{encode_name(long_key)[:60]}~{digest}"  # the name a long key is shortened to
    store.put(("users",), long_key, {"content": "the long key's value"})
    store.put(("users",), short, {"content": "the short key's value"})
    assert store.get(("users",), long_key).value == {"content": "the long key's value"}
    assert store.get(("users",), short).value == {"content": "the short key's value"}
    assert sorted(i.key for i in store.search(("users",))) == sorted([long_key, short])
    store.delete(("users",), short)
    assert store.get(("users",), long_key).value == {"content": "the long key's value"}


def test_a_file_holding_another_keys_item_is_never_replaced(mem: MemoryIndex) -> None:
    store = ClawmemStore(mem)
    store.put(("users",), "tea", {"content": "Dana drinks tea."})
    folder = mem.workspace / "memory" / "users"
    (folder / "tea.md").rename(folder / "coffee.md")  # a person renames the file: it still holds key "tea"
    with pytest.raises(PathNotAllowedError):
        store.put(("users",), "coffee", {"content": "Marco drinks coffee."})
    assert "Dana drinks tea." in (folder / "coffee.md").read_text(encoding="utf-8")


def test_keys_with_a_tilde_written_by_earlier_releases_are_found_and_moved(mem: MemoryIndex) -> None:
    store = ClawmemStore(mem)
    folder = mem.workspace / "memory" / "users"
    folder.mkdir()
    (folder / "a~b.md").write_text(
        '---\nkey: "a~b"\ncreated_at: "2026-01-02T03:04:05+00:00"\nupdated_at: "2026-01-02T03:04:05+00:00"\n---\n\nold\n',
        encoding="utf-8",
    )
    assert store.get(("users",), "a~b").value == {"content": "old"}
    store.put(("users",), "a~b", {"content": "new"})
    assert not (folder / "a~b.md").exists() and (folder / "a%7Eb.md").is_file()
    got = store.get(("users",), "a~b")
    assert got.value == {"content": "new"} and got.created_at.year == 2026 and got.created_at.month == 1


# -- item 14: what a LangGraph user expects -----------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["auto", "none"])
def test_search_with_a_query_ranks_matches_with_real_scores(tmp_path: Path, provider: str) -> None:
    mem = _index(tmp_path, provider)
    try:
        store = ClawmemStore(mem)
        store.put(("users",), "tea", {"content": "Dana drinks green tea every morning, green tea always."})
        store.put(("users",), "walk", {"content": "Dana walks to the office in the morning."})
        store.put(("users",), "coffee", {"content": "Marco likes strong coffee."})
        store.put(("users",), "weather", {"content": "The weather in Lisbon is sunny."})
        hits = store.search(("users",), query="green tea morning")
        assert [h.key for h in hits][:2] == ["tea", "walk"]
        scores = [h.score for h in hits]
        assert all(isinstance(s, float) and s > 0 for s in scores) and scores == sorted(scores, reverse=True)
        assert not {"coffee", "weather"} & {h.key for h in hits}  # no match: no result at 0.0
        unrelated = store.search(("users",), query="quantum chromodynamics")
        if provider == "none":
            assert unrelated == []  # no keyword in common: nothing
        else:  # a bag-of-words embedder finds a trace of likeness in anything: far below what a search shows
            assert all(h.score is not None and h.score < 0.02 for h in unrelated)
    finally:
        mem.close()


def test_ordinary_note_folders_are_not_store_namespaces(mem: MemoryIndex) -> None:
    projects = mem.workspace / "memory" / "projects"
    projects.mkdir()
    plan = projects / "plan.md"
    plan.write_text("# Plan\n\nShip the tea shop website by June.\n", encoding="utf-8")
    mem.sync()
    store = ClawmemStore(mem)
    store.put(("users", "dana"), "tea", {"content": "Dana drinks tea at the tea shop."})
    assert store.list_namespaces() == [("users", "dana")]
    assert store.get(("projects",), "plan") is None
    assert [i.key for i in store.search(())] == ["tea"]
    assert [i.key for i in store.search((), query="tea shop")] == ["tea"]
    # The user's note is never replaced nor deleted through the store.
    with pytest.raises(PathNotAllowedError):
        store.put(("projects",), "plan", {"content": "overwritten"})
    store.delete(("projects",), "plan")
    assert plan.read_text(encoding="utf-8") == "# Plan\n\nShip the tea shop website by June.\n"
    # A note a person drops into a store namespace is an item.
    (mem.workspace / "memory" / "users" / "dana" / "walk.md").write_text("Dana walks to work.\n", encoding="utf-8")
    assert store.get(("users", "dana"), "walk").value == {"content": "Dana walks to work."}


# -- the same operations on InMemoryStore and ClawmemStore -------------------------------------------------------

ITEMS = [
    (("users", "dana"), "tea", {"content": "Dana drinks green tea.", "kind": "habit", "rank": 2, "meta": {"lang": "en"}}),
    (("users", "dana"), "train", {"content": "Dana takes the 08:39 train.", "kind": "travel", "rank": 5}),
    (("users", "marco"), "tea", {"content": "Marco hates tea.", "kind": "habit", "rank": 1, "meta": {"lang": "pt"}}),
    (("teams", "infra"), "redis", {"content": "Infra runs Redis 7.", "kind": "fact", "rank": 3}),
    (("teams", "infra", "oncall"), "pager", {"content": "Pager rota is weekly.", "kind": "fact", "rank": 4}),
    (("用户", "李伟"), "饮食", {"content": "李伟不吃辣。", "kind": "habit", "rank": 0}),
]

FILTERS: list[dict[str, Any] | None] = [
    None,
    {"kind": "habit"},
    {"kind": {"$ne": "habit"}},
    {"rank": {"$gt": 2}},
    {"rank": {"$gte": 2, "$lte": 4}},
    {"rank": {"$lt": 2}},
    {"meta": {"lang": "en"}},
    {"kind": "habit", "rank": {"$eq": 1}},
    {"missing": "x"},
]

LISTS = [
    {},
    {"prefix": ("users",)},
    {"suffix": ("infra",)},
    {"prefix": ("teams",), "max_depth": 2},
    {"max_depth": 1},
    {"prefix": ("*", "infra")},
    {"limit": 2, "offset": 1},
    {"prefix": ("users",), "suffix": ("marco",)},
]


def _filled(mem: MemoryIndex) -> tuple[InMemoryStore, ClawmemStore]:
    """Both stores holding ``ITEMS``; the workspace also holds ordinary notes, which are no store items."""
    (mem.workspace / "memory" / "projects").mkdir()
    (mem.workspace / "memory" / "projects" / "plan.md").write_text("Dana's tea shop plan.\n", encoding="utf-8")
    (mem.workspace / "memory" / "2026-05-14.md").write_text("# 2026-05-14\n\nDana drank tea.\n", encoding="utf-8")
    mem.sync()
    reference, store = InMemoryStore(), ClawmemStore(mem)
    for s in (reference, store):
        for namespace, key, value in ITEMS:
            s.put(namespace, key, value)
    return reference, store


def _keys(items: list[Any]) -> set[tuple[tuple[str, ...], str]]:
    return {(i.namespace, i.key) for i in items}


def test_the_same_operations_answer_as_in_memory_store(mem: MemoryIndex) -> None:
    reference, store = _filled(mem)
    for kwargs in LISTS:
        assert store.list_namespaces(**kwargs) == reference.list_namespaces(**kwargs), kwargs
    # (before any get: InMemoryStore lists a namespace once it has been read from)
    for namespace, key, _ in ITEMS + [(("users", "dana"), "nope", None), (("nobody",), "tea", None)]:
        want, got = reference.get(namespace, key), store.get(namespace, key)
        assert (want is None) == (got is None) and (got is None or (got.value, got.key, got.namespace) == (want.value, want.key, want.namespace))
    for prefix in [(), ("users",), ("users", "dana"), ("teams",), ("用户",), ("nobody",)]:
        for flt in FILTERS:
            want = reference.search(prefix, filter=flt, limit=100)
            got = store.search(prefix, filter=flt, limit=100)
            assert _keys(got) == _keys(want), (prefix, flt)
            assert all(i.score is None for i in got)
            # Paging: the pages are disjoint, as long as the reference's, and together hold every item.
            pages = [store.search(prefix, filter=flt, limit=2, offset=o) for o in range(0, 8, 2)]
            assert [len(p) for p in pages] == [len(reference.search(prefix, filter=flt, limit=2, offset=o)) for o in range(0, 8, 2)]
            assert _keys([i for p in pages for i in p]) == _keys(want)


def test_a_batch_answers_as_in_memory_store(mem: MemoryIndex) -> None:
    reference, store = _filled(mem)
    ops = [
        PutOp(("users", "dana"), "tea", {"content": "Dana switched to coffee.", "kind": "habit", "rank": 9}),
        GetOp(("users", "dana"), "tea"),  # reads see the items as they were before the batch
        SearchOp(("users",), {"rank": {"$gte": 2}}, 10, 0),
        PutOp(("users", "zoe"), "new", {"content": "Zoe is new.", "kind": "new"}),
        ListNamespacesOp((MatchCondition(("users",), "prefix"),), None, 10, 0),
        PutOp(("users", "zoe"), "new", {"content": "Zoe is new, again.", "kind": "new"}),  # the last put wins
        PutOp(("teams", "infra"), "redis", None),  # a delete
        GetOp(("teams", "infra"), "redis"),
    ]
    want, got = reference.batch(ops), store.batch(ops)
    assert got[0] is None and got[1].value == want[1].value
    assert _keys(got[2]) == _keys(want[2]) and got[4] == want[4] and got[7].value == want[7].value
    for namespace, key in [(("users", "dana"), "tea"), (("users", "zoe"), "new"), (("teams", "infra"), "redis")]:
        expected, actual = reference.get(namespace, key), store.get(namespace, key)
        assert (expected is None and actual is None) or expected.value == actual.value
    assert store.list_namespaces() == [ns for ns in reference.list_namespaces() if ns != ("teams", "infra")]
    assert _keys(store.search((), limit=100)) == _keys(reference.search((), limit=100))
