"""The two manifests our kind node image ships where kind's own are (hack/build/build-kind-node.sh writes):

- /kind/manifests/default-cni.yaml: kind applies it at `kind create cluster`, after Go-templating
  `{{ .PodSubnet }}` (the "would you kindly template this file" marker asks for that). Instead of kindnetd, a
  DaemonSet writes a bridge + host-local CNI config over the pod subnet onto the node, from our busybox image.
  One range for the whole subnet: it serves a one-node cluster (the README's), not several nodes.
- /kind/manifests/default-storage.yaml: the default StorageClass `standard` with rancher's local-path
  provisioner, the objects the real node installs (mwms_dev.local_path), with kind's volume directory.

Usage: python -m mwms_dev.kind_node OUT_DIR BUSYBOX_IMAGE PAUSE_IMAGE LOCAL_PATH_IMAGE
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

from mwms_dev.local_path import local_path_objects

# kind's markers: the manifest is a Go template, and kind patches nothing else into it.
TEMPLATE_MARKER = "# would you kindly template this file"
CNI_CONF = "10-mwms-bridge.conflist"
# Where kind's own storage manifest keeps the volumes: /var is the node container's volume.
VOLUMES_DIR = Path("/var/local-path-provisioner")


def cni_conflist() -> dict[str, Any]:
    """The CNI config: pods on bridge cni0, addresses from the pod subnet, masqueraded when they leave it."""
    return {
        "cniVersion": "1.0.0",
        "name": "mwms-bridge",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": True,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": "{{ .PodSubnet }}"}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def cni_objects(busybox_image: str, pause_image: str) -> list[dict[str, Any]]:
    """A ConfigMap with the CNI config and a DaemonSet whose init container copies it into /etc/cni/net.d."""
    labels = {"app": "mwms-cni"}
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "mwms-cni", "namespace": "kube-system"},
            "data": {CNI_CONF: json.dumps(cni_conflist())},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "mwms-cni", "namespace": "kube-system", "labels": dict(labels)},
            "spec": {
                "selector": {"matchLabels": dict(labels)},
                "template": {
                    "metadata": {"labels": dict(labels)},
                    "spec": {
                        # Before a CNI config exists only host-network pods can start, on a not-ready node.
                        "hostNetwork": True,
                        "tolerations": [{"operator": "Exists"}],
                        "priorityClassName": "system-node-critical",
                        "initContainers": [
                            {
                                "name": "install",
                                "image": busybox_image,
                                "imagePullPolicy": "IfNotPresent",
                                # Written aside and renamed: the kubelet never reads half a file.
                                "command": [
                                    "/bin/sh",
                                    "-c",
                                    f"cp /config/{CNI_CONF} /net.d/.{CNI_CONF} && "
                                    f"mv /net.d/.{CNI_CONF} /net.d/{CNI_CONF}",
                                ],
                                "securityContext": {"runAsUser": 0, "runAsGroup": 0},
                                "volumeMounts": [
                                    {"name": "config", "mountPath": "/config"},
                                    {"name": "net-d", "mountPath": "/net.d"},
                                ],
                            }
                        ],
                        "containers": [
                            {"name": "pause", "image": pause_image, "imagePullPolicy": "IfNotPresent"}
                        ],
                        "volumes": [
                            {"name": "config", "configMap": {"name": "mwms-cni"}},
                            {
                                "name": "net-d",
                                "hostPath": {"path": "/etc/cni/net.d", "type": "DirectoryOrCreate"},
                            },
                        ],
                    },
                },
            },
        },
    ]


def cni_manifest(busybox_image: str, pause_image: str) -> str:
    return f"{TEMPLATE_MARKER}\n" + yaml.safe_dump_all(
        cni_objects(busybox_image, pause_image), sort_keys=False
    )


def storage_manifest(local_path_image: str, helper_image: str) -> str:
    objects = [obj for _, obj in local_path_objects(local_path_image, helper_image, VOLUMES_DIR)]
    return yaml.safe_dump_all(objects, sort_keys=False)


def main(out_dir: str, busybox_image: str, pause_image: str, local_path_image: str) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "default-cni.yaml").write_text(cni_manifest(busybox_image, pause_image))
    (out / "default-storage.yaml").write_text(storage_manifest(local_path_image, busybox_image))


if __name__ == "__main__":
    main(*sys.argv[1:])
