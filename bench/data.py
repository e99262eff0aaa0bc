"""Loaders for the evaluation data (formats in the data README). The data is non-commercial: it is read in
place and never copied into the repository."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


def default_data_dir() -> Path:
    env = os.environ.get("CLAWMEM_BENCH_DATA")
    if env:
        return Path(env).expanduser()
    return (REPO_ROOT / ".." / "shared" / "data").resolve()


@dataclass
class Query:
    qid: str
    text: str
    workspace: Path
    category: str = "all"
    #: LoCoMo: gold (path, line) pairs.
    gold_lines: list[tuple[str, int]] = field(default_factory=list)
    #: SciFact: relevant document paths.
    relevant_paths: set[str] = field(default_factory=set)


@dataclass
class Dataset:
    name: str
    kind: str  # "locomo" (line coverage) or "beir" (document ranking)
    language: str
    queries: list[Query]
    workspaces: list[Path]
    skipped: dict[str, int] = field(default_factory=dict)


def _read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def load_locomo(root: Path, name: str, language: str, limit: int | None = None) -> Dataset:
    """LoCoMo: category 5 (adversarial, no answer in the conversation) and questions without gold are skipped."""
    rows = _read_jsonl(root / "queries.jsonl")
    queries: list[Query] = []
    skipped = {"adversarial": 0, "no_gold": 0}
    for row in rows:
        if int(row["category"]) == 5:
            skipped["adversarial"] += 1
            continue
        gold = [(g["path"], int(g["line"])) for g in row.get("gold") or []]
        if not gold:
            skipped["no_gold"] += 1
            continue
        queries.append(
            Query(
                qid=row["qid"],
                text=row["question"],
                workspace=root / row["workspace"],
                category=LOCOMO_CATEGORIES.get(int(row["category"]), str(row["category"])),
                gold_lines=gold,
            )
        )
    if limit:
        queries = queries[:limit]
    workspaces = sorted({q.workspace for q in queries})
    return Dataset(name=name, kind="locomo", language=language, queries=queries, workspaces=workspaces, skipped=skipped)


def load_scifact(root: Path, limit: int | None = None) -> Dataset:
    rows = _read_jsonl(root / "queries-train.jsonl")
    ws = root / "workspace"
    queries = [
        Query(qid=str(r["qid"]), text=r["query"], workspace=ws, relevant_paths=set(r["relevant_paths"]))
        for r in rows
        if r.get("relevant_paths")
    ]
    if limit:
        queries = queries[:limit]
    return Dataset(name="scifact", kind="beir", language="en", queries=queries, workspaces=[ws])


def load_all(data_dir: Path, names: list[str], limit: int | None = None) -> list[Dataset]:
    out = []
    for name in names:
        if name == "locomo-en":
            root = data_dir / "locomo"
            if root.is_dir():
                out.append(load_locomo(root, "locomo-en", "en", limit))
        elif name == "locomo-zh":
            root = data_dir / "locomo-zh"
            if root.is_dir():
                out.append(load_locomo(root, "locomo-zh", "zh", limit))
        elif name == "scifact":
            root = data_dir / "scifact"
            if root.is_dir():
                out.append(load_scifact(root, limit))
        else:
            raise ValueError(f"unknown data set {name!r} (locomo-en, locomo-zh, scifact)")
    return out
