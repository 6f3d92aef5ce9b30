"""A stand-in for an API server: a real HTTP server on 127.0.0.1 (TLS if asked) that answers each request as
a test says and records what it was sent. It serves the tests of the operator's API client (kube/client.py,
with the API server's real Status bodies copied verbatim), of the client's (a followed log is a chunked
Stream) and, answering as `mlflow()` does, those of every MLflow client of the operator and the trainer."""

from __future__ import annotations

import http.server
import json
import ssl
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: Any  # parsed JSON, else the raw bytes (None when empty)
    client: tuple[str, int]  # the client's address: one per TCP connection

    @property
    def route(self) -> str:
        """The path without its query."""
        return self.path.split("?", 1)[0]


@dataclass
class Stream:
    """A body sent as it is made (chunked, as a followed pod log is): each chunk in turn, then its end, or,
    with `cut`, the connection closed instead (as when it is reset mid-stream; a reset itself could drop
    what the client has not read yet)."""

    chunks: Iterable[bytes]
    cut: bool = False


@dataclass
class FakeApiServer:
    """Answers every request with `answer(seen)`: (status, body) or (status, body, headers), a body of bytes
    sent as it is, a Stream chunk by chunk, anything else as JSON; records what it was sent."""

    url: str = ""
    answer: Callable[[Seen], tuple[Any, ...]] = lambda seen: (200, {})
    seen: list[Seen] = field(default_factory=list)
    drop_after_answer: bool = False  # close the connection without saying so (an idle timeout)

    def reply(self, status: int, body: Any = None) -> None:
        self.answer = lambda seen: (status, body if body is not None else {})

    def refuse(self, status: int, message: str) -> None:
        self.reply(status, {"kind": "Status", "status": "Failure", "message": message, "code": status})


def serve(fake: FakeApiServer, tls: ssl.SSLContext | None = None) -> Iterator[FakeApiServer]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive

        def handle_one(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            seen = Seen(self.command, self.path, dict(self.headers), parsed(raw), self.client_address)
            fake.seen.append(seen)
            status, body, *more = fake.answer(seen)
            if isinstance(body, Stream):
                self.stream(status, body)
                return
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (more[0] if more else {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
            if fake.drop_after_answer:
                self.close_connection = True

        def stream(self, status: int, body: Stream) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for chunk in body.chunks:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            if body.cut:
                self.close_connection = True
            else:
                self.wfile.write(b"0\r\n\r\n")

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = handle_one

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    fake.url = f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()


served = contextmanager(serve)  # `with served(FakeApiServer(...)) as fake:`


def parsed(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def mlflow(run: dict[str, Any] | None = None, experiment_id: str = "3") -> Callable[[Seen], tuple[int, Any]]:
    """An answer as MLflow's tracking server gives to the calls the operator and the trainer make: the
    experiment by name, the run search (finding `run`, if any), a run's update and an artifact's upload."""

    def answer(seen: Seen) -> tuple[int, Any]:
        if seen.method == "GET":
            return 200, {"experiment": {"experiment_id": experiment_id}}
        if seen.route.endswith("/runs/search"):
            return 200, {"runs": [run]} if run else {}
        return 200, {}

    return answer


def kubeconfig_for(fake: FakeApiServer, path: Any, namespace: str, token: str = "t0k3n") -> Any:
    """A kubeconfig at `path` whose user (a bearer `token`) talks to `fake` in `namespace`; its path."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": fake.url}}],
        "users": [{"name": "dev", "user": {"token": token}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "dev", "namespace": namespace}}],
        "current-context": "fake",
    }
    path.write_text(json.dumps(config))
    return path
