"""A write that appended is reported as done, even when indexing it failed afterwards (issue: a retrying agent
wrote the note twice). Python API, tool payload and CLI, with a real OpenAI client against a local server
that is down (answers 400) and then comes back."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest

from clawmem_core import MemoryConfig, MemoryIndex
from clawmem_core.memory_write import write_payload

from .conftest import make_workspace


class _Handler(BaseHTTPRequestHandler):
    down = True

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if type(self).down:
            out = json.dumps({"error": {"message": "the embedding service is down for maintenance",
                                        "type": "invalid_request_error"}})
            self.send_response(400)
        else:
            inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
            data = [{"object": "embedding", "index": i, "embedding": [float(len(t) % 5 + 1), 1.0, float(i % 3)]}
                    for i, t in enumerate(inputs)]
            out = json.dumps({"object": "list", "data": data, "model": body["model"],
                              "usage": {"prompt_tokens": 1, "total_tokens": 1}})
            self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(out.encode())


@pytest.fixture
def provider() -> Iterator[tuple[str, type[_Handler]]]:
    pytest.importorskip("openai")
    handler = type("Handler", (_Handler,), {"down": False})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1", handler
    srv.shutdown()
    srv.server_close()


def _config(url: str) -> dict[str, object]:
    return {"provider": "openai", "remote": {"base_url": url, "api_key": "sk-test-write-outcome-0000"},
            "fallback": "none", "sync": {"on_search": False}}


def test_write_reports_the_append_when_indexing_fails(tmp_path: Path, provider) -> None:
    url, handler = provider
    ws = make_workspace(tmp_path / "ws", 2, "w")
    with MemoryIndex(ws, config=MemoryConfig.from_dict(_config(url)), state_dir=tmp_path / "state") as mem:
        mem.sync()
        handler.down = True
        result = mem.write("- The heron nests by the old mill.")
        assert result.indexed is False
        assert result.index_error and "down for maintenance" in result.index_error
        assert result.path.read_text(encoding="utf-8").count("heron nests") == 1

        payload = write_payload(mem, "- The otter family moved downstream.")
        assert "disabled" not in payload and "error" not in payload
        assert payload["indexed"] is False and "Do not write it again" in payload["warning"]
        assert payload["path"] == result.relative_to(ws) and payload["startLine"] > result.end_line
        assert "down for maintenance" in payload["indexError"]

        handler.down = False  # the provider is back: the next sync indexes both notes
        mem.sync()
        assert {h.path for h in mem.search("heron nests old mill", min_score=0)} >= {result.relative_to(ws)}
        assert mem.search("otter family downstream", min_score=0)
        ok = write_payload(mem, "- The kingfisher returned.")
        assert ok["indexed"] is True and "warning" not in ok
    text = result.path.read_text(encoding="utf-8")
    assert text.count("heron nests") == 1 and text.count("otter family") == 1


def test_cli_write_exits_zero_with_a_warning_when_indexing_fails(tmp_path: Path, provider, capsys) -> None:
    from clawmem_core.cli import main

    url, handler = provider
    handler.down = True
    ws = make_workspace(tmp_path / "ws", 1, "c")
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(_config(url)))
    code = main(["--workspace", str(ws), "--config", str(cfg), "write", "--json", "- Ravens remember faces."])
    out, err = capsys.readouterr()
    assert code == 0, err
    payload = json.loads(out)
    assert payload["indexed"] is False and payload["path"].startswith("memory/")
    assert "warning" in err and "indexing failed" in err
    assert (ws / payload["path"]).read_text(encoding="utf-8").count("Ravens remember faces") == 1
