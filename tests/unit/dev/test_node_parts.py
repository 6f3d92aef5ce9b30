"""The real node's parts (node_parts): where each node's image store is, what an image archive holds."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from mwms_dev import node_parts


def test_each_node_has_a_containerd_root_of_its_own_and_node_1_keeps_the_existing_one():
    parts = node_parts.NodeParts(Path("/cache/node/k8s-v1"))
    stores = [parts.image_store(name) for name in ("node-1", "node-2", "node-3")]
    assert stores[0] == Path(f"/cache/node/containerd-root-r{node_parts.IMAGE_STORE_LAYOUT}")
    assert len(set(stores)) == 3  # a containerd locks its root: two nodes cannot share one


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
    assert node_parts.archive_images(archive) == {"ghcr.io/mwms-dev/mwms-trainer:0.2.0": "sha256:abc"}
