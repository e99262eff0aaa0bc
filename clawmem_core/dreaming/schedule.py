"""What the LangChain and LlamaIndex adapters share of dreaming, framework-free: consolidation scheduled off the
request path, and trigger recall (promoted ``MEMORY.md`` entries whose trigger phrases appear in the user's
message)."""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

__all__ = ["ConsolidationScheduler", "ScheduledConsolidation", "TriggeredEntry", "triggered_entries", "format_triggered",
           "join_content", "read_triggered", "MAX_TRIGGERED"]

log = logging.getLogger("clawmem")

#: The most promoted entries one message's trigger phrases inject.
MAX_TRIGGERED = 3

# One consolidation at a time per index and agent in this process (other processes: the store's lock).
_RUNNING: dict[str, threading.Thread] = {}
_RUNNING_LOCK = threading.Lock()


def join_content(content: Any) -> str:
    """A model answer's content as text: a string as is; a list of content blocks (strings, ``{"type": "text",
    "text": ...}`` dicts or objects with ``text``) joined; anything else ``str()``-ed."""
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict):
                if block.get("type", "text") == "text" and isinstance(block.get("text"), str):
                    parts.append(block["text"])
            elif isinstance(getattr(block, "text", None), str):
                parts.append(block.text)
        return "".join(parts)
    return "" if content is None else str(content)


def _index_key(memory: Any) -> str:
    where = getattr(memory, "store_path", None) or getattr(memory, "workspace", None) or id(memory)
    return f"{where}|{getattr(memory, 'agent_id', 'main')}"


class ConsolidationScheduler:
    """Runs ``clawmem_core.dreaming.promote(memory, model=model, apply=True)`` in a background thread every
    ``every_n_turns`` finished turns and/or after ``after_idle_seconds`` without a turn.

    One run at a time per index and agent: a turn that falls due while a run is going schedules nothing. A
    run never raises into the caller: another process consolidating (``ConsolidationBusyError``), a replica
    (``ReplicaError``) or any failure is logged (and kept in :attr:`last_error`). :meth:`close` cancels the idle
    timer and joins the running thread. ``timer_factory(seconds, fn)`` makes the idle timer (default
    ``threading.Timer``; anything with ``start``/``cancel``).
    """

    def __init__(self, memory: Any, *, model: Optional[Callable[[str], str]] = None,
                 every_n_turns: Optional[int] = None, after_idle_seconds: Optional[float] = None,
                 promote_options: Optional[dict[str, Any]] = None,
                 timer_factory: Callable[[float, Callable[[], None]], Any] = threading.Timer) -> None:
        if every_n_turns is not None and (isinstance(every_n_turns, bool) or every_n_turns < 1):
            raise ValueError(f"every_n_turns must be at least 1, got {every_n_turns!r}")
        if after_idle_seconds is not None and not after_idle_seconds > 0:
            raise ValueError(f"after_idle_seconds must be positive, got {after_idle_seconds!r}")
        self.memory = memory
        self.model = model
        self.every_n_turns = every_n_turns
        self.after_idle_seconds = after_idle_seconds
        self.promote_options = dict(promote_options or {})
        self.timer_factory = timer_factory
        #: Turns counted so far; runs started; the last run's report and error.
        self.turns = 0
        self.runs = 0
        self.last_report: Any = None
        self.last_error: Optional[BaseException] = None
        self._lock = threading.Lock()
        self._timer: Any = None
        self._thread: Optional[threading.Thread] = None
        self._closed = False

    def turn_finished(self) -> bool:
        """Count one finished turn (re-arming the idle timer); returns whether a run was started."""
        with self._lock:
            if self._closed:
                return False
            self.turns += 1
            due = self.every_n_turns is not None and self.turns % self.every_n_turns == 0
            self._arm_idle()
        return self.schedule() if due else False

    def activity(self) -> None:
        """Re-arm the idle timer without counting a turn (a turn began)."""
        with self._lock:
            if not self._closed:
                self._arm_idle()

    def _arm_idle(self) -> None:
        if self.after_idle_seconds is None:
            return
        if self._timer is not None:
            self._timer.cancel()
        timer = self.timer_factory(self.after_idle_seconds, self._idle)
        if hasattr(timer, "daemon"):
            timer.daemon = True
        self._timer = timer
        timer.start()

    def _idle(self) -> None:
        with self._lock:
            self._timer = None
            if self._closed:
                return
        self.schedule()

    def schedule(self) -> bool:
        """Start a run now in a background thread, unless one of this index and agent is running (or the
        scheduler is closed); returns whether it started."""
        key = _index_key(self.memory)
        with _RUNNING_LOCK:
            if self._closed:  # (set by close(), which then takes this lock)
                return False
            running = _RUNNING.get(key)
            if running is not None and running.is_alive():
                log.debug("memory consolidation already running for %s: not scheduled again", key)
                return False
            thread = threading.Thread(target=self._run, args=(key,), name="clawmem-consolidation", daemon=True)
            _RUNNING[key] = thread
            self._thread = thread
            self.runs += 1
            thread.start()  # under the lock: close() sees every started run
        return True

    def _run(self, key: str) -> None:
        try:
            from clawmem_core.dreaming import ConsolidationBusyError, promote
            from clawmem_core.errors import ReplicaError

            try:
                report = promote(self.memory, model=self.model, apply=True, **self.promote_options)
            except ConsolidationBusyError as exc:
                log.info("memory consolidation skipped: %s", exc)
                return
            except ReplicaError as exc:
                log.info("memory consolidation skipped on a replica: %s", exc)
                return
            self.last_report, self.last_error = report, None
            log.info("memory consolidation: added %d, merged %d, superseded %d (%s)", len(report.added),
                     len(report.merged), len(report.superseded), report.mode)
            if report.fallback_reason:
                log.info("memory consolidation fell back to append-only: %s", report.fallback_reason)
        except Exception as exc:  # never into the agent: a background run only logs
            self.last_error = exc
            log.warning("memory consolidation failed: %s: %s", type(exc).__name__, exc)
        finally:
            with _RUNNING_LOCK:
                if _RUNNING.get(key) is threading.current_thread():
                    del _RUNNING[key]

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Join the latest run; returns whether no run is left going."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return True

    def close(self, timeout: Optional[float] = None) -> None:
        """Stop scheduling: cancel the idle timer and join the running thread."""
        with self._lock:
            self._closed = True
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        with _RUNNING_LOCK:  # a schedule() that passed its check before the flag was set has started its thread
            pass
        self.wait(timeout)


# ----------------------------------------------------------------------------------------------------------------
# Trigger recall
# ----------------------------------------------------------------------------------------------------------------

_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


@dataclass(frozen=True)
class TriggeredEntry:
    """A promoted entry whose trigger phrase appears in the message: its text (no comments, no ``Source:``),
    its own citation in ``MEMORY.md`` and the phrase that matched."""

    text: str
    citation: str
    phrase: str


def _phrase_in(phrase: str, message: str) -> bool:
    needle = " ".join(phrase.casefold().split())
    if not needle:
        return False
    if _CJK.search(needle):
        return needle in message
    return re.search(rf"(?<!\w){re.escape(needle)}(?!\w)", message) is not None


def triggered_entries(memory_text: str, message: str, *, memory_file: str = "MEMORY.md",
                      limit: int = MAX_TRIGGERED) -> list[TriggeredEntry]:
    """Up to ``limit`` promoted entries of ``memory_text`` (entries with a ``Source:`` line) whose
    ``<!-- trigger: ... -->`` phrases appear in ``message`` (case-insensitive; whole words for Latin-script
    phrases, as a substring for CJK), in file order. No search runs."""
    from clawmem_core.dreaming.entries import entry_body, entry_sources, entry_triggers, parse_entries

    text = " ".join(message.casefold().split())
    if not text or limit < 1:
        return []
    found: list[TriggeredEntry] = []
    for entry in parse_entries(memory_text):
        phrases = entry_triggers(entry.text)
        if not phrases or not entry_sources(entry.text):
            continue
        hit = next((p for p in phrases if _phrase_in(p, text)), None)
        if hit is None:
            continue
        body = entry_body(entry.text)
        if not body:
            continue
        first = memory_text.count("\n", 0, entry.start) + 1
        last = first + entry.text.count("\n")
        found.append(TriggeredEntry(body, f"{memory_file}#L{first}-L{last}", hit))
        if len(found) >= limit:
            break
    return found


def read_triggered(workspace: Any, message: str, *, memory_file: str = "MEMORY.md",
                   limit: int = MAX_TRIGGERED) -> list[TriggeredEntry]:
    """:func:`triggered_entries` of the workspace's ``MEMORY.md`` (none when it is missing or unreadable)."""
    if workspace is None or not message.strip():
        return []
    try:
        memory_text = (Path(workspace) / memory_file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    return triggered_entries(memory_text, message, memory_file=memory_file, limit=limit)


def format_triggered(entries: list[TriggeredEntry], *, cite: bool = True) -> str:
    """The entries as recall snippets, separated by blank lines, each followed by ``Source: <citation>`` when
    citations are on."""
    return "\n\n".join(f"{e.text}\nSource: {e.citation}" if cite else e.text for e in entries)


class ScheduledConsolidation:
    """The controls a framework's consolidation hook offers over its :attr:`scheduler` (mixed into the LangChain
    middleware and the LlamaIndex block), which set ``scheduler``."""

    def consolidate_now(self) -> bool:
        """Start a background consolidation now (unless one is running); returns whether it started."""
        return self._controls().schedule()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Join the running consolidation, if any (tests, shutdown)."""
        return self._controls().wait(timeout)

    def close(self, timeout: Optional[float] = None) -> None:
        """Stop scheduling, cancel the idle timer and join a running consolidation."""
        self._controls().close(timeout)

    def _controls(self) -> ConsolidationScheduler:
        return getattr(self, "scheduler")  # no annotation here: a pydantic model would take it for a field
