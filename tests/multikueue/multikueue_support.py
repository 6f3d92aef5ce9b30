"""What the multikueue tier's fixtures and tests share: the names of the queue set-up, and reads of what is
on a cluster."""

from __future__ import annotations

import json
from typing import Any

QUEUE = "mwms-queue"  # the LocalQueue of each test's namespace, on both clusters
MANAGER_QUEUE, WORKER_QUEUE = "manager-cq", "worker-cq"  # the ClusterQueues
WORKLOADS = "workloads.kueue.x-k8s.io"


def found(kubectl: Any, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
    """The object, or None when there is none."""
    where = ["-n", namespace] if namespace else []
    result = kubectl("get", kind, name, *where, "-o", "json", check=False)
    if result.returncode != 0:
        assert "NotFound" in result.stderr, result.stderr
        return None
    loaded: dict[str, Any] = json.loads(result.stdout)
    return loaded


def items(kubectl: Any, kind: str, namespace: str) -> list[dict[str, Any]]:
    return kubectl.json("get", kind, "-n", namespace)["items"]


def active(kubectl: Any, kind: str, name: str, namespace: str | None = None) -> bool:
    """Kueue's `Active` condition of the object is True."""
    status = (found(kubectl, kind, name, namespace) or {}).get("status", {})
    return any(c["type"] == "Active" and c["status"] == "True" for c in status.get("conditions", []))


def usage(kubectl: Any, cluster_queue: str) -> tuple[int, int]:
    """(reserving, admitted) Workloads of a ClusterQueue."""
    status = kubectl.json("get", "clusterqueue", cluster_queue).get("status", {})
    return status.get("reservingWorkloads", 0), status.get("admittedWorkloads", 0)
