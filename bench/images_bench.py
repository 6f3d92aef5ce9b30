"""Cold and warm `make images` and the two images' sizes, written to bench/results/images.json.

    .venv/bin/python bench/images_bench.py [--skip-cold]

Cold: an empty image cache (a fresh MWMS_IMAGES_CACHE: the mmdebstrap base, every layer, the wheels
directories), with pip's download cache as it is on this machine (said in the results). Warm: the same
command again on the cache it filled, nothing changed. Sizes: each archive's compressed layers (what a node
pulls) and the unpacked layers (what it stores). Needs root, buildah and mmdebstrap. Other work on the
machine slows the builds down: the load average is recorded with the numbers.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import subprocess
import tarfile
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "images.json"
ARCHIVES = REPO / "build" / "images"
MIB = 1024 * 1024


def build(cache: Path) -> float:
    began = time.monotonic()
    subprocess.run(
        ["bash", "hack/build/build-images.sh"],
        cwd=REPO,
        check=True,
        env={**os.environ, "MWMS_IMAGES_CACHE": str(cache)},
    )
    return round(time.monotonic() - began, 1)


def sizes(archive: Path) -> dict:
    with tarfile.open(archive) as tar:
        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
        digest = index["manifests"][0]["digest"].split(":")[1]
        manifest = json.load(tar.extractfile(f"blobs/sha256/{digest}"))  # type: ignore[arg-type]
        unpacked = 0
        for layer in manifest["layers"]:
            blob = tar.extractfile(f"blobs/sha256/{layer['digest'].split(':')[1]}")
            with gzip.open(blob) as stream:  # type: ignore[arg-type]
                while chunk := stream.read(MIB):
                    unpacked += len(chunk)
    return {
        "archive_mib": round(archive.stat().st_size / MIB, 1),
        "layers_compressed_mib": round(sum(layer["size"] for layer in manifest["layers"]) / MIB, 1),
        "layers_unpacked_mib": round(unpacked / MIB, 1),
        "layers": len(manifest["layers"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-cold", action="store_true", help="only the warm rebuild and the sizes")
    args = parser.parse_args()
    pip_cache = Path.home() / ".cache" / "pip"
    result: dict = {
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        ).stdout.strip(),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "load_average_before": os.getloadavg(),
        "pip_download_cache": "warm" if pip_cache.is_dir() and any(pip_cache.iterdir()) else "cold",
    }
    default_cache = Path(os.environ.get("MWMS_IMAGES_CACHE", Path.home() / ".cache" / "mwms" / "images"))
    if args.skip_cold:
        result["warm_seconds"] = build(default_cache)
    else:
        cache = Path(tempfile.mkdtemp(prefix="mwms-images-cold-"))
        try:
            result["cold_seconds"] = build(cache)
            result["load_average_after_cold"] = os.getloadavg()
            result["warm_seconds"] = build(cache)
        finally:
            subprocess.run(
                ["buildah", "--root", str(cache / "storage"), "--runroot", str(cache / "run"), "rm", "--all"],
                capture_output=True,
            )
            subprocess.run(["umount", "-R", str(cache / "storage" / "overlay")], capture_output=True)
            shutil.rmtree(cache, ignore_errors=True)
    result["load_average_after"] = os.getloadavg()
    result["images"] = {path.name: sizes(path) for path in sorted(ARCHIVES.glob("*.oci.tar"))}
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
