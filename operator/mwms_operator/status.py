"""Pure: (spec, pods, now, previous status) -> the new status and what to do about it.

Level-based: every call recomputes everything from the pods that exist, so a missed event, a retried handler
or an operator restart changes nothing. The new status is written before the actions run, so a crash between
the two is repaired by the next call (e.g. pods of an older restart are "stale" and get deleted).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from mwms_operator import constants
from mwms_operator.builders import pod_name
from mwms_operator.spec import SpecError, TrainJobSpec

PENDING, RUNNING, RESTARTING = "Pending", "Running", "Restarting"
SUCCEEDED, FAILED, SUSPENDED = "Succeeded", "Failed", "Suspended"
TERMINAL = (SUCCEEDED, FAILED)
CREATED = "Created"
PODS_CREATED = "PodsCreated"  # the Created condition's reason and the event the handler posts
WAITING_FOR_OLD_PODS = "WaitingForOldPods"
# Conditions that follow the phase: the one of the current phase is True, the others False once set.
PHASE_CONDITIONS = (RUNNING, RESTARTING, SUSPENDED, SUCCEEDED, FAILED)
MAX_MESSAGE = 1024


def format_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclass(frozen=True)
class JobMeta:
    name: str
    namespace: str
    uid: str
    generation: int = 1


@dataclass(frozen=True)
class WorkerPod:
    """What the decision needs to know about one worker pod."""

    name: str
    index: int
    restart: int
    phase: str  # Pending | Running | Succeeded | Failed | Unknown
    deleting: bool = False
    ready: bool = False
    exit_code: int | None = None
    message: str = ""  # the trainer container's termination message
    reason: str = ""  # pod or container reason (Evicted, OOMKilled, Error…)
    waiting: str = ""  # why it is not running yet: the scheduler's reason or the container's waiting reason

    @property
    def active(self) -> bool:
        return self.phase in (PENDING, RUNNING, "Unknown") and not self.deleting

    @property
    def started(self) -> bool:
        return self.phase in (RUNNING, SUCCEEDED, FAILED)


def worker_pod(pod: Mapping[str, Any]) -> WorkerPod | None:
    """A pod dict from the API server as a WorkerPod; None for a pod without our labels."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    try:
        index = int(labels[constants.LABEL_REPLICA_INDEX])
        restart = int(labels.get(constants.LABEL_RESTART, "0"))
    except (KeyError, ValueError):
        return None
    status = pod.get("status") or {}
    trainer: Mapping[str, Any] = next(
        (c for c in status.get("containerStatuses") or [] if c.get("name") == constants.CONTAINER_NAME), {}
    )
    state = trainer.get("state") or {}
    terminated = state.get("terminated") or {}
    waiting_parts = []
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            waiting_parts.append(
                f"{condition.get('reason', 'Unschedulable')}: {condition.get('message', '')}"
            )
    if state.get("waiting"):
        waiting = state["waiting"]
        waiting_parts.append(f"{waiting.get('reason', 'Waiting')}: {waiting.get('message', '')}".rstrip(": "))
    return WorkerPod(
        name=meta.get("name", ""),
        index=index,
        restart=restart,
        phase=status.get("phase") or PENDING,
        deleting=bool(meta.get("deletionTimestamp")),
        ready=any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
        ),
        exit_code=terminated.get("exitCode"),
        message=(terminated.get("message") or "").strip(),
        reason=status.get("reason") or terminated.get("reason") or "",
        waiting="; ".join(part.strip() for part in waiting_parts),
    )


@dataclass(frozen=True)
class CreateService:
    pass


@dataclass(frozen=True)
class CreatePods:
    indices: tuple[int, ...]
    restart_count: int


@dataclass(frozen=True)
class DeletePods:
    names: tuple[str, ...]


@dataclass(frozen=True)
class DeleteJob:
    pass


Action = CreateService | CreatePods | DeletePods | DeleteJob


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass(frozen=True)
class Decision:
    # Our status fields; None means "remove the field" (the handler sends it as a JSON merge patch).
    status: dict[str, Any]
    actions: tuple[Action, ...] = ()
    events: tuple[Event, ...] = ()
    # Set when the whole group of this (re)start has just been seen to exist: for the creation→pods metric.
    all_pods_created: bool = False


@dataclass(frozen=True)
class Failure:
    pod: WorkerPod
    retryable: bool
    description: str


def _truncate(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"


def classify(pod: WorkerPod, *, missing: bool = False) -> Failure:
    """Exit 75 and >= 128 (signals), deleted and evicted pods are retryable; any other exit is permanent."""
    if missing:
        return Failure(pod, True, f"worker {pod.name} was deleted")
    if pod.deleting:
        return Failure(pod, True, f"worker {pod.name} is being deleted")
    code = pod.exit_code
    if code is None:
        reason = pod.reason or "no exit code"
        return Failure(pod, True, f"worker {pod.name} failed ({reason})")
    text = f"worker {pod.name} exited with code {code}"
    if pod.reason and pod.reason not in ("Error", "Completed"):
        text += f" ({pod.reason})"
    if pod.message:
        text += f": {pod.message}"
    return Failure(pod, code == constants.EXIT_RETRYABLE or code >= 128, _truncate(text))


def chief_mlflow(message: str) -> dict[str, str] | None:
    """The chief's termination message: JSON {runId, experimentId, modelUri, metrics}; else None."""
    try:
        data = json.loads(message)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("runId"), str):
        return None
    return {k: str(data[k]) for k in ("runId", "experimentId", "modelUri") if data.get(k) is not None}


def set_condition(
    conditions: list[dict[str, Any]],
    type_: str,
    status: bool,
    reason: str,
    message: str,
    now: datetime,
    generation: int,
) -> None:
    """Update in place; lastTransitionTime changes only when the status does."""
    value = "True" if status else "False"
    for condition in conditions:
        if condition.get("type") == type_:
            if condition.get("status") != value:
                condition["lastTransitionTime"] = format_time(now)
            condition.update(status=value, reason=reason, message=message, observedGeneration=generation)
            return
    conditions.append(
        {
            "type": type_,
            "status": value,
            "reason": reason,
            "message": message,
            "lastTransitionTime": format_time(now),
            "observedGeneration": generation,
        }
    )


class _Builder:
    """Collects the new status, actions and events of one decision."""

    def __init__(self, meta: JobMeta, previous: Mapping[str, Any], now: datetime) -> None:
        self.meta, self.now = meta, now
        self.previous_phase = previous.get("phase")
        self.conditions = [dict(c) for c in previous.get("conditions") or []]
        self.status: dict[str, Any] = {
            "phase": self.previous_phase or PENDING,
            "restarts": int(previous.get("restarts") or 0),
            "startTime": previous.get("startTime"),
            "groupStartTime": previous.get("groupStartTime"),
            "completionTime": previous.get("completionTime"),
            "chiefPod": pod_name(meta.name, 0),
            "mlflow": previous.get("mlflow"),
            "observedGeneration": meta.generation,
        }
        self.actions: list[Action] = []
        self.events: list[Event] = []
        self.all_pods_created = False

    def phase(self, phase: str, reason: str, message: str, *, event_type: str | None = None) -> None:
        self.status["phase"] = phase
        for type_ in PHASE_CONDITIONS:
            if type_ == phase:
                self.condition(type_, True, reason, message)
            elif any(c["type"] == type_ and c["status"] == "True" for c in self.conditions):
                self.condition(type_, False, reason, message)
        if phase != self.previous_phase:
            kind = event_type or ("Warning" if phase in (FAILED, RESTARTING) else "Normal")
            self.events.append(Event(kind, reason, message))

    def condition(self, type_: str, status: bool, reason: str, message: str) -> None:
        set_condition(self.conditions, type_, status, reason, message, self.now, self.meta.generation)

    def finish(self, replicas: dict[str, int]) -> Decision:
        status = dict(self.status, conditions=self.conditions, replicaStatuses=replicas)
        return Decision(status, tuple(self.actions), tuple(self.events), self.all_pods_created)


def _replica_statuses(pods: Sequence[WorkerPod]) -> dict[str, int]:
    live = [p for p in pods if not p.deleting]
    return {
        "active": sum(p.active for p in live),
        "ready": sum(p.phase == RUNNING and p.ready for p in live),
        "succeeded": sum(p.phase == SUCCEEDED for p in live),
        "failed": sum(p.phase == FAILED for p in live),
    }


def _cleanup(spec: TrainJobSpec | None, pods: Sequence[WorkerPod], *, remove_active: bool) -> tuple[str, ...]:
    policy = spec.clean_pod_policy if spec is not None else "Running"
    names = []
    for pod in pods:
        if pod.deleting:
            continue
        if policy == "All" or (pod.active and (policy == "Running" or remove_active)):
            names.append(pod.name)
    return tuple(names)


def decide(
    meta: JobMeta,
    spec: TrainJobSpec | SpecError,
    pods: Iterable[WorkerPod],
    *,
    service_exists: bool,
    now: datetime,
    previous: Mapping[str, Any] | None = None,
    refused: str | None = None,
) -> Decision:
    """`refused`: the API server's message when it refused to create this job's Service or a pod."""
    previous = previous or {}
    b = _Builder(meta, previous, now)
    pods = sorted(pods, key=lambda p: (p.restart, p.index))
    restarts = b.status["restarts"]
    current = [p for p in pods if p.restart == restarts]
    parsed = spec if isinstance(spec, TrainJobSpec) else None

    def terminal(phase: str, reason: str, message: str, *, remove_active: bool = False) -> Decision:
        b.phase(phase, reason, message)
        b.status["completionTime"] = b.status["completionTime"] or format_time(now)
        names = _cleanup(parsed, pods, remove_active=remove_active)
        if names:
            b.actions.append(DeletePods(names))
        return b.finish(_replica_statuses(current))

    # Finished: only cleanup and the TTL remain.
    if b.previous_phase in TERMINAL:
        return _finished(b, parsed, pods, current, now)

    if isinstance(spec, SpecError):
        return terminal(FAILED, "InvalidSpec", f"invalid TrainJob: {spec}; no worker pods were created")
    if refused is not None:
        # The API server validates spec.template more deeply than our parser: its refusal is a spec error too.
        return terminal(
            FAILED,
            "InvalidSpec",
            _truncate(f"invalid TrainJob: the API server refused a worker object: {refused}"),
        )

    if spec.suspend:
        names = tuple(p.name for p in pods if not p.deleting)
        if names:
            b.actions.append(DeletePods(names))
        b.status.update(startTime=None, groupStartTime=None)
        b.phase(SUSPENDED, "Suspended", "spec.runPolicy.suspend is true: worker pods deleted")
        return b.finish(_replica_statuses(current))
    resuming = b.previous_phase == SUSPENDED

    # Set once, even if the workers are so quick that the first look already finds them finished.
    created = {p.index for p in current} >= set(range(spec.replicas))
    if created and not any(c["type"] == CREATED and c["status"] == "True" for c in b.conditions):
        # No event here: the handler posts one `PodsCreated` per batch it really created, naming the pods.
        b.condition(CREATED, True, PODS_CREATED, f"Service and {spec.replicas} worker pods created")
        b.all_pods_created = True

    chief = next((p for p in current if p.index == 0 and not p.deleting), None)
    if chief is not None and chief.phase == SUCCEEDED:
        b.status["mlflow"] = chief_mlflow(chief.message) or b.status["mlflow"]
        run = b.status["mlflow"]["runId"] if b.status["mlflow"] else "unknown (no termination message)"
        return terminal(SUCCEEDED, "ChiefSucceeded", f"worker 0 ({chief.name}) exited 0; MLflow run {run}")

    start = parse_time(b.status["startTime"])
    deadline = spec.active_deadline_seconds
    if start is not None and deadline is not None and now >= start + timedelta(seconds=deadline):
        return terminal(
            FAILED,
            "DeadlineExceeded",
            f"ran longer than spec.runPolicy.activeDeadlineSeconds={deadline}s; worker pods removed",
            remove_active=True,
        )

    # A pod of this group deleted behind our back or gone while the group ran is lost: MWMS cannot continue.
    expecting_pods = b.previous_phase in (PENDING, RUNNING) and not resuming
    failures = [classify(p) for p in current if p.phase == FAILED and not p.deleting]
    if expecting_pods:
        failures += [classify(p) for p in current if p.deleting]
        if b.previous_phase == RUNNING:
            present = {p.index for p in current}
            failures += [
                classify(WorkerPod(pod_name(meta.name, i), i, restarts, "Unknown"), missing=True)
                for i in range(spec.replicas)
                if i not in present
            ]
    if failures:
        permanent = [f for f in failures if not f.retryable]
        if permanent:
            first = min(permanent, key=lambda f: f.pod.index)
            return terminal(FAILED, "WorkerFailed", first.description)
        first = min(failures, key=lambda f: f.pod.index)
        if restarts >= spec.backoff_limit:
            return terminal(
                FAILED,
                "BackoffLimitExceeded",
                _truncate(
                    f"the group was restarted {restarts} times "
                    f"(spec.runPolicy.backoffLimit={spec.backoff_limit}); last failure: {first.description}"
                ),
            )
        b.status.update(restarts=restarts + 1, groupStartTime=None)
        names = tuple(p.name for p in pods if not p.deleting)
        if names:
            b.actions.append(DeletePods(names))
        b.phase(
            RESTARTING,
            "GroupRestarting",
            _truncate(
                f"{first.description}; restarting all {spec.replicas} workers "
                f"(restart {restarts + 1} of at most {spec.backoff_limit})"
            ),
        )
        return b.finish(_replica_statuses(current))

    # Pods of an earlier group (or from before a suspend) must be gone before the new group starts: two
    # groups must never talk to each other.
    leaving = [p for p in pods if p.restart != restarts or (p.deleting and not expecting_pods)]
    if leaving:
        names = tuple(p.name for p in leaving if not p.deleting)
        if names:
            b.actions.append(DeletePods(names))
        # Say what the new group waits for: a pod stuck Terminating (a lost node, a finalizer) shows here.
        b.condition(
            RUNNING,
            False,
            WAITING_FOR_OLD_PODS,
            _truncate(
                f"waiting for pods of an earlier group to be gone: {', '.join(p.name for p in leaving)}"
            ),
        )
        # On resume the phase stays Suspended until they are gone, so they are not mistaken for lost workers.
        return b.finish(_replica_statuses(current))

    if not service_exists:
        b.actions.append(CreateService())
    present = {p.index for p in current}
    missing = tuple(i for i in range(spec.replicas) if i not in present)
    if missing:
        b.actions.append(CreatePods(missing, restarts))
        b.status["startTime"] = b.status["startTime"] or format_time(now)
        if not current:
            b.status["groupStartTime"] = format_time(now)
        if resuming:
            b.phase(PENDING, "Resumed", "spec.runPolicy.suspend is false: recreating the worker pods")
        elif b.previous_phase is None:
            b.phase(PENDING, "Creating", f"creating the Service and {spec.replicas} worker pods")
        return b.finish(_replica_statuses(current))

    not_started = [p for p in current if not p.started]
    if not not_started:
        if b.status["phase"] != RUNNING:
            b.phase(
                RUNNING, "AllWorkersRunning", f"all {spec.replicas} workers are running (restart {restarts})"
            )
        return b.finish(_replica_statuses(current))

    group_start = parse_time(b.status["groupStartTime"])
    timeout = spec.startup_timeout_seconds
    if group_start is not None and now >= group_start + timedelta(seconds=timeout):
        waiting = ", ".join(f"{p.name} ({p.waiting or p.phase})" for p in not_started)
        return terminal(
            FAILED,
            "StartupTimeout",
            _truncate(
                f"not all workers were running {timeout}s after the group started "
                f"(spec.runPolicy.startupTimeoutSeconds); still pending: {waiting}"
            ),
        )
    # Say why while waiting (e.g. the scheduler's "Insufficient cpu"), not only when the timeout strikes.
    reasons = "; ".join(f"{p.name}: {p.waiting}" for p in not_started if p.waiting)
    message = f"waiting for {len(not_started)} of {spec.replicas} workers to run" + (
        f" ({reasons})" if reasons else ""
    )
    b.condition(RUNNING, False, "WorkersPending", _truncate(message))
    return b.finish(_replica_statuses(current))


def _finished(
    b: _Builder,
    spec: TrainJobSpec | None,
    pods: Sequence[WorkerPod],
    current: Sequence[WorkerPod],
    now: datetime,
) -> Decision:
    names = _cleanup(spec, pods, remove_active=False)
    if names:
        b.actions.append(DeletePods(names))
    done = parse_time(b.status["completionTime"])
    ttl = spec.ttl_seconds_after_finished if spec is not None else None
    if ttl is not None and done is not None and now >= done + timedelta(seconds=ttl):
        b.actions.append(DeleteJob())
        b.events.append(Event("Normal", "TTLExpired", f"deleting the TrainJob {ttl}s after it finished"))
    return b.finish(_replica_statuses(current))


def next_due(spec: TrainJobSpec | SpecError, status: Mapping[str, Any]) -> datetime | None:
    """When a deadline of this status falls due (active deadline, startup timeout, TTL): the moment to look
    again though nothing changed. None: only a change can move the job on."""
    if isinstance(spec, SpecError):
        return None
    candidates: list[datetime] = []

    def after(field: str, seconds: int | None) -> None:
        moment = parse_time(status.get(field))
        if moment is not None and seconds is not None:
            candidates.append(moment + timedelta(seconds=seconds))

    phase = status.get("phase")
    if phase in TERMINAL:
        after("completionTime", spec.ttl_seconds_after_finished)
    elif phase != SUSPENDED:
        after("startTime", spec.active_deadline_seconds)
        if phase != RUNNING:
            after("groupStartTime", spec.startup_timeout_seconds)
    return min(candidates, default=None)
