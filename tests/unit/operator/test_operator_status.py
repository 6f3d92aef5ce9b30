"""The status decision, walked through every transition of a TrainJob's life."""

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from mwms_operator.config import OperatorConfig
from mwms_operator.spec import SpecError, parse_trainjob
from mwms_operator.status import (
    CONTAINER_ERROR_GRACE_SECONDS,
    REFUSALS,
    RULES,
    CreatePods,
    CreateService,
    CreationRefused,
    DeleteJob,
    DeletePods,
    JobMeta,
    PodEvents,
    WorkerPod,
    decide,
    format_time,
    next_due,
    pod_events,
    startup_unexplained,
    worker_pod,
)

META = JobMeta(name="mnist", namespace="team-a", uid="uid-1", generation=1)
T0 = datetime(2026, 12, 2, 10, 0, 0, tzinfo=UTC)
RUN = '{"runId": "r123", "experimentId": "7", "modelUri": "models:/m/1", "metrics": {"accuracy": 0.97}}'


def spec(replicas=3, **fields):
    return parse_trainjob(
        {"metadata": {"name": "mnist"}, "spec": {"replicas": replicas, **fields}}, OperatorConfig()
    )


def pod(i, phase="Running", restart=0, **kw):
    return WorkerPod(name=f"mnist-worker-{i}", index=i, restart=restart, phase=phase, **kw)


def group(n=3, phase="Running", restart=0):
    return [pod(i, phase, restart) for i in range(n)]


def step(previous, pods, *, at=0, job=None, service=True, disrupted=None):
    return decide(
        META,
        job or spec(),
        pods,
        service_exists=service,
        now=T0 + timedelta(seconds=at),
        previous=previous,
        disrupted=disrupted,
    )


def conditions(decision):
    return {c["type"]: (c["status"], c["reason"]) for c in decision.status["conditions"]}


def running_status():
    first = step(None, [], service=False)
    created = step(first.status, group(phase="Pending"), at=1)
    return step(created.status, group(), at=2).status


def test_a_new_job_gets_its_service_and_every_pod():
    d = step(None, [], service=False)
    assert d.actions == (CreateService(), CreatePods((0, 1, 2), 0))
    assert d.status["phase"] == "Pending"
    assert d.status["startTime"] == d.status["groupStartTime"] == format_time(T0)
    assert d.status["chiefPod"] == "mnist-worker-0" and d.status["restarts"] == 0
    assert d.status["observedGeneration"] == 1
    assert [e.reason for e in d.events] == ["Creating"]


def test_only_missing_pods_are_created_after_a_partial_create():
    first = step(None, [], service=False)
    d = step(first.status, [pod(0, "Pending")], at=1)
    assert d.actions == (CreatePods((1, 2), 0),)
    assert d.status["groupStartTime"] == first.status["groupStartTime"]


def test_all_pods_created_sets_created_then_running():
    first = step(None, [], service=False)
    created = step(first.status, group(phase="Pending"), at=1)
    assert created.actions == () and created.all_pods_created
    assert created.events == (), "the handler posts PodsCreated naming the pods; no second event"
    assert conditions(created) == {"Created": ("True", "PodsCreated"), "Running": ("False", "WorkersPending")}
    assert created.status["replicaStatuses"] == {"active": 3, "ready": 0, "succeeded": 0, "failed": 0}
    running = step(created.status, group(), at=2)
    assert running.status["phase"] == "Running" and not running.all_pods_created
    assert conditions(running)["Running"] == ("True", "AllWorkersRunning")
    assert [e.reason for e in running.events] == ["AllWorkersRunning"]


def test_a_steady_state_changes_nothing_and_keeps_transition_times():
    status = running_status()
    again = step(status, group(), at=30)
    assert again.actions == () and again.events == ()
    assert again.status["conditions"] == status["conditions"]


def test_chief_exit_0_succeeds_with_the_mlflow_run_and_cleans_running_pods():
    status = running_status()
    pods = [pod(0, "Succeeded", exit_code=0, message=RUN), pod(1, "Succeeded", exit_code=0), pod(2)]
    d = step(status, pods, at=60)
    assert d.status["phase"] == "Succeeded"
    assert d.status["mlflow"] == {"runId": "r123", "experimentId": "7", "modelUri": "models:/m/1"}
    assert d.status["completionTime"] == format_time(T0 + timedelta(seconds=60))
    assert conditions(d)["Succeeded"] == ("True", "ChiefSucceeded")
    assert conditions(d)["Running"][0] == "False"
    assert d.actions == (DeletePods(("mnist-worker-2",)),)
    assert "r123" in d.events[0].message


@pytest.mark.parametrize(
    ("policy", "deleted"),
    [
        ("Running", ("mnist-worker-2",)),
        ("All", ("mnist-worker-0", "mnist-worker-1", "mnist-worker-2")),
        ("None", ()),
    ],
)
def test_clean_pod_policy(policy, deleted):
    job = spec(runPolicy={"cleanPodPolicy": policy})
    pods = [pod(0, "Succeeded", exit_code=0), pod(1, "Succeeded", exit_code=0), pod(2)]
    d = step(running_status(), pods, at=60, job=job)
    assert d.actions == ((DeletePods(deleted),) if deleted else ())


def test_ttl_deletes_the_finished_job_only_when_due():
    job = spec(runPolicy={"ttlSecondsAfterFinished": 30})
    done = step(running_status(), [pod(0, "Succeeded", exit_code=0)], at=60, job=job)
    assert step(done.status, [], at=89, job=job).actions == ()
    late = step(done.status, [], at=90, job=job)
    assert late.actions == (DeleteJob(),)
    assert late.status["phase"] == "Succeeded"


def test_finished_jobs_stay_finished():
    done = step(running_status(), [pod(0, "Succeeded", exit_code=0)], at=60)
    after = step(done.status, [], at=61)
    assert after.status["phase"] == "Succeeded" and after.actions == () and after.events == ()


@pytest.mark.parametrize(
    ("failed", "why"),
    [
        (dict(exit_code=75, message="peer lost"), "exited with code 75: peer lost"),
        (dict(exit_code=137, reason="OOMKilled"), "exited with code 137 (OOMKilled)"),
        (dict(reason="Evicted"), "failed (Evicted)"),
    ],
)
def test_a_retryable_failure_restarts_the_whole_group(failed, why):
    status = running_status()
    pods = [pod(0), pod(1, "Failed", **failed), pod(2)]
    d = step(status, pods, at=60)
    assert d.status["phase"] == "Restarting" and d.status["restarts"] == 1
    assert d.actions == (DeletePods(("mnist-worker-0", "mnist-worker-1", "mnist-worker-2")),)
    assert conditions(d)["Restarting"] == ("True", "GroupRestarting")
    assert conditions(d)["Running"] == ("False", "GroupRestarting")
    assert why in d.status["conditions"][-1]["message"] or any(
        why in c["message"] for c in d.status["conditions"]
    )
    assert d.events[0].type == "Warning" and "mnist-worker-1" in d.events[0].message


def test_a_restart_waits_for_the_old_group_then_recreates_it_with_the_next_count():
    restarting = step(running_status(), [pod(0), pod(1, "Failed", exit_code=75), pod(2)], at=60).status
    leaving = [pod(0, deleting=True), pod(1, "Failed", exit_code=75), pod(2, deleting=True)]
    waiting = step(restarting, leaving, at=61)
    assert waiting.actions == (DeletePods(("mnist-worker-1",)),)
    assert waiting.status["phase"] == "Restarting"
    # What the new group waits for is named (a pod stuck Terminating on a lost node shows here).
    running_condition = next(c for c in waiting.status["conditions"] if c["type"] == "Running")
    assert running_condition["reason"] == "WaitingForOldPods"
    assert all(f"mnist-worker-{i}" in running_condition["message"] for i in range(3))
    # A counted restart backs off 10 s (from the failure at 60 s) before the new group is created.
    assert restarting["nextRestartTime"] == format_time(T0 + timedelta(seconds=70))
    backing_off = step(waiting.status, [], at=62)
    assert backing_off.actions == () and conditions(backing_off)["Running"] == ("False", "RestartBackoff")
    recreate = step(backing_off.status, [], at=70)
    assert recreate.actions == (CreatePods((0, 1, 2), 1),)
    assert recreate.status["groupStartTime"] == format_time(T0 + timedelta(seconds=70))
    assert recreate.status["nextRestartTime"] is None
    pending = step(recreate.status, group(phase="Pending", restart=1), at=71)
    assert pending.status["phase"] == "Restarting" and pending.actions == ()
    running = step(pending.status, group(restart=1), at=72)
    assert running.status["phase"] == "Running" and running.status["restarts"] == 1
    assert conditions(running)["Restarting"][0] == "False"
    assert conditions(running)["Running"][0] == "True"


def test_a_pod_deleted_while_running_restarts_the_group():
    d = step(running_status(), [pod(0), pod(2)], at=60)
    assert d.status["phase"] == "Restarting" and "mnist-worker-1 was deleted" in d.events[0].message
    d = step(running_status(), [pod(0), pod(1, deleting=True), pod(2)], at=60)
    assert d.status["phase"] == "Restarting"


def test_a_permanent_exit_fails_at_once_naming_worker_code_and_message():
    pods = [
        pod(0, "Failed", exit_code=75),
        pod(1),
        pod(2, "Failed", exit_code=2, message="epochs must be >= 1"),
    ]
    d = step(running_status(), pods, at=60)
    assert d.status["phase"] == "Failed"
    assert conditions(d)["Failed"] == ("True", "WorkerFailed")
    message = next(c["message"] for c in d.status["conditions"] if c["type"] == "Failed")
    assert message == "worker mnist-worker-2 exited with code 2: epochs must be >= 1"
    assert d.actions == (DeletePods(("mnist-worker-1",)),)


def test_backoff_exhausted_fails():
    job = spec(runPolicy={"backoffLimit": 1})
    status = dict(running_status(), restarts=1)
    d = step(
        status,
        [pod(0, restart=1), pod(1, "Failed", restart=1, exit_code=75), pod(2, restart=1)],
        at=60,
        job=job,
    )
    assert conditions(d)["Failed"] == ("True", "BackoffLimitExceeded")
    assert (
        "restarted 1 times" in d.events[0].message
        and "mnist-worker-1 exited with code 75" in d.events[0].message
    )


def test_backoff_limit_0_fails_on_the_first_retryable_failure():
    job = spec(runPolicy={"backoffLimit": 0})
    d = step(running_status(), [pod(0), pod(1, "Failed", exit_code=75), pod(2)], at=60, job=job)
    assert d.status["phase"] == "Failed"


def test_suspend_deletes_pods_and_resume_recreates_them_after_they_are_gone():
    suspended_job = spec(runPolicy={"suspend": True})
    d = step(running_status(), group(), at=60, job=suspended_job)
    assert d.status["phase"] == "Suspended" and d.status["startTime"] is None
    assert d.actions == (DeletePods(("mnist-worker-0", "mnist-worker-1", "mnist-worker-2")),)
    assert conditions(d)["Suspended"] == ("True", "Suspended") and conditions(d)["Running"][0] == "False"
    still = step(d.status, [pod(0, deleting=True)], at=61, job=suspended_job)
    assert still.actions == () and still.events == ()
    # Resumed while a pod is still going away: wait, do not count it as a lost worker.
    wait = step(still.status, [pod(0, deleting=True)], at=62)
    assert wait.actions == () and wait.status["phase"] == "Suspended"
    resumed = step(wait.status, [], at=63)
    assert resumed.actions == (CreatePods((0, 1, 2), 0),)
    assert resumed.status["phase"] == "Pending" and resumed.status["startTime"] == format_time(
        T0 + timedelta(seconds=63)
    )
    assert conditions(resumed)["Suspended"] == ("False", "Resumed")


def test_suspend_before_start_creates_nothing():
    d = step(None, [], job=spec(runPolicy={"suspend": True}), service=False)
    assert d.status["phase"] == "Suspended" and d.actions == ()


def test_deadline_fails_and_removes_pods_whatever_the_clean_policy():
    job = spec(runPolicy={"activeDeadlineSeconds": 100, "cleanPodPolicy": "None"})
    status = running_status()
    assert step(status, group(), at=99, job=job).status["phase"] == "Running"
    d = step(status, group(), at=100, job=job)
    assert conditions(d)["Failed"] == ("True", "DeadlineExceeded")
    assert d.actions == (DeletePods(("mnist-worker-0", "mnist-worker-1", "mnist-worker-2")),)


UNSCHEDULABLE = "Unschedulable: 0/1 nodes are available: 1 Insufficient cpu."


def test_startup_timeout_counts_while_some_workers_run_and_others_cannot_be_scheduled():
    job = spec(runPolicy={"startupTimeoutSeconds": 30})
    first = step(None, [], job=job, service=False)
    pods = [pod(0), pod(1), pod(2, "Pending", waiting=UNSCHEDULABLE, unschedulable=True)]
    stuck = step(first.status, pods, at=100, job=job)
    assert stuck.status["phase"] == "Pending" and stuck.status["stalledSince"] == format_time(
        T0 + timedelta(seconds=100)
    )
    # Already while waiting, the condition names the worker and the scheduler's reason.
    assert conditions(stuck)["Running"] == ("False", "WorkersPending")
    running = next(c for c in stuck.status["conditions"] if c["type"] == "Running")
    assert running["message"] == f"waiting for 1 of 3 workers to run (mnist-worker-2: {UNSCHEDULABLE})"
    assert step(stuck.status, pods, at=129, job=job).status["phase"] == "Pending"
    assert next_due(job, stuck.status) == T0 + timedelta(seconds=130)
    d = step(stuck.status, pods, at=130, job=job)
    assert conditions(d)["Failed"] == ("True", "StartupTimeout")
    assert f"mnist-worker-2 ({UNSCHEDULABLE})" in d.events[-1].message
    assert d.actions == (DeletePods(("mnist-worker-0", "mnist-worker-1", "mnist-worker-2")),)
    assert d.status["stalledSince"] is None


@pytest.mark.parametrize(
    "pods",
    [
        # The whole group waits for the scheduler (a scale-up): nobody holds a node yet.
        [pod(i, "Pending", waiting=UNSCHEDULABLE, unschedulable=True) for i in range(3)],
        # Kueue (or any scheduling gate) holds the group.
        [pod(i, "Pending", waiting="SchedulingGated: gated") for i in range(3)],
        # Scheduled, pulling a large image.
        [pod(0), pod(1), pod(2, "Pending", waiting="ContainerCreating")],
    ],
    ids=["all-unschedulable", "gated", "pulling"],
)
def test_waiting_that_is_not_a_stuck_partial_group_never_times_out(pods):
    job = spec(runPolicy={"startupTimeoutSeconds": 30})
    first = step(None, [], job=job, service=False)
    d = step(first.status, pods, at=10_000, job=job)
    assert d.status["phase"] == "Pending" and d.status["stalledSince"] is None
    assert conditions(d)["Running"] == ("False", "WorkersPending")
    assert next_due(job, d.status) is None


def test_the_startup_clock_stops_when_the_group_is_no_longer_partly_stuck():
    job = spec(runPolicy={"startupTimeoutSeconds": 30})
    first = step(None, [], job=job, service=False)
    stuck = [pod(0), pod(1, "Pending", waiting=UNSCHEDULABLE, unschedulable=True)]
    d = step(first.status, stuck, at=10, job=job)
    assert d.status["stalledSince"] == format_time(T0 + timedelta(seconds=10))
    d = step(d.status, [pod(0), pod(1, "Pending", waiting="ContainerCreating")], at=20, job=job)
    assert d.status["stalledSince"] is None
    d = step(d.status, stuck, at=35, job=job)
    assert d.status["phase"] == "Pending", "the clock starts again, it does not add up earlier stalls"
    assert d.status["stalledSince"] == format_time(T0 + timedelta(seconds=35))


NOT_RESOLVING = (
    "Unhealthy: Readiness probe failed: waiting for peers: worker 1 (mnist-worker-1.mnist.team-a.svc:2222): "
    "name does not resolve (Temporary failure in name resolution)"
)


def unjoined(i, note=NOT_RESOLVING, restart=0):
    """A worker whose trainer runs and has not joined its group: its readiness probe says why."""
    return pod(i, restart=restart, trainer_unready=True, events=PodEvents(note=note))


def test_startup_timeout_counts_while_workers_run_and_have_not_all_joined_and_names_them_with_their_reasons():
    job = spec(replicas=2, runPolicy={"startupTimeoutSeconds": 30})
    first = step(None, [], job=job, service=False)
    pods = [
        unjoined(0),
        unjoined(1, "Unhealthy: Readiness probe failed: the trainer has not begun its rendezvous yet"),
    ]
    d = step(first.status, pods, at=100, job=job)
    assert d.status["phase"] == "Running" and d.status["stalledSince"] == format_time(
        T0 + timedelta(seconds=100)
    )
    assert next_due(job, d.status) == T0 + timedelta(seconds=130)
    assert step(d.status, pods, at=129, job=job).status["phase"] == "Running"
    d = step(d.status, pods, at=130, job=job)
    assert conditions(d)["Failed"] == ("True", "StartupTimeout")
    message = next(c["message"] for c in d.status["conditions"] if c["type"] == "Failed")
    assert message == (
        "not every worker joined the group within 30s of one running (spec.runPolicy.startupTimeoutSeconds); "
        f"not joined: worker 0 (mnist-worker-0): {NOT_RESOLVING}; worker 1 (mnist-worker-1): Unhealthy: "
        "Readiness probe failed: the trainer has not begun its rendezvous yet"
    )
    assert d.actions == (DeletePods(("mnist-worker-0", "mnist-worker-1")),)


def test_the_startup_clock_stops_once_every_worker_has_joined():
    job = spec(replicas=2, runPolicy={"startupTimeoutSeconds": 30})
    first = step(None, [], job=job, service=False)
    d = step(first.status, [pod(0), unjoined(1)], at=10, job=job)
    assert d.status["stalledSince"] == format_time(T0 + timedelta(seconds=10))
    d = step(d.status, [pod(0), pod(1)], at=20, job=job)
    assert d.status["stalledSince"] is None and next_due(job, d.status) is None
    assert step(d.status, [pod(0), pod(1)], at=10_000, job=job).status["phase"] == "Running"


def test_a_peer_stuck_in_container_creating_is_named_with_its_pods_event():
    job = spec(replicas=2, runPolicy={"startupTimeoutSeconds": 30})
    first = step(None, [], job=job, service=False)
    mount = 'FailedMount: MountVolume.SetUp failed for volume "creds" : secret "creds" not found'
    stuck = pod(1, "Pending", waiting="ContainerCreating", events=PodEvents(note=mount))
    d = step(first.status, [unjoined(0), stuck], at=10, job=job)
    assert d.status["stalledSince"] == format_time(T0 + timedelta(seconds=10))
    d = step(d.status, [unjoined(0), stuck], at=40, job=job)
    assert conditions(d)["Failed"] == ("True", "StartupTimeout")
    assert f"still pending: mnist-worker-1 (ContainerCreating; {mount})" in d.events[-1].message
    assert f"not joined: worker 0 (mnist-worker-0): {NOT_RESOLVING}" in d.events[-1].message


@pytest.mark.parametrize(
    "pods",
    [
        # Queued, gated or waiting for a scale-up: no worker runs, nothing is held.
        [pod(i, "Pending", waiting="ContainerCreating", events=PodEvents()) for i in range(2)],
        # Every worker runs and is ready.
        [pod(0), pod(1)],
    ],
    ids=["wholly-pending", "all-joined"],
)
def test_the_startup_clock_does_not_run_for_a_group_that_holds_nothing_or_has_joined(pods):
    job = spec(replicas=2, runPolicy={"startupTimeoutSeconds": 30})
    first = step(None, [], job=job, service=False)
    d = step(first.status, pods, at=10_000, job=job)
    assert d.status["stalledSince"] is None and "Failed" not in conditions(d)


def test_a_peers_image_pull_does_not_count():
    job = spec(replicas=2, runPolicy={"startupTimeoutSeconds": 30})
    first = step(None, [], job=job, service=False)
    pulling = pod(1, "Pending", waiting="ContainerCreating", events=PodEvents(pulling=True))
    assert step(first.status, [unjoined(0), pulling], at=10_000, job=job).status["stalledSince"] is None
    # Not pulling yet at 10 s (the clock starts); the pull then ran unseen until 500 s and the container
    # started: the clock counts from the end of the pull.
    creating = pod(1, "Pending", waiting="ContainerCreating", events=PodEvents())
    d = step(first.status, [unjoined(0), creating], at=10, job=job)
    assert d.status["stalledSince"] == format_time(T0 + timedelta(seconds=10))
    pulled = pod(1, trainer_unready=True, events=PodEvents(pulled_at=T0 + timedelta(seconds=500)))
    d = step(d.status, [unjoined(0), pulled], at=510, job=job)
    assert d.status["stalledSince"] == format_time(T0 + timedelta(seconds=500))
    assert step(d.status, [unjoined(0), pulled], at=529, job=job).status["phase"] == "Running"
    assert conditions(step(d.status, [unjoined(0), pulled], at=530, job=job))["Failed"][1] == "StartupTimeout"


def test_a_pods_events_say_whether_it_pulls_when_a_pull_ended_and_its_last_warning():
    def event(reason, at, type_="Normal", message=""):
        when = format_time(T0 + timedelta(seconds=at))
        return {"reason": reason, "type": type_, "message": message, "lastTimestamp": when}

    probe = event(
        "Unhealthy", 30, "Warning", "Readiness probe failed: waiting for peers: worker 0 (h:2222):\n x\n"
    )
    assert pod_events([event("Scheduled", 0), event("Pulling", 1)]) == PodEvents(pulling=True)
    assert pod_events([probe, event("Pulled", 20), event("Pulling", 1), event("Started", 21)]) == PodEvents(
        pulled_at=T0 + timedelta(seconds=20),
        note="Unhealthy: Readiness probe failed: waiting for peers: worker 0 (h:2222): x",
    )


def test_a_starting_pods_events_are_looked_up_only_while_the_clock_may_run():
    running = {"phase": "Running", "restarts": 0}
    assert startup_unexplained([pod(0, "Pending"), pod(1, "Pending")], running) == []
    assert startup_unexplained([pod(0), pod(1)], running) == []
    starting = [pod(0), unjoined(1), pod(2, "Pending"), unjoined(3, restart=1)]
    assert startup_unexplained(starting, running) == [unjoined(1), pod(2, "Pending")]
    assert startup_unexplained(starting, dict(running, phase="Failed")) == []


def test_a_running_trainer_whose_readiness_probe_has_not_passed_has_not_joined():
    body = {
        "metadata": {"name": "mnist-worker-1", "labels": {"mwms.dev/replica-index": "1"}},
        "status": {
            "phase": "Running",
            "containerStatuses": [{"name": "trainer", "ready": False, "state": {"running": {}}}],
        },
    }
    assert not worker_pod(body).joined
    body["status"]["containerStatuses"][0]["ready"] = True
    assert worker_pod(body).joined


def test_an_invalid_image_name_fails_at_once_with_the_containers_message():
    first = step(None, [], service=False)
    bad = ("InvalidImageName", 'container trainer: InvalidImageName: Failed to apply default image tag "Bad"')
    d = step(first.status, [pod(0, "Pending", container_error=bad), pod(1, "Pending"), pod(2)], at=3)
    assert conditions(d)["Failed"] == ("True", "ContainerError")
    assert d.events[0].message == f"worker mnist-worker-0 cannot start: {bad[1]}"


@pytest.mark.parametrize("reason", ["ErrImagePull", "ImagePullBackOff", "CreateContainerConfigError"])
def test_errors_that_may_heal_fail_only_once_they_last(reason):
    first = step(None, [], service=False)
    error = (reason, f"container trainer: {reason}: it failed")
    pods = [pod(0, "Pending", container_error=error), pod(1, "Pending"), pod(2, "Pending")]
    d = step(first.status, pods, at=5)
    assert d.status["phase"] == "Pending" and d.status["containerErrorSince"] == format_time(
        T0 + timedelta(seconds=5)
    )
    assert next_due(spec(), d.status) == T0 + timedelta(seconds=5 + CONTAINER_ERROR_GRACE_SECONDS)
    healed = step(d.status, group(), at=6)
    assert healed.status["phase"] == "Running" and healed.status["containerErrorSince"] is None
    late = step(d.status, pods, at=5 + CONTAINER_ERROR_GRACE_SECONDS)
    assert conditions(late)["Failed"] == ("True", "ContainerError")
    assert "worker mnist-worker-0 cannot start: container trainer: " + reason in late.events[0].message


def test_an_invalid_spec_fails_with_a_warning_and_creates_nothing():
    error = SpecError("spec.template.spec.containers[0].env[0].name", "TF_CONFIG is set by the operator")
    d = decide(META, error, [], service_exists=False, now=T0, previous=None)
    assert d.status["phase"] == "Failed" and d.actions == ()
    assert conditions(d)["Failed"] == ("True", "InvalidSpec")
    assert d.events[0].type == "Warning" and "containers[0].env[0].name" in d.events[0].message


def test_pods_of_an_older_group_are_deleted_before_creating():
    status = dict(running_status(), restarts=2, phase="Restarting")
    d = step(status, [pod(0, restart=1)], at=5)
    assert d.actions == (DeletePods(("mnist-worker-0",)),)


def test_worker_pod_reads_the_api_objects():
    api_pod = {
        "metadata": {
            "name": "mnist-worker-1",
            "labels": {"mwms.dev/replica-index": "1", "mwms.dev/restart": "2"},
        },
        "status": {
            "phase": "Failed",
            "conditions": [{"type": "Ready", "status": "False"}],
            "containerStatuses": [
                {"name": "sidecar", "state": {"terminated": {"exitCode": 0}}},
                {
                    "name": "trainer",
                    "state": {"terminated": {"exitCode": 75, "reason": "Error", "message": "peer lost\n"}},
                },
            ],
        },
    }
    assert worker_pod(api_pod) == WorkerPod(
        "mnist-worker-1", 1, 2, "Failed", exit_code=75, message="peer lost", reason="Error"
    )
    pending = {
        "metadata": {"name": "p", "labels": {"mwms.dev/replica-index": "0"}, "deletionTimestamp": "x"},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "1 Insufficient cpu.",
                }
            ],
        },
    }
    parsed = worker_pod(pending)
    assert parsed.deleting and parsed.waiting == "Unschedulable: 1 Insufficient cpu." and parsed.restart == 0
    assert worker_pod({"metadata": {"name": "other"}}) is None


def test_created_is_set_even_when_the_first_look_finds_the_job_done():
    first = step(None, [], service=False)
    done = step(
        first.status, [pod(0, "Succeeded", exit_code=0, message=RUN)] + group(3, "Succeeded")[1:], at=1
    )
    assert conditions(done)["Created"] == ("True", "PodsCreated") and done.all_pods_created
    assert done.status["phase"] == "Succeeded"


def test_a_refused_worker_object_fails_the_job_as_an_invalid_spec_naming_the_servers_message():
    first = step(None, [], service=False)
    d = decide(
        META, spec(), [], service_exists=True, now=T0, previous=first.status,
        refused="Pod is invalid: spec.containers[0].imagePullPolicy: Unsupported value",
    )  # fmt: skip
    assert d.status["phase"] == "Failed" and conditions(d)["Failed"] == ("True", "InvalidSpec")
    assert "the API server refused" in d.events[0].message and "imagePullPolicy" in d.events[0].message
    assert not any(isinstance(a, CreatePods) for a in d.actions)


QUOTA_REFUSAL = CreationRefused(
    'pods "mnist-worker-1" is forbidden: exceeded quota: q, requested: pods=1, used: pods=1, limited: pods=1',
    tries=2,
    next_try=T0 + timedelta(seconds=4),
    wait_seconds=4.0,
)


def test_a_creation_refused_for_now_keeps_no_pod_and_says_why_in_the_running_condition():
    first = step(None, [], service=False)
    partial = [pod(0, "Pending"), pod(1, "Pending", deleting=True)]  # the handler deletes a partial group
    d = decide(META, spec(), partial, service_exists=True, now=T0, previous=first.status,
               creation_refused=QUOTA_REFUSAL)  # fmt: skip
    assert d.rule == "creation-refused"
    assert d.actions == (DeletePods(("mnist-worker-0",)),)
    assert d.status["phase"] == "Pending" and d.status["restarts"] == 0, "a refusal is not a lost worker"
    running = next(c for c in d.status["conditions"] if c["type"] == "Running")
    assert (running["status"], running["reason"]) == ("False", "CreatePodsRefused")
    assert "exceeded quota" in running["message"] and "2 tries" in running["message"]
    assert "next try at 2026-12-02T10:00:04Z" in running["message"]


@pytest.mark.parametrize(
    ("reason", "says"),
    [
        ("WebhookUnavailable", "an admission webhook the workers need could not be called"),
        ("ApiServerThrottled", "the API server asked the operator to slow down (429)"),
        ("ApiServerError", "the API server failed to create the workers"),
        ("NameConflict", "a name the job needs is taken"),
    ],
)
def test_each_kind_of_refusal_is_its_own_reason_in_the_running_condition(reason, says):
    first = step(None, [], service=False)
    refusal = dataclasses.replace(QUOTA_REFUSAL, message="the server's message", reason=reason)
    d = decide(META, spec(), [], service_exists=True, now=T0, previous=first.status, creation_refused=refusal)
    running = next(c for c in d.status["conditions"] if c["type"] == "Running")
    assert (d.rule, d.status["phase"], running["reason"]) == ("creation-refused", "Pending", reason)
    assert running["message"].startswith(f"{says} (2 tries): the server's message;")


def test_a_refused_service_never_removes_a_whole_group_that_runs():
    """A running job's Service deleted, its name taken or its re-creation refused by a 5xx: the workers are
    already connected, so they keep running and the Service is asked for again."""
    refusal = dataclasses.replace(QUOTA_REFUSAL, reason="NameConflict")
    d = decide(META, spec(), group(), service_exists=False, now=T0, previous=running_status(),
               creation_refused=refusal)  # fmt: skip
    assert d.status["phase"] == "Running" and d.actions == (CreateService(),)


def test_every_refusal_reason_is_in_the_readmes_troubleshooting_table():
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    table = readme.split("## Troubleshooting", 1)[1].split("\n## ", 1)[0]
    assert [r for r in REFUSALS if f"`{r}`" not in table] == []


def test_once_the_next_try_is_due_and_no_pod_is_left_the_whole_group_is_created_again():
    first = step(None, [], service=False)
    due = CreationRefused("exceeded quota", 2, T0, wait_seconds=0.0)
    waiting = decide(META, spec(), [pod(1, "Pending", deleting=True)], service_exists=True, now=T0,
                     previous=first.status, creation_refused=due)  # fmt: skip
    assert waiting.rule == "creation-refused" and waiting.actions == ()
    later = T0 + timedelta(seconds=400)  # past the startup timeout: the wait for the quota does not count
    d = decide(META, spec(), [], service_exists=True, now=later, previous=first.status, creation_refused=due)
    assert d.actions == (CreatePods((0, 1, 2), 0),)
    assert d.status["groupStartTime"] == format_time(later) and d.status["phase"] == "Pending"


TEMPLATE_ERROR = SpecError("spec.template.spec.containers[0].env[0].name", "TF_CONFIG is set by the operator")


def test_an_invalid_template_edit_leaves_the_running_group_alone_and_says_why():
    running = running_status()
    d = decide(META, spec(), group(), service_exists=True, now=T0, previous=running,
               template_error=TEMPLATE_ERROR)  # fmt: skip
    assert d.status["phase"] == "Running" and d.actions == ()
    accepted = next(c for c in d.status["conditions"] if c["type"] == "TemplateAccepted")
    assert (accepted["status"], accepted["reason"]) == ("False", "InvalidSpec")
    assert "spec.template.spec.containers[0].env[0].name" in accepted["message"]
    assert [(e.type, e.reason) for e in d.events] == [("Warning", "InvalidSpec")]
    again = decide(META, spec(), group(), service_exists=True, now=T0, previous=d.status,
                   template_error=TEMPLATE_ERROR)  # fmt: skip
    assert again.events == (), "said once"
    fixed = decide(META, spec(), group(), service_exists=True, now=T0, previous=d.status)
    assert conditions(fixed)["TemplateAccepted"] == ("True", "TemplateValid")


def test_the_next_group_is_not_made_from_an_invalid_template():
    running = running_status()
    restarting = decide(META, spec(), [pod(0), pod(1, "Failed", exit_code=75), pod(2)], service_exists=True,
                        now=T0, previous=running, template_error=TEMPLATE_ERROR)  # fmt: skip
    assert restarting.status["phase"] == "Restarting"
    d = decide(META, spec(), [], service_exists=True, now=T0, previous=restarting.status,
               template_error=TEMPLATE_ERROR)  # fmt: skip
    assert d.status["phase"] == "Failed" and conditions(d)["Failed"] == ("True", "InvalidSpec")
    assert not any(isinstance(a, CreatePods) for a in d.actions)


def test_next_due_is_the_earliest_deadline_of_the_status():
    job = spec(
        runPolicy={"activeDeadlineSeconds": 100, "startupTimeoutSeconds": 30, "ttlSecondsAfterFinished": 5}
    )
    started = {"phase": "Pending", "startTime": format_time(T0), "stalledSince": format_time(T0)}
    assert next_due(job, started) == T0 + timedelta(seconds=30)
    assert next_due(job, dict(started, stalledSince=None)) == T0 + timedelta(seconds=100)
    backoff = dict(started, phase="Restarting", nextRestartTime=format_time(T0 + timedelta(seconds=20)))
    assert next_due(job, backoff) == T0 + timedelta(seconds=20)
    done = {"phase": "Succeeded", "startTime": format_time(T0), "completionTime": format_time(T0)}
    assert next_due(job, done) == T0 + timedelta(seconds=5)
    assert next_due(spec(), done) is None, "a finished job without a TTL waits for nothing"
    assert next_due(job, dict(started, phase="Suspended")) is None
    assert next_due(SpecError("spec.replicas", "is required"), started) is None


def _rule_cases():
    running = running_status()
    pending = step(None, [], service=False).status
    return {
        "finished": (dict(running, phase="Succeeded", completionTime=format_time(T0)), group(), {}),
        "invalid-spec": (None, [], {"job": SpecError("spec.replicas", "is required")}),
        "refused": (pending, [], {"refused": "Pod is invalid"}),
        "creation-refused": (pending, [pod(0, "Pending")], {"creation_refused": QUOTA_REFUSAL}),
        "suspended": (running, group(), {"job": spec(runPolicy={"suspend": True})}),
        "chief-succeeded": (running, [pod(0, "Succeeded", message=RUN), pod(1), pod(2)], {}),
        "deadline-exceeded": (
            running,
            group(),
            {"job": spec(runPolicy={"activeDeadlineSeconds": 1}), "at": 99},
        ),
        "worker-failures": (running, [pod(0), pod(1, "Failed", exit_code=2), pod(2)], {}),
        "old-pods-leaving": (dict(running, restarts=1, phase="Restarting"), group(), {}),
        "template-invalid": (pending, [], {"template_error": TEMPLATE_ERROR}),
        "create-missing": (None, [], {}),
        "all-running": (pending, group(), {}),
        "restart-backoff": (
            dict(
                running,
                restarts=1,
                phase="Restarting",
                nextRestartTime=format_time(T0 + timedelta(seconds=60)),
            ),
            [],
            {},
        ),
        "container-error": (pending, [pod(0), pod(1), pod(2, "Pending", container_error=BAD_IMAGE)], {}),
        "startup-timeout": (
            dict(pending, stalledSince=format_time(T0)),
            [pod(0), pod(1), pod(2, "Pending", unschedulable=True)],
            {"at": 10_000},
        ),
        "workers-pending": (pending, group(phase="Pending"), {}),
    }


NEVER_DECIDE = {"mark-created", "mark-template", "stall-clocks"}
BAD_IMAGE = ("InvalidImageName", "container trainer: InvalidImageName: bad")


@pytest.mark.parametrize("name", [name for name, _ in RULES if name not in NEVER_DECIDE])
def test_each_rule_decides_its_case(name):
    previous, pods, options = _rule_cases()[name]
    at, job, refused = options.get("at", 5), options.get("job") or spec(), options.get("refused")
    d = decide(META, job, pods, service_exists=True, now=T0 + timedelta(seconds=at), previous=previous,
               refused=refused, creation_refused=options.get("creation_refused"),
               template_error=options.get("template_error"))  # fmt: skip
    assert d.rule == name


def test_every_rule_has_a_case():
    assert {name for name, _ in RULES} - NEVER_DECIDE == set(_rule_cases())


EVICTED = "EvictionByEvictionAPI: Eviction API: evicting"


def test_a_disruption_restarts_the_group_at_once_without_spending_the_backoff_limit():
    job = spec(runPolicy={"backoffLimit": 0})
    status = running_status()
    for n in range(1, 4):  # evicted again and again: never fails the job
        pods = [pod(i, restart=n - 1) for i in range(3)]
        pods[1] = pod(1, restart=n - 1, deleting=True, disruption=EVICTED)
        d = step(status, pods, at=60 * n, job=job)
        assert d.status["phase"] == "Restarting"
        assert d.status["restarts"] == d.status["disruptions"] == n
        assert d.status["nextRestartTime"] is None, "a disruption restarts without back-off"
        assert conditions(d)["Restarting"] == ("True", "Disrupted")
        assert f"mnist-worker-1 was disrupted ({EVICTED})" in d.events[0].message
        recreate = step(d.status, [], at=60 * n + 1, job=job)
        assert recreate.actions == (CreatePods((0, 1, 2), n),)
        status = step(recreate.status, [pod(i, restart=n) for i in range(3)], at=60 * n + 2, job=job).status
    # A real failure still fails a job with backoffLimit 0.
    failed = [pod(0, restart=3), pod(1, "Failed", restart=3, exit_code=75), pod(2, restart=3)]
    d = step(status, failed, at=999, job=job)
    assert conditions(d)["Failed"] == ("True", "BackoffLimitExceeded")
    assert "restarted 0 times for failures" in d.events[0].message


def test_a_disrupted_worker_gone_before_it_was_seen_restarts_the_group_for_free():
    job = spec(runPolicy={"backoffLimit": 0})
    gone = [pod(0), pod(2)]  # worker 1 was evicted and deleted between two looks
    lost = step(running_status(), gone, at=60, job=job)
    assert conditions(lost)["Failed"] == ("True", "BackoffLimitExceeded"), "a worker deleted by someone"
    d = step(
        running_status(),
        gone,
        at=60,
        job=job,
        disrupted={(0, 1): EVICTED, (0, 2): "of no matter: worker 2 is there"},
    )
    assert d.status["phase"] == "Restarting" and d.status["disruptions"] == 1
    assert f"mnist-worker-1 was disrupted ({EVICTED})" in d.events[0].message
    # The disruption of another group says nothing about this one.
    earlier_group = step(running_status(), gone, at=60, job=job, disrupted={(1, 1): EVICTED})
    assert conditions(earlier_group)["Failed"] == ("True", "BackoffLimitExceeded")


def test_peers_failing_after_a_disruption_do_not_make_it_a_counted_restart():
    job = spec(runPolicy={"backoffLimit": 0})
    pods = [
        pod(0, "Failed", exit_code=75, message="peer lost"),
        pod(1, "Failed", exit_code=143, disruption="PreemptionByScheduler: preempted"),
        pod(2),
    ]
    d = step(running_status(), pods, at=60, job=job)
    assert d.status["phase"] == "Restarting" and d.status["disruptions"] == 1
    # Even a permanent-looking exit of the disrupted worker itself: it was told to go.
    disrupted_with_exit_1 = [pod(0), pod(1, "Failed", exit_code=1, disruption=EVICTED), pod(2)]
    assert step(running_status(), disrupted_with_exit_1, at=60, job=job).status["phase"] == "Restarting"


@pytest.mark.parametrize(("counted", "seconds"), [(1, 10), (2, 20), (3, 40), (5, 160), (6, 300), (30, 300)])
def test_counted_restarts_back_off_exponentially_up_to_5_minutes(counted, seconds):
    job = spec(runPolicy={"backoffLimit": 100})
    # Two earlier restarts were disruptions: they do not make the back-off longer.
    status = dict(running_status(), restarts=counted - 1 + 2, disruptions=2)
    r = counted + 1
    d = step(
        status,
        [pod(0, restart=r), pod(1, "Failed", restart=r, exit_code=75), pod(2, restart=r)],
        at=5,
        job=job,
    )
    assert d.status["nextRestartTime"] == format_time(T0 + timedelta(seconds=5 + seconds))
    assert f"after a {seconds}s back-off" in d.events[0].message


def test_the_chiefs_trainer_exit_0_succeeds_while_a_sidecar_keeps_the_pod_running():
    pods = [
        pod(0, "Running", exit_code=0, message=RUN, sidecars_running=True),
        pod(1, "Running", exit_code=0, sidecars_running=True),
        pod(2, "Running"),
    ]
    d = step(running_status(), pods, at=60)
    assert d.status["phase"] == "Succeeded" and d.status["mlflow"]["runId"] == "r123"
    # cleanPodPolicy Running: every pod still running (the sidecars) is removed.
    assert d.actions == (DeletePods(("mnist-worker-0", "mnist-worker-1", "mnist-worker-2")),)
    assert d.status["replicaStatuses"] == {"active": 1, "ready": 0, "succeeded": 2, "failed": 0}


def test_a_sidecar_failing_after_the_trainer_succeeded_does_not_fail_the_job():
    # The pod is Failed (a sidecar exited 1 after the trainer exited 0): the trainer's exit decides.
    chief = pod(0, "Failed", exit_code=0, message=RUN)
    d = step(running_status(), [chief, pod(1, "Failed", exit_code=0), pod(2, "Succeeded")], at=60)
    assert d.status["phase"] == "Succeeded"
    # A worker whose sidecar failed after its trainer exited 0 is not a failed worker either.
    d = step(running_status(), [pod(0), pod(1, "Failed", exit_code=0), pod(2)], at=60)
    assert d.status["phase"] == "Running" and d.actions == ()


def test_a_trainer_that_failed_while_a_sidecar_keeps_the_pod_running_is_a_failure():
    d = step(running_status(), [pod(0), pod(1, "Running", exit_code=2, message="bad"), pod(2)], at=60)
    assert conditions(d)["Failed"] == ("True", "WorkerFailed")


def test_worker_pod_reads_disruptions_gates_container_errors_and_sidecars():
    api_pod = {
        "metadata": {"name": "mnist-worker-0", "labels": {"mwms.dev/replica-index": "0"}},
        "status": {
            "phase": "Running",
            "conditions": [
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "EvictionByEvictionAPI",
                    "message": "Eviction API: evicting",
                },
            ],  # fmt: skip
            "initContainerStatuses": [
                {"name": "proxy", "restartPolicy": "Always", "state": {"running": {}}},
            ],
            "containerStatuses": [{"name": "trainer", "state": {"terminated": {"exitCode": 0}}}],
        },
    }
    parsed = worker_pod(api_pod)
    assert parsed.disruption == EVICTED and parsed.trainer_exit == 0 and not parsed.failed
    kueue = {
        "metadata": {"name": "k", "labels": {"mwms.dev/replica-index": "1"}},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "TerminationTarget", "status": "True", "reason": "WorkloadEvicted",
                            "message": "Preempted to accommodate a workload"}],
        },
    }  # fmt: skip
    assert worker_pod(kueue).disruption == "WorkloadEvicted: Preempted to accommodate a workload"
    gated = {
        "metadata": {"name": "g", "labels": {"mwms.dev/replica-index": "1"}},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}],
        },
    }
    assert not worker_pod(gated).unschedulable
    pulling = {
        "metadata": {"name": "p", "labels": {"mwms.dev/replica-index": "1"}},
        "status": {
            "phase": "Pending",
            "initContainerStatuses": [
                {"name": "proxy", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "no such"}}}
            ],
            "containerStatuses": [{"name": "trainer", "state": {"waiting": {"reason": "PodInitializing"}}}],
        },
    }
    assert worker_pod(pulling).container_error == (
        "ImagePullBackOff",
        "container proxy: ImagePullBackOff: no such",
    )


def test_a_chief_whose_trainer_exited_is_kept_while_its_pod_phase_catches_up():
    """The trainer has exited 0 and no sidecar runs: the kubelet is about to mark the pod Succeeded.
    cleanPodPolicy Running removes the workers still running, not the chief (its logs stay readable)."""
    pods = [pod(0, "Running", exit_code=0, message=RUN), pod(1, "Running", exit_code=0), pod(2, "Running")]
    d = step(running_status(), pods, at=60)
    assert d.status["phase"] == "Succeeded"
    assert d.actions == (DeletePods(("mnist-worker-2",)),)


def test_worker_pod_sees_a_sidecar_still_running():
    def api_pod(*containers):
        return {
            "metadata": {"name": "mnist-worker-0", "labels": {"mwms.dev/replica-index": "0"}},
            "status": {"phase": "Running", "containerStatuses": list(containers)},
        }

    done = {"name": "trainer", "state": {"terminated": {"exitCode": 0}}}
    proxy = {"name": "istio-proxy", "state": {"running": {}}}
    assert worker_pod(api_pod(done, proxy)).sidecars_running
    assert worker_pod(api_pod(done, proxy)).finishing is False
    assert worker_pod(api_pod(done)).finishing
    assert not worker_pod(api_pod({"name": "trainer", "state": {"running": {}}})).finishing
