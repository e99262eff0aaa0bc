"""Two users with a workspace each, behind a ``MemoryResolver`` (the per-request tests of both adapters)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from clawmem_core.registry import MemoryIndexes, MemoryResolver

NOTES = {
    "alice": "# Notes\n\nAlice plays the cello on Tuesdays.\n\n爱丽丝喜欢喝乌龙茶。\n",
    "bob": "# Notes\n\nBob repairs vintage bicycles on weekends.\n\n鲍勃喜欢吃饺子。\n",
}


def two_users(tmp_path: Path, store: dict[str, Any] | None = None) -> Iterator[MemoryResolver]:
    """Each user's ``MEMORY.md`` under ``tmp_path/users``, indexed (keyword-only, ``max_open=1``: each switch of
    user reopens), then a resolver keyed by ``user_id``; closed when the generator ends."""
    root = tmp_path / "users"
    for user, text in NOTES.items():
        (root / user).mkdir(parents=True)
        (root / user / "MEMORY.md").write_text(text, encoding="utf-8")
    indexes = MemoryIndexes({"provider": "none", "store": store or {}}, workspace_root=root,
                            state_dir=tmp_path / "state", max_open=1)
    with indexes:
        for user in NOTES:
            with indexes.lease(user) as mem:
                mem.sync()
        yield MemoryResolver(indexes, key="user_id")
