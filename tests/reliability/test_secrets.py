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


# Secret shapes that OpenClaw's short list let through (each: the text, the secret that must not survive, the
# exact masked text: a rule that leaks part of a secret fails).
_SHAPES = [
    ('{"api_key": "AbC123dEf456GhI789jKl0"}', "AbC123dEf456GhI789jKl0", '{"api_key": "***"}'),
    ('{"client_secret": "cs-9f8e7d6c5b4a3f2e1d0c"}', "cs-9f8e7d6c5b4a3f2e1d0c", '{"client_secret": "***"}'),
    ("password = 'correct horse battery staple'", "correct horse battery staple", "password = '***'"),
    ("db_password: 'hunter2 with spaces'", "hunter2 with spaces", "db_password: '***'"),
    ("stripe " + "sk_live_" + "51HqLyjWDarjtT1zdp7dcAbCdEf", "51HqLyjWDarjtT1zdp7dcAbCdEf", "stripe sk_live_***"),
    ("hugging face " + "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz012345", "AbCdEfGhIjKlMnOpQrStUvWxYz012345",
     "hugging face hf_***"),
    ("DATABASE_URL is postgres://admin:S3cr3tPw0rd@db.example.com:5432/app", "S3cr3tPw0rd",
     "DATABASE_URL is postgres://admin:***@db.example.com:5432/app"),
    ("mysql://root:toor-pass@127.0.0.1/db and redis://:r3disPass@cache:6379", "toor-pass",
     "mysql://root:***@127.0.0.1/db and redis://:***@cache:6379"),
    ("mysql://root:toor-pass@127.0.0.1/db and redis://:r3disPass@cache:6379", "r3disPass",
     "mysql://root:***@127.0.0.1/db and redis://:***@cache:6379"),
    ("aws " + "AKIA" + "IOSFODNN7EXAMPLE" + " key", "IOSFODNN7EXAMPLE", "aws AKIA*** key"),
    ("token eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
     "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U", "token ***"),
    ("token eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
     "eyJzdWIiOiIxMjM0NTY3ODkwIn0", "token ***"),
    ("remember: my password is Tr0ub4dor&3", "Tr0ub4dor&3", "remember: my password is ***"),
    ("the wifi passphrase was: 'purple monkey dishwasher'", "purple monkey dishwasher", "the wifi passphrase was: '***'"),
    ("the passphrase is correct horse battery staple", "correct horse battery staple", "the passphrase is ***"),
    ("我的密码是 mima2026xyz，别告诉别人", "mima2026xyz", "我的密码是 ***，别告诉别人"),
    ("gh token ghp_" + "A" * 36, "A" * 36, "gh token ghp_***"),
    ("slack xoxb-123456789012-abcdefghijklmnop", "abcdefghijklmnop", "slack xoxb-***"),
]

_ORDINARY = [
    "We met on 2026-03-01 and agreed the skeleton plan; sk-short stays; the price is 123456:12.",
    "I like jazz, my favourite colour is blue, and the key to the shed is under the mat.",
    "I forgot my password yesterday and reset it through the website.",
    "commit 3f786850e387550fdab836ed7e6dc881de23001b fixed the flaky test; see https://example.com/docs:intro",
    "Call Alice at +1 415 555 0100 or email alice@example.com about the API design review.",
    "我喜欢爵士乐，住在上海。周末我们去了杭州西湖，密切关注天气。",
    "关键是要先写测试，然后再修复问题；秘密花园这本书很好看。",
    "The token economy chapter, the secret of good coffee, and a keyboard shortcut list.",
]


@pytest.mark.parametrize("text, secret, masked", _SHAPES)
def test_common_secret_shapes_are_masked(text: str, secret: str, masked: str) -> None:
    from clawmem_core.masking import mask_secrets

    out = mask_secrets(text)
    assert secret not in out, out
    assert out == masked


@pytest.mark.parametrize("text", _ORDINARY)
def test_ordinary_text_is_not_masked(text: str) -> None:
    from clawmem_core.masking import mask_secrets

    assert mask_secrets(text) == text


def test_secret_shapes_never_reach_the_index(tmp_path: Path) -> None:
    """Every shape above, spoken in a session transcript, is masked in the SQLite file and in search results."""
    ws = make_workspace(tmp_path / "ws", 1, "m")
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    lines = [{"type": "message", "message": {"role": "user", "content": f"note {i}: {text}"}}
             for i, (text, _, _) in enumerate(_SHAPES)]
    (sessions / "a.jsonl").write_text("\n".join(json.dumps(x, ensure_ascii=False) for x in lines) + "\n")
    state = tmp_path / "state"
    cfg = MemoryConfig.from_dict({"sources": ["memory", "sessions"], "experimental": {"session_memory": True},
                                  "provider": "none"})
    with MemoryIndex(ws, config=cfg, state_dir=state, sessions_dir=sessions) as mem:
        mem.sync()
        hits = mem.search("note password token", max_results=50, min_score=0)
        shown = " ".join(h.snippet for h in hits)
    assert any(h.source == "sessions" for h in hits)
    raw = written_bytes(state)
    for _, secret, _ in _SHAPES:
        assert secret.encode() not in raw, f"{secret[:12]}... reached the index"
        assert secret not in shown
