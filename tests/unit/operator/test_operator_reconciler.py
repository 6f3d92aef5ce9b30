"""The glue between watch events, the state, decide() and the API calls: what the operator does when an event
arrives. The API server is replaced by a recorder here; tests/integration/operator runs the real one."""

from __future__ import annotations

import asyncio

import pytest

from mwms_kit.fake_kube import KEY, MOUNT_EVENT, QUOTA, job_body, mounting_pod, pod_body
from mwms_operator.kube.event_lookups import EVENTS_FRESH_SECONDS
from mwms_operator.kube.refusals import NameTaken, Refused
from mwms_operator.observe.state import STATUS_COALESCE_SECONDS, JobKey, State
from mwms_operator.reconciler import LEAVING_GRACE_SECONDS


def test_a_new_job_gets_its_service_and_pods_and_one_event_naming_them(reconciler):
    reconciler.job_event("ADDED", job_body())
    asyncio.run(reconciler.reconcile(KEY))
    kube = reconciler.kube
    assert kube.named("create_service") == ["mnist"]
    assert kube.named("create_pod") == ["mnist-worker-0", "mnist-worker-1"]
    assert kube.named("event") == ["PodsCreated"]
    assert kube.named("patch_status") == [], "a new job's first status may wait for what follows"
    assert reconciler.state.status(KEY)["phase"] == "Pending" and reconciler.queue.scheduled(KEY)


def test_pod_and_service_events_queue_their_owner_and_our_own_status_echo_does_not(reconciler):
    reconciler.job_event("ADDED", job_body())
    assert reconciler.queue._dirty == {KEY}
    reconciler.queue._dirty.clear()
    reconciler.owned_event(pod_body(0))
    assert reconciler.queue._dirty == {KEY}
    reconciler.queue._dirty.clear()
    reconciler.owned_event({"metadata": {"name": "stranger", "namespace": "team-a"}})
    assert reconciler.queue._dirty == set()

    clock = [0.0]
    reconciler.state.clock = lambda: clock[0]
    asyncio.run(reconciler.reconcile(KEY))
    clock[0] = STATUS_COALESCE_SECONDS
    asyncio.run(reconciler.reconcile(KEY))  # the first status is due
    assert reconciler.kube.named("patch_status") == ["Pending"]
    reconciler.queue._dirty.clear()
    echo = dict(job_body(), metadata=dict(job_body()["metadata"], resourceVersion=str(reconciler.kube.rv)))
    reconciler.job_event("MODIFIED", echo)
    assert reconciler.queue._dirty == set()


def test_a_refused_pod_fails_the_job_on_the_next_run_with_the_servers_message(reconciler):
    kube = reconciler.kube
    kube.refuse_pods = "Pod is invalid: spec.containers[0].imagePullPolicy: Unsupported value"
    reconciler.job_event("ADDED", job_body())
    asyncio.run(reconciler.reconcile(KEY))
    assert KEY in reconciler.queue._dirty, "the refusal is acted on right away, not at the next resync"
    asyncio.run(reconciler.reconcile(KEY))
    status = reconciler.state.status(KEY)
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert status["phase"] == "Failed" and failed["reason"] == "InvalidSpec"
    assert "imagePullPolicy" in failed["message"] and "refused" in failed["message"]
    assert kube.named("patch_status") == ["Failed"], "the first status (Pending) waited; an error does not"


def test_a_creation_refused_for_now_removes_the_partial_group_and_tries_again_after_a_backoff(reconciler):
    clock = [0.0]
    reconciler.state.clock = lambda: clock[0]
    kube = reconciler.kube
    kube.refuse_for_now = {"mnist-worker-1": Refused(QUOTA)}
    reconciler.job_event("ADDED", job_body())
    asyncio.run(reconciler.reconcile(KEY))
    assert kube.named("create_pod") == ["mnist-worker-0"]
    assert kube.named("delete_pod") == ["mnist-worker-0"], "no part of the group holds quota while waiting"
    assert kube.named("delete_pod_uid") == ["pod-0-0"], "the pod it created, by its uid"
    assert "PodsCreated" not in kube.named("event") and "CreatePodsRefused" in kube.named("event")
    assert KEY in reconciler.queue._dirty, "the refusal reaches status right away"

    asyncio.run(reconciler.reconcile(KEY))  # says why, creates nothing until the backoff has passed
    running = next(c for c in reconciler.state.status(KEY)["conditions"] if c["type"] == "Running")
    assert running["reason"] == "CreatePodsRefused" and "exceeded quota" in running["message"]
    assert kube.named("create_pod") == ["mnist-worker-0"]

    clock[0] = 6.0  # the first backoff (2 to 6 s) has passed, and the quota was raised meanwhile
    kube.refuse_for_now = {}
    asyncio.run(reconciler.reconcile(KEY))
    assert kube.named("create_pod") == ["mnist-worker-0", "mnist-worker-0", "mnist-worker-1"]
    assert reconciler.state.creation_refused(KEY) is None


def test_after_a_refusal_the_group_is_tried_as_a_dry_run_and_not_created_in_part_while_still_refused(
    reconciler,
):
    """Two jobs on one full quota: a retry that would be refused again creates (and deletes) nothing."""
    clock = [0.0]
    reconciler.state.clock = lambda: clock[0]
    kube = reconciler.kube
    kube.refuse_for_now = {"mnist-worker-1": Refused(QUOTA)}
    reconciler.job_event("ADDED", job_body())
    asyncio.run(reconciler.reconcile(KEY))  # the first try: no dry run (it costs a request per pod)
    assert kube.named("dry_run_pod") == [] and kube.named("create_pod") == ["mnist-worker-0"]
    asyncio.run(reconciler.reconcile(KEY))  # the status says why
    clock[0] = 6.0
    asyncio.run(reconciler.reconcile(KEY))  # due: the dry run is refused, nothing is created or deleted
    assert kube.named("dry_run_pod") == ["mnist-worker-0", "mnist-worker-1"]
    assert kube.named("create_pod") == ["mnist-worker-0"] and kube.named("delete_pod") == ["mnist-worker-0"]
    refusal = reconciler.state.creation_refused(KEY)
    assert refusal is not None and refusal.tries == 2
    kube.refuse_for_now = {}
    clock[0] = 100.0
    asyncio.run(reconciler.reconcile(KEY))
    assert kube.named("create_pod") == ["mnist-worker-0", "mnist-worker-0", "mnist-worker-1"]


@pytest.mark.parametrize(
    ("refusal", "reason"),
    [
        (Refused('failed calling webhook "w"', "WebhookUnavailable"), "WebhookUnavailable"),
        (Refused("too many requests", "ApiServerThrottled"), "ApiServerThrottled"),
        (Refused("etcdserver: request timed out", "ApiServerError"), "ApiServerError"),
        (NameTaken("Pod", "mnist-worker-1", "no owner"), "NameConflict"),
    ],
)
def test_every_refusal_reaches_the_status_and_an_event_after_the_first_try(reconciler, refusal, reason):
    kube = reconciler.kube
    kube.refuse_for_now = {"mnist-worker-1": refusal}
    reconciler.job_event("ADDED", job_body())
    asyncio.run(reconciler.reconcile(KEY))
    assert reason in kube.named("event") and "PodsCreated" not in kube.named("event")
    asyncio.run(reconciler.reconcile(KEY))
    status = reconciler.state.status(KEY)
    running = next(c for c in status["conditions"] if c["type"] == "Running")
    assert status["phase"] == "Pending" and running["reason"] == reason
    assert str(refusal) in running["message"] and "next try at" in running["message"]


def test_a_name_taken_is_retried_within_half_a_minute(reconciler):
    """No event tells when another's object goes: the retry that notices stays frequent."""
    delays = [reconciler.state.refuse_creation(KEY, "NameConflict", "taken")[1] for _ in range(20)]
    assert max(delays) <= 30


def test_jobs_in_a_namespace_being_deleted_are_left_alone_until_it_is_created_again(reconciler):
    """While the namespace controller deletes their pods, each job would see its group lost: one refused
    create says the namespace is ending, and no job of it is written to or acted on after that."""
    kube = reconciler.kube
    other = JobKey(KEY.namespace, "other", "uid-2")
    reconciler.job_event("ADDED", job_body())
    reconciler.job_event("ADDED", job_body(key=other))
    reconciler.queue._dirty.clear()
    kube.namespace_ending = True
    asyncio.run(reconciler.reconcile(KEY))
    assert kube.named("create_service") == ["mnist"] and kube.named("event") == []
    assert KEY not in reconciler.queue._dirty, "nothing to try again"
    calls = len(kube.calls)
    asyncio.run(reconciler.reconcile(KEY))
    asyncio.run(reconciler.reconcile(other))
    assert len(kube.calls) == calls, "no status write, create or event in a namespace being deleted"

    reconciler.job_event("DELETED", job_body())
    reconciler.job_event("DELETED", job_body(key=other))
    kube.namespace_ending = False  # created again, with a new job
    again = JobKey(KEY.namespace, "mnist", "uid-3")
    reconciler.job_event("ADDED", job_body(key=again))
    asyncio.run(reconciler.reconcile(again))
    assert kube.named("create_pod") == ["mnist-worker-0", "mnist-worker-1"]


def test_an_event_refused_as_its_namespace_ends_tells_as_much_as_a_refused_pod(reconciler):
    """A group restart waits out its back-off before it creates anything: its event comes first."""
    reconciler.job_event("ADDED", job_body())
    reconciler.queue._dirty.clear()
    reconciler.kube.events_refused_as_ending = True
    asyncio.run(reconciler.reconcile(KEY))
    assert reconciler.state.namespace_ending(KEY.namespace)
    assert not reconciler.queue._dirty and not reconciler.queue.scheduled(KEY), "nothing to try again"


def test_a_job_the_ending_namespace_did_not_hold_means_it_was_created_again(reconciler):
    kube = reconciler.kube
    reconciler.job_event("ADDED", job_body())
    kube.namespace_ending = True
    asyncio.run(reconciler.reconcile(KEY))
    assert reconciler.state.namespace_ending(KEY.namespace)
    # Its DELETE missed (say, while the operator's watch was down), yet the namespace was made anew.
    kube.namespace_ending = False
    again = JobKey(KEY.namespace, "mnist", "uid-3")
    reconciler.job_event("ADDED", job_body(key=again))
    assert not reconciler.state.namespace_ending(KEY.namespace)
    asyncio.run(reconciler.reconcile(again))
    assert "create_pod" in dict(kube.calls)


def test_refusals_back_off_with_decorrelated_jitter_up_to_five_minutes(reconciler):
    """Each delay is drawn between 2 s and three times the previous one: at the top of the draws it grows
    to the 5-minute cap, and two jobs refused together (different draws) do not retry together."""

    def delays(draws: list[float]) -> list[float]:
        state = State(draw=iter(draws).__next__)
        return [state.refuse_creation(KEY, "CreatePodsRefused", "exceeded quota")[1] for _ in draws]

    assert delays([1.0] * 7) == [6, 18, 54, 162, 300, 300, 300]
    assert delays([0.0] * 3) == [2, 2, 2]
    first, second = delays([0.5] * 4), delays([0.9] * 4)
    assert first == pytest.approx([4, 7, 11.5, 18.25])
    assert all(a < b for a, b in zip(first, second, strict=True))


@pytest.mark.parametrize("now", [None, "pod-0-1"], ids=["gone", "replaced by a newer pod"])
def test_a_pod_whose_delete_was_missed_is_looked_up_after_the_grace_and_forgotten(reconciler, indexes, now):
    clock = [0.0]
    reconciler.state.clock = lambda: clock[0]
    reconciler.job_event("ADDED", job_body(status={"phase": "Restarting", "restarts": 1}))
    indexes.pod(pod_body(0, restart=0, deleting=True))  # its DELETE never comes
    if now:
        reconciler.kube.existing_pods = {"mnist-worker-0": now}
    asyncio.run(reconciler.reconcile(KEY))
    assert reconciler.kube.named("pod_uid") == [] and reconciler.kube.named("create_pod") == []
    assert reconciler.queue.scheduled(KEY), "looked at again once the grace is over"
    clock[0] = LEAVING_GRACE_SECONDS + 1
    asyncio.run(reconciler.reconcile(KEY))
    assert reconciler.kube.named("pod_uid") == ["mnist-worker-0"]
    assert reconciler.kube.named("create_pod") == ["mnist-worker-0", "mnist-worker-1"]


def test_a_worker_evicted_and_gone_before_its_job_was_looked_at_restarts_for_free(reconciler, indexes):
    """The DELETED event of an evicted pod says it was disrupted; the reconcile may only run once the pod
    has left the index."""
    running = {"phase": "Running", "restarts": 0, "disruptions": 0, "startTime": "2026-12-02T10:00:01Z"}
    reconciler.job_event("ADDED", job_body(runPolicy={"backoffLimit": 0}, status=running))
    indexes.pod(pod_body(0, phase="Running"))
    evicted = pod_body(1, phase="Failed")
    evicted["status"]["conditions"] = [
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "EvictionByEvictionAPI",
            "message": "evicted",
        }
    ]
    reconciler.pod_event("MODIFIED", pod_body(1, phase="Running"))
    reconciler.pod_event("DELETED", evicted)
    assert reconciler.queue._dirty == {KEY}
    asyncio.run(reconciler.reconcile(KEY))
    status = reconciler.state.status(KEY)
    assert status["phase"] == "Restarting" and status["disruptions"] == 1
    labels = "mwms.dev/job-uid=uid-1,mwms.dev/restart in (0),mwms.dev/replica-index in (0)"
    assert reconciler.kube.named("delete_pods") == [(labels, "status.phase!=Succeeded,status.phase!=Failed")]


def test_a_pod_stuck_terminating_is_named_in_the_status(reconciler, indexes):
    clock = [0.0]
    reconciler.state.clock = lambda: clock[0]
    reconciler.job_event("ADDED", job_body(status={"phase": "Restarting", "restarts": 1}))
    indexes.pod(pod_body(1, restart=0, deleting=True))
    reconciler.kube.existing_pods = {"mnist-worker-1": "pod-1-0"}
    clock[0] = LEAVING_GRACE_SECONDS + 1
    asyncio.run(reconciler.reconcile(KEY))
    asyncio.run(reconciler.reconcile(KEY))
    running = next(c for c in reconciler.state.status(KEY)["conditions"] if c["type"] == "Running")
    assert running["reason"] == "WaitingForOldPods" and "mnist-worker-1" in running["message"]
    assert reconciler.kube.named("create_pod") == []


def test_a_deleted_job_is_forgotten(reconciler):
    reconciler.job_event("ADDED", job_body())
    reconciler.job_event("DELETED", job_body())
    asyncio.run(reconciler.reconcile(KEY))
    assert reconciler.kube.calls == [] and KEY not in reconciler.state.jobs


def test_the_state_keeps_what_a_reconcile_reads_not_managed_fields_or_the_last_applied_copy(reconciler):
    body = job_body()
    body["metadata"]["labels"] = {"team": "a"}
    body["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
    body["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": "{...}"}
    body["status"] = {"phase": "Pending"}
    reconciler.job_event("ADDED", body)
    kept = reconciler.state.jobs[KEY]
    assert "managedFields" not in kept["metadata"] and "annotations" not in kept["metadata"]
    assert kept["metadata"]["labels"] == body["metadata"]["labels"]
    assert kept["spec"] == body["spec"] and kept["status"] == body["status"]
    asyncio.run(reconciler.reconcile(KEY))  # and a reconcile still finds all it reads
    assert reconciler.kube.named("create_pod") == ["mnist-worker-0", "mnist-worker-1"]


def test_the_resync_looks_at_pending_and_running_jobs_only(reconciler):
    """A suspended or finished job changes only on an event: the periodic resync leaves it alone (with 1,000
    suspended jobs, reconciling each every minute was the operator's whole idle CPU)."""
    phases = {"new": None, "pending": "Pending", "running": "Running", "restarting": "Restarting"}
    phases |= {"suspended": "Suspended", "succeeded": "Succeeded", "failed": "Failed"}
    for name, phase in phases.items():
        body = job_body()
        body["metadata"] |= {"name": name, "uid": f"uid-{name}"}
        if phase is not None:
            body["status"] = {"phase": phase}
        reconciler.state.job_event("ADDED", body)
    reconciler.resync()
    assert {key.name for key in reconciler.queue._dirty} == {"new", "pending", "running", "restarting"}


def test_a_job_the_operator_has_just_suspended_is_left_out_of_the_resync(reconciler):
    reconciler.job_event("ADDED", job_body(runPolicy={"suspend": True}))
    asyncio.run(reconciler.reconcile(KEY))
    assert reconciler.kube.named("patch_status") == ["Suspended"]
    reconciler.queue._dirty.clear()
    reconciler.resync()  # the watch has not echoed the write yet: our own write says Suspended
    assert reconciler.queue._dirty == set()


def test_while_a_worker_runs_and_not_all_have_joined_their_pods_events_decide_the_startup_clock(
    reconciler, indexes
):
    kube, clock = reconciler.kube, [0.0]
    reconciler.state.clock = lambda: clock[0]
    pulling = {"reason": "Pulling", "type": "Normal", "lastTimestamp": "2026-12-02T10:00:01Z"}
    kube.pod_event_lists["mnist-worker-1"] = [pulling]
    reconciler.job_event("ADDED", job_body())
    unready = pod_body(0, phase="Running")
    unready["status"]["containerStatuses"] = [{"name": "trainer", "ready": False, "state": {"running": {}}}]
    indexes.pod(unready)
    indexes.pod(pod_body(1))
    asyncio.run(reconciler.reconcile(KEY))
    assert kube.named("pod_events") == [("mnist-worker-0", "pod-0-0"), ("mnist-worker-1", "pod-1-0")]
    assert reconciler.state.status(KEY).get("stalledSince") is None, "a peer still pulls its image"
    pulled = dict(pulling, reason="Pulled", lastTimestamp="2026-12-02T10:00:09Z")
    kube.pod_event_lists["mnist-worker-1"] = [pulling, pulled]
    clock[0] = EVENTS_FRESH_SECONDS  # looked up again once the last lookup is stale
    asyncio.run(reconciler.reconcile(KEY))
    assert reconciler.state.status(KEY).get("stalledSince") is not None


@pytest.mark.parametrize("readable", [True, False], ids=["events", "events-forbidden"])
def test_a_group_none_of_whose_pods_starts_ends_once_the_grace_is_over_naming_why(
    reconciler, indexes, readable
):
    kube = reconciler.kube
    kube.pod_event_lists["mnist-worker-0"] = [MOUNT_EVENT]
    if not readable:
        kube.events_forbidden = True
    reconciler.job_event("ADDED", job_body(1, runPolicy={"containerErrorGraceSeconds": 0}))
    indexes.pod(mounting_pod(0))
    asyncio.run(reconciler.reconcile(KEY))
    assert kube.named("pod_events") == [], "no lookup before the grace is over"
    asyncio.run(reconciler.reconcile(KEY))
    status = reconciler.state.status(KEY)
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert (status["phase"], failed["reason"]) == ("Failed", "ContainerError")
    assert failed["message"].startswith("worker mnist-worker-0 has not started 0s after it was scheduled")
    if readable:
        assert failed["message"].endswith(f"FailedMount: {MOUNT_EVENT['message']}")
    else:
        assert "may not list events in namespace team-a" in failed["message"]
        assert kube.named("event").count("PodEventsForbidden") == 1
