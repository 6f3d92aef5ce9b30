"""A second real node in the same cluster (multi-node scenarios, e.g. a lost node): node-2 has its own
kubelet, containerd and cgroup root, shares the bridge, kube-proxy and CoreDNS of node-1, and its pods get
IPs node-1 never hands out. Node-2 lives for this module only; the rest of the tier keeps one node."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from node.node_support import exec_sh, http_get, wait_ready, web_pod, web_service


@pytest.fixture(scope="module")
def node_2(real_cluster, node_kubectl) -> Iterator:
    node = real_cluster.start_kubelet_node("node-2")
    yield node
    real_cluster.stop_kubelet_node("node-2")
    node_kubectl("delete", "node", "node-2")


def pinned(pod: dict, node: str) -> dict:
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return pod


def test_a_pod_on_node_2_resolves_a_service_and_reaches_a_pod_on_node_1(
    node_2, node_kubectl, node_namespace, busybox
):
    mark = uuid.uuid4().hex
    backend = pinned(web_pod("backend", busybox, labels={"app": "backend"}, page=mark), "node-1")
    node_kubectl.apply(backend, "-n", node_namespace)
    node_kubectl.apply(pinned(web_pod("client", busybox), "node-2"), "-n", node_namespace)
    node_kubectl.apply(web_service("web", "backend"), "-n", node_namespace)
    wait_ready(node_kubectl, node_namespace, "backend", "client")
    names = ("backend", "client")
    pods = {name: node_kubectl.json("get", "pod", name, "-n", node_namespace) for name in names}
    assert [pods[name]["spec"]["nodeName"] for name in names] == ["node-1", "node-2"]
    # The two nodes' IPAM share one reservation directory: no pod IP is handed out twice.
    running = node_kubectl.json("get", "pods", "-A", "--field-selector=status.phase=Running")["items"]
    ips = [pod["status"]["podIP"] for pod in running if not pod["spec"].get("hostNetwork")]
    assert len(ips) == len(set(ips)), sorted(ips)
    # The client's container runs in node-2's own containerd.
    container = pods["client"]["status"]["containerStatuses"][0]["containerID"].removeprefix("containerd://")
    assert container in node_2.ctr("containers", "list", "--quiet").stdout.split()

    fqdn = f"web.{node_namespace}.svc.cluster.local"
    cluster_ip = node_kubectl.json("get", "service", "web", "-n", node_namespace)["spec"]["clusterIP"]
    assert cluster_ip in exec_sh(node_kubectl, node_namespace, "client", f"nslookup {fqdn}").stdout
    assert http_get(node_kubectl, node_namespace, "client", cluster_ip, 80).strip() == mark
