"""TrainJobs carry no finalizer, so deleting a job, its namespace or the CRD never waits for the operator;
a job made by an earlier version (with kopf's finalizer) loses it when the operator starts; a pod stuck
Terminating is named in the status instead of a silent wait; the jobs of a namespace being deleted are left
alone. On the real API server; outcomes only (the times: `python -m mwms_bench operator --peer`)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mwms_kit.waits import condition, get_job

REPO = Path(__file__).resolve().parents[3]


LEGACY_FINALIZER = "mwms.dev/kopf-finalizer"
HOLD = "mwms.dev/test-hold"


def finalizers(kubectl, namespace, name):
    return kubectl.json("get", "trainjob", name, "-n", namespace)["metadata"].get("finalizers", [])


def phase(kubectl, namespace, name):
    return kubectl.json("get", "trainjob", name, "-n", namespace).get("status", {}).get("phase")


def test_a_running_job_has_no_finalizer_and_a_delete_right_after_create_completes(
    operator, make_standin, kubectl, namespace, wait_for
):
    kubectl.apply(make_standin("plain", 2, env={"STANDIN_SLEEP_SECONDS": "600"}), "-n", namespace)
    wait_for(lambda: phase(kubectl, namespace, "plain") == "Running", timeout=120, what="plain running")
    assert finalizers(kubectl, namespace, "plain") == []

    # Created and deleted at once, while the operator is busy creating its pods: nothing holds it.
    kubectl.apply(make_standin("blink", 2), "-n", namespace)
    kubectl("delete", "trainjob", "blink", "-n", namespace, "--wait=true", "--timeout=20s", timeout=30)
    assert kubectl("get", "trainjob", "blink", "-n", namespace, check=False).returncode != 0


def test_a_job_from_an_earlier_version_loses_the_old_finalizer_when_the_operator_starts(
    operator, make_standin, kubectl, namespace, wait_for
):
    operator.stop()
    try:
        old = make_standin("old", 1)
        old["metadata"]["finalizers"] = [LEGACY_FINALIZER]
        kubectl.apply(old, "-n", namespace)
        assert finalizers(kubectl, namespace, "old") == [LEGACY_FINALIZER]
    finally:
        operator.start()
    wait_for(
        lambda: finalizers(kubectl, namespace, "old") == [], timeout=60, what="the old finalizer removed"
    )
    wait_for(lambda: phase(kubectl, namespace, "old") == "Succeeded", timeout=120, what="old job succeeded")
    assert finalizers(kubectl, namespace, "old") == []


def test_a_worker_stuck_terminating_is_named_while_the_new_group_waits(
    operator, make_standin, kubectl, namespace, wait_for
):
    kubectl.apply(make_standin("stuck", 2, env={"STANDIN_SLEEP_SECONDS": "600"}), "-n", namespace)
    wait_for(lambda: phase(kubectl, namespace, "stuck") == "Running", timeout=120, what="stuck running")
    # A finalizer nobody removes: the pod stays Terminating, as on a lost node.
    kubectl("patch", "pod", "stuck-worker-1", "-n", namespace, "--type=merge", "-p",
            json.dumps({"metadata": {"finalizers": [HOLD]}}))  # fmt: skip
    kubectl("delete", "pod", "stuck-worker-1", "-n", namespace, "--wait=false")

    def waiting_condition():
        running = condition(get_job(kubectl, namespace, "stuck"), "Running")
        return running if running is not None and running.reason == "WaitingForOldPods" else None

    running = wait_for(waiting_condition, timeout=60, what="reason WaitingForOldPods")
    assert "stuck-worker-1" in running.message
    assert kubectl.json("get", "trainjob", "stuck", "-n", namespace)["status"]["restarts"] == 1
    pods = kubectl.json("get", "pods", "-n", namespace, "-l", "mwms.dev/job-name=stuck")["items"]
    assert {p["metadata"]["labels"]["mwms.dev/restart"] for p in pods} == {"0"}, "a new group beside the old"

    kubectl("patch", "pod", "stuck-worker-1", "-n", namespace, "--type=json", "-p",
            json.dumps([{"op": "remove", "path": "/metadata/finalizers"}]))  # fmt: skip

    def new_group():
        pods = kubectl.json("get", "pods", "-n", namespace, "-l", "mwms.dev/job-name=stuck")["items"]
        restarts = {p["metadata"]["labels"]["mwms.dev/restart"] for p in pods}
        return len(pods) == 2 and restarts == {"1"}

    wait_for(new_group, timeout=120, what="the new group created once the old pod is gone")
    wait_for(lambda: phase(kubectl, namespace, "stuck") == "Running", timeout=120, what="running again")


# Deleting the CRD deletes every TrainJob in the cluster: under `make test` this runs alone, after the tier's
# shards (mwms_kit/shards.py).
@pytest.mark.exclusive
def test_the_crd_deletes_with_jobs_present_while_the_operator_is_stopped(
    operator, make_standin, kubectl, namespace, wait_for
):
    kubectl.apply([make_standin(f"left-{i}", 1, env={"STANDIN_SLEEP_SECONDS": "600"}) for i in range(3)],
                  "-n", namespace)  # fmt: skip
    wait_for(lambda: phase(kubectl, namespace, "left-0") == "Running", timeout=120, what="left-0 running")
    operator.stop()
    try:
        kubectl("delete", "crd", "trainjobs.mwms.dev", "--wait=true", "--timeout=60s", timeout=90)
        assert kubectl("get", "crd", "trainjobs.mwms.dev", check=False).returncode != 0
    finally:
        # Put the CRD back for the tests after this one, and the operator as the fixture left it.
        kubectl("apply", "-f", str(REPO / "manifests" / "crd.yaml"))
        wait_for(
            lambda: kubectl("get", "trainjobs", "-A", check=False).returncode == 0,
            timeout=60,
            what="the TrainJob resource served again",
        )
        operator.start()


def creates_sent(operator) -> float:
    """Pod and Service creates the operator has sent, by its own metric (answered or not)."""
    text = operator.metrics_text()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "mwms_api_requests_total"
        and sample.labels["verb"] == "create"
        and sample.labels["resource"] in ("pods", "services")
    )


def test_the_jobs_of_a_namespace_being_deleted_are_left_alone(
    operator, make_standin, kubectl, namespace, wait_for
):
    """The namespace controller deletes a job's pods before the job: that is no lost group to recreate. One
    refused create says the namespace is ending; after that nothing is sent for its jobs (before, every job
    tried again on every event and resync, each try refused, slowing the namespace's deletion)."""
    names = [f"ending-{i}" for i in range(3)]
    jobs = [make_standin(name, 2, env={"STANDIN_SLEEP_SECONDS": "600"}) for name in names]
    for job in jobs:
        job["metadata"]["finalizers"] = [HOLD]  # the namespace stays Terminating with its jobs in it
    kubectl.apply(jobs, "-n", namespace)
    try:
        for name in names:
            wait_for(
                lambda n=name: phase(kubectl, namespace, n) == "Running", timeout=120, what=f"{name} running"
            )
        kubectl("delete", "namespace", namespace, "--wait=false")
        wait_for(
            lambda: not kubectl.json("get", "pods", "-n", namespace)["items"],
            timeout=120,
            what="the pods deleted with their namespace",
        )
        wait_for(
            lambda: f"namespace {namespace} is being deleted" in operator.log(),
            timeout=30,
            what="the operator noticing the namespace is being deleted",
        )
        sent = creates_sent(operator)
        statuses = [kubectl.json("get", "trainjob", name, "-n", namespace)["status"] for name in names]
        time.sleep(3)  # three resyncs here (MWMS_RECONCILE_INTERVAL_SECONDS=1), each a chance to try again
        assert creates_sent(operator) == sent
        assert [
            kubectl.json("get", "trainjob", name, "-n", namespace)["status"] for name in names
        ] == statuses
    finally:
        for name in names:
            kubectl("patch", "trainjob", name, "-n", namespace, "--type=json", "-p",
                    json.dumps([{"op": "remove", "path": "/metadata/finalizers"}]), check=False)  # fmt: skip
