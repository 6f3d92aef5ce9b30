"""What a node gets from the LocalCluster it joins: mwms_dev.cluster builds a NodeContext and hands it to
each node it starts (mwms_dev.kubelet_node), so a node needs nothing else of the cluster and neither module
imports the other."""

from __future__ import annotations

import base64
import json
import socket
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mwms_dev import network, pki
from mwms_dev.procs import Supervisor

READY_TIMEOUT = 90.0


class ClusterError(RuntimeError):
    pass


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def kubeconfig(server: str, ca_pem: bytes, cert_pem: bytes, key_pem: bytes, user: str) -> dict:
    """A self-contained kubeconfig (credentials embedded, so it can be copied anywhere)."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "mwms", "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)}}
        ],
        "users": [
            {
                "name": user,
                "user": {"client-certificate-data": b64(cert_pem), "client-key-data": b64(key_pem)},
            }
        ],
        "contexts": [{"name": "mwms", "context": {"cluster": "mwms", "user": user}}],
        "current-context": "mwms",
    }


@dataclass(frozen=True)
class NodeContext:
    """The control plane as a node sees it: the API server, the cluster's credentials, the pod network, and
    the cluster's process supervisor (a node's processes are stopped with the cluster's)."""

    server: str  # the API server's URL from this host
    pki_dir: Path  # the cluster CA (ca.crt, ca.key) and the admin client certificate (admin.crt, admin.key)
    net: network.PodNetwork  # the bridge the node's pods join
    supervisor: Supervisor
    logs_dir: Path  # <process name>.log for each supervised process
    nodes_dir: Path  # one directory per node, by name

    @property
    def ca_file(self) -> Path:
        return self.pki_dir / "ca.crt"

    @property
    def ipam_dir(self) -> Path:
        """The CNI host-local plugin's IP reservations, one directory for all the nodes on the bridge: the
        plugin locks it, so two nodes never hand out the same pod IP."""
        return self.nodes_dir.parent / "pod-ipam"

    def node_kubeconfig(self, path: Path, user: str, groups: Sequence[str]) -> Path:
        """Write a kubeconfig for `user` in `groups`, with a client certificate the cluster CA signed."""
        ca = pki.CertKey(self.ca_file.read_bytes(), (self.pki_dir / "ca.key").read_bytes())
        pair = pki.client_cert(ca, user, tuple(groups))
        path.write_text(json.dumps(kubeconfig(self.server, ca.cert_pem, pair.cert_pem, pair.key_pem, user)))
        path.chmod(0o600)
        return path

    def admin_tls(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        context.load_cert_chain(str(self.pki_dir / "admin.crt"), str(self.pki_dir / "admin.key"))
        return context

    def api_get(self, path: str) -> dict:
        """GET an API path as admin (for readiness checks; tests use kubectl or a real client)."""
        with urllib.request.urlopen(self.server + path, context=self.admin_tls(), timeout=10) as response:
            return json.load(response)

    def api_create(self, collection: str, body: dict) -> dict:
        """POST an object into an API collection as admin (the add-ons the cluster installs itself)."""
        request = urllib.request.Request(
            self.server + collection,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, context=self.admin_tls(), timeout=10) as response:
                return json.load(response)
        except urllib.error.HTTPError as exc:
            raise ClusterError(
                f"POST {collection} ({body.get('kind')}): {exc.code} {exc.read()[:500]!r}"
            ) from None

    def wait_node_ready(
        self, node_name: str, process: str | None = None, timeout: float = READY_TIMEOUT
    ) -> None:
        """Until Node `node_name` is Ready; fail at once if `process` (else any supervised one) has died."""
        deadline = time.monotonic() + timeout
        condition: dict = {}
        while time.monotonic() < deadline:
            self.check_alive(f"Node {node_name}", only=process)
            try:
                node = self.api_get(f"/api/v1/nodes/{node_name}")
            except urllib.error.HTTPError as exc:
                if exc.code != 404:
                    raise
            else:
                conditions = node.get("status", {}).get("conditions", [])
                condition = next((c for c in conditions if c.get("type") == "Ready"), {})
                if condition.get("status") == "True":
                    return
            time.sleep(0.2)
        raise ClusterError(
            f"Node {node_name} not Ready after {timeout:.0f}s (Ready condition: {condition or 'none'})"
        )

    def check_alive(self, waiting_for: str, only: str | None = None) -> None:
        """Fail at once, with the log's tail, when a process we wait on has died."""
        for name, proc in self.supervisor.processes.items():
            if (only is None or name == only) and proc.poll() is not None:
                raise ClusterError(
                    f"{name} exited with code {proc.returncode} while waiting for {waiting_for}:\n"
                    + self.log_tail(name)
                )

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.logs_dir / f"{name}.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return f"(no log at {path})"
