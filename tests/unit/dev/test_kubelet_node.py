"""The real node's pure configuration: pod addresses, CNI, DNS that never forwards, chart values."""

from __future__ import annotations

import ipaddress
import json
import tarfile
from pathlib import Path

import pytest

from mwms_dev import kubelet_node, network

NET = network.pod_network(3)


def test_pod_range_is_the_upper_half_of_the_bridge_subnet():
    first, last = kubelet_node.pod_range(NET)
    assert (first, last) == ("10.203.128.2", "10.203.255.254")
    assert ipaddress.ip_address(NET.gateway) < ipaddress.ip_address(first)


def test_cni_config_joins_the_cluster_bridge_without_turning_on_host_forwarding(tmp_path: Path):
    config = kubelet_node.cni_config(NET, tmp_path)
    bridge = config["plugins"][0]
    assert bridge["type"] == "bridge" and bridge["bridge"] == "mwbr3"
    # isGateway makes the bridge plugin write /proc/sys/net/ipv4/ip_forward for the whole host.
    assert bridge["isGateway"] is False and "isDefaultGateway" not in bridge
    (ranges,) = bridge["ipam"]["ranges"]
    assert ranges[0]["gateway"] == NET.gateway
    assert bridge["ipam"]["routes"] == [{"dst": "0.0.0.0/0", "gw": NET.gateway}]
    assert bridge["ipam"]["dataDir"] == str(tmp_path)


def test_dns_serves_the_cluster_domain_and_forwards_nothing():
    corefile = kubelet_node.corefile()
    assert "kubernetes cluster.local" in corefile
    assert "forward" not in corefile and "proxy" not in corefile
    objects = dict(kubelet_node.coredns_objects(NET, "localhost/mwms/coredns:v1"))
    service = objects["/api/v1/namespaces/kube-system/services"]
    assert service["spec"]["clusterIP"] == kubelet_node.dns_service_ip(NET) == "10.96.0.10"
    kubelet = kubelet_node.kubelet_config(
        node_dir=Path("/n"),
        net=NET,
        ca_file=Path("/ca"),
        cgroup_root="/x",
        port=1,
        healthz_port=2,
        containerd_socket=Path("/s"),
    )
    assert kubelet["clusterDNS"] == ["10.96.0.10"]
    assert kubelet["resolvConf"] == "/n/resolv.conf"  # pods with dnsPolicy Default: no upstream either


def test_containerd_keeps_everything_under_the_node_dir_but_its_image_store():
    text = kubelet_node.containerd_config(
        Path("/state/nodes/n1"), Path("/cache/store"), Path("/cache/cni"), "localhost/mwms/pause:1"
    )
    assert 'root = "/cache/store"' in text
    assert 'state = "/state/nodes/n1/containerd/state"' in text
    assert 'address = "/state/nodes/n1/containerd.sock"' in text
    assert "restrict_oom_score_adj = true" in text
    assert "netns_mounts_under_state_dir = true" in text
    assert "/var/lib/containerd" not in text and "/run/containerd" not in text


def test_each_node_has_a_containerd_root_of_its_own_and_node_1_keeps_the_existing_one():
    parts = kubelet_node.NodeParts(Path("/cache/node/k8s-v1"))
    stores = [parts.image_store(name) for name in ("node-1", "node-2", "node-3")]
    assert stores[0] == Path(f"/cache/node/containerd-root-r{kubelet_node.IMAGE_STORE_LAYOUT}")
    assert len(set(stores)) == 3  # a containerd locks its root: two nodes cannot share one


def test_chart_values_run_mlflow_from_the_loaded_trainer_image():
    values = kubelet_node.real_node_chart_values(
        [
            "localhost/mwms/pause:3",
            "ghcr.io/mwms-dev/mwms-trainer:0.2.0",
            "ghcr.io/mwms-dev/mwms-operator:0.2.0",
        ]
    )
    assert "mlflow.image.repository=ghcr.io/mwms-dev/mwms-trainer" in values
    assert "mlflow.image.tag=0.2.0" in values
    # The node's default StorageClass serves MLflow's claim: the chart's persistence stays on.
    assert not [value for value in values if value.startswith("mlflow.persistence")]
    with pytest.raises(kubelet_node.NodeError, match="mwms-trainer"):
        kubelet_node.real_node_chart_values(["ghcr.io/mwms-dev/mwms-operator:0.2.0"])


def test_archive_images_names_what_ctr_import_will_name(tmp_path):
    """The skip-if-held check of load_images compares these with the store's names and digests."""
    index = {
        "manifests": [
            {
                "digest": "sha256:abc",
                "annotations": {"io.containerd.image.name": "ghcr.io/mwms-dev/mwms-trainer:0.2.0"},
            },
            {"digest": "sha256:def"},  # no name: ctr would not name it either
        ]
    }
    (tmp_path / "index.json").write_text(json.dumps(index))
    archive = tmp_path / "image.oci.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(tmp_path / "index.json", arcname="index.json")
    assert kubelet_node.archive_images(archive) == {"ghcr.io/mwms-dev/mwms-trainer:0.2.0": "sha256:abc"}
