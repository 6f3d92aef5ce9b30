"""`mwms describe` and `mwms events`: why a job is where it is, without `kubectl describe` on each pod.

The job's Events and its pods' (the operator's refusals and restarts, the scheduler's and the kubelet's), each
worker's pod state and last reason, the conditions and the MLflow run, read from the API server as plain
dicts (pure functions below, the reads in kube.py).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from mwms.follow import worker_pod
from mwms.jobs import Job
from mwms.kube import JobClient
from mwms.output import age, table
from mwms_contract import names

RECENT_EVENTS = 20  # what `describe` shows; `mwms events` shows them all


@dataclass(frozen=True)
class Event:
    """One Event of the job or one of its pods (`object`: trainjob/NAME or pod/NAME-worker-I)."""

    type: str
    reason: str
    message: str
    object: str
    count: int = 1
    last_seen: str | None = None
    source: str = ""


@dataclass(frozen=True)
class WorkerState:
    """Worker `index`'s pod now: the group it belongs to, its phase, the trainer container's state and why."""

    index: int
    pod: str | None = None  # None: no pod (not created yet, or gone)
    group: int | None = None
    phase: str = ""
    state: str = ""  # Running, Waiting, Terminated (the trainer container's), or "" before it exists
    reason: str = ""  # the last reason: the container's, else the pod's (Unschedulable, Evicted)
    message: str = ""
    exit_code: int | None = None
    container_restarts: int = 0
    node: str | None = None


@dataclass(frozen=True)
class Description:
    job: Job
    workers: tuple[WorkerState, ...] = ()
    events: tuple[Event, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        """For `-o json|yaml`: the object as the API server gave it, the workers and the Events."""
        return {
            "trainjob": self.job.raw,
            "workers": [asdict(w) for w in self.workers],
            "events": [asdict(e) for e in self.events],
        }


def _when(value: Any) -> str | None:
    if isinstance(value, datetime.datetime):
        return value.astimezone(datetime.UTC).isoformat().replace("+00:00", "Z")
    return None if value is None else str(value)


def event_of(raw: Mapping[str, Any]) -> Event:
    """An Event as the kubernetes client's to_dict() gives it."""
    involved = raw.get("involved_object") or {}
    series = raw.get("series") or {}
    last = (
        series.get("last_observed_time")
        or raw.get("last_timestamp")
        or raw.get("event_time")
        or raw.get("first_timestamp")
        or (raw.get("metadata") or {}).get("creation_timestamp")
    )
    source = raw.get("reporting_component") or (raw.get("source") or {}).get("component") or ""
    return Event(
        type=raw.get("type") or "Normal",
        reason=raw.get("reason") or "",
        message=(raw.get("message") or "").strip(),
        object=f"{str(involved.get('kind') or '').lower()}/{involved.get('name') or ''}",
        count=int(series.get("count") or raw.get("count") or 1),
        last_seen=_when(last),
        source=str(source),
    )


def is_the_jobs(raw: Mapping[str, Any], name: str, uid: str) -> bool:
    """Whether an Event is about the job (this one, by uid, not an earlier one of its name) or its pods."""
    involved = raw.get("involved_object") or {}
    if involved.get("kind") == names.KIND and involved.get("name") == name:
        return not uid or not involved.get("uid") or involved.get("uid") == uid
    pod = re.fullmatch(rf"{re.escape(name)}-worker-\d+", str(involved.get("name") or ""))
    return involved.get("kind") == "Pod" and pod is not None


def job_events(api: JobClient, name: str, uid: str = "") -> list[Event]:
    """The job's Events and its pods', oldest first."""
    found = [event_of(raw) for raw in api.list_events() if is_the_jobs(raw, name, uid)]
    return sorted(found, key=lambda e: e.last_seen or "")


def worker_state(index: int, pod: Mapping[str, Any] | None) -> WorkerState:
    """Worker `index`'s state from its pod (as the client's to_dict() gives it; None when there is none)."""
    if pod is None:
        return WorkerState(index=index)
    metadata, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    group = (metadata.get("labels") or {}).get(names.LABEL_RESTART)
    state, reason, message, code, restarts = "", "", "", None, 0
    for container in status.get("container_statuses") or []:
        if container.get("name") != names.CONTAINER_NAME:
            continue
        restarts = int(container.get("restart_count") or 0)
        for kind in ("running", "waiting", "terminated"):
            detail = (container.get("state") or {}).get(kind)
            if detail:
                state = kind.capitalize()
                reason, message = detail.get("reason") or "", (detail.get("message") or "").strip()
                code = detail.get("exit_code")
        if not reason:  # running now: why it ran before, if it did
            last = (container.get("last_state") or {}).get("terminated") or {}
            reason, code = last.get("reason") or "", last.get("exit_code", code)
    if not reason:
        reason, message = status.get("reason") or "", (status.get("message") or "").strip()
    if not reason:
        for condition in status.get("conditions") or []:
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                reason, message = condition.get("reason") or "", (condition.get("message") or "").strip()
    return WorkerState(
        index=index,
        pod=metadata.get("name"),
        group=None if group is None else int(group),
        phase=status.get("phase") or "",
        state=state,
        reason=reason,
        message=message,
        exit_code=code,
        container_restarts=restarts,
        node=spec.get("node_name"),
    )


def describe_job(api: JobClient, job: Job) -> Description:
    pods = {
        (pod.get("metadata") or {}).get("name"): pod
        for pod in api.list_pods(f"{names.LABEL_JOB_NAME}={job.name}")
    }
    workers = tuple(worker_state(i, pods.get(worker_pod(job.name, i))) for i in range(job.replicas))
    return Description(job=job, workers=workers, events=tuple(job_events(api, job.name, job.uid)))


# -- text for people ---------------------------------------------------------------------------------------


def events_table(events: Sequence[Event], now: datetime.datetime) -> str:
    rows = [["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]]
    for e in events:
        seen = age(e.last_seen, now) + (f" (x{e.count})" if e.count > 1 else "")
        rows.append([seen, e.type, e.reason, e.object, e.message.splitlines()[0] if e.message else ""])
    return table(rows)


def render(d: Description, now: datetime.datetime) -> str:
    job, run, progress = d.job, d.job.mlflow, d.job.progress
    lines = [
        f"Name:         {job.name}",
        f"Namespace:    {job.namespace}",
        f"Phase:        {job.phase}",
        f"Replicas:     {job.replicas}",
        f"Restarts:     {job.restarts}",
        f"Created:      {job.created or '<unknown>'} ({age(job.created, now)} ago)",
        "MLflow:",
        f"  Run ID:       {run.run_id or '<none>'}",
        f"  Experiment:   {run.experiment_id or '<none>'}",
        f"  Model URI:    {run.model_uri or '<none>'}",
    ]
    if progress is not None and progress.epoch is not None:
        metrics = " ".join(f"{k}={v:.4f}" for k, v in sorted(progress.metrics.items()))
        lines.append(f"  Progress:     epoch {progress.epoch}/{progress.epochs or '?'} {metrics}".rstrip())
    lines.append("Conditions:")
    if job.conditions:
        rows = [["TYPE", "STATUS", "REASON", "SINCE", "MESSAGE"]]
        rows += [
            [c.type, c.status, c.reason, age(c.last_transition_time, now), c.message.replace("\n", " ")]
            for c in job.conditions
        ]
        lines += ["  " + row for row in table(rows).splitlines()]
    else:
        lines.append("  <none>")
    lines.append("Workers:")
    rows = [["WORKER", "POD", "GROUP", "PHASE", "STATE", "REASON", "EXIT", "NODE", "MESSAGE"]]
    for w in d.workers:
        rows.append(
            [
                str(w.index),
                w.pod or "<none>",
                "" if w.group is None else str(w.group),
                w.phase,
                w.state,
                w.reason,
                "" if w.exit_code is None else str(w.exit_code),
                w.node or "",
                w.message.splitlines()[0] if w.message else "",
            ]
        )
    lines += ["  " + row for row in table(rows).splitlines()]
    recent = d.events[-RECENT_EVENTS:]
    lines.append("Events:" + ("  <none>" if not recent else ""))
    if recent:
        lines += ["  " + row for row in events_table(recent, now).splitlines()]
    return "\n".join(lines)
