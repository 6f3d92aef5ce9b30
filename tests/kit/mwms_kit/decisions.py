"""Factories for the operator's decision tests: a job, its pods, and one decision step at a time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from mwms_kit.trainjobs import trainjob
from mwms_operator.decide.job_status import JobMeta
from mwms_operator.decide.policy import decide
from mwms_operator.observe.pod_states import PodEvents, WorkerPod
from mwms_operator.render.spec import parse_trainjob
from mwms_operator.settings import OperatorConfig

META = JobMeta(name="mnist", namespace="team-a", uid="uid-1", generation=1)
T0 = datetime(2026, 12, 2, 10, 0, 0, tzinfo=UTC)
RUN = '{"runId": "r123", "experimentId": "7", "modelUri": "models:/m/1", "metrics": {"accuracy": 0.97}}'


def spec(replicas=3, **fields):
    return parse_trainjob(trainjob("mnist", replicas, **fields), OperatorConfig().spec_defaults())


def pod(i, phase="Running", restart=0, **kw):
    return WorkerPod(name=f"mnist-worker-{i}", index=i, restart=restart, phase=phase, **kw)


def group(n=3, phase="Running", restart=0):
    return [pod(i, phase, restart) for i in range(n)]


def step(previous, pods, *, at=0, job=None, service=True, disrupted=None):
    return decide(
        META,
        job or spec(),
        pods,
        service_exists=service,
        now=T0 + timedelta(seconds=at),
        previous=previous,
        disrupted=disrupted,
    )


def conditions(decision):
    return {c["type"]: (c["status"], c["reason"]) for c in decision.status["conditions"]}


def running_status():
    first = step(None, [], service=False)
    created = step(first.status, group(phase="Pending"), at=1)
    return step(created.status, group(), at=2).status


NOT_RESOLVING = (
    "Unhealthy: Readiness probe failed: waiting for peers: worker 1 (mnist-worker-1.mnist.team-a.svc:2222): "
    "name does not resolve (Temporary failure in name resolution)"
)


def unjoined(i, note=NOT_RESOLVING, restart=0):
    """A worker whose trainer runs and has not joined its group: its readiness probe says why."""
    return pod(i, restart=restart, trainer_unready=True, events=PodEvents(note=note))


EVICTED = "EvictionByEvictionAPI: Eviction API: evicting"
