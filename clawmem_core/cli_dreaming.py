"""``clawmem promote`` and the recall counts of ``clawmem status --deep``: dreaming from the command line, with
OpenClaw's verbs.

    clawmem promote                       # preview: what would be promoted into MEMORY.md (nothing written)
    clawmem promote --apply [--limit N]   # write it (append-only: the command line has no chat model)
    clawmem promote --explain "<query or path>"
    clawmem promote --rollback            # MEMORY.md as it was before the latest promotion, byte for byte
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from typing import Any

#: Examples shown by ``clawmem promote --help``.
PROMOTE_EXAMPLES = """examples:
  clawmem --workspace ~/agent promote                 # preview (nothing is written)
  clawmem promote --apply                             # append the gated candidates to MEMORY.md
  clawmem promote --apply --limit 3 --min-recall-count 5
  clawmem promote --explain "gateway loopback"        # why it would or would not promote
  clawmem promote --explain memory/2026-11-02.md#L3-L4
  clawmem promote --rollback                          # undo the latest promotion, byte for byte
  clawmem promote --json
Candidates are lines of daily notes (and indexed transcripts) that searches gave the model, from the
agent's recall log (recorded by memory_search, MCP and the adapters; dreaming.record). A candidate
promotes when its mean recall score, recall count and distinct queries pass the gates (dreaming.min_score,
dreaming.min_recall_count, dreaming.min_unique_queries; overridable per run). Each promoted entry cites its
source lines; the previous MEMORY.md is saved first and a short report is appended to DREAMS.md."""

#: Exit codes (as :mod:`clawmem_core.cli`'s).
EXIT_OK, EXIT_ERROR = 0, 1


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _score(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, got {text!r}")
    return value


def add_promote_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``clawmem promote``."""
    what = p.add_mutually_exclusive_group()
    what.add_argument("--apply", action="store_true", help="write the promotion (default: a preview, nothing written)")
    what.add_argument("--explain", metavar="TEXT", help="why the candidates matching a query or a path "
                      "(memory/2026-11-02.md#L3-L4) would or would not promote")
    what.add_argument("--rollback", action="store_true",
                      help="restore MEMORY.md as it was before the latest promotion, byte for byte")
    p.add_argument("--limit", type=_count, metavar="N", help="promote at most N entries (default: dreaming.limit)")
    p.add_argument("--min-score", type=_score, metavar="X", help="gate: mean recall score at least X (0 to 1)")
    p.add_argument("--min-recall-count", type=_count, metavar="N", help="gate: recalled at least N times")
    p.add_argument("--min-unique-queries", type=_count, metavar="N", help="gate: by at least N distinct queries")
    p.add_argument("--json", action="store_true", help="print JSON")


def cmd_promote(mem: Any, args: argparse.Namespace) -> int:
    """Run ``clawmem promote``."""
    from . import dreaming

    if args.rollback:
        pre = dreaming.rollback(mem)
        when = datetime.fromtimestamp(pre.ts, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        if args.json:
            print(json.dumps({"restored": pre.path, "preimage": pre.id, "savedAt": when, "reason": pre.reason,
                              "existed": pre.content is not None}, ensure_ascii=False, indent=2))
        elif pre.content is None:
            print(f"Removed {pre.path}: it did not exist before the promotion of {when}")
        else:
            print(f"Restored {pre.path} as it was before the promotion of {when}")
        return EXIT_OK
    if args.explain is not None:
        if not args.explain.strip():
            print("clawmem: error: --explain needs a query or a path", file=sys.stderr)
            return EXIT_ERROR
        found = dreaming.explain(mem, args.explain)
        if args.json:
            print(json.dumps([{"target": e.target, "citation": e.candidate.citation if e.candidate else None,
                               "wouldPromote": e.would_promote, "reasons": list(e.reasons)} for e in found],
                             ensure_ascii=False, indent=2))
            return EXIT_OK
        for e in found:
            head = e.candidate.citation if e.candidate else e.target
            print(f"{head}: {'would promote' if e.would_promote else 'would not promote'}")
            print("\n".join(f"  {r}" for r in e.reasons))
        return EXIT_OK
    report = dreaming.promote(mem, apply=args.apply, limit=args.limit, min_score=args.min_score,
                              min_recall_count=args.min_recall_count, min_unique_queries=args.min_unique_queries)
    if args.json:
        out = report.to_dict()
        out["proposed"] = None if report.applied else report.proposed
        print(json.dumps(out, ensure_ascii=False, indent=2))
        return EXIT_OK
    memory = "MEMORY.md"
    if report.applied:
        print(f"Promoted into {memory} (agent {report.agent}): added {len(report.added)}, merged "
              f"{len(report.merged)}, superseded {len(report.superseded)}; undo with `clawmem promote --rollback`")
    elif report.proposed is not None:
        print(f"Promotion preview (agent {report.agent}): would add {len(report.added)} to {memory} "
              "(nothing written; --apply writes it)")
    else:
        print(f"Nothing to promote (agent {report.agent}): {len(report.candidates)} candidates, "
              f"{sum(c.promotable for c in report.candidates)} passing the gates")
    by_citation = {c.citation: c for c in report.candidates}
    for citation in report.added:
        c = by_citation.get(citation)
        print(f"  + {citation}" + (f"  score {c.score:.3f}" if c else ""))
    if report.fallback_reason:
        print(f"Fell back to append-only: {report.fallback_reason}")
    if report.proposed is not None and not report.applied:
        prior = mem.workspace / memory
        old = prior.read_text(encoding="utf-8") if prior.exists() else ""
        if report.proposed.startswith(old):
            print("Would append:")
            print("\n".join(f"  | {line}" for line in report.proposed[len(old):].strip("\n").split("\n")))
    if report.skipped:
        print(f"Not promoted ({len(report.skipped)}):")
        print("\n".join(f"  - {c}: {why}" for c, why in report.skipped[:20]))
        if len(report.skipped) > 20:
            print(f"  ... and {len(report.skipped) - 20} more (--json lists them all)")
    return EXIT_OK


def deep_status(mem: Any) -> tuple[dict[str, Any] | None, list[str]]:
    """The dreaming counts of ``status --deep``: the JSON object and the text lines (an error is a line, never a
    failure of the status)."""
    from . import dreaming

    try:
        st = dreaming.status(mem)
    except Exception as exc:
        return {"error": str(exc)}, [f"Recall log: unavailable ({exc})"]
    lines = [f"Recall log: {st['recall_events']} events (recording {'on' if st['recording'] else 'off'})"]
    if st["candidates"] is None:
        lines.append(f"Promotion: not here (a replica records recalls; the workspace's process promotes); "
                     f"{st['preimages']} promotions kept for rollback")
    else:
        lines.append(f"Promotion: {st['candidates']} candidates, {st['promotable']} passing the gates, "
                     f"{st['preimages']} promotions kept for rollback")
    return st, lines
