"""Pure: the status a decision writes: its conditions and counts, the Builder that collects it with the
decision's actions and events, which writes may wait (deferrable), and when a deadline falls due (next_due).
Level-based: each decision recomputes the status from the pods that exist and is written before its actions,
so a missed event, a retried handler or a crash in between is repaired by the next decision.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from mwms_contract import termination
from mwms_contract.conditions import (
    CREATED,
    FAILED,
    NAMESPACE_UNLISTED,
    PENDING,
    PHASE_CONDITIONS,
    PODS_CREATED,
    RESTARTING,
    RUNNING,
    SUSPENDED,
    TERMINAL,
    WATCH_REFUSED,
    WORKERS_PENDING,
)
from mwms_contract.names import pod_name
from mwms_contract.status import (
    FALSE,
    TRUE,
    Condition,
    MlflowRun,
    ReplicaCounts,
    TrainJobStatus,
    conditions_patch,
    format_time,
    parse_time,
    shown_uri,
    typed,
)
from mwms_contract.trainjob import SpecError, TrainJobSpec
from mwms_operator.observe.pod_states import WorkerPod


@dataclass(frozen=True)
class JobMeta:
    name: str
    namespace: str
    uid: str
    generation: int = 1


@dataclass(frozen=True)
class CreateService:
    pass


@dataclass(frozen=True)
class CreatePods:
    indices: tuple[int, ...]
    restart_count: int
    gang: bool = False  # placed all or nothing: with the group's PodGroup (made first, if not there yet)


@dataclass(frozen=True)
class DeletePods:
    names: tuple[str, ...]


@dataclass(frozen=True)
class DeletePodGroups:
    """The job's PodGroups of every group but the one of restart `keep`."""

    keep: int


@dataclass(frozen=True)
class DeleteJob:
    pass


@dataclass(frozen=True)
class CreateWorkload:
    """The job's Kueue Workload: for a job MultiKueue runs (decide/managed_by.py)."""


@dataclass(frozen=True)
class FinishWorkload:
    """Mark the job's own Kueue Workload Finished (MultiKueue's copy of a job, on a worker cluster)."""

    name: str
    succeeded: bool
    message: str
    time: str | None  # when the job ended (the condition's lastTransitionTime); None: now


@dataclass(frozen=True)
class KeepPostmortem:
    """The group of this (re)start has ended: keep its post-mortem in the job's MLflow run (before its pods
    are deleted, as they hold the workers' final states)."""

    group: int


Action = (
    CreateService
    | CreatePods
    | DeletePods
    | DeletePodGroups
    | DeleteJob
    | CreateWorkload
    | FinishWorkload
    | KeepPostmortem
)


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass(frozen=True)
class Decision:
    new: TrainJobStatus  # the decided status; its progress is the run watch's to write (mlflow/)
    actions: tuple[Action, ...] = ()
    events: tuple[Event, ...] = ()
    # Set when the whole group of this (re)start has just been seen to exist: for the creation→pods metric.
    all_pods_created: bool = False
    rule: str = ""  # the name of the rule in RULES that decided

    @property
    def status(self) -> dict[str, Any]:
        """What is written: a JSON merge patch of every field but progress; None removes a field."""
        return self.new.to_patch(progress=False)


def chief_mlflow(message: str, known: MlflowRun | None) -> MlflowRun | None:
    """The run the chief's termination message names (runId, experimentId, modelUri), on the tracking server
    `known` names; else `known`."""
    run = termination.run(message)  # the trainer writes it with the same module
    if run is None:
        return known
    return dataclasses.replace(MlflowRun.from_dict(run), tracking_uri=known.tracking_uri if known else None)


def with_tracking_uri(mlflow: MlflowRun | None, tracking_uri: str) -> MlflowRun:
    """status.mlflow naming the tracking server that holds the run (shown_uri: never credentials)."""
    return dataclasses.replace(mlflow or MlflowRun(), tracking_uri=shown_uri(tracking_uri))


def set_condition(
    conditions: list[Condition],
    type_: str,
    status: bool,
    reason: str,
    message: str,
    now: datetime,
    generation: int,
) -> None:
    """Update in place; lastTransitionTime changes only when the status does."""
    value = TRUE if status else FALSE
    new = Condition(type_, value, reason, message, format_time(now), generation)
    for i, condition in enumerate(conditions):
        if condition.type == type_:
            since = condition.last_transition_time if condition.status == value else new.last_transition_time
            conditions[i] = dataclasses.replace(new, last_transition_time=since)
            return
    conditions.append(new)


def unlisted_status(job: Mapping[str, Any], message: str, now: datetime) -> dict[str, Any]:
    """The status patch that says the job's namespace could not be listed (its other conditions kept)."""
    conditions, generation = list(TrainJobStatus.of(job).conditions), job["metadata"].get("generation") or 1
    set_condition(conditions, NAMESPACE_UNLISTED, True, WATCH_REFUSED, message, now, int(generation))
    return conditions_patch(conditions)


class Builder:
    """Collects the new status, actions and events of one decision."""

    def __init__(self, meta: JobMeta, previous: TrainJobStatus | Mapping[str, Any], now: datetime) -> None:
        self.meta, self.now = meta, now
        was = typed(previous)
        self.previous_phase = was.phase
        self.conditions = list(was.conditions)
        # The decision's own fields: status.progress is left to the run watch, the counts are recounted.
        self.status = dataclasses.replace(
            was,
            phase=was.phase or PENDING,
            chief_pod=pod_name(meta.name, 0),
            observed_generation=meta.generation,
            progress=None,
            conditions=(),
            replica_statuses=None,
        )
        self.actions: list[Action] = []
        self.events: list[Event] = []
        self.all_pods_created = False

    def set(self, **fields: Any) -> None:
        """Change fields of the new status (TrainJobStatus's names)."""
        self.status = dataclasses.replace(self.status, **fields)

    def find(self, type_: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == type_), None)

    def holds(self, type_: str) -> bool:
        found = self.find(type_)
        return found is not None and found.true

    def phase(self, phase: str, reason: str, message: str, *, event_type: str | None = None) -> None:
        self.set(phase=phase)
        for type_ in PHASE_CONDITIONS:
            if type_ == phase:
                self.condition(type_, True, reason, message)
            elif self.holds(type_):
                self.condition(type_, False, reason, message)
        if phase != self.previous_phase:
            kind = event_type or ("Warning" if phase in (FAILED, RESTARTING) else "Normal")
            self.events.append(Event(kind, reason, message))

    def condition(self, type_: str, status: bool, reason: str, message: str) -> None:
        set_condition(self.conditions, type_, status, reason, message, self.now, self.meta.generation)

    def finish(self, replicas: ReplicaCounts) -> Decision:
        new = dataclasses.replace(self.status, conditions=tuple(self.conditions), replica_statuses=replicas)
        return Decision(new, tuple(self.actions), tuple(self.events), self.all_pods_created)


def replica_statuses(pods: Sequence[WorkerPod]) -> ReplicaCounts:
    """By the trainer container: a worker whose trainer exited is done even while a sidecar keeps its pod,
    and stays counted as done while its pod is deleted (cleanPodPolicy); one being deleted is not active."""
    live = [p for p in pods if not p.deleting]
    return ReplicaCounts(
        active=sum(p.active and p.trainer_exit is None for p in live),
        ready=sum(p.phase == RUNNING and p.ready and p.trainer_exit is None for p in live),
        succeeded=sum(p.trainer_exit == 0 for p in pods),
        failed=sum(p.failed for p in pods),
    )


# What may wait a moment to be written (STATUS_COALESCE_SECONDS, observe/state.py): the counts, the start's
# clocks and the conditions that only say how far a start has got (deferrable() says which). A phase change,
# a restart, a time a user reads, an error: at once.
DEFERRABLE_FIELDS = ("replica_statuses", "stalled_since", "container_error_since", "progress", "conditions")
START_CONDITIONS = ((CREATED, TRUE, PODS_CREATED), (RUNNING, FALSE, WORKERS_PENDING))


def deferrable(written: TrainJobStatus | Mapping[str, Any], decided: TrainJobStatus) -> bool:
    """Whether `decided` differs from the `written` status only in what may wait: the counts, the start's
    clocks, and the conditions that say how far the start has got (Created; Running False for
    WorkersPending, whose message counts the workers that run). Also a new job's first status while it only
    says Pending and how far the start has got: until it is written the job shows no phase, as before the
    operator first saw it (clients read that as Pending), and a status lost with the operator is decided
    again from the pods (facts.mark_started)."""
    was = typed(written)
    if not was.phase:  # nothing written yet: the job's first status
        if decided.phase != PENDING:
            return False
    elif any(
        field.name not in DEFERRABLE_FIELDS and getattr(was, field.name) != getattr(decided, field.name)
        for field in dataclasses.fields(TrainJobStatus)
    ):
        return False
    before = {c.type: c for c in was.conditions}
    for condition in decided.conditions:
        if before.pop(condition.type, None) == condition:
            continue
        if (condition.type, condition.status, condition.reason) not in START_CONDITIONS:
            return False
    return not before  # a condition removed: at once


def next_due(spec: TrainJobSpec | SpecError, status: TrainJobStatus | Mapping[str, Any]) -> datetime | None:
    """When a deadline of this status falls due (active deadline, startup timeout, container-error grace,
    restart back-off, TTL): the moment to look again though nothing changed. None: only a change can move
    the job on."""
    if isinstance(spec, SpecError):
        return None
    candidates: list[datetime] = []

    def after(moment_text: str | None, seconds: int | None) -> None:
        moment = parse_time(moment_text)
        if moment is not None and seconds is not None:
            candidates.append(moment + timedelta(seconds=seconds))

    now = typed(status)
    if now.phase in TERMINAL:
        after(now.completion_time, spec.ttl_seconds_after_finished)
    elif now.phase != SUSPENDED:
        after(now.start_time, spec.active_deadline_seconds)
        after(now.stalled_since, spec.startup_timeout_seconds)
        after(now.container_error_since, spec.container_error_grace_seconds)
        after(now.next_restart_time, 0)
    return min(candidates, default=None)
