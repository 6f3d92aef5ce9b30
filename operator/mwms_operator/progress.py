"""status.progress from the job's MLflow run, through MLflow's REST API (no MLflow client, no TensorFlow).

Short timeouts and no exceptions: an unreachable tracking server only leaves progress stale.
"""

from __future__ import annotations

import json
import logging
import math
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from mwms_operator import constants

log = logging.getLogger(__name__)


def _call(url: str, payload: Mapping[str, Any] | None, timeout: float) -> dict[str, Any]:
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (the user's tracking URI)
        return json.loads(response.read() or b"{}")


def find_run(
    tracking_uri: str, experiment: str, job_uid: str, *, timeout: float = 3.0
) -> dict[str, Any] | None:
    base = tracking_uri.rstrip("/") + "/api/2.0/mlflow"
    query = urllib.parse.urlencode({"experiment_name": experiment})
    found = _call(f"{base}/experiments/get-by-name?{query}", None, timeout)
    experiment_id = found["experiment"]["experiment_id"]
    runs = _call(
        f"{base}/runs/search",
        {
            "experiment_ids": [experiment_id],
            "filter": f"tags.`{constants.MLFLOW_TAG_JOB_UID}` = '{job_uid}'",
            "max_results": 1,
            "order_by": ["attributes.start_time DESC"],
        },
        timeout,
    ).get("runs")
    return runs[0] if runs else None


def progress_from_run(run: Mapping[str, Any], epochs: int | None) -> dict[str, Any]:
    """Epochs finished = the highest metric step + 1 (Keras logs one step per epoch, from 0)."""
    data = run.get("data") or {}
    metrics = data.get("metrics") or []
    params = {p.get("key"): p.get("value") for p in data.get("params") or []}
    progress: dict[str, Any] = {
        "runId": (run.get("info") or {}).get("run_id"),
        # JSON (and so the API server) has no NaN or infinity: a diverged loss is left out.
        "metrics": {
            m["key"]: float(m["value"])
            for m in metrics
            if "key" in m and isinstance(m.get("value"), int | float) and math.isfinite(m["value"])
        },
    }
    if metrics:
        progress["epoch"] = max(int(m.get("step") or 0) for m in metrics) + 1
    total = params.get("epochs") or epochs
    try:
        if total is not None:
            progress["epochs"] = int(total)
    except ValueError:
        pass
    return progress


def fetch_progress(
    tracking_uri: str, experiment: str, job_uid: str, epochs: int | None, *, timeout: float = 3.0
) -> dict[str, Any] | None:
    # Only HTTP(S) tracking servers have the REST API; urllib would also open file: and ftp: URLs.
    if urllib.parse.urlsplit(tracking_uri).scheme not in ("http", "https"):
        return None
    try:
        run = find_run(tracking_uri, experiment, job_uid, timeout=timeout)
        return progress_from_run(run, epochs) if run else None
    # A server answering unexpected JSON (wrong types, missing keys) is as unreadable as a down one;
    # urllib's URLError is an OSError.
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError) as error:
        log.debug("MLflow at %s not readable (%s): progress stays as it is", tracking_uri, error)
        return None
