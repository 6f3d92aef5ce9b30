"""The real node's pure configuration (node_configs, node_addons): pod addresses, CNI, DNS that never
forwards, chart values."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from mwms_dev import network, node_addons, node_configs, node_parts

NET = network.pod_network(3)


def test_pod_range_is_the_upper_half_of_the_bridge_subnet():
    first, last = node_configs.pod_range(NET)
    assert (first, last) == ("10.203.128.2", "10.203.255.254")
    assert ipaddress.ip_address(NET.gateway) < ipaddress.ip_address(first)


def test_cni_config_joins_the_cluster_bridge_without_turning_on_host_forwarding(tmp_path: Path):
    config = node_configs.cni_config(NET, tmp_path)
    bridge = config["plugins"][0]
    assert bridge["type"] == "bridge" and bridge["bridge"] == "mwbr3"
    # isGateway makes the bridge plugin write /proc/sys/net/ipv4/ip_forward for the whole host.
    assert bridge["isGateway"] is False and "isDefaultGateway" not in bridge
    (ranges,) = bridge["ipam"]["ranges"]
    assert ranges[0]["gateway"] == NET.gateway
    assert bridge["ipam"]["routes"] == [{"dst": "0.0.0.0/0", "gw": NET.gateway}]
    assert bridge["ipam"]["dataDir"] == str(tmp_path)


def test_dns_serves_the_cluster_domain_and_forwards_nothing():
    corefile = node_addons.corefile()
    assert "kubernetes cluster.local" in corefile
    assert "forward" not in corefile and "proxy" not in corefile
    objects = dict(node_addons.coredns_objects(NET, "localhost/mwms/coredns:v1"))
    service = objects["/api/v1/namespaces/kube-system/services"]
    assert service["spec"]["clusterIP"] == node_configs.dns_service_ip(NET) == "10.96.0.10"
    kubelet = node_configs.kubelet_config(
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
    text = node_configs.containerd_config(
        Path("/state/nodes/n1"), Path("/cache/store"), Path("/cache/cni"), "localhost/mwms/pause:1"
    )
    assert 'root = "/cache/store"' in text
    assert 'state = "/state/nodes/n1/containerd/state"' in text
    assert 'address = "/state/nodes/n1/containerd.sock"' in text
    assert "restrict_oom_score_adj = true" in text
    assert "netns_mounts_under_state_dir = true" in text
    assert "/var/lib/containerd" not in text and "/run/containerd" not in text


def test_containerd_finds_registries_under_the_node_dir_and_trusts_only_their_ca():
    import tomllib

    node_dir = Path("/state/nodes/n1")
    config = tomllib.loads(
        node_configs.containerd_config(node_dir, Path("/cache/store"), Path("/cache/cni"), "pause:1")
    )
    registry = config["plugins"]["io.containerd.grpc.v1.cri"]["registry"]
    assert registry == {"config_path": str(node_configs.registry_hosts_dir(node_dir))}  # no credentials here
    hosts = tomllib.loads(node_configs.registry_hosts_toml("127.0.0.1:5000", Path("/r/ca.crt")))
    assert hosts["server"] == "https://127.0.0.1:5000"
    assert hosts["host"]["https://127.0.0.1:5000"] == {"capabilities": ["pull", "resolve"], "ca": "/r/ca.crt"}


def test_chart_values_run_mlflow_from_the_loaded_trainer_image():
    values = node_addons.real_node_chart_values(
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
    with pytest.raises(node_parts.NodeError, match="mwms-trainer"):
        node_addons.real_node_chart_values(["ghcr.io/mwms-dev/mwms-operator:0.2.0"])
