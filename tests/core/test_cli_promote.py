"""``clawmem promote`` (preview, ``--apply``, ``--explain``, ``--rollback``, the gates per run) and the recall
counts of ``clawmem status --deep``, through the real command line, in English and Chinese."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from clawmem_core.cli import main

NOTES = {
    "memory/2026-11-02.md": "# Monday\n\n- The home gateway listens on loopback only, for network safety.\n",
    "memory/2026-11-03.md": "# 周二\n\n网关只在本机回环地址上监听，保证家庭网络安全。\n",
    "MEMORY.md": "# Memory\n\n- Dana's cat is called Miso.\n- 用户喜欢简洁的回答。\n",
}
EN = ["gateway loopback", "loopback gateway safety", "home gateway network"]
ZH = ["网关 回环", "本机回环地址 网关", "家庭网络 网关"]


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CLAWMEM_STATE_DIR", str(tmp_path / "cli-state"))
    root = tmp_path / "ws"
    for rel, text in NOTES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def run(capsys: pytest.CaptureFixture[str], ws: Path, *argv: str) -> tuple[int, str, str]:
    code = main([*argv, "--workspace", str(ws), "--provider", "none"])
    out, err = capsys.readouterr()
    return code, out, err


def tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def traffic(capsys: pytest.CaptureFixture[str], ws: Path, queries: list[str]) -> None:
    for q in queries:
        code, out, _ = run(capsys, ws, "search", q)
        assert code == 0 and "memory/" in out


def test_preview_apply_explain_status_and_rollback(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    traffic(capsys, ws, EN + ZH)
    before, memory = tree(ws), (ws / "MEMORY.md").read_bytes()
    code, out, _ = run(capsys, ws, "promote")
    assert code == 0 and "would add 2 to MEMORY.md (nothing written" in out
    assert "+ memory/2026-11-03.md#L" in out and "| - 网关只在本机回环地址上监听" in out
    code, out, _ = run(capsys, ws, "promote", "--json")
    report = json.loads(out)
    assert code == 0 and report["applied"] is False and report["changed"] is True and len(report["added"]) == 2
    assert "Source: memory/2026-11-02.md#L" in report["proposed"]
    assert tree(ws) == before  # previews write nothing
    code, out, _ = run(capsys, ws, "promote", "--explain", "网关")
    assert code == 0 and out.startswith("memory/2026-11-03.md#L") and ": would promote" in out
    assert "recalled 3x by 3 distinct queries" in out
    code, out, _ = run(capsys, ws, "promote", "--explain", "memory/2026-11-02.md", "--json")
    assert code == 0 and [e["wouldPromote"] for e in json.loads(out)] == [True]
    code, out, _ = run(capsys, ws, "promote", "--explain", "no such thing")
    assert code == 0 and "would not promote" in out and tree(ws) == before

    code, out, _ = run(capsys, ws, "promote", "--apply")
    assert code == 0 and "Promoted into MEMORY.md" in out and "added 2" in out
    text = (ws / "MEMORY.md").read_text(encoding="utf-8")
    assert text.startswith(memory.decode("utf-8"))  # the person's entries stay byte for byte
    assert "Source: memory/2026-11-03.md#L" in text and "<!-- importance:" in text
    assert "Deep Sleep" in (ws / "DREAMS.md").read_text(encoding="utf-8")
    code, out, _ = run(capsys, ws, "status", "--deep")
    assert code == 0 and "Recall log: 6 events (recording on)" in out
    assert "Promotion: 2 candidates, 0 passing the gates, 1 promotions kept for rollback" in out
    code, out, _ = run(capsys, ws, "status", "--deep", "--json")
    assert json.loads(out)["dreaming"] == {"recording": True, "recall_events": 6, "candidates": 2, "promotable": 0,
                                          "preimages": 1}

    code, out, _ = run(capsys, ws, "promote", "--rollback")
    assert code == 0 and out.startswith("Restored MEMORY.md as it was before the promotion of ")
    assert (ws / "MEMORY.md").read_bytes() == memory  # byte for byte
    code, out, err = run(capsys, ws, "promote", "--rollback")
    assert code == 1 and out == "" and err.count("\n") == 1 and "no saved MEMORY.md" in err


def test_gates_and_limit_per_run(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    traffic(capsys, ws, EN + ZH)
    code, out, _ = run(capsys, ws, "promote", "--min-recall-count", "4")
    assert code == 0 and out.startswith("Nothing to promote") and "0 passing the gates" in out
    assert "min_recall_count" in out
    code, out, _ = run(capsys, ws, "promote", "--min-unique-queries", "4", "--json")
    assert json.loads(out)["added"] == []
    code, out, _ = run(capsys, ws, "promote", "--min-score", "0.99")
    assert code == 0 and out.startswith("Nothing to promote")
    memory = (ws / "MEMORY.md").read_bytes()
    code, out, _ = run(capsys, ws, "promote", "--apply", "--limit", "1")
    assert code == 0 and "added 1" in out
    assert (ws / "MEMORY.md").read_bytes() != memory
    for bad in (["--min-score", "2"], ["--limit", "-1"], ["--apply", "--rollback"], ["--min-recall-count", "x"]):
        with pytest.raises(SystemExit) as usage:
            run(capsys, ws, "promote", *bad)
        out, err = capsys.readouterr()
        assert usage.value.code == 2 and out == "" and err.startswith("clawmem: error:")


def test_a_search_with_no_record_is_not_recorded(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for q in EN:
        code, out, _ = run(capsys, ws, "search", q, "--no-record")
        assert code == 0 and "memory/2026-11-02.md" in out
    code, out, _ = run(capsys, ws, "status", "--deep")
    assert "Recall log: 0 events (recording on)" in out and "Promotion: 0 candidates" in out
    code, out, _ = run(capsys, ws, "promote")
    assert code == 0 and out.startswith("Nothing to promote")


def test_a_replica_does_not_promote(tmp_path: Path, pg_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["promote", "--store", pg_url, "--agent", "team"])
    out, err = capsys.readouterr()
    assert code == 1 and out == "" and err.count("\n") == 1 and "needs --workspace DIR" in err
