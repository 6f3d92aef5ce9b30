"""The operator as users run it (mwms_kit.operator_harness: `python -m mwms_operator` with the CRD and RBAC
from manifests/, logged in as its ServiceAccount through a TokenRequest, so RBAC is enforced), against the
tier's cluster (a real node); the workers are stand-ins (tests/kit/mwms_kit/standin_worker.py) in pods of the
project's trainer image. Only fixtures here: what they call lives in tests/kit/mwms_kit/."""

from __future__ import annotations

import fnmatch
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mwms_dev.cluster import free_port
from mwms_kit.mlflow_server import MlflowServer
from mwms_kit.operator_harness import OperatorProcess, apply_operator_rbac, service_account_kubeconfig
from mwms_kit.shards import watched_namespaces
from mwms_kit.standin import standin_container
from mwms_kit.trainjobs import trainjob


@pytest.fixture(scope="module")
def operator_kubeconfig(
    cluster: Any, kubectl: Any, crd: None, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A kubeconfig of the operator's ServiceAccount, with the RBAC of manifests/ applied."""
    apply_operator_rbac(kubectl)
    return service_account_kubeconfig(kubectl, cluster, tmp_path_factory.mktemp("sa") / "operator.kubeconfig")


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
        # Tidy up while the operator runs (TrainJobs carry no finalizer: this works without it too); sharded,
        # only this shard's namespaces (the other shard's jobs are still running).
        for job_namespace in namespaces_of_trainjobs(kubectl):
            kubectl(
                "delete",
                "trainjobs",
                "--all",
                "-n",
                job_namespace,
                "--wait=true",
                "--timeout=60s",
                check=False,
            )
    finally:
        process.stop()
    log = process.log()
    # An RBAC denial reads `... is forbidden: User "system:serviceaccount:..." cannot <verb> ...`. (A 403 for
    # a namespace being terminated at a test's end is not one.)
    denied = [
        line for line in log.splitlines() if "forbidden: User" in line or "cannot " in line and "403" in line
    ]
    assert not denied, "the operator hit RBAC limits:\n" + "\n".join(denied[:20])


def namespaces_of_trainjobs(kubectl: Any) -> list[str]:
    """The namespaces holding TrainJobs that this process's operators serve (all of them unless sharded)."""
    listed = kubectl("get", "trainjobs", "-A", "-o", "jsonpath={.items[*].metadata.namespace}", check=False)
    glob = watched_namespaces()
    return sorted({ns for ns in listed.stdout.split() if glob is None or fnmatch.fnmatch(ns, glob)})


@pytest.fixture(scope="package")
def standin(trainer_image: str) -> dict[str, Any]:
    """The stand-in worker's container fields: the trainer image and a command running the stand-in."""
    return standin_container(trainer_image)


@pytest.fixture(scope="package")
def make_standin(standin: dict[str, Any]) -> Callable[..., dict[str, Any]]:
    """`make_standin(name, replicas=3, env={...}, container={...}, **spec)`: a TrainJob (mwms_kit.trainjobs)
    whose `trainer` container runs the stand-in worker instead of TensorFlow; `container` adds to or
    overrides its fields, `template` is the rest of the pod template."""

    def make(
        name: str,
        replicas: int = 3,
        *,
        env: dict[str, str] | None = None,
        container: dict[str, Any] | None = None,
        **spec: Any,
    ) -> dict[str, Any]:
        return trainjob(name, replicas, container={**standin, **(container or {})}, env=env or {}, **spec)

    return make


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
    """The pinned helm that hack/build/tools.sh links next to the test Python."""
    pinned = Path(sys.executable).parent / "helm"
    if not pinned.exists():
        pytest.fail("helm is missing next to the test Python: run `make tools` (hack/build/tools.sh)")
    return str(pinned)
