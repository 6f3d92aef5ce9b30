"""A tracking server that requires credentials, for tests: a reverse proxy in front of a real `mlflow server`
that answers 401 unless the request carries one of the accepted Authorization headers (None in them: a
request without one too), and records which header each request carried (a secured MLflow, as an ingress
with auth would make it). While `down`, it answers 503 to everything (the server behind it is away). A
request that `hold(method, path, body)` picks is never answered (a call its client dies in): see `holding`."""

from __future__ import annotations

import http.client
import threading
import urllib.parse
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class AuthProxy:
    def __init__(self, upstream: str, accepted: Iterable[str | None], *, host: str = "127.0.0.1") -> None:
        self.accepted = set(accepted)
        self.down = False
        self.hold: Callable[[str, str, bytes], bool] = lambda method, path, body: False
        self.holding, self.released = threading.Event(), threading.Event()
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Authorization)
        target = urllib.parse.urlsplit(upstream)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def forward(self) -> None:
                auth = self.headers.get("Authorization")
                proxy.requests.append((self.command, self.path, auth))
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if proxy.hold(self.command, self.path, body):
                    proxy.holding.set()
                    proxy.released.wait()
                    return
                if proxy.down:
                    self.send_response(503)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if auth not in proxy.accepted:
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Bearer realm="mlflow"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                upstream_connection = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
                headers = {"Content-Type": self.headers.get("Content-Type", "application/json")}
                upstream_connection.request(self.command, self.path, body=body or None, headers=headers)
                answer = upstream_connection.getresponse()
                data = answer.read()
                self.send_response(answer.status)
                self.send_header("Content-Type", answer.getheader("Content-Type", "application/json"))
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                upstream_connection.close()

            do_GET = do_POST = do_PUT = forward  # noqa: N815

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.uri = f"http://{host}:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()
