"""Upgrading a PostgreSQL store from an older schema in place, against the real server: the old
schema's DDL as it was (versions 2 and 3), filled with the rows an index holds, then opened by
this code. Nothing is lost, searches answer the same, vectors version 2 kept out of line are moved
into their rows, and processes opening an old schema at once upgrade it exactly once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clawmem_core import MemoryIndex
from clawmem_core.store.postgres.migrations import SCHEMA_DDL
from clawmem_core.testing import HashEmbedder
from tests.conftest import drop_database, new_database

psycopg = pytest.importorskip("psycopg")
pytest.importorskip("psycopg_pool")

ROOT = Path(__file__).resolve().parents[2]
AGENT = "upgrade-agent"

#: Schema version 2 as clawmem wrote it (vectors stored as the type says: out of line in a wide row).
V2_DDL = SCHEMA_DDL[2]

#: Schema version 3 as clawmem wrote it (upgraded in place from version 2 by running it over it).
V3_DDL = SCHEMA_DDL[3]

#: Schema version 4 as clawmem wrote it (no packed keyword postings).
V4_DDL = SCHEMA_DDL[4]

#: Schema version 5 as clawmem wrote it (planner statistics of every column).
V5_DDL = SCHEMA_DDL[5]

#: The columns version 6 keeps no planner statistics of, by table.
NO_STATISTICS = {"clawmem_chunks": {"terms", "text", "embedding"}, "clawmem_files": {"content"},
                 "clawmem_postings": {"rids", "tfs"}}

#: Columns every version has, by table (what is copied into the old schema).
COLUMNS = {
    "clawmem_agents": "agent, generation, data_version",
    "clawmem_meta": "agent, generation, key, value",
    "clawmem_files": "agent, generation, source, path, hash, mtime, size, content, ctime, ino",
    "clawmem_chunks": "rid, agent, generation, id, path, source, start_line, end_line, hash, model, text, part, "
                      "pending, terms, doc_len, dims, embedding, updated_at",
    "clawmem_embedding_cache": "provider, model, provider_key, hash, dims, embedding, updated_at",
}

QUERIES = ("jazz", "deploy window", "token3a", "部署 窗口", "茶", "topic4 fact")


def notes(root: Path) -> Path:
    """English and Chinese notes, long enough that a version 2 row keeps its vector out of line."""
    (root / "memory").mkdir(parents=True, exist_ok=True)
    (root / "MEMORY.md").write_text("# Long term\n\nI like jazz and green tea. 我喜欢喝茶。\n", encoding="utf-8")
    for i in range(8):
        en = [f"- topic{i} fact {j}: the deploy window for service {i}-{j} is token{i}{chr(97 + j)} on Friday"
              for j in range(10)]
        zh = [f"- 第{i}个服务的部署窗口是星期五，负责人是张伟{j}号，备注：茶水间{j}" for j in range(6)]
        (root / "memory" / f"n{i}.md").write_text(f"# Note {i}\n\n" + "\n".join(en + zh) + "\n", encoding="utf-8")
    return root


def open_index(ws: Path, state: Path, url: str) -> MemoryIndex:
    return MemoryIndex(ws, agent_id=AGENT, config={"store": {"url": url}}, embedder=HashEmbedder(dims=384),
                       state_dir=state)


def fingerprint(mem: MemoryIndex) -> tuple[Any, ...]:
    st = mem.status()
    hits = tuple(tuple((r.path, r.start_line, r.end_line, round(r.score, 5)) for r in mem.search(q, max_results=5, min_score=0))
                 for q in QUERIES)
    return st.files, st.chunks, st.vectors, hits


def make_old(url: str, ref: str, kind: str) -> None:
    """``url`` holding ``ref``'s rows under an old schema: ``v2``, ``v3``, ``v4``, ``v5``, or ``v3-from-v2``
    (a version 2 database upgraded by the code of version 3)."""
    with psycopg.connect(url, autocommit=True) as dst, psycopg.connect(ref, autocommit=True) as src:
        dst.execute({"v3": V3_DDL, "v4": V4_DDL, "v5": V5_DDL}.get(kind, V2_DDL))
        for table, cols in COLUMNS.items():
            with src.cursor().copy(f"COPY (SELECT {cols} FROM {table}) TO STDOUT") as out, \
                    dst.cursor().copy(f"COPY {table} ({cols}) FROM STDIN") as into:
                for data in out:
                    into.write(data)
        top = src.execute("SELECT last_value FROM clawmem_generation_seq").fetchone()[0]
        dst.execute("SELECT setval('clawmem_generation_seq', %s)", (top,))
        dst.execute("SELECT setval(pg_get_serial_sequence('clawmem_chunks', 'rid'), (SELECT max(rid) FROM clawmem_chunks))")
        if kind == "v3-from-v2":
            dst.execute(V3_DDL)
        dst.execute("INSERT INTO clawmem_schema VALUES (%s)", ({"v2": 2, "v4": 4, "v5": 5}.get(kind, 3),))


def indexes(url: str) -> set[str]:
    """The indexes of the chunks table."""
    with psycopg.connect(url) as conn:
        return {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'clawmem_chunks'")}


def without_statistics(url: str) -> dict[str, set[str]]:
    """The columns of each table whose planner statistics are turned off (``SET STATISTICS 0``)."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT c.relname, a.attname FROM pg_attribute AS a JOIN pg_class AS c ON c.oid = a.attrelid "
            "WHERE c.relname = ANY(%s) AND a.attnum > 0 AND NOT a.attisdropped AND a.attstattarget = 0",
            (list(NO_STATISTICS),)).fetchall()
    out: dict[str, set[str]] = {}
    for table, column in rows:
        out.setdefault(table, set()).add(column)
    return out


def out_of_line(url: str) -> int:
    with psycopg.connect(url) as conn:
        return int(conn.execute("SELECT count(*) FROM clawmem_chunks WHERE pg_column_toast_chunk_id(embedding) IS NOT NULL")
                   .fetchone()[0])


def table_rows(url: str) -> dict[str, Any]:
    with psycopg.connect(url) as conn:
        return {t: conn.execute(f"SELECT md5(string_agg(x::text, ',' ORDER BY x::text)) FROM (SELECT {c} FROM {t}) AS x")
                .fetchone()[0] for t, c in COLUMNS.items() if t != "clawmem_agents"}


@pytest.fixture
def reference(tmp_path: Path, pg_server: Any) -> Any:
    """A workspace indexed by this code in a database of its own, and what it holds and answers."""
    ws = notes(tmp_path / "ws")
    url = new_database(pg_server)
    try:
        with open_index(ws, tmp_path / "ref-state", url) as mem:
            mem.sync()
            before = fingerprint(mem)
        yield ws, url, before, table_rows(url)
    finally:
        drop_database(pg_server, url)


@pytest.mark.parametrize("kind", ["v2", "v3", "v3-from-v2", "v4", "v5"])
def test_an_old_schema_is_upgraded_in_place_and_loses_nothing(kind: str, reference: Any, pg_url: str,
                                                               tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from clawmem_core.store.postgres import SCHEMA_VERSION

    from clawmem_core.store.postgres import postings

    ws, ref, before, rows = reference
    make_old(pg_url, ref, kind)
    assert table_rows(pg_url) == rows
    monkeypatch.setattr(postings, "SETTLE_MIN_ROWS", 1)  # the sync writes the postings of every row
    # every version before 5 indexed the terms (GIN); 5 reads packed postings instead
    assert ("clawmem_chunks_terms" in indexes(pg_url)) == (kind != "v5")
    assert "clawmem_chunks_terms" not in indexes(ref)
    assert without_statistics(pg_url) == {} and without_statistics(ref) == NO_STATISTICS
    leftovers = out_of_line(pg_url)
    assert (leftovers > 0) == (kind in ("v2", "v3-from-v2")), "version 2 rows keep their vectors out of line"
    with open_index(ws, tmp_path / "state", pg_url) as mem:
        assert fingerprint(mem) == before  # searches answer as before the upgrade
        rep = mem.sync()
        assert (rep.files_indexed, rep.chunks_indexed, rep.files_deleted, rep.embeddings_computed) == (0, 0, 0, 0)
        assert fingerprint(mem) == before
    now = table_rows(pg_url)  # every chunk and file as it was (vectors moved, not changed)
    assert (now["clawmem_chunks"], now["clawmem_files"]) == (rows["clawmem_chunks"], rows["clawmem_files"])
    assert out_of_line(pg_url) == 0
    assert "clawmem_chunks_terms" not in indexes(pg_url)  # dropped by the upgrade
    assert without_statistics(pg_url) == NO_STATISTICS  # (version 6)
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT version FROM clawmem_schema").fetchall() == [(SCHEMA_VERSION,)]
        assert conn.execute("SELECT vectors_inline FROM clawmem_agents").fetchall() == [(True,)]
        # the sync wrote the agent's keyword postings: every keyword row's terms, packed
        upto, top = conn.execute(
            "SELECT (SELECT upto FROM clawmem_postings AS p WHERE p.agent = a.agent AND p.generation = a.generation "
            "AND p.term = ''), (SELECT max(rid) FROM clawmem_chunks WHERE part = 0) FROM clawmem_agents AS a").fetchone()
        assert upto == top
        assert conn.execute("SELECT sum(length(tfs)) / 2 FROM clawmem_postings").fetchone()[0] == conn.execute(
            "SELECT sum(length(terms)) FROM clawmem_chunks WHERE part = 0").fetchone()[0]


def test_an_edit_after_the_upgrade_is_indexed(reference: Any, pg_url: str, tmp_path: Path) -> None:
    ws, ref, before, _ = reference
    make_old(pg_url, ref, "v2")
    (ws / "memory" / "n3.md").write_text("# Note 3\n\nthe deploy window moved to Monday 部署窗口改到星期一\n",
                                         encoding="utf-8")
    (ws / "memory" / "n5.md").unlink()
    with open_index(ws, tmp_path / "state", pg_url) as mem:
        rep = mem.sync()
        assert (rep.files_indexed, rep.files_deleted) == (1, 1)
        after = fingerprint(mem)
        assert [r.path for r in mem.search("Monday", max_results=1)] == ["memory/n3.md"]
        assert [r.path for r in mem.search("星期一", max_results=1)] == ["memory/n3.md"]
    assert after[0] == before[0] - 1
    assert not any(p == "memory/n5.md" for hits in after[3] for p, *_ in hits)
    assert out_of_line(pg_url) == 0


_OPENER = """
import sys
from clawmem_core.store.postgres import PostgresBackend
backend = PostgresBackend(sys.argv[1], sys.argv[2])
print("ready", flush=True)
sys.stdin.readline()
upgraded = backend.ensure_schema()
store = backend.open()
print("upgraded", upgraded, store.counts().chunks, flush=True)
"""


def test_two_processes_opening_an_old_schema_upgrade_it_once(reference: Any, pg_url: str, tmp_path: Path) -> None:
    ws, ref, before, rows = reference
    make_old(pg_url, ref, "v2")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", _OPENER, pg_url, AGENT], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready", p.stderr.read() if p.stderr else ""
    for p in procs:  # both go at once
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]
    said = sorted(out.split()[1:] for out, _ in outs)
    assert said == [["2", str(before[1])], ["None", str(before[1])]]  # one upgraded, the other found it done
    assert table_rows(pg_url) == rows  # nothing written but the schema
    with open_index(ws, tmp_path / "state", pg_url) as mem:
        assert fingerprint(mem) == before


def test_a_newer_schema_is_refused_and_left_untouched(reference: Any, pg_url: str, tmp_path: Path) -> None:
    from clawmem_core.errors import StoreError
    from clawmem_core.store.postgres import SCHEMA_VERSION

    ws, ref, _, rows = reference
    make_old(pg_url, ref, "v3")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE clawmem_schema SET version = %s", (SCHEMA_VERSION + 1,))
    with pytest.raises(StoreError, match=f"schema version {SCHEMA_VERSION + 1}"):
        open_index(ws, tmp_path / "state", pg_url)
    assert table_rows(pg_url) == rows
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT version FROM clawmem_schema").fetchall() == [(SCHEMA_VERSION + 1,)]
        assert conn.execute("SELECT to_regclass('clawmem_chunks_keyword') IS NOT NULL").fetchone()[0]
        assert conn.execute("SELECT count(*) FROM information_schema.columns WHERE column_name = 'vectors_inline'"
                            ).fetchone()[0] == 0
