"""Sidecars on the real node: a TrainJob's outcome is its `trainer` container's, not its pod's. The operator
runs as a local process (`python -m mwms_operator`) against the real-node cluster; the workers are busybox
shells, so no project image is needed. A `sleep infinity` sidecar keeps a pod Running after the trainer
exited 0; a sidecar failing after the trainer succeeded makes the pod Failed; a native sidecar (an init
container with restartPolicy Always) is allowed. In each case the job succeeds."""

from __future__ import annotations

import json

from mwms_contract.status import Condition
from mwms_kit.trainjobs import trainjob
from mwms_kit.waits import condition

RUN = {"runId": "sidecar-run", "experimentId": "1", "modelUri": "runs:/sidecar-run/model"}
NON_ROOT = {
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def shell(name: str, image: str, script: str) -> dict:
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", script],
        "securityContext": NON_ROOT,
    }


def sidecar_job(name: str, image: str, *, sidecars=(), native_sidecars=()) -> dict:
    """Worker 0 (the chief) writes its run and exits 0 after 8 s; worker 1 exits 0 at once."""
    run = json.dumps(RUN)
    trainer = shell(
        "trainer",
        image,
        f"case \"$TF_CONFIG\" in *'\"index\":0'*) sleep 8; echo '{run}' > /dev/termination-log;; esac; "
        "exit 0",
    )
    pod: dict = {"terminationGracePeriodSeconds": 2, "containers": list(sidecars)}
    if native_sidecars:
        pod["initContainers"] = [dict(c, restartPolicy="Always") for c in native_sidecars]
    return trainjob(name, 2, image=image, container=trainer, template={"spec": pod})


def wait_succeeded(kubectl, namespace: str, name: str) -> dict:
    done = kubectl(
        "wait", "--for=jsonpath={.status.phase}=Succeeded", f"trainjob/{name}", "-n", namespace,
        "--timeout=180s", timeout=200, check=False,
    )  # fmt: skip
    job = kubectl.json("get", "trainjob", name, "-n", namespace)
    assert done.returncode == 0, json.dumps(job.get("status"), indent=1)
    return job


def test_a_sleep_infinity_sidecar_does_not_keep_the_job_running(
    node_operator, node_kubectl, node_namespace, busybox, wait_for
):
    job = sidecar_job("forever", busybox, sidecars=[shell("shipper", busybox, "exec sleep infinity")])
    node_kubectl.apply(job, "-n", node_namespace)
    done = wait_succeeded(node_kubectl, node_namespace, "forever")
    assert done["status"]["mlflow"]["runId"] == "sidecar-run"
    # cleanPodPolicy Running: the pods the sidecar kept running are removed.
    wait_for(
        lambda: not node_kubectl.json("get", "pods", "-n", node_namespace)["items"],
        timeout=120,
        what="the sidecar-held pods removed",
    )


def test_a_sidecar_failing_after_the_trainer_succeeded_does_not_fail_the_job(
    node_operator, node_kubectl, node_namespace, busybox
):
    # Every worker's log shipper exits 1 two seconds in: worker 1's pod is Failed while the chief still runs.
    job = sidecar_job("flaky", busybox, sidecars=[shell("shipper", busybox, "sleep 2; exit 1")])
    node_kubectl.apply(job, "-n", node_namespace)
    done = wait_succeeded(node_kubectl, node_namespace, "flaky")
    assert done["status"]["restarts"] == 0


def test_a_native_sidecar_is_allowed(node_operator, node_kubectl, node_namespace, busybox):
    job = sidecar_job("native", busybox, native_sidecars=[shell("proxy", busybox, "exec sleep infinity")])
    node_kubectl.apply(job, "-n", node_namespace)
    done = wait_succeeded(node_kubectl, node_namespace, "native")
    assert done["status"]["mlflow"]["runId"] == "sidecar-run"


def failed_condition(kubectl, namespace: str, name: str) -> Condition:
    done = kubectl(
        "wait", "--for=condition=Failed", f"trainjob/{name}", "-n", namespace, "--timeout=300s",
        timeout=320, check=False,
    )  # fmt: skip
    job = kubectl.json("get", "trainjob", name, "-n", namespace)
    assert done.returncode == 0, json.dumps(job.get("status"), indent=1)
    return condition(job, "Failed")


def test_the_kubelets_image_errors_fail_the_job_with_its_message(
    node_operator, node_kubectl, node_namespace, busybox
):
    """The real kubelet's reasons: a reference it cannot parse fails at once; an image no registry serves
    (`.invalid` never resolves) fails once ErrImagePull/ImagePullBackOff has lasted the job's
    containerErrorGraceSeconds (10 s here; 120 by default)."""
    images = {"unparsable": "ghcr.io/MWMS/Trainer:1", "unpullable": "registry.invalid/mwms/x:1"}
    for name, image in images.items():
        job = sidecar_job(name, busybox)
        job["spec"]["template"]["spec"]["containers"][0]["image"] = image
        job["spec"]["runPolicy"] = {"startupTimeoutSeconds": 3600, "containerErrorGraceSeconds": 10}
        node_kubectl.apply(job, "-n", node_namespace)
    unparsable = failed_condition(node_kubectl, node_namespace, "unparsable")
    assert unparsable.reason == "ContainerError"
    assert "container trainer: InvalidImageName" in unparsable.message, unparsable
    unpullable = failed_condition(node_kubectl, node_namespace, "unpullable")
    assert unpullable.reason == "ContainerError"
    assert "registry.invalid/mwms/x:1" in unpullable.message, unpullable
    assert "ErrImagePull" in unpullable.message or "ImagePullBackOff" in unpullable.message, unpullable
