"""Progress reports and their ETA maths, on a deterministic clock; the plain and rich renderers."""

from __future__ import annotations

import io

import pytest

from clawmem_core.progress import (
    PhaseMeter,
    PlainProgress,
    RichProgress,
    SyncProgress,
    Throughput,
    as_listener,
    format_duration,
    progress_renderer,
)


class Clock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def tick(self, seconds: float) -> None:
        self.t += seconds


def test_throughput_leaves_out_the_warm_up_step() -> None:
    clock = Clock()
    meter = Throughput(clock)
    assert meter.rate() is None and meter.eta(100) is None
    clock.tick(10)  # the first batch loads the model: 10 s for 100 characters
    meter.add(100)
    assert meter.rate() == pytest.approx(10.0)
    clock.tick(1)  # then 1000 characters a second
    meter.add(1000)
    clock.tick(2)
    meter.add(2000)
    assert meter.rate() == pytest.approx(1000.0)
    assert meter.eta(5000) == pytest.approx(5.0)
    assert meter.eta(0) == 0.0
    assert meter.elapsed == pytest.approx(13.0)


def test_zero_cost_steps_do_not_change_the_rate() -> None:
    clock = Clock()
    meter = Throughput(clock)
    clock.tick(2)
    meter.add(200)
    clock.tick(50)
    meter.add(0)  # a step served from the cache is not measured
    assert meter.rate() == pytest.approx(100.0)


def test_eta_follows_work_not_units() -> None:
    """Half of the chunks done, but they were the short half: the ETA is the long work left at
    the measured rate, not the elapsed time again (what a units-done estimate would say)."""
    clock = Clock()
    meter = PhaseMeter("vectors", total=4, total_work=1000, clock=clock)
    clock.tick(1)
    meter.advance(1, 50)  # warm-up
    clock.tick(1)
    ev = meter.advance(1, 50)  # 50 characters/s measured after the warm-up
    assert (ev.done, ev.total) == (2, 4)
    assert ev.eta == pytest.approx(900 / 50)
    assert ev.rate == pytest.approx(1.0)  # chunks per second at that rate
    assert ev.elapsed == pytest.approx(2.0)
    naive = ev.elapsed / ev.done * (ev.total - ev.done)
    assert ev.eta > 4 * naive
    clock.tick(18)
    ev = meter.advance(2, 900)
    assert ev.finished and ev.eta == 0.0


def test_eta_unknown_until_measured_and_growth_counts() -> None:
    clock = Clock()
    meter = PhaseMeter("vectors", total=2, total_work=200, clock=clock)
    assert meter.event().eta is None
    assert meter.advance(1, 0).eta is None  # a cached chunk: still nothing measured
    meter.grow(2, 200)
    clock.tick(2)
    ev = meter.advance(1, 100)
    assert (ev.done, ev.total) == (2, 4)
    assert ev.eta == pytest.approx(300 / 50)


def test_describe_and_format_duration() -> None:
    assert format_duration(None) == "--:--"
    assert format_duration(7.4) == "0:07"
    assert format_duration(725) == "12:05"
    assert format_duration(3723) == "1:02:03"
    ev = SyncProgress("vectors", 120, 5678, elapsed=13, eta=609, rate=9.12)
    assert ev.describe() == "vectors: 120/5678 chunks · 9.1 chunks/s · elapsed 0:13 · eta 10:09"
    done = SyncProgress("keywords", 3, 3, elapsed=1.2, eta=0.0)
    assert done.describe() == "keywords: 3/3 files · elapsed 0:01"


def test_legacy_three_argument_callbacks_still_work() -> None:
    seen: list[tuple[int, int, str]] = []
    events: list[SyncProgress] = []

    def legacy(done: int, total: int, label: str) -> None:
        seen.append((done, total, label))

    as_listener(legacy)(SyncProgress("keywords", 1, 2))  # type: ignore[misc]
    as_listener(events.append)(SyncProgress("vectors", 3, 4))  # type: ignore[misc]
    assert seen == [(1, 2, "Indexing keywords")]
    assert events == [SyncProgress("vectors", 3, 4)]
    assert as_listener(None) is None


def test_plain_lines_are_throttled_but_keep_first_and_last() -> None:
    clock = Clock()
    out = io.StringIO()
    render = PlainProgress(out, interval=5.0, clock=clock)
    render(SyncProgress("keywords", 0, 3))
    render(SyncProgress("keywords", 1, 3))  # within the interval: not shown
    render(SyncProgress("keywords", 3, 3, elapsed=0.5, eta=0.0))
    render(SyncProgress("keywords", 3, 3, elapsed=0.5, eta=0.0))  # the end once
    render(SyncProgress("vectors", 0, 10))
    clock.tick(6)
    render(SyncProgress("vectors", 4, 10, elapsed=6, eta=9, rate=0.7))
    clock.tick(1)
    render(SyncProgress("vectors", 5, 10, elapsed=7, eta=7, rate=0.7))
    render(SyncProgress("vectors", 10, 10, elapsed=14, eta=0.0, rate=0.7))
    assert out.getvalue().splitlines() == [
        "clawmem: keywords: 0/3 files · elapsed 0:00 · eta --:--",
        "clawmem: keywords: 3/3 files · elapsed 0:00",
        "clawmem: vectors: 0/10 chunks · elapsed 0:00 · eta --:--",
        "clawmem: vectors: 4/10 chunks · 0.7 chunks/s · elapsed 0:06 · eta 0:09",
        "clawmem: vectors: 10/10 chunks · 0.7 chunks/s · elapsed 0:14",
    ]


def test_plain_lines_wait_for_a_phase_that_takes_a_while() -> None:
    clock = Clock()
    out = io.StringIO()
    render = PlainProgress(out, interval=5.0, delay=2.0, clock=clock)
    render(SyncProgress("keywords", 0, 3))
    clock.tick(0.5)
    render(SyncProgress("keywords", 3, 3, elapsed=0.5, eta=0.0))  # quick: nothing at all
    render(SyncProgress("vectors", 0, 10))
    clock.tick(1)
    render(SyncProgress("vectors", 2, 10, elapsed=1, eta=4, rate=2))
    clock.tick(1.5)
    render(SyncProgress("vectors", 5, 10, elapsed=2.5, eta=2.5, rate=2))
    clock.tick(1)
    render(SyncProgress("vectors", 7, 10, elapsed=3.5, eta=1.5, rate=2))  # within the interval
    clock.tick(1.5)
    render(SyncProgress("vectors", 10, 10, elapsed=5, eta=0.0, rate=2))
    assert out.getvalue().splitlines() == [
        "clawmem: vectors: 5/10 chunks · 2.0 chunks/s · elapsed 0:02 · eta 0:02",
        "clawmem: vectors: 10/10 chunks · 2.0 chunks/s · elapsed 0:05",
    ]


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_renderer_choice_follows_the_stream() -> None:
    assert isinstance(progress_renderer(io.StringIO()), PlainProgress)
    term = FakeTerminal()
    render = progress_renderer(term)
    assert isinstance(render, RichProgress)
    with render:
        render(SyncProgress("vectors", 2, 4, elapsed=3, eta=3, rate=0.7))
        render(SyncProgress("vectors", 4, 4, elapsed=6, eta=0.0, rate=0.7))
    text = term.getvalue()
    assert "Embedding vectors" in text and "4/4" in text
