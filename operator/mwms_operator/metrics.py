"""Prometheus metrics of the operator, served on MWMS_METRICS_PORT."""

from __future__ import annotations

from collections import Counter as Tally

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from mwms_operator.status import FAILED, PENDING, RESTARTING, RUNNING, SUCCEEDED, SUSPENDED

PHASES = (PENDING, RUNNING, RESTARTING, SUCCEEDED, FAILED, SUSPENDED)

JOBS = Gauge("mwms_trainjobs", "TrainJobs by phase", ["phase"])
RESTARTS = Counter("mwms_trainjob_group_restarts_total", "Whole-group restarts of TrainJob workers")
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


class PhaseBook:
    """The last phase of every TrainJob, to publish counts by phase."""

    def __init__(self) -> None:
        self.phases: dict[str, str] = {}

    def set(self, uid: str, phase: str) -> None:
        self.phases[uid] = phase
        self.publish()

    def forget(self, uid: str) -> None:
        if self.phases.pop(uid, None) is not None:
            self.publish()

    def publish(self) -> None:
        counts = Tally(self.phases.values())
        for phase in PHASES:
            JOBS.labels(phase=phase).set(counts.get(phase, 0))


def serve(port: int) -> None:
    start_http_server(port)
