"""The judgements of a burst and of its edges, on records made by hand: what counts as a job lost or a
worker doubled, when the operator came back after its API server, and when a standby took the Lease."""

from __future__ import annotations

from typing import Any

import pytest

from mwms_bench import burst, measure

DONE, WHOLE = {"phase": "Succeeded"}, {"0", "1"}


def judge(**changes: Any) -> dict[str, Any]:
    """Two jobs of 2 workers, both Succeeded with one whole group each, unless `changes` say otherwise."""
    args = {"expected": ["a", "b"], "statuses": {"a": DONE, "b": DONE}, "duplicates": {}, "replicas": 2}
    args |= {"workers": {("ns", "a", "0"): WHOLE, ("ns", "b", "0"): WHOLE}, "most_alive": {"a": 2, "b": 2}}
    return burst.verdict(**(args | changes))


@pytest.mark.parametrize(
    ("changes", "rule", "names"),
    [
        ({"statuses": {"a": DONE}}, "lost", ["b"]),
        ({"statuses": {"a": DONE, "b": {"phase": "Running"}}}, "not_succeeded", ["b"]),
        ({"statuses": {"a": DONE, "b": DONE | {"restarts": 1}}}, "restarted", ["b"]),
        ({"workers": {("ns", "a", "0"): WHOLE}}, "without_pods", ["b"]),
        ({"workers": {("ns", "a", "0"): WHOLE, ("ns", "b", "1"): WHOLE}}, "extra_groups", ["b/1"]),
        ({"workers": {("ns", "a", "0"): {"0"}, ("ns", "b", "0"): WHOLE}}, "wrong_workers", ["a/0"]),
        ({"duplicates": {"a/0/1": 2}}, "duplicate_workers", ["a/0/1"]),
        ({"most_alive": {"a": 3, "b": 2}}, "over_replicas", ["a"]),
    ],
)  # fmt: skip
def test_each_loss_or_double_is_named_and_fails_the_verdict(changes, rule, names):
    assert judge()["ok"]
    result = judge(**changes)
    assert not result["ok"] and result[rule] == names


def test_recovery_is_timed_from_the_stop_after_a_gap_and_counts_the_relist():
    keys = ("watch_events", "listed_objects", "pods_created", "failed_requests")
    rows = [(1, 100, 10, 50, 0), (2, 110, 10, 60, 0)]  # the API server is stopped at 2.5
    rows += [(3, 112, 10, 60, 4)]  # events already in flight are not its return; 4 requests failed
    rows += [(4, 112, 10, 60, 9), (5, 112, 30, 60, 9)]  # ready again at 4.2, then a re-list of 20 objects
    rows += [(6, 115, 30, 61, 9), (7, 120, 30, 70, 9)]
    result = burst.recovery([(t, dict(zip(keys, rest, strict=True))) for t, *rest in rows], 2.5, 4.2)
    assert result["to_first_listed_object_s"] == pytest.approx(2.5) and result["objects_relisted"] == 20
    assert result["to_watch_events_again_s"] == pytest.approx(3.5) == result["to_pods_created_again_s"]
    assert result["failed_requests_while_down"] == 9


def test_figures_split_listed_objects_from_watch_events_and_count_only_created_pods():
    text = """mwms_watch_events_total{resource="pods",type="LIST"} 7.0
mwms_watch_events_total{resource="pods",type="MODIFIED"} 30.0
mwms_api_requests_total{code="201",resource="pods",verb="create"} 8.0
mwms_api_requests_total{code="409",resource="pods",verb="create"} 1.0
mwms_api_requests_total{code="503",resource="trainjobs/status",verb="patch"} 2.0
mwms_leader_election_master_status 1.0
"""
    got = burst.operator_figures(measure.samples(text))
    assert (got["listed_objects"], got["watch_events"], got["pods_created"], got["failed_requests"]) == (
        7,
        30,
        8,
        2,
    )
    assert burst.watch_events_per_job(got, jobs=2) == {
        "pods LIST": 3.5,
        "pods MODIFIED": 15.0,
        "all": 18.5,
    }


def test_takeover_is_timed_from_the_kill_to_the_first_poll_naming_another_holder():
    a = burst.LeaseSeen("host_1", 1, "2026-12-05T10:00:00.000000Z", "2026-12-05T10:00:20.500000Z")
    b = burst.LeaseSeen("host_2", 2, "2026-12-05T10:00:36.000000Z", "2026-12-05T10:00:36.000000Z")
    result = burst.takeover([(10.0, a), (11.0, a), (26.0, a), (26.5, b)], killed_at=11.0, old="host_1")
    assert result["taken"] and result["new_holder"] == "host_2" and result["transitions"] == 1
    assert result["kill_to_seen_taken_s"] == pytest.approx(15.5) == result["last_renewal_to_acquire_s"]
    assert burst.takeover([(10.0, a), (30.0, a)], killed_at=11.0, old="host_1") == {"taken": False}
