"""`mwms describe` and `mwms events`: why a job is where it is, without `kubectl describe` on each pod.

The job's Events and its pods' (the operator's refusals and restarts, the scheduler's and the kubelet's), each
worker's pod state and last reason, the conditions and the MLflow run, read from the API server as plain
dicts (pure functions below, the reads in kube.py). Where the pods or their events are gone, the post-mortem
the operator kept in the job's run says how each worker ended and what happened (history.py); with the job
gone too, `describe --run RUN_ID` reads it alone.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from mwms.follow import worker_pod
from mwms.history import events_of, postmortems
from mwms.jobs import Job, job_from
from mwms.kube import JobClient, SubmitError
from mwms.output import age, progress_text, table
from mwms.tracking_server import SET_IT, TrackingServer, TrackingUnreachable
from mwms_contract import names
from mwms_contract.postmortem import EventSeen, Postmortem, WorkerEnd, event_seen

# One Event of the job or one of its pods (`object`: trainjob/NAME or pod/NAME-worker-I), as the post-mortem
# keeps it too.
Event = EventSeen

RECENT_EVENTS = 20  # what `describe` shows; `mwms events` shows them all
PEAK_READS_AT_ONCE = 8  # metric histories read side by side for the Peaks section


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
    started_at: str | None = None
    finished_at: str | None = None
    kept: bool = False  # from the post-mortem kept in the run (its pod was gone)


@dataclass(frozen=True)
class Description:
    job: Job
    workers: tuple[WorkerState, ...] = ()
    events: tuple[Event, ...] = field(default_factory=tuple)
    kept: str = ""  # what came from the run's post-mortem (or why it could not be read)
    # worker index -> its peaks of names.SYSTEM_METRICS_PEAKS, from the system metrics in the run
    peaks: Mapping[int, Mapping[str, float]] = field(default_factory=dict)
    peaks_note: str = ""  # why the peaks could not be read

    def to_dict(self) -> dict[str, Any]:
        """For `-o json|yaml`: the object as the API server gave it, the workers, the Events, the peaks."""
        return {
            "trainjob": self.job.raw,
            "workers": [asdict(w) for w in self.workers],
            "events": [asdict(e) for e in self.events],
            **({"kept": self.kept} if self.kept else {}),
            **({"peaks": {str(i): dict(p) for i, p in self.peaks.items()}} if self.peaks else {}),
            **({"peaksNote": self.peaks_note} if self.peaks_note else {}),
        }


def _when(value: Any) -> str | None:
    if isinstance(value, datetime.datetime):
        return value.astimezone(datetime.UTC).isoformat().replace("+00:00", "Z")
    return None if value is None else str(value)


def is_the_jobs(raw: Mapping[str, Any], name: str, uid: str) -> bool:
    """Whether an Event is about the job (this one, by uid, not an earlier one of its name) or its pods."""
    involved = raw.get("involvedObject") or {}
    if involved.get("kind") == names.KIND and involved.get("name") == name:
        return not uid or not involved.get("uid") or involved.get("uid") == uid
    pod = re.fullmatch(rf"{re.escape(name)}-worker-\d+", str(involved.get("name") or ""))
    return involved.get("kind") == "Pod" and pod is not None


def job_events(api: JobClient, name: str, uid: str = "") -> list[Event]:
    """The job's Events and its pods', oldest first."""
    found = [event_seen(raw) for raw in api.list_events() if is_the_jobs(raw, name, uid)]
    return sorted(found, key=lambda e: e.last_seen or "")


def worker_state(index: int, pod: Mapping[str, Any] | None) -> WorkerState:
    """Worker `index`'s state from its pod (as the client's to_dict() gives it; None when there is none)."""
    if pod is None:
        return WorkerState(index=index)
    metadata, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    group = (metadata.get("labels") or {}).get(names.LABEL_RESTART)
    state, reason, message, code, restarts = "", "", "", None, 0
    started = finished = None
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
                started, finished = _when(detail.get("started_at")), _when(detail.get("finished_at"))
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
        started_at=started,
        finished_at=finished,
    )


def kept_worker(end: WorkerEnd) -> WorkerState:
    """A worker as the post-mortem kept it."""
    return WorkerState(
        index=end.index,
        pod=end.pod,
        group=end.group,
        phase=end.phase,
        state=end.state,
        reason=end.reason,
        message=end.message,
        exit_code=end.exit_code,
        container_restarts=end.restarts,
        node=end.node,
        started_at=end.started_at,
        finished_at=end.finished_at,
        kept=True,
    )


def kept_line(newest: Postmortem, run_id: str, server: TrackingServer) -> str:
    """Where what a description read from a run's post-mortem comes from."""
    cut = f"; cut to stay small: {'; '.join(newest.cut)}" if newest.cut else ""
    return (
        f"the post-mortem of group {newest.group} ({newest.written_at}) kept in MLflow run {run_id}, "
        f"{server.where}{cut}"
    )


def describe_job(api: JobClient, job: Job, server: TrackingServer | None = None) -> Description:
    """The job now; workers whose pods are gone and events the API server no longer has are those of the
    post-mortems in its run (on `server`: the job's tracking server), when it has any."""
    pods = {
        (pod.get("metadata") or {}).get("name"): pod
        for pod in api.list_pods(f"{names.LABEL_JOB_NAME}={job.name}")
    }
    workers = [worker_state(i, pods.get(worker_pod(job.name, i))) for i in range(job.replicas)]
    events = [*job_events(api, job.name, job.uid)]
    gone = [w.index for w in workers if w.pod is None]
    if not (gone or not events) or not job.mlflow.run_id or server is None:
        return Description(job=job, workers=tuple(workers), events=tuple(events))
    try:
        kept = postmortems(server, job.mlflow.run_id)
    except SubmitError as e:
        return Description(
            job, tuple(workers), tuple(events), f"the run's post-mortems could not be read: {e}"
        )
    if not kept:
        return Description(job=job, workers=tuple(workers), events=tuple(events))
    ended = {w.index: kept_worker(w) for w in kept[0].workers}
    workers = [ended.get(w.index, w) if w.index in gone else w for w in workers]
    used = ["the workers marked *"] if any(w.kept for w in workers) else []
    if not events:
        events, used = events_of(kept), [*used, "the events"]
    line = f"{' and '.join(used)} from {kept_line(kept[0], job.mlflow.run_id, server)}" if used else ""
    return Description(job, tuple(workers), tuple(events), line)


def with_peaks(d: Description, server: TrackingServer | None) -> Description:
    """`d` with each worker's peaks from the system metrics it logged into the job's run (the highest value
    of each of names.SYSTEM_METRICS_PEAKS), or with why they could not be read."""
    run_id = d.job.mlflow.run_id
    if server is None or not run_id:
        return d

    def highest(index: int, metric: str) -> float | None:
        key = f"{names.SYSTEM_METRICS_PREFIX}{names.system_metrics_node_id(index)}/{metric}"
        query = {"run_id": run_id, "metric_key": key, "max_results": 25000}
        history = server.api_json("metrics/get-history", query) or {}
        return max((float(m["value"]) for m in history.get("metrics") or [] if "value" in m), default=None)

    asked = [(w.index, metric) for w in d.workers for metric in names.SYSTEM_METRICS_PEAKS]
    peaks: dict[int, dict[str, float]] = {}
    try:
        with ThreadPoolExecutor(max_workers=PEAK_READS_AT_ONCE) as pool:  # one read per worker and metric
            for (index, metric), value in zip(asked, pool.map(lambda a: highest(*a), asked), strict=True):
                if value is not None:
                    peaks.setdefault(index, {})[metric] = value
    except SubmitError as e:
        return dataclasses.replace(d, peaks_note=f"the workers' system metrics could not be read: {e}")
    # Each worker logs at least once, as it ends: in an ended job, one without any had its writes fail.
    ended = d.job.phase in ("Succeeded", "Failed")
    missing = [str(w.index) for w in d.workers if ended and peaks and w.index not in peaks]
    if not missing:
        return dataclasses.replace(d, peaks=peaks)
    note = f"none from worker {', '.join(missing)}: its log says why (mwms logs --worker N)"
    return dataclasses.replace(d, peaks=peaks, peaks_note=note)


def job_events_or_kept(api: JobClient, job: Job, server: TrackingServer | None) -> list[Event]:
    """The job's events, or, once the API server has forgotten them, those its run's post-mortems kept."""
    events = job_events(api, job.name, job.uid)
    if events or not job.mlflow.run_id or server is None:
        return events
    return events_of(postmortems(server, job.mlflow.run_id))


# The chart's bundled MLflow Service (charts/mwms-operator: mlflowSelectorLabels).
BUNDLED_SELECTOR = "app.kubernetes.io/name=mlflow,app.kubernetes.io/component=tracking"


def known_servers(api: JobClient, environ: Mapping[str, str]) -> list[str]:
    """Where a run whose job is gone may be: this machine's MLFLOW_TRACKING_URI, the servers the namespace's
    jobs name, the chart's bundled MLflow (each once, in that order)."""
    found = [environ.get(names.ENV_TRACKING_URI) or ""]
    found += [job_from(obj).mlflow.tracking_uri or "" for obj in api.list_trainjobs()]
    for service in api.list_services(BUNDLED_SELECTOR):
        meta, ports = service.get("metadata") or {}, (service.get("spec") or {}).get("ports") or [{}]
        found.append(f"http://{meta.get('name')}.{meta.get('namespace')}.svc:{ports[0].get('port') or 80}")
    return list(dict.fromkeys(uri for uri in found if uri))


def describe_run(run_id: str, servers: list[TrackingServer]) -> Description:
    """A job known only by its MLflow run (the TrainJob may be deleted): from the newest post-mortem the run
    keeps, on the first of `servers` that has the run."""
    failures = []
    for server in servers:
        try:
            run = server.run(run_id)
            if run is None:
                failures.append(f"{server.where}: no such run")
                continue
            kept = postmortems(server, run_id)
        except (TrackingUnreachable, SubmitError) as e:
            failures.append(str(e))
            continue
        if not kept:  # the job as the run's tags name it
            tags = {t.get("key"): t.get("value") for t in (run.get("data") or {}).get("tags") or []}
            name, namespace = (
                tags.get(t) or "" for t in (names.MLFLOW_TAG_JOB_NAME, names.MLFLOW_TAG_JOB_NAMESPACE)
            )
            why = (
                f"nothing: run {run_id} ({server.where}) keeps no post-mortem (no group of its job ended "
                "under an operator that writes them)"
            )
            return Description(job=job_from({"metadata": {"name": name, "namespace": namespace}}), kept=why)
        workers = tuple(kept_worker(w) for w in kept[0].workers)
        events = tuple(events_of(kept))
        line = f"all of it from {kept_line(kept[0], run_id, server)}"
        return Description(job_from(kept[0].trainjob), workers, events, line)
    tried = "; ".join(failures) or "no tracking server is known"
    raise SubmitError(f"MLflow run {run_id} was not found ({tried}): {SET_IT}")


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
    if run.tracking_uri:
        lines.append(f"  Tracking URI: {run.tracking_uri}")
    if progress is not None and progress.epoch is not None:
        metrics = " ".join(f"{k}={v:.4f}" for k, v in sorted(progress.metrics.items()))
        lines.append(f"  Progress:     {progress_text(progress)} {metrics}".rstrip())
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
                f"{w.index}{'*' if w.kept else ''}",
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
    if d.kept:
        lines.append(f"Kept: {d.kept}")
    if d.peaks or d.peaks_note:
        lines.append(
            "Peaks (each worker's system metrics in the run):" + (f"  {d.peaks_note}" if d.peaks_note else "")
        )
        rows = [["WORKER", "CPU (cores)", "MEMORY (MB)"]]
        for index, peak in sorted(d.peaks.items()):
            cpu, memory = (peak.get(metric) for metric in names.SYSTEM_METRICS_PEAKS)
            rows.append(
                [str(index), "" if cpu is None else f"{cpu:.2f}", "" if memory is None else f"{memory:.0f}"]
            )
        if d.peaks:
            lines += ["  " + row for row in table(rows).splitlines()]
    recent = d.events[-RECENT_EVENTS:]
    lines.append("Events:" + ("  <none>" if not recent else ""))
    if recent:
        lines += ["  " + row for row in events_table(recent, now).splitlines()]
    return "\n".join(lines)
