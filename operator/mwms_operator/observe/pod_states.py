"""Pure: what the operator observes of its worker pods: each pod as a WorkerPod, and what its events say
about its start."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from mwms_contract import names
from mwms_contract.conditions import FAILED, PENDING, RUNNING, SUCCEEDED
from mwms_contract.status import parse_time

# Container waiting reasons that mean "this will not start by itself". InvalidImageName never heals; the
# lasting ones might (a registry hiccup, a Secret created a moment later), so they fail the job only after
# runPolicy.containerErrorGraceSeconds (decide/start.py).
FATAL_WAITING_REASONS = ("InvalidImageName",)
LASTING_WAITING_REASONS = ("ErrImagePull", "ImagePullBackOff", "CreateContainerConfigError")
# Pod conditions that say "this pod is being stopped from outside": Kubernetes' DisruptionTarget (eviction,
# preemption, drain) and the TerminationTarget Kueue's pod integration sets on a workload it preempts.
DISRUPTION_CONDITIONS = ("DisruptionTarget", "TerminationTarget")
# What kube-scheduler (1.37) says of a gang's worker it found room for, but not for the whole gang: "pod
# group is unschedulable, minCount (4) cannot be satisfied: 3 scheduled, 0 remaining, ...": room for 3 of 4.
GANG_UNPLACED = re.compile(r"minCount \((\d+)\) cannot be satisfied: (\d+) scheduled")


@dataclass(frozen=True)
class PodEvents:
    """What a pod's events say about its start (the kubelet's and the scheduler's; looked up only while the
    startup clock may run)."""

    pulling: bool = False  # its latest image event is `Pulling`: the pull has not ended
    pulled_at: datetime | None = None  # when its latest pull ended (`Pulled`)
    pull_failed: bool = False  # its latest image event says the pull failed (kubelet: Failed, BackOff)
    note: str = ""  # "reason: message" of its latest Warning (Unhealthy, FailedMount, FailedScheduling…)
    readable: bool = True  # False: not read, the pod is judged without them (the start's rules say why)
    # With readable False: the error of the lookups that kept failing (kube/event_lookups.py); "" if they
    # were refused (403: the operator may not list events in the pod's namespace, RBAC).
    error: str = ""


UNREADABLE = PodEvents(readable=False)  # what a refused lookup (403) gives each pod it was for


PULL_EVENTS = ("Pulling", "Pulled", "Failed", "BackOff", "ErrImageNeverPull")


def _failed_pull(event: Mapping[str, Any]) -> bool:
    """The kubelet's "Failed to pull image", "Error: ErrImagePull", "Back-off pulling image" and the like (its
    Failed and BackOff events also say a container failed to start or restarts: those name no pull)."""
    reason, message = event.get("reason"), str(event.get("message") or "").lower()
    return reason == "ErrImageNeverPull" or (reason in ("Failed", "BackOff") and "pull" in message)


def pod_events(events: Iterable[Mapping[str, Any]]) -> PodEvents:
    """The events of one pod (core/v1 Event dicts) as PodEvents, by when each last happened."""

    def when(event: Mapping[str, Any]) -> datetime:
        moment = event.get("lastTimestamp") or event.get("eventTime")
        moment = moment or (event.get("metadata") or {}).get("creationTimestamp")
        return parse_time(moment) or datetime.min.replace(tzinfo=UTC)

    timed = sorted(((when(event), event) for event in events), key=lambda pair: pair[0])
    pulls = [(at, e) for at, e in timed if e.get("reason") in PULL_EVENTS]
    pulled = [at for at, e in pulls if e.get("reason") == "Pulled"]
    warnings = [(at, e) for at, e in timed if e.get("type") == "Warning"]
    note = ""
    if warnings:
        # A failed pull is two Warnings in one second, its cause then "Error: ErrImagePull": name the cause.
        newest = [e for at, e in warnings if at == warnings[-1][0]]
        last = max(newest, key=lambda e: len(str(e.get("message") or "")))
        note = " ".join(f"{last.get('reason', 'Warning')}: {last.get('message', '')}".split())
    return PodEvents(
        pulling=bool(pulls) and pulls[-1][1].get("reason") == "Pulling",
        pulled_at=pulled[-1] if pulled else None,
        pull_failed=bool(pulls) and _failed_pull(pulls[-1][1]),
        note=note,
    )


@dataclass(frozen=True)
class WorkerPod:
    """What the decision needs to know about one worker pod."""

    name: str
    index: int
    restart: int
    phase: str  # Pending | Running | Succeeded | Failed | Unknown
    deleting: bool = False
    ready: bool = False
    exit_code: int | None = None
    message: str = ""  # the trainer container's termination message
    reason: str = ""  # pod or container reason (Evicted, OOMKilled, Error…)
    waiting: str = ""  # why it is not running yet: the scheduler's reason or the container's waiting reason
    uid: str = ""
    # "reason: message" of a DISRUPTION_CONDITIONS condition (eviction, preemption, drain, Kueue).
    disruption: str = ""
    unschedulable: bool = False  # PodScheduled is False for a reason other than a scheduling gate
    # The first container (init, sidecar or main) waiting for one of the reasons above, as (reason, text).
    container_error: tuple[str, str] | None = None
    # A regular container other than the trainer has not terminated: a sidecar that is not a native one
    # (native sidecars are init containers, which the kubelet stops once the trainer has exited).
    sidecars_running: bool = False
    # The trainer container runs and its readiness probe has not passed: its worker has not joined the group.
    trainer_unready: bool = False
    # The trainer container's readiness probe is the template's own (it runs something other than our
    # trainer): its Ready, not the rendezvous state, is what the startup clock waits for.
    own_probe: bool = False
    # Bound to a node and not one of its containers has run yet: the kubelet mounts its volumes, makes its
    # sandbox or pulls its images (or cannot: FailedMount, FailedCreatePodSandBox).
    creating: bool = False
    events: PodEvents | None = None  # None: not looked up
    created: str = ""  # metadata.creationTimestamp as written (parsed only where its events are wanted)
    job_uid: str = ""  # its mwms.dev/job-uid label; "" on a pod an operator before that label made
    pod_group: str = ""  # the PodGroup it is scheduled with, all or nothing (spec.schedulingGroup)
    # Its gang waits: the scheduler found room for this many of its workers, not for all (GANG_UNPLACED).
    gang_placed: int | None = None

    @property
    def may_be_pulling(self) -> bool:
        """Its events say an image pull has not ended, or were not (or could not be) read."""
        return self.events is None or not self.events.readable or self.events.pulling

    @property
    def not_starting(self) -> bool:
        """Scheduled, and nothing of it runs though it is not pulling an image nor waiting for one of the
        container errors above: counted against runPolicy.containerErrorGraceSeconds. Unknown events count:
        they are looked up once the grace is over (startup.events_wanted)."""
        known_pull = self.events is not None and self.events.readable and self.events.pulling
        return self.creating and not self.deleting and self.container_error is None and not known_pull

    @property
    def joined(self) -> bool:
        """In its group: it runs and is ready (no readiness probe: ready once running), or it has exited."""
        return self.started and not self.trainer_unready

    @property
    def finishing(self) -> bool:
        """The trainer has exited and nothing else keeps the pod: the kubelet is about to give it its final
        phase, so it is not a running pod to clean up (deleting it would lose the chief's logs)."""
        return self.exit_code is not None and not self.sidecars_running

    @property
    def trainer_exit(self) -> int | None:
        """The `trainer` container's exit code; a Succeeded pod's containers all exited 0."""
        if self.exit_code is None and self.phase == SUCCEEDED:
            return 0
        return self.exit_code

    @property
    def failed(self) -> bool:
        """The trainer exited non-zero, or the pod failed before the trainer could exit (a sidecar that fails
        after the trainer exited 0 does not count)."""
        code = self.trainer_exit
        return code != 0 if code is not None else self.phase == FAILED

    @property
    def active(self) -> bool:
        return self.phase in (PENDING, RUNNING, "Unknown") and not self.deleting

    @property
    def started(self) -> bool:
        return self.phase in (RUNNING, SUCCEEDED, FAILED)


def worker_pod(pod: Mapping[str, Any]) -> WorkerPod | None:
    """A pod dict from the API server as a WorkerPod; None for a pod without our labels."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    try:
        index = int(labels[names.LABEL_REPLICA_INDEX])
        restart = int(labels.get(names.LABEL_RESTART, "0"))
    except (KeyError, ValueError):
        return None
    status = pod.get("status") or {}
    trainer: Mapping[str, Any] = next(
        (c for c in status.get("containerStatuses") or [] if c.get("name") == names.CONTAINER_NAME), {}
    )
    state = trainer.get("state") or {}
    terminated = state.get("terminated") or {}
    waiting_parts, disruption, unschedulable, placed = [], "", False, None
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            waiting_parts.append(
                f"{condition.get('reason', 'Unschedulable')}: {condition.get('message', '')}"
            )
            unschedulable = condition.get("reason") != "SchedulingGated"
            if found := GANG_UNPLACED.search(condition.get("message") or ""):
                placed = int(found.group(2))
        if condition.get("type") in DISRUPTION_CONDITIONS and condition.get("status") == "True":
            disruption = f"{condition.get('reason') or condition['type']}: {condition.get('message', '')}"
    if state.get("waiting"):
        waiting = state["waiting"]
        waiting_parts.append(f"{waiting.get('reason', 'Waiting')}: {waiting.get('message', '')}".rstrip(": "))
    return WorkerPod(
        name=meta.get("name", ""),
        index=index,
        restart=restart,
        phase=status.get("phase") or PENDING,
        deleting=bool(meta.get("deletionTimestamp")),
        ready=any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
        ),
        exit_code=terminated.get("exitCode"),
        message=(terminated.get("message") or "").strip(),
        reason=status.get("reason") or terminated.get("reason") or "",
        waiting="; ".join(part.strip() for part in waiting_parts),
        uid=meta.get("uid", ""),
        created=meta.get("creationTimestamp") or "",
        disruption=disruption.strip().rstrip(":"),
        unschedulable=unschedulable,
        container_error=_container_error(status),
        sidecars_running=any(
            c.get("name") != names.CONTAINER_NAME and not (c.get("state") or {}).get("terminated")
            for c in status.get("containerStatuses") or []
        ),
        trainer_unready="running" in state and not trainer.get("ready"),
        own_probe=_own_probe(pod),
        creating=_creating(status),
        job_uid=labels.get(names.LABEL_JOB_UID, ""),
        pod_group=((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName") or "",
        gang_placed=placed,
    )


def _own_probe(pod: Mapping[str, Any]) -> bool:
    """The `trainer` container has a readiness probe that is not the rendezvous one (render/pod.py's)."""
    containers = (pod.get("spec") or {}).get("containers") or []
    trainer: Mapping[str, Any] = next((c for c in containers if c.get("name") == names.CONTAINER_NAME), {})
    probe = trainer.get("readinessProbe") or {}
    return bool(probe) and (probe.get("exec") or {}).get("command") != list(names.RENDEZVOUS_PROBE_COMMAND)


def _creating(status: Mapping[str, Any]) -> bool:
    """Bound to a node, still Pending, and no container (init, sidecar or main) has run or ended."""
    scheduled = any(
        c.get("type") == "PodScheduled" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    containers = [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
    begun = any({"running", "terminated"} & set(c.get("state") or {}) for c in containers)
    return scheduled and (status.get("phase") or PENDING) == PENDING and not begun


def _container_error(status: Mapping[str, Any]) -> tuple[str, str] | None:
    """A container of the pod that waits for a reason that will not (or may not) heal by itself."""
    for key in ("initContainerStatuses", "containerStatuses"):
        for container in status.get(key) or []:
            waiting = (container.get("state") or {}).get("waiting") or {}
            reason = waiting.get("reason", "")
            if reason in FATAL_WAITING_REASONS + LASTING_WAITING_REASONS:
                text = f"container {container.get('name', '?')}: {reason}: {waiting.get('message', '')}"
                return reason, text.strip().rstrip(":")
    return None


def as_created(pods: list[dict[str, Any]], uids: Mapping[str, str]) -> list[WorkerPod]:
    """The pods the API server just stored (name -> uid), as the watch will show them: Pending."""
    found = []
    for pod in pods:
        uid = uids.get(pod["metadata"]["name"])
        if uid and (worker := worker_pod({**pod, "metadata": {**pod["metadata"], "uid": uid}})) is not None:
            found.append(worker)
    return found
