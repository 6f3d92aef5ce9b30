"""A real `mlflow server` for tests: sqlite backend, proxied artifacts (disk or S3), one worker, a free port.

Usage: `with MlflowServer(tmp_dir) as server: server.url`; or start()/stop() from a session fixture.
`host` is the address it listens on; `allowed_hosts` adds Host headers beyond MLflow's default (localhost and
private IPs), e.g. `mlflow.<ns>.svc.cluster.local:5000` when pods reach it by a Service name (`mlflow server`
answers 403 for Host headers it does not know).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Self

START_TIMEOUT_SECONDS = 300  # seconds: a few on an idle machine, minutes on 2 loaded cores


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def stop_group(process: subprocess.Popen[bytes] | None, grace: float) -> None:
    """SIGTERM a server started with start_new_session (its whole process group), SIGKILL if it lingers."""
    if process is None or process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, 15)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, 9)
        process.wait(timeout=15)


class ServerProcess:
    """A server in a process group of its own, its output in `log_path`; `with Server(...) as server:`."""

    process: subprocess.Popen[bytes] | None
    log_path: Path
    stop_grace = 15.0  # seconds from SIGTERM to SIGKILL

    def start(self) -> Self:
        raise NotImplementedError

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    def stop(self) -> None:
        """Stop the server's whole process group (gunicorn's or uvicorn's children too)."""
        stop_group(self.process, self.stop_grace)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class MlflowServer(ServerProcess):
    def __init__(
        self,
        root: Path,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        allowed_hosts: Sequence[str] = (),
        artifacts_destination: str | None = None,
        env: Mapping[str, str] | None = None,
        python: str = sys.executable,
    ) -> None:
        self.root = Path(root)
        self.host = host
        self.port = port or free_port(host)
        self.allowed_hosts = list(allowed_hosts)
        # Where the proxied artifacts go: a directory under root, or e.g. s3://bucket/prefix (with `env`
        # holding the server's own S3 settings: workers log through the proxy and need none).
        self.artifacts_destination = artifacts_destination or str((self.root / "artifacts").resolve())
        # As the chart runs it: without MLflow's job runner (8 more processes, for features no test uses).
        self.env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", **(env or {})}
        self.python = python  # the server's environment (s3_server.mlflow_s3_python has boto3)
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = self.root / "mlflow-server.log"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> MlflowServer:
        self.root.mkdir(parents=True, exist_ok=True)
        cmd = [
            self.python, "-m", "mlflow", "server",
            "--backend-store-uri", f"sqlite:///{(self.root / 'mlflow.db').resolve()}",
            "--artifacts-destination", self.artifacts_destination,
            "--host", self.host,
            "--port", str(self.port),
            "--workers", "1",
        ]  # fmt: skip
        if self.allowed_hosts:
            defaults = ["localhost", "127.0.0.1", f"localhost:{self.port}", f"127.0.0.1:{self.port}"]
            cmd += ["--allowed-hosts", ",".join([*defaults, f"{self.host}:{self.port}", *self.allowed_hosts])]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.root,
                start_new_session=True,
                env=self.env,
            )
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mlflow server exited {self.process.returncode}: {self.log_tail()}")
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{self.url}/health", timeout=2) as answer,
            ):
                if answer.status == 200:
                    return self
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"mlflow server not healthy after {START_TIMEOUT_SECONDS}s: {self.log_tail()}")
