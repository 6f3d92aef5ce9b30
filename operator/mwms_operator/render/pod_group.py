"""Pure: a group's PodGroup (Kubernetes' native gang scheduling), as a plain dict: the scheduler binds the
group's workers all at once or none; one per (re)start of the group, owned by the TrainJob."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mwms_contract import names
from mwms_contract.tf_config import worker_hosts
from mwms_contract.trainjob import TrainJobSpec
from mwms_operator.render.labels import job_labels, owner_reference
from mwms_operator.render.pod import build_worker_pod


def pod_group_name(job_name: str, restart_count: int) -> str:
    """The same name as the group's Kueue pod group: `<job>-<restart>`."""
    return f"{job_name}-{restart_count}"


def build_pod_group(
    *, job_name: str, namespace: str, uid: str, restart_count: int, replicas: int
) -> dict[str, Any]:
    """A gang of `replicas`: MWMS cannot start with fewer workers than all of them."""
    labels = {**job_labels(job_name), names.LABEL_JOB_UID: uid, names.LABEL_RESTART: str(restart_count)}
    return {
        "apiVersion": names.POD_GROUP_API_VERSION,
        "kind": "PodGroup",
        "metadata": {
            "name": pod_group_name(job_name, restart_count),
            "namespace": namespace,
            "labels": labels,
            "ownerReferences": [owner_reference(job_name, uid)],
        },
        "spec": {"schedulingPolicy": {"gang": {"minCount": replicas}}},
    }


def pod_group_selector(job_uid: str, keep_restart: int) -> str:
    """The label selector of the job's PodGroups of every group but one (the job's uid: no other job's)."""
    return f"{names.LABEL_JOB_UID}={job_uid},{names.LABEL_RESTART}!={keep_restart}"


def build_group(
    spec: TrainJobSpec,
    *,
    job_name: str,
    namespace: str,
    uid: str,
    indices: Iterable[int],
    restart_count: int,
    gang: bool,
    cluster_domain: str,
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The worker pods at `indices` of a (re)start of the group, and its PodGroup where `gang` (else None)."""
    hosts = worker_hosts(job_name, namespace, spec.replicas, spec.port, cluster_domain)
    group = pod_group_name(job_name, restart_count) if gang else None
    pods = [
        build_worker_pod(
            spec,
            job_name=job_name,
            namespace=namespace,
            uid=uid,
            index=i,
            hosts=hosts,
            restart_count=restart_count,
            pod_group=group,
        )
        for i in indices
    ]
    if not gang:
        return pods, None
    body = build_pod_group(
        job_name=job_name, namespace=namespace, uid=uid, restart_count=restart_count, replicas=spec.replicas
    )
    return pods, body
