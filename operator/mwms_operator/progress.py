"""status.progress from the job's MLflow run, through MLflow's REST API (no MLflow client, no TensorFlow).

Short timeouts and no exceptions: an unreachable tracking server only leaves progress stale. Only servers the
administrator allows are called (see tracking.py), only at the two MLflow REST paths built here under the
allowed base, and never a server they redirect to.
"""

from __future__ import annotations

import json
import logging
import math
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mwms_contract import names
from mwms_contract.conditions import TRACKING_SERVER_NOT_ALLOWED
from mwms_operator.tracking import TrackingAccess, without_userinfo

log = logging.getLogger(__name__)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """An allowed server must not send us on to one that is not (nor receive our credentials there)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # urllib then raises HTTPError for the 3xx answer


_OPENER = urllib.request.build_opener(_NoRedirects)


def _call(
    url: str, payload: Mapping[str, Any] | None, timeout: float, headers: Mapping[str, str]
) -> dict[str, Any]:
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **headers})
    with _OPENER.open(request, timeout=timeout) as response:
        return json.loads(response.read() or b"{}")


def find_run(
    tracking_uri: str,
    experiment: str,
    job_uid: str,
    *,
    timeout: float = 3.0,
    headers: Mapping[str, str] | None = None,
) -> dict[str, Any] | None:
    base = without_userinfo(tracking_uri).rstrip("/") + "/api/2.0/mlflow"
    query = urllib.parse.urlencode({"experiment_name": experiment})
    found = _call(f"{base}/experiments/get-by-name?{query}", None, timeout, headers or {})
    experiment_id = found["experiment"]["experiment_id"]
    runs = _call(
        f"{base}/runs/search",
        {
            "experiment_ids": [experiment_id],
            "filter": f"tags.`{names.MLFLOW_TAG_JOB_UID}` = '{job_uid}'",
            "max_results": 1,
            "order_by": ["attributes.start_time DESC"],
        },
        timeout,
        headers or {},
    ).get("runs")
    return runs[0] if runs else None


def progress_from_run(run: Mapping[str, Any], epochs: int | None) -> dict[str, Any]:
    """Epochs finished = the highest metric step + 1 (Keras logs one step per epoch, from 0)."""
    data = run.get("data") or {}
    metrics = data.get("metrics") or []
    params = {p.get("key"): p.get("value") for p in data.get("params") or []}
    info = run.get("info") or {}
    progress: dict[str, Any] = {
        "runId": info.get("run_id"),
        # JSON (and so the API server) has no NaN or infinity: a diverged loss is left out.
        "metrics": {
            m["key"]: float(m["value"])
            for m in metrics
            if "key" in m and isinstance(m.get("value"), int | float) and math.isfinite(m["value"])
        },
    }
    if info.get("experiment_id") is not None:  # for status.mlflow (status_patch), not status.progress
        progress["experimentId"] = str(info["experiment_id"])
    if metrics:
        progress["epoch"] = max(int(m.get("step") or 0) for m in metrics) + 1
    total = params.get("epochs") or epochs
    if total is not None and str(total).strip().isdigit():  # user code may log any "epochs" param: skip it
        progress["epochs"] = int(total)
    return progress


def status_patch(found: Mapping[str, Any], status: Mapping[str, Any], now: str) -> dict[str, Any]:
    """The status fields a read of the run changes: `progress` (stamped `now`), and `mlflow.runId` and
    `experimentId` as soon as the chief has opened the run (the chief's final message adds modelUri)."""
    patch: dict[str, Any] = {}
    progress = {k: v for k, v in found.items() if k != "experimentId" and v is not None}
    shown = {k: v for k, v in (status.get("progress") or {}).items() if k != "updateTime"}
    if progress != shown:
        patch["progress"] = {**progress, "updateTime": now}
    run = {k: found[k] for k in ("runId", "experimentId") if found.get(k)}
    mlflow = status.get("mlflow") or {}
    if run and not mlflow.get("runId"):
        patch["mlflow"] = run
    return patch


def fetch_progress(
    tracking_uri: str,
    experiment: str,
    job_uid: str,
    epochs: int | None,
    *,
    timeout: float = 3.0,
    headers: Mapping[str, str] | None = None,
) -> dict[str, Any] | None:
    # Only HTTP(S) tracking servers have the REST API; urllib would also open file: and ftp: URLs.
    if urllib.parse.urlsplit(tracking_uri).scheme not in ("http", "https"):
        return None
    try:
        run = find_run(tracking_uri, experiment, job_uid, timeout=timeout, headers=headers)
        return progress_from_run(run, epochs) if run else None
    # A server answering unexpected JSON (wrong types, missing keys) is as unreadable as a down one;
    # urllib's URLError is an OSError. Logged without the URI's userinfo, and never the headers.
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError) as error:
        log.debug(
            "MLflow at %s not readable (%s): progress stays as it is", without_userinfo(tracking_uri), error
        )
        return None


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

    def read(
        self, job_uid: str, tracking_uri: str, experiment: str, epochs: int | None
    ) -> dict[str, Any] | Skipped | None:
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

    def forget(self, job_uid: str) -> None:
        """A deleted job needs no more telling."""
        self.told.discard(job_uid)
