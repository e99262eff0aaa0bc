"""Fixtures of the dreaming tests: a workspace with English and Chinese daily notes, an injectable clock, and
the dream store on SQLite (a file, as the index's) or on the session's PostgreSQL server."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest

from clawmem_core.dreaming import RecallLog, Workspace
from clawmem_core.dreaming.sqlite_store import SqliteDreamStore

DAY = 86400.0
#: 2026-11-02 00:00 UTC, a Monday.
T0 = 1793577600.0

NOTES = {
    "memory/2026-11-02.md": (
        "# Monday\n"
        "\n"
        "- The home gateway listens on loopback only, for network safety.\n"
        "- Router VLAN 20 carries the cameras and the doorbell.\n"
        "\n"
        "Dana prefers oat milk in her coffee and tea.\n"
    ),
    "memory/2026-11-03.md": (
        "# 周二\n"
        "\n"
        "网关只在本机回环地址上监听，保证家庭网络安全。\n"
        "备份每天凌晨三点运行，保存在外置硬盘上。\n"
    ),
    "memory/2026-11-04-trip.md": (
        "Flight to Lisbon on December 12, seat 14C, booked with the family credit card.\n"
        "<!-- importance: 9 -->\n"
    ),
}


@dataclass(frozen=True)
class Hit:
    """What a finished search gives the recall log (a :class:`clawmem_core.SearchResult` has these fields)."""

    path: str
    start_line: int
    end_line: int
    score: float
    snippet: str


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, days: float) -> None:
        self.t += days * DAY


def hit(ws: Workspace, path: str, a: int, b: int, score: float = 0.8) -> Hit:
    """A hit whose snippet is the live text of ``path`` lines ``a``..``b``."""
    lines = (ws.root / path).read_text(encoding="utf-8").split("\n")
    return Hit(path, a, b, score, "\n".join(lines[a - 1 : b]))


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    for rel, text in NOTES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    (root / "MEMORY.md").write_text("# Memory\n\n- Dana's cat is called Miso.\n- 用户喜欢简洁的回答。\n",
                                    encoding="utf-8")
    return Workspace(root)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """The dream store on each backend."""
    if request.param == "sqlite":
        s = SqliteDreamStore(tmp_path / "index.sqlite")
        yield s
        s.close()
        return
    url = request.getfixturevalue("pg_url")
    from psycopg_pool import ConnectionPool

    from clawmem_core.dreaming.pg_store import PostgresDreamStore

    pool = ConnectionPool(url, min_size=1, max_size=4, open=True)
    try:
        yield PostgresDreamStore(pool)
    finally:
        pool.close()


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SqliteDreamStore]:
    s = SqliteDreamStore(tmp_path / "index.sqlite")
    yield s
    s.close()


def recall(log: RecallLog, ws: Workspace, path: str, a: int, b: int, queries: list[str], *, score: float = 0.8,
           agent: str = "main") -> None:
    """One search per query, each returning ``path#La-Lb``."""
    for q in queries:
        log.record(agent, q, [hit(ws, path, a, b, score)])
