"""Loaders for the evaluation data (formats in the data README). The data is non-commercial: it is read in
place and never copied into the repository."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


#: The environment variable naming the evaluation data directory (it holds ``locomo/``,
#: ``locomo-zh/`` and ``scifact/``).
DATA_ENV = "CLAWMEM_BENCH_DATA"
#: Where each data set lives in that directory, and the file its loader reads first.
DATASET_FILES = {"locomo-en": "locomo/queries.jsonl", "locomo-zh": "locomo-zh/queries.jsonl",
                 "scifact": "scifact/queries-train.jsonl"}


class MissingDataError(SystemExit):
    """The evaluation data is not where the benchmark looked: it stops with a message naming
    every place it looked (a benchmark never writes an empty quality table instead)."""


def _main_checkout(repo_root: Path) -> Path | None:
    """The main checkout of a git worktree at ``repo_root`` (``None`` for a main checkout or no git)."""
    marker = repo_root / ".git"
    try:
        if not marker.is_file():
            return None
        line = marker.read_text(encoding="utf-8").strip()
        if not line.startswith("gitdir:"):
            return None
        gitdir = (repo_root / line[len("gitdir:"):].strip()).resolve()
        common = gitdir
        if (gitdir / "commondir").is_file():
            common = (gitdir / (gitdir / "commondir").read_text(encoding="utf-8").strip()).resolve()
    except OSError:
        return None
    return common.parent if common.name == ".git" else None


def candidate_data_dirs(repo_root: Path = REPO_ROOT) -> list[Path]:
    """Where the evaluation data is looked for, in order: ``$CLAWMEM_BENCH_DATA`` alone when it is
    set; otherwise ``../shared/data`` next to this checkout, then next to the main checkout when
    this one is a git worktree."""
    env = os.environ.get(DATA_ENV)
    if env:
        return [Path(env).expanduser().resolve()]
    out = [(repo_root.parent / "shared" / "data").resolve()]
    main = _main_checkout(repo_root)
    if main is not None:
        there = (main.parent / "shared" / "data").resolve()
        if there not in out:
            out.append(there)
    return out


def default_data_dir(repo_root: Path = REPO_ROOT) -> Path:
    """The first of :func:`candidate_data_dirs` that exists (the first one when none does: the
    loaders then stop with :class:`MissingDataError`)."""
    dirs = candidate_data_dirs(repo_root)
    return next((d for d in dirs if d.is_dir()), dirs[0])


def _missing(data_dir: Path, wanted: list[str]) -> MissingDataError:
    looked = [f"{data_dir / DATASET_FILES.get(n, n)} ({n})" for n in wanted]
    env = os.environ.get(DATA_ENV)
    if env:
        origin = f"the directory comes from {DATA_ENV}={env}"
    elif data_dir in candidate_data_dirs():
        others = [str(d) for d in candidate_data_dirs() if d != data_dir]
        origin = (f"{DATA_ENV} is not set; looked next to this checkout ({REPO_ROOT.parent / 'shared' / 'data'})"
                  + (f" and next to the main checkout ({', '.join(others)})" if others else ""))
    else:
        origin = "the directory was given with --data"
    return MissingDataError(
        "evaluation data not found: no " + "; no ".join(looked) + f" ({origin}). Set {DATA_ENV} (or --data) to the "
        "directory holding locomo/, locomo-zh/ and scifact/, or leave the data sets out (--datasets, --skip-quality)."
    )


def _require(path: Path, data_dir: Path, name: str) -> None:
    if not path.is_file():
        raise _missing(data_dir, [name])


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
    _require(root / "queries.jsonl", root.parent, name)
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
    _require(root / "queries-train.jsonl", root.parent, "scifact")
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
    """The named data sets from ``data_dir``; raises :class:`MissingDataError` naming every one
    that is not there (never a shorter list)."""
    unknown = [n for n in names if n not in DATASET_FILES]
    if unknown:
        raise ValueError(f"unknown data set {unknown[0]!r} (locomo-en, locomo-zh, scifact)")
    missing = [n for n in names if not (data_dir / DATASET_FILES[n]).is_file()]
    if missing:
        raise _missing(data_dir, missing)
    out = []
    for name in names:
        if name == "locomo-en":
            out.append(load_locomo(data_dir / "locomo", "locomo-en", "en", limit))
        elif name == "locomo-zh":
            out.append(load_locomo(data_dir / "locomo-zh", "locomo-zh", "zh", limit))
        else:
            out.append(load_scifact(data_dir / "scifact", limit))
    return out


#: Off-topic probes: questions no LoCoMo conversation answers (on top of SciFact claims), for the abstention
#: runs (``bench.abstention``, ``bench.studies.fusion``).
OFF_TOPIC = [
    "How do I configure TLS certificates for a Kubernetes ingress controller?",
    "What is the asymptotic complexity of Dijkstra's algorithm with a Fibonacci heap?",
    "Which enzyme catalyses the rate-limiting step of cholesterol synthesis?",
    "What were the main causes of the Thirty Years' War?",
    "How is the Black-Scholes formula derived?",
    "What is the boiling point of liquid nitrogen in kelvin?",
    "如何在Kubernetes中配置TLS证书?",
    "量子色动力学中的渐近自由是什么意思?",
    "胆固醇合成的限速酶是哪一种?",
    "三十年战争的主要原因是什么?",
    "布莱克-斯科尔斯公式是如何推导出来的?",
    "液氮在标准大气压下的沸点是多少开尔文?",
]
