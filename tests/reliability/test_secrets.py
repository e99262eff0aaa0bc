"""API keys never reach the index file, its WAL, the logs, the cache keys or error messages;
session transcripts are masked before indexing. Checked on the raw bytes of every file the index
writes, with a real HTTP server standing in for an OpenAI-compatible endpoint."""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest

from clawmem_core import MemoryConfig, MemoryIndex
from clawmem_core.errors import ClawmemError

from .conftest import make_workspace

KEY = "sk-proj-Zq7TESTKEYdoNotLeak0123456789abcdefABCDEF"


class _Handler(BaseHTTPRequestHandler):
    fail = False

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if type(self).fail:  # a hostile or careless server that echoes the key back
            out = json.dumps({"error": {"message": f"Incorrect API key provided: {self.headers.get('Authorization')}"}})
            self.send_response(401)
        else:
            inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
            data = [{"object": "embedding", "index": i, "embedding": [((len(t) + i) % 7) / 7.0 + 0.1] * 8}
                    for i, t in enumerate(inputs)]
            out = json.dumps({"object": "list", "data": data, "model": body["model"],
                              "usage": {"prompt_tokens": 1, "total_tokens": 1}})
            self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(out.encode())


@pytest.fixture
def server() -> Iterator[tuple[str, type[_Handler]]]:
    handler = type("Handler", (_Handler,), {"fail": False})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1", handler
    srv.shutdown()
    srv.server_close()


def written_bytes(state: Path) -> bytes:
    return b"".join(p.read_bytes() for p in state.rglob("*") if p.is_file())


def config(url: str, **extra: object) -> MemoryConfig:
    return MemoryConfig.from_dict({"provider": "openai", "remote": {"base_url": url, "api_key": KEY},
                                   "fallback": "none", **extra})


def test_api_key_never_written_or_logged(tmp_path: Path, server, caplog, monkeypatch) -> None:
    pytest.importorskip("openai")
    url, _ = server
    ws = make_workspace(tmp_path / "ws", 3, "s")
    state = tmp_path / "state"
    with caplog.at_level(logging.DEBUG):
        with MemoryIndex(ws, config=config(url), state_dir=state) as mem:
            mem.sync()
            assert mem.search("jazz espresso")
            status = repr(mem.status()) + repr(mem.provider_info()) + repr(mem.config)
    assert KEY.encode() not in written_bytes(state)
    assert KEY not in status
    assert all(KEY not in r.getMessage() for r in caplog.records)


def test_api_key_not_in_error_messages(tmp_path: Path, server, caplog) -> None:
    pytest.importorskip("openai")
    url, handler = server
    handler.fail = True
    ws = make_workspace(tmp_path / "ws", 2, "e")
    state = tmp_path / "state"
    with caplog.at_level(logging.DEBUG):
        with MemoryIndex(ws, config=config(url), state_dir=state) as mem:
            with pytest.raises(ClawmemError) as info:
                mem.sync()
    text = str(info.value) + repr(info.value) + "".join(str(a) for a in info.value.args)
    assert KEY not in text and KEY[-20:] not in text
    assert all(KEY[-20:] not in r.getMessage() for r in caplog.records)
    assert KEY.encode() not in written_bytes(state)


def test_session_transcripts_are_masked_in_the_index(tmp_path: Path) -> None:
    from clawmem_core.testing import HashEmbedder

    ws = make_workspace(tmp_path / "ws", 1, "m")
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    secrets = [KEY, "Bearer eyJhbGciOiJIUzI1NiJ9.c2VjcmV0LXRva2VuLXZhbHVl.abcDEF123456",
               "AIzaSyD-TESTKEY-abcdefghijklmnopqrstuv",
               "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7TESTKEY\n-----END RSA PRIVATE KEY-----"]
    lines = [{"type": "message", "message": {"role": "user", "content": [{"type": "text", "text": f"my key is {s} ok"}]}}
             for s in secrets]
    (sessions / "a.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    state = tmp_path / "state"
    cfg = MemoryConfig.from_dict({"sources": ["memory", "sessions"], "experimental": {"session_memory": True}})
    with MemoryIndex(ws, config=cfg, embedder=HashEmbedder(), state_dir=state, sessions_dir=sessions) as mem:
        report = mem.sync()
        assert report.files_indexed >= 2
        assert any(h.source == "sessions" for h in mem.search("my key is", max_results=10))
    raw = written_bytes(state)
    for s in (KEY, "c2VjcmV0LXRva2VuLXZhbHVl", "AIzaSyD-TESTKEY-abcdefghijklmnopqrstuv", "MIIEowIBAAKCAQEA7TESTKEY"):
        assert s.encode() not in raw, f"{s[:12]}... reached the index"


def test_truncated_private_key_is_masked(tmp_path: Path) -> None:
    from clawmem_core.sessions import parse_transcript

    rec = {"type": "message", "message": {"role": "user", "content": [
        {"type": "text", "text": "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7TESTKEYxyz"}]}}
    assert "MIIEowIBAAKCAQEA7TESTKEYxyz" not in parse_transcript(json.dumps(rec) + "\n").content
