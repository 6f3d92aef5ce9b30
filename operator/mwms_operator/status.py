"""Pure: the status a decision writes: its conditions, the builder that collects a decision's status, actions
and events, and when a deadline of a status falls due.

Level-based: every decision recomputes everything from the pods that exist, so a missed event, a retried
handler or an operator restart changes nothing. The new status is written before the actions run, so a crash
between the two is repaired by the next decision (e.g. pods of an older restart are "stale" and get deleted).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from mwms_contract import termination
from mwms_contract.conditions import FAILED, PENDING, PHASE_CONDITIONS, RESTARTING, SUSPENDED, TERMINAL
from mwms_contract.trainjob import SpecError, TrainJobSpec
from mwms_operator.builders import pod_name

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


def truncate(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"


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
class Said:
    """A condition that a look outside the pods decided (the job's tracking server: runwatch.py). The
    decision writes it, and posts one event each time its status or reason changes (not on every poll)."""

    type: str
    status: bool
    reason: str
    message: str
    warning: bool = False  # the event's type: Warning, else Normal


@dataclass(frozen=True)
class Decision:
    # Our status fields; None means "remove the field" (the handler sends it as a JSON merge patch).
    status: dict[str, Any]
    actions: tuple[Action, ...] = ()
    events: tuple[Event, ...] = ()
    # Set when the whole group of this (re)start has just been seen to exist: for the creation→pods metric.
    all_pods_created: bool = False
    rule: str = ""  # the name of the rule in RULES that decided


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


class Builder:
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
        after("containerErrorSince", spec.container_error_grace_seconds)
        after("nextRestartTime", 0)
    return min(candidates, default=None)
