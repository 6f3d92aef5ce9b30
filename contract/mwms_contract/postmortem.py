"""Pure: a group's post-mortem, the document the operator keeps in the job's MLflow run when a group of
workers ends (success, failure or restart) at postmortem/group-K.json, so `mwms describe` and `mwms events`
still say why after the pods, their events or the TrainJob itself are gone (the API server forgets events
after an hour, and a deleted job takes its pods' final states with it).

It holds the job as a slim TrainJob (metadata, replicas, the status the operator decided), each worker pod's
final state and the job's and its pods' events, in at most MAX_BYTES of JSON: what had to be cut to stay
within it is listed under `cut`. The operator builds it from the API server's objects (build), the client
reads it back (parse).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mwms_contract import names

ARTIFACT_DIR = "postmortem"
KIND = "MwmsPostmortem"
FORMAT_VERSION = 1
MAX_BYTES = 256 * 1024  # the whole document
MAX_EVENTS = 200  # the newest; older ones are cut (and counted)
MAX_TEXT = 2048  # characters of one message (an event's, a container's termination message)
_PATH = re.compile(rf"{ARTIFACT_DIR}/group-(\d+)\.json")


def artifact_path(group: int) -> str:
    """Where the post-mortem of the group's `group`-th (re)start is kept in the job's run."""
    return f"{ARTIFACT_DIR}/group-{group}.json"


def group_of(path: str) -> int | None:
    """The group of a post-mortem's artifact path (as MLflow lists it); None for any other path."""
    found = _PATH.fullmatch(path.strip("/"))
    return int(found[1]) if found else None


def _cut(text: Any, limit: int = MAX_TEXT) -> str:
    text = "" if text is None else str(text).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class WorkerEnd:
    """A worker pod as the group ended: the trainer container's last state and why."""

    index: int
    pod: str
    group: int | None = None
    phase: str = ""
    state: str = ""  # Running, Waiting, Terminated (the trainer container's)
    exit_code: int | None = None
    reason: str = ""
    message: str = ""
    node: str | None = None
    restarts: int = 0  # the container's restarts within its pod
    started_at: str | None = None
    finished_at: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "pod": self.pod,
            "group": self.group,
            "phase": self.phase,
            "state": self.state,
            "exitCode": self.exit_code,
            "reason": self.reason,
            "message": self.message,
            "node": self.node,
            "restarts": self.restarts,
            "startedAt": self.started_at,
            "finishedAt": self.finished_at,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WorkerEnd:
        code = data.get("exitCode")
        group = data.get("group")
        return cls(
            index=int(data.get("index") or 0),
            pod=str(data.get("pod") or ""),
            group=None if group is None else int(group),
            phase=str(data.get("phase") or ""),
            state=str(data.get("state") or ""),
            exit_code=None if code is None else int(code),
            reason=str(data.get("reason") or ""),
            message=str(data.get("message") or ""),
            node=data.get("node") or None,
            restarts=int(data.get("restarts") or 0),
            started_at=data.get("startedAt") or None,
            finished_at=data.get("finishedAt") or None,
        )


@dataclass(frozen=True)
class EventSeen:
    """An Event of the job or of one of its pods (`object`: trainjob/NAME or pod/NAME)."""

    type: str
    reason: str
    message: str
    object: str
    count: int = 1
    last_seen: str | None = None
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "reason": self.reason,
            "message": self.message,
            "object": self.object,
            "count": self.count,
            "lastSeen": self.last_seen,
            "source": self.source,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EventSeen:
        return cls(
            type=str(data.get("type") or "Normal"),
            reason=str(data.get("reason") or ""),
            message=str(data.get("message") or ""),
            object=str(data.get("object") or ""),
            count=int(data.get("count") or 1),
            last_seen=data.get("lastSeen") or None,
            source=str(data.get("source") or ""),
        )


def worker_end(pod: Mapping[str, Any]) -> WorkerEnd:
    """A worker pod (the API server's JSON) as the group ended."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    labels = meta.get("labels") or {}
    trainer: Mapping[str, Any] = next(
        (c for c in status.get("containerStatuses") or [] if c.get("name") == names.CONTAINER_NAME), {}
    )
    state, detail = "", {}
    for kind in ("terminated", "running", "waiting"):
        if (trainer.get("state") or {}).get(kind):
            state, detail = kind.capitalize(), trainer["state"][kind]
            break
    if state != "Terminated":  # running (or waiting) again: how it ended before, if it did
        detail = {**((trainer.get("lastState") or {}).get("terminated") or {}), **detail}
    reason = detail.get("reason") or status.get("reason") or ""
    message = detail.get("message") or status.get("message") or ""
    group = str(labels.get(names.LABEL_RESTART) or "")
    phase = str(status.get("phase") or "")
    if state == "Terminated" and phase in ("Pending", "Running"):
        # The group ends on its trainers' exits, often before the kubelet writes the pod's phase; a worker's
        # pod never restarts its trainer (restartPolicy Never), so its exit is how the worker ended.
        phase = "Succeeded" if detail.get("exitCode") == 0 else "Failed"
    return WorkerEnd(
        index=int(labels.get(names.LABEL_REPLICA_INDEX) or 0),
        pod=str(meta.get("name") or ""),
        group=int(group) if group.isdigit() else None,
        phase=phase,
        state=state,
        exit_code=detail.get("exitCode"),
        reason=str(reason),
        message=_cut(message),
        node=spec.get("nodeName") or None,
        restarts=int(trainer.get("restartCount") or 0),
        started_at=detail.get("startedAt") or status.get("startTime") or None,
        finished_at=detail.get("finishedAt") or None,
    )


def event_seen(event: Mapping[str, Any]) -> EventSeen:
    """A core/v1 Event (the API server's JSON) as the post-mortem keeps it."""
    involved = event.get("involvedObject") or {}
    series = event.get("series") or {}
    last = (
        series.get("lastObservedTime")
        or event.get("lastTimestamp")
        or event.get("eventTime")
        or event.get("firstTimestamp")
        or (event.get("metadata") or {}).get("creationTimestamp")
    )
    source = event.get("reportingComponent") or (event.get("source") or {}).get("component") or ""
    return EventSeen(
        type=str(event.get("type") or "Normal"),
        reason=str(event.get("reason") or ""),
        message=_cut(event.get("message")),
        object=f"{str(involved.get('kind') or '').lower()}/{involved.get('name') or ''}",
        count=int(series.get("count") or event.get("count") or 1),
        last_seen=last,
        source=str(source),
    )


def build(
    trainjob: Mapping[str, Any],
    group: int,
    status: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    events: Sequence[Mapping[str, Any]],
    written_at: str,
    notes: Sequence[str] = (),
    posting: Sequence[tuple[str, str, str]] = (),
) -> dict[str, Any]:
    """The post-mortem of the job's `group`-th (re)start: `trainjob` as the API server holds it, the `status`
    the operator decided as the group ended, the group's worker pods and the events of the job and its pods
    (core/v1 Event JSON), with those the operator is `posting` on the job as (type, reason, message), but
    once only where `events` were read after they were posted; `notes` say what could not be read. At most
    MAX_BYTES of JSON."""
    meta, spec = trainjob.get("metadata") or {}, trainjob.get("spec") or {}
    workers = sorted((worker_end(p) for p in pods), key=lambda w: w.index)
    job = f"{names.KIND.lower()}/{meta.get('name') or ''}"
    read = [event_seen(e) for e in events]
    already = {(e.type, e.reason, e.message) for e in read if e.object == job}
    posted = [
        EventSeen(type_, reason, _cut(message), job, last_seen=written_at, source=names.MANAGED_BY)
        for type_, reason, message in posting
        if (type_, reason, _cut(message)) not in already
    ]
    seen = sorted([*read, *posted], key=lambda e: e.last_seen or "")
    cut = list(notes)
    if len(seen) > MAX_EVENTS:
        cut.append(f"{len(seen) - MAX_EVENTS} older events (at most {MAX_EVENTS} are kept)")
        seen = seen[-MAX_EVENTS:]
    document = {
        "kind": KIND,
        "version": FORMAT_VERSION,
        "group": group,
        "writtenAt": written_at,
        "trainjob": {
            "apiVersion": names.API_VERSION,
            "kind": names.KIND,
            "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "creationTimestamp") if k in meta},
            "spec": {"replicas": spec.get("replicas")},
            "status": dict(status),
        },
        "workers": [w.to_dict() for w in workers],
        "events": [e.to_dict() for e in seen],
        "cut": cut,
    }
    return _within_bounds(document)


def _size(document: Mapping[str, Any]) -> int:
    return len(encode(document))


def _within_bounds(document: dict[str, Any]) -> dict[str, Any]:
    """The oldest events, then the workers' messages, are cut until the document fits MAX_BYTES."""
    events, dropped = document["events"], 0
    while _size(document) > MAX_BYTES and events:
        drop = max(1, len(events) // 4)
        events, dropped = events[drop:], dropped + drop
        document = {**document, "events": events}
    if dropped:
        document["cut"] = [*document["cut"], f"{dropped} older events, to stay within {MAX_BYTES} bytes"]
    if _size(document) > MAX_BYTES:
        workers = [{**w, "message": _cut(w["message"], 256)} for w in document["workers"]]
        document = {**document, "workers": workers}
        document["cut"] = [*document["cut"], "workers' messages beyond 256 characters"]
    return document


def encode(document: Mapping[str, Any]) -> bytes:
    """The document as it is kept: compact JSON, at most MAX_BYTES once built."""
    return json.dumps(document, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Postmortem:
    """A post-mortem as the client reads it back."""

    group: int
    written_at: str
    trainjob: Mapping[str, Any]  # metadata, spec.replicas and the status, as a TrainJob object
    workers: tuple[WorkerEnd, ...] = ()
    events: tuple[EventSeen, ...] = ()
    cut: tuple[str, ...] = field(default_factory=tuple)


def parse(document: Mapping[str, Any]) -> Postmortem:
    """ValueError for a document that is not a post-mortem (of this format)."""
    if not isinstance(document, Mapping) or document.get("kind") != KIND:
        raise ValueError(f"not a {KIND} document")
    try:
        return Postmortem(
            group=int(document["group"]),
            written_at=str(document.get("writtenAt") or ""),
            trainjob=dict(document.get("trainjob") or {}),
            workers=tuple(WorkerEnd.from_dict(w) for w in document.get("workers") or ()),
            events=tuple(EventSeen.from_dict(e) for e in document.get("events") or ()),
            cut=tuple(str(c) for c in document.get("cut") or ()),
        )
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"a {KIND} document of another shape: {error}") from None
