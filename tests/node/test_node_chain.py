"""What users run, on the real node, with the images `make images` built from our Dockerfiles: the Helm chart
(operator image, bundled MLflow from the trainer image) in a namespace enforcing Pod Security `restricted`;
the seed TrainJob's 4 trainer containers find each other through CoreDNS and MLflow through its Service, and
give exactly one run and one model; a worker and then the chief SIGKILLed inside containerd each restart the
whole group once, which resumes from its checkpoint into the same single run; suspend removes the workers
and resume brings them back to finish. The chain steps are mwms_dev.chain's, as in tests/e2e."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from mwms_dev.chain import Chain, check_mlflow, runs_of_job, score_model
from mwms_dev.kubelet_node import NodeError, real_node_chart_values

# Loading the trainer image (~1 GB) and the chart come first, on 2 shared cores: more than the default 600 s.
pytestmark = [
    pytest.mark.node,
    pytest.mark.e2e,
    pytest.mark.integration,
    pytest.mark.tf,
    pytest.mark.timeout(1500),
]

REPO = Path(__file__).resolve().parents[2]
MINIMAL_SAMPLE = REPO / "manifests" / "samples" / "minimal.yaml"
JOB_LABEL = "mwms.dev/job-name"


def restrict(kubectl, namespace: str) -> None:
    kubectl(
        "label",
        "namespace",
        namespace,
        "--overwrite",
        "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/enforce-version=latest",
    )


@pytest.fixture(scope="module")
def node_chain(real_cluster, real_node, node_kubectl):
    from mwms_dev.demo import tools_bin

    loaded = real_node.images()
    if not any("/mwms-operator:" in name for name in loaded):
        pytest.skip("no mwms-operator image on the node: run `make images` (build/images/*.oci.tar) first")
    try:
        values = real_node_chart_values(loaded)
    except NodeError as exc:
        pytest.skip(f"{exc}: run `make images` first")
    bins = tools_bin()
    operator_ns = "mwms-e2e"
    node_kubectl("create", "namespace", operator_ns)
    restrict(node_kubectl, operator_ns)
    chain = Chain(
        kubeconfig=real_cluster.kubeconfig,
        helm=str(bins / "helm"),
        kubectl=str(bins / "kubectl"),
        operator_namespace=operator_ns,
        # The host reaches MLflow at its pod IP on the bridge, so allow that Host header too.
        helm_values=["mlflow.enabled=true", "mlflow.extraAllowedHosts={10.*}", *values],
        timeout_s=900,
    )
    try:
        chain.install_chart()
    except Exception:
        print(operator_log(node_kubectl, operator_ns))
        raise
    yield chain
    node_kubectl("delete", "namespace", operator_ns, "--wait=false", check=False)


def operator_log(kubectl, namespace: str) -> str:
    """The operator container's log through the API server and the kubelet, as users read it."""
    done = kubectl(
        "logs", "-n", namespace, "-l", "app.kubernetes.io/component=operator", "--tail=200", check=False
    )
    return done.stdout + done.stderr


def job_pods(kubectl, namespace: str, name: str) -> list[dict]:
    return kubectl.json("get", "pods", "-n", namespace, "-l", f"{JOB_LABEL}={name}")["items"]


def test_seed_job_on_the_real_node_gives_one_run_and_one_model(node_kubectl, node_namespace, node_chain):
    chain = node_chain
    chain.job_namespace, chain.sample = (
        node_namespace,
        REPO / "manifests" / "samples" / "seed-breast-cancer.yaml",
    )
    try:
        name = chain.apply_sample()
        job = chain.wait_succeeded(name)
        url = chain.mlflow_pod_url()
        result = check_mlflow(url, job)
        assert result["params"].get("replicas") == "4", result["params"]
        assert score_model(url, result["modelUri"], job["spec"].get("trainer", {})) >= 0.95
        # Every worker ran as a container of our trainer image on the real node.
        pods = job_pods(node_kubectl, node_namespace, name)
        assert len(pods) == 4, "cleanPodPolicy Running (the default) keeps finished workers"
        for pod in pods:
            (status,) = pod["status"]["containerStatuses"]
            assert status["containerID"].startswith("containerd://") and "/mwms-trainer:" in status["image"]
        chain.delete_job(name)
    except Exception:
        print(operator_log(node_kubectl, chain.operator_namespace))
        raise


def test_workers_run_under_restricted_pod_security(node_kubectl, node_namespace, node_chain):
    restrict(node_kubectl, node_namespace)
    chain = node_chain
    chain.job_namespace, chain.sample = node_namespace, MINIMAL_SAMPLE
    try:
        name = chain.apply_sample()
        job = chain.wait_succeeded(name)
        assert len(runs_of_job(chain.mlflow_pod_url(), job["metadata"]["uid"])) == 1
    except Exception:
        print(operator_log(node_kubectl, chain.operator_namespace))
        raise


def wait_for_job(kubectl, namespace: str, name: str, predicate, timeout: float, what: str) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        job = kubectl.json("get", "trainjob", name, "-n", namespace)
        if predicate(job):
            return job
        status = job.get("status") or {}
        if status.get("phase") == "Failed" or time.monotonic() > deadline:
            raise AssertionError(f"trainjob/{name}: {what} not reached: {status}")
        time.sleep(1)


def kill_worker_in_containerd(kubectl, real_node, namespace: str, pod_name: str) -> None:
    """SIGKILL the worker's process through containerd, as the OOM killer or a crash would end it."""
    pod = kubectl.json("get", "pod", pod_name, "-n", namespace)
    (status,) = pod["status"]["containerStatuses"]
    real_node.ctr("tasks", "kill", "--signal", "SIGKILL", status["containerID"].removeprefix("containerd://"))


def training_job(name: str, checkpoint_dir: Path, epochs: int) -> dict:
    return {
        "apiVersion": "mwms.dev/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {
            "replicas": 2,
            "trainer": {"dataset": "breast_cancer", "seed": 42, "epochs": epochs},
            "mlflow": {"experiment": name},
            "checkpoint": {"hostPath": {"path": str(checkpoint_dir), "type": "Directory"}},
            "runPolicy": {"backoffLimit": 3},
        },
    }


def test_killed_worker_then_killed_chief_restart_the_group_which_resumes_into_one_run(
    real_cluster, real_node, node_kubectl, node_namespace, node_chain
):
    checkpoint = real_cluster.state_dir / "checkpoints" / node_namespace
    checkpoint.mkdir(parents=True)
    checkpoint.chmod(0o777)  # the trainer runs as 65532; a hostPath is the host's directory as it is
    name = "kills"
    node_kubectl.apply(training_job(name, checkpoint, epochs=40), "-n", node_namespace)
    try:
        for restarts, victim in ((1, f"{name}-worker-1"), (2, f"{name}-worker-0")):
            # Kill once training has started and a checkpoint exists, so the restart has something to resume.
            wait_for_job(
                node_kubectl,
                node_namespace,
                name,
                lambda j, r=restarts: (
                    (j.get("status") or {}).get("restarts", 0) == r - 1
                    and (j.get("status") or {}).get("phase") == "Running"
                    and any(checkpoint.rglob("*"))
                ),
                600,
                "Running with a checkpoint",
            )
            kill_worker_in_containerd(node_kubectl, real_node, node_namespace, victim)
            wait_for_job(
                node_kubectl,
                node_namespace,
                name,
                lambda j, r=restarts: (j.get("status") or {}).get("restarts", 0) >= r,
                180,
                f"group restart {restarts}",
            )
        job = wait_for_job(
            node_kubectl,
            node_namespace,
            name,
            lambda j: (j.get("status") or {}).get("phase") == "Succeeded",
            900,
            "Succeeded",
        )
        assert job["status"]["restarts"] == 2
        runs = runs_of_job(node_chain.mlflow_pod_url(), job["metadata"]["uid"])
        assert len(runs) == 1, [r["info"]["run_id"] for r in runs]
    except Exception:
        print(operator_log(node_kubectl, node_chain.operator_namespace))
        raise


def test_suspend_removes_the_workers_and_resume_finishes_the_job(node_kubectl, node_namespace, node_chain):
    chain = node_chain
    chain.job_namespace, chain.sample = node_namespace, MINIMAL_SAMPLE
    name = chain.apply_sample()
    try:
        wait_for_job(
            node_kubectl,
            node_namespace,
            name,
            lambda j: (j.get("status") or {}).get("phase") == "Running",
            300,
            "Running",
        )
        node_kubectl(
            "patch",
            "trainjob",
            name,
            "-n",
            node_namespace,
            "--type=merge",
            "-p",
            '{"spec": {"runPolicy": {"suspend": true}}}',
        )
        wait_for_job(
            node_kubectl,
            node_namespace,
            name,
            lambda j: (
                (j.get("status") or {}).get("phase") == "Suspended"
                and not job_pods(node_kubectl, node_namespace, name)
            ),
            180,
            "Suspended, no pods",
        )
        node_kubectl(
            "patch",
            "trainjob",
            name,
            "-n",
            node_namespace,
            "--type=merge",
            "-p",
            '{"spec": {"runPolicy": {"suspend": false}}}',
        )
        job = chain.wait_succeeded(name)
        assert len(runs_of_job(chain.mlflow_pod_url(), job["metadata"]["uid"])) == 1
    except Exception:
        print(operator_log(node_kubectl, chain.operator_namespace))
        raise
