"""The policy while a group starts: the startup clock, its timeout, and containers that cannot start."""

from datetime import timedelta

import pytest

from mwms_contract.status import format_time
from mwms_contract.trainjob import DEFAULT_CONTAINER_ERROR_GRACE_SECONDS as GRACE
from mwms_kit.decisions import NOT_RESOLVING, T0, conditions, group, pod, spec, step, unjoined
from mwms_operator.decide.job_status import DeletePods, KeepPostmortem, next_due
from mwms_operator.decide.start import events_wanted
from mwms_operator.observe.pod_states import UNREADABLE, PodEvents

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
    assert d.actions == (
        KeepPostmortem(0),
        DeletePods(("mnist-worker-0", "mnist-worker-1", "mnist-worker-2")),
    )
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
    assert d.actions == (KeepPostmortem(0), DeletePods(("mnist-worker-0", "mnist-worker-1")))


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
    assert next_due(spec(), d.status) == T0 + timedelta(seconds=5 + GRACE)
    healed = step(d.status, group(), at=6)
    assert healed.status["phase"] == "Running" and healed.status["containerErrorSince"] is None
    late = step(d.status, pods, at=5 + GRACE)
    assert conditions(late)["Failed"] == ("True", "ContainerError")
    assert "worker mnist-worker-0 cannot start: container trainer: " + reason in late.events[0].message


def test_a_container_error_grace_of_zero_fails_the_job_at_the_first_error():
    job = spec(runPolicy={"containerErrorGraceSeconds": 0})
    first = step(None, [], job=job, service=False)
    error = ("ErrImagePull", "container trainer: ErrImagePull: not found")
    d = step(first.status, [pod(0, "Pending", container_error=error), pod(1), pod(2)], at=5, job=job)
    assert conditions(d)["Failed"] == ("True", "ContainerError")


@pytest.mark.parametrize("grace", [15, 900])
def test_the_jobs_container_error_grace_decides_when_a_lasting_error_fails_it(grace):
    job = spec(runPolicy={"containerErrorGraceSeconds": grace})
    first = step(None, [], job=job, service=False)
    error = ("ImagePullBackOff", "container trainer: ImagePullBackOff: Back-off pulling image")
    pods = [pod(0, "Pending", container_error=error), pod(1, "Pending"), pod(2, "Pending")]
    d = step(first.status, pods, at=5, job=job)
    assert next_due(job, d.status) == T0 + timedelta(seconds=5 + grace)
    assert step(d.status, pods, at=5 + grace - 1, job=job).status["phase"] == "Pending"
    late = step(d.status, pods, at=5 + grace, job=job)
    assert conditions(late)["Failed"] == ("True", "ContainerError")


MOUNT = 'FailedMount: MountVolume.SetUp failed for volume "creds" : secret "creds" not found'


def creating(i, events=None):
    """Scheduled, nothing of it has run: the kubelet mounts its volumes, makes its sandbox or pulls."""
    return pod(i, "Pending", waiting="ContainerCreating", creating=True, events=events)


@pytest.mark.parametrize("peers", [[], [0]], ids=["no-worker-started", "a-peer-runs"])
def test_a_scheduled_pod_that_does_not_start_fails_the_job_after_the_grace_naming_the_kubelets_reason(peers):
    job = spec(replicas=2, runPolicy={"containerErrorGraceSeconds": 10, "startupTimeoutSeconds": 300})
    first = step(None, [], job=job, service=False)
    others = [pod(i) for i in peers] or [creating(0, PodEvents(pulling=True))]  # a large image
    d = step(first.status, [*others, creating(1)], at=5, job=job)
    assert d.status["containerErrorSince"] == format_time(T0 + timedelta(seconds=5))
    assert next_due(job, d.status) == T0 + timedelta(seconds=15)
    # Due, but its events were not looked up (it may pull a large image): the job is not judged blind.
    assert "Failed" not in conditions(step(d.status, [*others, creating(1)], at=15, job=job))
    late = step(d.status, [*others, creating(1, PodEvents(note=MOUNT))], at=15, job=job)
    assert conditions(late)["Failed"] == ("True", "ContainerError")
    assert late.events[-1].message == (
        "worker mnist-worker-1 has not started 10s after it was scheduled "
        f"(spec.runPolicy.containerErrorGraceSeconds): ContainerCreating; {MOUNT}"
    )


def test_a_pod_whose_pull_failed_ends_the_job_saying_it_cannot_pull_its_image():
    # The kubelet's event comes a moment before the container's ErrImagePull: the grace may end between.
    job = spec(replicas=1, runPolicy={"containerErrorGraceSeconds": 10})
    first = step(None, [], job=job, service=False)
    d = step(first.status, [creating(0)], at=5, job=job)
    note = 'Failed: Failed to pull image "r/mwms-trainer:1": 401 Unauthorized'
    late = step(d.status, [creating(0, PodEvents(note=note, pull_failed=True))], at=15, job=job)
    assert conditions(late)["Failed"] == ("True", "ContainerError")
    assert late.events[-1].message == (
        "worker mnist-worker-0 cannot pull its image (10s after it was scheduled, "
        f"spec.runPolicy.containerErrorGraceSeconds): {note}"
    )


def test_a_pod_pulling_its_image_is_not_counted_and_its_pull_restarts_the_grace():
    job = spec(replicas=1, runPolicy={"containerErrorGraceSeconds": 10})
    first = step(None, [], job=job, service=False)
    d = step(first.status, [creating(0)], at=5, job=job)
    pulling = step(d.status, [creating(0, PodEvents(pulling=True))], at=15, job=job)
    assert pulling.status["phase"] == "Pending" and pulling.status["containerErrorSince"] is None
    d = step(pulling.status, [creating(0)], at=200, job=job)
    assert d.status["containerErrorSince"] == format_time(T0 + timedelta(seconds=200))
    # The pull ended just now: its container is still to be made.
    pulled = creating(0, PodEvents(pulled_at=T0 + timedelta(seconds=209)))
    d = step(d.status, [pulled], at=210, job=job)
    assert d.status["phase"] == "Pending" and next_due(job, d.status) == T0 + timedelta(seconds=219)


@pytest.mark.parametrize(
    "waiting",
    [
        pod(0, "Pending", waiting=UNSCHEDULABLE, unschedulable=True),
        pod(0, "Pending", waiting="SchedulingGated: gated by kueue"),
    ],
    ids=["unschedulable", "gated"],
)
def test_pods_waiting_to_be_scheduled_or_admitted_cost_nothing(waiting):
    job = spec(replicas=1, runPolicy={"containerErrorGraceSeconds": 10})
    first = step(None, [], job=job, service=False)
    d = step(first.status, [waiting], at=10_000, job=job)
    assert d.status["phase"] == "Pending" and d.status["containerErrorSince"] is None
    assert next_due(job, d.status) is None


def test_without_the_right_to_read_events_the_grace_still_ends_the_job_and_says_what_to_grant():
    job = spec(replicas=2, runPolicy={"containerErrorGraceSeconds": 10})
    first = step(None, [], job=job, service=False)
    d = step(first.status, [pod(0), creating(1, UNREADABLE)], at=5, job=job)
    assert d.status["containerErrorSince"] == format_time(T0 + timedelta(seconds=5))
    late = step(d.status, [pod(0), creating(1, UNREADABLE)], at=15, job=job)
    assert conditions(late)["Failed"] == ("True", "ContainerError")
    message = late.events[-1].message
    assert message.startswith("worker mnist-worker-1 has not started 10s after it was scheduled"), message
    assert (
        "the kubelet's reason could not be read: the operator may not list events in namespace team-a; "
        in (message)
    )
    assert "an RBAC rule granting `list` on `events` there would name it" in message, message


def test_a_pod_whose_events_lookups_keep_failing_ends_the_job_after_the_grace_naming_the_lookups_error():
    job = spec(replicas=2, runPolicy={"containerErrorGraceSeconds": 10})
    unread = PodEvents(readable=False, error="(500) etcdserver: request timed out")
    first = step(None, [], job=job, service=False)
    d = step(first.status, [pod(0), creating(1, unread)], at=5, job=job)
    late = step(d.status, [pod(0), creating(1, unread)], at=15, job=job)
    assert conditions(late)["Failed"] == ("True", "ContainerError")
    message = late.events[-1].message
    assert message.endswith(
        "the kubelet's reason could not be read: listing events in namespace team-a failed: "
        "(500) etcdserver: request timed out"
    ), message


def test_the_grace_looks_up_events_of_the_pods_that_have_not_started_only_once_it_is_over():
    job = spec(replicas=3, runPolicy={"containerErrorGraceSeconds": 10})
    pods = [
        creating(0),
        pod(1, "Pending", waiting=UNSCHEDULABLE, unschedulable=True),
        pod(2, "Pending", waiting="SchedulingGated: gated"),
    ]
    previous = {"phase": "Pending", "restarts": 0, "containerErrorSince": format_time(T0)}
    assert events_wanted(job, pods, previous, T0 + timedelta(seconds=9)) == []
    assert events_wanted(job, pods, previous, T0 + timedelta(seconds=10)) == [pods[0]]
    assert events_wanted(job, pods, dict(previous, phase="Failed"), T0 + timedelta(seconds=10)) == []
    assert events_wanted(job, pods, dict(previous, containerErrorSince=None), T0 + timedelta(days=1)) == []
