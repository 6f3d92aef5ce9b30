"""What the state keeps of each TrainJob (state.py): what memory grows with when there are many."""

from __future__ import annotations

import json

from mwms_kit.trainjobs import trainjob
from mwms_operator.observe.state import State, job_key

STATUS = {
    "phase": "Suspended",
    "conditions": [
        {
            "type": "Suspended",
            "status": "True",
            "reason": "Suspended",
            "message": "spec.runPolicy.suspend is true: worker pods deleted",
            "lastTransitionTime": "2026-12-05T18:01:34Z",
            "observedGeneration": 1,
        }
    ],
}


def watched(name: str, uid: str) -> dict:
    """A TrainJob as each watch event brings it: parsed from its own JSON text, so sharing no strings."""
    body = trainjob(name, 2, namespace="ns", metadata={"uid": uid, "resourceVersion": "7"}, suspend=True)
    return json.loads(json.dumps({**body, "status": STATUS}))


def test_jobs_share_their_equal_strings_and_keep_their_values():
    state = State()
    first, second = watched("a", "u-1"), watched("b", "u-2")
    state.job_event("ADDED", first)
    state.job_event("ADDED", second)
    one, two = (state.jobs[job_key(body)] for body in (first, second))
    assert one["status"] == two["status"] == STATUS and one["spec"] == first["spec"]
    assert one["metadata"]["name"] == "a" and two["metadata"]["uid"] == "u-2"
    condition_one, condition_two = one["status"]["conditions"][0], two["status"]["conditions"][0]
    for key, value in condition_one.items():
        (other_key,) = (k for k in condition_two if k == key)
        assert other_key is key  # one "lastTransitionTime" for all jobs, not one each
        if isinstance(value, str):
            assert condition_two[key] is value
    assert one["status"]["phase"] is two["status"]["phase"]


def test_our_last_write_is_read_until_the_watch_has_it_and_then_not_kept_twice():
    state = State()
    body = watched("a", "u-1")
    key = state.job_event("ADDED", body)
    assert key is not None
    written = {**STATUS, "phase": "Pending"}
    state.wrote(key, {"metadata": {"resourceVersion": "8"}, "status": written})
    assert state.server_status(key)["phase"] == "Pending", "the watch lags behind our write"
    echo = json.loads(json.dumps({**body, "status": written}))
    echo["metadata"]["resourceVersion"] = "8"
    state.job_event("MODIFIED", echo)
    assert state.is_own_write(key, echo) and state.server_status(key) == written
    assert state._written[key][1] == {}, "the written status is the watched one now: not kept beside it"
