"""Pure: what every rule of the policy may look at (the inputs of one decision, sorted and derived once), and
the bookkeeping that runs before the rules of a live job: it never decides, only keeps the status's books."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from mwms_contract.conditions import (
    CREATED,
    INVALID_SPEC,
    PENDING,
    PODS_CREATED,
    PROGRESS_UNAVAILABLE,
    RUNNING,
    SUSPENDED,
    TEMPLATE_ACCEPTED,
    TEMPLATE_VALID,
)
from mwms_contract.status import FALSE, TRUE, format_time, truncate
from mwms_contract.trainjob import SpecError, TrainJobSpec
from mwms_operator.decide.job_status import (
    Builder,
    Decision,
    DeletePods,
    Event,
    JobMeta,
    KeepPostmortem,
    replica_statuses,
)
from mwms_operator.observe.findings import CreationRefused, Said
from mwms_operator.observe.pod_states import WorkerPod

# The clocks of a group's start (startup timeout, container errors): stopped whenever that group ends.
STOPPED_STARTUP_CLOCKS = {"stalled_since": None, "container_error_since": None}


def cleanup(spec: TrainJobSpec | None, pods: Sequence[WorkerPod], *, remove_active: bool) -> tuple[str, ...]:
    policy = spec.clean_pod_policy if spec is not None else "Running"
    names = []
    for pod in pods:
        if pod.deleting:
            continue
        if policy == "All" or (pod.active and (remove_active or (policy == "Running" and not pod.finishing))):
            names.append(pod.name)
    return tuple(names)


@dataclass
class Facts:
    """What every rule may look at: the inputs of one decision, sorted and derived once."""

    meta: JobMeta
    spec: TrainJobSpec | SpecError
    pods: list[WorkerPod]  # every pod of the job, oldest group first
    current: list[WorkerPod]  # the pods of the current (re)start
    service_exists: bool
    now: datetime
    refused: str | None
    b: Builder
    creation_refused: CreationRefused | None = None
    template_error: SpecError | None = None  # spec.template is invalid (`spec` was parsed without it)
    disrupted: Mapping[tuple[int, int], str] = dataclasses.field(default_factory=dict)
    said: tuple[Said, ...] = ()  # conditions a look at the job's tracking server decided (mlflow/runwatch.py)

    @property
    def restarts(self) -> int:
        return self.b.status.restarts

    @property
    def counted_restarts(self) -> int:
        """Restarts that spend backoffLimit: all but those caused by disruptions."""
        return self.restarts - self.b.status.disruptions

    @property
    def parsed(self) -> TrainJobSpec | None:
        return self.spec if isinstance(self.spec, TrainJobSpec) else None

    @property
    def resuming(self) -> bool:
        return self.b.previous_phase == SUSPENDED

    @property
    def expecting_pods(self) -> bool:
        """The group was created and not suspended: a pod of it that goes is lost, not leaving."""
        return self.b.previous_phase in (PENDING, RUNNING) and not self.resuming

    def finish(self) -> Decision:
        """The decision, counting the pods it deletes as being deleted already: their going costs no write."""
        going = {name for action in self.b.actions if isinstance(action, DeletePods) for name in action.names}
        pods = [dataclasses.replace(p, deleting=True) if p.name in going else p for p in self.current]
        return self.b.finish(replica_statuses(pods))

    def terminal(self, phase: str, reason: str, message: str, *, remove_active: bool = False) -> Decision:
        self.b.phase(phase, reason, message)
        done = self.b.status.completion_time or format_time(self.now)
        keep_postmortem(self)
        self.b.set(**STOPPED_STARTUP_CLOCKS, completion_time=done, next_restart_time=None)
        names = cleanup(self.parsed, self.pods, remove_active=remove_active)
        if names:
            self.b.actions.append(DeletePods(names))
        return self.finish()


def keep_postmortem(f: Facts) -> None:
    """A group that was created has ended (success, failure or restart): its post-mortem is kept, read
    before any of its pods is deleted (first of the decision's actions)."""
    if f.b.status.group_start_time is not None or f.current:
        f.b.actions.insert(0, KeepPostmortem(f.restarts))


def mark_said(f: Facts) -> None:
    """The conditions a look at the tracking server decided, each with one event when its status or reason
    changes. A ProgressUnavailable that was never True is not added just to say progress flows."""
    for said in f.said:
        previous = f.b.find(said.type)
        if previous is None and said.type == PROGRESS_UNAVAILABLE and not said.status:
            continue
        value = TRUE if said.status else FALSE
        if previous is None or (previous.status, previous.reason) != (value, said.reason):
            f.b.events.append(Event("Warning" if said.warning else "Normal", said.reason, said.message))
        f.b.condition(said.type, said.status, said.reason, truncate(said.message))


def mark_started(f: Facts) -> None:
    """A group whose pods exist has the start's times, also where the status that held them was lost: a new
    job's first status may wait (status.deferrable), and the operator may stop before it is written. The
    deadline (runPolicy.activeDeadlineSeconds) then counts from this decision."""
    if any(not p.deleting for p in f.current):
        now = format_time(f.now)
        f.b.set(start_time=f.b.status.start_time or now, group_start_time=f.b.status.group_start_time or now)


def mark_created(f: Facts) -> None:
    """Sets Created once, even if the workers are so quick that the first look already
    finds them finished. No event here: the handler posts one `PodsCreated` per batch, naming the pods."""
    assert f.parsed is not None
    created = {p.index for p in f.current} >= set(range(f.parsed.replicas))
    if created and not f.b.holds(CREATED):
        f.b.condition(CREATED, True, PODS_CREATED, f"Service and {f.parsed.replicas} worker pods created")
        f.b.all_pods_created = True


def mark_template(f: Facts) -> None:
    """An edit of spec.template is checked when it is made, but only the next group uses it,
    so an invalid one is said in a condition (and one event) and leaves the running group alone."""
    previous = f.b.find(TEMPLATE_ACCEPTED)
    if f.template_error is not None:
        message = truncate(
            f"invalid TrainJob: {f.template_error}; the workers that run are left alone, "
            "the next group (a restart or a resume) needs a valid template"
        )
        if f.current and (previous is None or previous.status != FALSE):  # no group: it fails below
            f.b.events.append(Event("Warning", INVALID_SPEC, message))
        f.b.condition(TEMPLATE_ACCEPTED, False, INVALID_SPEC, message)
    elif previous is not None and previous.status == FALSE:
        f.b.condition(TEMPLATE_ACCEPTED, True, TEMPLATE_VALID, "spec.template is valid again")
