"""Fixtures for the kind tier: README's real-cluster commands run through hack/ci/kind-e2e.sh, the script the
users' workflow runs, on a kind cluster of this machine.

`kind_env`: the environment those commands run in: a container engine that answers (Docker; where none runs,
hack/build/dockerd.sh starts Debian's dockerd, stopped again at the end), kind built from its Go module
(hack/build/build-kind.sh), our node image (hack/build/build-kind-node.sh: kindest/node cannot be pulled
here) loaded into the engine and named by KIND_NODE_IMAGE, Helm, kubectl and mwms on PATH, and a KUBECONFIG
of the session's own. Skips (under CI: fails, as every skip) where something is missing, with the reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from mwms_dev.builds import built
from mwms_dev.devcluster import project_images
from mwms_dev.devmode import tools_bin

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def container_engine() -> Iterator[str]:
    """`docker`, answering; started here (and stopped at the end) where no engine runs."""
    if shutil.which("docker") is None:
        pytest.skip("no docker CLI: kind needs a container engine (apt-get install docker.io)")
    if subprocess.run(["docker", "info"], capture_output=True).returncode == 0:
        yield "docker"
        return
    if os.geteuid() != 0:
        pytest.skip("no Docker engine answers, and starting one (hack/build/dockerd.sh) needs root")
    dockerd = REPO / "hack" / "build" / "dockerd.sh"
    started = subprocess.run(["bash", str(dockerd), "start"], capture_output=True, text=True)
    if started.returncode != 0:
        pytest.fail(f"hack/build/dockerd.sh start failed:\n{started.stderr}")
    try:
        yield "docker"
    finally:
        subprocess.run(["bash", str(dockerd), "stop"], check=False)


@pytest.fixture(scope="session")
def kind_node_image(container_engine: str) -> str:
    """Our node image, loaded into the engine's image store (once: the engine keeps it; older ones go)."""
    node = built("build-kind-node.sh")
    image = (node / "image").read_text().strip()
    present = subprocess.run([container_engine, "image", "inspect", image], capture_output=True)
    if present.returncode != 0:
        subprocess.run(
            [container_engine, "load", "-i", str(node / "node.tar")], check=True, capture_output=True
        )
    listed = [container_engine, "images", "--format", "{{.Repository}}:{{.Tag}}", image.rsplit(":", 1)[0]]
    older = [
        name
        for name in subprocess.run(listed, capture_output=True, text=True).stdout.split()
        if name != image
    ]
    if older:
        subprocess.run([container_engine, "rmi", *older], check=False, capture_output=True)
    return image


@pytest.fixture(scope="session")
def kind_env(kind_node_image: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    if len(project_images()) < 2:
        pytest.skip("no build/images/*.oci.tar: run `make images` first")
    kind_bin = built("build-kind.sh") / "bin"
    path = os.pathsep.join([str(kind_bin), str(tools_bin()), str(REPO / ".venv" / "bin"), os.environ["PATH"]])
    return {
        **os.environ,
        "PATH": path,
        "KIND_NODE_IMAGE": kind_node_image,
        "KUBECONFIG": str(tmp_path_factory.mktemp("kind") / "kubeconfig"),
    }
