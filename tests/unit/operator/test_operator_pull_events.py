"""A failed image pull: the kubelet posts its cause and then "Error: ErrImagePull" within one second; the
note the operator keeps for the status names the cause, whichever order the API server lists them in, and a
failed pull is told apart from the kubelet's other Failed and BackOff events."""

from __future__ import annotations

import pytest

from mwms_operator.observe.pod_states import pod_events

WHEN = "2026-12-07T03:00:00Z"
LATER = "2026-12-07T03:00:09Z"
CAUSE = {
    "type": "Warning",
    "reason": "Failed",
    "message": 'Failed to pull image "r/mwms-trainer:1": 401 Unauthorized',
    "lastTimestamp": WHEN,
}
SUMMARY = {"type": "Warning", "reason": "Failed", "message": "Error: ErrImagePull", "lastTimestamp": WHEN}


@pytest.mark.parametrize("listed", [[CAUSE, SUMMARY], [SUMMARY, CAUSE]])
def test_a_failed_pull_is_named_by_its_cause(listed):
    assert "401 Unauthorized" in pod_events(listed).note


def event(reason: str, message: str, when: str = WHEN) -> dict[str, str]:
    return {"type": "Warning", "reason": reason, "message": message, "lastTimestamp": when}


@pytest.mark.parametrize(
    "latest",
    [CAUSE, SUMMARY, event("BackOff", 'Back-off pulling image "r/mwms-trainer:1"')],
    ids=["cause", "summary", "back-off"],
)
def test_a_pull_that_failed_last_is_told_apart(latest):
    assert pod_events([latest]).pull_failed


@pytest.mark.parametrize(
    "latest",
    [
        event("BackOff", "Back-off restarting failed container trainer in pod w-0", LATER),
        event("Failed", "Error: failed to create containerd task: OCI runtime create failed", LATER),
        {**event("Pulling", 'Pulling image "r/mwms-trainer:1"', LATER), "type": "Normal"},
    ],
    ids=["crash-loop", "container-start", "pulling-again"],
)
def test_no_failed_pull_where_the_latest_image_event_names_none(latest):
    assert not pod_events([CAUSE, latest]).pull_failed
