"""SIGTERM mid-epoch on the real node: a graceful delete of a group's pods (what a drain, an eviction or
Kueue's preemption does) reaches each trainer through the kubelet and the image's PID 1; the group stops after
one agreed step, the chief saves that step into the job's MLflow run (`spec.checkpoint.store: run`, no
volume) within the pods' grace period, and every worker says where in its log. The operator starts the group
again, which resumes at the step after the one saved, mid-epoch, and the job ends with one run."""

from __future__ import annotations

import re

import pytest

from mwms_dev.chain import runs_of_job
from mwms_kit.trainjobs import trainjob
from node.node_support import follow_log, phase_is, running_container, wait_for_job

pytestmark = pytest.mark.timeout(1500)

EPOCHS = 3
EVERY_STEPS = 20
# 4000 synthetic rows: epochs of many steps, so a save within epoch 2 is followed by more steps of it.
TRAINER = {"dataset": "synthetic", "syntheticSamples": 4000, "epochs": EPOCHS, "hiddenUnits": [16], "seed": 7}
SAVED = re.compile(r"checkpoint saved at epoch (\d+) step (\d+)")
STOPPED_AT = re.compile(r"stopped by SIGTERM: the group saved its checkpoint at epoch (\d+) step (\d+)")
RESUMED_AT = re.compile(r"worker 0 resumes at epoch (\d+) step (\d+)")


def test_a_group_stopped_by_sigterm_mid_epoch_resumes_at_the_step_it_saved(
    node_kubectl, node_namespace, node_chain, operator_log
):
    name, chief = "preempted", "preempted-worker-0"
    job = trainjob(
        name,
        2,
        trainer=TRAINER,
        mlflow={"experiment": name},
        checkpoint={"store": "run", "everySteps": EVERY_STEPS, "terminationGracePeriodSeconds": 60},
        runPolicy={"backoffLimit": 3},
    )
    node_kubectl.apply(job, "-n", node_namespace)
    try:
        running_container(node_kubectl, node_namespace, chief, 0, 600)
        follow_log(
            node_kubectl,
            node_namespace,
            chief,
            lambda log: any(epoch == "2" for epoch, _ in SAVED.findall(log)),
            600,
            "a save within epoch 2",
        )
        # As a drain does: both pods deleted with their grace period; the chief's log read to its end.
        follower = node_kubectl.stream("logs", "--follow", chief, "-n", node_namespace)
        node_kubectl("delete", "pod", chief, f"{name}-worker-1", "-n", node_namespace, "--wait=false")
        stopped = follower.communicate(timeout=120)[0]
        assert STOPPED_AT.search(stopped), stopped[-3000:]
        saved_epoch, saved_step = map(int, STOPPED_AT.findall(stopped)[-1])
        assert f"epoch {EPOCHS}/{EPOCHS}" not in stopped, "the delete landed after the fit"

        running_container(node_kubectl, node_namespace, chief, 1, 600)
        resumed = follow_log(node_kubectl, node_namespace, chief, RESUMED_AT.search, 300, "the resume line")
        # The step after the one saved, in the same epoch (step 2 or later): not the epoch's start.
        assert RESUMED_AT.findall(resumed)[-1] == (str(saved_epoch), str(saved_step + 1)), resumed[-2000:]

        done = wait_for_job(node_kubectl, node_namespace, name, phase_is("Succeeded"), 600, "Succeeded")
        (run,) = runs_of_job(node_chain.mlflow_pod_url(), done["metadata"]["uid"])
        assert run["info"]["status"] == "FINISHED"
    except Exception:
        print(operator_log())
        print(node_kubectl("logs", chief, "-n", node_namespace, "--tail=60", check=False).stdout)
        raise
