"""Pure: the MWMS cluster spec and each worker's TF_CONFIG (no chief task: worker 0 is the chief)."""

from __future__ import annotations

from typing import Any

from mwms_contract.names import pod_name


def worker_hosts(job_name: str, namespace: str, replicas: int, port: int, cluster_domain: str) -> list[str]:
    """`<job>-worker-<i>.<job>.<ns>.svc[.<domain>]:<port>`: the pod's hostname under the headless Service."""
    suffix = f".{cluster_domain.strip('.')}" if cluster_domain.strip(".") else ""
    return [f"{pod_name(job_name, i)}.{job_name}.{namespace}.svc{suffix}:{port}" for i in range(replicas)]


def tf_config(hosts: list[str], index: int) -> dict[str, Any]:
    if not 0 <= index < len(hosts):
        raise ValueError(f"worker index {index} is outside the cluster of {len(hosts)} workers")
    return {"cluster": {"worker": list(hosts)}, "task": {"type": "worker", "index": index}}
