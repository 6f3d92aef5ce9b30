"""A real node for the local control plane: kubelet, containerd and runc, the reference CNI plugins,
kube-proxy (nftables), CoreDNS and the default StorageClass `standard` (mwms_dev.local_path), built by
hack/build/build-node.sh.

    cluster = LocalCluster(...).start()
    node = cluster.start_kubelet_node(images=[Path("build/images/mwms-trainer.oci.tar")])

This module is the node's lifecycle (start, stop, kill); node_parts says what was built and what the host has,
node_configs and node_addons (pure) write its configurations and add-ons, node_host changes the host and puts
it back. A node knows its cluster only through its NodeContext (mwms_dev.node_context).

Everything lives under `<state_dir>/nodes/<name>/`, so nothing clashes with a system containerd or kubelet;
containerd's image store is kept between runs (`image_store`), so an image loaded before is not unpacked
again. Pods join the cluster's bridge `mwbr<N>`, resolve names through CoreDNS only, and an nftables table
drops what they send off the bridge: no pod packet leaves the machine.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from mwms_dev import local_path, node_addons, node_configs, node_host, node_parts
from mwms_dev.node_context import NodeContext, free_port
from mwms_dev.node_parts import NodeError, NodeParts

NODE_READY_TIMEOUT = 120.0


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
        self.cgroup_root = f"{node_host.own_cgroup_parent()}/mwms-{context.net.bridge}-{node_name}"
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
        problem = node_parts.host_tools_problem()
        if problem:
            raise NodeError(problem)
        if self.cluster_services:
            self._kube_proxy_lock = node_host.take_kube_proxy_lock(
                f"pid {os.getpid()} {self.context.net.bridge}"
            )
        self._clean()
        self.dir.mkdir(parents=True, exist_ok=True)
        for sub in ("cni/net.d", "manifests", "kubelet", "logs"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        (self.dir / "resolv.conf").write_text(
            f"# no upstream: pods resolve {node_configs.CLUSTER_DOMAIN} names only\n"
        )
        if self.cluster_services:
            node_host.add_pod_guard(self.context.net)
        created = node_host.make_cgroup_root(self.cgroup_root)
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
        node_host.save_kernel_tunables(self.dir / "kernel-tunables.json")
        self._start_kubelet(credentials["kubelet"])
        self.context.wait_node_ready(self.node_name, self._key("kubelet"), timeout=NODE_READY_TIMEOUT)
        node_host.restore_kernel_tunables(self.dir / "kernel-tunables.json")
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
        node_host.kill_cgroup_tree(self.cgroup_root)
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
        node_host.kill_cgroup_tree(self.cgroup_root)
        node_host.kill_shims(self.containerd_socket)
        self.context.supervisor.stop(self._key("containerd"), sig=signal.SIGKILL)

    def _clean(self) -> None:
        cgroups_file = self.dir / "cgroups.json"
        created = json.loads(cgroups_file.read_text())["created"] if cgroups_file.is_file() else []
        node_host.remove_cgroup_root(self.cgroup_root, created)
        node_host.kill_shims(self.containerd_socket)
        node_host.unmount_below(self.dir)
        node_host.restore_kernel_tunables(self.dir / "kernel-tunables.json")
        node_host.remove_dead_shim_sockets()
        if self.cluster_services:  # the pod guard and kube-proxy's tables serve every node of the cluster
            node_host.remove_nft_tables(self.context.net, kube_proxy=self._kube_proxy_lock is not None)

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
            wanted = node_parts.archive_images(Path(archive))
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

    def trust_registry(self, address: str, ca_file: Path) -> None:
        """Let containerd pull from the registry at `address` (host:port) over TLS signed by `ca_file`. No
        credentials go here: the kubelet passes each pod's imagePullSecrets with its pulls."""
        hosts = node_configs.registry_hosts_dir(self.dir) / address
        hosts.mkdir(parents=True, exist_ok=True)
        (hosts / "hosts.toml").write_text(node_configs.registry_hosts_toml(address, ca_file))

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
            node_configs.containerd_config(
                self.dir, self.image_store, self.parts.cni_bin_dir, self.parts.image_names["pause"]
            )
        )
        (self.dir / "cni/net.d/10-mwms.conflist").write_text(
            json.dumps(node_configs.cni_config(self.context.net, self.context.ipam_dir), indent=2)
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
                node_configs.kubelet_config(
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
                node_configs.kube_proxy_config(
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
        objects = node_addons.coredns_objects(
            self.context.net, names["coredns"]
        ) + local_path.local_path_objects(
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
