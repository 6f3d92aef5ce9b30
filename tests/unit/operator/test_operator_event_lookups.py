"""A starting pod's events lookups (the startup clock's): spaced out, bounded operator-wide, and a lookup that
fails or finds no free slot holds the clock instead of failing the reconcile, so slow lookups never hold the
reconcile workers from the writes a start needs. Lookups that keep failing
(not a 403) end in the pod being judged without its events, the cause named, not in a wait for ever."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mwms_contract.status import format_time
from mwms_kit.fake_kube import KEY, MOUNT_EVENT, FakeKube, Indexes, job_body, mounting_pod, pod_body
from mwms_operator.decide.start import events_wanted
from mwms_operator.kube.event_lookups import EVENTS_FIRST_AGE_SECONDS, EVENTS_FRESH_SECONDS
from mwms_operator.kube.refusals import ApiError
from mwms_operator.observe.pod_states import PodEvents
from mwms_operator.reconciler import Reconciler
from mwms_operator.render.spec import parse_for_group

SERVER_ERROR = ApiError(500, "etcdserver: request timed out")


def one_runs_one_waits(
    reconciler: Reconciler, indexes: Indexes, clock: list[float], worker_1_age: float | None = None
) -> None:
    """Worker 0 runs and has not joined (not ready), worker 1 is pending: the startup clock asks of both.
    `worker_1_age`: seconds since worker 1 was created (None: no creation time, as an old pod)."""
    reconciler.state.clock = lambda: clock[0]
    reconciler.job_event("ADDED", job_body())
    unready = pod_body(0, phase="Running")
    unready["status"]["containerStatuses"] = [{"name": "trainer", "ready": False, "state": {"running": {}}}]
    indexes.pod(unready)
    waiting = pod_body(1)
    if worker_1_age is not None:
        created = datetime.now(UTC) - timedelta(seconds=worker_1_age)
        waiting["metadata"]["creationTimestamp"] = format_time(created)
    indexes.pod(waiting)


def lookups_of_worker_1(kube: FakeKube) -> int:
    return kube.named("pod_events").count(("mnist-worker-1", "pod-1-0"))


async def reconcile_and_say_if_scheduled(reconciler: Reconciler) -> bool:
    await reconciler.reconcile(KEY)
    return reconciler.queue.scheduled(KEY)


def test_a_starting_pods_events_are_looked_up_5_s_after_the_first_lookup_then_twice_as_long_at_most_a_minute(
    reconciler, indexes
):
    clock = [0.0]
    one_runs_one_waits(reconciler, indexes, clock)
    looked_at = []
    for now in (0, 4, 5, 14, 15, 34, 35, 74, 75, 134, 135, 194, 195):
        clock[0] = float(now)
        before = lookups_of_worker_1(reconciler.kube)
        asyncio.run(reconciler.reconcile(KEY))
        if lookups_of_worker_1(reconciler.kube) > before:
            looked_at.append(now)
    assert looked_at == [0, 5, 15, 35, 75, 135, 195]


def test_a_pod_younger_than_5_s_is_not_looked_up_yet_its_clock_holds_and_the_job_is_looked_at_again(
    reconciler, indexes
):
    clock = [0.0]
    one_runs_one_waits(reconciler, indexes, clock, worker_1_age=0)
    assert asyncio.run(reconcile_and_say_if_scheduled(reconciler)), "looked at again for the events"
    assert lookups_of_worker_1(reconciler.kube) == 0, "its kubelet may not have said Pulling yet"
    assert reconciler.state.status(KEY).get("stalledSince") is None, "worker 1 may be pulling its image"


def test_a_pod_as_old_as_5_s_is_looked_up_and_its_clock_runs(reconciler, indexes):
    clock = [0.0]
    one_runs_one_waits(reconciler, indexes, clock, worker_1_age=EVENTS_FIRST_AGE_SECONDS + 1)
    asyncio.run(reconciler.reconcile(KEY))
    assert lookups_of_worker_1(reconciler.kube) == 1
    assert reconciler.state.status(KEY).get("stalledSince") is not None, "read: nothing is pulling"


def test_a_lookup_that_times_out_holds_the_startup_clock_and_the_job_is_looked_at_again(reconciler, indexes):
    clock = [0.0]
    one_runs_one_waits(reconciler, indexes, clock)
    reconciler.kube.events_time_out = True
    assert asyncio.run(reconcile_and_say_if_scheduled(reconciler)), "looked at again for the events"
    status = reconciler.state.status(KEY)
    assert status["phase"] == "Pending"  # the reconcile went on and decided
    assert status.get("stalledSince") is None, "worker 1 may be pulling its image: the clock holds"
    reconciler.kube.events_time_out = False
    clock[0] = EVENTS_FRESH_SECONDS
    asyncio.run(reconciler.reconcile(KEY))
    assert reconciler.state.status(KEY).get("stalledSince") is not None, "read now: nothing is pulling"


def test_with_every_lookup_slot_taken_a_pod_is_judged_as_maybe_pulling_and_looked_up_later(
    reconciler, indexes
):
    clock = [0.0]
    one_runs_one_waits(reconciler, indexes, clock)
    reconciler.lookups.slots = asyncio.Semaphore(0)  # other jobs' lookups hold every slot
    assert asyncio.run(reconcile_and_say_if_scheduled(reconciler))
    assert reconciler.kube.named("pod_events") == []
    assert reconciler.state.status(KEY).get("stalledSince") is None
    reconciler.lookups.slots = asyncio.Semaphore(1)
    asyncio.run(reconciler.reconcile(KEY))  # not counted as a lookup: due at once
    assert lookups_of_worker_1(reconciler.kube) == 1
    assert reconciler.state.status(KEY).get("stalledSince") is not None


def mounting_past_its_grace(reconciler: Reconciler, indexes: Indexes, clock: list[float]) -> None:
    """One worker, scheduled, that does not start; its grace (0 s) is over at once: its events are wanted."""
    reconciler.state.clock = lambda: clock[0]
    reconciler.job_event("ADDED", job_body(1, runPolicy={"containerErrorGraceSeconds": 0}))
    indexes.pod(mounting_pod(0))


def reconcile_at(reconciler: Reconciler, clock: list[float], now: float) -> dict[str, Any]:
    clock[0] = now
    asyncio.run(reconciler.reconcile(KEY))
    return reconciler.state.status(KEY)


def failed_message(status: dict[str, Any]) -> str:
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert (status["phase"], failed["reason"]) == ("Failed", "ContainerError")
    return str(failed["message"])


@pytest.mark.parametrize(
    ("error", "text"),
    [(SERVER_ERROR, "(500) etcdserver: request timed out"), (TimeoutError("timed out"), "timed out")],
    ids=["500", "timeout"],
)
def test_a_pod_whose_events_lookups_keep_failing_is_judged_without_them_and_the_job_ends_naming_the_error(
    reconciler, indexes, error, text
):
    clock = [0.0]
    mounting_past_its_grace(reconciler, indexes, clock)
    kube = reconciler.kube
    kube.events_error = error
    for now in (0, 0, 5, 15, 35, 59):  # 4 failed lookups, the first 59 s ago: not yet judged
        assert reconcile_at(reconciler, clock, now)["phase"] == "Pending"
    assert len(kube.named("pod_events")) == 4
    assert kube.named("event").count("PodEventsUnreadable") == 0
    message = failed_message(reconcile_at(reconciler, clock, 60))
    assert message.startswith("worker mnist-worker-0 has not started 0s after it was scheduled"), message
    assert message.endswith(
        f"the kubelet's reason could not be read: listing events in namespace team-a failed: {text}"
    )
    assert "RBAC" not in message
    assert kube.named("event").count("PodEventsUnreadable") == 1


def test_a_refused_lookup_still_names_the_right_to_grant_not_a_failure(reconciler, indexes):
    clock = [0.0]
    mounting_past_its_grace(reconciler, indexes, clock)
    reconciler.kube.events_forbidden = True
    reconcile_at(reconciler, clock, 0)
    message = failed_message(reconcile_at(reconciler, clock, 0))  # at the first lookup: 403 is no moment
    assert "the operator may not list events in namespace team-a; an RBAC rule granting" in message
    assert "failed:" not in message
    assert reconciler.kube.named("event").count("PodEventsForbidden") == 1
    assert reconciler.kube.named("event").count("PodEventsUnreadable") == 0


def test_a_lookup_without_a_free_slot_is_no_failure(reconciler, indexes):
    clock = [0.0]
    mounting_past_its_grace(reconciler, indexes, clock)
    reconciler.kube.events_error = SERVER_ERROR
    for now in (0, 0, 5):
        reconcile_at(reconciler, clock, now)
    reconciler.lookups.slots = asyncio.Semaphore(0)  # other jobs' lookups hold every slot for minutes
    for now in range(10, 300, 5):
        assert reconcile_at(reconciler, clock, now)["phase"] == "Pending", now
    assert len(reconciler.kube.named("pod_events")) == 2
    reconciler.lookups.slots = asyncio.Semaphore(1)
    assert "failed: (500)" in failed_message(reconcile_at(reconciler, clock, 300))  # the third failure


def test_the_job_is_told_once_that_its_pods_events_cannot_be_read(reconciler, indexes):
    clock = [0.0]
    one_runs_one_waits(reconciler, indexes, clock)
    reconciler.kube.events_error = SERVER_ERROR
    for now in range(0, 600, 5):
        assert reconcile_at(reconciler, clock, now).get("stalledSince") is None, "worker 1 may be pulling"
    assert reconciler.kube.named("event").count("PodEventsUnreadable") == 1


def worker_1_events(reconciler: Reconciler, clock: list[float], now: float) -> PodEvents | None:
    """Worker 1's events as the start's rules are given them at `now`."""
    clock[0] = now
    spec, _ = parse_for_group(reconciler.state.jobs[KEY], reconciler.config.spec_defaults())
    pods = reconciler.state.pods_of(KEY)
    previous = {"phase": "Pending", "restarts": 0}
    wanted = events_wanted(spec, pods, previous, datetime.now(UTC))
    judged = asyncio.run(reconciler.lookups.with_events(KEY, pods, wanted))
    return next(p.events for p in judged if p.index == 1)


def test_a_lookup_that_works_again_ends_the_failures_in_a_row(reconciler, indexes):
    clock = [0.0]
    one_runs_one_waits(reconciler, indexes, clock)
    kube = reconciler.kube
    kube.pod_event_lists["mnist-worker-1"] = [MOUNT_EVENT]
    kube.events_error = SERVER_ERROR
    for now in (0, 5, 15):
        assert worker_1_events(reconciler, clock, now) is None, "not read yet: it may be pulling"
    kube.events_error = None
    read = worker_1_events(reconciler, clock, 35)
    assert read is not None and read.readable and read.note.startswith("FailedMount")
    kube.events_error = SERVER_ERROR
    for now in (75, 135):  # 2 failures in a row (5 since the first): judged by the events last read
        assert worker_1_events(reconciler, clock, now) == read
    assert worker_1_events(reconciler, clock, 195) == PodEvents(
        readable=False, error="(500) etcdserver: request timed out"
    )
    assert lookups_of_worker_1(kube) == 7
    kube.events_error = None
    assert worker_1_events(reconciler, clock, 255) == read, "read again: its events again"
