"""TrainJobs on the real control plane: the operator (as its ServiceAccount) and stand-in workers in pods on
the real node. Short timeouts and intervals keep this tier quick; nothing here asserts on timings."""

from __future__ import annotations

import json
import re
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from mwms_contract.names import MLFLOW_TAG_JOB_UID
from mwms_kit.waits import condition, events_of, get_job, patch_spec, pods_of, wait_condition


def fail_once_trainjob(make_standin, name: str, replicas: int, marker_dir) -> dict:
    """Worker 1 exits 75 (retryable) in the first group only: a marker file on a hostPath shared by the
    groups says it already failed. cleanPodPolicy None keeps the pods to look at."""
    marker_dir.chmod(0o777)
    return make_standin(
        name,
        replicas,
        env={
            "STANDIN_FAIL_INDEX": "1",
            "STANDIN_EXIT_CODE": "75",
            "STANDIN_FAIL_ONCE_FILE": "/marker/failed",
        },
        runPolicy={"cleanPodPolicy": "None"},
        container={"volumeMounts": [{"name": "marker", "mountPath": "/marker"}]},
        template={
            "spec": {
                "volumes": [{"name": "marker", "hostPath": {"path": str(marker_dir), "type": "Directory"}}]
            },
        },
    )


def container_log(kubectl, namespace, pod):
    """The trainer container's output, through the API server and the kubelet, as users read it."""
    return kubectl("logs", pod, "-n", namespace, "-c", "trainer").stdout


def test_three_workers_succeed_with_the_chiefs_run(operator, make_standin, kubectl, namespace, wait_for):
    kubectl.apply(make_standin("three", 3, runPolicy={"cleanPodPolicy": "None"}), "-n", namespace)
    job = wait_condition(kubectl, namespace, "three", "Succeeded")
    status = job["status"]
    assert (
        status["phase"] == "Succeeded" and status["restarts"] == 0 and status["chiefPod"] == "three-worker-0"
    )
    assert status["completionTime"] and status["startTime"] and status["observedGeneration"] == 1
    assert condition(job, "Created").status == "True"

    # The chief's exit ends the job; the other workers may still run: read a log only once its pod ended.
    def all_ended() -> list[dict] | None:
        pods = pods_of(kubectl, namespace, "three")
        return pods if all(p["status"].get("phase") == "Succeeded" for p in pods) else None

    pods = wait_for(all_ended, timeout=120, what="every worker of 'three' to end")
    run_id = re.search(r"run id ([0-9a-f]{32})", container_log(kubectl, namespace, "three-worker-0")).group(1)
    assert status["mlflow"]["runId"] == run_id
    assert status["mlflow"]["modelUri"] == f"runs:/{run_id}/model"
    assert sorted(p["metadata"]["name"] for p in pods) == [f"three-worker-{i}" for i in range(3)]
    for pod in pods:
        index = pod["metadata"]["labels"]["mwms.dev/replica-index"]
        assert pod["metadata"]["labels"]["mwms.dev/role"] == ("chief" if index == "0" else "worker")
        assert pod["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
        assert pod["spec"]["hostname"] == f"three-worker-{index}" and pod["spec"]["subdomain"] == "three"
        assert pod["spec"]["restartPolicy"] == "Never"
        # Each worker reached every peer by the name in its TF_CONFIG (the stand-in checks and says so).
        assert "reached all 3 workers by name" in container_log(kubectl, namespace, pod["metadata"]["name"])
    service = kubectl.json("get", "service", "three", "-n", namespace)
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True

    printed = kubectl("get", "trainjob", "three", "-n", namespace).stdout
    assert run_id in printed and "Succeeded" in printed
    reasons = [reason for _, reason, _ in events_of(kubectl, namespace, "three")]
    assert "PodsCreated" in reasons and "ChiefSucceeded" in reasons

    metrics = operator.metrics_text()
    assert (
        f'mwms_trainjobs{{namespace="{namespace}",phase="Succeeded"}} 1.0' in metrics
        and "mwms_reconcile_duration_seconds_count" in metrics
    )
    health = urllib.request.urlopen(f"http://127.0.0.1:{operator.health_port}/healthz", timeout=10)
    assert health.status == 200


def test_a_retryable_exit_restarts_the_whole_group_once(operator, make_standin, kubectl, namespace, tmp_path):
    job = fail_once_trainjob(make_standin, "retry", 3, tmp_path)
    kubectl.apply(job, "-n", namespace)
    done = wait_condition(kubectl, namespace, "retry", "Succeeded")
    assert (tmp_path / "failed").exists()
    assert done["status"]["restarts"] == 1
    assert condition(done, "Restarting").status == "False"
    # The whole group was recreated, not only the worker that failed.
    pods = pods_of(kubectl, namespace, "retry")
    assert len(pods) == 3
    assert {p["metadata"]["labels"]["mwms.dev/restart"] for p in pods} == {"1"}
    for pod in pods:
        trainer = next(e for e in pod["spec"]["containers"][0]["env"] if e["name"] == "MWMS_RESTART_COUNT")
        assert trainer["value"] == "1"
    restarting = [m for t, r, m in events_of(kubectl, namespace, "retry") if r == "GroupRestarting"]
    assert restarting and "retry-worker-1 exited with code 75" in restarting[0]


def pods_deleted_together(operator) -> float:
    """deletecollections of pods the API server answered 200, by the operator's own metric."""
    text = operator.metrics_text()
    wanted = {"verb": "deletecollection", "resource": "pods", "code": "200"}
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "mwms_api_requests_total" and sample.labels == wanted
    )


def test_a_permanent_exit_fails_naming_the_worker(operator, make_standin, kubectl, namespace, wait_for):
    together = pods_deleted_together(operator)
    kubectl.apply(
        make_standin("bad", 3, env={"STANDIN_FAIL_INDEX": "1", "STANDIN_EXIT_CODE": "2"}), "-n", namespace
    )
    job = wait_condition(kubectl, namespace, "bad", "Failed")
    failed = condition(job, "Failed")
    assert failed.reason == "WorkerFailed"
    assert failed.message == "worker bad-worker-1 exited with code 2: standin worker 1 told to fail"
    assert job["status"]["restarts"] == 0
    # cleanPodPolicy Running: the workers still waiting for their peer are removed, the failed one kept.
    wait_for(
        lambda: (
            [
                p["metadata"]["name"]
                for p in pods_of(kubectl, namespace, "bad")
                if not p["metadata"].get("deletionTimestamp")
            ]
            == ["bad-worker-1"]
        ),
        timeout=120,
        what="only the failed worker left",
    )
    assert ("Warning", "WorkerFailed", failed.message) in events_of(kubectl, namespace, "bad")
    # With one request by the job's uid label (the API server took the selectors and RBAC allows it).
    assert pods_deleted_together(operator) > together


def test_exhausted_backoff_fails(operator, make_standin, kubectl, namespace):
    job = make_standin(
        "flaky", 2, env={"STANDIN_FAIL_INDEX": "1", "STANDIN_EXIT_CODE": "75"}, runPolicy={"backoffLimit": 1}
    )
    kubectl.apply(job, "-n", namespace)
    done = wait_condition(kubectl, namespace, "flaky", "Failed")
    failed = condition(done, "Failed")
    assert failed.reason == "BackoffLimitExceeded"
    assert "flaky-worker-1 exited with code 75" in failed.message
    assert done["status"]["restarts"] == 1


def test_suspend_deletes_the_pods_and_resume_recreates_them(
    operator, make_standin, kubectl, namespace, wait_for
):
    kubectl.apply(make_standin("nap", 2, env={"STANDIN_SLEEP_SECONDS": "600"}), "-n", namespace)
    wait_condition(kubectl, namespace, "nap", "Running")
    patch_spec(kubectl, namespace, "nap", {"runPolicy": {"suspend": True}})
    job = wait_condition(kubectl, namespace, "nap", "Suspended")
    assert job["status"]["phase"] == "Suspended"
    wait_for(lambda: not pods_of(kubectl, namespace, "nap"), timeout=120, what="pods deleted on suspend")
    patch_spec(kubectl, namespace, "nap", {"runPolicy": {"suspend": False}})
    job = wait_condition(kubectl, namespace, "nap", "Running")
    assert condition(job, "Suspended").status == "False" and job["status"]["restarts"] == 0
    assert len(pods_of(kubectl, namespace, "nap")) == 2


def test_the_deadline_fails_the_job_and_removes_its_pods(
    operator, make_standin, kubectl, namespace, wait_for
):
    job = make_standin(
        "slow",
        2,
        env={"STANDIN_SLEEP_SECONDS": "600"},
        runPolicy={"activeDeadlineSeconds": 8, "cleanPodPolicy": "None"},
    )
    kubectl.apply(job, "-n", namespace)
    done = wait_condition(kubectl, namespace, "slow", "Failed")
    assert condition(done, "Failed").reason == "DeadlineExceeded"
    wait_for(
        lambda: not pods_of(kubectl, namespace, "slow"), timeout=120, what="pods removed after the deadline"
    )


def test_ttl_deletes_the_finished_job(operator, make_standin, kubectl, namespace, wait_for):
    kubectl.apply(make_standin("brief", 2, runPolicy={"ttlSecondsAfterFinished": 2}), "-n", namespace)
    wait_condition(kubectl, namespace, "brief", "Succeeded")
    wait_for(
        lambda: kubectl("get", "trainjob", "brief", "-n", namespace, check=False).returncode != 0,
        timeout=120,
        what="the TrainJob deleted after its TTL",
    )


def test_a_template_of_the_wrong_shape_is_refused_with_a_status_message_and_a_warning(
    operator, make_standin, kubectl, namespace
):
    """What the CRD leaves open (spec.template.spec is a PodSpec it does not type) the operator checks."""
    job = make_standin("clash", 2, template={"spec": {"volumes": {"scratch": {"emptyDir": {}}}}})
    kubectl.apply(job, "-n", namespace)
    done = wait_condition(kubectl, namespace, "clash", "Failed")
    failed = condition(done, "Failed")
    assert failed.reason == "InvalidSpec"
    assert "spec.template.spec.volumes: must be a list" in failed.message
    assert pods_of(kubectl, namespace, "clash") == []
    assert any(t == "Warning" and r == "InvalidSpec" for t, r, _ in events_of(kubectl, namespace, "clash"))


def test_an_operator_killed_mid_job_creates_no_duplicates(
    operator, make_standin, kubectl, namespace, wait_for
):
    kubectl.apply(
        make_standin("steady", 3, env={"STANDIN_SLEEP_SECONDS": "10"}, runPolicy={"cleanPodPolicy": "None"}),
        "-n",
        namespace,
    )
    running = wait_condition(kubectl, namespace, "steady", "Running")
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods_of(kubectl, namespace, "steady")}
    assert len(before) == 3
    operator.kill()
    operator.start()
    done = wait_condition(kubectl, namespace, "steady", "Succeeded")
    after = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods_of(kubectl, namespace, "steady")}
    assert after == before  # the same pods: none recreated, none added
    # Nothing lost: the new operator carried on from the status in the object.
    assert done["status"]["restarts"] == 0
    assert done["status"]["startTime"] == running["status"]["startTime"]
    assert (
        condition(done, "Running").last_transition_time >= condition(running, "Running").last_transition_time
    )


def test_progress_and_the_run_come_from_mlflow(
    operator, make_standin, mlflow_uri, kubectl, namespace, wait_for
):
    job = make_standin(
        "tracked",
        2,
        env={"STANDIN_MLFLOW": "1", "STANDIN_EPOCH_SECONDS": "1.5"},
        trainer={"epochs": 5},
        mlflow={"trackingUri": mlflow_uri, "experiment": f"progress-{namespace}"},
    )
    kubectl.apply(job, "-n", namespace)
    # While it runs, status.progress follows the run (epochs finished of the total, latest metrics).
    progress = wait_for(
        lambda: get_job(kubectl, namespace, "tracked").get("status", {}).get("progress", {}).get("epoch"),
        timeout=90,
        interval=0.3,
        what="status.progress.epoch",
    )
    assert 1 <= progress <= 5
    done = wait_condition(kubectl, namespace, "tracked", "Succeeded")
    status = done["status"]
    assert status["progress"]["epochs"] == 5 and "loss" in status["progress"]["metrics"]
    # The run in status is the one MLflow holds for this job's uid.
    search = urllib.request.Request(
        f"{mlflow_uri}/api/2.0/mlflow/runs/search",
        data=json.dumps(
            {
                "experiment_ids": [status["mlflow"]["experimentId"]],
                "filter": f"tags.`{MLFLOW_TAG_JOB_UID}` = '{done['metadata']['uid']}'",
            }
        ).encode(),
        headers={"Content-Type": "application/json"},
    )
    runs = json.loads(urllib.request.urlopen(search, timeout=10).read())["runs"]
    assert [r["info"]["run_id"] for r in runs] == [status["mlflow"]["runId"]] == [status["progress"]["runId"]]


def test_a_template_the_api_server_refuses_fails_the_job_with_its_message(
    operator, make_standin, kubectl, namespace
):
    job = make_standin("odd", 2, container={"imagePullPolicy": "Sometimes"})
    kubectl.apply(job, "-n", namespace)
    done = wait_condition(kubectl, namespace, "odd", "Failed")
    failed = condition(done, "Failed")
    assert failed.reason == "InvalidSpec"
    assert (
        "the API server refused" in failed.message and "spec.containers[0].imagePullPolicy" in failed.message
    )
    assert pods_of(kubectl, namespace, "odd") == []
