"""The real node's default StorageClass `standard`, as kind ships it: rancher's local-path-provisioner
(hack/build/build-node.sh builds its image) makes each PersistentVolume a directory under the node's own
directory, created and removed by a helper pod that runs the ConfigMap's setup/teardown scripts.

Pure: the objects, as (collection path, object) pairs in the order they are created.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

NAMESPACE = "local-path-storage"
STORAGE_CLASS = "standard"
PROVISIONER = "rancher.io/local-path"
SERVICE_ACCOUNT = "local-path-provisioner-service-account"
HELPER_POD = """apiVersion: v1
kind: Pod
metadata:
  name: helper-pod
spec:
  priorityClassName: system-node-critical
  tolerations:
    - key: node.kubernetes.io/disk-pressure
      operator: Exists
      effect: NoSchedule
  containers:
  - name: helper-pod
    image: {image}
    imagePullPolicy: IfNotPresent
    # The volumes' directory is the host's, owned by root: the helper makes and removes them as root.
    securityContext:
      runAsUser: 0
      runAsGroup: 0
"""
SETUP = '#!/bin/sh\nset -eu\nmkdir -m 0777 -p "$VOL_DIR"\n'
TEARDOWN = '#!/bin/sh\nset -eu\nrm -rf "$VOL_DIR"\n'


def local_path_objects(image: str, helper_image: str, volumes_dir: Path) -> list[tuple[str, dict[str, Any]]]:
    """deploy/local-path-storage.yaml of the provisioner's module, with our images, `volumes_dir` as every
    node's path and its StorageClass named `standard` and marked the default."""
    ns = NAMESPACE
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    subjects = [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": ns}]
    labels = {"app": "local-path-provisioner"}
    config = {"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": [str(volumes_dir)]}]}
    container = {
        "name": "local-path-provisioner",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/local-path-provisioner", "--debug", "start", "--config", "/etc/config/config.json"],
        "volumeMounts": [{"name": "config-volume", "mountPath": "/etc/config/"}],
        "env": [
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "CONFIG_MOUNT_PATH", "value": "/etc/config/"},
        ],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    return [
        ("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        (
            f"/api/v1/namespaces/{ns}/serviceaccounts",
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": SERVICE_ACCOUNT, "namespace": ns},
            },
        ),
        (
            f"{rbac}/namespaces/{ns}/roles",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": "local-path-provisioner-role", "namespace": ns},
                "rules": [
                    {
                        "apiGroups": [""],
                        "resources": ["pods"],
                        "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"],
                    }
                ],
            },
        ),
        (
            f"{rbac}/clusterroles",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": "local-path-provisioner-role"},
                "rules": [
                    {
                        "apiGroups": [""],
                        "resources": ["nodes", "persistentvolumeclaims", "configmaps", "pods", "pods/log"],
                        "verbs": ["get", "list", "watch"],
                    },
                    {
                        "apiGroups": [""],
                        "resources": ["persistentvolumes"],
                        "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"],
                    },
                    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
                    {
                        "apiGroups": ["storage.k8s.io"],
                        "resources": ["storageclasses"],
                        "verbs": ["get", "list", "watch"],
                    },
                ],
            },
        ),
        (
            f"{rbac}/namespaces/{ns}/rolebindings",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "local-path-provisioner-bind", "namespace": ns},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "local-path-provisioner-role",
                },
                "subjects": subjects,
            },
        ),
        (
            f"{rbac}/clusterrolebindings",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "local-path-provisioner-bind"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "local-path-provisioner-role",
                },
                "subjects": subjects,
            },
        ),
        (
            f"/api/v1/namespaces/{ns}/configmaps",
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "local-path-config", "namespace": ns},
                "data": {
                    "config.json": json.dumps(config),
                    "setup": SETUP,
                    "teardown": TEARDOWN,
                    "helperPod.yaml": HELPER_POD.format(image=helper_image),
                },
            },
        ),
        (
            f"/apis/apps/v1/namespaces/{ns}/deployments",
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "local-path-provisioner", "namespace": ns},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "serviceAccountName": SERVICE_ACCOUNT,
                            "securityContext": {
                                "runAsNonRoot": True,
                                "runAsUser": 65532,
                                "runAsGroup": 65532,
                                "seccompProfile": {"type": "RuntimeDefault"},
                            },
                            "containers": [container],
                            "volumes": [
                                {"name": "config-volume", "configMap": {"name": "local-path-config"}}
                            ],
                        },
                    },
                },
            },
        ),
        (
            "/apis/storage.k8s.io/v1/storageclasses",
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {
                    "name": STORAGE_CLASS,
                    "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
                },
                "provisioner": PROVISIONER,
                # The volume is a directory of the node the pod lands on: bind once the pod is scheduled.
                "volumeBindingMode": "WaitForFirstConsumer",
                "reclaimPolicy": "Delete",
            },
        ),
    ]
