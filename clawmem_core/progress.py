"""Progress of a sync, with an ETA measured from the work done so far, and two renderers: a
``rich`` progress bar for a terminal and plain lines for logs and pipes.

A sync runs in two phases (SPEC 6): ``keywords`` reads, chunks and writes every changed file for
keyword search (its work is the files' bytes), then ``vectors`` embeds the chunks that still lack
vectors (its work is the characters sent to the embedding model). Each phase's ETA is the work
left divided by the throughput measured in that phase, never a share of files done: cached or
unchanged files cost nothing and would make such an estimate far too short.
"""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass
from typing import Any, Callable, Literal, TextIO, Union

Phase = Literal["keywords", "vectors"]

#: The unit counted by ``done`` / ``total`` in each phase.
UNITS: dict[str, str] = {"keywords": "files", "vectors": "chunks"}
LABELS: dict[str, str] = {"keywords": "Indexing keywords", "vectors": "Embedding vectors"}


@dataclass(frozen=True)
class SyncProgress:
    """One progress report: ``done`` of ``total`` files (``keywords``) or chunks (``vectors``),
    seconds since the phase began, the measured rate (units per second) and the seconds left
    (``None`` until something has been measured)."""

    phase: Phase | str
    done: int
    total: int
    elapsed: float = 0.0
    eta: float | None = None
    rate: float | None = None

    @property
    def unit(self) -> str:
        return UNITS.get(self.phase, "items")

    @property
    def label(self) -> str:
        return LABELS.get(self.phase, str(self.phase))

    @property
    def finished(self) -> bool:
        return self.done >= self.total

    def describe(self) -> str:
        """``vectors: 120/5678 chunks · 9.1 chunks/s · elapsed 0:13 · eta 10:09``."""
        parts = [f"{self.phase}: {self.done}/{self.total} {self.unit}"]
        if self.rate is not None and self.phase == "vectors":
            parts.append(f"{self.rate:.1f} {self.unit}/s")
        parts.append(f"elapsed {format_duration(self.elapsed)}")
        if not self.finished:
            parts.append(f"eta {format_duration(self.eta)}")
        return " · ".join(parts)


#: ``progress(event)``; the older ``progress(done, total, label)`` form is accepted too.
ProgressCallback = Union[Callable[[SyncProgress], Any], Callable[[int, int, str], Any]]


def as_listener(callback: ProgressCallback | None) -> Callable[[SyncProgress], None] | None:
    """A one-argument listener for ``callback`` (``None`` stays ``None``): a callable taking three
    positional arguments gets ``(done, total, label)``, any other the :class:`SyncProgress`."""
    if callback is None:
        return None
    if _positional_arity(callback) >= 3:
        legacy: Any = callback
        return lambda ev: legacy(ev.done, ev.total, ev.label)
    return callback  # type: ignore[return-value]


def _positional_arity(fn: Any) -> int:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return 1
    n = 0
    for p in sig.parameters.values():
        if p.kind == p.VAR_POSITIONAL:
            return 1  # ``*args``: give it the event
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty:
            n += 1
    return n


def format_duration(seconds: float | None) -> str:
    """``0:07``, ``12:05``, ``1:02:03``; ``--:--`` when unknown."""
    if seconds is None or seconds != seconds or seconds == float("inf"):
        return "--:--"
    s = max(0, int(round(seconds)))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Throughput:
    """Work per second measured over a phase. The first measured step is a warm-up (a local
    model loads, a connection opens) and is left out once a second one exists."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.started = clock()
        self._work = 0.0
        #: (time, cumulative work) after each step that did work
        self._steps: list[tuple[float, float]] = []

    @property
    def elapsed(self) -> float:
        return max(0.0, self._clock() - self.started)

    def add(self, work: float) -> None:
        """Record ``work`` units (bytes, characters) just finished; zero-cost steps (files found
        unchanged, vectors found in the cache) are not measured."""
        if work <= 0:
            return
        self._work += work
        self._steps.append((self._clock(), self._work))

    def rate(self) -> float | None:
        """Work units per second, or ``None`` before anything was measured."""
        if not self._steps:
            return None
        if len(self._steps) >= 2:
            (t0, w0), (t1, w1) = self._steps[0], self._steps[-1]
        else:
            (t0, w0), (t1, w1) = (self.started, 0.0), self._steps[0]
        dt = t1 - t0
        if dt <= 0:
            return None
        return (w1 - w0) / dt

    def eta(self, remaining_work: float) -> float | None:
        """Seconds to do ``remaining_work`` at the measured rate (0 when nothing remains)."""
        if remaining_work <= 0:
            return 0.0
        rate = self.rate()
        return remaining_work / rate if rate else None


class PhaseMeter:
    """Counts one phase's units and work and makes its :class:`SyncProgress` events."""

    def __init__(self, phase: Phase | str, total: int, total_work: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.phase = phase
        self.total = total
        self.total_work = total_work
        self.done = 0
        self.work_done = 0.0
        self._costed = 0  # units whose work was measured
        self.meter = Throughput(clock)

    def grow(self, units: int, work: float) -> None:
        """More to do than counted at the start (files changed meanwhile)."""
        self.total += units
        self.total_work += work

    def advance(self, units: int, work: float) -> SyncProgress:
        """``units`` finished, ``work`` of which cost time; returns the event to report."""
        self.done = min(self.total, self.done + units)
        self.work_done += work
        if work > 0:
            self._costed += units
        self.meter.add(work)
        return self.event()

    def event(self) -> SyncProgress:
        rate = self.meter.rate()
        unit_rate = rate * self._costed / self.work_done if rate and self.work_done > 0 else None
        eta = 0.0 if self.done >= self.total else self.meter.eta(self.total_work - self.work_done)
        return SyncProgress(self.phase, self.done, self.total, self.meter.elapsed, eta, unit_rate)


# -- renderers --------------------------------------------------------------------------------


#: Plain progress lines start once a phase has run this long (seconds): quick syncs stay quiet.
PLAIN_DELAY_SECONDS = 2.0


class PlainProgress:
    """Progress as plain lines (for logs and pipes): once a phase has run ``delay`` seconds, a
    line then, at most one every ``interval`` seconds, and its last one; a phase done sooner
    prints nothing."""

    def __init__(self, stream: TextIO, *, interval: float = 5.0, delay: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream
        self.interval = interval
        self.delay = delay
        self._clock = clock
        self._phase: str | None = None
        self._began = 0.0
        self._shown = False
        self._last = float("-inf")
        self._finished: set[str] = set()

    def __call__(self, event: SyncProgress) -> None:
        now = self._clock()
        if event.phase != self._phase:
            self._phase, self._began, self._shown = event.phase, now, False
            self._finished.discard(str(event.phase))
        if not self._shown and now - self._began < self.delay:
            return  # quick so far: nothing to say yet
        if event.finished:
            if str(event.phase) in self._finished:
                return
            self._finished.add(str(event.phase))
        elif self._shown and now - self._last < self.interval:
            return
        self._shown = True
        self._last = now
        self.stream.write(f"clawmem: {event.describe()}\n")
        self.stream.flush()

    def __enter__(self) -> "PlainProgress":
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class RichProgress:
    """A ``rich`` progress bar per phase on a terminal: n/N, elapsed and the measured ETA."""

    def __init__(self, stream: TextIO, *, transient: bool = False) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[unit]}"),
            TimeElapsedColumn(),
            TextColumn("eta {task.fields[eta]}"),
            TextColumn("{task.fields[rate]}"),
            console=Console(file=stream),
            transient=transient,
        )
        self._tasks: dict[str, Any] = {}
        self._started = False

    def __call__(self, event: SyncProgress) -> None:
        if not self._started:
            self._progress.start()
            self._started = True
        key = str(event.phase)
        rate = f"{event.rate:.1f} {event.unit}/s" if event.rate is not None and event.phase == "vectors" else ""
        eta = format_duration(0 if event.finished else event.eta)
        if key not in self._tasks:
            self._tasks[key] = self._progress.add_task(event.label, total=max(event.total, 1), unit=event.unit,
                                                       eta=eta, rate=rate)
        self._progress.update(self._tasks[key], total=max(event.total, 1), completed=event.done, eta=eta, rate=rate)

    def __enter__(self) -> "RichProgress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._started:
            self._progress.stop()
            self._started = False


def progress_renderer(stream: TextIO, *, transient: bool = False) -> PlainProgress | RichProgress:
    """A ``rich`` bar when ``stream`` is a terminal (``transient``: erased when done), plain
    lines otherwise (from :data:`PLAIN_DELAY_SECONDS` into a phase)."""
    isatty = getattr(stream, "isatty", None)
    if isatty is not None and isatty():
        try:
            return RichProgress(stream, transient=transient)
        except ImportError:  # rich missing from a stripped-down install: plain lines still work
            pass
    return PlainProgress(stream, delay=PLAIN_DELAY_SECONDS)
