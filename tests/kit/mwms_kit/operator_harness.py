"""The operator as users run it, for the integration tests and the benches alike: `python -m mwms_operator`
with the RBAC from manifests/, logged in as its ServiceAccount through a TokenRequest (so RBAC is enforced).

`kubectl` is any callable `kubectl(*args, check=True) -> CompletedProcess` with a cluster's admin rights;
`cluster` anything with `.server` and `.ca_file` (mwms_dev.cluster.LocalCluster)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from mwms_dev.cluster import free_port
from mwms_kit.shards import watched_namespaces

REPO = Path(__file__).resolve().parents[3]
OPERATOR_NAMESPACE = "mwms-system"
SERVICE_ACCOUNT = "mwms-operator"


class OperatorProcess:
    """One `python -m mwms_operator` subprocess at a time; its log accumulates across restarts."""

    def __init__(self, kubeconfig: Path, log_path: Path, extra_env: dict[str, str] | None = None) -> None:
        self.kubeconfig, self.log_path, self.extra_env = kubeconfig, log_path, dict(extra_env or {})
        self.metrics_port, self.health_port = free_port(), free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "MWMS_METRICS_PORT": str(self.metrics_port),
            "MWMS_HEALTH_PORT": str(self.health_port),
            "MWMS_RECONCILE_INTERVAL_SECONDS": "1",
            "MWMS_PROGRESS_INTERVAL_SECONDS": "2",
            "MWMS_LOG_LEVEL": "INFO",
            # Sharded, the shard's namespaces only: the other shard's jobs are its operators' (shards.py).
            **({"MWMS_WATCH_NAMESPACES": watched} if (watched := watched_namespaces()) else {}),
            **self.extra_env,
        }
        env.pop("KUBERNETES_SERVICE_HOST", None)
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mwms_operator"], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO
        )

    def metrics_text(self, timeout: float = 60.0) -> str:
        """The operator's /metrics page; waits (up to `timeout`) for the port to listen: a test that reads it
        right after start() must not race the operator's start-up."""
        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        while True:
            try:
                with urllib.request.urlopen(url, timeout=10) as answer:
                    return answer.read().decode()
            except (ConnectionError, urllib.error.URLError) as error:
                if isinstance(error, urllib.error.HTTPError) or time.monotonic() > deadline:
                    raise
                assert self.process is not None and self.process.poll() is None, "the operator exited"
                time.sleep(0.2)  # poll until it listens

    def kill(self) -> None:
        """SIGKILL: no graceful shutdown, like a node dying under the operator."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)
        self.process = None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
        self.process = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def service_account_kubeconfig(
    kubectl: Any,
    cluster: Any,
    path: Path,
    account: str = SERVICE_ACCOUNT,
    account_namespace: str = OPERATOR_NAMESPACE,
) -> Path:
    """A kubeconfig at `path` logged in as that ServiceAccount (a 2-hour token), so its rights are the
    account's, not the admin's."""
    token = kubectl("create", "token", account, "-n", account_namespace, "--duration=2h").stdout.strip()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "local",
                "cluster": {"server": cluster.server, "certificate-authority": str(cluster.ca_file)},
            }
        ],
        "users": [{"name": SERVICE_ACCOUNT, "user": {"token": token}}],
        "contexts": [{"name": "operator", "context": {"cluster": "local", "user": SERVICE_ACCOUNT}}],
        "current-context": "operator",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def apply_operator_rbac(kubectl: Any) -> None:
    """The operator's namespace, ServiceAccount and RBAC from manifests/."""
    if kubectl("get", "namespace", OPERATOR_NAMESPACE, check=False).returncode != 0:
        kubectl("create", "namespace", OPERATOR_NAMESPACE)
    kubectl("apply", "-f", str(REPO / "manifests" / "rbac.yaml"))
