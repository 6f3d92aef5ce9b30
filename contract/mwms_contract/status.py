"""A TrainJob's status, typed: the operator writes it and the client reads it through these classes, so the
two cannot disagree on a key. The JSON keys are those the CRD's status schema declares (manifests/crd.yaml),
each named once, in the *_KEYS maps (field -> key) below.

Parsing is tolerant: a status an older operator wrote (keys missing), or a newer one (keys unknown here),
still parses; a phase this version does not know keeps its text. Times stay the RFC 3339 text the operator
wrote, so a status read and rendered again is the same bytes.
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

CONDITION_KEYS = {
    "type": "type",
    "status": "status",
    "reason": "reason",
    "message": "message",
    "last_transition_time": "lastTransitionTime",
    "observed_generation": "observedGeneration",
}
COUNT_KEYS = {"active": "active", "ready": "ready", "succeeded": "succeeded", "failed": "failed"}
RUN_KEYS = {
    "run_id": "runId",
    "experiment_id": "experimentId",
    "model_uri": "modelUri",
    "tracking_uri": "trackingUri",
}
PROGRESS_KEYS = {
    "run_id": "runId",
    "epoch": "epoch",
    "epochs": "epochs",
    "metrics": "metrics",
    "update_time": "updateTime",
    "percentage": "progressPercentage",  # Kubeflow Trainer v2's names
    "remaining_seconds": "estimatedRemainingSeconds",
}
# In the order the operator writes them.
STATUS_KEYS = {
    "phase": "phase",
    "restarts": "restarts",
    "disruptions": "disruptions",
    "next_restart_time": "nextRestartTime",
    "stalled_since": "stalledSince",
    "container_error_since": "containerErrorSince",
    "start_time": "startTime",
    "group_start_time": "groupStartTime",
    "completion_time": "completionTime",
    "chief_pod": "chiefPod",
    "mlflow": "mlflow",
    "progress": "progress",
    "observed_generation": "observedGeneration",
    "conditions": "conditions",
    "replica_statuses": "replicaStatuses",
}
TRUE, FALSE, UNKNOWN = "True", "False", "Unknown"  # a condition's status
MAX_MESSAGE = 1024  # characters of a condition's message


def format_time(moment: datetime) -> str:
    """A status time: RFC 3339 in UTC, whole seconds (`2026-12-02T10:00:00Z`)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> datetime | None:
    """A status time (or any RFC 3339 time the API server writes) as an aware datetime; None for none."""
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def truncate(text: str) -> str:
    """A message cut to MAX_MESSAGE characters, its last one an ellipsis where it was cut."""
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _int(value: Any) -> int | None:
    try:
        return None if value is None or isinstance(value, bool) else int(value)
    except (TypeError, ValueError):
        return None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _render(obj: Any, keys: Mapping[str, str]) -> dict[str, Any]:
    """The fields of obj under their keys, leaving out those that are None."""
    values = ((key, getattr(obj, name)) for name, key in keys.items())
    return {key: value for key, value in values if value is not None}


@dataclass(frozen=True)
class Condition:
    """A standard condition: lastTransitionTime changes only when status does."""

    type: str
    status: str  # TRUE, FALSE or UNKNOWN
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = None
    observed_generation: int | None = None

    @property
    def true(self) -> bool:
        return self.status == TRUE

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Condition:
        k = CONDITION_KEYS
        return cls(
            type=str(data.get(k["type"]) or ""),
            status=str(data.get(k["status"]) or ""),
            reason=str(data.get(k["reason"]) or ""),
            message=str(data.get(k["message"]) or ""),
            last_transition_time=_text(data.get(k["last_transition_time"])),
            observed_generation=_int(data.get(k["observed_generation"])),
        )

    def to_dict(self) -> dict[str, Any]:
        return _render(self, CONDITION_KEYS)


@dataclass(frozen=True)
class ReplicaCounts:
    """status.replicaStatuses: the current group's worker pods by state (by their trainer container)."""

    active: int = 0
    ready: int = 0
    succeeded: int = 0
    failed: int = 0

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReplicaCounts:
        return cls(**{name: _int(data.get(key)) or 0 for name, key in COUNT_KEYS.items()})

    def to_dict(self) -> dict[str, Any]:
        return _render(self, COUNT_KEYS)


def shown_uri(uri: str) -> str:
    """A tracking URI as the status may show it: without userinfo, query or fragment, where credentials
    (user:password@, ?token=) would be."""
    parts = urllib.parse.urlsplit(uri.strip())
    netloc = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


@dataclass(frozen=True)
class MlflowRun:
    """status.mlflow: the job's one MLflow run (None until the chief has opened it), its model, and the
    tracking server that holds them (shown_uri: never credentials)."""

    run_id: str | None = None
    experiment_id: str | None = None
    model_uri: str | None = None
    tracking_uri: str | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MlflowRun:
        return cls(**{name: _text(data.get(key)) for name, key in RUN_KEYS.items()})

    def to_dict(self) -> dict[str, Any]:
        return _render(self, RUN_KEYS)


@dataclass(frozen=True)
class Progress:
    """status.progress: what the operator reads from the job's MLflow run while it runs (may lag)."""

    epoch: int | None = None  # epochs finished
    epochs: int | None = None  # in all, when known
    metrics: Mapping[str, float] = field(default_factory=dict)  # each metric's latest value
    update_time: str | None = None  # when it was read
    run_id: str | None = None  # the run found by the job's uid tag
    percentage: int | None = None  # 0-100: epochs finished of those in all (100 once Succeeded)
    remaining_seconds: int | None = None  # estimated from the pace of this group's epochs so far

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Progress:
        k = PROGRESS_KEYS
        metrics = _mapping(data.get(k["metrics"]))
        return cls(
            epoch=_int(data.get(k["epoch"])),
            epochs=_int(data.get(k["epochs"])),
            metrics={str(name): value for name, value in metrics.items() if isinstance(value, int | float)},
            update_time=_text(data.get(k["update_time"])),
            run_id=_text(data.get(k["run_id"])),
            percentage=_int(data.get(k["percentage"])),
            remaining_seconds=_int(data.get(k["remaining_seconds"])),
        )

    def to_dict(self) -> dict[str, Any]:
        rendered = _render(self, PROGRESS_KEYS)
        rendered[PROGRESS_KEYS["metrics"]] = dict(self.metrics)
        return rendered


@dataclass(frozen=True)
class TrainJobStatus:
    """The whole status. `phase` is None only before the operator first wrote one; times are RFC 3339."""

    phase: str | None = None
    restarts: int = 0  # group restarts: the current pods' MWMS_RESTART_COUNT
    disruptions: int = 0  # restarts a disruption caused (not counted against backoffLimit)
    next_restart_time: str | None = None
    stalled_since: str | None = None
    container_error_since: str | None = None
    start_time: str | None = None
    group_start_time: str | None = None
    completion_time: str | None = None
    chief_pod: str | None = None
    mlflow: MlflowRun | None = None
    progress: Progress | None = None
    observed_generation: int | None = None
    conditions: tuple[Condition, ...] = ()
    replica_statuses: ReplicaCounts | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> TrainJobStatus:
        data = data or {}
        k = STATUS_KEYS
        mlflow, progress = data.get(k["mlflow"]), data.get(k["progress"])
        counts = data.get(k["replica_statuses"])
        conditions = data.get(k["conditions"])
        return cls(
            phase=_text(data.get(k["phase"])) or None,
            restarts=_int(data.get(k["restarts"])) or 0,
            disruptions=_int(data.get(k["disruptions"])) or 0,
            next_restart_time=_text(data.get(k["next_restart_time"])),
            stalled_since=_text(data.get(k["stalled_since"])),
            container_error_since=_text(data.get(k["container_error_since"])),
            start_time=_text(data.get(k["start_time"])),
            group_start_time=_text(data.get(k["group_start_time"])),
            completion_time=_text(data.get(k["completion_time"])),
            chief_pod=_text(data.get(k["chief_pod"])),
            mlflow=MlflowRun.from_dict(mlflow) if isinstance(mlflow, Mapping) else None,
            progress=Progress.from_dict(progress) if isinstance(progress, Mapping) else None,
            observed_generation=_int(data.get(k["observed_generation"])),
            conditions=tuple(Condition.from_dict(c) for c in conditions or () if isinstance(c, Mapping))
            if isinstance(conditions, list | tuple)
            else (),
            replica_statuses=ReplicaCounts.from_dict(counts) if isinstance(counts, Mapping) else None,
        )

    @classmethod
    def of(cls, trainjob: Mapping[str, Any]) -> TrainJobStatus:
        """The status of a TrainJob object (as the API server gives it)."""
        return cls.from_dict(trainjob.get("status"))

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == type_), None)

    def holds(self, type_: str) -> bool:
        """Whether the condition of this type is True."""
        found = self.condition(type_)
        return found is not None and found.true

    def replace(self, **changes: Any) -> TrainJobStatus:
        return dataclasses.replace(self, **changes)

    def _value(self, name: str) -> Any:
        value = getattr(self, name)
        if name == "conditions":
            return [c.to_dict() for c in value]
        return value.to_dict() if hasattr(value, "to_dict") else value

    def to_dict(self) -> dict[str, Any]:
        """The status as the API server shows it: fields that are None are left out."""
        values = ((key, self._value(name)) for name, key in STATUS_KEYS.items())
        return {key: value for key, value in values if value is not None}

    def to_patch(self, *, progress: bool = True) -> dict[str, Any]:
        """A JSON merge patch that sets every field; None (null) removes a field. `progress=False` leaves
        status.progress to its own writer (the operator's look at the run)."""
        names = (n for n in STATUS_KEYS if progress or n != "progress")
        return {STATUS_KEYS[name]: self._value(name) for name in names}


def run_patch(*, progress: Progress | None = None, mlflow: MlflowRun | None = None) -> dict[str, Any]:
    """A JSON merge patch of what a look at the job's MLflow run learned; the rest of the status is kept."""
    patch: dict[str, Any] = {}
    if progress is not None:
        patch[STATUS_KEYS["progress"]] = progress.to_dict()
    if mlflow is not None:
        patch[STATUS_KEYS["mlflow"]] = mlflow.to_dict()
    return patch


def conditions_patch(conditions: Iterable[Condition]) -> dict[str, Any]:
    """A JSON merge patch of the conditions alone: the whole list, since a merge patch replaces a list."""
    return {STATUS_KEYS["conditions"]: [condition.to_dict() for condition in conditions]}


def typed(status: TrainJobStatus | Mapping[str, Any] | None) -> TrainJobStatus:
    """The status typed: as it is, or parsed from the dict the API server (or a decision's patch) holds."""
    return status if isinstance(status, TrainJobStatus) else TrainJobStatus.from_dict(status)
