"""Smoke test of the benchmark harness (bench/): it runs end to end on tiny generated data in seconds.
Benchmarks are not tests: nothing here asserts a timing."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("rank_bm25")

from bench import metrics, quality, report, synth  # noqa: E402
from bench.baseline import BM25Baseline, Chunk, tokenize  # noqa: E402
from bench.data import load_all  # noqa: E402
from bench.embedders import resolve  # noqa: E402


def test_metrics() -> None:
    S = metrics.Span
    res = [S("a.md", 1, 3), S("b.md", 5, 9), S("a.md", 10, 12)]
    gold = [("a.md", 11), ("b.md", 2)]
    assert metrics.hit_at(res, gold, 1) == 0.0
    assert metrics.hit_at(res, gold, 3) == 1.0
    assert metrics.recall_at(res, gold, 3) == 0.5
    docs = metrics.rank_documents(res)
    assert docs == ["a.md", "b.md"]
    assert metrics.ndcg_at(docs, {"a.md"}) == 1.0
    assert metrics.ndcg_at(["x", "a.md"], {"a.md"}) == pytest.approx(1 / 1.584962500721156)
    assert metrics.doc_recall_at(docs, {"b.md", "z.md"}, 100) == 0.5
    assert metrics.percentile([1, 2, 3, 4], 50) == 2.5


def test_tokenize_and_baseline_match_rank_bm25() -> None:
    assert tokenize("Hello, World_2 今天玩成语接龙") == ["hello", "world_2", "今天", "天玩", "玩成", "成语", "语接", "接龙"]
    chunks = [Chunk("m.md", i, i, t) for i, t in enumerate(
        ["alpha beta", "beta gamma gamma", "今天玩成语接龙游戏", "delta", "alpha alpha epsilon", "成语词典"], 1)]
    bm = BM25Baseline(chunks)
    for q in ("alpha beta beta", "成语", "gamma delta", "nothing"):
        assert bm.check(q) < 1e-9
    assert bm.search("成语", 5)[0].start_line in (3, 6)
    assert bm.search("nothing", 5) == []


def _tiny_data(root: Path, distractor: bool = False) -> Path:
    """Two LoCoMo-style conversations' worth of notes and questions, and three SciFact-style abstracts.
    ``distractor``: a second conversation whose one question's words are on another note than its answer."""
    conv = root / "locomo" / "conv-01" / "memory"
    conv.mkdir(parents=True)
    (conv / "2023-01-01.md").write_text(
        "# 2023-01-01\n\n## Session 1\n\n- Ann: I adopted a puppy named Biscuit.\n- Bob: Lovely! I started pottery.\n"
        + "".join(f"- Ann: filler line {i} about the weather and groceries.\n" for i in range(60)),
        encoding="utf-8")
    (conv / "2023-02-01.md").write_text("# 2023-02-01\n\n- Bob: My pottery class moved to Tuesdays.\n", encoding="utf-8")
    qs = [
        {"qid": "c1/q1", "workspace": "conv-01", "question": "What is the name of Ann's puppy?", "category": 4,
         "gold": [{"path": "memory/2023-01-01.md", "line": 5}]},
        {"qid": "c1/q2", "workspace": "conv-01", "question": "When is Bob's pottery class?", "category": 2,
         "gold": [{"path": "memory/2023-02-01.md", "line": 3}]},
        {"qid": "c1/q3", "workspace": "conv-01", "question": "Unanswerable", "category": 5, "gold": []},
    ]
    if distractor:
        other = root / "locomo" / "conv-02" / "memory"
        other.mkdir(parents=True)
        (other / "2023-03-01.md").write_text(
            "# 2023-03-01\n\n- Carol: I travel every spring for work, to boring places.\n"
            "- Dan: Spring cleaning took all weekend.\n", encoding="utf-8")
        (other / "2023-04-02.md").write_text("# 2023-04-02\n\n- Carol: Lisbon in April was wonderful.\n", encoding="utf-8")
        qs.append({"qid": "c2/q1", "workspace": "conv-02", "question": "Where did Carol travel this spring?",
                   "category": 1, "gold": [{"path": "memory/2023-04-02.md", "line": 3}]})
    (root / "locomo" / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in qs) + "\n", encoding="utf-8")
    sf = root / "scifact" / "workspace" / "memory"
    sf.mkdir(parents=True)
    for i, text in enumerate(["Aspirin lowers the risk of stroke.", "Vitamin D and bone density.", "Gene editing in mice."]):
        (sf / f"{i}.md").write_text(f"# Doc {i}\n\n{text}\n", encoding="utf-8")
    (root / "scifact" / "queries-train.jsonl").write_text(
        json.dumps({"qid": "1", "query": "aspirin stroke risk", "relevant_paths": ["memory/0.md"]}) + "\n", encoding="utf-8")
    return root


def test_quality_harness_end_to_end(tmp_path: Path) -> None:
    pytest.importorskip("clawmem_core.index")
    data = _tiny_data(tmp_path / "data", distractor=True)
    datasets = load_all(data, ["locomo-en", "scifact"])
    assert [d.name for d in datasets] == ["locomo-en", "scifact"]
    assert datasets[0].skipped["adversarial"] == 1
    choices = [resolve("none"), resolve("hash")]
    q = quality.run(datasets, choices, tmp_path / "cache", lambda m: None)
    loc = q["datasets"]["locomo-en"]["systems"]
    clawmem = ["keyword", "keyword+mmr", "vector[hash]", "vector[hash]+mmr", "hybrid[hash]", "hybrid[hash]+mmr",
               "hybrid-norm[hash]"]
    assert set(loc) == {"rank-bm25", *clawmem}
    # conv-01's two questions are found first by every system; conv-02's answer shares only "Carol" with its
    # question, so the note with "travel" and "spring" ranks above it everywhere: clawmem still returns it within
    # 5, rank-bm25 not at all ("Carol" is in both notes: its idf is not positive).
    found = {"n": 2, "hit@1": 1.0, "hit@5": 1.0, "hit@10": 1.0, "recall@5": 1.0, "recall@10": 1.0}
    second = {"n": 1, "hit@1": 0.0, "hit@5": 1.0, "hit@10": 1.0, "recall@5": 1.0, "recall@10": 1.0}
    missed = {"n": 1, "hit@1": 0.0, "hit@5": 0.0, "hit@10": 0.0, "recall@5": 0.0, "recall@10": 0.0}
    for name in clawmem + ["rank-bm25"]:
        by_ws = loc[name]["by_workspace"]
        assert by_ws == {"conv-01": found, "conv-02": missed if name == "rank-bm25" else second}, name
        overall = loc[name]["overall"]
        assert overall["n"] == 3 and overall["hit@1"] == pytest.approx(2 / 3)
        assert overall["hit@5"] == overall["hit@10"] == pytest.approx(2 / 3 if name == "rank-bm25" else 1.0)
    assert set(loc["keyword"]["by_category"]) == {"multi-hop", "single-hop", "temporal"}
    assert loc["keyword"]["by_category"]["temporal"] == found | {"n": 1}
    chunks = q["datasets"]["locomo-en"]
    assert chunks["lines_per_chunk"] > 1
    sf = q["datasets"]["scifact"]["systems"]
    for name, s in sf.items():
        assert s["overall"] == {"n": 1, "ndcg@10": 1.0, "recall@100": 1.0}, name


def test_report_compares_chinese_with_english_on_the_same_questions() -> None:
    def scores(hit5: float, n: int) -> dict[str, float]:
        return {"n": n, "hit@1": hit5, "hit@5": hit5, "recall@5": hit5}

    en = {"overall": scores(0.95, 40), "by_workspace": {"conv-26": scores(0.8, 10), "conv-30": scores(1.0, 30)}}
    zh = {"overall": scores(0.7, 10), "by_workspace": {"conv-26": scores(0.7, 10)}}
    q = {"datasets": {"locomo-en": {"language": "en", "systems": {"keyword": en}},
                      "locomo-zh": {"language": "zh", "systems": {"keyword": zh}}}}
    label, same = report.same_questions(q)
    assert label == "conv-26"
    assert same["keyword"]["n"] == 10 and same["keyword"]["hit@5"] == pytest.approx(0.8)
    rows = {r[0]: r[1:] for r in report.targets({"quality": q})}
    assert rows["Chinese keyword-only within 0.05 hit@5 of English"][0] == "ZH 0.700 vs EN 0.950 (gap +0.250)"
    same_row = rows["Chinese keyword-only within 0.05 hit@5 of English on the same questions (conv-26)"]
    assert same_row == ["ZH 0.700 vs EN 0.800 (gap +0.100)", "❌"]
    assert "locomo-en on conv-26, n=10" in report.quality_section(q)
    # Runs saved before per-conversation scores: no comparison, no error.
    del en["by_workspace"]
    assert report.same_questions(q)[1] == {}


def test_generator_is_deterministic(tmp_path: Path) -> None:
    a = synth.generate(tmp_path / "a", 60, seed=3)
    b = synth.generate(tmp_path / "b", 60, seed=3)
    fa = sorted(p.relative_to(tmp_path / "a").as_posix() for p in (tmp_path / "a").rglob("*.md"))
    fb = sorted(p.relative_to(tmp_path / "b").as_posix() for p in (tmp_path / "b").rglob("*.md"))
    assert fa == fb and a.queries_zh == b.queries_zh
    assert (tmp_path / "a" / "MEMORY.md").read_text() == (tmp_path / "b" / "MEMORY.md").read_text()
    assert a.chunks_estimate >= 60
    assert any("\u4e00" <= ch <= "\u9fff" for p in (tmp_path / "a").rglob("*.md") for ch in p.read_text())


def test_speed_harness_and_report(tmp_path: Path) -> None:
    pytest.importorskip("clawmem_core.index")
    from bench.__main__ import main

    out = tmp_path / "results"
    assert main(["run", "--profile", "smoke", "--out", str(out), "--scales", "80"]) == 0
    res = json.loads((out / "smoke.json").read_text())
    scale = res["speed"]["scales"]["80"]
    assert scale["index_keyword"]["ok"], scale["index_keyword"]
    assert scale["index_zero"]["ok"], scale["index_zero"]
    assert scale["search"]["ok"], scale["search"]
    # The workspace, its queries and the bench vectors are all seeded: clawmem's vector side finds 80 % of numpy's
    # exact top 10 over the 20 queries (calibrated scores are 0 from the background level down, where the cosine
    # order is lost: ties), and every result is one of the index's chunks.
    assert scale["search"]["queries"] == 20
    assert scale["search"]["vector"]["recall@10"] == pytest.approx(0.8) and scale["search"]["vector"]["unmatched_results"] == 0
    page = (out / "RESULTS.md").read_text()
    assert "Speed and scale" in page and "Targets" in page
    assert str(tmp_path) not in page  # no machine paths in results
    assert report.write(out).exists()


def test_matrix_runs_every_embedder_fusion_and_rerank_mode_through_search(tmp_path: Path) -> None:
    pytest.importorskip("clawmem_core.index")
    from bench import matrix
    from clawmem_core.rerank import FunctionReranker

    data = _tiny_data(tmp_path / "data")
    out = tmp_path / "m.json"
    assert matrix.main(["--embedders", "none,hash", "--datasets", "locomo-en", "--data", str(data),
                        "--work", str(tmp_path / "work"), "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    rows = {(r["embedder"], r["fusion"]): r for r in res["rows"]}
    assert set(rows) == {(e, f) for e in ("none", "hash") for f in ("calibrated", "openclaw")}
    kw = rows[("none", "calibrated")]
    assert kw["n"] == 2 and kw["hit@5"] == 1.0 and kw["degraded"] == 0
    md = out.with_suffix(".md").read_text()
    assert "| keyword-only (no model) | calibrated | off |" in md and "openclaw" in md

    # rerank on: a reranker that reverses the fused order reaches the search (reranked counted)
    setup = matrix.make_setup("hash", None)
    ds = matrix.datasets(data, tmp_path / "work", ["locomo-en"])[0]
    rev = FunctionReranker(lambda q, texts: [-i for i in range(len(texts))][::-1], name="reverse")
    on = matrix.evaluate(setup, ds, tmp_path / "work", "calibrated", rev, {}, "on (reverse)")
    assert on["reranked"] == 2 * on["n"] == 4 and on["rerank"] == "on (reverse)"  # both searches of each question


def test_matrix_rerank_only_run_merges_and_keeps_the_first_index_times(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rerank-on run (the bi-encoder stand-in's LangChain compressor, here over hash vectors) adds its rows to
    the rerank-off ones without redoing them, keeps the first build's indexing times, and at weight 0 the blend
    leaves the fused order as it was."""
    pytest.importorskip("clawmem_core.index")
    pytest.importorskip("langchain_core")
    from bench import matrix, rerankers
    from clawmem_core.testing import HashEmbedder

    def hashed(cache: object = None) -> object:
        emb = HashEmbedder(dims=32)
        return rerankers.langchain_compressor(rerankers._Scorer(emb.embed_query, emb.embed_documents, "hash"))

    monkeypatch.setattr(rerankers, "e5", hashed)
    data = _tiny_data(tmp_path / "data")
    out = tmp_path / "m.json"
    common = ["--embedders", "none,hash", "--datasets", "locomo-en", "--fusions", "calibrated", "--data", str(data),
              "--work", str(tmp_path / "work"), "--out", str(out)]
    assert matrix.main(common) == 0
    first = json.loads(out.read_text())
    for i in first["index"]:
        i["seconds"] = 999.0  # the first build's (embedding) time, which a cached re-sync must not replace
    out.write_text(json.dumps(first))
    assert matrix.main(common + ["--merge", "--rerank-only", "--rerank", "bench.rerankers:e5",
                                 "--rerank-label", "stand-in", "--rerank-weight", "0"]) == 0
    res = json.loads(out.read_text())
    rows = {(r["embedder"], r["rerank"]): r for r in res["rows"]}
    assert set(rows) == {(e, m) for e in ("none", "hash") for m in ("off", "on (stand-in, w=0)")}
    for e in ("none", "hash"):
        off, on = rows[(e, "off")], rows[(e, "on (stand-in, w=0)")]
        assert on["reranked"] == 2 * on["n"] == 4 and off["reranked"] == 0  # every search of the rerank-on run
        assert [on[k] for k in ("hit@1", "hit@5", "hit@5 default")] == [off[k] for k in ("hit@1", "hit@5", "hit@5 default")]
    assert {i["seconds"] for i in res["index"]} == {999.0}
    md = out.with_suffix(".md").read_text()
    assert "bi-encoder stand-in, not a cross-encoder" in md and "Rerank on minus rerank off" in md


def test_fusion_strength_diagnosis_refuses_each_question_as_both_searches_rank_it(tmp_path: Path) -> None:
    """``fusion_strength --diagnose`` re-fuses each question's captured candidates offline: its rows for the
    default and for OpenClaw's fusion give exactly the searches' own figures, and its report renders."""
    pytest.importorskip("clawmem_core.index")
    from bench import matrix
    from bench.studies import fusion_strength as fs

    data = _tiny_data(tmp_path / "data", distractor=True)
    work = tmp_path / "work"
    setup = matrix.make_setup("hash", None)
    ds = matrix.datasets(data, work, ["locomo-en"])[0]
    matrix.build_indexes(setup, ds, work)
    row = fs.diagnose(setup, ds, work)
    searched = {f: matrix.evaluate(setup, ds, work, f, None, {"query.rerank.enabled": False}, "off")
                for f in ("calibrated", "openclaw")}
    default = row["diagnosis"]["the rule's weight, calibrated vector, calibrated keyword (the default)"]["all"]
    openclaw = row["diagnosis"]["0.7 / 0.3, raw cosine, OpenClaw's keyword (OpenClaw's fusion)"]["all"]
    for fig, got in ((default, searched["calibrated"]), (openclaw, searched["openclaw"])):
        assert fig["n"] == got["n"] == 3 and (fig["hit@1"], fig["hit@5"]) == (got["hit@1"], got["hit@5"])
    wins = row["wins"]["hit@1"]
    assert 0.0 <= wins["sign_p"] <= 1.0 and fs._sign_p(0, 5) == pytest.approx(0.0625) and fs._sign_p(3, 3) == 1.0
    md = fs.diagnosis_tables([row])
    assert "cells below OpenClaw's fusion" in md and "rank fusion" in md


def test_matrix_remote_setup_goes_through_the_openai_provider() -> None:
    from bench import matrix

    s = matrix.make_setup("remote", "http://127.0.0.1:9/v1")
    cfg = matrix.config(s, "openclaw", {})
    assert s.embedder is None and cfg.provider == "openai" and cfg.remote.base_url == "http://127.0.0.1:9/v1"
    assert cfg.query.hybrid.fusion == "openclaw"


def test_freshness_bench_runs_every_system(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every system's searches are counted alone: a background sync that an index starts on its own
    is held back until that index's first timed search, and then run to its end (as a loaded machine
    may schedule it). The `off` system used to start one (its session-start sync), and its walk was
    counted as a search's whenever it ran late (once at load 18)."""
    import threading

    from bench.studies import freshness
    from clawmem_core import MemoryIndex
    from clawmem_core.index_parts.background import BackgroundWork

    searches: dict[MemoryIndex, int] = {}
    gates: dict[BackgroundWork, threading.Event] = {}
    real_background, real_search, real_close = BackgroundWork.run_sync, MemoryIndex.search, MemoryIndex.close

    def gate(work: BackgroundWork) -> threading.Event:
        return gates.setdefault(work, threading.Event())

    def late_background_sync(self: BackgroundWork, *args: Any, **kwargs: Any) -> None:
        gate(self).wait(120)
        real_background(self, *args, **kwargs)

    def search(self: MemoryIndex, *args: Any, **kwargs: Any) -> Any:
        searches[self] = searches.get(self, 0) + 1
        if searches[self] == freshness.WARM_UP + 1:  # the first timed search: a late background sync runs now
            gate(self._background).set()
            if self._background.thread is not None:
                self._background.thread.join(120)
        return real_search(self, *args, **kwargs)

    def close(self: MemoryIndex) -> None:
        gate(self._background).set()
        real_close(self)

    monkeypatch.setattr(BackgroundWork, "run_sync", late_background_sync)
    monkeypatch.setattr(MemoryIndex, "search", search)
    monkeypatch.setattr(MemoryIndex, "close", close)
    assert freshness.main(["--scales", "60", "--queries", "4", "--work", str(tmp_path / "w"),
                           "--out", str(tmp_path / "out")]) == 0
    res = json.loads((tmp_path / "out" / "freshness.json").read_text())
    (scale,) = res["scales"]
    assert set(scale["p50_ms"]) == set(freshness.SYSTEMS) and scale["same_results"]
    walks = scale["walks_per_search"]
    assert walks["off"] == 0 and walks["walk"] == 1 and walks["walk, states fetched"] == 1
    if sys.platform.startswith("linux") and scale["journal_healthy"]:
        assert walks["journal"] == 0  # trusted: no search walked
    assert "`journal`" in (tmp_path / "out" / "freshness.md").read_text()


def test_background_cosines_bench_runs(capsys: pytest.CaptureFixture[str]) -> None:
    from bench.studies import background_cosines

    background_cosines.main(["--dims", "7,16", "--rounds", "3", "--searches", "2", "--no-save"])
    out = capsys.readouterr().out
    assert "    7-d  step: old" in out and "   16-d  step: old" in out and "numpy import" in out


def test_missing_evaluation_data_stops_the_benchmark_naming_what_it_looked_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run from a checkout with no data beside it, the quality run used to write an empty table;
    it now stops and says where it looked."""
    from bench import data as D
    from bench.__main__ import main

    empty = tmp_path / "nothing-here"
    empty.mkdir()
    monkeypatch.setenv(D.DATA_ENV, str(empty))
    assert D.default_data_dir() == empty.resolve()
    out = tmp_path / "results"
    with pytest.raises(D.MissingDataError) as exc:
        main(["run", "--profile", "quick", "--skip-speed", "--out", str(out), "--datasets", "locomo-en,scifact"])
    message = str(exc.value)
    assert str(empty / "locomo" / "queries.jsonl") in message and str(empty / "scifact" / "queries-train.jsonl") in message
    assert D.DATA_ENV in message
    assert exc.value.code == message  # SystemExit: the message on stderr, exit status 1
    assert not out.exists() or not list(out.glob("*.json"))  # no results written
    # one data set of two present: still no shorter table
    data = _tiny_data(tmp_path / "partial")
    import shutil

    shutil.rmtree(data / "scifact")
    with pytest.raises(D.MissingDataError, match="scifact"):
        load_all(data, ["locomo-en", "scifact"])
    # the loaders other benchmarks call directly say the same
    with pytest.raises(D.MissingDataError, match="locomo-zh"):
        D.load_locomo(data / "locomo-zh", "locomo-zh", "zh")
    with pytest.raises(D.MissingDataError, match="scifact"):
        D.load_scifact(data / "scifact")
    # with the variable unset, the message names the places next to the checkout
    monkeypatch.delenv(D.DATA_ENV)
    message = str(D._missing(D.candidate_data_dirs()[0], ["locomo-en"]))
    assert f"{D.DATA_ENV} is not set; looked next to this checkout" in message
    assert str(D.candidate_data_dirs()[0] / "locomo" / "queries.jsonl") in message


def test_the_data_is_found_beside_the_main_checkout_of_a_worktree(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from bench import data as D

    monkeypatch.delenv(D.DATA_ENV, raising=False)
    main_co, wt = tmp_path / "main", tmp_path / "trees" / "feature"
    (main_co / ".git" / "worktrees" / "feature").mkdir(parents=True)
    (main_co / ".git" / "worktrees" / "feature" / "commondir").write_text("../..\n")
    wt.mkdir(parents=True)
    (wt / ".git").write_text(f"gitdir: {main_co / '.git' / 'worktrees' / 'feature'}\n")
    shared = _tiny_data(tmp_path / "shared" / "data")
    assert D.candidate_data_dirs(wt) == [(tmp_path / "trees" / "shared" / "data").resolve(), shared.resolve()]
    assert D.default_data_dir(wt) == shared.resolve()
    assert [d.name for d in D.load_all(D.default_data_dir(wt), ["locomo-en", "scifact"])] == ["locomo-en", "scifact"]
    assert D.candidate_data_dirs(main_co) == [shared.resolve()]  # a main checkout: beside it
    monkeypatch.setenv(D.DATA_ENV, str(tmp_path / "mine"))
    assert D.candidate_data_dirs(wt) == [(tmp_path / "mine").resolve()]  # the variable alone


def test_freshness_vectors_bench_runs_on_both_stores(tmp_path: Path, pg_url: str) -> None:
    from bench.studies import freshness_vectors

    runs = [freshness_vectors.run(tmp_path / "w", 200, 4, 300.0),
            freshness_vectors.run(tmp_path / "w", 200, 4, 300.0, url=pg_url)]
    for r in runs:
        assert r["queries"] and set(r["p50_ms"]) == set(freshness_vectors.SYSTEMS)
        assert r["walks_per_search"]["off"] == 0
    table = freshness_vectors.markdown(runs)
    assert "| sqlite |" in table and "| postgres |" in table


def test_pg_vector_connections_bench_runs(tmp_path: Path, pg_url: str) -> None:
    from bench.studies import pg_vector_connections

    r = pg_vector_connections.run(100, 2, url=pg_url, work=tmp_path)
    assert len(r["seconds"]["held"]) == len(r["seconds"]["per statement"]) == 2
    # what is printed is what was measured: medians of the rounds, their ratio, chunks over the median
    med = {way: statistics.median(times) for way, times in r["seconds"].items()}
    assert r["median_s"] == med and r["ratio"] == med["per statement"] / med["held"]
    assert r["chunks"] > 0 and r["chunks_per_s"] == {way: r["chunks"] / m for way, m in med.items()}


def test_scifact_subset_excluding_an_earlier_one_shares_no_claim_and_no_abstract(tmp_path: Path) -> None:
    from bench.scifact_subset import build

    src = tmp_path / "data" / "scifact"
    (src / "workspace" / "memory").mkdir(parents=True)
    for i in range(60):
        (src / "workspace" / "memory" / f"d{i}.md").write_text(f"abstract {i}\n", encoding="utf-8")
    # claim i is judged on d{i} and, for even i, also on d{i+1}: a claim can reach an abstract another one holds
    rows = [{"qid": f"q{i}", "query": f"claim {i}", "relevant_paths": [f"memory/d{i}.md"] + ([f"memory/d{i + 1}.md"] if i % 2 == 0 else [])}
            for i in range(30)]
    (src / "queries-train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")

    def read(out: Path) -> tuple[set[str], set[str]]:
        qids = {json.loads(line)["qid"] for line in (out / "queries-train.jsonl").read_text().splitlines()}
        return qids, {p.name for p in (out / "workspace" / "memory").glob("*.md")}

    first = build(tmp_path / "a", tmp_path / "data", n_queries=8, n_distractors=10, seed=7)
    again = build(tmp_path / "a2", tmp_path / "data", n_queries=8, n_distractors=10, seed=7)
    assert read(first) == read(again)  # without --exclude the draw is what it was
    second = build(tmp_path / "b", tmp_path / "data", n_queries=8, n_distractors=10, seed=7, exclude=[first])
    (q1, d1), (q2, d2) = read(first), read(second)
    assert len(q2) == 8 and not q1 & q2
    assert not d1 & d2
    judged2 = {Path(p).name for r in rows if r["qid"] in q2 for p in r["relevant_paths"]}
    assert judged2 <= d2 and len(d2) == len(judged2) + 10



def test_latency_bench_measures_each_latency_the_tests_do_not_time(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from bench import latency

    assert latency.main(["--edits", "2", "--dirs", "30", "--debounce-ms", "50", "--json", str(tmp_path / "latency.json")]) == 0
    out = capsys.readouterr().out.splitlines()
    names = ["watcher report", "watcher stop", "watcher setup", "searchable after an edit", "1 MB query",
             "provider query timeout"]
    assert [line[:26].strip() for line in out[1:]] == names
    r = json.loads((tmp_path / "latency.json").read_text())
    for name in ("watcher report", "watcher stop", "searchable after an edit"):
        assert r[name]["n"] == 2  # every edit was seen, every stop returned
    assert r["watcher setup"]["directories"] == 30 and not r["watcher setup"]["polling"]
    assert r["1 MB query"]["n"] == 1
    assert "skipped" in r["provider query timeout"] or r["provider query timeout"]["n"] == 1  # it did time out
