"""What a job's MLflow run keeps of it once its pods, their events or the TrainJob itself are gone: the
post-mortem the operator writes when each group ends (mwms_contract.postmortem), read through the job's
tracking server as this machine reaches it (tracking_server.py)."""

from __future__ import annotations

import json

from mwms.kube import SubmitError
from mwms.tracking_server import TrackingServer
from mwms_contract import postmortem

MOST_GROUPS = 20  # post-mortems read for one job, the newest groups first


def postmortems(server: TrackingServer, run_id: str) -> list[postmortem.Postmortem]:
    """The run's post-mortems, the newest group first (none: an operator that did not write them, or a run
    whose groups have not ended)."""
    groups = sorted(
        (
            g
            for g in map(postmortem.group_of, server.artifacts(run_id, postmortem.ARTIFACT_DIR))
            if g is not None
        ),
        reverse=True,
    )
    found = []
    for group in groups[:MOST_GROUPS]:
        text = server.artifact(run_id, postmortem.artifact_path(group))
        if text is None:
            continue
        try:
            found.append(postmortem.parse(json.loads(text)))
        except ValueError as e:
            raise SubmitError(
                f"{server.where}: {postmortem.artifact_path(group)} of run {run_id}: {e}"
            ) from None
    return found


def events_of(kept: list[postmortem.Postmortem]) -> list[postmortem.EventSeen]:
    """The events the post-mortems hold, each once, oldest first (a later group's repeats an earlier's that
    the API server still had)."""
    seen: dict[tuple[str, str, str, str | None], postmortem.EventSeen] = {}
    for one in reversed(kept):  # oldest group first: a later copy (a higher count) wins
        for event in one.events:
            seen[(event.object, event.reason, event.message, event.type)] = event
    return sorted(seen.values(), key=lambda e: e.last_seen or "")
