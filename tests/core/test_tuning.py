"""The tuned numbers of ranking live in ``clawmem_core/tuning.py``, each documented, and nowhere else.

Every constant there carries a ``#:`` reason and a link to a heading of ``docs/decisions.md`` that
exists; the scoring modules hold no float literal beyond a short allow-list of units and guards
(a new tuned number must be named and justified in ``tuning.py``, or listed here with its reason).
"""

from __future__ import annotations

import ast
import re
import unicodedata
from collections import Counter
from pathlib import Path

import pytest

from clawmem_core import tuning

ROOT = Path(__file__).resolve().parents[2]
TUNING = ROOT / "clawmem_core" / "tuning.py"
DECISIONS = ROOT / "docs" / "decisions.md"

#: The modules whose numbers decide scores (and the config defaults that feed them).
SCORING_MODULES = (
    "clawmem_core/search.py",
    "clawmem_core/calibration.py",
    "clawmem_core/rerank.py",
    "clawmem_core/vectors.py",
    "clawmem_core/snippets.py",
    "clawmem_core/store/bm25.py",
    "clawmem_core/config.py",
)

#: Float literals the scoring modules may hold, with how many times: units and numerical guards, not
#: tuned values (0.0, 1.0 and 0.5 are always allowed: bounds, identities and FTS5's IDF formula).
ALLOWED_FLOATS: dict[tuple[str, float], tuple[int, str]] = {
    ("clawmem_core/calibration.py", 100.0): (5, "percent to fraction"),
    ("clawmem_core/calibration.py", 50.0): (1, "the median"),
    ("clawmem_core/calibration.py", 0.999): (1, "a level below 1, so (cos - level) / (1 - level) stays finite"),
    ("clawmem_core/search.py", 1000.0): (1, "milliseconds to seconds"),
    ("clawmem_core/search.py", 86400.0): (1, "seconds in a day"),
    ("clawmem_core/search.py", 1e-9): (1, "a half-life above 0, so the decay stays finite"),
    ("clawmem_core/rerank.py", 10.0): (1, "the Voyage client's time-out in seconds"),
    ("clawmem_core/store/bm25.py", 1e-6): (2, "FTS5's IDF floor (tuning.FTS5_IDF_FLOOR), left in the store file"),
}
ALWAYS_ALLOWED = (0.0, 1.0, 0.5)

LINK = re.compile(r"docs/decisions\.md#([\w-]+)")


def github_slug(heading: str) -> str:
    """The anchor GitHub (and MkDocs, for these headings) gives a Markdown heading."""
    text = unicodedata.normalize("NFKC", heading.strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def decision_anchors() -> set[str]:
    return {github_slug(line.lstrip("#")) for line in DECISIONS.read_text(encoding="utf-8").splitlines()
            if re.match(r"#{1,6} ", line)}


def documented_constants() -> dict[str, list[str]]:
    """Each top-level UPPER_CASE name of ``tuning.py`` with the ``#:`` comment lines right above it."""
    source = TUNING.read_text(encoding="utf-8")
    lines = source.splitlines()
    out: dict[str, list[str]] = {}
    for node in ast.parse(source).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        for target in targets:
            if isinstance(target, ast.Name) and target.id.isupper():
                doc: list[str] = []
                i = node.lineno - 2
                while i >= 0 and lines[i].startswith("#:"):
                    doc.insert(0, lines[i][2:].strip())
                    i -= 1
                out[target.id] = doc
    return out


def test_the_slug_matches_githubs_anchors() -> None:
    assert github_slug(" A reranker's order is blended at weight 0.25") == "a-rerankers-order-is-blended-at-weight-025"
    assert github_slug(" `MEMORY.md` and notes named for a query word count their BM25 twice") == (
        "memorymd-and-notes-named-for-a-query-word-count-their-bm25-twice")


def test_every_constant_has_a_reason_and_a_link_to_an_existing_decision() -> None:
    constants = documented_constants()
    assert len(constants) >= 20  # the module was read
    anchors = decision_anchors()
    for name, doc in constants.items():
        links = [m.group(1) for line in doc for m in LINK.finditer(line)]
        reason = " ".join(line for line in doc if not LINK.search(line))
        assert len(reason.split()) >= 5, f"{name}: no reason line above it in tuning.py"
        assert links, f"{name}: no link to docs/decisions.md above it in tuning.py"
        for anchor in links:
            assert anchor in anchors, f"{name}: docs/decisions.md has no heading #{anchor}"


def test_every_constant_is_used_by_the_scoring_code() -> None:
    sources = "\n".join((ROOT / m).read_text(encoding="utf-8") for m in SCORING_MODULES)
    for name in documented_constants():
        assert re.search(rf"\b{name}\b", sources), f"tuning.{name} is used by none of the scoring modules"
        assert hasattr(tuning, name)


def float_literals(path: Path) -> Counter[float]:
    """The float literals of a module, ``a / b`` of two int literals counted as one (``4 / 3``)."""
    found: Counter[float] = Counter()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and type(node.value) is float:
            found[node.value] += 1
        elif (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)
              and all(isinstance(x, ast.Constant) and type(x.value) is int for x in (node.left, node.right))):
            found[node.left.value / node.right.value] += 1
    return found


@pytest.mark.parametrize("module", SCORING_MODULES)
def test_the_scoring_code_holds_no_stray_tuned_number(module: str) -> None:
    found = {v: n for v, n in float_literals(ROOT / module).items() if v not in ALWAYS_ALLOWED}
    allowed = {v: n for (m, v), (n, _) in ALLOWED_FLOATS.items() if m == module}
    assert found == allowed, (
        f"{module}: float literals {found}, allowed {allowed}: name a tuned number in clawmem_core/tuning.py "
        "(with its reason and decision), or list a unit or guard in ALLOWED_FLOATS")


def test_the_scan_sees_a_stray_number(tmp_path: Path) -> None:
    stray = tmp_path / "m.py"
    stray.write_text("def f(x):\n    return 0.42 * x + 1.0 + 4 / 3\n", encoding="utf-8")
    assert float_literals(stray) == Counter({0.42: 1, 1.0: 1, 4 / 3: 1})


def test_the_modules_read_their_numbers_from_tuning() -> None:
    from clawmem_core import calibration, config, rerank, search, snippets
    from clawmem_core.store import bm25

    assert search.VECTOR_FULL is tuning.VECTOR_FULL and search.CURATED_PRIOR is tuning.CURATED_PRIOR
    assert calibration.BACKGROUND_PERCENTILE is tuning.BACKGROUND_PERCENTILE
    assert rerank.BLEND_K is tuning.RERANK_BLEND_K and snippets.SNIPPET_MAX_CHARS is tuning.SNIPPET_MAX_CHARS
    assert (bm25.K1, bm25.B) == (tuning.BM25_K1, tuning.BM25_B)
    assert config.FUSION_DEFAULTS["calibrated"] == (0.3, 0.7, 0.2)
    assert config.FUSION_DEFAULTS["openclaw"] == (0.7, 0.3, 0.35)
    q = config.QueryConfig()
    assert (q.max_results, q.hybrid.candidate_multiplier, q.hybrid.mmr.lambda_, q.hybrid.temporal_decay.half_life_days,
            q.rerank.candidates, q.rerank.weight) == (6, 4, 0.7, 30, 40, 0.25)
