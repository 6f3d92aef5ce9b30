"""A real node for the local control plane: kubelet + containerd + runc, the reference CNI plugins,
kube-proxy (nftables), CoreDNS and a default StorageClass `standard` (rancher's local-path-provisioner,
mwms_dev.local_path), all built by hack/build-node.sh (containerd and runc: Debian packages).

    cluster = LocalCluster(...).start()
    node = cluster.start_kubelet_node(images=[Path("build/images/mwms-trainer.oci.tar")])

A node knows its cluster only through the NodeContext it is given (mwms_dev.node_context).

Everything lives under `<state_dir>/nodes/<name>/` (containerd's state, socket and the pods' network
namespaces, kubelet's root dir, CNI config and IP reservations), so nothing clashes with a system containerd
or kubelet; containerd's root (its image store: content and unpacked snapshots) is kept between runs beside
the node's parts (`image_store`): unpacking the ~1 GB trainer image takes minutes, and an image loaded before,
or one that shares its layers, is not unpacked again. One cluster with real nodes runs per machine
(kube-proxy's lock), so each node name's store serves them in turn; its containers are removed at stop,
images a rebuild replaced are removed, and a store that fails is emptied and filled again. A cluster may have
several nodes (`start_kubelet_node("node-2")`): each has its own kubelet, containerd, ports and cgroup root;
the first runs kube-proxy and installs the add-ons for all. Pods join the cluster's bridge `mwbr<N>`
(CNI bridge + host-local in the upper half of its /16, one reservation directory for all nodes; the lower
half held the retired node agent's pods) and their cgroups live under one cgroup root per node. Pods
resolve names only through the CoreDNS add-on, which serves cluster.local and forwards nothing, and an
nftables table of ours drops anything a pod sends off the bridge: no pod packet leaves the machine.

Two limits of this machine, handled here: root lacks CAP_SYS_RESOURCE, so runc cannot set the negative
`oom_score_adj` the kubelet asks for (containerd's CRI `restrict_oom_score_adj`); cgroups are v1, which
kubelet 1.37 runs only with `failCgroupV1: false` and the cgroupfs driver.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mwms_dev import local_path, network
from mwms_dev.node_context import NodeContext, free_port
from mwms_dev.procs import pid_alive

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "hack" / "build-node.sh"
CGROUP_FS = Path("/sys/fs/cgroup")
CLUSTER_DOMAIN = "cluster.local"
DNS_PORT = 1053  # CoreDNS listens unprivileged; the kube-dns Service maps 53 to it
# kube-proxy's nftables tables have fixed names (`ip kube-proxy`, `ip6 kube-proxy`): one real node with
# kube-proxy per machine at a time.
KUBE_PROXY_LOCK = Path("/run/mwms/kube-proxy.lock")
KUBE_PROXY_TABLES = (("ip", "kube-proxy"), ("ip6", "kube-proxy"))
# containerd 1.6 puts its shims' sockets here whatever its config says; a SIGKILLed shim leaves its file.
SHIM_SOCKET_DIR = Path("/run/containerd/s")
NODE_READY_TIMEOUT = 120.0
IMAGE_STORE_LAYOUT = 1  # bump when the store's configuration changes, so an old store is not reused
PODS_CPU_SHARES = 16384  # as much CPU weight as 16 busy host processes (see make_cgroup_root)
# The kubelet sets these once at start (it has no "leave them" mode, only "set" or "refuse to start"): we put
# the host's values back as soon as the node is Ready, and again at cleanup, so the machine keeps its own.
KERNEL_TUNABLES = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)


class NodeError(RuntimeError):
    pass


@dataclass(frozen=True)
class NodeParts:
    """What hack/build-node.sh built (one cache directory per version set)."""

    root: Path

    def bin(self, name: str) -> Path:
        return self.root / "bin" / name

    @property
    def cni_bin_dir(self) -> Path:
        return self.root / "cni"

    @property
    def pause_archive(self) -> Path:
        return self.root / "images" / "pause.oci.tar"

    @property
    def coredns_archive(self) -> Path:
        return self.root / "images" / "coredns.oci.tar"

    @property
    def busybox_archive(self) -> Path:
        return self.root / "images" / "busybox.oci.tar"

    @property
    def local_path_archive(self) -> Path:
        tag = self.image_names["local-path-provisioner"].rsplit(":", 1)[1]
        return self.root / "images" / f"local-path-provisioner-{tag}.oci.tar"

    @property
    def image_names(self) -> dict[str, str]:
        return json.loads((self.root / "images" / "names.json").read_text())

    def image_store(self, node_name: str) -> Path:
        """containerd's root for `node_name`, kept across runs. A containerd locks its root, so the nodes of
        one cluster each have their own; the same name on another cluster reuses it (one cluster with real
        nodes at a time: kube-proxy's lock)."""
        suffix = "" if node_name == "node-1" else f"-{node_name}"
        return self.root.parent / f"containerd-root-r{IMAGE_STORE_LAYOUT}{suffix}"


def find_node_parts() -> NodeParts:
    """$MWMS_NODE_DIR, else whatever hack/build-node.sh prints (it builds what is missing)."""
    if env_dir := os.environ.get("MWMS_NODE_DIR"):
        return NodeParts(Path(env_dir))
    result = subprocess.run(["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True)
    if result.returncode != 0:
        raise NodeError(f"{BUILD_SCRIPT} failed with exit code {result.returncode}")
    return NodeParts(Path(result.stdout.strip().splitlines()[-1]))


def host_tools_problem() -> str | None:
    """Why this machine cannot run a real node, or None (the Debian packages the node needs)."""
    missing = [tool for tool in ("containerd", "runc", "ctr", "nft") if not _which(tool)]
    if missing:
        return f"missing {', '.join(missing)}: apt-get install -y containerd runc nftables"
    return None


def _which(tool: str) -> str | None:
    for directory in os.environ.get("PATH", "").split(":") + ["/usr/sbin", "/sbin"]:
        candidate = Path(directory) / tool
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


# --- pure: configuration files -------------------------------------------------------------------------
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
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{node_dir / "runc"}"
  [{cri}.cni]
    bin_dir = "{cni_bin_dir}"
    conf_dir = "{node_dir / "cni/net.d"}"
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
        # Images are loaded, never pulled: garbage collection would throw away what cannot come back,
        # and a shared disk must not make the node evict the pods under test.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
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


def archive_images(archive: Path) -> dict[str, str]:
    """{image name: manifest digest} an OCI archive holds (the names `ctr images import` gives them)."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        index = json.load(member) if member else {}
    return {
        (m.get("annotations") or {}).get("io.containerd.image.name", ""): m["digest"]
        for m in index.get("manifests", [])
        if (m.get("annotations") or {}).get("io.containerd.image.name")
    }


def own_cgroup_parent() -> str:
    """The memory cgroup this process is in: pods go below it, so the machine's accounting still sees them."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return path.rstrip("/")
    return ""


def cgroup_hierarchies() -> list[Path]:
    """The mounted cgroup hierarchies (cpu, memory, pids, ..., name=systemd, and the hybrid mode's unified
    one, where runc mirrors the pods' cgroups)."""
    if not CGROUP_FS.is_dir():
        return []
    return [p for p in sorted(CGROUP_FS.iterdir()) if p.is_dir() and (p / "cgroup.procs").exists()]


# --- host state: cgroups, mounts, nftables --------------------------------------------------------------
def make_cgroup_root(cgroup_root: str) -> list[str]:
    """Create `cgroup_root` in every hierarchy (kubelet refuses one that is missing); returns the cgroups
    made here, for remove_cgroup_root. cpuset needs cpus/mems copied down. In cgroup v1's cpu controller
    each process of a parent group weighs as much as a whole child group: on a machine busy with host
    processes the pods would get a sliver of the CPU, so the cpu groups made here weigh PODS_CPU_SHARES."""
    created = []
    for hierarchy in cgroup_hierarchies():
        current = hierarchy
        for part in Path(cgroup_root.lstrip("/")).parts:
            parent, current = current, current / part
            if not current.exists():
                current.mkdir()
                created.append(str(current))
                if hierarchy.name == "cpu":
                    (current / "cpu.shares").write_text(f"{PODS_CPU_SHARES}\n")
            if hierarchy.name == "cpuset":
                for knob in ("cpuset.cpus", "cpuset.mems"):
                    if not (current / knob).read_text().strip():
                        (current / knob).write_text((parent / knob).read_text())
    return created


def remove_cgroup_root(cgroup_root: str, created: list[str]) -> None:
    """kill_cgroup_tree, then the ancestors make_cgroup_root made (if they hold nothing else now)."""
    kill_cgroup_tree(cgroup_root)
    for directory in sorted(created, key=len, reverse=True):
        with contextlib.suppress(OSError):
            Path(directory).rmdir()


def cgroup_dirs(top: Path) -> list[Path]:
    """`top` and every cgroup below it, deepest first; cgroups vanishing meanwhile are skipped."""
    return [Path(directory) for directory, _, _ in os.walk(top, topdown=False)]


def kill_cgroup_tree(cgroup_root: str, timeout: float = 20.0) -> None:
    """SIGKILL every process below `cgroup_root` (the pods' containers), then remove its cgroups."""
    pids_root = CGROUP_FS / "pids" / cgroup_root.lstrip("/")
    deadline = time.monotonic() + timeout
    while pids_root.is_dir():
        pids = [int(pid) for d in cgroup_dirs(pids_root) for pid in _read(d / "cgroup.procs").split()]
        if not pids or time.monotonic() > deadline:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    for hierarchy in cgroup_hierarchies():
        for directory in cgroup_dirs(hierarchy / cgroup_root.lstrip("/")):
            with contextlib.suppress(OSError):
                directory.rmdir()


def save_kernel_tunables(path: Path) -> None:
    values = {name: _read(Path("/proc/sys") / name).strip() for name in KERNEL_TUNABLES}
    path.write_text(json.dumps({k: v for k, v in values.items() if v}))


def restore_kernel_tunables(path: Path) -> None:
    if not path.is_file():
        return
    for name, value in json.loads(path.read_text()).items():
        target = Path("/proc/sys") / name
        if _read(target).strip() != value:
            with contextlib.suppress(OSError):
                target.write_text(value + "\n")


def kill_shims(containerd_socket: Path) -> None:
    """SIGKILL the containerd shims that serve `containerd_socket` (they outlive containerd by design)."""
    wanted = str(containerd_socket).encode()
    killed: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"containerd-shim-runc-v2") and wanted in argv:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
    deadline = time.monotonic() + 5
    while any(pid_alive(pid) for pid in killed) and time.monotonic() < deadline:
        time.sleep(0.05)


def remove_dead_shim_sockets() -> None:
    """Unlink shim socket files no live process is bound to (ours, after a kill; any crashed containerd's)."""
    if not SHIM_SOCKET_DIR.is_dir():
        return
    rows = [line.split() for line in _read(Path("/proc/net/unix")).splitlines()[1:]]
    bound = {row[-1] for row in rows if len(row) > 7}
    for socket_file in SHIM_SOCKET_DIR.iterdir():
        if str(socket_file) not in bound:
            with contextlib.suppress(OSError):
                socket_file.unlink()


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def unmount_below(directory: Path) -> None:
    """Unmount everything mounted at or below `directory`, deepest first (overlays, shm, netns, volumes)."""
    prefix = str(directory.resolve())
    for _ in range(3):  # a mount can hide another at the same point
        mounts = []
        for line in Path("/proc/self/mounts").read_text().splitlines():
            target = line.split()[1].replace("\\040", " ")
            if target == prefix or target.startswith(prefix + "/"):
                mounts.append(target)
        if not mounts:
            return
        for target in sorted(set(mounts), key=len, reverse=True):
            subprocess.run(["umount", "-l", target], capture_output=True, timeout=30)


def _nft(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["nft", *args], input=stdin, capture_output=True, text=True, timeout=30)


def guard_table(net: network.PodNetwork) -> str:
    return f"mwms_{net.bridge}"


def add_pod_guard(net: network.PodNetwork) -> None:
    """Pods may reach the host and each other, nothing else: routed packets from the bridge to any other
    interface are dropped. Forwarding is turned on for this bridge alone (Services are DNATed by the host,
    so a pod's packet to a Service IP is routed back onto the bridge)."""
    table = guard_table(net)
    _nft("delete", "table", "inet", table)
    rules = (
        f"table inet {table} {{\n"
        "  chain forward {\n"
        "    type filter hook forward priority -10; policy accept;\n"
        f'    iifname "{net.bridge}" oifname != "{net.bridge}" drop\n'
        "  }\n"
        "}\n"
    )
    result = _nft("-f", "-", stdin=rules)
    if result.returncode != 0:
        raise NodeError(f"nft: cannot add table inet {table}: {result.stderr.strip()}")
    Path(f"/proc/sys/net/ipv4/conf/{net.bridge}/forwarding").write_text("1\n")


def remove_nft_tables(net: network.PodNetwork, kube_proxy: bool) -> None:
    _nft("delete", "table", "inet", guard_table(net))
    if kube_proxy:
        for family, name in KUBE_PROXY_TABLES:
            _nft("delete", "table", family, name)


def take_kube_proxy_lock(owner: str) -> int:
    """The machine-wide right to run kube-proxy (its nftables tables have fixed names); NodeError if held."""
    KUBE_PROXY_LOCK.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(KUBE_PROXY_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode().strip()
        os.close(fd)
        raise NodeError(
            f"another real node runs kube-proxy on this machine ({holder or '?'}); kube-proxy's nftables "
            "tables have fixed names, so only one at a time"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, owner.encode(), 0)
    return fd


def clean_dead_node(net: network.PodNetwork, node_dir: Path) -> None:
    """What a node whose processes are gone (stopped or crashed) leaves on the host: its containers,
    mounts, cgroups and nftables tables. kube-proxy's tables go only if no live node holds them."""
    cgroup_file = node_dir / "cgroups.json"
    if cgroup_file.is_file():
        cgroups = json.loads(cgroup_file.read_text())
        remove_cgroup_root(cgroups["root"], cgroups["created"])
    kill_shims(node_dir / "containerd.sock")
    unmount_below(node_dir)
    restore_kernel_tunables(node_dir / "kernel-tunables.json")
    remove_dead_shim_sockets()
    try:
        fd = take_kube_proxy_lock(f"cleanup pid {os.getpid()}")
    except NodeError:
        remove_nft_tables(net, kube_proxy=False)
    else:
        remove_nft_tables(net, kube_proxy=True)
        os.close(fd)


# --- the node -------------------------------------------------------------------------------------------
class KubeletNode:
    """One real node of a LocalCluster. Its processes run under the cluster's Supervisor."""

    def __init__(
        self,
        context: NodeContext,
        parts: NodeParts,
        node_name: str = "node-1",
        image_store: Path | None = None,
        cluster_services: bool = True,
    ):
        self.context = context
        self.parts = parts
        self.image_store = image_store or parts.image_store(node_name)
        self.node_name = node_name
        # kube-proxy and the add-ons: one node per cluster runs them for all (its nodes share the host's
        # network namespace and the bridge, so one kube-proxy's rules serve every node's pods).
        self.cluster_services = cluster_services
        self.dir = context.nodes_dir / node_name
        self.cgroup_root = f"{own_cgroup_parent()}/mwms-{context.net.bridge}-{node_name}"
        self.timings: dict[str, float] = {}
        self._kube_proxy_lock: int | None = None

    @property
    def containerd_socket(self) -> Path:
        return self.dir / "containerd.sock"

    def _key(self, component: str) -> str:
        return f"{component}-{self.node_name}"

    # --- lifecycle ---------------------------------------------------------------------------------
    def start(self, images: Sequence[Path] = (), wait_dns: bool = True) -> KubeletNode:
        started = time.monotonic()
        problem = host_tools_problem()
        if problem:
            raise NodeError(problem)
        if self.cluster_services:
            self._kube_proxy_lock = take_kube_proxy_lock(f"pid {os.getpid()} {self.context.net.bridge}")
        self._clean()
        self.dir.mkdir(parents=True, exist_ok=True)
        for sub in ("cni/net.d", "manifests", "kubelet", "logs"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        (self.dir / "resolv.conf").write_text(f"# no upstream: pods resolve {CLUSTER_DOMAIN} names only\n")
        if self.cluster_services:
            add_pod_guard(self.context.net)
        created = make_cgroup_root(self.cgroup_root)
        (self.dir / "cgroups.json").write_text(json.dumps({"root": self.cgroup_root, "created": created}))
        credentials = self._write_credentials()
        # busybox (2 MiB): a shell for looking around and for the node tests' pods.
        base = [
            self.parts.pause_archive,
            self.parts.coredns_archive,
            self.parts.busybox_archive,
            self.parts.local_path_archive,
        ]
        self.start_containerd(images=[*base, *images])
        self.timings["images_loaded"] = time.monotonic() - started
        save_kernel_tunables(self.dir / "kernel-tunables.json")
        self._start_kubelet(credentials["kubelet"])
        self.context.wait_node_ready(self.node_name, self._key("kubelet"), timeout=NODE_READY_TIMEOUT)
        restore_kernel_tunables(self.dir / "kernel-tunables.json")
        self.timings["node_ready"] = time.monotonic() - started
        if self.cluster_services:
            self._start_kube_proxy(credentials["kube-proxy"])
            self._install_addons()
        if wait_dns:
            self.wait_addons_ready()
            self.timings["dns_ready"] = time.monotonic() - started
        return self

    def stop(self) -> None:
        """Stop the node's processes and its pods' containers; remove mounts, cgroups and nft tables."""
        supervisor = self.context.supervisor
        supervisor.stop(self._key("kubelet"))
        kill_cgroup_tree(self.cgroup_root)
        supervisor.stop(self._key("kube-proxy"))
        containerd = supervisor.processes.get(self._key("containerd"))
        if containerd is not None and containerd.poll() is None:
            self.remove_containers()
        self.stop_containerd()
        self._clean()
        self._release_kube_proxy_lock()

    def kill(self) -> None:
        """SIGKILL the kubelet, the pods' processes, the shims and containerd, as when the machine dies.
        kube-proxy stays: it serves the cluster's other nodes, which share this host's network."""
        self.context.supervisor.stop(self._key("kubelet"), sig=signal.SIGKILL)
        kill_cgroup_tree(self.cgroup_root)
        kill_shims(self.containerd_socket)
        self.context.supervisor.stop(self._key("containerd"), sig=signal.SIGKILL)

    def _clean(self) -> None:
        cgroups_file = self.dir / "cgroups.json"
        created = json.loads(cgroups_file.read_text())["created"] if cgroups_file.is_file() else []
        remove_cgroup_root(self.cgroup_root, created)
        kill_shims(self.containerd_socket)
        unmount_below(self.dir)
        restore_kernel_tunables(self.dir / "kernel-tunables.json")
        remove_dead_shim_sockets()
        if self.cluster_services:  # the pod guard and kube-proxy's tables serve every node of the cluster
            remove_nft_tables(self.context.net, kube_proxy=self._kube_proxy_lock is not None)

    def _release_kube_proxy_lock(self) -> None:
        if self._kube_proxy_lock is not None:
            os.close(self._kube_proxy_lock)
            self._kube_proxy_lock = None

    # --- images ------------------------------------------------------------------------------------
    def _ctr_argv(self) -> list[str]:
        return ["ctr", "--address", str(self.containerd_socket), "--namespace", "k8s.io"]

    def ctr(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        argv = [*self._ctr_argv(), *args]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        if result.returncode != 0:
            raise NodeError(f"`{' '.join(argv)}` failed: {result.stderr.strip() or result.stdout.strip()}")
        return result

    def start_containerd(self, images: Sequence[Path] = ()) -> None:
        """Start containerd on the kept image store and load `images` (OCI archives) into it. The store is
        a cache: one that fails (a metadata file cut short; an unpack that lost a parent snapshot, as a CI
        run once did: "failed to prepare extraction snapshot ... parent snapshot ... does not exist") is
        emptied and filled again, once, at the cost of unpacking everything."""
        self._spawn_containerd()
        try:
            self.load_images(images)
        except NodeError as exc:
            print(
                f"kubelet_node: the image store {self.image_store} failed ({exc}); emptying it and "
                "loading the images again",
                file=sys.stderr,
                flush=True,
            )
            self.stop_containerd()
            shutil.rmtree(self.image_store)
            self._spawn_containerd()
            self.load_images(images)

    def stop_containerd(self) -> None:
        self.context.supervisor.stop(self._key("containerd"))

    def load_images(self, archives: Iterable[Path]) -> list[str]:
        """Import OCI archives into containerd's k8s.io namespace, as `kind load image-archive` does; an
        archive whose image the store already holds (same name, same manifest) is skipped. An image that
        a rebuild replaced under its name is removed (`remove_replaced_images`)."""
        names = []
        held = self.image_digests()
        for archive in archives:
            if not Path(archive).is_file():
                raise NodeError(f"image archive {archive} not found")
            wanted = archive_images(Path(archive))
            if wanted and all(held.get(name) == digest for name, digest in wanted.items()):
                names += list(wanted)
                continue
            out = self.ctr("images", "import", "--no-unpack=false", str(archive)).stdout
            # "unpacking localhost/mwms/pause:3.10.2 (sha256:...)...done"
            names += [line.split()[1] for line in out.splitlines() if line.startswith("unpacking ")]
        self.remove_replaced_images()
        return names

    def remove_replaced_images(self) -> None:
        """containerd's CRI plugin names every image also by its ID (`sha256:<config digest>`); when a
        rebuild moves the image's name to a new manifest, that ID name alone keeps the old image and its
        layers, so the kept store would grow by every rebuild. Remove such images."""
        digests = self.image_digests()
        ids = {name for name in digests if name.startswith("sha256:")}
        named = {digest for name, digest in digests.items() if name not in ids}
        replaced = [name for name in ids if digests[name] not in named]
        if replaced:
            self.ctr("images", "rm", *replaced)

    def image_digests(self) -> dict[str, str]:
        """{image name: manifest digest} of what the store holds."""
        rows = self.ctr("images", "list").stdout.splitlines()[1:]  # REF TYPE DIGEST SIZE ...
        return {row.split()[0]: row.split()[2] for row in rows if len(row.split()) > 2}

    def remove_containers(self) -> None:
        """Delete every container (and its writable snapshot) from the kept store: the next run starts
        with images only. Best effort: a run that crashed leaves some, which the kubelet's container
        garbage collection removes later (their pods are gone)."""
        listed = subprocess.run(
            [*self._ctr_argv(), "containers", "list", "--quiet"], capture_output=True, text=True, timeout=60
        )
        for container in listed.stdout.split():
            for args in (("tasks", "delete", "--force", container), ("containers", "delete", container)):
                subprocess.run([*self._ctr_argv(), *args], capture_output=True, timeout=60)

    def images(self) -> list[str]:
        return self.ctr("images", "list", "--quiet").stdout.split()

    # --- components --------------------------------------------------------------------------------
    def _write_credentials(self) -> dict[str, Path]:
        """Kubeconfigs for the kubelet (system:node:<name>) and kube-proxy, signed by the cluster CA."""
        users = {
            "kubelet": (f"system:node:{self.node_name}", ("system:nodes",)),
            "kube-proxy": ("system:kube-proxy", ()),
        }
        return {
            stem: self.context.node_kubeconfig(self.dir / f"{stem}.kubeconfig", user, groups)
            for stem, (user, groups) in users.items()
        }

    def _spawn_containerd(self) -> None:
        config = self.dir / "containerd.toml"
        config.write_text(
            containerd_config(
                self.dir, self.image_store, self.parts.cni_bin_dir, self.parts.image_names["pause"]
            )
        )
        (self.dir / "cni/net.d/10-mwms.conflist").write_text(
            json.dumps(cni_config(self.context.net, self.context.ipam_dir), indent=2)
        )
        key = self._key("containerd")
        self.context.supervisor.spawn(
            key, ["containerd", "--config", str(config), "--log-level", "warn"], self._log(key)
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            self.context.check_alive("containerd", only=key)
            if self.containerd_socket.exists():
                ready = subprocess.run(
                    ["ctr", "--address", str(self.containerd_socket), "version"],
                    capture_output=True,
                    timeout=10,
                )
                if ready.returncode == 0:
                    return
            time.sleep(0.1)
        raise NodeError(f"containerd not ready after 30s; log: {self._log(key)}")

    def _start_kubelet(self, kubeconfig_path: Path) -> None:
        config = self.dir / "kubelet.yaml"
        config.write_text(
            json.dumps(
                kubelet_config(
                    node_dir=self.dir,
                    net=self.context.net,
                    ca_file=self.context.ca_file,
                    cgroup_root=self.cgroup_root,
                    port=free_port("0.0.0.0"),
                    healthz_port=free_port(),
                    containerd_socket=self.containerd_socket,
                ),
                indent=2,
            )
        )
        key = self._key("kubelet")
        argv = [
            str(self.parts.bin("kubelet")),
            f"--config={config}",
            f"--kubeconfig={kubeconfig_path}",
            f"--root-dir={self.dir / 'kubelet'}",
            f"--cert-dir={self.dir / 'kubelet-pki'}",
            f"--hostname-override={self.node_name}",
            f"--node-ip={self.context.net.gateway}",
            "--v=1",
        ]
        self.context.supervisor.spawn(key, argv, self._log(key))

    def _start_kube_proxy(self, kubeconfig_path: Path) -> None:
        config = self.dir / "kube-proxy.yaml"
        config.write_text(
            json.dumps(
                kube_proxy_config(
                    net=self.context.net,
                    kubeconfig=kubeconfig_path,
                    node_name=self.node_name,
                    healthz_port=free_port(),
                    metrics_port=free_port(),
                )
            )
        )
        key = self._key("kube-proxy")
        argv = [str(self.parts.bin("kube-proxy")), f"--config={config}", "--v=1"]
        self.context.supervisor.spawn(key, argv, self._log(key))

    def _install_addons(self) -> None:
        """CoreDNS, then the volume provisioner and its default StorageClass (under this node's directory)."""
        names = self.parts.image_names
        objects = coredns_objects(self.context.net, names["coredns"]) + local_path.local_path_objects(
            names["local-path-provisioner"], names["busybox"], self.dir / "local-path"
        )
        for collection, body in objects:
            self.context.api_create(collection, body)

    def wait_addons_ready(self, timeout: float = 90.0) -> None:
        """Until CoreDNS and the volume provisioner each have a ready replica."""
        deployments = {
            "CoreDNS": "/apis/apps/v1/namespaces/kube-system/deployments/coredns",
            "the local-path provisioner": (
                f"/apis/apps/v1/namespaces/{local_path.NAMESPACE}/deployments/local-path-provisioner"
            ),
        }
        deadline = time.monotonic() + timeout
        for what, path in deployments.items():
            while not (self.context.api_get(path).get("status") or {}).get("readyReplicas"):
                self.context.check_alive(what)
                if time.monotonic() > deadline:
                    kubelet_log = self._log(self._key("kubelet"))
                    raise NodeError(f"{what} not ready after {timeout:.0f}s; kubelet log: {kubelet_log}")
                time.sleep(0.3)

    def _log(self, key: str) -> Path:
        return self.context.logs_dir / f"{key}.log"
