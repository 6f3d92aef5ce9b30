"""The kubelet's `/containerLogs` endpoint for the local node agent: `kubectl logs [-f] [--previous]`.

The API server proxies `kubectl logs` to https://<node InternalIP>:<daemonEndpoints.kubeletEndpoint.Port>.
Our local cluster does not give the API server a kubelet CA or client cert, so it neither checks this
server's (self-signed) certificate nor presents one: the endpoint is read-only and listens only on the
bridge gateway, a project-made address. Nothing else of the kubelet API (exec, attach, port-forward) is
served.
"""

from __future__ import annotations

import contextlib
import logging
import ssl
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

log = logging.getLogger("mwms_dev.nodeagent")

FOLLOW_POLL_SECONDS = 0.3


def log_path(
    state_dir: Path, namespace: str, pod: str, container: str, previous: bool = False
) -> Path | None:
    """Where the agent keeps a container's output; None for names that could leave the pods directory."""
    for part in (namespace, pod, container):
        if not part or part in (".", "..") or "/" in part or "\x00" in part:
            return None
    suffix = ".previous.log" if previous else ".log"
    return state_dir / "pods" / namespace / pod / f"{container}{suffix}"


def tail_lines(data: bytes, lines: int) -> bytes:
    if lines <= 0:
        return b""
    parts = data.splitlines(keepends=True)
    return b"".join(parts[-lines:])


class LogServer:
    def __init__(
        self, host: str, state_dir: Path, running: Callable[[str, str], bool], cert: Path, key: Path
    ):
        """`running(namespace, pod)`: whether the pod's container may still write (ends a `follow`)."""
        self.state_dir, self.running = state_dir, running
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server API
                server.handle(self)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - keep the agent log clean
                pass

        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        self.httpd.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]

    def start(self) -> None:
        threading.Thread(target=self.httpd.serve_forever, name="logs", daemon=True).start()

    def stop(self) -> None:
        self.httpd.shutdown()

    def handle(self, req: BaseHTTPRequestHandler) -> None:
        url = urlsplit(req.path)
        parts = url.path.strip("/").split("/")
        if len(parts) != 4 or parts[0] != "containerLogs":
            req.send_error(404, "only /containerLogs/<namespace>/<pod>/<container> is served")
            return
        query = parse_qs(url.query)

        def flag(name: str) -> bool:
            return query.get(name, ["false"])[0] in ("true", "1")

        namespace, pod, container = parts[1:]
        path = log_path(self.state_dir, namespace, pod, container, previous=flag("previous"))
        if path is None or not path.is_file():
            req.send_error(404, f"no log for container {container!r} of pod {namespace}/{pod}")
            return
        data = path.read_bytes()
        offset = len(data)
        if "tailLines" in query:
            with contextlib.suppress(ValueError):
                data = tail_lines(data, int(query["tailLines"][0]))
        if "limitBytes" in query:
            with contextlib.suppress(ValueError):
                data = data[: int(query["limitBytes"][0])]
        req.send_response(200)
        req.send_header("Content-Type", "text/plain; charset=utf-8")
        req.end_headers()
        try:
            req.wfile.write(data)
            req.wfile.flush()
            while flag("follow") and not flag("previous"):
                time.sleep(FOLLOW_POLL_SECONDS)
                with open(path, "rb") as f:
                    f.seek(offset)
                    chunk = f.read()
                if chunk:
                    offset += len(chunk)
                    req.wfile.write(chunk)
                    req.wfile.flush()
                elif not self.running(namespace, pod):
                    break
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            pass  # the client went away
