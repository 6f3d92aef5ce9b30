"""A real Kubernetes control plane on this machine: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, plus a real node: kubelet with containerd, kube-proxy and CoreDNS (mwms_dev.kubelet_node).
A node gets what it needs of the cluster as one NodeContext (mwms_dev.node_context); it never imports this
module.

    cluster = LocalCluster(state_dir=Path(".mwms/dev"), subnet_index=1).start()
    node = cluster.start_kubelet_node(images=[...])
    ... KUBECONFIG=cluster.kubeconfig ...
    cluster.stop()

Needs root (the pod bridge, network namespaces) and the binaries of hack/build/build-control-plane.sh.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import shutil
import signal
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from mwms_dev import gang_gates, kubelet_node, network, node_host, node_parts, pki
from mwms_dev.builds import BuildError, built
from mwms_dev.node_context import READY_TIMEOUT, NodeContext
from mwms_dev.node_context import ClusterError as ClusterError
from mwms_dev.node_context import free_port as free_port
from mwms_dev.node_context import kubeconfig as kubeconfig
from mwms_dev.procs import Supervisor

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "hack" / "build" / "build-control-plane.sh"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
LOCK_DIR = Path("/run/mwms")
STATE_MARKER = ".mwms-cluster"  # only a directory holding this file is ever wiped by start()
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"

# file stem -> (user CN, groups); the two controllers get their bootstrap RBAC roles by these names.
CLIENTS = {
    "admin": ("mwms-admin", ("system:masters",)),
    "controller-manager": ("system:kube-controller-manager", ()),
    "scheduler": ("system:kube-scheduler", ()),
    # Who the API server is to a node's kubelet (logs, exec), as kubeadm names it.
    "apiserver-kubelet-client": ("kube-apiserver-kubelet-client", ("system:masters",)),
}
KUBECONFIGS = ("admin", "controller-manager", "scheduler")


def find_bin_dir() -> Path:
    """$MWMS_BIN_DIR, else whatever hack/build/build-control-plane.sh prints (it builds what is missing)."""
    if env_dir := os.environ.get("MWMS_BIN_DIR"):
        return Path(env_dir)
    if not BUILD_SCRIPT.is_file():
        raise ClusterError(f"set MWMS_BIN_DIR: {BUILD_SCRIPT} not found to build or locate the binaries")
    try:
        return built(BUILD_SCRIPT.name, timeout=None, progress=True)
    except BuildError as e:
        raise ClusterError(str(e)) from None


class LocalCluster:
    """One control plane: state (certs, etcd data, logs, node files) under `state_dir`, pods on the bridge
    of `subnet_index` (one live cluster per index, so parallel sessions pick different ones).

    After start(): `kubeconfig` (admin), `server`, `ca_file`, `pod_api_host`/`pod_api_port` (the API server
    as pods reach it), `timings` (seconds to API ready / to controllers ready), `kubelet_nodes` by name;
    `node_context`: all that a node is given of the cluster. `gang`: native gang scheduling on (gang_gates).
    """

    def __init__(
        self,
        name: str = "mwms",
        state_dir: Path | str | None = None,
        bin_dir: Path | str | None = None,
        subnet_index: int = 0,
        gang: bool = False,
    ):
        self.name, self.gang = name, gang
        self.net, self.subnet_index = network.pod_network(subnet_index), subnet_index
        self.state_dir = Path(state_dir or Path.cwd() / ".mwms" / name).absolute()
        self._bin_dir, self._supervisor = (Path(bin_dir) if bin_dir else None), Supervisor(self.net.bridge)
        self._lock_file: int | None = None
        self.kubelet_nodes: dict[str, kubelet_node.KubeletNode] = {}
        self.api_port = 0
        self.timings: dict[str, float] = {}  # seconds from start() to each milestone

    # --- what callers use ---------------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "admin.kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def ca_file(self) -> Path:
        return self.state_dir / "pki" / "ca.crt"

    @property
    def pod_api_host(self) -> str:
        return self.net.gateway

    @property
    def pod_api_port(self) -> int:
        return self.api_port

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def node_context(self) -> NodeContext:
        """What each node of this cluster is given of it."""
        return NodeContext(
            server=self.server,
            pki_dir=self.state_dir / "pki",
            net=self.net,
            supervisor=self._supervisor,
            logs_dir=self.logs_dir,
            nodes_dir=self.state_dir / "nodes",
        )

    def pids(self) -> list[int]:
        """Every process this cluster started that may still exist (for leak checks)."""
        return self._supervisor.pids()

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> LocalCluster:
        started = time.monotonic()
        if os.geteuid() != 0:
            raise ClusterError("the local cluster needs root (it creates a bridge and network namespaces)")
        bin_dir = self._bin_dir or find_bin_dir()
        missing = [b for b in BINARIES if not os.access(bin_dir / b, os.X_OK)]
        if missing:
            script = "hack/build/build-control-plane.sh"
            raise ClusterError(f"missing in {bin_dir}: {', '.join(missing)}; run {script}")
        self._take_lock()
        atexit.register(self.stop)
        try:
            self._clean_leftovers()
            self._prepare_state_dir()
            network.create_bridge(self.net)
            credentials = self._write_credentials()
            self._apiserver_inputs = (bin_dir, credentials)  # for restart_apiserver
            self._start_etcd(bin_dir)
            self._start_apiserver(bin_dir, credentials)
            self._wait_https("kube-apiserver", f"{self.server}/readyz", verify=True)
            self.timings["api_ready"] = time.monotonic() - started
            self._start_controllers(bin_dir, credentials)
            self.timings["ready"] = time.monotonic() - started
        except BaseException:
            self.stop()
            raise
        return self

    def start_kubelet_node(
        self,
        node_name: str = "node-1",
        images: Sequence[Path] = (),
        wait_dns: bool = True,
        image_store: Path | None = None,
    ) -> kubelet_node.KubeletNode:
        """Start a real node (kubelet, containerd) and, on the cluster's first node, kube-proxy and the
        add-ons (CoreDNS, the volume provisioner), which then serve every node; `images` (OCI archives)
        are loaded into its containerd first. `image_store`: containerd's root instead of the one kept for
        this node name (an empty one holds only what is loaded or pulled). Returns once the Node is Ready
        (and, with `wait_dns`, CoreDNS too)."""
        if not self.api_port:
            raise ClusterError("start() the cluster before its nodes")
        first = not any(node.cluster_services for node in self.kubelet_nodes.values())
        node = kubelet_node.KubeletNode(
            self.node_context,
            node_parts.find_node_parts(),
            node_name,
            image_store=image_store,
            cluster_services=first,
        )
        self.kubelet_nodes[node_name] = node
        try:
            node.start(images=images, wait_dns=wait_dns)
        except node_parts.NodeError as exc:
            raise ClusterError(str(exc)) from exc
        return node

    def stop_kubelet_node(self, node_name: str) -> None:
        """Stop one real node and forget it (its Node object stays, as that of a machine switched off)."""
        self.kubelet_nodes.pop(node_name).stop()

    def restart_apiserver(self, sig: signal.Signals = signal.SIGTERM) -> float:
        """Stop the API server (`sig`, SIGKILL after 10 s) and start it again on the same port and etcd, as
        an upgrade or a crash does; seconds from its start until it answers /readyz again."""
        self._supervisor.stop("kube-apiserver", sig=sig)
        started = time.monotonic()
        self._start_apiserver(*self._apiserver_inputs)
        self._wait_https("kube-apiserver", f"{self.server}/readyz", verify=True)
        return time.monotonic() - started

    def stop(self) -> None:
        """Stop everything this cluster started and remove its bridge. Safe to call again."""
        if self._lock_file is None:
            return  # never started, or already stopped: the bridge may belong to someone else's cluster
        for node in self.kubelet_nodes.values():
            node.stop()  # before the control plane: the kubelet's containers are not in our cgroup
        self._supervisor.stop_all()
        with contextlib.suppress(network.NetworkError):
            network.delete_bridge(self.net)
        self._release_lock()
        atexit.unregister(self.stop)

    def clean(self) -> None:
        """Remove what a crashed run on this subnet index left (processes, bridge); refuse if one is live."""
        self._take_lock()
        try:
            self._clean_leftovers()
        finally:
            self._release_lock()

    def _clean_leftovers(self) -> None:
        # We hold the subnet's lock, so whatever is still in its cgroup or on its bridge is a dead run's.
        self._supervisor.cgroup.kill_all()
        nodes_dir = self.node_context.nodes_dir
        if nodes_dir.is_dir():
            for node_dir in nodes_dir.iterdir():
                node_host.clean_dead_node(self.net, node_dir)
        network.delete_bridge(self.net)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- steps -----------------------------------------------------------------------------------
    def _take_lock(self) -> None:
        """One live cluster per subnet index; the lock dies with its holder, so a crash frees it."""
        if self._lock_file is not None:
            raise ClusterError(f"cluster {self.name} is already started")
        LOCK_DIR.mkdir(parents=True, exist_ok=True)
        fd = os.open(LOCK_DIR / f"{self.net.bridge}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode().strip()
            os.close(fd)
            raise ClusterError(
                f"subnet_index {self.subnet_index} ({self.net.bridge}) is used by another live cluster "
                f"(pid {holder or '?'}); pick another subnet_index"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._lock_file = fd

    def _release_lock(self) -> None:
        if self._lock_file is not None:
            os.close(self._lock_file)  # closing drops the flock
            self._lock_file = None

    def _prepare_state_dir(self) -> None:
        if self.state_dir.exists() and any(self.state_dir.iterdir()):
            if not (self.state_dir / STATE_MARKER).exists():
                raise ClusterError(f"state_dir {self.state_dir} is not empty and not a cluster state dir")
            shutil.rmtree(self.state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        (self.state_dir / STATE_MARKER).write_text(f"{self.name} {self.net.bridge}\n")
        self.logs_dir.mkdir()

    def _write_credentials(self) -> pki.PkiFiles:
        self.api_port = free_port("0.0.0.0")
        files = pki.write_cluster_pki(
            self.state_dir / "pki",
            api_ips=("127.0.0.1", self.net.gateway, self.net.kubernetes_service_ip),
            clients=CLIENTS,
        )
        ca_pem = files.ca_cert.read_bytes()
        for stem in KUBECONFIGS:
            cert, key = files.clients[stem]
            config = kubeconfig(self.server, ca_pem, cert.read_bytes(), key.read_bytes(), CLIENTS[stem][0])
            path = self.state_dir / f"{stem}.kubeconfig"
            path.write_text(json.dumps(config, indent=2))
            path.chmod(0o600)
        return files

    def _start_etcd(self, bin_dir: Path) -> None:
        client, peer = free_port(), free_port()
        self._etcd_url = f"http://127.0.0.1:{client}"
        peer_url = f"http://127.0.0.1:{peer}"
        argv = [
            str(bin_dir / "etcd"),
            f"--name={self.name}",
            f"--data-dir={self.state_dir / 'etcd'}",
            f"--listen-client-urls={self._etcd_url}",
            f"--advertise-client-urls={self._etcd_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster={self.name}={peer_url}",
            "--initial-cluster-state=new",
            "--unsafe-no-fsync=true",  # a throw-away test store: durability buys nothing, fsync costs seconds
            "--log-level=warn",
            # etcd's default 2 GiB store fills with the revisions of a 20k-pod scale run between the API
            # server's compactions; large clusters raise it to 8 GiB likewise
            "--quota-backend-bytes=8589934592",
        ]
        self._supervisor.spawn("etcd", argv, self.logs_dir / "etcd.log")

    def _start_apiserver(self, bin_dir: Path, p: pki.PkiFiles) -> None:
        argv = [
            str(bin_dir / "kube-apiserver"),
            f"--etcd-servers={self._etcd_url}",
            # One listener for both loopback (kubeconfig) and the pods on the bridge (gateway IP).
            "--bind-address=0.0.0.0",
            f"--secure-port={self.api_port}",
            f"--advertise-address={self.net.gateway}",
            f"--cert-dir={self.state_dir / 'apiserver'}",
            f"--tls-cert-file={p.apiserver_cert}",
            f"--tls-private-key-file={p.apiserver_key}",
            f"--client-ca-file={p.ca_cert}",
            f"--kubelet-client-certificate={p.clients['apiserver-kubelet-client'][0]}",
            f"--kubelet-client-key={p.clients['apiserver-kubelet-client'][1]}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={p.sa_pub}",
            f"--service-account-signing-key-file={p.sa_key}",
            f"--service-cluster-ip-range={self.net.service_cidr}",
            "--authorization-mode=Node,RBAC",
            # Nodes register their bridge IP; without this the API server dials their hostname (logs, exec).
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            "--enable-admission-plugins=NodeRestriction",  # on top of the default set, as kubeadm does
            "--allow-privileged=true",
            "--profiling=false",
            *(gang_gates.GANG_API_FLAGS if self.gang else ()),
        ]
        self._supervisor.spawn("kube-apiserver", argv, self.logs_dir / "kube-apiserver.log")

    def _start_controllers(self, bin_dir: Path, p: pki.PkiFiles) -> None:
        kcm_port, sched_port = free_port(), free_port()
        kcm_config = self.state_dir / "controller-manager.kubeconfig"
        sched_config = self.state_dir / "scheduler.kubeconfig"
        kcm = [
            str(bin_dir / "kube-controller-manager"),
            f"--kubeconfig={kcm_config}",
            f"--authentication-kubeconfig={kcm_config}",
            f"--authorization-kubeconfig={kcm_config}",
            "--bind-address=127.0.0.1",
            f"--secure-port={kcm_port}",
            f"--cert-dir={self.state_dir / 'controller-manager'}",
            "--leader-elect=false",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={p.sa_key}",
            f"--root-ca-file={p.ca_cert}",
            f"--cluster-signing-cert-file={p.ca_cert}",
            f"--cluster-signing-key-file={p.ca_key}",
            f"--service-cluster-ip-range={self.net.service_cidr}",
            "--controllers=*",
            "--profiling=false",
            *(gang_gates.GANG_FLAGS if self.gang else ()),
        ]
        scheduler = [
            str(bin_dir / "kube-scheduler"),
            f"--kubeconfig={sched_config}",
            f"--authentication-kubeconfig={sched_config}",
            f"--authorization-kubeconfig={sched_config}",
            "--bind-address=127.0.0.1",
            f"--secure-port={sched_port}",
            "--leader-elect=false",
            "--profiling=false",
            *(gang_gates.GANG_FLAGS if self.gang else ()),
        ]
        self._supervisor.spawn("kube-controller-manager", kcm, self.logs_dir / "kube-controller-manager.log")
        self._supervisor.spawn("kube-scheduler", scheduler, self.logs_dir / "kube-scheduler.log")
        # Their /healthz answers only once they have synced with the API server.
        self._wait_https("kube-controller-manager", f"https://127.0.0.1:{kcm_port}/healthz", verify=False)
        self._wait_https("kube-scheduler", f"https://127.0.0.1:{sched_port}/healthz", verify=False)

    def _wait_https(self, component: str, url: str, verify: bool) -> None:
        """Poll `url` until it answers 200; fail early, with the log's tail, if the component died."""
        # The controllers serve self-signed certs of their own.
        plane = self.node_context  # the same API access and process checks the nodes get
        context = plane.admin_tls() if verify else ssl._create_unverified_context()
        deadline = time.monotonic() + READY_TIMEOUT
        last_error = ""
        while time.monotonic() < deadline:
            plane.check_alive(component)
            try:
                with urllib.request.urlopen(url, context=context, timeout=5) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError) as exc:
                last_error = str(exc)
            time.sleep(0.1)
        raise ClusterError(
            f"{component} not ready at {url} after {READY_TIMEOUT:.0f}s ({last_error}):\n"
            + plane.log_tail(component)
        )
