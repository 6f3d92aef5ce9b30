"""Fixtures for the integration tier: the real control plane with one real kubelet node, for this package.

`cluster` (package: the node stops when this tier ends, before the node tier starts its own; only one real
node runs per machine): on subnet index MWMS_TEST_SUBNET_INDEX, with the project's images from build/images/
(`make images`); or, under hack/ci/run-tests.py, the shared cluster every shard of this tier attaches to
(mwms_kit/shards.py: MWMS_TEST_CLUSTER, MWMS_TEST_SHARD; each shard runs its own modules). `kubectl`
(module): kubectl as its admin. `namespace`: a fresh namespace per test, deleted afterwards. `crd` (module):
manifests/crd.yaml applied and served. `spare_cluster` (module): a control plane of the module's own, without
a node, on the session's spare subnet index (for tests of the API server's side, beside the tier's node).
`trainer_image`: the project's trainer image loaded on the node, which the stand-in workers run in (skips
without `make images`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mwms_kit.shards import AttachedCluster, assign, current_shard
from mwms_kit.standin import trainer_image as find_trainer_image

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Sharded (MWMS_TEST_SHARD): keep this shard's modules of this tier, and every test of other tiers."""
    shard = current_shard()
    if not shard:
        return
    ours = [item for item in items if item.path.is_relative_to(HERE)]
    shards = assign(sorted({str(item.path.relative_to(HERE)) for item in ours}))
    dropped = [item for item in ours if shards[str(item.path.relative_to(HERE))] != shard]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        kept = set(items) - set(dropped)
        items[:] = [item for item in items if item in kept]


@pytest.fixture(scope="package")
def cluster(
    real_node_cluster: Callable[..., Any], subnet_index: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator:
    shared = os.environ.get("MWMS_TEST_CLUSTER")
    if shared:  # hack/ci/run-tests.py's shared cluster: its owner stops it after every shard
        yield AttachedCluster.load(shared)
        return
    state_dir = os.environ.get("MWMS_TEST_STATE_DIR") or tmp_path_factory.mktemp("cluster")
    with real_node_cluster("test", state_dir, subnet_index) as local:
        yield local


@pytest.fixture(scope="module")  # module: a folder's own `cluster` (spare_cluster) is module-scoped
def kubectl(cluster: Any, make_kubectl: Any) -> Any:
    return make_kubectl(cluster.kubeconfig)


@pytest.fixture(scope="module")
def crd(kubectl: Any, wait_for: Any) -> None:
    kubectl("apply", "-f", str(HERE.parents[1] / "manifests" / "crd.yaml"))
    # Served once discovery knows it (kubectl wait races the CRD's first status).
    wait_for(
        lambda: kubectl("get", "trainjobs", "-A", check=False).returncode == 0,
        timeout=60,
        what="the TrainJob resource to be served",
    )


@pytest.fixture(scope="module")
def spare_cluster(
    request: pytest.FixtureRequest,
    control_plane_cluster: Callable[..., Any],
    spare_subnet_index: int,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator:
    name = request.path.parent.name  # the module's folder: client, monitoring
    with control_plane_cluster(name, tmp_path_factory.mktemp(f"{name}-cluster"), spare_subnet_index) as local:
        yield local


@pytest.fixture
def namespace(kubectl: Any) -> Iterator[str]:
    with kubectl.fresh_namespace("t") as name:
        yield name


@pytest.fixture(scope="package")
def trainer_image(cluster: Any) -> str:
    loaded = (
        cluster.images if isinstance(cluster, AttachedCluster) else cluster.kubelet_nodes["node-1"].images()
    )
    return find_trainer_image(loaded)
