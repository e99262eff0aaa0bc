"""Where candidates may come from, and their live text: daily notes (``memory/YYYY-MM-DD*.md``) and session
transcripts (``sessions/*.jsonl``), re-read from disk (never from the index) right before anything is written.

``MEMORY.md``, ``DREAMS.md``, other files and other namespaces (``@ns/...``) are never sources. A transcript's
lines are JSONL lines; their text is the user and assistant messages (tool output is not kept by the
transcript parser), with clawmem's own injected recall removed.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

from ..sessions import parse_transcript
from ..text import fold_width
from .injected import has_injected, strip_injected
from .recall_log import content_hash, normalize_text

__all__ = ["Workspace", "SourceText", "is_candidate_path", "read_source", "clean_text", "match_form",
           "importance_of", "junk_reason", "MAX_SOURCE_BYTES"]

_DAILY = re.compile(r"^memory/\d{4}-\d{2}-\d{2}[^/]*\.md$")
_SESSION = re.compile(r"^sessions/[^/]+\.jsonl$")
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_MARKER = re.compile(r"^\s{0,3}(?:[-*+]\s+(?:\[[ xX]\]\s+)?|\d{1,3}[.)]\s+|#{1,6}\s+|>\s?)")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s")
_ROLE = re.compile(r"^(?:User|Assistant): ")
_IMPORTANCE = re.compile(r"<!--\s*importance:\s*(\d{1,2})\s*-->")
#: A source larger than this is not read (and not promoted).
MAX_SOURCE_BYTES = 2 * 1024 * 1024

_SHELL = re.compile(
    r"(?m)^\s*(?:\$ |>>> |sudo |rm -|curl |wget |chmod |chown |pip3? install|npm (?:i|install|run) |git (?:add|"
    r"commit|push|pull|clone|checkout|reset) |cd /|ls -|cat /|echo \$|export [A-Z_]+=|python3? -|bash -c|sh -c|"
    r"docker |kubectl |systemctl )")
_SCORE_META = re.compile(r"(?i)\b(?:score|relevance|similarity|rank|vector_score|text_score)\s*[:=]\s*-?\d|"
                         r"\[\s*0?\.\d+\s*\]|\(\s*score\b")
_INJECTION = re.compile(
    r"(?i)ignore (?:all |any |the )?(?:previous|prior|above|earlier) (?:instructions|messages|rules)|disregard "
    r"(?:all |the )?(?:previous |prior |above )?instructions|\bsystem prompt\b|\byou are now\b|"
    r"\b(?:delete|remove|erase) (?:all|every|the other) (?:entries|memories|memory)|\"op\"\s*:|"
    r"忽略(?:之前|以上|上面|所有)(?:的)?(?:指令|指示|说明)|系统提示")
_TOOLISH = re.compile(r"```|\btool_call|\bfunction_call|^\s*[{\[]\s*\"", re.M)


@dataclass(frozen=True)
class Workspace:
    """The files dreaming reads and writes: ``root`` (the agent workspace), ``sessions_dir`` (transcripts; default
    ``root/sessions``), the long-term file and the diary."""

    root: Path
    sessions_dir: Optional[Path] = None
    memory_file: str = "MEMORY.md"
    dreams_file: str = "DREAMS.md"

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))
        if self.sessions_dir is not None:
            object.__setattr__(self, "sessions_dir", Path(self.sessions_dir))

    @property
    def memory_path(self) -> Path:
        return self.root / self.memory_file

    @property
    def dreams_path(self) -> Path:
        return self.root / self.dreams_file

    def sessions(self) -> Path:
        return self.sessions_dir if self.sessions_dir is not None else self.root / "sessions"


@dataclass(frozen=True)
class SourceText:
    """The live lines ``start``..``end`` of a source: ``raw`` as on disk (parsed messages for a transcript),
    ``text`` cleaned for an entry (comments, list markers, role labels and injected recall removed)."""

    path: str
    start: int
    end: int
    raw: str
    text: str
    importance: Optional[int] = None
    hash: str = field(default="")


def is_candidate_path(path: str) -> bool:
    """Whether ``path`` (workspace-relative) may be promoted: a daily note or a transcript, nothing else."""
    return bool(_DAILY.match(path) or _SESSION.match(path))


def clean_text(raw: str) -> str:
    """One line of entry text: comments, heading lines, list/quote markers, role labels and injected recall
    removed."""
    lines = []
    for line in strip_injected(_COMMENT.sub(" ", raw)).split("\n"):
        if _HEADING.match(line):
            continue
        line = _ROLE.sub("", _MARKER.sub("", line)).strip()
        if line:
            lines.append(line)
    return normalize_text(" ".join(lines))


def match_form(text: str) -> str:
    """What "the source holds this text" compares: cleaned, width-folded, lower-cased, whitespace collapsed."""
    return normalize_text(fold_width(clean_text(text)).lower())


def importance_of(raw: str) -> Optional[int]:
    """The ``<!-- importance: N -->`` of ``raw`` (clamped to 1..10), ``None`` when it has none."""
    found = _IMPORTANCE.findall(raw)
    return min(10, max(1, int(found[-1]))) if found else None


def junk_reason(text: str) -> Optional[str]:
    """Why ``text`` must not become long-term memory (``None``: it may): clawmem's own injected recall, shell
    commands, score metadata, tool output or an instruction aimed at the model (prompt injection)."""
    if has_injected(text):
        return "holds recall text clawmem injected"
    if _SHELL.search(text):
        return "looks like a shell command"
    if _SCORE_META.search(text):
        return "looks like score metadata"
    if _INJECTION.search(text):
        return "reads as an instruction to the model (possible prompt injection)"
    if _TOOLISH.search(text):
        return "looks like code or tool output"
    return None


def _resolve(root: Path, relative: str) -> Union[Path, str]:
    if relative.startswith("@") or os.path.isabs(relative) or ".." in Path(relative).parts:
        return "path outside the workspace"
    target = root / relative
    try:
        real_root = root.resolve()
        real = target.resolve()
        real.relative_to(real_root)
    except (OSError, ValueError):
        return "path outside the workspace"
    if target.is_symlink():
        return "source is a symbolic link"
    return target


def _read(path: Path) -> Union[str, None]:
    try:
        size = path.stat().st_size
        if size > MAX_SOURCE_BYTES:
            return None
        return path.read_bytes().decode("utf-8", "replace")
    except FileNotFoundError:
        return None


def read_source(ws: Workspace, path: str, start: int, end: int) -> Union[SourceText, str]:
    """The live :class:`SourceText` of ``path#Lstart-Lend``, or why it cannot be used (a string): not a
    candidate path, deleted, too large, lines past the end, or empty."""
    if not is_candidate_path(path):
        return "not a daily note or transcript"
    if start < 1 or end < start:
        return "invalid line range"
    if path.startswith("sessions/"):
        base: Union[Path, str] = ws.sessions() / path[len("sessions/"):]
        if isinstance(base, Path) and base.is_symlink():
            return "source is a symbolic link"
    else:
        base = _resolve(ws.root, path)
    if isinstance(base, str):
        return base
    if not base.exists():
        return "source deleted"
    data = _read(base)
    if data is None:
        return "source too large or unreadable"
    lines = data.split("\n")
    if end > len(lines) or (end == len(lines) and lines[-1] == "" and start == end):
        return "source lines no longer exist (file shortened)"
    chosen = "\n".join(lines[start - 1 : end])
    if path.startswith("sessions/"):
        raw = parse_transcript(chosen).content
    else:
        raw = chosen
    text = clean_text(raw)
    if not text:
        return "source lines are empty"
    return SourceText(path, start, end, raw, text, importance_of(raw), content_hash(raw))
