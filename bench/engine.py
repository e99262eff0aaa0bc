"""Everything the harness assumes about clawmem's public API (SPEC 13) lives here."""

from __future__ import annotations

import glob
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from .baseline import Chunk
from .embedders import EmbedderChoice
from .metrics import Span

MODES = ("keyword", "vector", "hybrid")


def core_available() -> tuple[bool, str]:
    try:
        from clawmem_core import MemoryConfig, MemoryIndex  # noqa: F401
    except Exception as exc:  # pragma: no cover - depends on the tree state
        return False, f"{type(exc).__name__}: {exc}"
    return True, ""


def make_config(choice: EmbedderChoice, mode: str = "hybrid", mmr: bool = False, **over: Any) -> Any:
    """A ``MemoryConfig`` for a search mode. Background syncing (watcher, interval) is off: the harness
    syncs explicitly so that it times what it means to."""
    from clawmem_core import MemoryConfig

    cfg = MemoryConfig()
    if choice.embedder is None:
        cfg.provider = choice.provider or "none"
        if choice.local_model_path:
            cfg.local.model_path = choice.local_model_path
    cfg.sync.watch = False
    cfg.sync.interval_minutes = 0
    cfg.sync.on_session_start = False
    h = cfg.query.hybrid
    if mode == "vector":  # vector side only: no keyword candidates (SPEC 11 query.hybrid.enabled)
        h.enabled = False
    h.mmr.enabled = bool(mmr)
    set_options(cfg, over)
    return cfg


def set_options(cfg: Any, options: dict[str, Any]) -> None:
    """Set dotted config keys (``"query.hybrid.fusion"``) on a ``MemoryConfig``."""
    for key, val in options.items():
        obj = cfg
        parts = key.split(".")
        for part in parts[:-1]:
            obj = getattr(obj, part)
        setattr(obj, parts[-1], val)


@contextmanager
def open_index(workspace: Path, state_dir: Path, choice: EmbedderChoice, mode: str = "hybrid",
               mmr: bool = False, **over: Any) -> Iterator[Any]:
    from clawmem_core import MemoryIndex

    cfg = make_config(choice, mode, mmr, **over)
    with MemoryIndex(str(workspace), agent_id="main", config=cfg, embedder=choice.embedder,
                     state_dir=str(state_dir)) as mem:
        yield mem


def search_spans(mem: Any, query: str, k: int) -> list[Span]:
    hits = mem.search(query, max_results=k, min_score=0.0, record=False)
    return [Span(h.path, int(h.start_line), int(h.end_line)) for h in hits]


def index_files(state_dir: Path) -> list[Path]:
    """The SQLite index file(s) under a state dir (main file first), WAL/SHM side files excluded."""
    found = sorted(Path(p) for p in glob.glob(str(state_dir / "**" / "*.sqlite"), recursive=True))
    found += sorted(Path(p) for p in glob.glob(str(state_dir / "**" / "*.db"), recursive=True))
    return found


def index_size_bytes(state_dir: Path) -> int:
    total = 0
    for p in index_files(state_dir):
        for suffix in ("", "-wal", "-shm"):
            q = Path(str(p) + suffix)
            if q.exists():
                total += q.stat().st_size
    return total


def store_path(mem: Any, state_dir: Path) -> Path | None:
    try:
        st = mem.status()
    except Exception:
        st = None
    for key in ("store_path", "db_path", "path", "index_path"):
        val = getattr(st, key, None) if st is not None and not isinstance(st, dict) else (st or {}).get(key)
        if isinstance(val, (str, os.PathLike)) and Path(val).suffix in (".sqlite", ".db") and Path(val).exists():
            return Path(val)
    files = index_files(state_dir)
    return files[0] if files else None


def read_chunks(db_path: Path) -> list[Chunk]:
    """The chunks clawmem indexed, straight from its SQLite file (for the rank-bm25 baseline)."""
    import apsw

    conn = apsw.Connection(str(db_path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        rows = conn.execute("SELECT path, start_line, end_line, text FROM chunks ORDER BY path, start_line").fetchall()
    finally:
        conn.close()
    return [Chunk(r[0], int(r[1]), int(r[2]), r[3]) for r in rows]


def status_dict(mem: Any) -> dict[str, Any]:
    st = mem.status()
    if isinstance(st, dict):
        return st
    if hasattr(st, "__dataclass_fields__"):
        import dataclasses

        return dataclasses.asdict(st)
    return {k: getattr(st, k) for k in dir(st) if not k.startswith("_") and not callable(getattr(st, k))}
