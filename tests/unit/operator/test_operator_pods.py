"""Observing pods: each API pod as a WorkerPod, its events, and which pods the startup clock asks about."""

import dataclasses
from datetime import timedelta

from mwms_contract.status import format_time
from mwms_kit.decisions import EVICTED, T0, pod, unjoined
from mwms_operator.decide.start import startup_unexplained, why_not_joined
from mwms_operator.observe.pod_states import PodEvents, WorkerPod, pod_events, worker_pod
from mwms_operator.render.labels import deletion_selector
from mwms_operator.render.pod import READINESS_PROBE


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


def test_a_worker_with_its_own_probe_is_said_to_wait_for_that_probe():
    """The startup clock's message for a `trainer` that does not run mwms_trainer names what it waits for."""
    body = {
        "metadata": {"name": "mnist-worker-1", "labels": {"mwms.dev/replica-index": "1"}},
        "spec": {"containers": [{"name": "trainer", "readinessProbe": {"httpGet": {"path": "/ready"}}}]},
        "status": {
            "phase": "Running",
            "containerStatuses": [{"name": "trainer", "ready": False, "state": {"running": {}}}],
        },
    }
    own = worker_pod(body)
    assert own.own_probe and not own.joined
    assert why_not_joined(own) == (
        "waiting for the trainer container's own readinessProbe (it does not run mwms_trainer)"
    )
    told = dataclasses.replace(own, events=PodEvents(note="Unhealthy: Readiness probe failed: HTTP 503"))
    assert why_not_joined(told).endswith("mwms_trainer): Unhealthy: Readiness probe failed: HTTP 503")
    # The rendezvous probe (as the API server returns it, with its defaults filled in) is not "its own".
    probe = {**READINESS_PROBE, "successThreshold": 1, "failureThreshold": 3}
    body["spec"]["containers"][0]["readinessProbe"] = probe
    ours = worker_pod(body)
    assert not ours.own_probe and why_not_joined(ours) == "no reason given yet"


def test_worker_pod_reads_the_api_objects():
    api_pod = {
        "metadata": {
            "name": "mnist-worker-1",
            "labels": {"mwms.dev/replica-index": "1", "mwms.dev/restart": "2", "mwms.dev/job-uid": "u"},
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
        "mnist-worker-1", 1, 2, "Failed", exit_code=75, message="peer lost", reason="Error", job_uid="u"
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


def test_a_scheduled_pod_none_of_whose_containers_has_run_is_creating():
    """What the kubelet shows while a Secret volume does not mount: scheduled, every container waiting."""
    waiting = {"name": "trainer", "state": {"waiting": {"reason": "ContainerCreating"}}}
    body = {
        "metadata": {"name": "mnist-worker-0", "labels": {"mwms.dev/replica-index": "0"}},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [waiting],
        },
    }
    assert worker_pod(body).creating and worker_pod(body).not_starting
    init = {"name": "fetch", "state": {"running": {}}}
    assert not worker_pod({**body, "status": {**body["status"], "initContainerStatuses": [init]}}).creating
    gated = [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]
    assert not worker_pod({**body, "status": {**body["status"], "conditions": gated}}).creating
    pulling = WorkerPod("p", 0, 0, "Pending", creating=True, events=PodEvents(pulling=True))
    assert not pulling.not_starting, "an image pull is not counted"


def test_a_jobs_doomed_pods_are_selected_by_its_uid_their_groups_and_indices():
    """One deletecollection: the job's uid label (no other job's pod, not even one of a job created again
    under its name), the doomed pods' groups and indices; a pod that ends meanwhile is spared where all the
    doomed were active (cleanPodPolicy Running), not where a failed one goes too (a restart)."""
    ours = {"job_uid": "u-1"}
    finishing = pod(0, exit_code=0, **ours)  # the chief's trainer has exited 0: the kubelet ends its pod
    pods = [finishing, pod(1, **ours), pod(2, "Pending", **ours), pod(3, "Succeeded", **ours)]
    labels = "mwms.dev/job-uid=u-1,mwms.dev/restart in (0),mwms.dev/replica-index in (1,2)"
    spare = "status.phase!=Succeeded,status.phase!=Failed"
    assert deletion_selector("u-1", pods, ("mnist-worker-1", "mnist-worker-2")) == (labels, spare)
    restart = [pod(0, "Failed", restart=1, **ours), pod(1, restart=1, **ours)]
    whole = "mwms.dev/job-uid=u-1,mwms.dev/restart in (1),mwms.dev/replica-index in (0,1)"
    assert deletion_selector("u-1", restart, ("mnist-worker-0", "mnist-worker-1")) == (whole, "")
    assert deletion_selector("u-1", pods, ()) is None
    older = [pod(1), pod(2, **ours)]  # made by an operator before the uid label: deleted one by one
    assert deletion_selector("u-1", older, ("mnist-worker-1", "mnist-worker-2")) is None
    assert deletion_selector("u-1", older, ("mnist-worker-2",)) is not None
