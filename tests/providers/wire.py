"""Test helpers: a scriptable HTTP server on 127.0.0.1 that speaks whatever wire protocol a test routes to it.

Tests register handlers per (method, path regex); each handler gets a :class:`Request` and
returns a :class:`Reply`. Every request is recorded (method, path, query, headers, body) so tests
can check exactly what the real client libraries sent.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

API_KEY = "sk-test-SECRET-7f3a9c1e5b"


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8"))

    def header(self, name: str) -> str | None:
        for k, v in self.headers.items():
            if k.lower() == name.lower():
                return v
        return None


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    raw: bytes | None = None
    content_type: str = "application/json"
    #: Hold the reply until this event is set (at most ``delay`` seconds, 30 when no delay is given).
    hold: threading.Event | None = None


Handler = Callable[[Request], Reply]


class FakeServer:
    """Threaded HTTP server; ``route(method, pattern, handler)`` or ``script(...)`` a sequence."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        #: The requests answered so far (their reply about to be written back), in the order answered.
        self.answered: list[Request] = []
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = []
        self._lock = threading.Lock()
        server = self

        class _H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # silence stderr
                pass

            def setup(self) -> None:
                super().setup()
                # Headers and body go out in separate writes: without this, Nagle's algorithm
                # and delayed ACKs add ~40 ms to every keep-alive request.
                self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                parts = urlsplit(self.path)
                req = Request(self.command, parts.path, parse_qs(parts.query), dict(self.headers.items()), body)
                with server._lock:
                    server.requests.append(req)
                reply = server._dispatch(req)
                if reply.hold is not None:
                    reply.hold.wait(reply.delay or 30.0)
                elif reply.delay:
                    time.sleep(reply.delay)
                if reply.raw is not None:
                    data = reply.raw
                elif reply.body is None:
                    data = b""
                elif isinstance(reply.body, (bytes, str)):
                    data = reply.body.encode() if isinstance(reply.body, str) else reply.body
                else:
                    data = json.dumps(reply.body).encode()
                with server._lock:  # before the write: a client may act on the answer before this thread runs on
                    server.answered.append(req)
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", reply.content_type)
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_GET = do_POST = do_PUT = do_DELETE = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _H)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def route(self, method: str, pattern: str, handler: Handler | Reply) -> None:
        h = handler if callable(handler) else (lambda _req, r=handler: r)
        self._routes.insert(0, (method.upper(), re.compile(pattern), h))

    def script(self, method: str, pattern: str, replies: list[Reply | Handler], then: Handler | Reply | None = None) -> None:
        """Answer successive matching requests with ``replies`` in order, then with ``then``."""
        queue = list(replies)
        lock = threading.Lock()

        def handler(req: Request) -> Reply:
            with lock:
                item = queue.pop(0) if queue else then
            if item is None:
                return Reply(500, {"error": {"message": "script exhausted"}})
            return item(req) if callable(item) else item

        self.route(method, pattern, handler)

    def _dispatch(self, req: Request) -> Reply:
        for method, pattern, handler in list(self._routes):
            if method == req.method and pattern.fullmatch(req.path):
                try:
                    return handler(req)
                except Exception as exc:  # noqa: BLE001 - surface handler bugs as 599
                    return Reply(599, {"error": {"message": f"test handler failed: {exc!r}"}})
        return Reply(404, {"error": {"message": f"no route for {req.method} {req.path}"}})

    def calls(self, method: str | None = None, path: str | None = None) -> list[Request]:
        with self._lock:
            reqs = list(self.requests)
        return [r for r in reqs if (method is None or r.method == method) and (path is None or re.fullmatch(path, r.path))]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@dataclass
class SleepRecorder:
    """Stands in for ``time.sleep``/``asyncio.sleep``: records delays, returns at once."""

    delays: list[float] = field(default_factory=list)

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)

    async def asleep(self, seconds: float) -> None:
        self.delays.append(seconds)


def vec(seed: int, dims: int = 4) -> list[float]:
    """A deterministic, distinct test vector."""
    return [float(seed + 1), float(dims - seed % dims), 0.5, -0.25 * (seed + 1)][:dims]


def multipart_parts(req: Request) -> list[tuple[dict[str, str], bytes]]:
    """Split a multipart (form-data or related) request body into (headers, payload) parts."""
    import email.parser
    import email.policy

    ctype = req.header("Content-Type") or ""
    raw = b"Content-Type: " + ctype.encode() + b"\r\nMIME-Version: 1.0\r\n\r\n" + req.body
    msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(raw)
    parts = []
    for part in msg.iter_parts():
        payload = part.get_payload(decode=True) or b""
        parts.append(({k.lower(): str(v) for k, v in part.items()}, payload))
    return parts


def jsonl(payload: bytes) -> list[Any]:
    return [json.loads(line) for line in payload.decode("utf-8").splitlines() if line.strip()]
