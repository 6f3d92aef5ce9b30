"""Volumes on the real node: a claim that names no class binds on the default StorageClass `standard`
(rancher's local-path-provisioner, as kind ships it) and its data outlives the pod that wrote it; the chart's
bundled MLflow keeps its PVC there, so a run survives an MLflow pod restart."""

from __future__ import annotations

import uuid

from mwms_dev.chain import mlflow_get, mlflow_post
from mwms_dev.local_path import STORAGE_CLASS
from node.node_support import NO_PRIVILEGES, RESTRICTED


def claim(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Mi"}}},
    }


def shell_pod(name: str, image: str, script: str, claim_name: str) -> dict:
    """busybox running `script` once as user 65532, the claim at /data."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "securityContext": RESTRICTED,
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", script],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    "securityContext": NO_PRIVILEGES,
                }
            ],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}],
        },
    }


def wait_pod_succeeded(kubectl, namespace: str, name: str) -> None:
    kubectl(
        "wait", "--for=jsonpath={.status.phase}=Succeeded", f"pod/{name}", "-n", namespace, "--timeout=120s",
        timeout=130,
    )  # fmt: skip


def test_a_claim_without_a_class_binds_on_the_default_class_and_outlives_its_pod(
    node_kubectl, node_namespace, busybox
):
    node_kubectl.apply(
        [claim("data"), shell_pod("writer", busybox, "echo kept > /data/file", "data")], "-n", node_namespace
    )
    wait_pod_succeeded(node_kubectl, node_namespace, "writer")
    pvc = node_kubectl.json("get", "pvc", "data", "-n", node_namespace)
    assert pvc["status"]["phase"] == "Bound" and pvc["spec"]["storageClassName"] == STORAGE_CLASS, pvc[
        "status"
    ]
    node_kubectl("delete", "pod", "writer", "-n", node_namespace)
    node_kubectl.apply(shell_pod("reader", busybox, "cat /data/file", "data"), "-n", node_namespace)
    wait_pod_succeeded(node_kubectl, node_namespace, "reader")  # its output is complete once it ended
    assert node_kubectl("logs", "reader", "-n", node_namespace).stdout == "kept\n"


def test_mlflow_keeps_its_runs_on_its_claim_across_a_pod_restart(node_kubectl, node_chain, wait_for):
    namespace = node_chain.operator_namespace
    tracking = "app.kubernetes.io/component=tracking"
    (pvc,) = node_kubectl.json("get", "pvc", "-n", namespace, "-l", tracking)["items"]
    assert pvc["status"]["phase"] == "Bound" and pvc["spec"]["storageClassName"] == STORAGE_CLASS, pvc[
        "status"
    ]
    url = node_chain.mlflow_pod_url()
    experiment = mlflow_post(url, "experiments/create", {"name": f"kept-{uuid.uuid4().hex[:8]}"})
    run = mlflow_post(url, "runs/create", {"experiment_id": experiment["experiment_id"]})["run"]
    (old,) = node_kubectl.json("get", "pods", "-n", namespace, "-l", tracking)["items"]

    node_kubectl("delete", "pod", old["metadata"]["name"], "-n", namespace, timeout=120)

    def new_ready_pod() -> dict | None:
        pods = node_kubectl.json("get", "pods", "-n", namespace, "-l", tracking)["items"]
        ready = [
            p
            for p in pods
            if p["metadata"]["uid"] != old["metadata"]["uid"]
            and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
        ]
        return ready[0] if ready else None

    new = wait_for(new_ready_pod, timeout=300, interval=1, what="a new MLflow pod to be Ready")
    kept = mlflow_get(f"http://{new['status']['podIP']}:5000", "runs/get", {"run_id": run["info"]["run_id"]})
    assert kept["run"]["info"]["experiment_id"] == experiment["experiment_id"]
