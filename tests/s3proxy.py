"""A misbehaving S3 endpoint for tests: an HTTP proxy on 127.0.0.1 in front of
a real S3 server (SeaweedFS) that can

* answer a seeded share of GETs and LISTs with ``503 SlowDown``, as S3 does
  above 5,500 GETs/s per prefix (``slowdown_share``);
* drop the ``Range`` header, as a server that ignores ranges would, so the
  whole object comes back with 200 (``ignore_range``);
* answer every request itself with a fixed status and S3 error code
  (``answer``), the way a hostile or broken server might.

It forwards everything else unchanged over real TCP, so both of S3Store's
readers (boto3 and obstore) are tested through their own HTTP stacks.
"""

from __future__ import annotations

import http.client
import http.server
import random
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager

_HOP_HEADERS = frozenset({"transfer-encoding", "connection", "content-length", "keep-alive"})


def _error_xml(code: str) -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
        f"<Message>injected by tests/s3proxy.py</Message></Error>"
    ).encode()


class S3Proxy(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: str, *, seed: int = 1) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.upstream = urllib.parse.urlsplit(upstream)
        self.slowdown_share = 0.0
        self.ignore_range = False
        self.answer: tuple[int, str] | None = None
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.refused = 0  # 503 SlowDown answers sent
        self.forwarded = 0

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def refuse_now(self, method: str) -> bool:
        if method not in ("GET", "HEAD") or self.slowdown_share <= 0:
            return False
        with self._lock:
            if self._rng.random() < self.slowdown_share:
                self.refused += 1
                return True
            return False


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: S3Proxy

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _reply(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.send_response(status)
        for k, v in headers:
            if k.lower() not in _HOP_HEADERS:
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        proxy = self.server
        if proxy.answer is not None:
            status, code = proxy.answer
            self._reply(status, [("Content-Type", "application/xml")], _error_xml(code))
            return
        if proxy.refuse_now(self.command):
            self._reply(503, [("Content-Type", "application/xml")], _error_xml("SlowDown"))
            return
        headers = dict(self.headers.items())
        if proxy.ignore_range:
            headers = {k: v for k, v in headers.items() if k.lower() != "range"}
        up = proxy.upstream
        conn = http.client.HTTPConnection(up.hostname or "127.0.0.1", up.port, timeout=30)
        try:
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            with proxy._lock:
                proxy.forwarded += 1
            self._reply(resp.status, resp.getheaders(), data)
        finally:
            conn.close()

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle


@contextmanager
def s3_proxy(upstream: str, *, seed: int = 1) -> Iterator[S3Proxy]:
    proxy = S3Proxy(upstream, seed=seed)
    thread = threading.Thread(target=proxy.serve_forever, name="s3proxy", daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        proxy.shutdown()
        proxy.server_close()
        thread.join(timeout=5)
