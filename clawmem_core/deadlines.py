"""Calls with a deadline: a query embedding or a rerank that may hang (an API that does not
answer, a model still loading) runs on a kept daemon thread, and the search goes on without it
when its time is up (:func:`run_with_deadline`); :data:`LATE_CALLS` keeps such an owner from being
called again while its late call still runs."""

from __future__ import annotations

import threading
from typing import Any, Callable


def run_with_deadline(fn: Callable[[], Any], seconds: float, done: "threading.Event | None" = None) -> tuple[bool, Any]:
    """Run ``fn`` in a daemon thread (a kept one, see :class:`_Worker`) and wait at most ``seconds``: ``(True, result)``, or
    ``(False, None)`` on time-out (the call is left to finish on its own; a daemon thread never
    holds up interpreter exit; ``done``, when given, is set when it has). An exception from ``fn``
    is raised here."""
    return start_with_deadline(fn, done).wait(seconds)


class Pending:
    """A call started by :func:`start_with_deadline`: :meth:`wait` for its result."""

    def __init__(self, on_late: "Callable[[], None] | None" = None) -> None:
        self.box: list[Any] = []
        self.ready = threading.Event()
        self.on_late = on_late

    def wait(self, seconds: float) -> tuple[bool, Any]:
        """``(True, result)`` once the call has returned, or ``(False, None)`` when it has not within
        ``seconds`` (it is left to finish on its own). An exception from the call is raised here."""
        if not self.ready.wait(max(0.0, seconds)):
            if self.on_late is not None:
                self.on_late()
            return False, None
        ok, value = self.box[0]
        if not ok:
            raise value
        return True, value


def start_with_deadline(fn: Callable[[], Any], done: "threading.Event | None" = None,
                        then: "Callable[[Any], None] | None" = None,
                        on_late: "Callable[[], None] | None" = None) -> Pending:
    """Start ``fn`` on a kept daemon thread (see :func:`run_with_deadline`) and return at once, so
    that the caller works meanwhile. ``then(result)``, when given, runs on that thread after the
    result is handed over (its errors are dropped: it may only prepare what the caller may ask for
    next); ``done``, when given, is set when both have finished; ``on_late`` is called when a
    :meth:`~Pending.wait` runs out of time."""
    pending = Pending(on_late)
    done = done if done is not None else threading.Event()
    if then is None:  # the worker is idle again when the caller hears (see _Worker._loop)
        pending.ready = done

    def run() -> None:
        try:
            value = fn()
        except BaseException as exc:  # handed to the caller
            pending.box.append((False, exc))
            if then is not None:
                pending.ready.set()
            return
        pending.box.append((True, value))
        if then is not None:
            pending.ready.set()
            try:
                then(value)
            except Exception:  # only a preparation: the caller does the work itself
                pass

    _Worker.take().jobs.put((run, done))
    return pending


class _Worker:
    """A daemon thread that runs the calls of :func:`run_with_deadline` one at a time and, idle,
    waits for the next: starting a thread per query costs more than a fast embedder's own work on
    a busy machine. A call that runs out of time keeps its worker (the next call takes another).
    Each call runs in a fresh :mod:`contextvars` context, as in a new thread."""

    _idle: "list[_Worker]" = []
    _lock = threading.Lock()
    _pid = 0
    #: Idle workers kept at most (more finish once their call returns).
    KEEP = 4

    def __init__(self) -> None:
        import queue

        self.jobs: "queue.SimpleQueue[tuple[Callable[[], None], threading.Event]]" = queue.SimpleQueue()
        threading.Thread(target=self._loop, name="clawmem-deadline", daemon=True).start()

    @classmethod
    def take(cls) -> "_Worker":
        """An idle worker, or a new one (none survives a fork: the child starts its own)."""
        import os

        with cls._lock:
            if cls._pid != os.getpid():
                cls._idle, cls._pid = [], os.getpid()
            if cls._idle:
                return cls._idle.pop()
        return cls()

    def _loop(self) -> None:
        import contextvars
        import os

        pid = os.getpid()
        while True:
            job, done = self.jobs.get()
            try:
                contextvars.Context().run(job)
            finally:
                # idle again before the caller hears of it: its next call finds this worker
                with self._lock:
                    keep = self._pid == pid and len(self._idle) < self.KEEP
                    if keep:
                        self._idle.append(self)
                done.set()
            if not keep:
                return


class LateCalls:
    """Calls that ran out of time (:func:`run_with_deadline`) and still run, by owner (a query
    embedder, a reranker): while one runs, its owner is not called again, since another call would
    only queue behind it (a hung API, a model still loading, a slow local model on the CPU the
    searches need)."""

    def __init__(self) -> None:
        self._late: dict[int, tuple[Any, threading.Event]] = {}

    def busy(self, owner: Any) -> bool:
        """Whether a call of ``owner`` that ran out of time is still running."""
        late = self._late.get(id(owner))
        if late is None or late[0] is not owner:
            return False
        if late[1].is_set():
            self._late.pop(id(owner), None)
            return False
        return True

    def run(self, owner: Any, fn: Callable[[], Any], seconds: float) -> tuple[bool, Any]:
        """:func:`run_with_deadline`, remembering the call when it runs out of time."""
        return self.start(owner, fn).wait(seconds)

    def start(self, owner: Any, fn: Callable[[], Any], then: "Callable[[Any], None] | None" = None) -> Pending:
        """:func:`start_with_deadline`, remembering the call when a :meth:`~Pending.wait` for it runs
        out of time."""
        done = threading.Event()

        def late() -> None:
            self._late[id(owner)] = (owner, done)

        return start_with_deadline(fn, done, then, late)


#: The process's calls that ran out of time.
LATE_CALLS = LateCalls()
