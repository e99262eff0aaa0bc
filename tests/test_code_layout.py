"""The layout rules of the code, read from the source: no import circle (imports inside functions count:
a lazy import hides a circle, it does not remove it), the benchmark harness never imports a study, and
every study is named in the bench README with the decision it supported."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _modules(package: str) -> dict[str, Path]:
    out = {}
    for path in (ROOT / package).rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that module ``name`` imports anywhere in its body."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                keep = len(base) - node.level + (1 if path.name == "__init__.py" else 0)
                prefix = ".".join(base[:keep] + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            targets = [prefix] + [f"{prefix}.{a.name}" for a in node.names]
        for target in targets:
            # a module's own package (its __init__) is not an edge of a circle through the module
            if target in known and target != name and not name.startswith(target + "."):
                found.add(target)
    return found


def _circles(packages: list[str]) -> list[list[str]]:
    known: dict[str, Path] = {}
    for package in packages:
        known.update(_modules(package))
    graph = {name: _imports(name, path, known) for name, path in known.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return circles


def test_no_import_circle_in_the_benchmarks_or_the_library() -> None:
    assert _circles(["bench"]) == []
    assert _circles(["clawmem_core"]) == []


def test_the_benchmark_harness_never_imports_a_study() -> None:
    known = _modules("bench")
    harness = {n: p for n, p in known.items() if not n.startswith("bench.studies")}
    offenders = {n: sorted(d for d in _imports(n, p, known) if d.startswith("bench.studies"))
                 for n, p in harness.items()}
    assert {n: d for n, d in offenders.items() if d} == {}


def test_every_study_is_named_in_the_bench_readme_with_its_decision() -> None:
    readme = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    table = readme.split("## Studies", 1)[1]
    rows = dict(re.findall(r"^\| `([a-z_]+\.py)` \| (.+?) \|$", table, re.M))
    studies = sorted(p.name for p in (ROOT / "bench" / "studies").glob("*.py") if p.name != "__init__.py")
    assert sorted(rows) == studies
    assert all(len(decision) > 20 for decision in rows.values())
