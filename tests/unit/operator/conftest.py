"""Factories that keep the operator's unit tests short."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from mwms_operator.config import OperatorConfig


def trainjob(
    name: str = "mnist", namespace: str = "team-a", replicas: int = 3, **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "mwms.dev/v1alpha1",
        "kind": "TrainJob",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": "0b7e9a57-1c4b-4f7e-9d43-6c1f2b9c0e11",
            "generation": 1,
            "creationTimestamp": "2026-12-02T10:00:00Z",
        },
        "spec": {"replicas": replicas, **copy.deepcopy(spec)},
    }


@pytest.fixture
def make_trainjob():
    return trainjob


@pytest.fixture
def config() -> OperatorConfig:
    # A fixed image, so golden files do not change with each release's version.
    return OperatorConfig(trainer_image="ghcr.io/mwms-dev/mwms-trainer:0.1.0")
