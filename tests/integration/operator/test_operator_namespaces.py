"""MWMS_WATCH_NAMESPACES: an operator serving some namespaces leaves the others' TrainJobs alone."""

from __future__ import annotations

import uuid

import pytest

from mwms_kit.waits import wait_condition

SUFFIX = uuid.uuid4().hex[:6]
SERVED, OTHER = f"served-{SUFFIX}", f"other-{SUFFIX}"


@pytest.fixture(scope="module")
def operator_env(kubectl, wait_for):
    for name in (SERVED, OTHER):
        kubectl("create", "namespace", name)
        wait_for(
            lambda name=name: (
                kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode == 0
            ),
            timeout=30,
            what=f"serviceaccount default in {name}",
        )
    yield {"MWMS_WATCH_NAMESPACES": SERVED}
    for name in (SERVED, OTHER):
        kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_only_the_watched_namespace_is_served(operator, make_standin, kubectl):
    for namespace in (OTHER, SERVED):
        kubectl.apply(make_standin("scoped", 2), "-n", namespace)
    wait_condition(kubectl, SERVED, "scoped", "Succeeded", timeout=90)
    # The watched job finished after the other was applied: the operator had every chance to touch it.
    other = kubectl.json("get", "trainjob", "scoped", "-n", OTHER)
    assert "status" not in other and "finalizers" not in other["metadata"]
    assert kubectl.json("get", "pods", "-n", OTHER)["items"] == []
    kubectl("delete", "trainjob", "scoped", "-n", OTHER, "--wait=false")
