"""The query's cosines to the calibration background (computed on every hybrid search) match the
straightforward formula: zero and non-finite vectors, odd and mismatched dimensions, the cache per
background object, and a whole search scored the same as with the pure-Python formula."""

from __future__ import annotations

import math
import random
from typing import Sequence

import pytest

from clawmem_core import calibration
from clawmem_core.calibration import BACKGROUND_TEXTS, background_cosines, background_level
from clawmem_core.testing import HashEmbedder

from .conftest import IndexFactory, WorkspaceFactory


def _cosine(q: Sequence[float], b: Sequence[float]) -> float:
    """The textbook cosine, 0 when either vector is zero (extra dimensions of the longer one count
    as zeros against the shorter)."""
    nq = math.sqrt(sum(x * x for x in q))
    nb = math.sqrt(sum(x * x for x in b))
    if nq == 0 or nb == 0:
        return 0.0
    return sum(x * y for x, y in zip(q, b)) / (nq * nb)


def _old_formula(q: Sequence[float], background: Sequence[Sequence[float]]) -> list[float]:
    """What search.py computed before (the background vectors being unit vectors already)."""
    norm = math.sqrt(sum(a * a for a in q)) or 1.0
    return [sum(a * b for a, b in zip(q, bg)) / norm for bg in background]


def _unit(v: list[float]) -> list[float]:
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v] if n else v


@pytest.mark.parametrize("dims", [1, 2, 3, 7, 383, 384, 385, 769, 3071])
def test_cosines_match_the_straightforward_formula(dims: int) -> None:
    rng = random.Random(dims)
    raw = [[rng.gauss(0, 1) for _ in range(dims)] for _ in range(len(BACKGROUND_TEXTS))]
    raw[5] = [0.0] * dims  # a zero background vector
    units = [_unit(v) for v in raw]
    for _ in range(3):
        q = [rng.gauss(0, 3) for _ in range(dims)]
        got = background_cosines(q, units)
        assert len(got) == len(units)
        assert got == pytest.approx(_old_formula(q, units), abs=1e-12)
        assert got == pytest.approx([_cosine(q, b) for b in units], abs=1e-12)
        assert got[5] == 0.0
        # not-yet-unit background vectors give true cosines too
        assert background_cosines(q, raw) == pytest.approx([_cosine(q, b) for b in raw], abs=1e-12)
        assert background_level(got) == pytest.approx(background_level(_old_formula(q, units)), abs=1e-12)


def test_a_zero_query_vector_is_unrelated_to_everything() -> None:
    units = [_unit([1.0, 2.0, 3.0]), _unit([-1.0, 0.5, 0.0]), [0.0, 0.0, 0.0]]
    assert background_cosines([0.0, 0.0, 0.0], units) == [0.0, 0.0, 0.0]
    assert _old_formula([0.0, 0.0, 0.0], units) == [0.0, 0.0, 0.0]
    assert background_cosines([], units) == [0.0, 0.0, 0.0]
    assert background_cosines([1.0, 0.0, 0.0], []) == []


def test_non_finite_values_give_non_finite_cosines_that_the_level_ignores() -> None:
    units = [_unit([1.0, 2.0, 3.0]), _unit([3.0, 1.0, 0.0]), _unit([0.0, 1.0, 1.0])]
    assert all(math.isnan(c) for c in background_cosines([math.nan, 1.0, 0.0], units))
    assert all(not math.isfinite(c) for c in background_cosines([math.inf, 1.0, 0.0], units))
    assert math.isnan(background_level(background_cosines([math.nan, 1.0, 0.0], units)))
    bad = units[:2] + [[math.nan, 0.0, 1.0]]
    got = background_cosines([1.0, 1.0, 1.0], bad)
    assert got[:2] == pytest.approx([_cosine([1.0, 1.0, 1.0], b) for b in units[:2]], abs=1e-12)
    assert math.isnan(got[2])
    assert background_level(got) == pytest.approx(background_level(got[:2]))


def test_mismatched_dimensions_count_missing_ones_as_zeros() -> None:
    units = [_unit([1.0, 2.0, 3.0, 4.0]), _unit([1.0, -1.0]), _unit([0.5, 0.5, 0.5])]
    for q in ([1.0, 0.0, 2.0], [1.0, 0.0, 2.0, 1.0, 9.0], [2.0]):
        assert background_cosines(q, units) == pytest.approx(_old_formula(q, units), abs=1e-12)


def test_the_unit_vectors_are_kept_per_background_object() -> None:
    rng = random.Random(7)
    a = [_unit([rng.gauss(0, 1) for _ in range(16)]) for _ in range(4)]
    b = [list(v) for v in reversed(a)]
    q = [rng.gauss(0, 1) for _ in range(16)]
    first = background_cosines(q, a)
    assert calibration._unit_matrix(a) is calibration._unit_matrix(a)
    assert background_cosines(q, b) == pytest.approx(list(reversed(first)), abs=1e-12)
    # a new object at a reused address never gets another object's vectors
    for _ in range(20):
        fresh = [[-x for x in v] for v in a]
        assert background_cosines(q, fresh) == pytest.approx([-c for c in first], abs=1e-12)
        del fresh


@pytest.mark.parametrize("query", ["tomato water morning", "番茄 浇水"])
def test_a_search_scores_exactly_as_with_the_pure_python_formula(
        make_workspace: WorkspaceFactory, open_index: IndexFactory, monkeypatch: pytest.MonkeyPatch, query: str) -> None:
    ws = make_workspace({
        "MEMORY.md": "# Garden\n\nThe tomato beds get water every morning.\n番茄每天早上浇水。\n",
        "memory/2026-03-01.md": "- Sowed carrots and radishes.\n- 种了胡萝卜。\n",
        "memory/2026-03-02.md": "- Repaired the greenhouse door.\n",
    })
    mem = open_index(ws, embedder=HashEmbedder(dims=385))
    mem.sync()
    new = mem.search(query, min_score=0.0)
    monkeypatch.setattr(calibration, "background_cosines", _old_formula)
    old = mem.search(query, min_score=0.0)
    assert [(r.path, r.start_line) for r in new] == [(r.path, r.start_line) for r in old]
    assert [r.score for r in new] == pytest.approx([r.score for r in old], abs=1e-9)
    assert new.info.get("confidence") == old.info.get("confidence")
    assert len(new) > 0
