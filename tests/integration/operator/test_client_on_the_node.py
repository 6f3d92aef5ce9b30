"""The client where it matters on the real node: inside a pod with no kubeconfig it uses the pod's service
account and namespace; the pods the operator creates carry what `mwms submit` asked for; and a job asking for
a GPU the node has not got says so in its status (the scheduler's message, in the Running condition).

The in-cluster pod runs the trainer image's Python with the client's source and its dependencies (the test
venv's site-packages, which hold `kubernetes`) mounted read-only from this machine: the trainer image has no
`kubernetes` package, and the client's own image is the user's (a notebook's)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mwms_kit.submit import run_mwms
from mwms_kit.waits import condition, get_job

REPO = Path(__file__).resolve().parents[3]
IN_POD = """
from mwms import Client
client = Client()
print(client.namespace)
print(" ".join(job.name for job in client.list()))
"""


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text("print('hello')\n")
    return path


def site_packages() -> str:
    import kubernetes

    return str(Path(kubernetes.__file__).resolve().parents[1])


def reader_rbac(namespace: str) -> list[dict[str, Any]]:
    """A ServiceAccount that may list and get TrainJobs in its namespace, and nothing else."""
    meta = {"name": "reader", "namespace": namespace}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta,
            "rules": [{"apiGroups": ["mwms.dev"], "resources": ["trainjobs"], "verbs": ["get", "list"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        },
    ]


def client_pod(image: str) -> dict[str, Any]:
    mounts = {"client": str(REPO / "client"), "contract": str(REPO / "contract"), "deps": site_packages()}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "notebook"},
        "spec": {
            "serviceAccountName": "reader",
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "notebook",
                    "image": image,
                    "command": ["python", "-c", IN_POD],
                    # No kubeconfig anywhere: HOME is empty, KUBECONFIG unset.
                    "env": [
                        {"name": "PYTHONPATH", "value": "/src/client:/src/contract:/src/deps"},
                        {"name": "HOME", "value": "/tmp"},
                    ],
                    "volumeMounts": [
                        {"name": name, "mountPath": f"/src/{name}", "readOnly": True} for name in mounts
                    ],
                }
            ],
            "volumes": [
                {"name": name, "hostPath": {"path": path, "type": "Directory"}}
                for name, path in mounts.items()
            ],
        },
    }


def test_in_a_pod_without_a_kubeconfig_it_uses_the_service_account_and_the_pods_namespace(
    cluster, kubectl, crd, namespace, trainer_image, script, wait_for
):
    assert run_mwms(cluster.kubeconfig, namespace, "submit", str(script), "--name", "seen").returncode == 0
    kubectl.apply(reader_rbac(namespace))
    kubectl.apply(client_pod(trainer_image), "-n", namespace)
    phase = wait_for(
        lambda: (
            kubectl.json("get", "pod", "notebook", "-n", namespace)["status"].get("phase")
            in ("Succeeded", "Failed")
            and kubectl.json("get", "pod", "notebook", "-n", namespace)["status"]["phase"]
        ),
        timeout=180,
        what="the in-cluster client pod to finish",
    )
    log = kubectl("logs", "notebook", "-n", namespace).stdout
    assert phase == "Succeeded", log
    assert log.split("\n")[:2] == [namespace, "seen"]


def test_the_operators_pods_carry_what_submit_asked_for(
    operator, cluster, kubectl, namespace, script, wait_for
):
    flags = ["--cpu", "100m", "--memory", "64Mi", "--env", "A=1", "--label", "team=a"]
    flags += ["--node-selector", "kubernetes.io/os=linux", "--toleration", "spot:NoSchedule"]
    done = run_mwms(cluster.kubeconfig, namespace, "submit", str(script), "--name", "placed", *flags)
    assert done.returncode == 0, done.stderr
    pod = wait_for(
        lambda: kubectl.json("get", "pods", "-n", namespace, "-l", "mwms.dev/job-name=placed")["items"],
        timeout=120,
        what="the operator's worker pod",
    )[0]
    (trainer,) = [c for c in pod["spec"]["containers"] if c["name"] == "trainer"]
    assert trainer["resources"]["requests"] == {"cpu": "100m", "memory": "64Mi"}
    assert {"name": "A", "value": "1"} in trainer["env"]
    assert pod["metadata"]["labels"]["team"] == "a"
    assert pod["spec"]["nodeSelector"]["kubernetes.io/os"] == "linux"
    assert {"key": "spot", "operator": "Exists", "effect": "NoSchedule"} in pod["spec"]["tolerations"]


def test_a_gpu_the_node_has_not_got_is_named_in_the_status(
    operator, cluster, kubectl, namespace, script, wait_for
):
    done = run_mwms(cluster.kubeconfig, namespace, "submit", str(script), "--name", "gpu", "--gpu", "1")
    assert done.returncode == 0, done.stderr

    def running_message() -> str:
        running = condition(get_job(kubectl, namespace, "gpu"), "Running")
        return running.message if running is not None else ""

    message = wait_for(
        lambda: "nvidia.com/gpu" in running_message() and running_message(),
        timeout=120,
        what="the Running condition to name the missing GPU",
    )
    assert "Insufficient nvidia.com/gpu" in message, message
    job = json.loads(run_mwms(cluster.kubeconfig, namespace, "get", "gpu", "-o", "json").stdout)
    assert job["status"]["phase"] == "Pending"
