"""Pure: a TrainJob whose spec.managedBy names another controller. That controller runs the job and owns its
status, so the operator creates nothing for it and never writes its status; it says so once, in an event.
Where that controller is MultiKueue, the operator is also TrainJob's Kueue integration, as Kueue's job
framework is for the kinds it knows: it makes the job's one Workload, which Kueue queues and MultiKueue
dispatches, with a copy of the job, to a worker cluster (docs/operations.md, MultiKueue)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from mwms_contract import names
from mwms_contract.conditions import INVALID_SPEC, MANAGED_ELSEWHERE, NO_QUEUE
from mwms_contract.trainjob import SpecError, TrainJobSpec
from mwms_operator.decide.job_status import CreateWorkload, Event


@dataclass(frozen=True)
class Elsewhere:
    """What the operator does for a job another controller runs: at most its Workload, and what it says."""

    actions: tuple[CreateWorkload, ...] = ()
    events: tuple[Event, ...] = ()


def decide_elsewhere(
    manager: str, spec: TrainJobSpec | SpecError, *, told: Collection[str], workload_made: bool
) -> Elsewhere:
    """`manager`: the job's spec.managedBy; `told`: the reasons of the events already posted for the job
    (each is said once); `workload_made`: its Workload (MultiKueue) was made."""
    if manager != names.MULTIKUEUE_CONTROLLER_NAME:
        said = f"spec.managedBy is {manager}: that controller runs this job and writes its status"
        return Elsewhere(
            events=_once(told, "Normal", MANAGED_ELSEWHERE, f"{said}; this operator creates nothing")
        )
    if isinstance(spec, SpecError):
        message = f"invalid TrainJob: {spec}; no Kueue Workload was made, so MultiKueue cannot run it"
        return Elsewhere(events=_once(told, "Warning", INVALID_SPEC, message))
    if spec.queue_name is None:
        message = (
            f"spec.managedBy is {manager} but the job has no {names.LABEL_KUEUE_QUEUE} label: no Kueue "
            "Workload is made, so nothing runs it until it has one"
        )
        return Elsewhere(events=_once(told, "Warning", NO_QUEUE, message))
    message = (
        f"spec.managedBy is {manager}: MultiKueue runs this job on a worker cluster and copies its status "
        f"here; this operator only makes its Kueue Workload, in queue {spec.queue_name}"
    )
    return Elsewhere(
        actions=() if workload_made else (CreateWorkload(),),
        events=_once(told, "Normal", MANAGED_ELSEWHERE, message),
    )


def _once(told: Collection[str], type_: str, reason: str, message: str) -> tuple[Event, ...]:
    return () if reason in told else (Event(type_, reason, message),)
