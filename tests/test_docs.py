"""The documentation holds together: every relative link and anchor in the README and ``docs/`` resolves, the
reference pages are what ``scripts/gen_reference.py`` generates from the code today, and the README keeps what
other issues require of it."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path
from urllib.parse import unquote

import pytest
from markdown_it import MarkdownIt

from clawmem_core.cli import build_parser
from clawmem_core.config import MemoryConfig

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
MD = MarkdownIt("commonmark").enable("table")


def slug(text: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens."""
    text = unicodedata.normalize("NFC", text).strip().lower()
    text = "".join(ch for ch in text if ch in " -_" or unicodedata.category(ch)[0] in "LNM")
    return text.replace(" ", "-")


def _inline_text(token) -> str:  # type: ignore[no-untyped-def]
    return "".join(child.content for child in token.children or [] if child.type in ("text", "code_inline"))


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown page's headings (a repeated heading gets ``-1``, ``-2``... as on GitHub)."""
    tokens = MD.parse(path.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    out = set()
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open":
            base = slug(_inline_text(tokens[i + 1]))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[str]:
    """Every link and image target of a page, outside code."""
    out = []
    for tok in MD.parse(path.read_text(encoding="utf-8")):
        for child in tok.children or []:
            if child.type == "link_open":
                out.append(str(child.attrs["href"]))
            elif child.type == "image":
                out.append(str(child.attrs["src"]))
    return out


def broken_links(path: Path, root: Path = REPO) -> list[str]:
    """The relative links of ``path`` whose file or anchor does not exist, or that leave ``root``."""
    bad = []
    for href in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", href, re.I):  # http:, https:, mailto: ... are not checked offline
            continue
        target, _, anchor = href.partition("#")
        anchor = unquote(anchor)
        dest = (path.parent / unquote(target)).resolve() if target else path
        if not dest.exists():
            bad.append(f"{href} (no such file)")
        elif not dest.is_relative_to(root.resolve()):
            bad.append(f"{href} (outside the repository)")
        elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
            bad.append(f"{href} (no such anchor)")
    return bad


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    assert broken_links(page) == []


def test_the_link_check_finds_broken_links(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# A title: with `code`, punctuation!\n\n## 中文 标题\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n[ok](other.md) [ok](other.md#a-title-with-code-punctuation) [ok](other.md#中文-标题) [ok](#page)\n"
        "[missing file](nowhere.md) [missing anchor](other.md#nothing) [missing here](#nothing)\n"
        "[web](https://example.com/x#y)\n\n```\n[in code](nowhere-either.md)\n```\n`[inline](nope.md)`\n",
        encoding="utf-8")
    assert broken_links(page, root=tmp_path) == ["nowhere.md (no such file)", "other.md#nothing (no such anchor)",
                                  "#nothing (no such anchor)"]


def test_every_docs_page_is_reachable_from_the_map() -> None:
    index = REPO / "docs" / "index.md"
    linked = {(index.parent / href.partition("#")[0]).resolve() for href in links(index)}
    pages = {p.resolve() for p in (REPO / "docs").rglob("*.md")} - {index.resolve()}
    assert sorted(p.relative_to(REPO).as_posix() for p in pages - linked) == []


# -- the generated reference ----------------------------------------------------------------------------


def _generator(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-c", *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_reference_pages_are_up_to_date() -> None:
    done = subprocess.run([sys.executable, "scripts/gen_reference.py", "--check"], cwd=REPO, capture_output=True,
                          text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr + "\nrun: python scripts/gen_reference.py"


def test_the_check_fails_on_a_stale_page(tmp_path: Path) -> None:
    stale = tmp_path / "config.md"
    stale.write_text((REPO / "docs" / "reference" / "config.md").read_text(encoding="utf-8").replace(
        "| `400` |", "| `500` |"), encoding="utf-8")
    done = _generator(
        "import sys; sys.argv = ['gen']; sys.path.insert(0, 'scripts'); import gen_reference as g, pathlib\n"
        f"g.CONFIG_MD = pathlib.Path({str(stale)!r})\n"
        "raise SystemExit(g.main(['--check']))")
    assert done.returncode == 1 and "stale" in done.stderr, done.stderr
    assert "| `500` |" in stale.read_text(encoding="utf-8")  # --check never writes


def _config_keys(cls: type, prefix: str = "") -> list[tuple[str, object]]:
    out = []
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        name = "lambda" if f.name == "lambda_" else f.name
        if dataclasses.is_dataclass(default):
            out += _config_keys(type(default), f"{prefix}{name}.")
        else:
            out.append((f"{prefix}{name}", default))
    return out


def test_the_config_reference_has_every_key_with_its_default_and_a_description() -> None:
    text = (REPO / "docs" / "reference" / "config.md").read_text(encoding="utf-8")
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `([\w.]+)` \|.*$", text, re.M)}
    keys = _config_keys(MemoryConfig)
    assert len(keys) >= 60 and set(rows) == {key for key, _ in keys}
    for key, default in keys:
        cells = [c.strip() for c in rows[key].strip("|").split("|")]
        shown = cells[3].replace(",", "")
        if default is None:
            assert shown == "unset", (key, cells)
        elif isinstance(default, bool):
            assert shown == f"`{str(default).lower()}`", (key, cells)
        elif isinstance(default, str):
            assert shown == f'`"{default}"`', (key, cells)
        elif isinstance(default, (int, float)):
            assert float(shown.strip("`")) == default, (key, cells)
        else:
            assert shown == f"`{default!r}`".replace("'", '"'), (key, cells)
        assert cells[4], f"{key}: no description (add a #: comment above the field in clawmem_core/config.py)"
    assert "`query.hybrid.mmr.lambda` | `query.hybrid.mmr.lambda`" in text
    assert "`query.hybrid.temporal_decay.half_life_days` | `query.hybrid.temporalDecay.halfLifeDays`" in text


def test_the_cli_reference_has_every_command_and_option() -> None:
    import argparse

    text = (REPO / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in sub.choices.items():
        section = text.split(f"## `clawmem {name}`\n", 1)[1].split("\n## ", 1)[0]
        for action in command._actions:
            if action.help == argparse.SUPPRESS or not action.option_strings or action.dest == "help":
                continue
            if action.default == argparse.SUPPRESS:  # the options every command takes: listed once, at the top
                assert f"`{action.option_strings[0]}" in text.split("## `clawmem ", 1)[0], action.option_strings
            else:
                assert f"`{action.option_strings[0]}" in section, (name, action.option_strings)
        assert "examples:" in section


# -- what the README must say ------------------------------------------------------------------------------


def test_the_readme_states_the_mcp_security_model() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    statement = readme.split("Security model:", 1)[1].split("\n\n", 1)[0]
    sentences = [s for s in re.split(r"(?<=\.)\s+(?=[A-Z`])", " ".join(statement.split())) if s]
    assert len(sentences) == 3, sentences
    for claim in ("loopback", "`Host` or `Origin`", "DNS rebinding", "bearer tokens", "--insecure", "--read-only"):
        assert claim in " ".join(sentences), claim


def test_the_readme_stays_a_landing_page() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    for framework in ("## LangChain", "## LlamaIndex", "## MCP server", "## PostgreSQL", "<!-- test-command -->"):
        assert framework in readme


# -- the site --------------------------------------------------------------------------------------------------


def test_the_site_builds_with_no_broken_link_or_anchor(tmp_path: Path) -> None:
    """``mkdocs build --strict`` (the ``docs`` extra): every page in the navigation, every link between pages and
    every anchor resolves (links leaving ``docs/`` are checked above)."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    for page in ("index.html", "concepts/scores/index.html", "reference/config/index.html"):
        assert (tmp_path / "site" / page).is_file(), page
