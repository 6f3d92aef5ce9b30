"""The typed objects the SDK returns, read from a TrainJob's status as the contract parses it (pure functions
of plain dicts)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mwms.kube import SubmitError
from mwms.tracking_server import TrackingServer
from mwms.tracking_server import tracking_headers as tracking_headers  # re-exported
from mwms_contract import names, termination
from mwms_contract.conditions import NAMESPACE_UNLISTED, PENDING, SUCCEEDED, SUSPENDED, TERMINAL
from mwms_contract.status import Condition as Condition  # re-exported: the SDK's types are the contract's
from mwms_contract.status import MlflowRun, TrainJobStatus
from mwms_contract.status import Progress as Progress

Run = MlflowRun  # status.mlflow: the job's one MLflow run and its model


@dataclass(frozen=True)
class Job:
    """A TrainJob as the SDK returns it; `raw` is the object as the API server gave it (`-o json`)."""

    name: str
    namespace: str
    phase: str
    replicas: int
    restarts: int = 0
    uid: str = ""
    created: str | None = None
    conditions: tuple[Condition, ...] = ()
    mlflow: Run = field(default_factory=Run)
    progress: Progress | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def done(self) -> bool:
        return self.phase in TERMINAL

    @property
    def succeeded(self) -> bool:
        return self.phase == SUCCEEDED

    @property
    def message(self) -> str:
        """Why the job is in its phase (the Failed condition's message names the worker and its error)."""
        return next((c.message for c in self.conditions if c.type == self.phase), "")

    @property
    def held(self) -> str:
        """Why the operator leaves the job alone for now (NamespaceUnlisted), or ""."""
        return next((c.message for c in self.conditions if c.type == NAMESPACE_UNLISTED and c.true), "")


def job_from(obj: Mapping[str, Any]) -> Job:
    metadata, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    typed = TrainJobStatus.of(obj)
    mlflow, progress = typed.mlflow or Run(), typed.progress
    return Job(
        name=metadata.get("name", ""),
        namespace=metadata.get("namespace", ""),
        phase=typed.phase or PENDING,
        replicas=int(spec.get("replicas") or 0),
        restarts=typed.restarts,
        uid=metadata.get("uid", ""),
        created=metadata.get("creationTimestamp"),
        conditions=typed.conditions,
        # The run the progress found names the job's run before the chief's message does.
        mlflow=dataclasses.replace(mlflow, run_id=mlflow.run_id or (progress.run_id if progress else None)),
        progress=None
        if progress is None
        else dataclasses.replace(progress, run_id=None),  # job.mlflow has it
        raw=dict(obj),
    )


class JobSuspended(SubmitError):
    """The job is suspended: no phase follows until someone resumes it (`mwms` exits 3 on it, as `wait`)."""


def suspended_message(name: str) -> str:
    """What `mwms wait` (and every verb that follows a job) says of a suspended job."""
    return f"trainjob/{name} is Suspended (resume it: spec.runPolicy.suspend=false)"


def suspended(obj: Mapping[str, Any]) -> bool:
    """The job is suspended, or being suspended (its spec asks it, the operator deletes its pods); not once
    its spec asks to resume it, even while its phase still says Suspended."""
    asked = ((obj.get("spec") or {}).get("runPolicy") or {}).get("suspend")
    return asked is True or (asked is None and TrainJobStatus.of(obj).phase == SUSPENDED)


def chief_summary(pod: Mapping[str, Any] | None) -> dict[str, Any]:
    """The chief's termination message (pod as the kubernetes client's to_dict() gives it), parsed."""
    for status in ((pod or {}).get("status") or {}).get("container_statuses") or []:
        if status.get("name") != names.CONTAINER_NAME:
            continue
        terminated = (status.get("state") or {}).get("terminated") or {}
        return termination.summary(terminated.get("message") or "") or {}
    return {}


def chief_tracking_uri(pod: Mapping[str, Any] | None) -> str | None:
    """The MLflow tracking URI the chief ran with (pod as the kubernetes client's to_dict() gives it)."""
    for container in ((pod or {}).get("spec") or {}).get("containers") or []:
        if container.get("name") == names.CONTAINER_NAME:
            env = {e.get("name"): e.get("value") for e in container.get("env") or []}
            return env.get(names.ENV_TRACKING_URI) or None
    return None


class NoResult(LookupError):
    """The job returned no value (it failed, its chief pod is gone, or the script returns nothing)."""


def chiefs_value(summary: Mapping[str, Any], tracking: Any) -> Any:
    """The chief's return value, whole: from its termination message, or, when it was too big for it, the
    `runs:/RUN/PATH` artifact of the job's run, read on `tracking` (a TrackingServer or its URI; None when
    no server is known)."""
    if "resultArtifact" not in summary:
        if "result" not in summary:
            raise NoResult("the chief's termination message holds no result")
        return summary["result"]
    artifact = str(summary["resultArtifact"])
    if tracking is None:
        raise RuntimeError(
            f"the chief's result is in MLflow ({artifact}): set MLFLOW_TRACKING_URI to the tracking server"
        )
    if isinstance(tracking, str):
        tracking = TrackingServer(tracking)
    run_id, _, path = artifact.removeprefix("runs:/").partition("/")
    try:
        text = tracking.artifact(run_id, path)
        if text is None:
            raise RuntimeError(f"run {run_id} has no {path}")
        return json.loads(text)
    except (SubmitError, RuntimeError, ValueError) as e:
        raise RuntimeError(
            f"the chief's result is in MLflow ({artifact}) but could not be read from {tracking.where}: "
            f"{type(e).__name__}: {e}. Set MLFLOW_TRACKING_URI to an address of that tracking server this "
            "machine reaches"
        ) from e
