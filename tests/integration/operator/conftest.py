"""The operator as users run it: `python -m mwms_operator` with the CRD and RBAC from manifests/, logged in
as its ServiceAccount through a TokenRequest (so RBAC is enforced), against the tier's cluster (a real node);
the workers are stand-ins (tests/support/standin_worker.py) in pods of the project's trainer image."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.mlflow_server import MlflowServer
from support.standin import standin_container

REPO = Path(__file__).resolve().parents[3]
OPERATOR_NAMESPACE = "mwms-system"
SERVICE_ACCOUNT = "mwms-operator"


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
            **self.extra_env,
        }
        env.pop("KUBERNETES_SERVICE_HOST", None)
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mwms_operator"], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO
        )

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


@pytest.fixture(scope="module")
def operator_kubeconfig(
    cluster: Any, kubectl: Any, crd: None, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A kubeconfig of the operator's ServiceAccount, with the RBAC of manifests/ applied."""
    apply_operator_rbac(kubectl)
    return service_account_kubeconfig(kubectl, cluster, tmp_path_factory.mktemp("sa") / "operator.kubeconfig")


@pytest.fixture(scope="module")
def crd(kubectl: Any, wait_for: Any) -> None:
    kubectl("apply", "-f", str(REPO / "manifests" / "crd.yaml"))
    # Served once discovery knows it (kubectl wait races the CRD's first status).
    wait_for(
        lambda: kubectl("get", "trainjobs", "-A", check=False).returncode == 0,
        timeout=60,
        what="the TrainJob resource to be served",
    )


@pytest.fixture(scope="module")
def operator_env() -> dict[str, str]:
    """Extra settings for the module's operator (a test module overrides this fixture to change them)."""
    return {}


@pytest.fixture(scope="session")
def mlflow_port() -> int:
    """The port of the test MLflow server (`mlflow_uri`), known before it starts: the operator allows it."""
    return free_port()


@pytest.fixture(scope="module")
def operator(
    cluster: Any,
    kubectl: Any,
    crd: None,
    operator_env: dict[str, str],
    mlflow_port: int,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[OperatorProcess]:
    apply_operator_rbac(kubectl)
    workdir = tmp_path_factory.mktemp("operator")
    kubeconfig = service_account_kubeconfig(kubectl, cluster, workdir / "operator.kubeconfig")
    # The operator must run with its own rights, not the admin's.
    whoami = kubectl("auth", "can-i", "get", "secrets", "-A", f"--kubeconfig={kubeconfig}", check=False)
    assert whoami.stdout.strip() == "no", "the operator's ServiceAccount must not read secrets"
    # The operator reads progress only from allowed tracking servers: the tests' MLflow server is one.
    allowed = {"MWMS_ALLOWED_TRACKING_URIS": f"http://{cluster.pod_api_host}:{mlflow_port}"}
    process = OperatorProcess(kubeconfig, workdir / "operator.log", {**allowed, **operator_env})
    process.start()
    try:
        yield process
        # Tidy up while the operator runs (TrainJobs carry no finalizer: this works without it too).
        kubectl("delete", "trainjobs", "--all", "-A", "--wait=true", "--timeout=60s", check=False)
    finally:
        process.stop()
    log = process.log()
    # An RBAC denial reads `... is forbidden: User "system:serviceaccount:..." cannot <verb> ...`. (A 403 for
    # a namespace being terminated at a test's end is not one.)
    denied = [
        line for line in log.splitlines() if "forbidden: User" in line or "cannot " in line and "403" in line
    ]
    assert not denied, "the operator hit RBAC limits:\n" + "\n".join(denied[:20])


@pytest.fixture(scope="package")
def standin(trainer_image: str) -> dict[str, Any]:
    """The stand-in worker's container fields: the trainer image and a command running the stand-in."""
    return standin_container(trainer_image)


@pytest.fixture(scope="package")
def make_standin(standin: dict[str, Any]) -> Callable[..., dict]:
    """`make_standin(name, replicas, env={...}, **spec)`: see standin_trainjob."""
    return functools.partial(standin_trainjob, standin)


def standin_trainjob(
    standin: dict[str, Any], name: str, replicas: int = 3, *, env: dict[str, str] | None = None, **spec: Any
) -> dict:
    """A TrainJob whose `trainer` container runs the stand-in worker (`standin`: image and command) instead
    of TensorFlow; `template={"container": {...}, "spec": {...}}` adds to the container and the pod spec."""
    template = spec.pop("template", {})
    container = {
        "name": "trainer",
        **standin,
        "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
    }
    container.update(template.pop("container", {}))
    template.setdefault("spec", {})["containers"] = [container]
    return {
        "apiVersion": "mwms.dev/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "template": template, **spec},
    }


@pytest.fixture(scope="module")
def mlflow_uri(cluster: Any, mlflow_port: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real `mlflow server` on the pod bridge's gateway, reachable from pods and from the operator. Its
    artifacts are proxied (`mlflow-artifacts:`): a worker's container cannot write to this machine's disk."""
    server = MlflowServer(
        tmp_path_factory.mktemp("mlflow"),
        host=cluster.pod_api_host,
        port=mlflow_port,
        allowed_hosts=[cluster.pod_api_host],
    )
    with server:
        yield server.url


@pytest.fixture
def start_operator(cluster: Any, kubectl: Any, tmp_path: Path) -> Iterator[Any]:
    """`start_operator(account, account_namespace, env)`: another `python -m mwms_operator`, logged in as
    that ServiceAccount; stopped at the end of the test (read its `.log()` after `.stop()`)."""
    started: list[OperatorProcess] = []

    def start(account: str, account_namespace: str, env: dict[str, str]) -> OperatorProcess:
        kubeconfig = service_account_kubeconfig(
            kubectl, cluster, tmp_path / f"{account}.kubeconfig", account, account_namespace
        )
        process = OperatorProcess(kubeconfig, tmp_path / f"{account}-{len(started)}.log", env)
        process.start()
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


@pytest.fixture
def account_kubeconfig(cluster: Any, kubectl: Any, tmp_path: Path) -> Any:
    """`account_kubeconfig(account, account_namespace)`: a kubeconfig logged in as that ServiceAccount, so a
    client run with it has that account's rights, not the admin's."""
    return lambda account, account_namespace: service_account_kubeconfig(
        kubectl, cluster, tmp_path / f"{account}.kubeconfig", account, account_namespace
    )


@pytest.fixture(scope="session")
def helm_binary() -> str:
    """The pinned helm that hack/tools.sh links next to the test Python."""
    pinned = Path(sys.executable).parent / "helm"
    if not pinned.exists():
        pytest.fail("helm is missing next to the test Python: run `make tools` (hack/tools.sh)")
    return str(pinned)
