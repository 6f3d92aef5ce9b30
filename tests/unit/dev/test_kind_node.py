"""The manifests our kind node image ships (mwms_dev.kind_node), read as kind reads them: the CNI one is a Go
template over the pod subnet, the storage one is applied as it is."""

from __future__ import annotations

import json
import re

import yaml

from mwms_dev import kind_node

BUSYBOX = "localhost/mwms/busybox:debian"
PAUSE = "registry.k8s.io/pause:3.10.2"


def templated(manifest: str, pod_subnet: str) -> str:
    """What kind's `{{ .PodSubnet }}` template does to the manifest (the only field it fills)."""
    assert set(re.findall(r"{{.*?}}", manifest)) == {"{{ .PodSubnet }}"}
    return manifest.replace("{{ .PodSubnet }}", pod_subnet)


def test_kind_templates_the_cni_manifest_and_its_config_takes_the_pod_subnet():
    manifest = kind_node.cni_manifest(BUSYBOX, PAUSE)
    assert "would you kindly template this file" in manifest  # kind templates only a manifest that says so
    assert (
        "would you kindly patch this file" not in manifest
    )  # ... and patches kindnetd's DaemonSet otherwise
    config_map, daemon_set = yaml.safe_load_all(templated(manifest, "10.244.0.0/16"))
    conflist = json.loads(config_map["data"][kind_node.CNI_CONF])
    bridge, portmap = conflist["plugins"]
    assert bridge["type"] == "bridge" and bridge["ipam"]["ranges"] == [[{"subnet": "10.244.0.0/16"}]]
    assert portmap["capabilities"] == {"portMappings": True}
    spec = daemon_set["spec"]["template"]["spec"]
    assert spec["hostNetwork"] is True, "no pod network exists before this config does"
    assert spec["tolerations"] == [{"operator": "Exists"}], "the node is not ready until it has a CNI config"
    (install,) = spec["initContainers"]
    assert install["image"] == BUSYBOX and kind_node.CNI_CONF in install["command"][-1]
    assert [c["image"] for c in spec["containers"]] == [PAUSE]


def test_the_storage_manifest_is_the_real_nodes_provisioner_under_kinds_volume_dir():
    objects = list(
        yaml.safe_load_all(kind_node.storage_manifest("localhost/mwms/local-path-provisioner:v1", BUSYBOX))
    )
    by_kind = {obj["kind"]: obj for obj in objects}
    assert by_kind["StorageClass"]["metadata"]["name"] == "standard"
    (paths,) = json.loads(by_kind["ConfigMap"]["data"]["config.json"])["nodePathMap"]
    assert paths["paths"] == ["/var/local-path-provisioner"]
