"""Fixtures for the real-node tier (marker `node`): the local control plane with one real kubelet node
(containerd, runc, CNI bridge, kube-proxy, CoreDNS; mwms_dev.kubelet_node).

`real_cluster` (package: the node stops when this tier ends, not after the tiers that follow it): the
cluster, on subnet index MWMS_TEST_SUBNET_INDEX + 20; the integration tier's `cluster` (a real node too, on
the index itself) has stopped before it starts: one real node per machine. The project's images from
build/images/ (`make images`) are loaded when they exist. One node serves the whole tier: loading the ~1 GB
trainer image into containerd is most of its start. Its containerd root (several GB) is removed at the end
unless MWMS_TEST_NODE_STATE_DIR keeps it.
`node_kubectl`, `node_namespace`: as the integration tier's `kubectl` and `namespace`, for this cluster.
`busybox`: the name of the small test image hack/build/build-node.sh builds (sh, nslookup, wget, httpd).
`node_chain` (package): what users deploy, installed once for the tier: the Helm chart with the operator image
and bundled MLflow in a `restricted` namespace (mwms_dev.chain.Chain); skips without `make images`.
`operator_log`: a callable giving the chart's operator log, for printing when a test fails.
`node_operator` (module): the operator as a local process (`python -m mwms_operator`) against this cluster,
with the CRD from manifests/ (no image needed); `node_operator.log` is its log file.
`node_trainer_image`: the project's trainer image loaded on the node; skips without `make images`.
The e2e tier runs here (tests/node/test_node_chain.py, test_node_uninstall.py), but for README's commands
(tests/e2e/test_readme_commands.py), whose cluster-wide operator needs a cluster and real node of its own:
that node ends with its module and `real_cluster` with this package, so the two never overlap in a session.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="package")
def real_cluster(
    real_node_cluster: Callable[..., Any], subnet_index: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator:
    keep = os.environ.get("MWMS_TEST_NODE_STATE_DIR")
    state_dir = keep or tmp_path_factory.mktemp("real-node")
    with real_node_cluster("node", state_dir, subnet_index + 20, keep_nodes=bool(keep)) as local:
        yield local


@pytest.fixture(scope="package")
def real_node(real_cluster):
    return real_cluster.kubelet_nodes["node-1"]


@pytest.fixture(scope="package")
def busybox(real_node) -> str:
    return real_node.parts.image_names["busybox"]


@pytest.fixture(scope="package")
def node_kubectl(real_cluster, make_kubectl):
    return make_kubectl(real_cluster.kubeconfig)


@pytest.fixture
def node_namespace(node_kubectl) -> Iterator[str]:
    with node_kubectl.fresh_namespace("n") as name:
        yield name


@pytest.fixture(scope="module")
def node_operator(real_cluster, node_kubectl, tmp_path_factory) -> Iterator[SimpleNamespace]:
    from mwms_dev.cluster import free_port

    node_kubectl("apply", "-f", str(REPO / "manifests" / "crd.yaml"))
    node_kubectl("wait", "--for=condition=Established", "crd/trainjobs.mwms.dev", "--timeout=60s")
    path = tmp_path_factory.mktemp("operator") / "operator.log"
    log = path.open("wb")
    env = {**os.environ, "KUBECONFIG": str(real_cluster.kubeconfig), "MWMS_RECONCILE_INTERVAL_SECONDS": "1"}
    env.update(MWMS_METRICS_PORT=str(free_port()), MWMS_HEALTH_PORT=str(free_port()))
    env.pop("KUBERNETES_SERVICE_HOST", None)
    process = subprocess.Popen([sys.executable, "-m", "mwms_operator"], env=env, stdout=log, stderr=log)
    yield SimpleNamespace(log=path)
    node_kubectl("delete", "trainjobs", "--all", "-A", "--wait=false", check=False)
    process.terminate()
    process.wait(timeout=30)
    log.close()


@pytest.fixture(scope="package")
def node_trainer_image(real_node) -> str:
    from mwms_kit.standin import trainer_image

    return trainer_image(real_node.images())


@pytest.fixture(scope="package")
def node_chain(real_cluster, real_node, node_kubectl):
    from mwms_dev.chain import Chain
    from mwms_dev.devmode import tools_bin
    from mwms_dev.node_addons import real_node_chart_values
    from mwms_dev.node_parts import NodeError

    loaded = real_node.images()
    if not any("/mwms-operator:" in name for name in loaded):
        pytest.skip("no mwms-operator image on the node: run `make images` (build/images/*.oci.tar) first")
    try:
        values = real_node_chart_values(loaded)
    except NodeError as exc:
        pytest.skip(f"{exc}: run `make images` first")
    bins = tools_bin()
    operator_ns = "mwms-e2e"
    node_kubectl("create", "namespace", operator_ns)
    node_kubectl.restrict(operator_ns)
    chain = Chain(
        kubeconfig=real_cluster.kubeconfig,
        helm=str(bins / "helm"),
        kubectl=str(bins / "kubectl"),
        operator_namespace=operator_ns,
        # The host reaches MLflow at its pod IP on the bridge, so allow that Host header too.
        helm_values=["mlflow.enabled=true", "mlflow.extraAllowedHosts={10.*}", *values],
        timeout_s=900,
    )
    try:
        chain.install_chart()
    except Exception:
        print(read_operator_log(node_kubectl, operator_ns))
        raise
    yield chain
    node_kubectl("delete", "namespace", operator_ns, "--wait=false", check=False)


def read_operator_log(kubectl, namespace: str) -> str:
    """The operator container's log through the API server and the kubelet, as users read it."""
    done = kubectl(
        "logs", "-n", namespace, "-l", "app.kubernetes.io/component=operator", "--tail=200", check=False
    )
    return done.stdout + done.stderr


@pytest.fixture
def operator_log(node_kubectl, node_chain) -> Callable[[], str]:
    return lambda: read_operator_log(node_kubectl, node_chain.operator_namespace)
