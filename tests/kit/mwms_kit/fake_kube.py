"""The operator's side of the API server, in memory: FakeKube stands in for mwms_operator.k8s.Kube, Indexes
for kopf's indexes, and the TrainJob and pod bodies watch events carry, for the reconciler's unit tests
(tests/integration/operator runs the real API server)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mwms_kit.trainjobs import trainjob
from mwms_operator.kube.refusals import ApiError, NamespaceEnding, Refused, Rejected
from mwms_operator.observe.pod_states import worker_pod
from mwms_operator.observe.state import JobKey, owner_key

KEY = JobKey("team-a", "mnist", "uid-1")
QUOTA = "exceeded quota: q, requested: pods=1, used: pods=1, limited: pods=1"

MOUNT_EVENT = {
    "type": "Warning",
    "reason": "FailedMount",
    "message": 'MountVolume.SetUp failed for volume "creds" : secret "creds" not found',
    "lastTimestamp": "2026-12-02T10:00:01Z",
}


class FakeKube:
    """Stands in for the operator's API client (mwms_operator.k8s.Kube): answers as the API server would for
    one namespace, as a test sets it, and records every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.rv = 100
        self.refuse_pods: str | None = None
        self.refuse_for_now: dict[str, Refused] = {}  # pod name -> why it is refused (e.g. a quota)
        self.existing_pods: dict[str, str] = {}  # name -> uid
        self.namespace_ending = False
        self.events_refused_as_ending = False  # the namespace began ending after the creates
        self.pod_event_lists: dict[str, list[dict[str, Any]]] = {}  # pod name -> its events
        self.events_forbidden = False  # RBAC without `list` on events: 403
        self.events_time_out = False  # an overloaded control plane: a pod's events lookup times out
        self.events_error: Exception | None = None  # ... or fails with this
        self.patches: list[dict[str, Any]] = []  # every status patch, whole
        self.group_pods: list[dict[str, Any]] = []  # what job_pods answers (a group's post-mortem)
        self.lease_read: Callable[[], Any] = lambda: None  # what get_lease answers (or raises)
        self.lease_write: Callable[[], bool] = lambda: True  # what update_lease and create_lease answer
        self.workloads: dict[str, dict[str, Any]] = {}  # Kueue Workloads created, by name
        self.workload_statuses: list[dict[str, Any]] = []  # what was applied to Workloads' status
        self.refuse_workloads: Exception | None = None  # what create_workload raises

    def create_service(self, namespace: str, body: dict[str, Any]) -> str:
        self.calls.append(("create_service", body["metadata"]["name"]))
        if self.namespace_ending:
            raise NamespaceEnding(f"unable to create new content in namespace {namespace} because ...")
        return "svc-uid"

    def create_pod(self, namespace: str, body: dict[str, Any], *, dry_run: bool = False) -> str:
        name = body["metadata"]["name"]
        if self.namespace_ending:
            self.calls.append(("create_pod", name))
            raise NamespaceEnding(f"unable to create new content in namespace {namespace} because ...")
        if self.refuse_pods:
            raise Rejected(self.refuse_pods)
        if dry_run:
            self.calls.append(("dry_run_pod", name))
        if name in self.refuse_for_now:
            raise self.refuse_for_now[name]
        if not dry_run:
            self.calls.append(("create_pod", name))
        labels = body["metadata"]["labels"]  # the uid pod_body gives the pod the watch then reports
        return f"pod-{labels['mwms.dev/replica-index']}-{labels['mwms.dev/restart']}"

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        self.calls.append(("delete_pod", name))
        self.calls.append(("delete_pod_uid", uid))

    def delete_pods(self, namespace: str, labels: str, fields: str) -> None:
        self.calls.append(("delete_pods", (labels, fields)))

    def delete_trainjob(self, namespace: str, name: str, uid: str) -> None:
        self.calls.append(("delete_trainjob", (name, uid)))

    def pod_uid(self, namespace: str, name: str) -> str | None:
        self.calls.append(("pod_uid", name))
        return self.existing_pods.get(name)

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("patch_status", status.get("phase")))
        self.patches.append(status)
        self.rv += 1
        return {"metadata": {"resourceVersion": str(self.rv)}, "status": status}

    def post_event(self, job: Any, type_: str, reason: str, message: str) -> None:
        if self.events_refused_as_ending:
            raise NamespaceEnding("unable to create new content in namespace ... because ...")
        self.calls.append(("event", reason))

    def pod_events(self, namespace: str, name: str, uid: str, kind: str = "Pod") -> list[dict[str, Any]]:
        self.calls.append(("pod_events", (name, uid)))
        if self.events_forbidden:
            raise ApiError(403, 'events is forbidden: cannot list resource "events"')
        if self.events_time_out:
            raise TimeoutError("timed out")
        if self.events_error is not None:
            raise self.events_error
        return self.pod_event_lists.get(name, [])

    def create_workload(self, namespace: str, body: dict[str, Any]) -> str | None:
        name = body["metadata"]["name"]
        self.calls.append(("create_workload", name))
        if self.refuse_workloads is not None:
            raise self.refuse_workloads
        if name in self.workloads:
            return None
        self.workloads[name] = body
        return f"uid-of-{name}"

    def apply_workload_status(self, namespace: str, name: str, body: dict[str, Any]) -> None:
        self.calls.append(("apply_workload_status", name))
        self.workload_statuses.append(body)

    def job_pods(self, namespace: str, job_uid: str, restart: int) -> list[dict[str, Any]]:
        self.calls.append(("job_pods", (job_uid, restart)))
        if self.events_error is not None:
            raise self.events_error
        return self.group_pods

    def get_lease(self, namespace: str, name: str, *, timeout: float) -> Any:
        self.calls.append(("get_lease", timeout))
        return self.lease_read()

    def update_lease(self, namespace: str, body: Any, *, timeout: float) -> bool:
        self.calls.append(("update_lease", timeout))
        return self.lease_write()

    create_lease = update_lease

    def named(self, call: str) -> list[Any]:
        return [arg for name, arg in self.calls if name == call]


def job_body(replicas: int = 2, key: JobKey = KEY, **spec: Any) -> dict[str, Any]:
    """The TrainJob as a watch event carries it: stored, so with a uid, generation and resourceVersion."""
    stored = {"uid": key.uid, "generation": 1, "resourceVersion": "50"}
    stored["creationTimestamp"] = "2026-12-02T10:00:00Z"
    return trainjob(key.name, replicas, namespace=key.namespace, metadata=stored, **spec)


def pod_body(index: int, restart: int = 0, phase: str = "Pending", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": f"{KEY.name}-worker-{index}",
        "uid": f"pod-{index}-{restart}",
        "namespace": KEY.namespace,
        "labels": {
            "mwms.dev/job-name": KEY.name,
            "mwms.dev/replica-index": str(index),
            "mwms.dev/restart": str(restart),
            "mwms.dev/job-uid": KEY.uid,
        },
        "ownerReferences": [{"kind": "TrainJob", "name": KEY.name, "uid": KEY.uid, "controller": True}],
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-12-02T10:00:05Z"
    return {"metadata": meta, "status": {"phase": phase}}


def mounting_pod(index: int) -> dict[str, Any]:
    """A pod the kubelet cannot start: scheduled, its Secret volume does not mount."""
    body = pod_body(index)
    body["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
    body["status"]["containerStatuses"] = [
        {"name": "trainer", "state": {"waiting": {"reason": "ContainerCreating"}}}
    ]
    return body


class Indexes:
    """kopf's two indexes as the handlers fill them, from pod and Service bodies."""

    def __init__(self) -> None:
        self.pods: dict[tuple[str, str], list[Any]] = {}
        self.services: dict[tuple[str, str], list[str]] = {}

    def pod(self, body: dict[str, Any]) -> None:
        key = owner_key(body)
        self.pods.setdefault((key.namespace, key.uid), []).append(worker_pod(body))
