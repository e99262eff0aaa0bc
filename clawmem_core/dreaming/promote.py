"""One consolidation ("deep sleep"): rank the recalled candidates, decide (with a model, or append-only), check
the rewrite, save the preimage, write ``MEMORY.md`` and append a run report to ``DREAMS.md``.

A preview (``apply=False``) computes the same report and proposed text and writes nothing (not even the
recall log's lock file is needed). :func:`rollback_workspace` restores the latest preimage byte for byte.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, Optional

from .candidates import Candidate, Explanation, Gates, collect_candidates, explain
from .decisions import ChatModel, ask_model, build_prompt, parse_decisions
from .entries import is_heading, parse_entries
from ..errors import ClawmemError
from .errors import NothingToRollBackError
from .events import DreamStore, Preimage
from .recall_log import RecallLog, open_store
from .sources import Workspace
from .validate import RewriteLimits, check_entry, check_rewrite
from .writer import Composed, candidate_entry, compose, write_atomic
from .decisions import Decision

__all__ = ["PromotionConfig", "PromotionReport", "promote_workspace", "rollback_workspace", "explain_promotion",
           "candidates_for", "dream_status"]


@dataclass(frozen=True)
class PromotionConfig:
    """``limit``: most candidates promoted per run; ``window_days``: how far back the log is read (``None``: all
    of it); ``diary``: append the run report to ``DREAMS.md``."""

    gates: Gates = Gates()
    limits: RewriteLimits = RewriteLimits()
    limit: int = 10
    half_life_days: float = 14.0
    window_days: Optional[float] = None
    diary: bool = True
    #: The time zone of "days" (recurrence) and of the diary's dates.
    tz: timezone = timezone.utc


@dataclass
class PromotionReport:
    """What a run did (or, in a preview, would do)."""

    agent: str
    applied: bool
    #: ``"none"`` (nothing to promote), ``"model"`` (the model's decisions) or ``"append"`` (append-only).
    mode: str
    added: list[str] = field(default_factory=list)
    merged: list[str] = field(default_factory=list)
    superseded: list[str] = field(default_factory=list)
    #: (citation, reason) of every candidate not promoted.
    skipped: list[tuple[str, str]] = field(default_factory=list)
    #: Why the model's decisions were not used (``None``: they were, or no model was given).
    fallback_reason: Optional[str] = None
    candidates: list[Candidate] = field(default_factory=list)
    #: The proposed ``MEMORY.md`` (``None``: unchanged).
    proposed: Optional[str] = None
    preimage_id: Optional[int] = None

    @property
    def changed(self) -> bool:
        return self.proposed is not None

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if k not in ("candidates", "proposed")}
        out["candidates"] = [{"id": c.id, "citation": c.citation, "score": round(c.score, 4),
                              "promotable": c.promotable, "reasons": c.reasons()} for c in self.candidates]
        out["changed"] = self.changed
        return out


def _store_of(target: Any) -> DreamStore:
    if isinstance(target, RecallLog):
        target.flush()
        return target.store
    return open_store(target)


def _read_memory(ws: Workspace) -> Optional[bytes]:
    try:
        return ws.memory_path.read_bytes()
    except FileNotFoundError:
        return None


def candidates_for(target: Any, ws: Workspace, agent: str = "main", *, config: PromotionConfig = PromotionConfig(),
                   now: Optional[float] = None) -> list[Candidate]:
    """Every candidate of ``agent``, best first, with its verdict (reads the log and the live files)."""
    store = _store_of(target)
    now = time.time() if now is None else now
    since = 0.0 if config.window_days is None else now - config.window_days * 86400.0
    prior = _read_memory(ws)
    memory_text = prior.decode("utf-8", "replace") if prior else ""
    return collect_candidates(store.events(agent, since), ws, gates=config.gates, now=now,
                              half_life_days=config.half_life_days, memory_text=memory_text, tz=config.tz)


def explain_promotion(target: Any, ws: Workspace, query_or_path: str, agent: str = "main", *,
                      config: PromotionConfig = PromotionConfig(), now: Optional[float] = None) -> list[Explanation]:
    """Why the candidates matching ``query_or_path`` would or would not promote."""
    return explain(query_or_path, candidates_for(target, ws, agent, config=config, now=now))


def _append_only(prior: str, chosen: list[Candidate], ws: Workspace,
                 limits: RewriteLimits) -> tuple[Composed, list[tuple[str, str]]]:
    """The ``chosen`` candidates appended: each entry must pass its own checks, then candidates are dropped from
    the end until the whole rewrite passes (the size budget). Returns the composition and what was left out."""
    left_out: list[tuple[str, str]] = []
    keep: list[Candidate] = []
    for c in chosen:
        problems = check_entry(candidate_entry(c), ws, limits)
        if problems:
            left_out.append((c.citation, "append-only: " + problems[0]))
        else:
            keep.append(c)
    by_id = {c.id: c for c in keep}
    while keep:
        composed = compose(prior, [Decision("add", c.id) for c in keep], by_id)
        problems = check_rewrite(prior, composed.text, ws, limits)
        if not problems:
            return composed, left_out
        dropped = keep.pop()
        left_out.append((dropped.citation, "append-only: " + problems[0]))
    return Composed(prior), left_out


def promote_workspace(target: Any, ws: Workspace, agent: str = "main", *, model: ChatModel = None, apply: bool = False,
            config: PromotionConfig = PromotionConfig(), now: Optional[float] = None) -> PromotionReport:
    """Promote ``agent``'s gated candidates into ``MEMORY.md`` (``apply``) or say what would be done (preview).

    ``target`` is a :class:`RecallLog` (flushed first), a :class:`DreamStore` or what :func:`open_store` takes.
    With ``model``, one call decides add / merge / supersede / skip; a failing call, an invalid answer or a
    rewrite failing its checks falls back to append-only and ``fallback_reason`` says why.
    Raises :class:`~.errors.ConsolidationBusyError` when another consolidation of the agent runs.
    """
    store = _store_of(target)
    now = time.time() if now is None else now
    if not apply:
        return _run(store, ws, agent, model, False, config, now)
    with store.consolidation_lock(agent):
        return _run(store, ws, agent, model, True, config, now)


def _run(store: DreamStore, ws: Workspace, agent: str, model: ChatModel, apply: bool, config: PromotionConfig,
         now: float) -> PromotionReport:
    prior_bytes = _read_memory(ws)
    try:
        prior = prior_bytes.decode("utf-8") if prior_bytes is not None else ""
    except UnicodeDecodeError:
        raise ClawmemError(f"{ws.memory_file} is not UTF-8: not rewritten") from None
    since = 0.0 if config.window_days is None else now - config.window_days * 86400.0
    cands = collect_candidates(store.events(agent, since), ws, gates=config.gates, now=now,
                               half_life_days=config.half_life_days, memory_text=prior, tz=config.tz)
    report = PromotionReport(agent, False, "none", candidates=cands)
    chosen = [c for c in cands if c.promotable][: max(0, config.limit)]
    report.skipped = [(c.citation, c.skip_reason or "; ".join(c.gate_failures) or "over the run's limit")
                      for c in cands if c not in chosen]
    if not chosen:
        return report
    composed: Optional[Composed] = None
    if model is not None:
        entries = [e for e in parse_entries(prior) if not is_heading(e)]  # headings are structure, not entries
        try:
            answer = ask_model(model, build_prompt(entries, chosen))
            decisions = parse_decisions(answer, [c.id for c in chosen], [e.id for e in entries])
            attempt = compose(prior, decisions, {c.id: c for c in chosen})
            problems = check_rewrite(prior, attempt.text, ws, config.limits)
            if problems:
                report.fallback_reason = "rewrite rejected: " + "; ".join(problems[:5])
            else:
                composed, report.mode = attempt, "model"
        except Exception as exc:  # any model failure falls back; the reason is reported
            report.fallback_reason = f"{type(exc).__name__}: {str(exc)[:300]}"
    left_out: list[tuple[str, str]] = []
    if composed is None:
        composed, left_out = _append_only(prior, chosen, ws, config.limits)
        report.mode = "append"
    report.added, report.merged, report.superseded = composed.added, composed.merged, composed.superseded
    report.skipped += composed.skipped + left_out
    decided = set(composed.added) | {m.split(" + ")[-1] for m in composed.merged} | \
        {s.split(" <- ")[-1] for s in composed.superseded} | {s[0] for s in composed.skipped + left_out}
    report.skipped += [(c.citation, "the model made no decision") for c in chosen if c.citation not in decided]
    if composed.text != prior:
        report.proposed = composed.text
    if not apply or report.proposed is None:
        return report
    if _read_memory(ws) != prior_bytes:
        raise ClawmemError(f"{ws.memory_file} changed during the run: not rewritten")
    problems = check_rewrite(prior, report.proposed, ws, config.limits)  # sources re-read right before writing
    if problems:
        report.fallback_reason = "rewrite rejected at write time: " + "; ".join(problems[:5])
        report.proposed = None
        return report
    report.preimage_id = store.save_preimage(agent, ws.memory_file, prior_bytes, f"promotion ({report.mode})", now)
    write_atomic(ws.memory_path, report.proposed.encode("utf-8"))
    report.applied = True
    if config.diary:
        _diary(ws, report, now, config.tz)
    return report


def _diary(ws: Workspace, report: PromotionReport, now: float, tz: timezone) -> None:
    """Append the run's counts and short highlights to ``DREAMS.md`` (never a promotion source)."""
    stamp = datetime.fromtimestamp(now, tz).strftime("%Y-%m-%d %H:%M %Z")
    lines = [f"## Deep Sleep {stamp}", "",
             f"- added {len(report.added)}, merged {len(report.merged)}, superseded {len(report.superseded)}, "
             f"skipped {len(report.skipped)} ({'model decisions' if report.mode == 'model' else 'append-only'})"]
    if report.fallback_reason:
        lines.append(f"- fell back to append-only: {report.fallback_reason[:200]}")
    lines += [f"- added from {c}" for c in report.added[:5]]
    lines += [f"- merged {m}" for m in report.merged[:5]]
    lines += [f"- superseded {s}" for s in report.superseded[:5]]
    path = ws.dreams_path
    old = path.read_bytes() if path.exists() else b""
    sep = b"" if not old else (b"\n" if old.endswith(b"\n") else b"\n\n")
    write_atomic(path, old + sep + ("\n".join(lines) + "\n").encode("utf-8"))


def rollback_workspace(target: Any, ws: Workspace, agent: str = "main") -> Preimage:
    """Restore ``MEMORY.md`` to the latest saved preimage, byte for byte (removing it when it did not exist),
    and drop that preimage. Raises :class:`~.errors.NothingToRollBackError` when none is left."""
    store = _store_of(target)
    with store.consolidation_lock(agent):
        pre = store.latest_preimage(agent, ws.memory_file)
        if pre is None:
            raise NothingToRollBackError(f"no saved {ws.memory_file} of agent {agent!r} to restore")
        write_atomic(ws.memory_path, pre.content)
        store.drop_preimage(pre.id)
        return pre


def dream_status(target: Any, ws: Workspace, agent: str = "main", *, config: PromotionConfig = PromotionConfig(),
                 now: Optional[float] = None) -> dict[str, Any]:
    """Counts for ``status --deep``: recall events logged, candidates, how many pass the gates, preimages saved
    (one per applied promotion not rolled back)."""
    store = _store_of(target)
    cands = candidates_for(store, ws, agent, config=config, now=now)
    return {"recall_events": store.count_events(agent), "candidates": len(cands),
            "promotable": sum(c.promotable for c in cands), "preimages": store.count_preimages(agent)}
