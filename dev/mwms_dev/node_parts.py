"""A real node's parts and whether this host can run them: what hack/build/build-node.sh built (binaries, CNI
plugins, the add-ons' image archives, one cache directory per version set), the Debian tools the node needs
from the host, and which images an OCI archive holds. NodeError, the error of every node module, is here."""

from __future__ import annotations

import json
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path

from mwms_dev.builds import BuildError, built

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "hack" / "build" / "build-node.sh"
IMAGE_STORE_LAYOUT = 1  # bump when the store's configuration changes, so an old store is not reused


class NodeError(RuntimeError):
    pass


@dataclass(frozen=True)
class NodeParts:
    """What hack/build/build-node.sh built (one cache directory per version set)."""

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
    """$MWMS_NODE_DIR, else whatever hack/build/build-node.sh prints (it builds what is missing)."""
    if env_dir := os.environ.get("MWMS_NODE_DIR"):
        return NodeParts(Path(env_dir))
    try:
        return NodeParts(built(BUILD_SCRIPT.name, timeout=None, progress=True))
    except BuildError as e:
        raise NodeError(str(e)) from None


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
