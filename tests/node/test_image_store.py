"""The real node's image store (mwms_dev.kubelet_node): containerd's root is kept between runs as a cache, so
a store left broken by one run must not fail every run after it, and an image rebuilt under the same name
must replace the old one. Each test runs a containerd of its own on a store in tmp_path, beside (not
instead of) the tier's node; no kubelet."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def lone_containerd(cluster_platform: None, spare_subnet_index: int) -> Iterator:
    """A KubeletNode whose containerd alone is started by the test, on a fresh store of its own (in a short
    directory: containerd's socket paths must stay under 104 characters)."""
    from mwms_dev.cluster import LocalCluster
    from mwms_dev.kubelet_node import KubeletNode
    from mwms_dev.node_host import unmount_below
    from mwms_dev.node_parts import find_node_parts, host_tools_problem

    if problem := host_tools_problem():
        pytest.skip(problem)
    with tempfile.TemporaryDirectory(prefix="mwms-store-") as scratch:
        cluster = LocalCluster(name="store", state_dir=Path(scratch) / "c", subnet_index=spare_subnet_index)
        context = cluster.node_context  # the cluster is never started: containerd needs no control plane
        context.logs_dir.mkdir(parents=True)
        node = KubeletNode(context, find_node_parts(), "store", image_store=Path(scratch) / "store")
        (node.dir / "cni/net.d").mkdir(parents=True)
        try:
            yield node
        finally:
            context.supervisor.stop_all()
            unmount_below(Path(scratch))


def test_a_broken_store_is_emptied_and_the_images_loaded_again(lone_containerd, capfd) -> None:
    node = lone_containerd
    busybox = node.parts.image_names["busybox"]
    node.start_containerd(images=[node.parts.busybox_archive])
    node.stop_containerd()
    # A metadata file cut short: containerd starts, but its image service does not.
    with (node.image_store / "io.containerd.metadata.v1.bolt" / "meta.db").open("r+b") as meta:
        meta.write(bytes(16384))

    node.start_containerd(images=[node.parts.busybox_archive])

    assert busybox in node.images()
    assert "emptying it and loading the images again" in capfd.readouterr().err


def test_an_image_rebuilt_under_its_name_replaces_the_old_one(lone_containerd, tmp_path: Path) -> None:
    node = lone_containerd
    busybox = node.parts.image_names["busybox"]
    node.start_containerd(images=[node.parts.busybox_archive])
    rebuilt = tmp_path / "rebuilt.oci.tar"
    digest = with_extra_layer(node.parts.busybox_archive, rebuilt, b"rebuilt\n")

    node.load_images([rebuilt])

    assert node.image_digests() == {busybox: digest}, "the old image is gone, not kept by its ID"


def with_extra_layer(archive: Path, out: Path, content: bytes) -> str:
    """Write a copy of a one-image OCI archive with one more layer (a file holding `content`): the same
    name and base layers, a new manifest, as a rebuild of the image after a code change. Returns the new
    manifest digest."""
    with tarfile.open(archive) as tar:
        files = {m.name.removeprefix("./"): tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}

    def blob(digest: str) -> dict:
        return json.loads(files[f"blobs/sha256/{digest.removeprefix('sha256:')}"])

    def add(data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        files[f"blobs/sha256/{digest}"] = data
        return f"sha256:{digest}"

    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        info = tarfile.TarInfo("rebuilt.txt")
        info.size = len(content)
        tar.addfile(info, io.BytesIO(content))
    index = json.loads(files["index.json"])
    manifest = blob(index["manifests"][0]["digest"])
    config = blob(manifest["config"]["digest"])
    layer_bytes = layer.getvalue()
    layer_digest = add(layer_bytes)
    config["rootfs"]["diff_ids"].append(layer_digest)
    layer_type = "application/vnd.oci.image.layer.v1.tar"
    manifest["layers"].append({"mediaType": layer_type, "digest": layer_digest, "size": len(layer_bytes)})
    config_bytes = json.dumps(config).encode()
    manifest["config"] = {**manifest["config"], "digest": add(config_bytes), "size": len(config_bytes)}
    manifest_bytes = json.dumps(manifest).encode()
    manifest_digest = add(manifest_bytes)
    index["manifests"][0] = {**index["manifests"][0], "digest": manifest_digest, "size": len(manifest_bytes)}
    files["index.json"] = json.dumps(index).encode()
    with tarfile.open(out, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return manifest_digest
