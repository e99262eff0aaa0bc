"""The password of a store URL never shows: not in logs, reprs, exceptions (their text, their
chained ``__cause__`` / ``__context__`` and the driver's own errors), CLI output, ``status`` or MCP
payloads; whether it is in the userinfo, in ``?password=``, percent-encoded, or in the
environment (``PGPASSWORD``, a passfile)."""

from __future__ import annotations

import asyncio
import json
import logging
import traceback
from pathlib import Path
from typing import Any, Iterator

import pytest

from clawmem_core import MemoryIndex
from clawmem_core.cli import main
from clawmem_core.errors import ClawmemError
from clawmem_core.tools import search_payload

from .test_index_backends import write

PW = "Hunter2zqPw"


def _with_password(url: str, how: str) -> str:
    """``url`` (of the test server, which trusts local connections) carrying :data:`PW`."""
    if how == "userinfo":
        return url.replace("postgres:@", f"postgres:{PW}@", 1)
    if how == "percent":  # "Hunter2zqPw" with its "z" and "q" percent-encoded
        return url.replace("postgres:@", f"postgres:{PW.replace('zq', '%7A%71')}@", 1)
    if how == "query":
        return f"{url}&password={PW}"
    if how == "encoded-key":  # libpq decodes the key: pass%77ord is password
        return f"{url}&pass%77ord={PW}"
    if how == "sslpassword":  # the client key's passphrase (unused without one, but accepted)
        return f"{url}&sslpassword={PW}"
    if how == "encoded-sslpassword":
        return f"{url}&ssl%70assword={PW}"
    if how == "repeated":  # the last one counts
        return f"{url}&sslpassword=decoy&sslpassword={PW}"
    if how == "oauth":
        return f"{url}&oauth_client_secret={PW}"
    raise AssertionError(how)


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        if exc.__cause__ is not None:
            yield from _chain(exc.__cause__)
        exc = exc.__context__


def _error_text(exc: BaseException) -> str:
    """Everything an exception lets a caller or a log see."""
    parts = ["".join(traceback.format_exception(exc))]
    for e in _chain(exc):
        parts += [str(e), repr(e), repr(getattr(e, "args", ()))]
    return "\n".join(parts)


def _leaks(text: str) -> bool:
    return PW in text or PW[:6] in text


@pytest.mark.parametrize("how", ["userinfo", "percent", "query", "encoded-key", "sslpassword",
                                 "encoded-sslpassword", "repeated", "oauth"])
def test_a_working_store_url_never_shows_its_password(tmp_path: Path, pg_url: str, how: str,
                                                      caplog: pytest.LogCaptureFixture,
                                                      capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    url = _with_password(pg_url, how)
    caplog.set_level(logging.DEBUG)
    ws = write(tmp_path / "ws", {"MEMORY.md": "- the boat is called Marlin\n"})
    monkeypatch.setenv("CLAWMEM_STATE_DIR", str(tmp_path / "state"))
    seen: list[str] = []
    with MemoryIndex(ws, agent_id="a", config={"store": {"url": url}, "provider": "none"}) as mem:
        mem.sync()
        assert mem.search("Marlin")[0].path == "MEMORY.md"
        st = mem.status()
        seen += [repr(mem), repr(mem.config), json.dumps(mem.config.to_dict()), repr(st), repr(mem._store),
                 repr(mem._stores.backend), mem._stores.backend.location, json.dumps(search_payload(mem, "Marlin"))]
        seen.append(json.dumps(st.to_dict()) if hasattr(st, "to_dict") else "")
    with MemoryIndex(None, agent_id="a", config={"store": {"url": url}, "provider": "none"}) as rep:
        seen += [repr(rep), repr(rep.status()), json.dumps(search_payload(rep, "Marlin"))]
    for argv in (["--workspace", str(ws), "--store", url, "--agent", "a", "status"],
                 ["--workspace", str(ws), "--store", url, "--agent", "a", "status", "--json"],
                 ["--store", url, "--agent", "a", "search", "Marlin"],
                 ["--store", url, "--agent", "a", "status", "--json"]):
        code = main(argv)
        out, err = capsys.readouterr()
        assert code == 0, err
        seen += [out, err]
    for text in seen:
        assert not _leaks(text), text
    assert not _leaks(caplog.text)


def _broken_urls(pg_url: str) -> list[str]:
    host = pg_url.split("?host=", 1)[1]
    return [
        f"postgresql://u:{PW}@127.0.0.1:1/db?connect_timeout=2",  # nothing listens
        f"postgresql://u@127.0.0.1:1/db?password={PW}&connect_timeout=2",
        f"postgresql://u@127.0.0.1:1/db?pass%77ord={PW}&connect_timeout=2",
        f"postgresql://u:{PW}%zz@127.0.0.1:1/db",  # libpq quotes the bad token: the password
        f"postgresql://u@127.0.0.1:1/db?password={PW}%zz",
        f"postgresql://u:{PW}@[::1/db",  # urlsplit refuses it; libpq quotes the whole URI
        f"postgresql://u:{PW}@127.0.0.1:notaport/db",
        f"postgresql://u:{PW}@h\udcff/db",  # an undecodable byte: the encoder quotes the whole URL
        f"postgresql://postgres:{PW}@/no_such_database?host={host}",  # the server answers, refusing
        f"postgresql://postgres:{PW.replace('zq', '%7A%71')}@/no_such_database?host={host}",
        f"postgresql://u@127.0.0.1:1/db?sslpassword={PW}&connect_timeout=2",
        f"postgresql://u@127.0.0.1:1/db?ssl%70assword={PW}&connect_timeout=2",
        f"postgresql://u@127.0.0.1:1/db?sslpassword={PW}%zz",  # libpq quotes the bad token
        f"postgresql://u@127.0.0.1:1/db?SSLPASSWORD={PW}",  # refused: libpq's keys are lower case
        f"postgresql://u@127.0.0.1:1/db?oauth_client_secret={PW}%zz",
    ]


def test_a_broken_store_url_never_shows_its_password(tmp_path: Path, pg_url: str, caplog: pytest.LogCaptureFixture,
                                                     capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    caplog.set_level(logging.DEBUG)
    ws = write(tmp_path / "ws", {"MEMORY.md": "- a note\n"})
    monkeypatch.setenv("CLAWMEM_STATE_DIR", str(tmp_path / "state"))
    for url in _broken_urls(pg_url):
        for workspace in (ws, None):
            with pytest.raises(ClawmemError) as err:
                MemoryIndex(workspace, agent_id="a", config={"store": {"url": url}, "provider": "none"})
            assert not _leaks(_error_text(err.value)), (url, _error_text(err.value))
        monkeypatch.setenv("CLAWMEM_STORE_URL", url)
        for argv in (["--agent", "a", "search", "x"], ["--workspace", str(ws), "status", "--json"]):
            code = main(argv)
            out, errtext = capsys.readouterr()
            assert code != 0 and not _leaks(out + errtext) and "Traceback" not in errtext, (url, out, errtext)
        monkeypatch.delenv("CLAWMEM_STORE_URL")
    assert not _leaks(caplog.text)


def test_a_store_lost_mid_session_never_shows_the_password(tmp_path: Path, pg_server: Any, pg_url: str,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    """The database goes away under a running MCP server: its error payloads name no password."""
    from conftest import drop_database

    caplog.set_level(logging.DEBUG)
    url = _with_password(pg_url, "userinfo")
    ws = write(tmp_path / "ws", {"MEMORY.md": "- the boat is called Marlin\n"})
    with MemoryIndex(ws, agent_id="a", config={"store": {"url": url}, "provider": "none"},
                     state_dir=tmp_path / "s") as mem:
        mem.sync()
        drop_database(pg_server, pg_url)
        from clawmem_core.store.postgres import PostgresBackend

        PostgresBackend.close_pools(url)
        pytest.importorskip("mcp")
        from clawmem_core.mcp_server import call_tool_payload

        payloads: list[Any] = [search_payload(mem, "Marlin"),
                               asyncio.run(call_tool_payload(mem, "memory_search", {"query": "Marlin"})),
                               asyncio.run(call_tool_payload(mem, "memory_write", {"text": "a note"}))]
        with pytest.raises(ClawmemError) as err:
            mem.sync(force=True)
        text = _error_text(err.value) + json.dumps(payloads)
    assert all(p.get("error") for p in payloads[:2]) and payloads[-1].get("indexed") is False, payloads
    assert not _leaks(text) and not _leaks(caplog.text)


def test_a_password_from_the_environment_never_shows(tmp_path: Path, pg_url: str, caplog: pytest.LogCaptureFixture,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    caplog.set_level(logging.DEBUG)
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"*:*:*:*:{PW}\n", encoding="utf-8")
    passfile.chmod(0o600)
    monkeypatch.setenv("PGPASSWORD", PW)
    monkeypatch.setenv("PGPASSFILE", str(passfile))
    ws = write(tmp_path / "ws", {"MEMORY.md": "- the boat is called Marlin\n"})
    with MemoryIndex(ws, agent_id="a", config={"store": {"url": pg_url}, "provider": "none"},
                     state_dir=tmp_path / "s") as mem:
        mem.sync()
        shown = [repr(mem._stores.backend), repr(mem.status()), json.dumps(search_payload(mem, "Marlin"))]
    for url in (f"postgresql://u@127.0.0.1:1/db?connect_timeout=2&passfile={passfile}",
                f"postgresql://u@[::1/db?x={PW}"):
        with pytest.raises(ClawmemError) as err:
            MemoryIndex(ws, agent_id="a", config={"store": {"url": url}, "provider": "none"}, state_dir=tmp_path / "s")
        shown.append(_error_text(err.value))
    for text in shown:
        assert not _leaks(text), text
    assert not _leaks(caplog.text)


# Every spelling of a secret that libpq's parsers accept (or quote back when refusing it), and what must be
# left of each URL once redacted.
_SPELLINGS = [
    (f"postgresql://u:{PW}@db:5432/app", "postgresql://u:***@db:5432/app"),
    (f"postgres://u:{PW.replace('zq', '%7A%71')}@db/app", "postgres://u:***@db/app"),
    (f"postgresql://u@db/app?password={PW}&sslmode=require", "postgresql://u@db/app?password=***&sslmode=require"),
    (f"postgresql://u@db/app?sslpassword={PW}", "postgresql://u@db/app?sslpassword=***"),
    (f"postgresql://u@db/app?ssl%70assword={PW}", "postgresql://u@db/app?ssl%70assword=***"),
    (f"postgresql://u@db/app?SSLPASSWORD={PW}", "postgresql://u@db/app?SSLPASSWORD=***"),
    (f"postgresql://u@db/app?sslpassword=a&sslpassword={PW}", "postgresql://u@db/app?sslpassword=***&sslpassword=***"),
    (f"postgresql://u:{PW}@db/app?sslkey=/k.pem&sslpassword={PW}&password={PW}",
     "postgresql://u:***@db/app?sslkey=/k.pem&sslpassword=***&password=***"),
    (f"postgresql://u@db/app?oauth_client_secret={PW}&oauth_client_id=cid",
     "postgresql://u@db/app?oauth_client_secret=***&oauth_client_id=cid"),
    (f"postgresql://u@db/app?scram_client_key={PW}&scram_server_key={PW}",
     "postgresql://u@db/app?scram_client_key=***&scram_server_key=***"),
    (f"host=db user=u password={PW} dbname=app", "host=db user=u password=*** dbname=app"),
    (f"host=db sslpassword = '{PW} x\\' y' dbname=app", "host=db sslpassword = *** dbname=app"),
    (f"host=db PASSWORD={PW}", "host=db PASSWORD=***"),
]


@pytest.mark.parametrize("url, redacted", _SPELLINGS)
def test_every_secret_parameter_is_redacted_in_every_spelling(url: str, redacted: str) -> None:
    from clawmem_core import MemoryConfig
    from clawmem_core.errors import ConfigError
    from clawmem_core.store.postgres import _passwords_of, redact_url

    assert redact_url(url) == redacted
    assert any(PW in pw for pw in _passwords_of(url))  # what error messages of the driver are cleaned of
    if url.startswith("postgres"):
        config = MemoryConfig.from_dict({"store": {"url": url}})
        shown = json.dumps(config.to_dict()) + repr(config) + repr(config.store)
        assert not _leaks(shown), shown
    else:  # a conninfo string is no store URL: refused without being echoed
        with pytest.raises(ConfigError) as err:
            MemoryConfig.from_dict({"store": {"url": url}})
        assert not _leaks(_error_text(err.value))
