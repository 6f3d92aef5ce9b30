"""Pure: the rules of a group's start, their clocks, and which pods' events they need. A container that cannot
start ends the job after runPolicy.containerErrorGraceSeconds; workers that run while others have not joined
end it after runPolicy.startupTimeoutSeconds. A group that waits to be scheduled or admitted costs nothing."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from mwms_contract.conditions import CONTAINER_ERROR, FAILED, STARTUP_TIMEOUT, SUSPENDED, TERMINAL
from mwms_contract.status import TrainJobStatus, format_time, parse_time, truncate, typed
from mwms_contract.trainjob import SpecError, TrainJobSpec
from mwms_operator.decide.facts import Facts
from mwms_operator.decide.job_status import Decision
from mwms_operator.observe.pod_states import FATAL_WAITING_REASONS, WorkerPod


def startup_unexplained(
    pods: Sequence[WorkerPod], previous: TrainJobStatus | Mapping[str, Any]
) -> list[WorkerPod]:
    """The pods of the current group whose events the startup clock needs: those not joined while another
    worker runs (is a peer still pulling its image? what did each last say?). Empty while the clock cannot
    run, so a healthy, wholly pending, suspended or finished group costs no lookup."""
    was = typed(previous)
    live = [p for p in pods if p.restart == was.restarts and not p.deleting]
    if was.phase in (*TERMINAL, SUSPENDED) or not any(p.started for p in live):
        return []
    return [p for p in live if not p.joined]


def startup_clock(current: Sequence[WorkerPod]) -> tuple[bool, datetime | None]:
    """(whether the startup clock runs, the latest end of a not-joined pod's image pull).

    It runs while some worker runs and not every worker has joined: the others hold nodes while they wait.
    A peer's image pull does not count (nor does one whose events were not looked up: it may be pulling),
    except for a peer the scheduler cannot place, which pulls nothing. A group that is wholly pending (a
    queue, a scale-up, image pulls) or gated costs nothing but time."""
    live = [p for p in current if not p.deleting]
    waiting = [p for p in live if not p.joined]
    if not any(p.started for p in live) or not waiting:
        return False, None
    pulling = [p for p in waiting if not p.started and not p.unschedulable and p.may_be_pulling]
    pulled = [p.events.pulled_at for p in waiting if p.events is not None and p.events.pulled_at is not None]
    return not pulling, max(pulled, default=None)


def why_not_joined(pod: WorkerPod) -> str:
    """The last reason a running worker gave for not having joined (its readiness probe's output)."""
    note = pod.events.note if pod.events else ""
    if pod.own_probe:
        waits = "waiting for the trainer container's own readinessProbe (it does not run mwms_trainer)"
        return f"{waits}: {note}" if note else waits
    return note or "no reason given yet"


def why_pending(pod: WorkerPod) -> str:
    """Why a worker does not run: the scheduler's or the container's reason, and its pod's latest warning
    (e.g. FailedMount for a missing Secret); the scheduler's own event repeats its condition."""
    note = pod.events.note if pod.events and not pod.unschedulable else ""
    return "; ".join(part for part in (pod.waiting, note) if part) or pod.phase


def stall_clocks(f: Facts) -> None:
    """Starts or stops the clocks of the startup timeout and of container errors (with the scheduled pods that
    do not start: a volume that does not mount, a sandbox that cannot be made)."""
    waiting = [p for p in f.current if not p.started and not p.deleting]
    running, pulled = startup_clock(f.current)
    erring = any(p.container_error or p.not_starting for p in waiting)
    status = f.b.status
    since = max(filter(None, (parse_time(status.stalled_since) or f.now, pulled)))
    # A pod that has just pulled its image has its container still to make: it counts from the pull's end.
    ended = [p.events.pulled_at for p in waiting if p.not_starting and p.events and p.events.pulled_at]
    erring_since = max([parse_time(status.container_error_since) or f.now, *ended])
    f.b.set(
        stalled_since=format_time(since) if running else None,
        container_error_since=format_time(erring_since) if erring else None,
    )


def events_wanted(
    spec: TrainJobSpec | SpecError,
    pods: Sequence[WorkerPod],
    previous: TrainJobStatus | Mapping[str, Any],
    now: datetime,
) -> list[WorkerPod]:
    """The pods whose events the next decision needs: those the startup clock asks about, and, once the
    container-error clock is over, the scheduled pods that have not started (is one still pulling? what did
    the kubelet last say: FailedMount, FailedCreatePodSandBox?). One lookup per grace while a pull lasts."""
    was = typed(previous)
    wanted = startup_unexplained(pods, was)
    since = parse_time(was.container_error_since)
    if not isinstance(spec, TrainJobSpec) or since is None or was.phase in (*TERMINAL, SUSPENDED):
        return wanted
    if now < since + timedelta(seconds=spec.container_error_grace_seconds):
        return wanted
    return wanted + [p for p in pods if p.restart == was.restarts and p.not_starting and p not in wanted]


def _cannot_start(f: Facts, pod: WorkerPod) -> str:
    grace = f"{f.parsed.container_error_grace_seconds if f.parsed else '?'}s"
    if pod.events is not None and pod.events.pull_failed:  # seen before the container's ErrImagePull
        return (
            f"worker {pod.name} cannot pull its image ({grace} after it was scheduled, "
            f"spec.runPolicy.containerErrorGraceSeconds): {pod.events.note}"
        )
    headline = f"worker {pod.name} has not started {grace} after it was scheduled"
    headline += " (spec.runPolicy.containerErrorGraceSeconds)"
    if pod.events is not None and pod.events.error:
        return (
            f"{headline}: {why_pending(pod)}; the kubelet's reason could not be read: listing events in "
            f"namespace {f.meta.namespace} failed: {pod.events.error}"
        )
    if pod.events is not None and not pod.events.readable:
        return (
            f"{headline}: {why_pending(pod)}; the kubelet's reason could not be read: the operator may not "
            f"list events in namespace {f.meta.namespace}; an RBAC rule granting `list` on `events` there "
            "would name it (e.g. FailedMount, FailedCreatePodSandBox)"
        )
    return f"{headline}: {why_pending(pod)}"


def rule_container_error(f: Facts) -> Decision | None:
    """A container that cannot start by itself (a bad image name; a pull or a missing Secret that has been
    failing for runPolicy.containerErrorGraceSeconds), or a scheduled pod none of whose containers has run
    for as long (a volume that does not mount, a sandbox that cannot be made), fails the job, with the
    container's or the kubelet's message."""
    assert f.parsed is not None
    since = parse_time(f.b.status.container_error_since)
    grace = timedelta(seconds=f.parsed.container_error_grace_seconds)
    lasting = since is not None and f.now >= since + grace
    for pod in f.current:
        if pod.container_error and not pod.started and not pod.deleting:
            reason, text = pod.container_error
            if reason in FATAL_WAITING_REASONS or lasting:
                return f.terminal(
                    FAILED, CONTAINER_ERROR, truncate(f"worker {pod.name} cannot start: {text}")
                )
        # Only once its events were looked up: until then it may be pulling a large image.
        elif lasting and pod.not_starting and pod.events is not None:
            return f.terminal(FAILED, CONTAINER_ERROR, truncate(_cannot_start(f, pod)))
    return None


def rule_startup_timeout(f: Facts) -> Decision | None:
    assert f.parsed is not None
    stalled = parse_time(f.b.status.stalled_since)
    timeout = f.parsed.startup_timeout_seconds
    if stalled is None or f.now < stalled + timedelta(seconds=timeout):
        return None
    live = [p for p in f.current if not p.deleting]
    pending = [p for p in live if not p.started]
    if any(p.unschedulable for p in pending):
        headline = f"some workers ran while others could not be scheduled for {timeout}s"
    else:
        headline = f"not every worker joined the group within {timeout}s of one running"
    parts = [f"{headline} (spec.runPolicy.startupTimeoutSeconds)"]
    if pending:
        parts.append("still pending: " + ", ".join(f"{p.name} ({why_pending(p)})" for p in pending))
    unjoined = [p for p in live if p.started and not p.joined]
    if unjoined:
        joined = "; ".join(f"worker {p.index} ({p.name}): {why_not_joined(p)}" for p in unjoined)
        parts.append("not joined: " + joined)
    return f.terminal(FAILED, STARTUP_TIMEOUT, truncate("; ".join(parts)))
