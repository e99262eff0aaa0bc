"""Markdown that PostgreSQL's text and ``tsvector`` types refuse or limit (NUL characters, invalid
UTF-8, 1 MB lines, words over 2 KB, a word past the 16,383 position limit, 40k distinct words):
a PostgreSQL sync indexes them as a SQLite sync does, never aborting the whole sync."""

from __future__ import annotations

from pathlib import Path

from clawmem_core import MemoryIndex

FILES: dict[str, bytes] = {
    "MEMORY.md": "# Notes\n\n- a good note about alphamarker\n".encode(),
    # a NUL past the binary sniff window: the file is text with one NUL character in it
    "memory/nul.md": ("hello world " * 1000 + "\x00 betamarker after the nul\n").encode(),
    # UTF-16 (by its BOM) holding U+0000
    "memory/utf16.md": "\ufeffgammamarker\x00 in utf16 你好\n".encode("utf-16-le"),
    "memory/invalid.md": b"- deltamarker \xff\xfe invalid \xc3\x28 bytes\n",
    "memory/longword.md": ("- epsilonmarker " + "x" * 5000 + " " + "长" * 3000 + "\n").encode(),
    "memory/bigline.md": ("zetamarker " + "word " * 210_000 + "\n").encode(),  # one 1 MB line
    "memory/positions.md": ("etamarker " + "again " * 20_000 + "\n").encode(),  # past 16,383 positions
    "memory/distinct.md": ("thetamarker " + " ".join(f"w{i}x" for i in range(40_000)) + "\n").encode(),
    "memory/quotes.md": "- iotamarker it's a \\ back'slash \\' and ''quotes'' :1 & | ! <-> 中文\n".encode(),
}
MARKERS = ["alphamarker", "betamarker", "gammamarker", "deltamarker", "epsilonmarker", "zetamarker", "etamarker",
           "thetamarker", "iotamarker"]


def test_odd_markdown_indexes_on_postgres_as_on_sqlite(tmp_path: Path, pg_url: str) -> None:
    ws = tmp_path / "ws"
    for rel, data in FILES.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_bytes(data)
    got = {}
    for kind, store in (("sqlite", {}), ("postgres", {"url": pg_url})):
        with MemoryIndex(ws, agent_id="odd", config={"store": store, "provider": "none"},
                         state_dir=tmp_path / kind) as mem:
            report = mem.sync()  # before: "PostgreSQL text fields cannot contain NUL (0x00) bytes" for all
            st = mem.status()
            got[kind] = (report.files_indexed, sorted(report.files_skipped), st.files, st.chunks,
                         [[r.path for r in mem.search(m, min_score=0)][:1] for m in MARKERS],
                         [r.path for r in mem.search("again", min_score=0)][:1])
    assert got["postgres"] == got["sqlite"]
    assert got["sqlite"][0] == len(FILES) and got["sqlite"][4] == [[p] for p in FILES]
    # the store's copy a replica reads: the NUL shown as U+FFFD, the rest as written
    with MemoryIndex(None, agent_id="odd", config={"store": {"url": pg_url}, "provider": "none"},
                     state_dir=tmp_path / "replica") as rep:
        text = rep.read("memory/nul.md").text
        assert "\x00" not in text and "\ufffd betamarker after the nul" in text
        assert "gammamarker\ufffd in utf16 你好" in rep.read("memory/utf16.md").text
        assert rep.read("memory/quotes.md").text == FILES["memory/quotes.md"].decode()
