"""status.progress from the job's MLflow run, and the run's end once the job has ended, through MLflow's REST
API (rest.py), only on servers the administrator allows (access.py). Short timeouts and no exceptions: a
failed read says why (Unreadable), which the ProgressUnavailable condition shows.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mwms_contract.conditions import (
    FAILED,
    MLFLOW_RUN_ENDED,
    NO_MLFLOW_RUN,
    RUN_ENDED_BY_CHIEF,
    RUN_ENDED_BY_OPERATOR,
    SUCCEEDED,
    TRACKING_SERVER_NOT_ALLOWED,
)
from mwms_contract.names import MLFLOW_PARAM_EPOCHS, MLFLOW_TAG_JOB_UID
from mwms_contract.status import PROGRESS_KEYS, MlflowRun, Progress, TrainJobStatus, run_patch, typed
from mwms_operator.mlflow import rest
from mwms_operator.mlflow.access import TrackingAccess, without_userinfo
from mwms_operator.observe.findings import Said

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Unreadable:
    """The tracking server could not be read (or written): a reason of TRACKING_REASONS, and what to check."""

    reason: str
    message: str


def find_run(
    tracking_uri: str,
    experiment: str,
    job_uid: str,
    *,
    timeout: float = 3.0,
    headers: Mapping[str, str] | None = None,
) -> dict[str, Any] | None:
    return rest.find_run(tracking_uri, experiment, job_uid, timeout=timeout, headers=headers or {})


# What a read of the run learns besides the status's fields: when its last epoch was logged (seconds since
# the epoch), from which the time left is estimated (ProgressReader). Progress.from_dict leaves it out.
EPOCH_TIME = "epochTime"


def progress_from_run(run: Mapping[str, Any], epochs: int | None) -> dict[str, Any]:
    """status.progress as read from the run (and, for status.mlflow, its experimentId). Epochs finished =
    the highest metric step + 1 (Keras logs one step per epoch, from 0)."""
    data = run.get("data") or {}
    metrics = data.get("metrics") or []
    params = {p.get("key"): p.get("value") for p in data.get("params") or []}
    info = run.get("info") or {}
    given = params.get(MLFLOW_PARAM_EPOCHS) or epochs
    epoch = max(int(m.get("step") or 0) for m in metrics) + 1 if metrics else None
    # user code may log any "epochs" param: one that is no count is left out
    total = int(given) if given is not None and str(given).strip().isdigit() else None
    stamps = [m.get("timestamp") for m in metrics if int(m.get("step") or 0) + 1 == epoch]
    stamps = [t for t in stamps if isinstance(t, int | float)]
    progress = Progress(
        epoch=epoch,
        epochs=total,
        percentage=min(100, epoch * 100 // total) if epoch is not None and total else None,
        # JSON (and so the API server) has no NaN or infinity: a diverged loss is left out.
        metrics={
            m["key"]: float(m["value"])
            for m in metrics
            if "key" in m and isinstance(m.get("value"), int | float) and math.isfinite(m["value"])
        },
        run_id=info.get("run_id"),
    )
    experiment = info.get("experiment_id")
    run_of = MlflowRun(experiment_id=None if experiment is None else str(experiment))
    # experimentId for status.mlflow (status_patch), not status.progress
    found = {**progress.to_dict(), **run_of.to_dict()}
    if stamps:
        found[EPOCH_TIME] = max(stamps) / 1000
    return found


def remaining_seconds(first: tuple[int, float], latest: tuple[int, float], epochs: int | None) -> int | None:
    """Seconds left at the pace of the epochs logged between two reads of one group ((epochs finished, when
    the last was logged) each); None until there is a pace. Pure."""
    done, took = latest[0] - first[0], latest[1] - first[1]
    if not epochs or done <= 0 or took <= 0:
        return None
    return max(0, round((epochs - latest[0]) * took / done))


def finished(found: Mapping[str, Any], phase: str) -> dict[str, Any]:
    """The last read of a job that has ended: a Succeeded job is done (100 %, nothing left), a Failed one has
    no time left to estimate."""
    if phase == SUCCEEDED:
        return {**found, PROGRESS_KEYS["percentage"]: 100, PROGRESS_KEYS["remaining_seconds"]: 0}
    return {k: v for k, v in found.items() if k != PROGRESS_KEYS["remaining_seconds"]}


def status_patch(
    found: Mapping[str, Any], status: TrainJobStatus | Mapping[str, Any], now: str
) -> dict[str, Any]:
    """The status fields a read of the run changes: `progress` (stamped `now`), and `mlflow.runId` and
    `experimentId` as soon as the chief has opened the run (the chief's final message adds modelUri)."""
    was = typed(status)
    progress, run = Progress.from_dict(found), MlflowRun.from_dict(found)
    shown = None if was.progress is None else dataclasses.replace(was.progress, update_time=None)
    changed = progress != shown
    opened = (run.run_id or run.experiment_id) and not (was.mlflow and was.mlflow.run_id)
    return run_patch(
        progress=dataclasses.replace(progress, update_time=now) if changed else None,
        mlflow=MlflowRun(run.run_id or None, run.experiment_id or None) if opened else None,
    )


def fetch_progress(
    tracking_uri: str,
    experiment: str,
    job_uid: str,
    epochs: int | None,
    *,
    timeout: float = 3.0,
    headers: Mapping[str, str] | None = None,
) -> dict[str, Any] | Unreadable | None:
    """The job's progress; None before its run exists; Unreadable when the server cannot be read."""
    # Only HTTP(S) tracking servers have the REST API; urllib would also open file: and ftp: URLs.
    if urllib.parse.urlsplit(tracking_uri).scheme not in ("http", "https"):
        return None
    try:
        run = find_run(tracking_uri, experiment, job_uid, timeout=timeout, headers=headers)
        return progress_from_run(run, epochs) if run else None
    except rest.TrackingError as error:
        return _unreadable(tracking_uri, error)
    # JSON of the wrong shape (wrong types, missing keys) is as unreadable as a down server.
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as error:
        return _unreadable(tracking_uri, rest.bad_reply(tracking_uri, "runs/search", error))


def _unreadable(tracking_uri: str, error: rest.TrackingError) -> Unreadable:
    # Logged without the URI's userinfo, and never the headers.
    log.debug("MLflow at %s not readable: %s", without_userinfo(tracking_uri), error.message)
    return Unreadable(error.reason, error.message)


@dataclass(frozen=True)
class Skipped:
    """Progress of a job is not read; say so once (an event with this reason and message)."""

    reason: str
    message: str


class ProgressReader:
    """Reads a job's progress only from a tracking server the administrator allows, with the administrator's
    credentials for the operator's own server; for any other server it answers Skipped once per job, then
    None, and sends no request at all."""

    def __init__(self, access: TrackingAccess, *, timeout: float = 3.0) -> None:
        self.access, self.timeout = access, timeout
        self.told: set[str] = set()  # uids of jobs already told why their progress is skipped
        # The first read of each job's current group: (group, epochs finished, when the last was logged).
        self.first: dict[str, tuple[int, int, float]] = {}

    def read(
        self, job_uid: str, tracking_uri: str, experiment: str, epochs: int | None, group: int = 0
    ) -> dict[str, Any] | Skipped | Unreadable | None:
        """The job's progress, with the time left once two reads of its current group (`group`) found
        epochs logged at a pace."""
        found = self._read(job_uid, tracking_uri, experiment, epochs)
        if not isinstance(found, dict) or EPOCH_TIME not in found:
            return found
        progress = Progress.from_dict(found)
        if progress.epoch is None:
            return found
        latest = (progress.epoch, float(found[EPOCH_TIME]))
        first = self.first.get(job_uid)
        if first is None or first[0] != group or first[1] > latest[0]:
            self.first[job_uid] = (group, *latest)
            return found
        left = remaining_seconds(first[1:], latest, progress.epochs)
        return found if left is None else {**found, PROGRESS_KEYS["remaining_seconds"]: left}

    def _read(
        self, job_uid: str, tracking_uri: str, experiment: str, epochs: int | None
    ) -> dict[str, Any] | Skipped | Unreadable | None:
        # The allowed base, not the job's string: nothing the job added to it reaches a request.
        server = self.access.server(tracking_uri)
        if server is None:
            if job_uid in self.told:
                return None
            self.told.add(job_uid)
            return Skipped(
                TRACKING_SERVER_NOT_ALLOWED,
                f"status.progress is not read from {without_userinfo(tracking_uri)!r}: the operator reads "
                "progress only from its own tracking server and the ones its administrator allows, each at "
                "its base path exactly, without a query (chart values operator.trackingUri and "
                "operator.allowedTrackingUris); training and "
                "MLflow logging are not affected",
            )
        return fetch_progress(
            server, experiment, job_uid, epochs, timeout=self.timeout, headers=self.access.headers(server)
        )

    def end_run(
        self,
        job_uid: str,
        tracking_uri: str,
        experiment: str,
        phase: str,
        run_id: str | None,
        said_before: bool = False,
    ) -> Said | None:
        """Once the job has ended: its run must have ended too. A run still RUNNING (the chief died, or its
        end_run failed) is set FINISHED or FAILED, as the job ended; what could not be done names the run
        (by its ID, else by its tags). None: nothing to say (no allowed server: no request; no run, and
        nothing `said_before` about it)."""
        server = self.access.server(tracking_uri)
        if server is None:
            return None
        headers, timeout = self.access.headers(server), self.timeout
        try:
            run = rest.find_run(server, experiment, job_uid, timeout=timeout, headers=headers)
            if run is None:
                if not said_before:
                    return None
                # A run named by its tags while the server was away: there is none, nothing to end.
                message = f"the job has no MLflow run in experiment {experiment!r}: there is none to end"
                return Said(MLFLOW_RUN_ENDED, True, NO_MLFLOW_RUN, message)
            run_id = str(run["info"]["run_id"])
            status = rest.run_status(run)
            if status != rest.RUNNING_STATUS:
                return Said(MLFLOW_RUN_ENDED, True, RUN_ENDED_BY_CHIEF, f"MLflow run {run_id} is {status}")
            final = "FAILED" if phase == FAILED else "FINISHED"
            rest.end_run(server, run_id, final, timeout=timeout, headers=headers)
        except (rest.TrackingError, KeyError, TypeError, AttributeError) as error:
            if not isinstance(error, rest.TrackingError):
                error = rest.bad_reply(server, "runs/search", error)
            # A run the job's status does not name (its chief died before a read found it) is named by the
            # tags it is found by: it may be RUNNING, and is looked for again.
            tags = f"tag {MLFLOW_TAG_JOB_UID}={job_uid} in experiment {experiment!r}"
            named = (
                f"MLflow run {run_id}"
                if run_id
                else f"the job's MLflow run ({tags}), if its chief opened one,"
            )
            message = f"{named} may still be RUNNING though the job is {phase}: {error.message}"
            return Said(MLFLOW_RUN_ENDED, False, error.reason, message, warning=True)
        message = f"MLflow run {run_id} was RUNNING when the job was {phase}: the operator set it {final}"
        return Said(MLFLOW_RUN_ENDED, True, RUN_ENDED_BY_OPERATOR, message, warning=True)

    def forget(self, job_uid: str) -> None:
        """A deleted job needs no more telling."""
        self.told.discard(job_uid)
        self.first.pop(job_uid, None)
