"""The scale edges' judgements (bench/scale/edges.py): what counts as a job lost or a worker doubled, the
operator's recovery after an API server restart from its sampled metrics, and a leader's takeover from the
Lease as polled. On records made by hand, no cluster."""

from __future__ import annotations

from typing import Any

import pytest

from mwms_kit import modules


@pytest.fixture(scope="module")
def edges() -> Any:
    return modules.load("mwms_scale_edges", "bench/scale/edges.py")


def judge(edges: Any, **changes: Any) -> dict[str, Any]:
    """Two jobs of 2 workers, both Succeeded with one whole group each, unless `changes` say otherwise."""
    args: dict[str, Any] = {
        "expected": ["a", "b"],
        "statuses": {"a": {"phase": "Succeeded"}, "b": {"phase": "Succeeded", "restarts": 0}},
        "workers": {("ns", "a", "0"): {"0", "1"}, ("ns", "b", "0"): {"0", "1"}},
        "duplicates": {},
        "most_alive": {"a": 2, "b": 2},
        "replicas": 2,
    } | changes
    return edges.verdict(**args)


def test_a_clean_burst_is_ok(edges):
    result = judge(edges)
    assert result["ok"] and result["jobs"] == 2


@pytest.mark.parametrize(
    ("changes", "rule", "names"),
    [
        ({"statuses": {"a": {"phase": "Succeeded"}}}, "lost", ["b"]),
        ({"statuses": {"a": {"phase": "Succeeded"}, "b": {"phase": "Running"}}}, "not_succeeded", ["b"]),
        (
            {"statuses": {"a": {"phase": "Succeeded"}, "b": {"phase": "Succeeded", "restarts": 1}}},
            "restarted",
            ["b"],
        ),
        ({"workers": {("ns", "a", "0"): {"0", "1"}}}, "without_pods", ["b"]),
        (
            {
                "workers": {
                    ("ns", "a", "0"): {"0", "1"},
                    ("ns", "b", "0"): {"0", "1"},
                    ("ns", "b", "1"): {"0", "1"},
                }
            },
            "extra_groups",
            ["b/1"],
        ),
        ({"workers": {("ns", "a", "0"): {"0"}, ("ns", "b", "0"): {"0", "1"}}}, "wrong_workers", ["a/0"]),
        (
            {"workers": {("ns", "a", "0"): {"0", "1", "2"}, ("ns", "b", "0"): {"0", "1"}}},
            "wrong_workers",
            ["a/0"],
        ),
        ({"duplicates": {"a/0/1": 2}}, "duplicate_workers", ["a/0/1"]),
        ({"most_alive": {"a": 3, "b": 2}}, "over_replicas", ["a"]),
    ],
)
def test_each_loss_or_double_is_named_and_fails_the_verdict(edges, changes, rule, names):
    result = judge(edges, **changes)
    assert not result["ok"]
    assert result[rule] == names


def samples(*rows: tuple[float, ...]) -> list[tuple[float, dict[str, float]]]:
    """(time, watch events, listed objects, pods created[, failed requests])."""
    keys = ("watch_events", "listed_objects", "pods_created", "failed_requests")
    return [(row[0], dict(zip(keys, row[1:], strict=False))) for row in rows]


def test_recovery_is_timed_from_the_stop_after_a_gap_and_counts_the_relist(edges):
    record = samples(
        (1.0, 100, 10, 50, 0),
        (2.0, 110, 10, 60, 0),  # the API server is stopped at 2.5
        (3.0, 112, 10, 60, 4),  # events already in flight: not its return; 4 requests failed
        (4.0, 112, 10, 60, 9),  # it is ready again at 4.2
        (5.0, 112, 30, 60, 9),  # a re-list of 20 objects
        (6.0, 115, 30, 61, 9),
        (7.0, 120, 30, 70, 9),
    )
    result = edges.recovery(record, down_at=2.5, ready_at=4.2)
    assert result["to_first_listed_object_s"] == pytest.approx(2.5)
    assert result["to_watch_events_again_s"] == pytest.approx(3.5)
    assert result["to_pods_created_again_s"] == pytest.approx(3.5)
    assert result["objects_relisted"] == 20
    assert result["to_first_failed_request_s"] == pytest.approx(0.5)
    assert result["stop_to_readyz_s"] == pytest.approx(1.7)
    assert result["failed_requests_while_down"] == 9


def test_a_pause_shorter_than_the_gap_is_no_return_and_a_resumed_watch_lists_nothing(edges):
    busy = samples(
        (1.0, 100, 10, 50), (1.5, 101, 10, 51), (2.0, 101, 10, 51), (2.5, 102, 10, 52), (5.0, 103, 10, 53)
    )
    result = edges.recovery(busy, down_at=1.2, ready_at=4.0)
    assert result["to_watch_events_again_s"] == pytest.approx(3.8)  # not 2.5: a 1 s pause is no outage
    record = samples((1.0, 100, 10, 50), (2.0, 100, 10, 50), (3.0, 105, 12, 55), (4.0, 106, 12, 56))
    assert edges.recovery(record, down_at=1.2, ready_at=3.5)["objects_relisted"] == 2
    resumed = edges.recovery(samples((1.0, 100, 10, 50), (2.0, 100, 10, 50), (3.0, 105, 10, 55)), 1.2, 1.5)
    assert resumed["to_first_listed_object_s"] is None and resumed["objects_relisted"] == 0
    assert resumed["to_watch_events_again_s"] == pytest.approx(1.8)


def test_figures_split_listed_objects_from_watch_events_and_count_only_created_pods(edges):
    text = "\n".join(
        [
            'mwms_watch_events_total{resource="pods",type="LIST"} 7.0',
            'mwms_watch_events_total{resource="pods",type="MODIFIED"} 30.0',
            'mwms_watch_events_total{resource="trainjobs",type="ADDED"} 2.0',
            'mwms_api_requests_total{code="201",resource="pods",verb="create"} 8.0',
            'mwms_api_requests_total{code="409",resource="pods",verb="create"} 1.0',
            'mwms_api_requests_total{code="error",resource="pods",verb="create"} 3.0',
            'mwms_api_requests_total{code="503",resource="trainjobs/status",verb="patch"} 2.0',
            'mwms_workqueue_retries_total{name="trainjobs"} 4.0',
            "mwms_leader_election_master_status 1.0",
        ]
    )
    got = edges.figures(text + "\n")
    assert got["listed_objects"] == 7 and got["watch_events"] == 32
    assert got["pods_created"] == 8 and got["failed_requests"] == 5
    assert got["retries"] == 4 and got["leader"] == 1
    per = edges.per_job({"watch pods MODIFIED": 10.0}, got, jobs=2)
    assert per == {"pods LIST": 3.5, "pods MODIFIED": 10.0, "trainjobs ADDED": 1.0, "all": 14.5}


def test_takeover_is_timed_from_the_kill_to_the_first_poll_naming_another_holder(edges):
    a = edges.LeaseSeen("host_1", 1, "2026-12-05T10:00:00.000000Z", "2026-12-05T10:00:20.500000Z")
    b = edges.LeaseSeen("host_2", 2, "2026-12-05T10:00:36.000000Z", "2026-12-05T10:00:36.000000Z")
    records = [(10.0, a), (10.5, a), (11.0, a), (26.0, a), (26.5, b), (27.0, b)]
    result = edges.takeover(records, killed_at=11.0, old="host_1")
    assert result["taken"] and result["new_holder"] == "host_2"
    assert result["kill_to_seen_taken_s"] == pytest.approx(15.5)
    assert result["last_renewal_to_acquire_s"] == pytest.approx(15.5)
    assert result["transitions"] == 1


def test_no_takeover_while_the_killed_holder_is_still_named(edges):
    a = edges.LeaseSeen("host_1", 1, "2026-12-05T10:00:00.000000Z", "2026-12-05T10:00:20.500000Z")
    assert edges.takeover([(10.0, a), (30.0, a)], killed_at=11.0, old="host_1") == {"taken": False}
