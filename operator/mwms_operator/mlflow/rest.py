"""The only place the operator talks to MLflow: its REST API (no MLflow client, no TensorFlow), at paths built
here under a base the administrator allows (access.py), never following a redirect. Every failure is a
TrackingError whose reason (mwms_contract.conditions.TRACKING_REASONS) says what went wrong."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from mwms_contract import names
from mwms_contract.conditions import (
    TRACKING_BAD_REPLY,
    TRACKING_FORBIDDEN,
    TRACKING_SERVER_ERROR,
    TRACKING_UNAUTHORIZED,
    TRACKING_UNREACHABLE,
)
from mwms_operator.mlflow.access import without_userinfo

RUNNING_STATUS = "RUNNING"


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """An allowed server must not send us on to one that is not (nor receive our credentials there)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # urllib then raises HTTPError for the 3xx answer


_OPENER = urllib.request.build_opener(_NoRedirects)


class TrackingError(Exception):
    """MLflow could not be read or written; `reason` says why, the message what to check."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


class NotFound(Exception):
    """404: the experiment or run does not exist (yet): not a failure of the server."""


def _what_to_check(server: str, status: int) -> tuple[str, str]:
    if status == 401:
        return TRACKING_UNAUTHORIZED, (
            "check the operator's tracking credentials (chart value operator.trackingCredentials; "
            "the operator reads them at startup)"
        )
    if status == 403:
        return TRACKING_FORBIDDEN, "the operator's tracking credentials may not read or update it"
    if status >= 500:
        return TRACKING_SERVER_ERROR, f"the tracking server at {server} failed; see its logs"
    return TRACKING_BAD_REPLY, f"is {server} an MLflow tracking server (its base path included)?"


def call(
    server: str,
    path: str,
    payload: Mapping[str, Any] | None,
    *,
    timeout: float,
    headers: Mapping[str, str],
    api: str = "mlflow",
    data: bytes | None = None,
) -> dict[str, Any]:
    """One request to `server` (an allowed base) at the REST path `path` of MLflow's `api` (its tracking API,
    or `mlflow-artifacts`), sending `payload` as JSON (a POST) or `data` as it is (a PUT); its JSON object."""
    server = without_userinfo(server).rstrip("/")
    url = f"{server}/api/2.0/{api}/{path}"
    kind, method = "application/json", None
    if data is not None:
        kind, method = "application/octet-stream", "PUT"
    elif payload is not None:
        data = json.dumps(payload).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": kind, **headers})
    shown = path.split("?", 1)[0]
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            body = response.read()
    except urllib.error.HTTPError as error:
        if error.code == 404:
            raise NotFound(shown) from None
        reason, hint = _what_to_check(server, error.code)
        raise TrackingError(reason, f"MLflow at {server} answered {error.code} to {shown}: {hint}") from None
    except (OSError, ValueError) as error:  # URLError, timeouts, TLS, a reset connection, a bad URL
        text = str(getattr(error, "reason", None) or error) or type(error).__name__
        raise TrackingError(TRACKING_UNREACHABLE, f"MLflow at {server} is unreachable: {text}") from None
    try:
        answer = json.loads(body or b"{}")
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise TrackingError(
            TRACKING_BAD_REPLY, f"MLflow at {server} answered {shown} with a body that is not a JSON object"
        )
    return answer


def bad_reply(server: str, what: str, error: BaseException) -> TrackingError:
    """JSON that is not MLflow's answer (wrong types, missing keys)."""
    shown = without_userinfo(server)
    text = f"MLflow at {shown} answered {what} with unexpected JSON ({type(error).__name__})"
    return TrackingError(TRACKING_BAD_REPLY, text)


def find_run(
    server: str, experiment: str, job_uid: str, *, timeout: float, headers: Mapping[str, str]
) -> dict[str, Any] | None:
    """The job's run (found by its uid tag), or None: no experiment or run yet."""
    query = urllib.parse.urlencode({"experiment_name": experiment})
    try:
        found = call(server, f"experiments/get-by-name?{query}", None, timeout=timeout, headers=headers)
    except NotFound:
        return None  # the chief has not created the experiment yet
    try:
        experiment_id = found["experiment"]["experiment_id"]
    except (KeyError, TypeError) as error:
        raise bad_reply(server, "experiments/get-by-name", error) from None
    search = {
        "experiment_ids": [experiment_id],
        "filter": f"tags.`{names.MLFLOW_TAG_JOB_UID}` = '{job_uid}'",
        "max_results": 1,
        "order_by": ["attributes.start_time DESC"],
    }
    runs = call(server, "runs/search", search, timeout=timeout, headers=headers).get("runs")
    if runs is not None and not (isinstance(runs, list) and all(isinstance(r, dict) for r in runs)):
        raise bad_reply(server, "runs/search", TypeError("runs"))
    return runs[0] if runs else None


def end_run(server: str, run_id: str, status: str, *, timeout: float, headers: Mapping[str, str]) -> None:
    """Set the run's terminal status (FINISHED, FAILED) and end time, as the chief's end_run does."""
    update = {"run_id": run_id, "status": status, "end_time": int(time.time() * 1000)}
    call(server, "runs/update", update, timeout=timeout, headers=headers)


def run_status(run: Mapping[str, Any]) -> str:
    info = run.get("info")
    return str(info.get("status") or "") if isinstance(info, dict) else ""


class NotProxied(Exception):
    """The run keeps its artifacts where the tracking server does not proxy them (its artifact root)."""


PROXIED = "mlflow-artifacts:"  # a run's artifact root when the server proxies its artifacts


def upload_artifact(
    server: str, run: Mapping[str, Any], path: str, data: bytes, *, timeout: float, headers: Mapping[str, str]
) -> None:
    """`data` as the run's artifact `path`, through the server's artifact proxy (`mlflow server
    --serve-artifacts`, its default), as the workers upload their logs; NotProxied for a run whose artifact
    root is elsewhere (the operator holds no credentials of an artifact store)."""
    root = str((run.get("info") or {}).get("artifact_uri") or "")
    if not root.startswith(PROXIED):
        raise NotProxied(root)
    location = urllib.parse.urlparse(root).path.strip("/")
    target = urllib.parse.quote(f"artifacts/{location}/{path}")
    call(server, target, None, timeout=timeout, headers=headers, api="mlflow-artifacts", data=data)
