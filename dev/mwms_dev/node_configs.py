"""Pure: the configuration files of a real node's components (the CNI bridge, containerd, the kubelet,
kube-proxy) and the pod and DNS addresses they share, from the cluster's pod network and the node's paths.

Two limits of this machine, handled here: root lacks CAP_SYS_RESOURCE, so runc cannot set the negative
`oom_score_adj` the kubelet asks for (containerd's CRI `restrict_oom_score_adj`); cgroups are v1, which
kubelet 1.37 runs only with `failCgroupV1: false` and the cgroupfs driver.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

from mwms_dev import network

CLUSTER_DOMAIN = "cluster.local"


def pod_range(net: network.PodNetwork) -> tuple[str, str]:
    """(first, last) pod IP of the real node: the upper half of the bridge's /16."""
    subnet = ipaddress.IPv4Network(net.subnet)
    upper = list(subnet.subnets(prefixlen_diff=1))[1]
    return str(upper.network_address + 2), str(upper.broadcast_address - 1)


def dns_service_ip(net: network.PodNetwork) -> str:
    """The kube-dns Service IP, the tenth of the service range, as kubeadm picks it."""
    return str(ipaddress.ip_network(net.service_cidr).network_address + 10)


def cni_config(net: network.PodNetwork, ipam_dir: Path) -> dict[str, Any]:
    first, last = pod_range(net)
    return {
        "cniVersion": "1.0.0",
        "name": f"mwms-{net.bridge}",
        "plugins": [
            {
                "type": "bridge",
                "bridge": net.bridge,
                # isGateway would make the plugin turn on IP forwarding for the whole host; the gateway
                # address is already on the bridge and the default route comes from IPAM instead.
                "isGateway": False,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(ipam_dir),
                    "ranges": [
                        [
                            {
                                "subnet": net.subnet,
                                "rangeStart": first,
                                "rangeEnd": last,
                                "gateway": net.gateway,
                            }
                        ]
                    ],
                    "routes": [{"dst": "0.0.0.0/0", "gw": net.gateway}],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def containerd_config(node_dir: Path, image_store: Path, cni_bin_dir: Path, pause_image: str) -> str:
    """containerd 1.6 config (version 2): its root (images) in image_store, every other path under node_dir,
    the CRI plugin set for this machine."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{image_store}"
state = "{node_dir / "containerd/state"}"
# Plugins that only look for hardware or filesystems this node does not use.
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "{node_dir / "containerd.sock"}"

[ttrpc]
  address = "{node_dir / "containerd.ttrpc.sock"}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{node_dir / "containerd/opt"}"

[{cri}]
  sandbox_image = "{pause_image}"
  # root here lacks CAP_SYS_RESOURCE: runc cannot lower oom_score_adj below containerd's own.
  restrict_oom_score_adj = true
  # The pods' network namespaces under the state dir, not /var/run/netns, so `down` finds them all.
  netns_mounts_under_state_dir = true
  enable_selinux = false
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    # A pulled image's compressed layers go once unpacked (the unpacked copy is what runs): ~1 GB less disk
    # for the trainer image. Images loaded from archives (ctr import) keep theirs.
    discard_unpacked_layers = true
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{node_dir / "runc"}"
  [{cri}.cni]
    bin_dir = "{cni_bin_dir}"
    conf_dir = "{node_dir / "cni/net.d"}"
  # Each registry's hosts.toml (its server and CA); credentials come from the pods' imagePullSecrets only.
  [{cri}.registry]
    config_path = "{registry_hosts_dir(node_dir)}"
"""


def registry_hosts_dir(node_dir: Path) -> Path:
    """containerd's registry `config_path`: one `<host[:port]>/hosts.toml` per registry it is told about."""
    return node_dir / "registry-hosts"


def registry_hosts_toml(address: str, ca_file: Path) -> str:
    """A registry's hosts.toml: pull and resolve from `https://<address>`, trusting `ca_file`."""
    return f"""server = "https://{address}"

[host."https://{address}"]
  capabilities = ["pull", "resolve"]
  ca = "{ca_file}"
"""


def kubelet_config(
    *,
    node_dir: Path,
    net: network.PodNetwork,
    ca_file: Path,
    cgroup_root: str,
    port: int,
    healthz_port: int,
    containerd_socket: Path,
) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": net.gateway,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca_file)},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{containerd_socket}",
        # cgroups v1 here: kubelet 1.37 still has the v1 manager but refuses it unless told.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup_root,
        "clusterDNS": [dns_service_ip(net)],
        "clusterDomain": CLUSTER_DOMAIN,
        # Pods with dnsPolicy Default get this file: no upstream server, so no query leaves the machine.
        "resolvConf": str(node_dir / "resolv.conf"),
        "staticPodPath": str(node_dir / "manifests"),
        "failSwapOn": False,
        "maxPods": 110,
        "serializeImagePulls": False,
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        # Images are loaded (or pulled from a test's registry, gone after it): garbage collection would
        # throw away what cannot come back, and a shared disk must not make the node evict the pods under
        # test (1% of a large one is GBs, so the disk floors are absolute).
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "512Mi",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "512Mi",
        },
        # No iptables chains: kube-proxy runs in nftables mode, and the host's iptables are not ours.
        "makeIPTablesUtilChains": False,
        "volumePluginDir": str(node_dir / "kubelet-plugins"),
        "podLogsDir": str(node_dir / "pod-logs"),
        "containerLogMaxSize": "10Mi",
        "logging": {"format": "text"},
    }


def kube_proxy_config(
    *, net: network.PodNetwork, kubeconfig: Path, node_name: str, healthz_port: int, metrics_port: int
) -> dict[str, Any]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "nftables",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": node_name,
        "clusterCIDR": net.subnet,
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        "nodePortAddresses": [f"{net.gateway}/32"],
        # Pod -> Service -> pod on the same bridge: the reply must come back through the host to be
        # un-NATed, so masquerade every Service connection.
        "nftables": {"masqueradeAll": True},
        # Leave the host's conntrack sysctls and our own oom score as they are.
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "oomScoreAdj": 0,
    }
