"""Pure: what a real node installs into its cluster besides itself, and the chart values that fit it: the
CoreDNS add-on's objects (its Corefile beside them, so the port it listens on is said in one place) and the
Helm values for a node whose images were loaded, not pulled. The volume provisioner's objects are
mwms_dev.local_path's."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mwms_dev import network
from mwms_dev.node_configs import CLUSTER_DOMAIN, dns_service_ip
from mwms_dev.node_parts import NodeError

DNS_PORT = 1053  # CoreDNS listens unprivileged; the kube-dns Service maps 53 to it


def corefile() -> str:
    """Cluster names only: no `forward`, so a name outside cluster.local is refused, never sent upstream."""
    return f""".:{DNS_PORT} {{
    errors
    health :8080
    ready :8181
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        pods insecure
        ttl 5
    }}
    cache 5
    loop
}}
"""


def coredns_objects(net: network.PodNetwork, image: str) -> list[tuple[str, dict[str, Any]]]:
    """(collection path, object) for the DNS add-on, as kubeadm installs it (names kube-dns/coredns)."""
    ns = "kube-system"
    labels = {"k8s-app": "kube-dns"}
    return [
        (
            "/api/v1/namespaces/kube-system/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "coredns", "namespace": ns}},
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": "system:coredns"},
                "rules": [
                    {
                        "apiGroups": [""],
                        "resources": ["endpoints", "services", "pods", "namespaces"],
                        "verbs": ["list", "watch"],
                    },
                    {
                        "apiGroups": ["discovery.k8s.io"],
                        "resources": ["endpointslices"],
                        "verbs": ["list", "watch"],
                    },
                ],
            },
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "system:coredns"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "system:coredns",
                },
                "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": ns}],
            },
        ),
        (
            "/api/v1/namespaces/kube-system/configmaps",
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "coredns", "namespace": ns},
                "data": {"Corefile": corefile()},
            },
        ),
        (
            "/apis/apps/v1/namespaces/kube-system/deployments",
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "coredns", "namespace": ns, "labels": labels},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "serviceAccountName": "coredns",
                            "priorityClassName": "system-cluster-critical",
                            "dnsPolicy": "Default",
                            "securityContext": {
                                "runAsNonRoot": True,
                                "runAsUser": 65532,
                                "runAsGroup": 65532,
                                "seccompProfile": {"type": "RuntimeDefault"},
                            },
                            "containers": [
                                {
                                    "name": "coredns",
                                    "image": image,
                                    "imagePullPolicy": "IfNotPresent",
                                    "args": ["-conf", "/etc/coredns/Corefile"],
                                    "ports": [
                                        {"name": "dns", "containerPort": DNS_PORT, "protocol": "UDP"},
                                        {"name": "dns-tcp", "containerPort": DNS_PORT, "protocol": "TCP"},
                                    ],
                                    "volumeMounts": [
                                        {"name": "config", "mountPath": "/etc/coredns", "readOnly": True}
                                    ],
                                    "readinessProbe": {
                                        "httpGet": {"path": "/ready", "port": 8181},
                                        "periodSeconds": 1,
                                    },
                                    "livenessProbe": {
                                        "httpGet": {"path": "/health", "port": 8080},
                                        "initialDelaySeconds": 10,
                                    },
                                    "resources": {
                                        "requests": {"cpu": "50m", "memory": "64Mi"},
                                        "limits": {"memory": "170Mi"},
                                    },
                                    "securityContext": {
                                        "allowPrivilegeEscalation": False,
                                        "readOnlyRootFilesystem": True,
                                        "capabilities": {"drop": ["ALL"]},
                                    },
                                }
                            ],
                            "volumes": [{"name": "config", "configMap": {"name": "coredns"}}],
                        },
                    },
                },
            },
        ),
        (
            "/api/v1/namespaces/kube-system/services",
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "kube-dns", "namespace": ns, "labels": labels},
                "spec": {
                    "selector": labels,
                    "clusterIP": dns_service_ip(net),
                    "ports": [
                        {"name": "dns", "port": 53, "targetPort": DNS_PORT, "protocol": "UDP"},
                        {"name": "dns-tcp", "port": 53, "targetPort": DNS_PORT, "protocol": "TCP"},
                    ],
                },
            },
        ),
    ]


def real_node_chart_values(loaded_images: Iterable[str]) -> list[str]:
    """Helm `--set` values for the chart on a real node whose images were loaded, not pulled: the bundled
    MLflow server runs from our trainer image (it holds the same mlflow; the public image cannot be pulled
    here). Its PVC gets a volume from the node's default StorageClass."""
    trainer = next(
        (name for name in loaded_images if name.split("@")[0].rsplit(":", 1)[0].endswith("/mwms-trainer")),
        None,
    )
    if trainer is None:
        raise NodeError("no mwms-trainer image is loaded on the node (make images)")
    repository, tag = trainer.rsplit(":", 1)
    return [
        f"mlflow.image.repository={repository}",
        f"mlflow.image.tag={tag}",
    ]
