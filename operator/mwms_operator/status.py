"""Pure: (spec, pods, now, previous status) -> the new status and what to do about it.

Level-based: every call recomputes everything from the pods that exist, so a missed event, a retried handler
or an operator restart changes nothing. The new status is written before the actions run, so a crash between
the two is repaired by the next call (e.g. pods of an older restart are "stale" and get deleted).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
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
    uid: str = ""

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
        uid=meta.get("uid", ""),
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
    rule: str = ""  # the name of the rule in RULES that decided


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


@dataclass
class _Facts:
    """What every rule may look at: the inputs of one decision, sorted and derived once."""

    meta: JobMeta
    spec: TrainJobSpec | SpecError
    pods: list[WorkerPod]  # every pod of the job, oldest group first
    current: list[WorkerPod]  # the pods of the current (re)start
    service_exists: bool
    now: datetime
    refused: str | None
    b: _Builder

    @property
    def restarts(self) -> int:
        return int(self.b.status["restarts"])

    @property
    def parsed(self) -> TrainJobSpec | None:
        return self.spec if isinstance(self.spec, TrainJobSpec) else None

    @property
    def resuming(self) -> bool:
        return self.b.previous_phase == SUSPENDED

    @property
    def expecting_pods(self) -> bool:
        """The group was created and not suspended: a pod of it that goes is lost, not leaving."""
        return self.b.previous_phase in (PENDING, RUNNING) and not self.resuming

    def finish(self) -> Decision:
        return self.b.finish(_replica_statuses(self.current))

    def terminal(self, phase: str, reason: str, message: str, *, remove_active: bool = False) -> Decision:
        self.b.phase(phase, reason, message)
        self.b.status["completionTime"] = self.b.status["completionTime"] or format_time(self.now)
        names = _cleanup(self.parsed, self.pods, remove_active=remove_active)
        if names:
            self.b.actions.append(DeletePods(names))
        return self.finish()


def _rule_finished(f: _Facts) -> Decision | None:
    """Finished: only cleanup and the TTL remain."""
    if f.b.previous_phase not in TERMINAL:
        return None
    names = _cleanup(f.parsed, f.pods, remove_active=False)
    if names:
        f.b.actions.append(DeletePods(names))
    done = parse_time(f.b.status["completionTime"])
    ttl = f.parsed.ttl_seconds_after_finished if f.parsed is not None else None
    if ttl is not None and done is not None and f.now >= done + timedelta(seconds=ttl):
        f.b.actions.append(DeleteJob())
        f.b.events.append(Event("Normal", "TTLExpired", f"deleting the TrainJob {ttl}s after it finished"))
    return f.finish()


def _rule_invalid_spec(f: _Facts) -> Decision | None:
    if not isinstance(f.spec, SpecError):
        return None
    return f.terminal(FAILED, "InvalidSpec", f"invalid TrainJob: {f.spec}; no worker pods were created")


def _rule_refused(f: _Facts) -> Decision | None:
    """The API server validates spec.template more deeply than our parser: its refusal is a spec error too."""
    if f.refused is None:
        return None
    message = f"invalid TrainJob: the API server refused a worker object: {f.refused}"
    return f.terminal(FAILED, "InvalidSpec", _truncate(message))


def _rule_suspended(f: _Facts) -> Decision | None:
    assert f.parsed is not None
    if not f.parsed.suspend:
        return None
    names = tuple(p.name for p in f.pods if not p.deleting)
    if names:
        f.b.actions.append(DeletePods(names))
    f.b.status.update(startTime=None, groupStartTime=None)
    f.b.phase(SUSPENDED, "Suspended", "spec.runPolicy.suspend is true: worker pods deleted")
    return f.finish()


def _rule_mark_created(f: _Facts) -> Decision | None:
    """Never decides: sets Created once, even if the workers are so quick that the first look already
    finds them finished. No event here: the handler posts one `PodsCreated` per batch, naming the pods."""
    assert f.parsed is not None
    created = {p.index for p in f.current} >= set(range(f.parsed.replicas))
    if created and not any(c["type"] == CREATED and c["status"] == "True" for c in f.b.conditions):
        f.b.condition(CREATED, True, PODS_CREATED, f"Service and {f.parsed.replicas} worker pods created")
        f.b.all_pods_created = True
    return None


def _rule_chief_succeeded(f: _Facts) -> Decision | None:
    chief = next((p for p in f.current if p.index == 0 and not p.deleting), None)
    if chief is None or chief.phase != SUCCEEDED:
        return None
    f.b.status["mlflow"] = chief_mlflow(chief.message) or f.b.status["mlflow"]
    run = f.b.status["mlflow"]["runId"] if f.b.status["mlflow"] else "unknown (no termination message)"
    return f.terminal(SUCCEEDED, "ChiefSucceeded", f"worker 0 ({chief.name}) exited 0; MLflow run {run}")


def _rule_deadline_exceeded(f: _Facts) -> Decision | None:
    assert f.parsed is not None
    start = parse_time(f.b.status["startTime"])
    deadline = f.parsed.active_deadline_seconds
    if start is None or deadline is None or f.now < start + timedelta(seconds=deadline):
        return None
    return f.terminal(
        FAILED,
        "DeadlineExceeded",
        f"ran longer than spec.runPolicy.activeDeadlineSeconds={deadline}s; worker pods removed",
        remove_active=True,
    )


def _permanent_reason(failure: Failure) -> str:
    """spec.code names what only a worker can check (the ConfigMap exists, holds the entrypoint): the
    trainer says so with exit 2 naming the field, and that is a spec error like those the parser finds."""
    pod = failure.pod
    if pod.exit_code == constants.EXIT_INVALID_CONFIG and pod.message.startswith(CODE_SPEC_ERROR):
        return "InvalidSpec"
    return "WorkerFailed"


CODE_SPEC_ERROR = "invalid configuration: spec.code."  # how the trainer's exit-2 message starts for spec.code


def _rule_worker_failures(f: _Facts) -> Decision | None:
    """A pod of this group failed, or was deleted or lost while the group ran: MWMS cannot continue, so the
    job fails (permanent exit, backoff spent) or the whole group restarts."""
    assert f.parsed is not None
    failures = [classify(p) for p in f.current if p.phase == FAILED and not p.deleting]
    if f.expecting_pods:
        failures += [classify(p) for p in f.current if p.deleting]
        if f.b.previous_phase == RUNNING:
            present = {p.index for p in f.current}
            failures += [
                classify(WorkerPod(pod_name(f.meta.name, i), i, f.restarts, "Unknown"), missing=True)
                for i in range(f.parsed.replicas)
                if i not in present
            ]
    if not failures:
        return None
    permanent = [x for x in failures if not x.retryable]
    if permanent:
        first = min(permanent, key=lambda x: x.pod.index)
        return f.terminal(FAILED, _permanent_reason(first), first.description)
    first = min(failures, key=lambda x: x.pod.index)
    restarts, limit = f.restarts, f.parsed.backoff_limit
    if restarts >= limit:
        return f.terminal(
            FAILED,
            "BackoffLimitExceeded",
            _truncate(
                f"the group was restarted {restarts} times "
                f"(spec.runPolicy.backoffLimit={limit}); last failure: {first.description}"
            ),
        )
    f.b.status.update(restarts=restarts + 1, groupStartTime=None)
    names = tuple(p.name for p in f.pods if not p.deleting)
    if names:
        f.b.actions.append(DeletePods(names))
    f.b.phase(
        RESTARTING,
        "GroupRestarting",
        _truncate(
            f"{first.description}; restarting all {f.parsed.replicas} workers "
            f"(restart {restarts + 1} of at most {limit})"
        ),
    )
    return f.finish()


def _rule_old_pods_leaving(f: _Facts) -> Decision | None:
    """Pods of an earlier group (or from before a suspend) must be gone before the new group starts: two
    groups must never talk to each other. On resume the phase stays Suspended until they are gone, so they
    are not mistaken for lost workers."""
    leaving = [p for p in f.pods if p.restart != f.restarts or (p.deleting and not f.expecting_pods)]
    if not leaving:
        return None
    names = tuple(p.name for p in leaving if not p.deleting)
    if names:
        f.b.actions.append(DeletePods(names))
    # Say what the new group waits for: a pod stuck Terminating (a lost node, a finalizer) shows here.
    message = f"waiting for pods of an earlier group to be gone: {', '.join(p.name for p in leaving)}"
    f.b.condition(RUNNING, False, WAITING_FOR_OLD_PODS, _truncate(message))
    return f.finish()


def _rule_create_missing(f: _Facts) -> Decision | None:
    assert f.parsed is not None
    b, replicas = f.b, f.parsed.replicas
    if not f.service_exists:
        b.actions.append(CreateService())  # kept if a later rule decides: a lost Service comes back
    present = {p.index for p in f.current}
    missing = tuple(i for i in range(replicas) if i not in present)
    if not missing:
        return None
    b.actions.append(CreatePods(missing, f.restarts))
    b.status["startTime"] = b.status["startTime"] or format_time(f.now)
    if not f.current:
        b.status["groupStartTime"] = format_time(f.now)
    if f.resuming:
        b.phase(PENDING, "Resumed", "spec.runPolicy.suspend is false: recreating the worker pods")
    elif b.previous_phase is None:
        b.phase(PENDING, "Creating", f"creating the Service and {replicas} worker pods")
    return f.finish()


def _rule_all_running(f: _Facts) -> Decision | None:
    assert f.parsed is not None
    if any(not p.started for p in f.current):
        return None
    if f.b.status["phase"] != RUNNING:
        message = f"all {f.parsed.replicas} workers are running (restart {f.restarts})"
        f.b.phase(RUNNING, "AllWorkersRunning", message)
    return f.finish()


def _rule_startup_timeout(f: _Facts) -> Decision | None:
    assert f.parsed is not None
    group_start = parse_time(f.b.status["groupStartTime"])
    timeout = f.parsed.startup_timeout_seconds
    if group_start is None or f.now < group_start + timedelta(seconds=timeout):
        return None
    waiting = ", ".join(f"{p.name} ({p.waiting or p.phase})" for p in f.current if not p.started)
    return f.terminal(
        FAILED,
        "StartupTimeout",
        _truncate(
            f"not all workers were running {timeout}s after the group started "
            f"(spec.runPolicy.startupTimeoutSeconds); still pending: {waiting}"
        ),
    )


def _rule_workers_pending(f: _Facts) -> Decision | None:
    """The last rule, always decides: say why while waiting (e.g. the scheduler's "Insufficient cpu"), not
    only when the timeout strikes."""
    assert f.parsed is not None
    not_started = [p for p in f.current if not p.started]
    reasons = "; ".join(f"{p.name}: {p.waiting}" for p in not_started if p.waiting)
    message = f"waiting for {len(not_started)} of {f.parsed.replicas} workers to run" + (
        f" ({reasons})" if reasons else ""
    )
    f.b.condition(RUNNING, False, "WorkersPending", _truncate(message))
    return f.finish()


# The policy, in order: the first rule that returns a decision decides. After `refused`, the spec is valid.
RULES: tuple[tuple[str, Callable[[_Facts], Decision | None]], ...] = (
    ("finished", _rule_finished),
    ("invalid-spec", _rule_invalid_spec),
    ("refused", _rule_refused),
    ("suspended", _rule_suspended),
    ("mark-created", _rule_mark_created),
    ("chief-succeeded", _rule_chief_succeeded),
    ("deadline-exceeded", _rule_deadline_exceeded),
    ("worker-failures", _rule_worker_failures),
    ("old-pods-leaving", _rule_old_pods_leaving),
    ("create-missing", _rule_create_missing),
    ("all-running", _rule_all_running),
    ("startup-timeout", _rule_startup_timeout),
    ("workers-pending", _rule_workers_pending),
)


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
    """The new status and what to do, by the first of RULES that decides. `refused`: the API server's message
    when it refused to create this job's Service or a pod."""
    b = _Builder(meta, previous or {}, now)
    ordered = sorted(pods, key=lambda p: (p.restart, p.index))
    restarts = b.status["restarts"]
    current = [p for p in ordered if p.restart == restarts]
    facts = _Facts(meta, spec, ordered, current, service_exists, now, refused, b)
    for name, rule in RULES:
        decision = rule(facts)
        if decision is not None:
            return dataclasses.replace(decision, rule=name)
    raise AssertionError("the last rule always decides")


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
