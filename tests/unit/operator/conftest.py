"""Fixtures that keep the operator's unit tests short."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from mwms_kit.fake_kube import FakeKube, Indexes
from mwms_kit.trainjobs import trainjob
from mwms_operator.reconciler import Reconciler
from mwms_operator.settings import OperatorConfig

# What the API server adds to a stored TrainJob, as the operator's handlers see it.
STORED = {
    "uid": "0b7e9a57-1c4b-4f7e-9d43-6c1f2b9c0e11",
    "generation": 1,
    "creationTimestamp": "2026-12-02T10:00:00Z",
}


@pytest.fixture
def make_trainjob() -> Callable[..., dict[str, Any]]:
    """`make_trainjob(name="mnist", replicas=3, **spec)`: a stored TrainJob in namespace team-a."""

    def make(name: str = "mnist", replicas: int = 3, **spec: Any) -> dict[str, Any]:
        return trainjob(name, replicas, namespace="team-a", metadata=STORED, **spec)

    return make


@pytest.fixture
def config() -> OperatorConfig:
    # A fixed image, so golden files do not change with each release's version.
    return OperatorConfig(trainer_image="ghcr.io/mwms-dev/mwms-trainer:0.1.0")


@pytest.fixture
def indexes() -> Indexes:
    return Indexes()


@pytest.fixture
def reconciler(indexes: Indexes) -> Reconciler:
    """A reconciler on FakeKube, bound to `indexes`."""
    reconciler = Reconciler(FakeKube(), OperatorConfig())  # type: ignore[arg-type]
    reconciler.bind(indexes.pods, indexes.services)
    return reconciler
