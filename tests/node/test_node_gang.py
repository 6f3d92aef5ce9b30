"""Native gang scheduling on the real node (every test cluster runs with the GenericWorkload gate on): a job
of 4 workers sized so that the node has room for 3 of them (a blocker pod takes the rest of its CPU) binds
none, and its status names why: the scheduler's reason and how many workers fit. Once room appears (the
blocker deleted) all 4 bind together and the job succeeds."""

from __future__ import annotations

import json
from typing import Any

from mwms_kit.standin import standin_container
from mwms_kit.trainjobs import trainjob
from mwms_kit.waits import condition, get_job, pods_of, wait_condition

REPLICAS = 4
NODE = "node-1"


def millicores(quantity: str) -> int:
    return int(quantity[:-1]) if quantity.endswith("m") else int(float(quantity) * 1000)


def requested_cpu(pod: dict[str, Any]) -> int:
    """What the scheduler counts for a pod: its containers' CPU requests, or its largest init container's."""

    def cpu(container: dict[str, Any]) -> int:
        return millicores(((container.get("resources") or {}).get("requests") or {}).get("cpu", "0"))

    spec = pod["spec"]
    return max(sum(map(cpu, spec["containers"])), max(map(cpu, spec.get("initContainers") or []), default=0))


def free_cpu(kubectl: Any) -> int:
    """The node's allocatable CPU less what the pods bound to it request (millicores)."""
    allocatable = millicores(kubectl.json("get", "node", NODE)["status"]["allocatable"]["cpu"])
    selector = f"spec.nodeName={NODE},status.phase!=Succeeded,status.phase!=Failed"
    pods = kubectl.json("get", "pods", "-A", "--field-selector", selector)["items"]
    return allocatable - sum(requested_cpu(pod) for pod in pods)


def blocker(image: str, cpu: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "blocker"},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {"name": "sleep", "image": image, "imagePullPolicy": "IfNotPresent",
                 "command": ["sleep", "3600"], "resources": {"requests": {"cpu": f"{cpu}m"}}},
            ],
        },
    }  # fmt: skip


def test_a_gang_with_room_for_3_of_4_binds_none_says_why_then_binds_all_4_together(
    node_operator, node_kubectl, node_namespace, node_trainer_image, busybox, wait_for
):
    kubectl, namespace = node_kubectl, node_namespace
    free = free_cpu(kubectl)
    worker = free // REPLICAS  # 4 fit in all the room there is
    room = 3 * worker + worker // 2  # what the blocker leaves: room for 3 workers, not 4
    kubectl.apply(blocker(busybox, free - room), "-n", namespace)
    kubectl("wait", "--for=condition=PodScheduled", "pod/blocker", "-n", namespace, "--timeout=60s")
    job = trainjob(
        "gang",
        REPLICAS,
        container={**standin_container(node_trainer_image), "resources": {"requests": {"cpu": f"{worker}m"}}},
        env={"STANDIN_SLEEP_SECONDS": "5"},
    )
    kubectl.apply(job, "-n", namespace)

    def waiting_message() -> str:
        running = condition(get_job(kubectl, namespace, "gang"), "Running")
        return running.message if running is not None and "finds room for" in running.message else ""

    message = wait_for(waiting_message, timeout=120, what="the status to say why the gang waits")
    bound = [
        pod["metadata"]["name"] for pod in pods_of(kubectl, namespace, "gang") if pod["spec"].get("nodeName")
    ]
    assert bound == [], f"workers bound while the gang waits: {bound}; {message}"
    assert f"places the {REPLICAS} workers all at once or none (PodGroup gang-0)" in message, message
    assert "finds room for 3 of them" in message and "Insufficient cpu" in message, message
    assert get_job(kubectl, namespace, "gang")["status"]["phase"] == "Pending"

    kubectl("delete", "pod", "blocker", "-n", namespace, "--grace-period=0", "--force")
    wait_condition(kubectl, namespace, "gang", "Succeeded", timeout=240)
    pods = pods_of(kubectl, namespace, "gang")
    assert sorted(pod["spec"].get("nodeName") for pod in pods) == [NODE] * REPLICAS, json.dumps(pods)[:2000]
    group = kubectl.json("get", "podgroups.scheduling.k8s.io", "gang-0", "-n", namespace)
    scheduled = {c["type"]: c["status"] for c in group["status"]["conditions"]}
    assert scheduled.get("PodGroupInitiallyScheduled") == "True", group["status"]
    assert get_job(kubectl, namespace, "gang")["status"]["restarts"] == 0
