"""What a job costs the API server: every write of a whole lifecycle, by verb, counted with the recorder of
mwms_kit.fake_kube (issue 32: at most replicas + 6). A status write that only says how far a group's
start has got (the counts, the start's clocks, a pending message), and a new job's first status, wait a
moment and are written with what follows; a phase change or an error is written at once; the last state is
always written. The pods that go together go with one request."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from mwms_kit.fake_kube import KEY, QUOTA, FakeKube, Indexes, job_body, pod_body
from mwms_operator.kube.event_lookups import EVENTS_FRESH_SECONDS
from mwms_operator.kube.events import EventBook
from mwms_operator.kube.refusals import ApiError, Refused
from mwms_operator.observe.pod_states import worker_pod
from mwms_operator.observe.state import STATUS_COALESCE_SECONDS
from mwms_operator.reconciler import Reconciler
from mwms_operator.settings import OperatorConfig


def scheduled(index: int) -> dict[str, Any]:
    """Bound to a node, its containers not yet made (KWOK's pods between the scheduler and the start)."""
    body = pod_body(index)
    body["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
    return body


def running(index: int) -> dict[str, Any]:
    body = pod_body(index, phase="Running")
    body["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "True"},
        {"type": "Ready", "status": "True"},
    ]
    body["status"]["containerStatuses"] = [{"name": "trainer", "ready": True, "state": {"running": {}}}]
    return body


def succeeded(index: int) -> dict[str, Any]:
    body = pod_body(index, phase="Succeeded")
    terminated = {"exitCode": 0, "reason": "Completed", "message": "{}"}
    body["status"]["containerStatuses"] = [{"name": "trainer", "state": {"terminated": terminated}}]
    return body


def deleting(body: dict[str, Any]) -> dict[str, Any]:
    body["metadata"]["deletionTimestamp"] = "2026-12-02T10:00:20Z"
    return body


class Lifecycle:
    """A reconciler on the recorder, its clock in the test's hands; `pods(...)` sets what the index holds."""

    def __init__(self, replicas: int = 4, **spec: Any) -> None:
        self.clock = [0.0]
        self.kube = FakeKube()
        self.indexes = Indexes()
        self.reconciler = Reconciler(self.kube, OperatorConfig())  # type: ignore[arg-type]
        self.reconciler.state.clock = lambda: self.clock[0]
        self.reconciler.bind(self.indexes.pods, self.indexes.services)
        self.reconciler.job_event("ADDED", job_body(replicas, **spec))

    def pods(self, at: float, *bodies: dict[str, Any]) -> None:
        """The pods as the watch has them at `at` seconds, then the reconcile their events queue."""
        self.indexes.pods[(KEY.namespace, KEY.uid)] = [worker_pod(b) for b in bodies]
        self.indexes.services[(KEY.namespace, KEY.uid)] = [KEY.name]  # created with the pods
        self.reconcile(at)

    def reconcile(self, at: float) -> None:
        self.clock[0] = at
        asyncio.run(self.reconciler.reconcile(KEY))

    def flush(self) -> None:
        """Whatever was deferred falls due: the work queue's delayed requeue runs."""
        if self.reconciler.queue.scheduled(KEY):
            self.reconciler.queue.forget(KEY)  # as its timer does when it fires
            self.reconcile(self.clock[0] + STATUS_COALESCE_SECONDS)

    @property
    def written(self) -> dict[str, Any]:
        """The status as the API server has it: our writes, not what waits to be written."""
        return self.reconciler.state.server_status(KEY)


# Each write the recorder saw, as the API server counts it: verb and resource.
VERBS = {
    "create_pod": "create pods",
    "create_service": "create services",
    "patch_status": "patch trainjobs/status",
    "event": "create events",
    "delete_pod": "delete pods",
    "delete_pods": "deletecollection pods",
}


def writes(kube: FakeKube) -> Counter[str]:
    return Counter(VERBS[call] for call, _ in kube.calls if call in VERBS)


def lifecycle(replicas: int, *, peers_outlive_chief: bool) -> Lifecycle:
    """create → Succeeded, each step of the start its own reconcile (as when the operator keeps up)."""
    job, everyone, peers, last = Lifecycle(replicas), range(replicas), range(1, replicas), replicas - 1
    job.reconcile(0.0)  # the job: its Service and pods are created
    job.pods(0.2, *(pod_body(i) for i in everyone))  # the pods exist
    job.pods(0.4, *(scheduled(i) for i in everyone))  # the scheduler bound them
    job.pods(0.6, running(0), *(scheduled(i) for i in peers))  # the first runs
    job.pods(0.8, *(running(i) for i in range(last)), scheduled(last))
    job.pods(1.0, *(running(i) for i in everyone))  # all run
    job.flush()
    if peers_outlive_chief:  # as in the KWOK bench: each worker's fit ends 15 s after its own start
        job.pods(15.0, *(running(i) for i in range(last)), succeeded(last))  # one is done before the chief
        job.pods(15.1, succeeded(0), *(running(i) for i in range(1, last)), succeeded(last))  # the chief
        job.pods(15.2, succeeded(0), *(deleting(running(i)) for i in range(1, last)), succeeded(last))
        job.pods(15.3, succeeded(0), succeeded(last))  # cleanPodPolicy Running: the others are gone
    else:  # MWMS: the peers end with the fit, the chief last (it writes the MLflow run and the model)
        job.pods(15.0, running(0), *(succeeded(i) for i in peers))
        job.pods(15.1, *(succeeded(i) for i in everyone))
    job.flush()
    return job


@pytest.mark.parametrize("replicas", [4, 16])
def test_a_plain_job_costs_at_most_replicas_plus_6_writes_one_status_and_one_event_per_phase(replicas):
    """Issue 32's bound. Before: 3 status writes (Pending on the job's first look, Running, Succeeded),
    replicas + 7 in all; now the first status waits and goes with Running, as the group runs this soon."""
    job = lifecycle(replicas, peers_outlive_chief=False)
    assert writes(job.kube) == {
        "create pods": replicas,
        "create services": 1,
        "patch trainjobs/status": 2,
        "create events": 3,
    }
    assert sum(writes(job.kube).values()) <= replicas + 6
    assert job.kube.named("patch_status") == ["Running", "Succeeded"]
    assert job.kube.named("event") == ["PodsCreated", "AllWorkersRunning", "ChiefSucceeded"]
    succeeded_ = {"active": 0, "ready": 0, "succeeded": replicas, "failed": 0}
    assert job.written["replicaStatuses"] == succeeded_
    assert not job.reconciler.queue.scheduled(KEY), "nothing left to write"


@pytest.mark.parametrize("replicas", [4, 16])
def test_peers_that_outlive_the_chief_go_with_one_request_whatever_their_number(replicas):
    """cleanPodPolicy Running deletes the peers still running when the chief ends: one deletecollection
    (before: one DELETE each, replicas - 2 here), their going costs no status write."""
    job = lifecycle(replicas, peers_outlive_chief=True)
    assert writes(job.kube) == {
        "create pods": replicas,
        "create services": 1,
        "patch trainjobs/status": 2,
        "create events": 3,
        "deletecollection pods": 1,
    }
    assert sum(writes(job.kube).values()) == replicas + 7
    peers = ",".join(str(i) for i in range(1, replicas - 1))
    labels = f"mwms.dev/job-uid=uid-1,mwms.dev/restart in (0),mwms.dev/replica-index in ({peers})"
    assert job.kube.named("delete_pods") == [(labels, "status.phase!=Succeeded,status.phase!=Failed")]
    assert job.written["replicaStatuses"] == {"active": 0, "ready": 0, "succeeded": 2, "failed": 0}
    assert not job.reconciler.queue.scheduled(KEY), "nothing left to write"


def test_a_reconcile_before_the_watch_has_seen_its_creates_creates_nothing_twice():
    """Issue 43: a burst asked the API server for pods that existed (409s), from reconciles that ran before
    the pod watch had reported the operator's own creates. Its creates count as there until then."""
    job = Lifecycle(replicas=4)
    job.reconcile(0.0)
    job.reconcile(0.5)  # e.g. its own status write came back before any pod event
    job.reconcile(1.0)
    assert job.kube.named("create_pod") == [f"mnist-worker-{i}" for i in range(4)]
    job.pods(1.5, *(scheduled(i) for i in range(4)))  # the watch caught up: the same pods, now indexed
    assert len(job.reconciler.state.pods_of(KEY)) == 4
    assert job.kube.named("create_pod") == [f"mnist-worker-{i}" for i in range(4)]


def test_a_created_pod_the_watch_reports_gone_is_made_again():
    """The expectation ends with the watch's first word on the pod: a pod deleted right after its create
    (its DELETED event seen) is not shown as there."""
    job = Lifecycle(replicas=2)
    job.reconcile(0.0)
    for i in range(2):
        job.reconciler.pod_event("DELETED", pod_body(i))
    job.reconcile(1.0)
    assert job.kube.named("create_pod") == ["mnist-worker-0", "mnist-worker-1"] * 2


def test_a_start_slower_than_the_window_writes_the_first_status_when_due_with_what_came_meanwhile():
    job = Lifecycle()
    job.reconcile(0.0)
    job.pods(0.2, *(pod_body(i) for i in range(4)))
    assert job.kube.named("patch_status") == [] and job.written == {}, "no phase yet: clients read Pending"
    assert job.reconciler.state.status(KEY)["phase"] == "Pending", "the next decision starts from it"
    job.flush()  # 2 s after the job's first look: its pods are not running
    assert job.kube.named("patch_status") == ["Pending"]
    conditions = {c["type"]: c["reason"] for c in job.written["conditions"]}
    assert conditions == {"Created": "PodsCreated", "Running": "WorkersPending"}
    assert job.written["startTime"] and job.written["replicaStatuses"]["active"] == 4
    job.pods(9.0, *(running(i) for i in range(4)))
    assert job.kube.named("patch_status") == ["Pending", "Running"]


def test_an_operator_gone_before_a_new_jobs_first_write_leaves_its_successor_the_start_times():
    """The first status waits, and the operator that made the pods may stop meanwhile: the next one finds
    the pods and no status, and gives the group its start times (runPolicy.activeDeadlineSeconds counts
    from startTime) without making any pod again."""
    gone = Lifecycle()
    gone.reconcile(0.0)
    assert len(gone.kube.named("create_pod")) == 4 and gone.written == {}
    successor = Lifecycle()  # a fresh operator: the job as listed, with no status
    successor.pods(5.0, *(scheduled(i) for i in range(4)))
    successor.flush()
    assert successor.kube.named("create_pod") == [] and successor.kube.named("patch_status") == ["Pending"]
    assert successor.written["startTime"] and successor.written["groupStartTime"]


def test_a_count_only_change_waits_for_the_window_and_is_never_lost():
    job = Lifecycle()
    job.reconcile(0.0)
    job.pods(0.2, *(running(i) for i in range(4)))
    assert job.kube.named("patch_status") == ["Running"]
    job.pods(10.0, running(0), running(1), running(2), succeeded(3))
    assert job.kube.named("patch_status") == ["Running"], "a count waits"
    assert job.reconciler.queue.scheduled(KEY), "…for the work queue's delayed requeue"
    assert job.reconciler.state.status(KEY)["replicaStatuses"]["succeeded"] == 1, "the next decision sees it"
    job.pods(10.5, running(0), running(1), succeeded(2), succeeded(3))  # coalesced with the first
    job.flush()  # due: at most one such write per window
    assert job.kube.named("patch_status") == ["Running", "Running"]
    assert job.written["replicaStatuses"] == {"active": 2, "ready": 2, "succeeded": 2, "failed": 0}
    job.reconcile(20.0)
    assert len(job.kube.named("patch_status")) == 2, "written once, not again"


def test_a_phase_change_is_written_at_once_with_the_counts_that_waited():
    job = Lifecycle()
    job.reconcile(0.0)
    job.pods(0.2, *(pod_body(i) for i in range(4)))
    assert job.kube.named("patch_status") == [], "the first status, a count and Created wait"
    job.pods(0.3, pod_body(0), pod_body(1), pod_body(2), deleting(pod_body(3)))  # a worker is lost
    assert job.kube.named("patch_status") == ["Restarting"]
    conditions = {c["type"] for c in job.written["conditions"]}
    assert "Created" in conditions, "what waited is written with the phase"


def test_the_start_clocks_wait_with_the_counts_and_the_next_decision_keeps_their_start():
    """The startup clock (a worker runs, its peers have not joined) starts in the decided status at once;
    written a moment later, it still says when it started."""
    job = Lifecycle()
    job.reconcile(0.0)
    job.pods(0.2, running(0), *(scheduled(i) for i in range(1, 4)))
    stalled = job.reconciler.state.status(KEY)["stalledSince"]
    assert stalled is not None and job.written.get("stalledSince") is None
    job.pods(0.5, running(0), running(1), *(scheduled(i) for i in range(2, 4)))
    job.flush()
    assert job.written["stalledSince"] == stalled


def test_a_creation_refused_on_every_try_says_it_on_one_counted_event_and_the_status_at_once():
    """Each try posts the same Warning: the recorder (events.py) counts the repeats on the Event posted
    first. The refusal is an error: written at once."""

    class Posts(FakeKube):
        def __init__(self) -> None:
            super().__init__()
            self.posts: list[tuple[str, str, str]] = []

        def post_event(self, job: Any, type_: str, reason: str, message: str) -> None:
            super().post_event(job, type_, reason, message)
            self.posts.append((type_, reason, message))

    job = Lifecycle(2)
    job.kube = job.reconciler.kube = Posts()
    job.kube.refuse_for_now = {"mnist-worker-1": Refused(QUOTA)}
    for attempt in range(3):
        job.reconcile(attempt * 400.0)  # a try (the backoff is over)
        job.reconcile(attempt * 400.0 + 0.1)  # its refusal reaches the status
    refusals = [p for p in job.kube.posts if p[1] == "CreatePodsRefused"]
    assert len(refusals) == 3 and len(set(refusals)) == 1
    book, new = EventBook(), []
    for at, (type_, reason, message) in enumerate(refusals):
        key, _, repeat = book.correlate(KEY.namespace, KEY.uid, type_, reason, message, float(at))
        if repeat is None:
            new.append(key)
        book.posted(key, "mnist.1", 1 if repeat is None else repeat.count + 1, float(at))
    assert len(new) == 1, "one Event, counted three times"
    running_ = next(c for c in job.written["conditions"] if c["type"] == "Running")
    assert running_["reason"] == "CreatePodsRefused" and "(3 tries)" in running_["message"]


def test_a_starting_pods_events_are_listed_once_while_fresh_not_on_every_reconcile():
    job = Lifecycle()
    job.reconcile(0.0)
    for at in (0.2, 0.3, 0.4):  # pod events of its peers: each its own reconcile
        job.pods(at, running(0), *(scheduled(i) for i in range(1, 4)))
    assert [name for name, _ in job.kube.named("pod_events")] == [f"mnist-worker-{i}" for i in (1, 2, 3)]
    job.pods(0.4 + EVENTS_FRESH_SECONDS, running(0), *(scheduled(i) for i in range(1, 4)))
    assert len(job.kube.named("pod_events")) == 6, "looked up again once stale"


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_a_finished_jobs_counts_leave_out_the_pods_it_deletes(phase):
    """cleanPodPolicy Running deletes the workers still running: counted as gone already, so their going
    costs no write."""
    job = Lifecycle(2)
    job.reconcile(0.0)
    job.pods(0.2, running(0), running(1))
    done = succeeded(0)
    if phase == "Failed":
        done["status"]["phase"] = "Failed"
        done["status"]["containerStatuses"][0]["state"]["terminated"] |= {"exitCode": 1, "reason": "Error"}
    job.pods(10.0, done, running(1))
    assert job.kube.named("patch_status")[-1] == phase
    assert job.written["replicaStatuses"]["active"] == 0
    job.pods(10.1, done, deleting(running(1)))
    job.pods(10.2, done)
    job.flush()
    assert job.kube.named("patch_status") == ["Running", phase]


def test_a_lost_worker_brings_a_new_group_as_soon_as_the_old_one_is_gone():
    """The first counted restart does not back off: no nextRestartTime, and the reconcile that finds the old
    pods gone creates the new group."""
    job = Lifecycle()
    job.reconcile(0.0)
    job.pods(0.2, *(running(i) for i in range(4)))
    job.pods(1.0, running(0), running(1), running(2), deleting(running(3)))  # worker 3 is lost
    assert job.kube.named("patch_status")[-1] == "Restarting"
    assert job.written["restarts"] == 1 and job.written.get("nextRestartTime") is None
    created = len(job.kube.named("create_pod"))
    job.pods(1.5)  # the old group is gone
    assert job.kube.named("create_pod")[created:] == [f"mnist-worker-{i}" for i in range(4)]


def older(body: dict[str, Any]) -> dict[str, Any]:
    """A pod an operator made before pods carried their job's uid label."""
    del body["metadata"]["labels"]["mwms.dev/job-uid"]
    return body


def test_pods_made_before_the_uid_label_or_without_the_right_to_delete_collections_go_one_by_one(caplog):
    """An upgrade meets running pods without the label, and RBAC may lack `deletecollection` (said once):
    each pod is deleted by its own uid, as before."""

    class Forbidden(FakeKube):
        def delete_pods(self, namespace: str, labels: str, fields: str) -> None:
            super().delete_pods(namespace, labels, fields)
            raise ApiError(403, 'pods is forbidden: cannot deletecollection resource "pods"')

    job = Lifecycle(3)
    job.reconcile(0.0)
    job.pods(10.0, succeeded(0), older(running(1)), running(2))
    assert job.kube.named("delete_pods") == [] and job.kube.named("delete_pod_uid") == ["pod-1-0", "pod-2-0"]
    job = Lifecycle(3)
    job.kube = job.reconciler.kube = Forbidden()
    job.reconcile(0.0)
    job.pods(10.0, succeeded(0), running(1), running(2))
    job.pods(10.1, succeeded(0), running(1), running(2))  # the watch has not shown them going yet
    assert len(job.kube.named("delete_pods")) == 2, "tried each time: the right may have been granted since"
    assert job.kube.named("delete_pod_uid") == ["pod-1-0", "pod-2-0"] * 2
    assert sum("grant `deletecollection`" in r.message for r in caplog.records) == 1, "said once"
