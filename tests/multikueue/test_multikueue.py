"""A TrainJob submitted to a MultiKueue manager cluster (`spec.managedBy: kueue.x-k8s.io/multikueue`, a
queue label) runs on the worker cluster: real Kueue on both control planes, the operator on both. On the
manager the operator makes the job's one Workload and nothing else; Kueue admits it, MultiKueue copies it and
the job to the worker, whose Kueue admits it there; the worker's operator runs the copy (its workers are that
Workload's, no pod group of their own) and marks the Workload Finished when it ends; MultiKueue copies the
status back (phase, conditions, MLflow run, progress), finishes the manager's Workload, frees both quotas and
removes the copy. One MLflow run, one model. Deleting the job on the manager deletes it on the worker."""

from __future__ import annotations

from typing import Any

import pytest

from multikueue.multikueue_support import MANAGER_QUEUE, QUEUE, WORKER_QUEUE, WORKLOADS, found, items, usage
from mwms_contract import names
from mwms_dev.chain import logged_models_of_run, mlflow_post, runs_of_job
from mwms_kit.standin import standin_container
from mwms_kit.trainjobs import trainjob

# Kueue may still be building in `make test`'s background (its fixtures wait on its build lock): the
# timeout counts the tests themselves only.
pytestmark = [pytest.mark.waits_for_build, pytest.mark.timeout(900, func_only=True)]

ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"
GATE = "kueue.x-k8s.io/admission"
CPU = {"requests": {"cpu": "100m"}}  # two workers fill the worker's quota: one job at a time


def multikueue_job(name: str, **spec: Any) -> dict[str, Any]:
    return trainjob(
        name,
        2,
        labels={names.LABEL_KUEUE_QUEUE: QUEUE},
        managedBy=names.MULTIKUEUE_CONTROLLER_NAME,
        **spec,
    )


def test_a_job_on_the_manager_runs_on_the_worker_and_reports_back_one_run_and_one_model(
    manager_kubectl, worker_kubectl, queue, worker_trainer_image, mlflow_uri, logs, wait_for
):
    namespace, experiment = queue, f"mk-{queue}"
    job = multikueue_job(
        "cancer",
        image=worker_trainer_image,
        trainer={"dataset": "breast_cancer", "seed": 42, "epochs": 5},
        mlflow={"trackingUri": mlflow_uri, "experiment": experiment},
        container={"imagePullPolicy": "IfNotPresent", "resources": CPU},
    )
    manager_kubectl.apply(job, "-n", namespace)
    uid = manager_kubectl.json("get", "trainjob", "cancer", "-n", namespace)["metadata"]["uid"]

    # On the manager: the job's one Workload, made by the operator, owned by the job.
    (workload,) = wait_for(
        lambda: items(manager_kubectl, WORKLOADS, namespace), timeout=60, what="the job's Workload"
    )
    (owner,) = workload["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"]) == ("TrainJob", uid)
    assert [p["count"] for p in workload["spec"]["podSets"]] == [2]

    # On the worker: MultiKueue's copy, run by the worker's operator through that Workload.
    copy = wait_for(
        lambda: found(worker_kubectl, "trainjob", "cancer", namespace),
        timeout=180,
        interval=1,
        what=f"the job's copy on the worker\n{logs()}",
    )
    assert "managedBy" not in copy["spec"]
    labels = copy["metadata"]["labels"]
    assert labels[names.LABEL_KUEUE_PREBUILT_WORKLOAD] == workload["metadata"]["name"]
    assert ORIGIN_LABEL in labels
    worker_uid = copy["metadata"]["uid"]

    seen: dict[str, Any] = {"phases": set(), "progress": None}

    def finished() -> dict[str, Any] | None:
        status = manager_kubectl.json("get", "trainjob", "cancer", "-n", namespace).get("status") or {}
        seen["phases"].add(status.get("phase"))
        seen["progress"] = status.get("progress") or seen["progress"]
        # While it runs: nothing of the job's on the manager; on the worker, one Workload (the job's: its
        # workers are no pod group of their own), and no worker waits for Kueue's admission.
        assert items(manager_kubectl, "pods", namespace) == []
        assert len(items(worker_kubectl, WORKLOADS, namespace)) <= 1
        for pod in items(worker_kubectl, "pods", namespace):
            assert names.LABEL_KUEUE_POD_GROUP not in pod["metadata"]["labels"]
            assert GATE not in {g["name"] for g in pod["spec"].get("schedulingGates") or []}
        assert status.get("phase") != "Failed", f"{status}\n{logs()}"
        return status if status.get("phase") == "Succeeded" else None

    status = wait_for(finished, timeout=600, interval=1, what=f"the manager's job to succeed\n{logs()}")
    assert "Running" in seen["phases"], f"the manager showed the job's run: {seen['phases']}"
    succeeded = next(c for c in status["conditions"] if c["type"] == "Succeeded")
    assert succeeded["status"] == "True" and succeeded["reason"] == "ChiefSucceeded"
    run_id, model_uri = status["mlflow"]["runId"], status["mlflow"]["modelUri"]
    assert status["progress"]["epochs"] == 5 and status["progress"]["runId"] == run_id

    # One run (the worker copy's uid tags it; the experiment holds no other) and one model.
    (run,) = runs_of_job(mlflow_uri, worker_uid)
    assert run["info"]["run_id"] == run_id and model_uri
    experiment_id = run["info"]["experiment_id"]
    every = mlflow_post(mlflow_uri, "runs/search", {"experiment_ids": [experiment_id]})["runs"]
    assert [r["info"]["run_id"] for r in every] == [run_id]
    assert len(logged_models_of_run(mlflow_uri, experiment_id, run_id)) == 1

    # Kueue is done with it: the manager's Workload finished, the copy removed from the worker, and no
    # quota held on either cluster (the worker's operator marked the worker's Workload Finished).
    def done() -> bool:
        local = found(manager_kubectl, WORKLOADS, workload["metadata"]["name"], namespace) or {}
        ended = any(
            c["type"] == "Finished" and c["status"] == "True"
            for c in local.get("status", {}).get("conditions", [])
        )
        gone = found(worker_kubectl, "trainjob", "cancer", namespace) is None
        return (
            ended
            and gone
            and usage(manager_kubectl, MANAGER_QUEUE) == usage(worker_kubectl, WORKER_QUEUE) == (0, 0)
        )

    wait_for(done, timeout=120, interval=1, what=f"Kueue to finish the job on both clusters\n{logs()}")
    # The manager's copy keeps its final status, written by MultiKueue alone; the operator said one thing.
    assert (
        manager_kubectl.json("get", "trainjob", "cancer", "-n", namespace)["status"]["phase"] == "Succeeded"
    )
    ours = [
        e["reason"]
        for e in items(manager_kubectl, "events", namespace)
        if e.get("reportingComponent") == names.MANAGED_BY and e["involvedObject"]["name"] == "cancer"
    ]
    assert ours == ["ManagedElsewhere"]
    assert items(manager_kubectl, "services", namespace) == []


def test_deleting_the_job_on_the_manager_deletes_it_on_the_worker(
    manager_kubectl, worker_kubectl, queue, worker_trainer_image, logs, wait_for
):
    namespace = queue
    job = multikueue_job(
        "long",
        container={**standin_container(worker_trainer_image), "resources": CPU},
        env={"STANDIN_SLEEP_SECONDS": "600"},
    )
    manager_kubectl.apply(job, "-n", namespace)

    def running() -> bool:
        status = manager_kubectl.json("get", "trainjob", "long", "-n", namespace).get("status") or {}
        return status.get("phase") == "Running"

    wait_for(running, timeout=300, interval=1, what=f"the manager's job to show Running\n{logs()}")
    pods = items(worker_kubectl, "pods", namespace)
    assert sorted(p["metadata"]["name"] for p in pods) == ["long-worker-0", "long-worker-1"]

    manager_kubectl("delete", "trainjob", "long", "-n", namespace, "--wait=true", "--timeout=60s")
    wait_for(
        lambda: (
            found(worker_kubectl, "trainjob", "long", namespace) is None
            and not [
                p
                for p in items(worker_kubectl, "pods", namespace)
                if not p["metadata"].get("deletionTimestamp")
            ]
        ),
        timeout=120,
        interval=1,
        what=f"the worker's copy and its pods to go\n{logs()}",
    )
    wait_for(
        lambda: (
            items(manager_kubectl, WORKLOADS, namespace) == []
            and items(worker_kubectl, WORKLOADS, namespace) == []
        ),
        timeout=120,
        interval=1,
        what="both Workloads to go",
    )
