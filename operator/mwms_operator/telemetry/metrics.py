"""Prometheus metrics of the operator, served on MWMS_METRICS_PORT. Named by Prometheus' naming guide: one
`mwms_` prefix, base units (seconds), `_total` on counters only; the work queue's and the API client's are
named as client-go's (`workqueue_*`, verb/resource/code), so the dashboards people know read them."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics, start_http_server

from mwms_contract.conditions import (
    BACKOFF_LIMIT_EXCEEDED,
    CONTAINER_ERROR,
    DEADLINE_EXCEEDED,
    FAILED,
    INVALID_SPEC,
    PENDING,
    PHASES,
    REFUSAL_REASONS,
    STARTUP_TIMEOUT,
    SUCCEEDED,
    WORKER_FAILED,
)
from mwms_contract.status import TrainJobStatus, typed
from mwms_operator import __version__

# Why a job failed, as the alerts split it: the platform's fault (a worker could not start, the API server
# refused) pages the platform team; the user's (their code's exit codes, their spec, their limits) does not.
PLATFORM_FAILURE_REASONS = (STARTUP_TIMEOUT, CONTAINER_ERROR, *REFUSAL_REASONS)
USER_FAILURE_REASONS = (WORKER_FAILED, INVALID_SPEC, DEADLINE_EXCEEDED, BACKOFF_LIMIT_EXCEEDED)

# No `<name>_created` gauge beside every counter and histogram: in the text format Prometheus scrapes they are
# series of their own, twice the series for nothing a query reads.
disable_created_metrics()

BUILD_INFO = Gauge("mwms_build_info", "Always 1: the operator's version in its label", ["version"])
BUILD_INFO.labels(version=__version__).set(1)

# By namespace, so a shared cluster's tenants (and their alerts) see their own jobs.
JOBS = Gauge("mwms_trainjobs", "TrainJobs by namespace and phase", ["namespace", "phase"])
QUEUED = Gauge(
    "mwms_trainjobs_queued",
    "Pending TrainJobs whose workers a queue holds back (Kueue's scheduling gate): waiting by design",
    ["namespace"],
)
RESTARTS = Counter(
    "mwms_trainjobs_group_restarts_total", "Whole-group restarts of TrainJob workers", ["namespace"]
)
SUCCEEDED_JOBS = Counter("mwms_trainjobs_succeeded_total", "TrainJobs that succeeded", ["namespace"])
FAILED_JOBS = Counter(
    "mwms_trainjobs_failed_total",
    "TrainJobs that failed, by the reason of their Failed condition (mwms_contract.conditions)",
    ["namespace", "reason"],
)
RECONCILE = Histogram(
    "mwms_reconcile_duration_seconds",
    "Time of one reconcile of one TrainJob (decision plus API calls)",
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
POD_CREATION = Histogram(
    "mwms_trainjobs_pod_creation_duration_seconds",
    "Time from a TrainJob's creation until its Service and all worker pods existed",
    buckets=(0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120, 300),
)

# client-go's workqueue metrics, of the operator's own queues (kube/workqueue.py): `name` is the queue's.
_QUEUE_BUCKETS = (0.001, 0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300)
QUEUE_DEPTH = Gauge(
    "mwms_workqueue_depth", "Keys waiting to be handled (not counting those in hand)", ["name"]
)
QUEUE_ADDS = Counter(
    "mwms_workqueue_adds_total", "Keys added to the queue (a key already waiting is not)", ["name"]
)
QUEUE_LATENCY = Histogram(
    "mwms_workqueue_queue_duration_seconds",
    "Time a key waited in the queue (from its add, or its due time, until a worker took it)",
    ["name"],
    buckets=_QUEUE_BUCKETS,
)
WORK_DURATION = Histogram(
    "mwms_workqueue_work_duration_seconds", "Time a worker spent on one key", ["name"], buckets=_QUEUE_BUCKETS
)
QUEUE_RETRIES = Counter(
    "mwms_workqueue_retries_total", "Keys scheduled again after their handling failed", ["name"]
)

# What the operator asks of the API server (kube/client.py), as the API server's own apiserver_request_*: its
# load, and refusals (403, 422) or errors at a glance. code "error": no answer (timeout, connection lost).
API_REQUESTS = Counter(
    "mwms_api_requests_total",
    "Requests the operator sent to the Kubernetes API server",
    ["verb", "resource", "code"],
)
API_LATENCY = Histogram(
    "mwms_api_request_duration_seconds",
    "Time from sending a request to the API server until its whole answer was read",
    ["verb", "resource"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 15),
)

# What kopf's watches delivered to the handlers, by resource and type: its cost per job, and after a lost
# connection or a 410 Gone whether kopf listed everything again (type "LIST": an object of a listing).
WATCH_EVENTS = Counter(
    "mwms_watch_events_total",
    "Watch events the operator's handlers received (LIST: an object of a (re)listing)",
    ["resource", "type"],
)

# As client-go's leader_election_master_status: 1 on the replica that holds the leader Lease (or runs without
# election), 0 on a standby.
LEADER = Gauge(
    "mwms_leader_election_master_status", "1 if this operator replica is the leader that reconciles, else 0"
)
_serving: set[int] = set()
_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def resource_of(path: str) -> str:
    """`pods`, `services`, `events`, `trainjobs`, `trainjobs/status` from an API path (names and query left
    out, so the series stay few)."""
    parts = path.split("?", 1)[0].strip("/").split("/")
    parts = parts[parts.index("namespaces") + 2 :] if "namespaces" in parts else parts[-1:]
    return "/".join(parts[:1] + parts[2:3])


def verb_of(method: str, path: str) -> str:
    """The Kubernetes verb of a request, as the API server's audit log and metrics name it."""
    parts = path.split("?", 1)[0].strip("/").split("/")
    named = len(parts[parts.index("namespaces") + 2 :]) >= 2 if "namespaces" in parts else False
    if method == "GET":
        return "get" if named else "list"
    if method == "DELETE" and "namespaces" in parts and not named:
        return "deletecollection"
    return _VERBS.get(method, method.lower())


def count_request(method: str, path: str, code: str, seconds: float) -> None:
    verb, resource = verb_of(method, path), resource_of(path)
    API_REQUESTS.labels(verb=verb, resource=resource, code=code).inc()
    API_LATENCY.labels(verb=verb, resource=resource).observe(seconds)


def count_watch_event(resource: str, type_: str | None) -> None:
    """kopf hands the objects of a listing (at start, after a 410 Gone) as events of type None."""
    WATCH_EVENTS.labels(resource=resource, type=type_ or "LIST").inc()


def failed_reason(status: TrainJobStatus | Mapping[str, Any]) -> str:
    condition = typed(status).condition(FAILED)
    return (condition.reason if condition is not None else "") or "Unknown"


def count_transitions(
    namespace: str, previous: TrainJobStatus | Mapping[str, Any], status: TrainJobStatus | Mapping[str, Any]
) -> None:
    """Count what a status write changed: a group restart, a job that finished. Counted on the write that
    made the change, so an operator restart (which rereads finished jobs) counts nothing twice."""
    was, now = typed(previous), typed(status)
    if now.restarts > was.restarts:
        RESTARTS.labels(namespace=namespace).inc()
    if now.phase != was.phase:
        if now.phase == SUCCEEDED:
            SUCCEEDED_JOBS.labels(namespace=namespace).inc()
        elif now.phase == FAILED:
            FAILED_JOBS.labels(namespace=namespace, reason=failed_reason(now)).inc()


def held_by_queue(phase: str, pods: Iterable[Any]) -> bool:
    """A Pending job some of whose workers wait on a scheduling gate (Kueue's, until it admits the group)."""
    return phase == PENDING and any(
        p.phase == PENDING and not p.deleting and p.waiting.startswith("SchedulingGated") for p in pods
    )


class PhaseBook:
    """The last phase of every TrainJob, to publish counts by namespace and phase."""

    def __init__(self) -> None:
        self.phases: dict[str, tuple[str, str]] = {}  # uid -> (namespace, phase)
        self.queued: set[str] = set()  # uids of Pending jobs a queue holds
        self.published: set[str] = set()  # namespaces with series

    def set(self, uid: str, phase: str, namespace: str, *, queued: bool = False) -> None:
        self.phases[uid] = (namespace, phase)
        (self.queued.add if queued else self.queued.discard)(uid)
        self.publish()

    def forget(self, uid: str) -> None:
        self.queued.discard(uid)
        if self.phases.pop(uid, None) is not None:
            self.publish()

    def publish(self) -> None:
        counts = Tally(self.phases.values())
        queued = Tally(self.phases[uid][0] for uid in self.queued if uid in self.phases)
        namespaces = {namespace for namespace, _ in self.phases.values()}
        for namespace in namespaces:
            for phase in PHASES:
                JOBS.labels(namespace=namespace, phase=phase).set(counts.get((namespace, phase), 0))
            QUEUED.labels(namespace=namespace).set(queued.get(namespace, 0))
        for namespace in self.published - namespaces:  # its last job is gone: no series of zeros forever
            for phase in PHASES:
                JOBS.remove(namespace, phase)
            QUEUED.remove(namespace)
        self.published = namespaces


def serve(port: int) -> None:
    """Once per process: a standby starts it before it leads, the startup handler again when it does."""
    if port not in _serving:
        start_http_server(port)
        _serving.add(port)
