"""The daily-note prior: the days a query names (``clawmem_core.query_days``) and the daily notes
they bring forward in the calibrated fusion."""

from __future__ import annotations

from datetime import date

import pytest

from clawmem_core import MemoryConfig
from clawmem_core.query_days import MAX_NAMED_DAYS, named_days
from clawmem_core.search import prior_ranks

from .conftest import IndexFactory, WorkspaceFactory
from .conftest import keyword_only as _keyword_only

D = date(2026, 3, 5)


@pytest.mark.parametrize("text", [
    "What did we deploy on 5 March 2026?", "on 5th of March, 2026", "on the 5th March 2026",
    "March 5, 2026", "Mar. 5th 2026", "mar 5 2026", "MARCH 05, 2026",
    "2026-03-05", "2026/3/5", "2026.03.05", "notes of 2026-03-05.",
    "2026年3月5日部署了什么？", "2026 年 3 月 5 号", "２０２６年３月５日", "２０２６－０３－０５",
])
def test_a_whole_date_names_its_day(text: str) -> None:
    assert named_days(text) == {D}


@pytest.mark.parametrize("text", [
    "", "deploy", "in March 2026", "March 2026", "2026", "3月5日", "5 March", "March 5th",  # no year, or no day
    "3/5/2026", "05.03.2026",  # day/month order is ambiguous
    "2026-02-30", "2026-13-01", "February 30, 2026", "0000-01-01",  # no such day
    "12026-03-05", "2026-03-051", "2026-03/05",  # inside longer numbers; mixed separators
    "remarch 5, 2026", "15 Marches 2026",  # not a month name
])
def test_anything_else_names_no_day(text: str) -> None:
    assert named_days(text) == frozenset()


def test_several_days_and_a_flood() -> None:
    assert named_days("between August 11, 2023 and 15 August 2023") == {date(2023, 8, 11), date(2023, 8, 15)}
    many = " ".join(f"2026-01-{d:02d}" for d in range(1, 32))
    assert len(named_days(many)) == MAX_NAMED_DAYS
    assert named_days("9" * 100_000 + " 2026-03-05") == {D}  # a long run of digits is passed over, not parsed


def test_prior_ranks_double_the_daily_notes_of_the_named_days() -> None:
    meta = {"a": ("memory/2026-03-05.md", "memory", 1, 5), "b": ("memory/2026-03-04.md", "memory", 1, 5),
            "c": ("memory/2026/2026-03-05-standup.md", "memory", 1, 5), "d": ("sessions/2026-03-05.md", "sessions", 1, 5),
            "m": ("MEMORY.md", "memory", 1, 5), "n": ("memory/notes.md", "memory", 1, 5)}
    hits = [("a", -1.0), ("b", -1.0), ("c", -1.0), ("d", -1.0), ("m", -1.0), ("n", -1.0)]
    assert prior_ranks(hits, meta, days={D}) == [-2.0, -1.0, -2.0, -1.0, -2.0, -1.0]
    assert prior_ranks(hits, meta, days={date(2026, 3, 6)}) == [-1.0, -1.0, -1.0, -1.0, -2.0, -1.0]
    # a note both named for a query word and for the day counts twice, not four times
    named = {"x": ("memory/2026-03-05-deploy.md", "memory", 1, 5)}
    assert prior_ranks([("x", -1.5)], named, ["deploy"], days={D}) == [-3.0]
    # a namespace's paths carry their prefix
    shared = {"@team:y": ("@team/memory/2026-03-05.md", "memory", 1, 5)}
    assert prior_ranks([("@team:y", -1.0)], shared, days={D}) == [-2.0]


NOTES = {
    "memory/2026-03-04.md": "# 2026-03-04\n\n- Deploy the invoice exporter.\n",
    "memory/2026-03-05.md": "# 2026-03-05\n\n- Standup ran long: hiring, the offsite, the budget for next quarter.\n"
                            "- After lunch we did deploy the billing migration, once the schema review and a long "
                            "discussion of rollbacks were done.\n- Priya takes the on-call rotation from Monday.\n",
    "memory/2026-03-06.md": "# 2026-03-06\n\n- Retro on the offsite planning.\n",
    "memory/2026-04-02.md": "# 2026-04-02\n\n- 部署了发票导出服务。\n",
    "memory/2026-04-03.md": "# 2026-04-03\n\n- 上午开会讨论招聘和预算，下午部署了账单迁移。\n"
                            "- 周一起由李伟值班。\n",
}


@pytest.fixture
def keyword_only() -> MemoryConfig:
    return _keyword_only()


@pytest.mark.parametrize("dated, plain, day", [
    ("What did we deploy on 5 March 2026?", "What did we deploy?", "memory/2026-03-05.md"),
    ("What did we deploy on 2026-03-05?", "What did we deploy?", "memory/2026-03-05.md"),
    ("2026年4月3日部署了什么？", "部署了什么？", "memory/2026-04-03.md"),
])
def test_the_daily_note_of_the_named_day_ranks_first(make_workspace: WorkspaceFactory, open_index: IndexFactory,
                                                     keyword_only: MemoryConfig, dated: str, plain: str,
                                                     day: str) -> None:
    mem = open_index(make_workspace(NOTES), embedder=None, config=keyword_only)
    mem.sync()
    # Without the day, BM25's length normalisation puts the short passing mention first.
    assert mem.search(plain, min_score=0)[0].path != day
    assert mem.search(dated, min_score=0)[0].path == day


def test_openclaws_fusion_has_no_daily_note_prior(make_workspace: WorkspaceFactory, open_index: IndexFactory) -> None:
    oc = MemoryConfig.from_dict({"provider": "none", "query": {"hybrid": {"fusion": "openclaw"}}})
    mem = open_index(make_workspace(NOTES), embedder=None, config=oc)
    mem.sync()
    assert mem.search("What did we deploy on 5 March 2026?", min_score=0)[0].path == "memory/2026-03-04.md"


def test_a_named_day_without_its_note_changes_nothing(make_workspace: WorkspaceFactory, open_index: IndexFactory,
                                                      keyword_only: MemoryConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    import clawmem_core.search as search

    mem = open_index(make_workspace(NOTES), embedder=None, config=keyword_only)
    mem.sync()

    def ranking(query: str) -> list[tuple[str, int, float]]:
        return [(h.path, h.start_line, round(h.score, 9)) for h in mem.search(query, min_score=0)]

    dated, absent = ranking("What did we deploy on 5 March 2026?"), ranking("What did we deploy on 1 May 2026?")
    monkeypatch.setattr(search, "named_days", lambda text: frozenset())
    assert ranking("What did we deploy on 1 May 2026?") == absent  # no note of that day: nothing to bring forward
    assert ranking("What did we deploy on 5 March 2026?") != dated  # the control: the prior is what moved it
