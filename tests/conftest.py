"""Fixtures shared by every test tier. Nothing here imports TensorFlow.

`real_node_cluster`: `with real_node_cluster(name, state_dir, subnet_index) as cluster:`, a real local control
plane (mwms_dev.cluster.LocalCluster) with one real kubelet node and the project's images; the integration
tier's `cluster` (tests/integration/conftest.py), the node tier's and README's own use it, one at a time.
`make_kubectl(kubeconfig)`: kubectl as a cluster's admin (`kubectl(*args)`, `.json(*args)`,
`.apply(manifest_dict)`, `.fresh_namespace()`). `wait_for`: poll a predicate.
A test's tier is its folder (tests/<tier>/), which also gives it the tier's marker; every run ends with a
table of each tier's counts and wall time, and under CI a skip fails (mwms_kit.tiers).
Every test cluster serves the PodGroup API with the GenericWorkload gate on (`gang`, LocalCluster's): it
changes nothing for pods without a PodGroup, and the operator's default (spec.scheduling.gang Auto) then
places every group all or nothing, as it will on clusters that turn it on.
`subnet_index`: MWMS_TEST_SUBNET_INDEX (default 0, at most 25; helpers developing in parallel use their own):
the integration tier's cluster takes it, the node tier's +20, a test's spare cluster +10 (+15 in the
integration tier's shard b), README's own +30.
Environment: MWMS_TEST_STATE_DIR (keep the cluster's state and logs there instead of pytest's tmp dir),
MWMS_KUBECTL (default: the pinned kubectl hack/build/tools.sh links into .venv/bin, else PATH)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from mwms_kit.shards import namespace_name, spare_subnet_offset
from mwms_kit.tiers import Tiers

if TYPE_CHECKING:
    from mwms_kit.oci_registry import OciRegistry


def find_kubectl() -> str:
    """$MWMS_KUBECTL, else the pinned one hack/build/tools.sh links into the venv, else any on PATH."""
    pinned = Path(sys.executable).parent / "kubectl"
    return (
        os.environ.get("MWMS_KUBECTL")
        or (str(pinned) if pinned.exists() else None)
        or shutil.which("kubectl")
        or "/usr/bin/kubectl"
    )


KUBECTL = find_kubectl()


# Bridges go up to mwbr55 (10.255.0.0/16); README's cluster takes the session's index + 30.
MAX_SUBNET_INDEX = 25


def cluster_subnet_index() -> int:
    raw = os.environ.get("MWMS_TEST_SUBNET_INDEX", "0").strip()
    if not raw.isdigit() or int(raw) > MAX_SUBNET_INDEX:
        raise pytest.UsageError(
            f"MWMS_TEST_SUBNET_INDEX={raw!r}: an integer from 0 to {MAX_SUBNET_INDEX} (the node tier's "
            "cluster takes it + 20 and README's own + 30, and bridges go up to mwbr55)"
        )
    return int(raw)


def pytest_configure(config: pytest.Config) -> None:
    cluster_subnet_index()  # a bad value stops the session at once, not at the node tier's first test
    # Each test marked with its folder's tier, each tier's counts at the end; under CI a skip fails.
    config.pluginmanager.register(Tiers(), "mwms-tiers")


@pytest.hookimpl(trylast=True)  # after the integration tier keeps its shard's modules
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked `waits_for_build` go last, in their order: on a cold machine their build
    (hack/ci/run-tests.py starts it beside the tests) takes minutes, and the session runs its other tests
    meanwhile."""
    items.sort(key=lambda item: item.get_closest_marker("waits_for_build") is not None)  # a stable sort


def platform_problem() -> str | None:
    """Why this machine cannot run a local cluster, or None. Only true platform limits count."""
    if os.geteuid() != 0:
        return "the local control plane needs root (bridge, network namespaces); run as root as CI does"
    try:
        subprocess.run(["unshare", "--net", "true"], check=True, capture_output=True, timeout=30)
    except (OSError, subprocess.CalledProcessError) as exc:
        return f"cannot create a network namespace here (`unshare --net true`: {exc})"
    return None


class Kubectl:
    """kubectl with the admin kubeconfig; argument lists only."""

    def __init__(self, kubeconfig: Path):
        self.kubeconfig = kubeconfig

    def __call__(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [KUBECTL, f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
        return result

    def json(self, *args: str) -> dict:
        return json.loads(self(*args, "-o", "json").stdout)

    def stream(self, *args: str) -> subprocess.Popen[str]:
        """kubectl in the background, its stdout a pipe (`get ... --watch`); the caller stops it."""
        argv = [KUBECTL, f"--kubeconfig={self.kubeconfig}", *args]
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def apply(self, manifest: dict | list[dict], *extra: str, check: bool = True):
        if isinstance(manifest, list):  # kubectl reads one JSON document from stdin: wrap several in a List
            manifest = {"apiVersion": "v1", "kind": "List", "items": manifest}
        return self("apply", "-f", "-", *extra, input=json.dumps(manifest), check=check)

    @contextmanager
    def fresh_namespace(self, prefix: str = "t") -> Iterator[str]:
        """A new namespace, ready for pods; deleted (without waiting) afterwards."""
        name = namespace_name(prefix)  # under the shard's prefix when sharded (mwms_kit/shards.py)
        self("create", "namespace", name)
        # Pods are refused until the service-account controller has made the namespace's `default` account.
        wait_for(
            lambda: self("get", "serviceaccount", "default", "-n", name, check=False).returncode == 0,
            timeout=30,
            interval=0.2,
            what=f"serviceaccount default in {name}",
        )
        try:
            yield name
        finally:
            self("delete", "namespace", name, "--wait=false", check=False)

    def restrict(self, namespace: str) -> None:
        """Make the namespace enforce Pod Security `restricted`, as a hardened cluster does."""
        self(
            "label",
            "namespace",
            namespace,
            "--overwrite",
            "pod-security.kubernetes.io/enforce=restricted",
            "pod-security.kubernetes.io/enforce-version=latest",
        )


def wait_for(predicate: Callable[[], object], timeout: float = 60, interval: float = 0.5, what: str = ""):
    """Poll until `predicate()` returns something truthy and return it; fail with `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)


@pytest.fixture(name="wait_for", scope="session")
def wait_for_fixture() -> Callable[..., object]:
    """`wait_for(predicate, timeout=60, interval=0.5, what="...")` for tests."""
    return wait_for


@pytest.fixture(scope="session")
def cluster_platform() -> None:
    """Skip (with the reason) where no local cluster can run; depend on it to start clusters of your own."""
    problem = platform_problem()
    if problem:
        pytest.skip(problem)


@pytest.fixture(scope="session")
def subnet_index() -> int:
    return cluster_subnet_index()


@pytest.fixture(scope="session")
def spare_subnet_index() -> int:
    """A subnet index for a test's own extra cluster, next to the session's (each integration shard has its
    own, so two shards never start one on the same bridge)."""
    return cluster_subnet_index() + spare_subnet_offset()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.fixture(scope="session")
def teardown_on_sigterm() -> None:
    """A CI timeout sends SIGTERM: end the session as Ctrl-C would, so cluster teardowns still run."""
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupt)


@contextmanager
def real_node_cluster(
    name: str,
    state_dir: str | Path,
    subnet_index: int,
    *,
    keep_nodes: bool = False,
    images: Sequence[Path] | None = None,
    image_store: Path | None = None,
    gang: bool = True,
) -> Iterator:
    """A local control plane with one real kubelet node and the project's images (build/images/) loaded, or
    `images`; skips without the host's tools. `image_store`: the node's containerd root instead of the kept
    one. Stopped on the way out; the node's containerd state (unpacked images, the pods' files: several GB)
    goes too unless `keep_nodes`."""
    from mwms_dev.cluster import LocalCluster
    from mwms_dev.devcluster import project_images
    from mwms_dev.node_parts import host_tools_problem

    problem = host_tools_problem()
    if problem:
        pytest.skip(problem)
    local = LocalCluster(name=name, state_dir=state_dir, subnet_index=subnet_index, gang=gang)
    local.start()
    try:
        loaded = project_images() if images is None else images
        local.start_kubelet_node(images=loaded, image_store=image_store)
        yield local
    finally:
        local.stop()
        if not keep_nodes:
            shutil.rmtree(local.state_dir / "nodes", ignore_errors=True)


@contextmanager
def control_plane_cluster(
    name: str, state_dir: str | Path, subnet_index: int, *, gang: bool = True
) -> Iterator:
    """A local control plane without a node (no pod runs, so no node lock): tests of the API server's side."""
    from mwms_dev.cluster import LocalCluster

    local = LocalCluster(name=name, state_dir=state_dir, subnet_index=subnet_index, gang=gang)
    local.start()
    try:
        yield local
    finally:
        local.stop()


@contextmanager
def pulling_node_cluster(name: str, state_dir: Path, subnet_index: int, registry: OciRegistry) -> Iterator:
    """A real node that holds none of our images (it must pull them) and trusts `registry`'s CA; its image
    store (GBs of unpacked layers, which pytest's tmp dirs would keep) goes on the way out."""
    store = state_dir / "image-store"
    try:
        with real_node_cluster(name, state_dir, subnet_index, images=[], image_store=store) as local:
            node = local.kubelet_nodes["node-1"]
            held = [image for image in node.images() if "/mwms-operator" in image or "/mwms-trainer" in image]
            assert not held, f"the node must start without our images, holds {held}"
            node.trust_registry(registry.address, registry.ca_file)
            yield local
    finally:
        shutil.rmtree(store, ignore_errors=True)


@pytest.fixture(name="control_plane_cluster", scope="session")
def control_plane_cluster_fixture(cluster_platform: None, teardown_on_sigterm: None) -> Callable[..., object]:
    """`with control_plane_cluster(name, state_dir, subnet_index) as cluster:`: no node."""
    return control_plane_cluster


@pytest.fixture(name="real_node_cluster", scope="session")
def real_node_cluster_fixture(cluster_platform: None, teardown_on_sigterm: None) -> Callable[..., object]:
    """`with real_node_cluster(name, state_dir, subnet_index) as cluster:` for a cluster with a real node."""
    return real_node_cluster


@pytest.fixture(name="pulling_node_cluster", scope="session")
def pulling_node_cluster_fixture(cluster_platform: None, teardown_on_sigterm: None) -> Callable[..., object]:
    """`with pulling_node_cluster(name, state_dir, subnet_index, registry) as cluster:`: images pulled."""
    return pulling_node_cluster


@pytest.fixture(scope="session")
def make_kubectl() -> type[Kubectl]:
    """`make_kubectl(kubeconfig)`: the same helper for a cluster a test starts itself."""
    return Kubectl
