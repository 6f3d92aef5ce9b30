"""Pure: (spec, pods, now, previous status) -> the new status and what to do about it.

Level-based: every call recomputes everything from the pods that exist, so a missed event, a retried handler
or an operator restart changes nothing. The new status is written before the actions run, so a crash between
the two is repaired by the next call (e.g. pods of an older restart are "stale" and get deleted).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from mwms_contract import termination
from mwms_operator import constants
from mwms_operator.builders import pod_name
from mwms_operator.spec import SpecError, TrainJobSpec

PENDING, RUNNING, RESTARTING = "Pending", "Running", "Restarting"
SUCCEEDED, FAILED, SUSPENDED = "Succeeded", "Failed", "Suspended"
TERMINAL = (SUCCEEDED, FAILED)
CREATED = "Created"
PODS_CREATED = "PodsCreated"  # the Created condition's reason and the event the handler posts
WAITING_FOR_OLD_PODS = "WaitingForOldPods"
# Why creating the workers (or the Service) was refused for now: the Running condition's reason and the
# event the handler posts, one per meaning, with what the condition's message starts with.
CREATE_PODS_REFUSED = "CreatePodsRefused"  # a policy: a ResourceQuota, a LimitRange, a webhook's denial
WEBHOOK_UNAVAILABLE = "WebhookUnavailable"  # a webhook with failurePolicy Fail could not be called
API_SERVER_THROTTLED = "ApiServerThrottled"  # 429: too many requests
API_SERVER_ERROR = "ApiServerError"  # another 5xx
NAME_CONFLICT = "NameConflict"  # a pod or Service of the name the job needs is not the job's
REFUSALS = {
    CREATE_PODS_REFUSED: "the API server refused to create the workers",
    WEBHOOK_UNAVAILABLE: "an admission webhook the workers need could not be called",
    API_SERVER_THROTTLED: "the API server asked the operator to slow down (429)",
    API_SERVER_ERROR: "the API server failed to create the workers",
    NAME_CONFLICT: "a name the job needs is taken",
}
INVALID_SPEC = "InvalidSpec"
# False while spec.template is invalid: the running group is left alone; the next one needs a valid template.
TEMPLATE_ACCEPTED = "TemplateAccepted"
RESTART_BACKOFF = "RestartBackoff"  # the Running condition's reason while a counted restart waits
DISRUPTED = "Disrupted"  # a group restart caused by a DisruptionTarget pod: not counted against backoffLimit
# A counted group restart waits 10 s, doubling with each counted restart up to 5 min (as Kubernetes Jobs do).
RESTART_BACKOFF_SECONDS, RESTART_BACKOFF_MAX_SECONDS = 10, 300
# Container waiting reasons that mean "this will not start by itself". InvalidImageName never heals; a failing
# pull or a missing Secret/ConfigMap might (a registry hiccup, a Secret another controller creates a moment
# later), so those fail the job only once they have lasted CONTAINER_ERROR_GRACE_SECONDS.
FATAL_WAITING_REASONS = ("InvalidImageName",)
LASTING_WAITING_REASONS = ("ErrImagePull", "ImagePullBackOff", "CreateContainerConfigError")
CONTAINER_ERROR_GRACE_SECONDS = 120
# Pod conditions that say "this pod is being stopped from outside": Kubernetes' DisruptionTarget (eviction,
# preemption, taint manager, drain) and the TerminationTarget that Kueue's pod integration (v0.17) sets on the
# pods of a workload it preempts or evicts before deleting them.
DISRUPTION_CONDITIONS = ("DisruptionTarget", "TerminationTarget")
# Conditions that follow the phase: the one of the current phase is True, the others False once set.
PHASE_CONDITIONS = (RUNNING, RESTARTING, SUSPENDED, SUCCEEDED, FAILED)
MAX_MESSAGE = 1024
# The clocks of a group's start (startup timeout, container errors): stopped whenever that group ends.
STOPPED_STARTUP_CLOCKS = {"stalledSince": None, "containerErrorSince": None}


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
class PodEvents:
    """What a pod's events say about its start (the kubelet's and the scheduler's; looked up only while the
    startup clock may run)."""

    pulling: bool = False  # its latest image event is `Pulling`: the pull has not ended
    pulled_at: datetime | None = None  # when its latest pull ended (`Pulled`)
    note: str = ""  # "reason: message" of its latest Warning (Unhealthy, FailedMount, FailedScheduling…)


PULL_EVENTS = ("Pulling", "Pulled", "Failed", "BackOff", "ErrImageNeverPull")


def pod_events(events: Iterable[Mapping[str, Any]]) -> PodEvents:
    """The events of one pod (core/v1 Event dicts) as PodEvents, by when each last happened."""

    def when(event: Mapping[str, Any]) -> datetime:
        moment = event.get("lastTimestamp") or event.get("eventTime")
        moment = moment or (event.get("metadata") or {}).get("creationTimestamp")
        return parse_time(moment) or datetime.min.replace(tzinfo=UTC)

    ordered = sorted(events, key=when)
    pulls = [e for e in ordered if e.get("reason") in PULL_EVENTS]
    pulled = [when(e) for e in pulls if e.get("reason") == "Pulled"]
    warnings = [e for e in ordered if e.get("type") == "Warning"]
    note = ""
    if warnings:
        last = warnings[-1]
        note = " ".join(f"{last.get('reason', 'Warning')}: {last.get('message', '')}".split())
    return PodEvents(
        pulling=bool(pulls) and pulls[-1].get("reason") == "Pulling",
        pulled_at=pulled[-1] if pulled else None,
        note=note,
    )


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
    # "reason: message" of a DISRUPTION_CONDITIONS condition (eviction, preemption, drain, Kueue).
    disruption: str = ""
    unschedulable: bool = False  # PodScheduled is False for a reason other than a scheduling gate
    # The first container (init, sidecar or main) waiting for one of the reasons above, as (reason, text).
    container_error: tuple[str, str] | None = None
    # A regular container other than the trainer has not terminated: a sidecar that is not a native one
    # (native sidecars are init containers, which the kubelet stops once the trainer has exited).
    sidecars_running: bool = False
    # The trainer container runs and its readiness probe has not passed: its worker has not joined the group.
    trainer_unready: bool = False
    events: PodEvents | None = None  # None: not looked up

    @property
    def joined(self) -> bool:
        """In its group: it runs and is ready (no readiness probe: ready once running), or it has exited."""
        return self.started and not self.trainer_unready

    @property
    def finishing(self) -> bool:
        """The trainer has exited and nothing else keeps the pod: the kubelet is about to give it its final
        phase, so it is not a running pod to clean up (deleting it would lose the chief's logs)."""
        return self.exit_code is not None and not self.sidecars_running

    @property
    def trainer_exit(self) -> int | None:
        """The `trainer` container's exit code; a Succeeded pod's containers all exited 0."""
        if self.exit_code is None and self.phase == SUCCEEDED:
            return 0
        return self.exit_code

    @property
    def failed(self) -> bool:
        """The trainer exited non-zero, or the pod failed before the trainer could exit (a sidecar that fails
        after the trainer exited 0 does not count)."""
        code = self.trainer_exit
        return code != 0 if code is not None else self.phase == FAILED

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
    waiting_parts, disruption, unschedulable = [], "", False
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            waiting_parts.append(
                f"{condition.get('reason', 'Unschedulable')}: {condition.get('message', '')}"
            )
            unschedulable = condition.get("reason") != "SchedulingGated"
        if condition.get("type") in DISRUPTION_CONDITIONS and condition.get("status") == "True":
            disruption = f"{condition.get('reason') or condition['type']}: {condition.get('message', '')}"
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
        disruption=disruption.strip().rstrip(":"),
        unschedulable=unschedulable,
        container_error=_container_error(status),
        sidecars_running=any(
            c.get("name") != constants.CONTAINER_NAME and not (c.get("state") or {}).get("terminated")
            for c in status.get("containerStatuses") or []
        ),
        trainer_unready="running" in state and not trainer.get("ready"),
    )


def _container_error(status: Mapping[str, Any]) -> tuple[str, str] | None:
    """A container of the pod that waits for a reason that will not (or may not) heal by itself."""
    for key in ("initContainerStatuses", "containerStatuses"):
        for container in status.get(key) or []:
            waiting = (container.get("state") or {}).get("waiting") or {}
            reason = waiting.get("reason", "")
            if reason in FATAL_WAITING_REASONS + LASTING_WAITING_REASONS:
                text = f"container {container.get('name', '?')}: {reason}: {waiting.get('message', '')}"
                return reason, text.strip().rstrip(":")
    return None


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
class CreationRefused:
    """The API server refused to create this job's workers for now (a reason of REFUSALS): its message, how
    many tries were refused, when the next one is, and how long until then."""

    message: str
    tries: int
    next_try: datetime
    wait_seconds: float = 0.0
    reason: str = CREATE_PODS_REFUSED


@dataclass(frozen=True)
class Failure:
    pod: WorkerPod
    retryable: bool
    description: str


def _truncate(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"


def classify(pod: WorkerPod, *, missing: bool = False) -> Failure:
    """Exit 75 and >= 128 (signals), deleted and evicted pods are retryable; any other exit is permanent."""
    if pod.disruption:  # whatever it exited with: it was told to go
        return Failure(pod, True, f"worker {pod.name} was disrupted ({pod.disruption})")
    if missing:
        return Failure(pod, True, f"worker {pod.name} was deleted")
    if pod.deleting:
        return Failure(pod, True, f"worker {pod.name} is being deleted")
    code = pod.trainer_exit
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
    """The run the chief's termination message names (runId, experimentId, modelUri); else None."""
    return termination.run(message)  # the trainer writes it with the same module


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
            "disruptions": int(previous.get("disruptions") or 0),
            "nextRestartTime": previous.get("nextRestartTime"),
            "stalledSince": previous.get("stalledSince"),
            "containerErrorSince": previous.get("containerErrorSince"),
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
    """By the trainer container: a worker whose trainer exited is done even while a sidecar keeps its pod."""
    live = [p for p in pods if not p.deleting]
    return {
        "active": sum(p.active and p.trainer_exit is None for p in live),
        "ready": sum(p.phase == RUNNING and p.ready and p.trainer_exit is None for p in live),
        "succeeded": sum(p.trainer_exit == 0 for p in live),
        "failed": sum(p.failed for p in live),
    }


def restart_backoff(counted: int) -> int:
    """Seconds before the `counted`-th counted group restart (1-based): 10, 20, 40, … at most 300."""
    return min(RESTART_BACKOFF_MAX_SECONDS, RESTART_BACKOFF_SECONDS * 2 ** max(0, counted - 1))


def _cleanup(spec: TrainJobSpec | None, pods: Sequence[WorkerPod], *, remove_active: bool) -> tuple[str, ...]:
    policy = spec.clean_pod_policy if spec is not None else "Running"
    names = []
    for pod in pods:
        if pod.deleting:
            continue
        if policy == "All" or (pod.active and (remove_active or (policy == "Running" and not pod.finishing))):
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
    creation_refused: CreationRefused | None = None
    template_error: SpecError | None = None  # spec.template is invalid (`spec` was parsed without it)
    disrupted: Mapping[tuple[int, int], str] = dataclasses.field(default_factory=dict)

    @property
    def restarts(self) -> int:
        return int(self.b.status["restarts"])

    @property
    def counted_restarts(self) -> int:
        """Restarts that spend backoffLimit: all but those caused by disruptions."""
        return self.restarts - int(self.b.status["disruptions"])

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
        self.b.status.update(STOPPED_STARTUP_CLOCKS, nextRestartTime=None)
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
    f.b.status.update(STOPPED_STARTUP_CLOCKS, startTime=None, groupStartTime=None, nextRestartTime=None)
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


def _rule_mark_template(f: _Facts) -> Decision | None:
    """Never decides: an edit of spec.template is checked when it is made, but only the next group uses it,
    so an invalid one is said in a condition (and one event) and leaves the running group alone."""
    previous = next((c for c in f.b.conditions if c["type"] == TEMPLATE_ACCEPTED), None)
    if f.template_error is not None:
        message = _truncate(
            f"invalid TrainJob: {f.template_error}; the workers that run are left alone, "
            "the next group (a restart or a resume) needs a valid template"
        )
        if f.current and (previous is None or previous["status"] != "False"):  # no group: it fails below
            f.b.events.append(Event("Warning", INVALID_SPEC, message))
        f.b.condition(TEMPLATE_ACCEPTED, False, INVALID_SPEC, message)
    elif previous is not None and previous["status"] == "False":
        f.b.condition(TEMPLATE_ACCEPTED, True, "TemplateValid", "spec.template is valid again")
    return None


def startup_unexplained(pods: Sequence[WorkerPod], previous: Mapping[str, Any]) -> list[WorkerPod]:
    """The pods of the current group whose events the startup clock needs: those not joined while another
    worker runs (is a peer still pulling its image? what did each last say?). Empty while the clock cannot
    run, so a healthy, wholly pending, suspended or finished group costs no lookup."""
    restarts = int(previous.get("restarts") or 0)
    live = [p for p in pods if p.restart == restarts and not p.deleting]
    if previous.get("phase") in (*TERMINAL, SUSPENDED) or not any(p.started for p in live):
        return []
    return [p for p in live if not p.joined]


def _startup_clock(current: Sequence[WorkerPod]) -> tuple[bool, datetime | None]:
    """(whether the startup clock runs, the latest end of a not-joined pod's image pull).

    It runs while some worker runs and not every worker has joined: the others hold nodes while they wait.
    A peer's image pull does not count (nor does one whose events were not looked up: it may be pulling),
    except for a peer the scheduler cannot place, which pulls nothing. A group that is wholly pending (a
    queue, a scale-up, image pulls) or gated costs nothing but time."""
    live = [p for p in current if not p.deleting]
    waiting = [p for p in live if not p.joined]
    if not any(p.started for p in live) or not waiting:
        return False, None
    pulling = [
        p
        for p in waiting
        if not p.started and not p.unschedulable and (p.events or PodEvents(pulling=True)).pulling
    ]
    pulled = [p.events.pulled_at for p in waiting if p.events is not None and p.events.pulled_at is not None]
    return not pulling, max(pulled, default=None)


def _rule_stall_clocks(f: _Facts) -> Decision | None:
    """Never decides: start or stop the clocks of the startup timeout and of container errors."""
    waiting = [p for p in f.current if not p.started and not p.deleting]
    running, pulled = _startup_clock(f.current)
    erring = any(p.container_error for p in waiting)
    status, now = f.b.status, format_time(f.now)
    since = max(filter(None, (parse_time(status["stalledSince"]) or f.now, pulled)))
    status["stalledSince"] = format_time(since) if running else None
    status["containerErrorSince"] = (status["containerErrorSince"] or now) if erring else None
    return None


def _rule_chief_succeeded(f: _Facts) -> Decision | None:
    """The chief's `trainer` container exited 0: the job is done, whatever its sidecars do."""
    chief = next((p for p in f.current if p.index == 0 and not p.deleting), None)
    if chief is None or chief.trainer_exit != 0:
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


def _rule_creation_refused(f: _Facts) -> Decision | None:
    """Pod creation was refused for now: hold no part of the group while waiting (a partial MWMS group only
    holds quota others could use), say why, and let the next try (when due, with no pod left) create it all.
    Before worker-failures: the pods removed here are not lost workers. A whole group is never removed for
    a refused Service (a running job's lost Service is made again by create-missing at each look)."""
    assert f.parsed is not None
    refusal = f.creation_refused
    complete = {p.index for p in f.current if not p.deleting} >= set(range(f.parsed.replicas))
    if refusal is None or complete or (refusal.wait_seconds <= 0 and not f.pods):
        return None
    names = tuple(p.name for p in f.pods if not p.deleting)
    if names:
        f.b.actions.append(DeletePods(names))
    message = (
        f"{REFUSALS[refusal.reason]} ({refusal.tries} "
        f"{'try' if refusal.tries == 1 else 'tries'}): {refusal.message}; no worker pod is kept while "
        f"waiting; next try at {format_time(refusal.next_try)}"
    )
    f.b.condition(RUNNING, False, refusal.reason, _truncate(message))
    return f.finish()


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
    failures = [classify(p) for p in f.current if p.failed and not p.deleting]
    if f.expecting_pods:
        failures += [classify(p) for p in f.current if p.deleting]
        if f.b.previous_phase == RUNNING:
            present = {p.index for p in f.current}
            failures += [
                classify(
                    WorkerPod(
                        pod_name(f.meta.name, i),
                        i,
                        f.restarts,
                        "Unknown",
                        disruption=f.disrupted.get((f.restarts, i), ""),
                    ),
                    missing=True,
                )
                for i in range(f.parsed.replicas)
                if i not in present
            ]
    if not failures:
        return None
    permanent = [x for x in failures if not x.retryable]
    if permanent:
        first = min(permanent, key=lambda x: x.pod.index)
        return f.terminal(FAILED, _permanent_reason(first), first.description)
    # A disruption (eviction, preemption, drain) is not the job's fault, and the failures that follow it
    # (peers losing the evicted worker) are its consequence: such a restart is free and immediate.
    disrupted = [x for x in failures if x.pod.disruption]
    first = min(disrupted or failures, key=lambda x: x.pod.index)
    counted, limit = f.counted_restarts, f.parsed.backoff_limit
    if not disrupted and counted >= limit:
        return f.terminal(
            FAILED,
            "BackoffLimitExceeded",
            _truncate(
                f"the group was restarted {counted} times for failures "
                f"(spec.runPolicy.backoffLimit={limit}); last failure: {first.description}"
            ),
        )
    f.b.status.update(STOPPED_STARTUP_CLOCKS, restarts=f.restarts + 1, groupStartTime=None)
    names = tuple(p.name for p in f.pods if not p.deleting)
    if names:
        f.b.actions.append(DeletePods(names))
    if disrupted:
        f.b.status.update(disruptions=int(f.b.status["disruptions"]) + 1, nextRestartTime=None)
        reason, plan = DISRUPTED, "now (a disruption: not counted against spec.runPolicy.backoffLimit)"
    else:
        delay = restart_backoff(counted + 1)
        due = format_time(f.now + timedelta(seconds=delay))
        f.b.status["nextRestartTime"] = due
        reason, plan = (
            "GroupRestarting",
            f"at {due} after a {delay}s back-off (restart {counted + 1} of at most {limit})",
        )
    f.b.phase(
        RESTARTING,
        reason,
        _truncate(f"{first.description}; restarting all {f.parsed.replicas} workers {plan}"),
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


def _rule_template_invalid(f: _Facts) -> Decision | None:
    """Pods must be made and spec.template is invalid: nothing runs that an edit could spare, so fail."""
    assert f.parsed is not None
    present = {p.index for p in f.current}
    if f.template_error is None or present >= set(range(f.parsed.replicas)):
        return None
    return f.terminal(
        FAILED, INVALID_SPEC, f"invalid TrainJob: {f.template_error}; no worker pods were created"
    )


def _rule_restart_backoff(f: _Facts) -> Decision | None:
    """A counted restart waits until status.nextRestartTime before it creates the new group."""
    due = parse_time(f.b.status["nextRestartTime"])
    if due is None:
        return None
    if f.current or f.now >= due:
        f.b.status["nextRestartTime"] = None
        return None
    message = f"restarting the group at {format_time(due)} (exponential back-off after a failure)"
    f.b.condition(RUNNING, False, RESTART_BACKOFF, message)
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


def _rule_container_error(f: _Facts) -> Decision | None:
    """A container that cannot start by itself (a bad image name; a pull or a missing Secret that has been
    failing for CONTAINER_ERROR_GRACE_SECONDS) fails the job at once, with the container's message."""
    since = parse_time(f.b.status["containerErrorSince"])
    lasting = since is not None and f.now >= since + timedelta(seconds=CONTAINER_ERROR_GRACE_SECONDS)
    for pod in f.current:
        if pod.container_error and not pod.started and not pod.deleting:
            reason, text = pod.container_error
            if reason in FATAL_WAITING_REASONS or lasting:
                return f.terminal(
                    FAILED, "ContainerError", _truncate(f"worker {pod.name} cannot start: {text}")
                )
    return None


def _rule_startup_timeout(f: _Facts) -> Decision | None:
    assert f.parsed is not None
    stalled = parse_time(f.b.status["stalledSince"])
    timeout = f.parsed.startup_timeout_seconds
    if stalled is None or f.now < stalled + timedelta(seconds=timeout):
        return None
    live = [p for p in f.current if not p.deleting]
    pending = [p for p in live if not p.started]
    if any(p.unschedulable for p in pending):
        headline = f"some workers ran while others could not be scheduled for {timeout}s"
    else:
        headline = f"not every worker joined the group within {timeout}s of one running"
    parts = [f"{headline} (spec.runPolicy.startupTimeoutSeconds)"]
    if pending:
        parts.append("still pending: " + ", ".join(f"{p.name} ({_why_pending(p)})" for p in pending))
    unjoined = [p for p in live if p.started and not p.joined]
    if unjoined:
        parts.append("not joined: " + "; ".join(f"worker {p.index} ({p.name}): {_why(p)}" for p in unjoined))
    return f.terminal(FAILED, "StartupTimeout", _truncate("; ".join(parts)))


def _why(pod: WorkerPod) -> str:
    """The last reason a running worker gave for not having joined (its readiness probe's output)."""
    return (pod.events.note if pod.events else "") or "no reason given yet"


def _why_pending(pod: WorkerPod) -> str:
    """Why a worker does not run: the scheduler's or the container's reason, and its pod's latest warning
    (e.g. FailedMount for a missing Secret); the scheduler's own event repeats its condition."""
    note = pod.events.note if pod.events and not pod.unschedulable else ""
    return "; ".join(part for part in (pod.waiting, note) if part) or pod.phase


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
    ("mark-template", _rule_mark_template),
    ("stall-clocks", _rule_stall_clocks),
    ("chief-succeeded", _rule_chief_succeeded),
    ("deadline-exceeded", _rule_deadline_exceeded),
    ("creation-refused", _rule_creation_refused),
    ("worker-failures", _rule_worker_failures),
    ("old-pods-leaving", _rule_old_pods_leaving),
    ("template-invalid", _rule_template_invalid),
    ("restart-backoff", _rule_restart_backoff),
    ("create-missing", _rule_create_missing),
    ("container-error", _rule_container_error),
    ("startup-timeout", _rule_startup_timeout),  # also once all run: a worker may not join its peers
    ("all-running", _rule_all_running),
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
    creation_refused: CreationRefused | None = None,
    template_error: SpecError | None = None,
    disrupted: Mapping[tuple[int, int], str] | None = None,
) -> Decision:
    """The new status and what to do, by the first of RULES that decides. `refused`: the API server's message
    when it refused to create this job's Service or a pod as invalid; `creation_refused`: when it refused
    them for now (quota, LimitRange, webhook); `template_error`: spec.template is invalid and `spec` was
    parsed without it; `disrupted`: (restart, index) -> disruption of pods that were gone before this
    decision saw them disrupted."""
    b = _Builder(meta, previous or {}, now)
    ordered = sorted(pods, key=lambda p: (p.restart, p.index))
    restarts = b.status["restarts"]
    current = [p for p in ordered if p.restart == restarts]
    facts = _Facts(
        meta,
        spec,
        ordered,
        current,
        service_exists,
        now,
        refused,
        b,
        creation_refused,
        template_error,
        disrupted or {},
    )
    for name, rule in RULES:
        decision = rule(facts)
        if decision is not None:
            return dataclasses.replace(decision, rule=name)
    raise AssertionError("the last rule always decides")


def next_due(spec: TrainJobSpec | SpecError, status: Mapping[str, Any]) -> datetime | None:
    """When a deadline of this status falls due (active deadline, startup timeout, container-error grace,
    restart back-off, TTL): the moment to look again though nothing changed. None: only a change can move
    the job on."""
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
        after("stalledSince", spec.startup_timeout_seconds)
        after("containerErrorSince", CONTAINER_ERROR_GRACE_SECONDS)
        after("nextRestartTime", 0)
    return min(candidates, default=None)
