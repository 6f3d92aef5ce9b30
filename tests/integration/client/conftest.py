"""The client against a real API server, without pods that run: a local control plane of its own (etcd,
kube-apiserver, controller-manager, scheduler; no kubelet node, so no node lock), on the session's spare
subnet index, with our CRD and Kubeflow Trainer v2's TrainJob CRD installed side by side."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
KUBEFLOW_TRAINER = "github.com/kubeflow/trainer/v2@v2.0.0"
KUBEFLOW_CRD = "manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml"


@pytest.fixture(scope="module")
def cluster(spare_cluster: Any) -> Any:
    return spare_cluster


def kubeflow_crd() -> Path:
    """Kubeflow Trainer v2's TrainJob CRD, from its Go module (in the project's module cache)."""
    env = {
        **os.environ,
        # hack/build/cache.sh's module cache: MWMS_CACHE moves it with every other cache
        "GOMODCACHE": str(Path(os.environ.get("MWMS_CACHE", Path.home() / ".cache" / "mwms")) / "go" / "mod"),
        "GOFLAGS": "-mod=mod",
    }
    try:
        done = subprocess.run(
            ["go", "mod", "download", "-json", KUBEFLOW_TRAINER],
            capture_output=True, text=True, env=env, timeout=300, cwd="/",
        )  # fmt: skip
    except FileNotFoundError:
        pytest.skip("no go on PATH to fetch Kubeflow Trainer's CRD")
    if done.returncode != 0:
        pytest.skip(f"go mod download {KUBEFLOW_TRAINER} failed: {done.stdout[-300:]}{done.stderr[-300:]}")
    return Path(json.loads(done.stdout)["Dir"]) / KUBEFLOW_CRD


@pytest.fixture(scope="module")
def crds(kubectl: Any, wait_for: Any) -> None:
    kubectl("apply", "-f", str(REPO / "manifests" / "crd.yaml"))
    kubectl("apply", "--server-side", "-f", str(kubeflow_crd()))  # too big for last-applied's annotation
    for resource in ("trainjobs.mwms.dev", "trainjobs.trainer.kubeflow.org"):
        wait_for(
            lambda resource=resource: kubectl("get", resource, "-A", check=False).returncode == 0,
            timeout=60,
            what=f"{resource} to be served",
        )


@pytest.fixture
def namespace(kubectl: Any, crds: None) -> Iterator[str]:
    with kubectl.fresh_namespace("cli") as name:
        yield name
