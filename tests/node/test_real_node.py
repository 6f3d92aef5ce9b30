"""The real node itself: a pod runs in containerd and becomes Ready through the kubelet's probe; `kubectl
logs` and `exec` reach it through the API server; pods find each other through CoreDNS (a headless
Service, as TrainJob workers do) and reach a ClusterIP Service through kube-proxy; no name outside the
cluster resolves (nothing is forwarded upstream)."""

from __future__ import annotations

import ipaddress
import uuid

from mwms_dev.node_configs import pod_range
from node.node_support import exec_sh, http_get, wait_ready, web_pod, web_service


def test_pod_runs_in_containerd_and_logs_and_exec_work(
    real_cluster, node_kubectl, node_namespace, busybox, wait_for
):
    node_kubectl.apply(web_pod("solo", busybox), "-n", node_namespace)
    wait_ready(node_kubectl, node_namespace, "solo")
    pod = node_kubectl.json("get", "pod", "solo", "-n", node_namespace)
    assert pod["spec"]["nodeName"] == "node-1"
    (status,) = pod["status"]["containerStatuses"]
    assert status["containerID"].startswith("containerd://"), status
    first, last = pod_range(real_cluster.net)
    ip = ipaddress.ip_address(pod["status"]["podIP"])
    assert ipaddress.ip_address(first) <= ip <= ipaddress.ip_address(last), (
        "an IP from the CNI host-local range"
    )
    # The shim copies the container's output to its log on its own time: wait for the line, not for Ready.
    wait_for(
        lambda: "hello-from-solo" in node_kubectl("logs", "solo", "-n", node_namespace).stdout,
        timeout=30,
        what="solo's first line in `kubectl logs`",
    )
    out = exec_sh(node_kubectl, node_namespace, "solo", "id -u; echo $((6*7))").stdout.split()
    assert out == ["65532", "42"]


def test_pods_resolve_each_other_through_cluster_dns(node_kubectl, node_namespace, busybox):
    """What TrainJob workers rely on: `<hostname>.<subdomain>.<ns>.svc` of a headless Service."""
    node_kubectl.apply(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "peers"},
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": True,
                "selector": {"group": "peers"},
                "ports": [{"name": "http", "port": 8080}],
            },
        },
        "-n",
        node_namespace,
    )
    for i in range(2):
        node_kubectl.apply(
            web_pod(f"peer-{i}", busybox, labels={"group": "peers"}, hostname=f"peer-{i}", subdomain="peers"),
            "-n",
            node_namespace,
        )
    wait_ready(node_kubectl, node_namespace, "peer-0", "peer-1")
    ip0 = node_kubectl.json("get", "pod", "peer-0", "-n", node_namespace)["status"]["podIP"]
    resolv = exec_sh(node_kubectl, node_namespace, "peer-1", "cat /etc/resolv.conf").stdout
    assert "nameserver 10.96.0.10" in resolv
    assert f"search {node_namespace}.svc.cluster.local svc.cluster.local cluster.local" in resolv
    fqdn = f"peer-0.peers.{node_namespace}.svc.cluster.local"
    answer = exec_sh(node_kubectl, node_namespace, "peer-1", f"nslookup {fqdn}").stdout
    assert ip0 in answer, answer
    # No upstream: a name outside the cluster does not resolve (nothing is forwarded off the machine).
    outside = exec_sh(node_kubectl, node_namespace, "peer-1", "nslookup example.com", check=False)
    assert outside.returncode != 0, outside.stdout


def test_cluster_ip_service_reaches_a_pod_through_kube_proxy(node_kubectl, node_namespace, busybox):
    mark = uuid.uuid4().hex
    node_kubectl.apply(
        web_pod("backend", busybox, labels={"app": "backend"}, page=mark), "-n", node_namespace
    )
    node_kubectl.apply(web_pod("client", busybox), "-n", node_namespace)
    node_kubectl.apply(web_service("web", "backend"), "-n", node_namespace)
    wait_ready(node_kubectl, node_namespace, "backend", "client")
    service = node_kubectl.json("get", "service", "web", "-n", node_namespace)
    cluster_ip = service["spec"]["clusterIP"]
    assert ipaddress.ip_address(cluster_ip) in ipaddress.ip_network("10.96.0.0/16")
    assert http_get(node_kubectl, node_namespace, "client", cluster_ip, 80).strip() == mark
    # The Service's name through CoreDNS gives the same ClusterIP.
    fqdn = f"web.{node_namespace}.svc.cluster.local"
    assert cluster_ip in exec_sh(node_kubectl, node_namespace, "client", f"nslookup {fqdn}").stdout
