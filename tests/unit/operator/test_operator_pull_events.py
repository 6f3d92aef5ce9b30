"""A failed image pull: the kubelet posts its cause and then "Error: ErrImagePull" within one second; the
note the operator keeps for the status names the cause, whichever order the API server lists them in."""

from __future__ import annotations

import pytest

from mwms_operator.observe.pod_states import pod_events

WHEN = "2026-12-07T03:00:00Z"
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
