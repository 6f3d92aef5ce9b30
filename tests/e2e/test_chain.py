"""The whole chain on the local control plane, the same steps as `mwms demo` and the kind workflow
(mwms_dev.chain): real Helm installs the chart with the bundled MLflow; the node agent runs the operator pod
(logged in as its ServiceAccount) and the MLflow pod; the seed sample's 4 real trainer workers train; MLflow
holds exactly one run and one model that scores well; deleting the job and uninstalling leave nothing behind.
A failure names the chain step that failed (ChainError)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from mwms_dev.chain import Chain, check_mlflow, runs_of_job, score_model

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.tf]

REPO = Path(__file__).resolve().parents[2]
MINIMAL_SAMPLE = REPO / "manifests" / "samples" / "minimal.yaml"


@pytest.fixture(scope="module")
def tools_bin() -> Path:
    done = subprocess.run(
        ["bash", str(REPO / "hack" / "tools.sh")], capture_output=True, text=True, timeout=600, check=True
    )
    return Path(done.stdout.strip().splitlines()[-1])


def make_chain(cluster, tools_bin: Path, operator_namespace: str, job_namespace: str) -> Chain:
    return Chain(
        kubeconfig=cluster.kubeconfig,
        helm=str(tools_bin / "helm"),
        kubectl=str(tools_bin / "kubectl"),
        release="mwms",
        operator_namespace=operator_namespace,
        job_namespace=job_namespace,
        # The host reaches MLflow at its pod IP on the bridge, so allow that Host header too.
        helm_values=["mlflow.enabled=true", "mlflow.extraAllowedHosts={10.*}"],
        timeout_s=900,
    )


@pytest.fixture(scope="module")
def chain(cluster, kubectl, tools_bin):
    """The chart installed once, into a namespace that enforces Pod Security `restricted`."""
    operator_ns = "mwms-e2e"
    kubectl("create", "namespace", operator_ns)
    kubectl.restrict(operator_ns)
    chain = make_chain(cluster, tools_bin, operator_ns, job_namespace="default")
    try:
        chain.install_chart()
    except Exception:
        print(operator_log(cluster, kubectl, operator_ns))
        raise
    yield chain
    kubectl("delete", "namespace", operator_ns, "--wait=false", check=False)


def operator_log(cluster, kubectl, namespace: str) -> str:
    pods = kubectl.json("get", "pods", "-n", namespace, "-l", "app.kubernetes.io/component=operator")["items"]
    if not pods:
        return f"no operator pod in {namespace}"
    return cluster.pod_log(namespace, pods[0]["metadata"]["name"], container="operator")


def test_seed_job_gives_one_run_and_one_good_model(cluster, kubectl, namespace, chain):
    chain.job_namespace = namespace
    try:
        name = chain.apply_sample()
        job = chain.wait_succeeded(name)
        result = check_mlflow(chain.mlflow_pod_url(), job)
        params, metrics = result["params"], result["metrics"]
        assert params.get("replicas") == "4", params
        assert len(result["lossHistory"]) == int(params["epochs"]), "one loss point per epoch"
        accuracy = score_model(chain.mlflow_pod_url(), result["modelUri"], job["spec"].get("trainer", {}))
        assert accuracy >= 0.95
        assert accuracy == pytest.approx(metrics["val_accuracy"], abs=1e-6)
        chain.delete_job(name)
    except Exception:
        print(operator_log(cluster, kubectl, chain.operator_namespace))
        raise


def test_workers_are_admitted_under_restricted_pod_security(cluster, kubectl, namespace, chain):
    kubectl.restrict(namespace)
    chain.job_namespace, chain.sample = namespace, MINIMAL_SAMPLE
    try:
        name = chain.apply_sample()
        job = chain.wait_succeeded(name)
        assert len(runs_of_job(chain.mlflow_pod_url(), job["metadata"]["uid"])) == 1
    except Exception:
        print(operator_log(cluster, kubectl, chain.operator_namespace))
        raise


def test_helm_uninstall_leaves_no_operator_objects(chain):
    chain.uninstall()
