"""The ``Store`` contract, run against both backends: what sync and search rely on."""

from __future__ import annotations

import dataclasses
import math
import threading

import pytest

from clawmem_core.store.base import Store

from .conftest import BackendFactory, chunk, file


def _unit(*xs: float) -> list[float]:
    n = math.sqrt(sum(x * x for x in xs))
    return [x / n for x in xs]


def test_files_chunks_replace_touch_delete(store: Store) -> None:
    assert not store.has_content() and store.get_meta() is None
    store.replace_files([
        (file("memory/a.md", "alpha"), [chunk("memory/a.md", 1, "alpha apples"), chunk("memory/a.md", 2, "alpha pears")]),
        (file("memory/b.md", "beta"), [chunk("memory/b.md", 1, "beta bananas")]),
    ])
    assert store.has_content()
    states = store.file_states("memory")
    assert set(states) == {"memory/a.md", "memory/b.md"}
    assert states["memory/a.md"] == ("memory/a.md", "hash-alpha", 5, 1000, 7, 42)
    assert store.file_hashes("memory") == {"memory/a.md": "hash-alpha", "memory/b.md": "hash-beta"}
    assert store.file_states("sessions") == {}
    c = store.counts()
    assert (c.files, c.chunks, c.by_source) == (2, 3, {"memory": (2, 3)})
    # replacing a file replaces all of its chunks
    store.replace_file(file("memory/a.md", "alpha2"), [chunk("memory/a.md", 1, "alpha only")])
    assert store.counts().chunks == 2
    hits = dict(store.keyword_search(["pears"], 10))
    assert hits == {}
    store.touch_files([file("memory/b.md", "beta", mtime=2000, ctime=9, ino=43)])
    assert store.file_states("memory")["memory/b.md"][2:] == (4, 2000, 9, 43)
    assert store.file_hashes("memory")["memory/b.md"] == "hash-beta"
    store.delete_files("memory", ["memory/b.md"])
    assert set(store.file_states("memory")) == {"memory/a.md"}
    assert store.keyword_search(["bananas"], 10) == []
    assert store.counts().chunks == 1


def test_chunk_meta_and_rows(store: Store) -> None:
    rows = [chunk("memory/a.md", 3, "gamma ray"), chunk("memory/a.md", 7, "delta wing")]
    store.replace_files([(file("memory/a.md"), rows)])
    meta = store.get_chunk_meta([r.id for r in rows] + ["missing"])
    assert meta == {rows[0].id: ("memory/a.md", "memory", 3, 3), rows[1].id: ("memory/a.md", "memory", 7, 7)}
    got = store.get_chunks([rows[1].id])
    assert got[rows[1].id].text == "delta wing" and got[rows[1].id].start_line == 7


def test_keyword_search_ranks_rarer_terms_higher_and_handles_chinese(store: Store) -> None:
    store.replace_files([
        (file("memory/a.md"), [chunk("memory/a.md", 1, "the cat sat on the mat"),
                                chunk("memory/a.md", 2, "a dog and a cat"),
                                chunk("memory/a.md", 3, "zebra crossing near the cat cafe"),
                                chunk("memory/a.md", 4, "我们今天玩成语接龙游戏")]),
    ])
    hits = store.keyword_search(["zebra", "cat"], 10)
    assert hits[0][0].startswith("memory:memory/a.md:3:")
    assert len(hits) == 3 and all(r < 0 for _, r in hits)
    assert [r for _, r in hits] == sorted(r for _, r in hits)
    zh = store.keyword_search(["成语"], 10)
    assert [i.split(":")[2] for i, _ in zh] == ["4"]
    assert store.keyword_search(["running"], 10) == []  # no such word
    assert store.keyword_search([], 10) == []


def test_keyword_search_takes_hostile_terms_literally(store: Store) -> None:
    store.replace_files([(file("memory/a.md"), [chunk("memory/a.md", 1, "plain words here")])])
    for term in ["'", "\\", "a'b", "x:*", "!", "&", "|", "(", ")", "<->", "%", "_", "\x01", "wor*", "'words'"[:1]]:
        assert store.keyword_search([term], 10) == [], term
    # syntax around a word is not syntax: the word alone is searched
    plain = store.keyword_search(["plain"], 10)
    assert len(plain) == 1
    for term in ["' | 'plain", "plain:*", "(plain)", "!plain"]:
        assert store.keyword_search([term], 10) == plain, term


def test_vector_search_is_cosine_best_first(store: Store) -> None:
    store.replace_files([(file("memory/v.md"), [
        chunk("memory/v.md", 1, "one", _unit(1, 0, 0)),
        chunk("memory/v.md", 2, "two", _unit(1, 1, 0)),
        chunk("memory/v.md", 3, "three", _unit(0, 0, 1)),
    ])])
    hits = store.vector_search(_unit(1, 0.1, 0), 2)
    assert [h[0].split(":")[2] for h in hits] == ["1", "2"]
    assert hits[0][1] == pytest.approx(0.995, abs=0.01)
    assert store.vector_search([1.0, 0.0], 5) == []  # other dimensions: nothing
    assert store.vector_dims == 3


def test_window_rows_are_vector_only(store: Store) -> None:
    store.replace_files([(file("memory/w.md"), [
        chunk("memory/w.md", 1, "whole chunk words"),
        chunk("memory/w.md", 1, "window piece", _unit(0, 1), window=True),
    ])])
    assert store.keyword_search(["window"], 10) == []
    assert len(store.vector_search(_unit(0, 1), 10)) == 1
    assert store.counts().chunks == 1


def test_pending_chunks_get_their_vectors_later(store: Store) -> None:
    """Two-phase sync: keyword rows written pending, then completed with a vector or with window
    rows; a chunk replaced meanwhile is skipped; the counts follow."""
    pend = [dataclasses.replace(chunk("memory/p.md", i, f"pending text {i}"), pending=True) for i in range(1, 5)]
    store.replace_files([(file("memory/p.md"), pend),
                         (file("memory/d.md"), [chunk("memory/d.md", 1, "done text", _unit(1, 0))])])
    counts = store.vector_counts()
    assert (counts.done, counts.total, counts.pending) == (1, 5, 4)
    assert counts.pending_chars == sum(len(c.text) for c in pend)
    assert len(store.keyword_search(["pending"], 10)) == 4
    first = store.pending_chunks(2)
    assert [r.id for _, r in first] == [c.id for c in pend[:2]] and all(r.pending for _, r in first)
    rest = store.pending_chunks(10, after=first[-1][0])
    assert [r.id for _, r in rest] == [c.id for c in pend[2:]]
    assert store.pending_chunks(10, paths=["memory/d.md"]) == []
    window = chunk("memory/p.md", 2, "window of pending text 2", _unit(0, 1), window=True)
    assert store.set_vectors([(pend[0].id, _unit(1, 1), []), (pend[1].id, None, [window])]) == 2
    assert store.set_vectors([(pend[0].id, _unit(1, 1), [])]) == 0  # already done
    assert store.vector_counts().done == 3
    # Which of these chunks still wait for their vectors (search ranks those by keywords).
    done_id = store.keyword_search(["done"], 10)[0][0]
    assert store.pending_ids([c.id for c in pend] + [done_id, "no-such-id"]) == {pend[2].id, pend[3].id}
    assert store.pending_ids([]) == set()
    assert {i for i, _ in store.vector_search(_unit(0, 1), 10)} >= {window.id}
    assert store.keyword_search(["window"], 10) == []  # window rows stay vector-only
    # The file changes before its last chunks get their vectors: those are skipped.
    store.replace_files([(file("memory/p.md", "new"), [chunk("memory/p.md", 1, "new text")])])
    assert store.set_vectors([(pend[2].id, _unit(1, 0), []), (pend[3].id, _unit(1, 0), [])]) == 0
    assert store.pending_chunks(10) == []
    assert (store.vector_counts().done, store.vector_counts().total) == (2, 2)  # not written pending


def test_meta_values_and_data_version(make_backend: BackendFactory) -> None:
    a, b = make_backend().open(), make_backend().open()
    try:
        before = a.data_version()
        b.set_meta({"model": "m1"})
        b.set_value("last_scan", "12.5")
        assert a.get_meta() == {"model": "m1"} and a.get_value("last_scan") == "12.5"
        assert a.data_version() != before  # another handle wrote
        mid = a.data_version()
        b.replace_files([(file("memory/a.md"), [chunk("memory/a.md", 1, "new words")])])
        assert a.data_version() != mid
        assert a.get_value("nothing") is None
    finally:
        a.close()
        b.close()


def test_embedding_cache(store: Store) -> None:
    store.cache_put("p", "m", "k", {"h1": [0.5, 0.25], "h2": [1.0, 0.0], "empty": []})
    got = store.cache_get("p", "m", "k", ["h1", "h2", "h3", "empty"])
    assert set(got) == {"h1", "h2"} and got["h1"] == pytest.approx([0.5, 0.25])
    assert store.cache_get("p", "other", "k", ["h1"]) == {}
    assert store.cache_prune(5) == 0
    assert store.cache_prune(1) == 1
    assert len(store.cache_get("p", "m", "k", ["h1", "h2"])) == 1


def test_rebuild_switches_atomically(make_backend: BackendFactory) -> None:
    live, reader = make_backend().open(), make_backend().open()
    try:
        live.replace_files([(file("memory/old.md"), [chunk("memory/old.md", 1, "old words")])])
        live.set_meta({"model": "old"})
        live.cache_put("p", "m", "k", {"h": [1.0, 2.0]})
        with live.rebuild() as tmp:
            assert tmp.cache_get("p", "m", "k", ["h"])  # the new generation starts with the cache
            tmp.replace_files([(file("memory/new.md"), [chunk("memory/new.md", 1, "new words")])])
            tmp.set_meta({"model": "new"})
            # readers still see the old index while the new one is being built
            assert [i for i, _ in reader.keyword_search(["old"], 5)]
            assert reader.keyword_search(["new"], 5) == [] and reader.get_meta() == {"model": "old"}
            assert set(reader.file_states("memory")) == {"memory/old.md"}
        reader.refresh()
        assert reader.get_meta() == {"model": "new"}
        assert set(reader.file_states("memory")) == {"memory/new.md"}
        assert reader.keyword_search(["old"], 5) == []
        assert reader.counts().chunks == 1
    finally:
        live.close()
        reader.close()


def test_failed_rebuild_leaves_the_live_index(make_backend: BackendFactory) -> None:
    live = make_backend().open()
    try:
        live.replace_files([(file("memory/old.md"), [chunk("memory/old.md", 1, "old words")])])
        with pytest.raises(RuntimeError):
            with live.rebuild() as tmp:
                tmp.replace_files([(file("memory/new.md"), [chunk("memory/new.md", 1, "new words")])])
                raise RuntimeError("embedding failed")
        assert set(live.file_states("memory")) == {"memory/old.md"}
        assert live.keyword_search(["new"], 5) == []
        assert live.remove_leftovers() == 0
    finally:
        live.close()


def test_process_lock_excludes_a_second_holder(make_backend: BackendFactory) -> None:
    from clawmem_core.store.base import StoreBusyError

    one, two = make_backend(), make_backend()
    one.open().close()
    with one.process_lock():
        with pytest.raises(StoreBusyError):
            with two.process_lock(blocking=False):
                pass
        got: list[str] = []

        def waiter() -> None:
            with two.process_lock():
                got.append("in")

        t = threading.Thread(target=waiter)
        t.start()
        t.join(0.5)
        assert got == []  # still waiting
    t.join(30)
    assert got == ["in"]
