"""Bring your own code on the real node, as users deploy it (the Helm chart's operator and bundled MLflow, the
trainer image `make images` built): `mwms submit` of the seed's ported train() script and
`MirroredStrategyRunner(cluster=Cluster(...)).run(train)` each run 2 trainer containers in a `restricted`
namespace, mounting the user's code from the job's ConfigMap, and give one MLflow run and one model; a failing
script ends Failed with its traceback line. The same flows as the integration tier's
tests/integration/operator/test_operator_submit.py, with its scripts and helpers (mwms_kit/submit.py)."""

from __future__ import annotations

import pytest

from mwms_dev.chain import check_mlflow
from mwms_kit.submit import (
    CHIEFS_METRICS,
    FAILING_LINE,
    FAILING_SCRIPT,
    SEED_SCRIPT,
    jobs_in,
    printed_result,
    run_mwms,
    run_seed_function,
)
from mwms_kit.waits import condition

# The tier's first test also loads the trainer image and installs the chart, on 2 shared cores.
pytestmark = pytest.mark.timeout(1500)


@pytest.fixture
def user_namespace(node_kubectl, node_namespace, node_chain) -> str:
    """The test's namespace under Pod Security `restricted`, with the chart installed."""
    node_kubectl.restrict(node_namespace)
    return node_namespace


def test_submitted_seed_script_gives_one_run_one_model_and_its_configmap_goes_with_the_job(
    real_cluster, node_kubectl, user_namespace, node_chain, operator_log, wait_for
):
    done = run_mwms(
        real_cluster.kubeconfig, user_namespace,
        "submit", str(SEED_SCRIPT), "--replicas", "2", "--follow", "--", "--epochs", "3",
        timeout=900,
    )  # fmt: skip
    if done.returncode != 0:
        print(operator_log())
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    (job,) = jobs_in(node_kubectl, user_namespace)
    name = job["metadata"]["name"]
    # One run tagged with the job's uid, holding one model: the one the job's status and the CLI name.
    run = check_mlflow(node_chain.mlflow_pod_url(), job)
    assert f"MLflow run ID: {run['runId']}" in done.stdout
    assert f"Model URI: {run['modelUri']}" in done.stdout
    assert run["params"].get("replicas") == "2", run["params"]  # as the built-in trainer logs it
    assert set(printed_result(done.stdout)) >= CHIEFS_METRICS
    # Both workers ran in our trainer image's containers on the real node.
    pods = node_kubectl.json("get", "pods", "-n", user_namespace)["items"]
    assert f"{name}-worker-0" in {pod["metadata"]["name"] for pod in pods}
    for pod in pods:
        (status,) = pod["status"]["containerStatuses"]
        assert status["containerID"].startswith("containerd://") and "/mwms-trainer:" in status["image"]

    configmap = node_kubectl.json("get", "configmap", f"{name}-code", "-n", user_namespace)
    assert configmap["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    node_kubectl("delete", "trainjob", name, "-n", user_namespace)
    wait_for(
        lambda: (
            node_kubectl("get", "configmap", f"{name}-code", "-n", user_namespace, check=False).returncode
            != 0
        ),
        timeout=120,
        what="the code ConfigMap to be garbage-collected with its job",
    )


def test_a_function_from_python_returns_the_chiefs_value(
    real_cluster, node_kubectl, user_namespace, node_chain, operator_log, monkeypatch
):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    try:
        result = run_seed_function(user_namespace, real_cluster.kubeconfig)
    except Exception:
        print(operator_log())
        raise
    assert set(result) >= CHIEFS_METRICS
    (job,) = jobs_in(node_kubectl, user_namespace)
    assert job["spec"]["code"]["entrypoint"] == "mwms_trainer.usercode:run_pickled"
    assert job["spec"]["replicas"] == 2
    check_mlflow(node_chain.mlflow_pod_url(), job)  # one run, one model


def test_a_failing_script_fails_with_its_traceback_line_and_exit_code_1(
    real_cluster, node_kubectl, user_namespace
):
    done = run_mwms(real_cluster.kubeconfig, user_namespace, "submit", str(FAILING_SCRIPT), "--follow")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    (job,) = jobs_in(node_kubectl, user_namespace)
    failed = condition(job, "Failed")
    assert failed.reason == "WorkerFailed" and FAILING_LINE in failed.message, failed
    assert job["status"]["restarts"] == 0  # a user error is not retried
    assert f"Failed: {failed.message}" in done.stdout
