"""How the operator reads what happened to its workers, on the real control plane: disruptions (the Eviction
API) restart the group without spending backoffLimit, counted restarts after the first back off, the startup
timeout counts only while a partly started group is stuck, and a container that cannot start fails the job
at once.
Nothing here asserts on timings: only on status fields, events and API timestamps."""

from __future__ import annotations

import json
import time

from mwms_kit.waits import condition, events_of, get_job, pods_of, wait_condition


def evict(kubectl, namespace: str, pod: str) -> None:
    """POST a policy/v1 Eviction to the pod's eviction subresource, as `kubectl drain` does."""
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": namespace},
    }
    kubectl(
        "create", "--raw", f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction", "-f", "-",
        input=json.dumps(eviction),
    )  # fmt: skip


def test_an_evicted_worker_restarts_the_group_without_spending_backoff(
    operator, make_standin, kubectl, namespace, wait_for
):
    # The first group would run for 10 minutes; the restarted one finishes at once.
    job = make_standin(
        "evicted",
        2,
        env={"STANDIN_SLEEP_SECONDS": "600", "STANDIN_SLEEP_IN_RESTART": "0"},
        runPolicy={"backoffLimit": 0},
    )
    kubectl.apply(job, "-n", namespace)
    wait_condition(kubectl, namespace, "evicted", "Running")
    evict(kubectl, namespace, "evicted-worker-1")
    done = wait_condition(kubectl, namespace, "evicted", "Succeeded")
    status = done["status"]
    assert status["restarts"] == 1 and status["disruptions"] == 1
    assert "nextRestartTime" not in status
    disrupted = [m for _, r, m in events_of(kubectl, namespace, "evicted") if r == "Disrupted"]
    assert disrupted and "evicted-worker-1 was disrupted (EvictionByEvictionAPI" in disrupted[0]
    assert "not counted against spec.runPolicy.backoffLimit" in disrupted[0]


def test_the_first_counted_restart_is_immediate_and_the_second_waits_for_its_back_off(
    operator, make_standin, kubectl, namespace
):
    # Worker 1 exits 75 in the first two groups: two counted restarts, the third group succeeds.
    env = {"STANDIN_FAIL_INDEX": "1", "STANDIN_EXIT_CODE": "75", "STANDIN_FAIL_IN_RESTARTS": "0,1"}
    job = make_standin("patient", 2, env=env, runPolicy={"cleanPodPolicy": "None"})
    kubectl.apply(job, "-n", namespace)
    done = wait_condition(kubectl, namespace, "patient", "Succeeded")
    assert done["status"]["restarts"] == 2 and done["status"]["disruptions"] == 0
    assert "nextRestartTime" not in done["status"]
    restarting = [m for _, r, m in events_of(kubectl, namespace, "patient") if r == "GroupRestarting"]
    first, second = (next(m for m in restarting if f"(restart {n} of at most 3)" in m) for n in (1, 2))
    assert "restarting all 2 workers now (restart 1 of at most 3)" in first
    assert "after a 10s back-off (restart 2 of at most 3)" in second
    due = second.split(" at ")[1].split(" after")[0]  # "... restarting all 2 workers at <time> after ..."
    # The third group was created no earlier than the announced restart time (API timestamps, whole seconds).
    created = [p["metadata"]["creationTimestamp"] for p in pods_of(kubectl, namespace, "patient")]
    assert len(created) == 2 and all(c >= due for c in created), (created, due)


def test_a_whole_group_waiting_for_the_scheduler_does_not_time_out(
    operator, make_standin, kubectl, namespace
):
    job = make_standin(
        "greedy",
        2,
        runPolicy={"startupTimeoutSeconds": 3},
        container={"resources": {"requests": {"cpu": "64"}}},
    )
    kubectl.apply(job, "-n", namespace)
    pending = wait_condition(kubectl, namespace, "greedy", "Created")
    time.sleep(8)  # well past startupTimeoutSeconds: nothing holds a node, so nothing is stuck
    job_now = get_job(kubectl, namespace, "greedy")
    assert job_now["status"]["phase"] == "Pending", job_now["status"]
    assert "stalledSince" not in job_now["status"]
    waiting = condition(job_now, "Running")
    assert waiting.reason == "WorkersPending" and "Insufficient cpu" in waiting.message
    assert pending["metadata"]["uid"] == job_now["metadata"]["uid"]


def test_a_gated_group_waits_past_the_startup_timeout_then_runs(
    operator, make_standin, kubectl, namespace, wait_for
):
    job = make_standin(
        "gated",
        2,
        # Long enough for the ungated group to start and join (Ready: the readiness probe runs every 5 s),
        # also on a node busy with the other shard's pods and the tf tier (15 s was not, once).
        runPolicy={"startupTimeoutSeconds": 30},
        template={"spec": {"schedulingGates": [{"name": "example.com/hold"}]}},
    )
    kubectl.apply(job, "-n", namespace)
    wait_condition(kubectl, namespace, "gated", "Created")
    time.sleep(33)  # past startupTimeoutSeconds while gated (a queue such as Kueue holding the group)
    assert get_job(kubectl, namespace, "gated")["status"]["phase"] == "Pending"
    for pod in pods_of(kubectl, namespace, "gated"):
        kubectl("patch", "pod", pod["metadata"]["name"], "-n", namespace, "--type=json",
                "-p", '[{"op": "remove", "path": "/spec/schedulingGates"}]')  # fmt: skip
    done = wait_condition(kubectl, namespace, "gated", "Succeeded")
    assert done["status"]["restarts"] == 0


def test_a_partly_started_group_that_cannot_schedule_its_other_workers_times_out(
    operator, make_standin, kubectl, namespace
):
    # One worker asking for 60% of the node's CPUs fits, its peer cannot be scheduled while it runs.
    allocatable = kubectl.json("get", "node", "node-1")["status"]["allocatable"]["cpu"]
    millicores = int(allocatable[:-1]) if allocatable.endswith("m") else int(float(allocatable) * 1000)
    job = make_standin(
        "partial",
        2,
        runPolicy={"startupTimeoutSeconds": 5},
        container={"resources": {"requests": {"cpu": f"{millicores * 3 // 5}m"}}},
    )
    kubectl.apply(job, "-n", namespace)
    done = wait_condition(kubectl, namespace, "partial", "Failed")
    failed = condition(done, "Failed")
    assert failed.reason == "StartupTimeout", failed
    assert "some workers ran while others could not be scheduled for 5s" in failed.message
    assert "(Unschedulable" in failed.message and "Insufficient cpu" in failed.message


def test_an_invalid_image_name_fails_at_once_with_the_containers_message(
    operator, make_standin, kubectl, namespace
):
    job = make_standin(
        "badimage",
        2,
        runPolicy={"startupTimeoutSeconds": 3600},
        container={"image": "ghcr.io/MWMS/Trainer:1"},
    )
    kubectl.apply(job, "-n", namespace)
    done = wait_condition(kubectl, namespace, "badimage", "Failed")
    failed = condition(done, "Failed")
    assert failed.reason == "ContainerError", failed
    assert "cannot start: container trainer: InvalidImageName" in failed.message
    assert "ghcr.io/MWMS/Trainer:1" in failed.message
