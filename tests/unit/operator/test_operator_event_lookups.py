"""A starting pod's events lookups (the startup clock's): spaced out, bounded operator-wide, and a lookup that
fails or finds no free slot holds the clock instead of failing the reconcile. At 20,000 starting pods each
lookup took 14 s and held the reconcile workers from the writes a start needs."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from test_operator_reconciler import KEY, Indexes, RecordingKube, job_body, pod_body

from mwms_operator.config import OperatorConfig
from mwms_operator.lookups import EVENTS_FRESH_SECONDS
from mwms_operator.reconciler import Reconciler


class SlowKube(RecordingKube):
    """The API server of an overloaded control plane: a pod's events lookup times out."""

    def __init__(self) -> None:
        super().__init__()
        self.events_time_out = False

    def pod_events(self, namespace: str, name: str, uid: str) -> list[dict[str, Any]]:
        listed = super().pod_events(namespace, name, uid)
        if self.events_time_out:
            raise TimeoutError("timed out")
        return listed


@pytest.fixture
def indexes() -> Indexes:
    return Indexes()


@pytest.fixture
def reconciler(indexes) -> Reconciler:
    reconciler = Reconciler(SlowKube(), OperatorConfig())  # type: ignore[arg-type]
    reconciler.bind(indexes.pods, indexes.services)
    return reconciler


def one_runs_one_waits(reconciler: Reconciler, indexes: Indexes, clock: list[float]) -> None:
    """Worker 0 runs and has not joined (not ready), worker 1 is pending: the startup clock asks of both."""
    reconciler.state.clock = lambda: clock[0]
    reconciler.job_event("ADDED", job_body())
    unready = pod_body(0, phase="Running")
    unready["status"]["containerStatuses"] = [{"name": "trainer", "ready": False, "state": {"running": {}}}]
    indexes.pod(unready)
    indexes.pod(pod_body(1))


def lookups_of_worker_1(kube: RecordingKube) -> int:
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
