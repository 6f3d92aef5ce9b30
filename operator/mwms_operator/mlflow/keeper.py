"""A group's post-mortem (mwms_contract.postmortem) written into the job's MLflow run, at
postmortem/group-K.json, through the tracking server's artifact proxy: only on a server the administrator
allows (access.py), with the administrator's credentials for the operator's own. No exceptions: what could
not be done is a Said for the PostmortemKept condition, naming why."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from mwms_contract import postmortem
from mwms_contract.conditions import (
    ARTIFACTS_NOT_PROXIED,
    NO_MLFLOW_RUN,
    POSTMORTEM_KEPT,
    POSTMORTEM_WRITTEN,
    TRACKING_BAD_REPLY,
    TRACKING_SERVER_NOT_ALLOWED,
)
from mwms_operator.mlflow import rest
from mwms_operator.mlflow.access import TrackingAccess, without_userinfo
from mwms_operator.observe.findings import Said

log = logging.getLogger(__name__)
# Why a post-mortem is not kept that no later try can change: said, and not tried again.
FINAL_REASONS = (
    POSTMORTEM_WRITTEN,
    NO_MLFLOW_RUN,
    ARTIFACTS_NOT_PROXIED,
    TRACKING_SERVER_NOT_ALLOWED,
)


def keep_postmortem(
    access: TrackingAccess,
    job_uid: str,
    tracking_uri: str,
    experiment: str,
    document: Mapping[str, Any],
    *,
    timeout: float = 10.0,
) -> Said:
    """Write `document` (a post-mortem) into the job's run, found by its uid tag."""
    group = int(document["group"])
    path = postmortem.artifact_path(group)
    what = f"the post-mortem of group {group} ({path})"
    server = access.server(tracking_uri)
    if server is None:
        return Said(
            POSTMORTEM_KEPT,
            False,
            TRACKING_SERVER_NOT_ALLOWED,
            f"{what} is not kept: the operator writes only to its own tracking server and the ones its "
            f"administrator allows (chart values operator.trackingUri and operator.allowedTrackingUris), not "
            f"{without_userinfo(tracking_uri)!r}",
        )
    try:
        run = rest.find_run(server, experiment, job_uid, timeout=timeout, headers=access.headers(server))
        if run is None:
            return Said(
                POSTMORTEM_KEPT,
                False,
                NO_MLFLOW_RUN,
                f"{what} is not kept: the job has no MLflow run in experiment {experiment!r} (its chief "
                "never opened one); `kubectl describe` shows its pods and events while they last",
                warning=True,
            )
        run_id = str(run["info"]["run_id"])
        data = postmortem.encode(document)
        rest.upload_artifact(server, run, path, data, timeout=timeout, headers=access.headers(server))
    except rest.NotProxied as not_proxied:
        return Said(
            POSTMORTEM_KEPT,
            False,
            ARTIFACTS_NOT_PROXIED,
            f"{what} is not kept: the run keeps its artifacts at {not_proxied}, which the tracking server "
            "does not proxy (mlflow server --serve-artifacts): the operator writes only through the tracking "
            "server",
            warning=True,
        )
    except rest.NotFound:  # the artifact proxy's path: a server without it
        failure = rest.TrackingError(TRACKING_BAD_REPLY, f"MLflow at {server} has no artifact proxy (404)")
    except (rest.TrackingError, KeyError, TypeError, AttributeError) as error:
        failure = error if isinstance(error, rest.TrackingError) else rest.bad_reply(server, "runs", error)
    else:
        return Said(POSTMORTEM_KEPT, True, POSTMORTEM_WRITTEN, f"{what} is kept in MLflow run {run_id}")
    log.debug("post-mortem of %s not kept: %s", job_uid, failure.message)
    return Said(
        POSTMORTEM_KEPT, False, failure.reason, f"{what} is not kept: {failure.message}", warning=True
    )
