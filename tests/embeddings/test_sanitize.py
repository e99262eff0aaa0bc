"""Vectors from any embedder are sanitised: non-finite values zeroed, L2-normalised on request."""

from __future__ import annotations

import math
import random

from clawmem_core.embeddings.base import sanitize


def _reference(vector: list[float], normalize: bool) -> list[float]:
    out = [float(v) if math.isfinite(v) else 0.0 for v in vector]
    if normalize:
        norm = math.sqrt(sum(v * v for v in out))
        if norm > 0:
            out = [v / norm for v in out]
    return out


def test_non_finite_values_are_zeroed() -> None:
    assert sanitize([float("nan"), 1.0, float("inf"), -float("inf"), 2], False) == [0.0, 1.0, 0.0, 0.0, 2.0]
    assert sanitize([1e308, 1e308, 1.0], False) == [1e308, 1e308, 1.0]  # the sum overflows, the values do not
    assert sanitize([3, 4], True) == [0.6, 0.8]
    assert sanitize([0.0, float("nan")], True) == [0.0, 0.0]


def test_same_values_as_the_element_wise_reference() -> None:
    rng = random.Random(3)
    for _ in range(100):
        v = [rng.gauss(0, 1) for _ in range(rng.randrange(1, 400))]
        if rng.random() < 0.3:
            v[rng.randrange(len(v))] = rng.choice([float("nan"), float("inf"), -float("inf")])
        for normalize in (False, True):
            assert sanitize(v, normalize) == _reference(v, normalize)
