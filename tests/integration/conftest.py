"""Fixtures for the integration tier: the real control plane with one real kubelet node, for this package.

`cluster` (package: the node stops when this tier ends, before the node tier starts its own; only one real
node runs per machine): on subnet index MWMS_TEST_SUBNET_INDEX, with the project's images from build/images/
(`make images`). `kubectl` (package): kubectl as its admin. `namespace`: a fresh namespace per test, deleted
afterwards. `trainer_image`: the project's trainer image loaded on the node, which the stand-in workers run in
(skips without `make images`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support.standin import trainer_image as find_trainer_image


@pytest.fixture(scope="package")
def cluster(
    real_node_cluster: Callable[..., Any], subnet_index: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator:
    state_dir = os.environ.get("MWMS_TEST_STATE_DIR") or tmp_path_factory.mktemp("cluster")
    with real_node_cluster("test", state_dir, subnet_index) as local:
        yield local


@pytest.fixture(scope="package")
def kubectl(cluster: Any, make_kubectl: Any) -> Any:
    return make_kubectl(cluster.kubeconfig)


@pytest.fixture
def namespace(kubectl: Any) -> Iterator[str]:
    with kubectl.fresh_namespace("t") as name:
        yield name


@pytest.fixture(scope="package")
def trainer_image(cluster: Any) -> str:
    return find_trainer_image(cluster.kubelet_nodes["node-1"].images())
