"""Helpers of the tf tests: real TensorFlow worker processes over real sockets, a real `mlflow server`.

Groups are started with the same environment the operator gives pods (mwms_trainer.local.worker_envs, which
calls mwms_contract.trainjob.trainer_env), on free 127.0.0.1 ports. Sized for 2 cores: small groups, few
epochs, except where a test checks the seed's defaults.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mwms_contract.trainjob import TrainJobSpec
from mwms_kit.pid_namespace import start_as_pid1
from mwms_kit.tables import write_parts  # noqa: F401  (the tf tests' tables; tests/support for other tiers too)
from mwms_kit.trainjobs import trainjob
from mwms_operator.render.spec import parse_trainjob
from mwms_operator.settings import OperatorConfig
from mwms_trainer import local

REPO = Path(__file__).resolve().parents[2]
POISON = REPO / "tests" / "data" / "trainer" / "poison"  # an `mlflow` that refuses to import
# How long a test waits on workers before it calls them hung: a bound, never a timing. TensorFlow's import
# alone took ~2 min per worker at CI's load (~20 on 2 cores), so a group's start and fit can take many.
HANG_SECONDS = 900
TEST_SECONDS = 1800  # a tf test's own bound (pytest-timeout): up to three group starts


def trainjob_spec(
    name: str,
    replicas: int,
    trainer: Mapping[str, Any] | None,
    *,
    checkpoint: bool | Mapping[str, Any] = False,
    startup_timeout: int = 120,
    code: Mapping[str, Any] | None = None,
) -> TrainJobSpec:
    """`code` (spec.code) instead of `trainer`: give the group MWMS_CODE_DIR, where the files are.
    `checkpoint`: True for a volume (a folder shared by the job's local workers), or a spec.checkpoint."""
    spec: dict[str, Any] = {"code": dict(code)} if code is not None else {"trainer": dict(trainer or {})}
    if checkpoint is True:
        spec["checkpoint"] = {"hostPath": {"path": "/unused-locally"}}
    elif checkpoint:
        spec["checkpoint"] = dict(checkpoint)
    body = trainjob(
        name,
        replicas,
        mlflow={"experiment": name},
        runPolicy={"startupTimeoutSeconds": startup_timeout},
        **spec,
    )
    return parse_trainjob(body, OperatorConfig().spec_defaults())


@dataclass
class Group:
    """One (re)start of a job's workers; stdout+stderr of worker i in dir/worker-i.log."""

    dir: Path
    envs: list[dict[str, str]]
    procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(
        self, indices: Sequence[int] | None = None, poison_non_chief: bool = True, as_pid1: bool = False
    ) -> Group:
        """as_pid1: each worker is PID 1 of its own PID namespace, as in a container (procs[i] is unshare)."""
        for i in range(len(self.envs)) if indices is None else indices:
            env = dict(self.envs[i])
            if poison_non_chief and i > 0:
                env["PYTHONPATH"] = str(POISON)
            cmd = [sys.executable, "-m", "mwms_trainer"]
            with open(self.dir / f"worker-{i}.log", "ab") as log:
                if as_pid1:
                    self.procs[i] = start_as_pid1(cmd, env, log)
                else:
                    self.procs[i] = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        return self

    def wait(self, timeout: float) -> dict[int, int]:
        try:
            return {i: p.wait(timeout=timeout) for i, p in self.procs.items()}
        finally:
            self.kill()

    def kill(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()

    def log(self, i: int) -> str:
        return (self.dir / f"worker-{i}.log").read_text(errors="replace")

    def termination(self, i: int) -> str:
        path = Path(self.envs[i]["MWMS_TERMINATION_LOG"])
        return path.read_text() if path.exists() else ""

    def summary(self) -> dict[str, Any]:
        return json.loads(self.termination(0))


def group(
    spec: TrainJobSpec,
    tracking_uri: str,
    job_dir: Path,
    *,
    uid: str | None = None,
    restart_count: int = 0,
    **env: str,
) -> Group:
    job_dir.mkdir(parents=True, exist_ok=True)
    envs = local.worker_envs(
        spec,
        job_name=spec.experiment,
        namespace="tests",
        uid=uid or str(uuid.uuid4()),
        tracking_uri=tracking_uri,
        job_dir=job_dir,
        restart_count=restart_count,
    )
    for e in envs:
        e.update(env)
    return Group(job_dir, envs)


def runs_of(client: Any, experiment: str) -> list[Any]:
    exp = client.get_experiment_by_name(experiment)
    return [] if exp is None else client.search_runs([exp.experiment_id])


def models_of(experiment_id: str, run_id: str, tracking_uri: str) -> list[Any]:
    import mlflow

    mlflow.set_tracking_uri(tracking_uri)
    return mlflow.search_logged_models(
        experiment_ids=[experiment_id], filter_string=f"source_run_id = '{run_id}'", output_format="list"
    )


class StallingProxy:
    """An HTTP proxy to a real MLflow (or S3) server that holds the requests `stall(method, path)` picks,
    unanswered, and answers those `unavailable(method, path)` picks with 503 (an outage on the server's side).

    `stalled` is set when the first held one arrives: the caller then knows the trainer is inside that call.
    `requests` records (method, path) of every request. keep_host: pass the client's Host header on (S3's
    signatures cover it).
    """

    def __init__(
        self,
        target: str,
        stall: Any,
        unavailable: Any = lambda method, path: False,
        keep_host: bool = False,
    ) -> None:
        import http.client
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from urllib.parse import urlsplit

        self.stalled = threading.Event()
        self.requests: list[tuple[str, str]] = []
        self._release = threading.Event()
        netloc = urlsplit(target).netloc
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                proxy.requests.append((self.command, self.path))
                if stall(self.command, self.path):
                    proxy.stalled.set()
                    proxy._release.wait(120)
                    self.close_connection = True
                    return
                if unavailable(self.command, self.path):
                    self.send_response(503)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                dropped = ("connection",) if keep_host else ("host", "connection")
                headers = {k: v for k, v in self.headers.items() if k.lower() not in dropped}
                conn = http.client.HTTPConnection(netloc, timeout=60)
                conn.request(self.command, self.path, body=body, headers=headers)
                answer = conn.getresponse()
                data = answer.read()
                self.send_response(answer.status)
                for k, v in answer.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                # A HEAD answer has no body but says how long the object is.
                length = answer.getheader("Content-Length", "0") if self.command == "HEAD" else len(data)
                self.send_header("Content-Length", str(length))
                self.end_headers()
                self.wfile.write(data)
                conn.close()

            do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()
