"""Pure: a TrainJob's Kueue Workload, as Kueue's job framework makes one for the kinds it knows: one pod set
of `replicas` workers with their pod template as the operator builds it, in the job's queue, owned by the
job (its deletion takes the Workload with it, and MultiKueue then removes the copy on the worker)."""

from __future__ import annotations

import hashlib
from typing import Any

from mwms_contract.status import truncate
from mwms_contract.trainjob import TrainJobSpec
from mwms_operator.render.labels import owner_reference
from mwms_operator.render.pod import build_worker_pod

KUEUE_API_VERSION = "kueue.x-k8s.io/v1beta2"
POD_SET = "workers"
# The name is also a label value on the worker's copy of the job (kueue.x-k8s.io/prebuilt-workload-name).
MAX_NAME_LENGTH = 63
HASH_LENGTH = 5


def workload_name(job_name: str, uid: str) -> str:
    """`trainjob-<name>-<hash of the uid>`, cut to fit a label value, as Kueue names its jobs' Workloads: a
    job created again under its name gets a Workload of its own."""
    digest = hashlib.sha1(uid.encode()).hexdigest()[:HASH_LENGTH]
    return f"trainjob-{job_name}"[: MAX_NAME_LENGTH - HASH_LENGTH - 1] + f"-{digest}"


def build_workload(
    spec: TrainJobSpec, queue: str, *, job_name: str, namespace: str, uid: str, hosts: list[str]
) -> dict[str, Any]:
    """The Workload of a job in `queue`: what Kueue admits (the workers' requests, node placement) is read
    from the template of worker 0's pod, which every worker shares but for its index."""
    pod = build_worker_pod(
        spec, job_name=job_name, namespace=namespace, uid=uid, index=0, hosts=hosts, restart_count=0
    )
    labels = dict((spec.template.get("metadata") or {}).get("labels") or {})
    template = {"metadata": {"labels": labels} if labels else {}, "spec": pod["spec"]}
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": workload_name(job_name, uid),
            "namespace": namespace,
            "ownerReferences": [owner_reference(job_name, uid)],
        },
        "spec": {
            "queueName": queue,
            "podSets": [{"name": POD_SET, "count": spec.replicas, "template": template}],
        },
    }


def finished_status(name: str, namespace: str, *, succeeded: bool, message: str, time: str) -> dict[str, Any]:
    """What the operator applies to a Workload's status when its job ends: the Finished condition alone, with
    Kueue's reasons (Succeeded, Failed); Kueue owns the rest of the status."""
    condition = {
        "type": "Finished",
        "status": "True",
        "reason": "Succeeded" if succeeded else "Failed",
        "message": truncate(message),
        "lastTransitionTime": time,
    }
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace},
        "status": {"conditions": [condition]},
    }
