"""spec.managedBy on the real API server and operator: its format is checked and it cannot change (set, unset
or replaced), the field named; and a job another controller runs gets nothing from the operator (no pod, no
Service, its status as that controller wrote it) but one event that says so, while a job of the operator's
own beside it runs."""

from __future__ import annotations

import json

import pytest

from mwms_contract import names
from mwms_kit.trainjobs import trainjob
from mwms_kit.waits import events_of, get_job, pods_of, wait_condition

OTHER = "example.com/batch-controller"
# What the other controller wrote: the operator must leave it exactly so.
THEIRS = {"phase": "Running", "restarts": 7, "chiefPod": "theirs"}


@pytest.mark.parametrize(
    "value",
    ["", "batch-controller", "Example.com/batch", "example.com/batch controller", "example.com/" + "x" * 52],
)
def test_a_malformed_managed_by_is_rejected_naming_the_field(crd, kubectl, namespace, value):
    manifest = trainjob("bad", 2, managedBy=value)
    result = kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(manifest), check=False)
    assert result.returncode != 0 and "spec.managedBy" in result.stderr, result.stderr


def test_managed_by_cannot_be_set_changed_or_removed(crd, kubectl, namespace):
    kubectl.apply(trainjob("plain", 2, runPolicy={"suspend": True}), "-n", namespace)
    kubectl.apply(trainjob("handed", 2, managedBy=OTHER), "-n", namespace)
    for name, patch in (
        ("plain", {"spec": {"managedBy": names.MULTIKUEUE_CONTROLLER_NAME}}),
        ("handed", {"spec": {"managedBy": names.MULTIKUEUE_CONTROLLER_NAME}}),
        ("handed", {"spec": {"managedBy": None}}),
    ):
        result = kubectl(
            "patch", "trainjob", name, "-n", namespace, "--type=merge", "-p", json.dumps(patch), check=False
        )
        assert result.returncode != 0, (name, patch)
        assert (
            "spec.managedBy: Invalid value" in result.stderr
            and "spec.managedBy is immutable" in result.stderr
        )


def test_a_job_another_controller_runs_gets_nothing_but_one_event(
    operator, kubectl, namespace, make_standin, wait_for
):
    kubectl.apply(trainjob("handed", 2, managedBy=OTHER), "-n", namespace)
    kubectl(
        "patch", "trainjob", "handed", "-n", namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": THEIRS}),
    )  # fmt: skip
    wait_for(
        lambda: events_of(kubectl, namespace, "handed", "ManagedElsewhere"),
        timeout=60,
        what="the operator's one event on the job",
    )
    # A job of the operator's own, after it, runs to its end: the operator has seen everything before it.
    kubectl.apply(make_standin("own", 1), "-n", namespace)
    wait_condition(kubectl, namespace, "own", "Succeeded")
    handed = get_job(kubectl, namespace, "handed")
    assert handed["status"] == THEIRS
    assert pods_of(kubectl, namespace, "handed") == []
    assert kubectl("get", "service", "handed", "-n", namespace, check=False).returncode != 0
    ((kind, reason, message),) = events_of(kubectl, namespace, "handed")
    assert (kind, reason) == ("Normal", "ManagedElsewhere") and OTHER in message
