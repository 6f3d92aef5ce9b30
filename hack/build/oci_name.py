"""Name the image of an OCI layout directory for containerd: `io.containerd.image.name` on its index entry.

`ctr images import` (what `kind load image-archive` runs) takes the image's name from that annotation first.
The OCI spec means `org.opencontainers.image.ref.name` to be a bare tag, so a full reference there is read
differently by different importers; the containerd annotation leaves no doubt.
Usage: oci_name.py DIR REFERENCE
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def name_index(index: dict, reference: str) -> dict:
    (manifest,) = index["manifests"]
    annotations = manifest.setdefault("annotations", {})
    annotations["io.containerd.image.name"] = reference
    annotations["org.opencontainers.image.ref.name"] = reference
    return index


def main(layout: str, reference: str) -> None:
    path = Path(layout) / "index.json"
    path.write_text(json.dumps(name_index(json.loads(path.read_text()), reference)))


if __name__ == "__main__":
    main(*sys.argv[1:])
