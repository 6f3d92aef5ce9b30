"""Prometheus metrics of the operator, served on MWMS_METRICS_PORT."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Mapping
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from mwms_contract.conditions import FAILED, PHASES, SUCCEEDED

# By namespace, so a shared cluster's tenants (and their alerts) see their own jobs.
JOBS = Gauge("mwms_trainjobs", "TrainJobs by namespace and phase", ["namespace", "phase"])
RESTARTS = Counter(
    "mwms_trainjob_group_restarts_total", "Whole-group restarts of TrainJob workers", ["namespace"]
)
SUCCEEDED_JOBS = Counter("mwms_trainjobs_succeeded_total", "TrainJobs that succeeded", ["namespace"])
FAILED_JOBS = Counter("mwms_trainjobs_failed_total", "TrainJobs that failed", ["namespace"])
RECONCILE = Histogram(
    "mwms_reconcile_duration_seconds",
    "Time of one reconcile of one TrainJob (decision plus API calls)",
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
PODS_CREATED = Histogram(
    "mwms_trainjob_pods_created_seconds",
    "Time from a TrainJob's creation until its Service and all worker pods existed",
    buckets=(0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120, 300),
)

# What the operator asks of the API server, as client-go's rest_client_requests_total: its load on the API
# server, and refusals (403, 422) or errors at a glance. "error": no answer (timeout, connection lost).
API_REQUESTS = Counter(
    "mwms_operator_api_requests_total",
    "Requests the operator sent to the Kubernetes API server",
    ["method", "resource", "code"],
)

# 1 on the replica that holds the leader Lease (or runs without election), 0 on a standby.
LEADER = Gauge("mwms_operator_leader", "1 if this operator replica is the leader that reconciles, else 0")
_serving: set[int] = set()


def resource_of(path: str) -> str:
    """`pods`, `services`, `events`, `trainjobs`, `trainjobs/status` from an API path (names and query left
    out, so the series stay few)."""
    parts = path.split("?", 1)[0].strip("/").split("/")
    parts = parts[parts.index("namespaces") + 2 :] if "namespaces" in parts else parts[-1:]
    return "/".join(parts[:1] + parts[2:3])


def count_request(method: str, path: str, code: str) -> None:
    API_REQUESTS.labels(method=method, resource=resource_of(path), code=code).inc()


def count_transitions(namespace: str, previous: Mapping[str, Any], status: Mapping[str, Any]) -> None:
    """Count what a status write changed: a group restart, a job that finished. Counted on the write that
    made the change, so an operator restart (which rereads finished jobs) counts nothing twice."""
    if int(status.get("restarts") or 0) > int(previous.get("restarts") or 0):
        RESTARTS.labels(namespace=namespace).inc()
    phase = status.get("phase")
    if phase != previous.get("phase"):
        if phase == SUCCEEDED:
            SUCCEEDED_JOBS.labels(namespace=namespace).inc()
        elif phase == FAILED:
            FAILED_JOBS.labels(namespace=namespace).inc()


class PhaseBook:
    """The last phase of every TrainJob, to publish counts by namespace and phase."""

    def __init__(self) -> None:
        self.phases: dict[str, tuple[str, str]] = {}  # uid -> (namespace, phase)
        self.published: set[str] = set()  # namespaces with series

    def set(self, uid: str, phase: str, namespace: str) -> None:
        self.phases[uid] = (namespace, phase)
        self.publish()

    def forget(self, uid: str) -> None:
        if self.phases.pop(uid, None) is not None:
            self.publish()

    def publish(self) -> None:
        counts = Tally(self.phases.values())
        namespaces = {namespace for namespace, _ in self.phases.values()}
        for namespace in namespaces:
            for phase in PHASES:
                JOBS.labels(namespace=namespace, phase=phase).set(counts.get((namespace, phase), 0))
        for namespace in self.published - namespaces:  # its last job is gone: no series of zeros forever
            for phase in PHASES:
                JOBS.remove(namespace, phase)
        self.published = namespaces


def serve(port: int) -> None:
    """Once per process: a standby starts it before it leads, the startup handler again when it does."""
    if port not in _serving:
        start_http_server(port)
        _serving.add(port)
