"""Fixtures for the multikueue tier: Kueue's MultiKueue on two local control planes, as an administrator sets
it up (docs/operations.md#multikueue).

`worker` (package): a control plane with one real kubelet node and the project's images, on subnet index
MWMS_TEST_SUBNET_INDEX (the integration tier's own cluster has stopped by then: one real node per machine),
with real Kueue (plain-pod integration on) and the operator. `manager` (package): a control plane without a
node, on the spare subnet index, with Kueue as a MultiKueue manager that dispatches TrainJobs with its generic
adapter, and the operator, which makes each job's Workload there. Both operators run as their ServiceAccount,
so RBAC is enforced; the worker's runs the workers and reports progress from `mlflow_uri`, a real `mlflow
server` on the worker's pod bridge. `queue` (function): a namespace of the same name on both clusters with a
LocalQueue `QUEUE`: on the manager a ClusterQueue with the MultiKueue admission check that dispatches to the
worker, on the worker a ClusterQueue with CPU for one job of two 100m workers (WORKER_CPU), and Kueue's pod
webhook on in the worker's namespace (so workers that were a pod group of their own would wait for a quota the
job's Workload already holds)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from multikueue.multikueue_support import MANAGER_QUEUE, QUEUE, WORKER_QUEUE, active
from mwms_contract import names
from mwms_kit.mlflow_server import MlflowServer
from mwms_kit.operator_harness import OperatorProcess, apply_operator_rbac, service_account_kubeconfig
from mwms_kit.standin import trainer_image

REPO = Path(__file__).resolve().parents[2]
WORKER_CLUSTER = "worker"  # the MultiKueueCluster's name
ADMISSION_CHECK = "multikueue"
FLAVOR = "default-flavor"
WORKER_CPU = "200m"  # one job of two 100m workers at a time
TRAINJOB_KIND = f"{names.KIND}.{names.VERSION}.{names.GROUP}"  # Kueue's `Kind.version.group`


@pytest.fixture(scope="package")
def worker(
    real_node_cluster: Callable[..., Any], subnet_index: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    with real_node_cluster("mk-worker", tmp_path_factory.mktemp("mk-worker"), subnet_index) as local:
        yield local


@pytest.fixture(scope="package")
def manager(
    control_plane_cluster: Callable[..., Any],
    spare_subnet_index: int,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Any]:
    with control_plane_cluster(
        "mk-manager", tmp_path_factory.mktemp("mk-manager"), spare_subnet_index
    ) as local:
        yield local


@pytest.fixture(scope="package")
def worker_kubectl(worker: Any, make_kubectl: Any) -> Any:
    return make_kubectl(worker.kubeconfig)


@pytest.fixture(scope="package")
def manager_kubectl(manager: Any, make_kubectl: Any) -> Any:
    return make_kubectl(manager.kubeconfig)


def kubectl_binary() -> str:
    return os.environ.get("MWMS_KUBECTL") or str(Path(sys.executable).parent / "kubectl")


def install_crd(kubectl: Any, wait_for: Any) -> None:
    kubectl("apply", "-f", str(REPO / "manifests" / "crd.yaml"))
    wait_for(
        lambda: kubectl("get", "trainjobs", "-A", check=False).returncode == 0,
        timeout=60,
        what="the TrainJob resource to be served",
    )


def start_operator(cluster: Any, kubectl: Any, workdir: Path, env: dict[str, str]) -> OperatorProcess:
    apply_operator_rbac(kubectl)
    kubeconfig = service_account_kubeconfig(kubectl, cluster, workdir / "operator.kubeconfig")
    process = OperatorProcess(kubeconfig, workdir / "operator.log", env)
    process.start()
    return process


def assert_no_rbac_denial(process: OperatorProcess) -> None:
    denied = [line for line in process.log().splitlines() if "forbidden: User" in line]
    assert not denied, "the operator hit RBAC limits:\n" + "\n".join(denied[:20])


@pytest.fixture(scope="package")
def mlflow_uri(worker: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real `mlflow server` the worker's pods and its operator reach (artifacts proxied)."""
    host = worker.pod_api_host
    with MlflowServer(tmp_path_factory.mktemp("mlflow"), host=host, allowed_hosts=[host]) as server:
        yield server.url


@pytest.fixture(scope="package")
def worker_side(
    worker: Any, worker_kubectl: Any, mlflow_uri: str, wait_for: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SimpleNamespace]:
    """The worker cluster's Kueue (a plain one) and operator, and its ClusterQueue."""
    from mwms_dev.kueue import Kueue

    install_crd(worker_kubectl, wait_for)
    kueue = Kueue(worker.kubeconfig, kubectl_binary(), tmp_path_factory.mktemp("worker-kueue")).start()
    operator = start_operator(
        worker,
        worker_kubectl,
        tmp_path_factory.mktemp("worker-operator"),
        {"MWMS_ALLOWED_TRACKING_URIS": mlflow_uri},
    )
    worker_kubectl.apply(
        [
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}},
            cluster_queue(WORKER_QUEUE, WORKER_CPU),
        ]
    )
    try:
        yield SimpleNamespace(kueue=kueue, operator=operator)
    finally:
        operator.stop()
        kueue.stop()
    assert_no_rbac_denial(operator)


@pytest.fixture(scope="package")
def manager_side(
    manager: Any,
    manager_kubectl: Any,
    worker: Any,
    worker_side: SimpleNamespace,
    wait_for: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[SimpleNamespace]:
    """The manager cluster's Kueue, a MultiKueue manager for TrainJobs connected to the worker, its
    ClusterQueue with the MultiKueue admission check, and the operator (which runs no job here)."""
    from mwms_dev.kueue import Kueue

    install_crd(manager_kubectl, wait_for)
    kueue = Kueue(
        manager.kubeconfig,
        kubectl_binary(),
        tmp_path_factory.mktemp("manager-kueue"),
        multikueue_kinds=(TRAINJOB_KIND,),
    ).start()
    # The worker's admin credentials, inline (the worker cluster's own kubeconfig is self-contained).
    kueue.connect_worker(WORKER_CLUSTER, yaml.safe_load(Path(worker.kubeconfig).read_text()))
    operator = start_operator(manager, manager_kubectl, tmp_path_factory.mktemp("manager-operator"), {})
    manager_kubectl.apply(
        [
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}},
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "MultiKueueConfig",
                "metadata": {"name": "to-worker"},
                "spec": {"clusters": [WORKER_CLUSTER]},
            },
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "AdmissionCheck",
                "metadata": {"name": ADMISSION_CHECK},
                "spec": {
                    "controllerName": "kueue.x-k8s.io/multikueue",
                    "parameters": {
                        "apiGroup": "kueue.x-k8s.io",
                        "kind": "MultiKueueConfig",
                        "name": "to-worker",
                    },
                },
            },
            cluster_queue(MANAGER_QUEUE, WORKER_CPU, admission_check=ADMISSION_CHECK),
        ]
    )
    for kind, name in (("multikueuecluster", WORKER_CLUSTER), ("admissioncheck", ADMISSION_CHECK)):
        wait_for(
            lambda kind=kind, name=name: active(manager_kubectl, kind, name),
            timeout=120,
            what=f"{kind} {name} to be active (Kueue's log: {kueue.log_path})",
        )
    try:
        yield SimpleNamespace(kueue=kueue, operator=operator)
    finally:
        operator.stop()
        kueue.stop()
    assert_no_rbac_denial(operator)


def cluster_queue(name: str, cpu: str, admission_check: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["cpu"],
                "flavors": [{"name": FLAVOR, "resources": [{"name": "cpu", "nominalQuota": cpu}]}],
            }
        ],
    }
    if admission_check:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": admission_check}]}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": spec,
    }


@pytest.fixture
def queue(
    manager_kubectl: Any, worker_kubectl: Any, manager_side: SimpleNamespace, wait_for: Any
) -> Iterator[str]:
    """A namespace of one name on both clusters, with the LocalQueue QUEUE on each (MultiKueue dispatches a
    job to the same namespace and queue on the worker)."""
    with manager_kubectl.fresh_namespace("mk") as namespace:
        worker_kubectl("create", "namespace", namespace)
        worker_kubectl("label", "namespace", namespace, "mwms.dev/kueue=enabled")  # Kueue's pod webhook
        for kubectl, cluster_queue_name in ((manager_kubectl, MANAGER_QUEUE), (worker_kubectl, WORKER_QUEUE)):
            kubectl.apply(
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "LocalQueue",
                    "metadata": {"name": QUEUE, "namespace": namespace},
                    "spec": {"clusterQueue": cluster_queue_name},
                }
            )
            wait_for(
                lambda kubectl=kubectl: active(kubectl, "localqueue", QUEUE, namespace),
                timeout=60,
                what=f"the LocalQueue {QUEUE} to be active",
            )
        try:
            yield namespace
        finally:
            manager_kubectl("delete", "trainjobs", "--all", "-n", namespace, "--timeout=60s", check=False)
            worker_kubectl("delete", "trainjobs", "--all", "-n", namespace, "--timeout=60s", check=False)
            worker_kubectl("delete", "namespace", namespace, "--wait=false", check=False)


@pytest.fixture(scope="package")
def worker_trainer_image(worker: Any) -> str:
    return trainer_image(worker.kubelet_nodes["node-1"].images())


@pytest.fixture
def logs(manager_side: SimpleNamespace, worker_side: SimpleNamespace) -> Callable[[], str]:
    """The tails of both Kueues' and both operators' logs, for a failing test's message."""

    def tails() -> str:
        parts = {
            "manager kueue": manager_side.kueue.log_tail(3000),
            "manager operator": manager_side.operator.log()[-3000:],
            "worker kueue": worker_side.kueue.log_tail(3000),
            "worker operator": worker_side.operator.log()[-3000:],
        }
        return "\n".join(f"--- {name}:\n{text}" for name, text in parts.items())

    return tails
