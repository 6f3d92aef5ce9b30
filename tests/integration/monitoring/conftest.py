"""The monitoring checks need the API server, not pods that run: a local control plane of their own (etcd,
kube-apiserver, controller-manager, scheduler; no kubelet node), on the session's spare subnet index, so they
run beside the tier's real node without its images."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def cluster(spare_cluster: Any) -> Any:
    return spare_cluster


@pytest.fixture
def namespace(kubectl: Any) -> Iterator[str]:
    with kubectl.fresh_namespace("mon") as name:
        yield name


@pytest.fixture
def quota_of_no_pods(kubectl: Any, namespace: str, wait_for: Any) -> str:
    """A namespace whose ResourceQuota allows no pod: every worker create is refused (403, for now)."""
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "pods"},
        "spec": {"hard": {"pods": "0"}},
    }
    kubectl.apply(quota, "-n", namespace)
    wait_for(  # enforced once the quota controller has counted what is there
        lambda: kubectl.json("get", "resourcequota", "pods", "-n", namespace).get("status", {}).get("hard"),
        what="the quota's status",
    )
    return namespace
