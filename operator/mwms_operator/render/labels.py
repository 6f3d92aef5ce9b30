"""Pure: what marks a job's objects as its own (its labels and owner reference) and the selector that finds
its worker pods again by those labels."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from mwms_contract import names
from mwms_contract.conditions import FAILED, SUCCEEDED
from mwms_operator.observe.pod_states import WorkerPod


def job_labels(job_name: str) -> dict[str, str]:
    return {names.LABEL_JOB_NAME: job_name, names.LABEL_MANAGED_BY: names.MANAGED_BY}


def worker_labels(job_name: str, uid: str, index: int, restart_count: int) -> dict[str, str]:
    """A worker pod's: the job's, its index and role, its group (restart) and the job's uid."""
    return {
        **job_labels(job_name),
        names.LABEL_REPLICA_INDEX: str(index),
        names.LABEL_ROLE: names.ROLE_CHIEF if index == 0 else names.ROLE_WORKER,
        names.LABEL_RESTART: str(restart_count),
        names.LABEL_JOB_UID: uid,
    }


def owner_reference(job_name: str, uid: str) -> dict[str, Any]:
    # controller=true: garbage collection removes children with the job, and kubectl shows the owner.
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.KIND,
        "name": job_name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def deletion_selector(
    job_uid: str, pods: Sequence[WorkerPod], doomed: Collection[str]
) -> tuple[str, str] | None:
    """(labelSelector, fieldSelector) of one request that deletes the `doomed` pods (names) of the job with
    this uid, of its `pods` (what the index holds): the job's uid label, so no other job's pod can match (nor
    one of a job created again under the same name), and the groups and indices of the doomed (a job has one
    pod per index, its name). Where every doomed pod was active (cleanPodPolicy Running), one that has
    finished meanwhile is spared, as a pod that finished first is: its final state and logs are kept. None
    if a doomed pod lacks the uid label (an older operator made it): those are deleted one by one."""
    targets = [p for p in pods if p.name in doomed]
    if not targets or any(p.job_uid != job_uid for p in targets):
        return None
    restarts = ",".join(str(r) for r in sorted({p.restart for p in targets}))
    indices = ",".join(str(i) for i in sorted({p.index for p in targets}))
    labels = (
        f"{names.LABEL_JOB_UID}={job_uid},{names.LABEL_RESTART} in ({restarts}),"
        f"{names.LABEL_REPLICA_INDEX} in ({indices})"
    )
    spare_finished = all(p.active for p in targets)
    return labels, ",".join(f"status.phase!={phase}" for phase in (SUCCEEDED, FAILED) if spare_finished)
