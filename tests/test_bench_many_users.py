"""Smoke test of ``bench.many_users`` at a tiny size: the run completes on both stores and its
results hold every figure the results page reports (no timing is asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import many_users


def test_many_users_bench_reports_its_figures(pg_url: str, tmp_path: Path) -> None:
    out = tmp_path / "many_users.json"
    assert many_users.main([
        "--agents", "5", "--templates", "2", "--scale", "0.02", "--searches", "24", "--max-open", "2",
        "--concurrency", "2", "--dims", "32", "--sqlite-agents", "4", "--store-url", pg_url,
        "--work", str(tmp_path / "work"), "--json", str(out),
    ]) == 0
    res = json.loads(out.read_text())
    pg, sq = res["postgres"], res["sqlite"]
    # the copies are consistent: they answer as their template, and a sync finds nothing to do
    assert pg["verify"]["queries"] > 0 and pg["verify"]["identical"] == pg["verify"]["queries"]
    assert pg["verify"]["sync_of_a_copy"]["chunks_indexed"] == 0
    assert pg["verify"]["sync_of_a_copy"]["files_indexed"] == 0
    assert {"clawmem_agents", "clawmem_chunks", "clawmem_files", "clawmem_meta"} <= set(pg["copy"]["tables"])
    assert sq["verify"]["identical"] == sq["verify"]["queries"] > 0
    assert sq["copy"]["embeddings_computed_by_the_syncs"] == 0
    for store, part in (("postgres", pg), ("sqlite", sq)):
        stream = part["stream"]
        assert stream["searches"] > 0
        for mode in ("registry", "naive"):
            row = stream["modes"][mode]
            assert row["all"]["n"] == stream["searches"], (store, mode)
            assert row["cold"]["n"] == stream["distinct_agents"], (store, mode)
            for key in ("p50", "p95", "open_p50", "search_p50"):
                assert row["all"][key] >= 0 and row["cold"][key] >= 0
            assert row["rss_mb_end"] > 0
        assert stream["modes"]["registry"]["open_at_end"] <= stream["max_open"] + 1  # + the warm-up agent
    for mode in ("registry", "naive"):
        assert pg["stream"]["modes"][mode]["connections_most"] >= 1
    # the registry keeps the keyword statistics of the agents it keeps open, no more
    assert pg["stream"]["modes"]["registry"]["keyword_cache"]["agents"] <= pg["stream"]["max_open"] + 1
    page = many_users.markdown(res)
    for text in ("PostgreSQL", "SQLite", "cold (first search of an agent in the process)", "connections held"):
        assert text in page
