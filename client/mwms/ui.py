"""`mwms ui NAME`: the job's run in the MLflow UI from wherever kubectl works. A tracking server this machine
reaches is named as it is; one it does not, a Service of the cluster, is served on a local port through the
API server's service proxy (tracking_server.py) until it is closed (Ctrl-C), as `kubectl port-forward` does.

The local server answers only requests addressed to it by a loopback name (127.0.0.1, localhost, [::1]), as
`kubectl proxy` does: it carries the user's kubeconfig credentials, and a web page must not reach it under
another host name (DNS rebinding). Only the tracking server's paths are forwarded, never another API path.
"""

from __future__ import annotations

import http.server
import threading
from dataclasses import dataclass, field
from typing import Any

from mwms.kube import SubmitError
from mwms.tracking_server import TrackingServer

LOOPBACK = ("127.0.0.1", "localhost", "[::1]")
# What is passed on of the browser's request and of the tracking server's answer (no cookies, no hop-by-hop
# headers, never an Authorization: the API server takes the user's own credentials).
REQUEST_HEADERS = ("accept", "accept-encoding", "accept-language", "content-type", "if-none-match", "origin")
ANSWER_HEADERS = (
    "content-type",
    "content-encoding",
    "content-length",
    "cache-control",
    "etag",
    "last-modified",
    "location",
)
CHUNK = 64 * 1024


@dataclass
class RunPage:
    """The run's page of the MLflow UI: `url`, and, when it is served here, the local server (close())."""

    url: str
    server: http.server.ThreadingHTTPServer | None = None
    thread: threading.Thread | None = field(default=None, repr=False)

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def __enter__(self) -> RunPage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_page(
    tracking: TrackingServer, experiment_id: str | None, run_id: str, address: str, port: int
) -> RunPage:
    """The run's page: at the tracking server's own address when this machine reaches it, else served on
    `address`:`port` (0: a free port) through the API server's service proxy."""
    if tracking.run(run_id) is None:  # also finds out how this machine reaches the server
        raise SubmitError(f"{tracking.where} has no run {run_id}")
    if not tracking.proxied:
        return RunPage(tracking.run_page(tracking.uri, experiment_id, run_id))
    server = http.server.ThreadingHTTPServer((address, port), _handler(tracking))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.2,), name="mwms-ui", daemon=True)
    thread.start()
    shown = f"[{address}]" if ":" in address else address
    base = f"http://{shown}:{server.server_address[1]}"
    return RunPage(tracking.run_page(base, experiment_id, run_id), server, thread)


def _handler(tracking: TrackingServer) -> type[http.server.BaseHTTPRequestHandler]:
    class Forward(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def forward(self) -> None:
            host = (self.headers.get("Host") or "").rsplit(":", 1)[0].lower()
            if host not in LOOPBACK:
                self.answer(403, b"mwms ui answers only at 127.0.0.1, localhost or [::1]\n")
                return
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            # A page the API server's proxy rewrote links the proxy's own path: it is the same place.
            path = self.path.removeprefix(tracking.proxy_prefix)
            headers = {k: v for k, v in self.headers.items() if k.lower() in REQUEST_HEADERS}
            try:
                answer = tracking.request(self.command, path, body, stream=True, headers=headers)
            except SubmitError as e:
                self.answer(502, f"mwms ui: {e}\n".encode())
                return
            self.send_response(answer.status)
            kept = {k: v for k, v in answer.headers.items() if k in ANSWER_HEADERS}
            chunked = "content-length" not in kept
            for name, value in kept.items():
                self.send_header(name, value)
            if chunked:
                self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.copy(answer, chunked)

        def copy(self, answer: Any, chunked: bool) -> None:
            chunks = (
                [answer.body] if answer.stream is None else answer.stream.stream(CHUNK, decode_content=False)
            )
            try:
                for chunk in chunks:
                    if chunk:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
                if chunked:
                    self.wfile.write(b"0\r\n\r\n")
            except OSError:  # the browser went away
                self.close_connection = True
            finally:
                if answer.stream is not None:
                    answer.stream.release_conn()

        def answer(self, status: int, text: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = forward

        def log_message(self, *args: Any) -> None:
            pass

    return Forward
