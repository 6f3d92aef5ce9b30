"""Pure: native gang scheduling (Kubernetes' PodGroup API, spec.scheduling.gang): whether a group is placed
all or nothing by a PodGroup of its own, the rule that fails a job requiring one where the API server serves
none, and what the scheduler says while a gang waits."""

from __future__ import annotations

from collections.abc import Sequence

from mwms_contract import names
from mwms_contract.conditions import FAILED, GANG_SCHEDULING_UNAVAILABLE
from mwms_contract.trainjob import TrainJobSpec
from mwms_operator.decide.facts import Facts
from mwms_operator.decide.job_status import Decision
from mwms_operator.observe.pod_states import WorkerPod

AUTO, REQUIRED, OFF = "Auto", "Required", "Off"


def uses_pod_group(spec: TrainJobSpec, *, served: bool) -> bool:
    """Whether the next group gets a PodGroup: where the API server serves the API and spec.scheduling.gang
    is not Off, unless the template names a scheduling group of its own (the user's, which is kept)."""
    own = (spec.template.get("spec") or {}).get("schedulingGroup")
    return served and spec.gang != OFF and not own


def rule_gang_unavailable(f: Facts) -> Decision | None:
    """A group must be made, spec.scheduling.gang is Required and the PodGroup API is not served: fail, rather
    than start workers that could hold nodes half a group at a time. A running group is left alone."""
    assert f.parsed is not None
    if f.parsed.gang != REQUIRED or f.gang_served:
        return None
    if {p.index for p in f.current} >= set(range(f.parsed.replicas)):
        return None
    message = (
        "spec.scheduling.gang is Required, but the API server does not serve the PodGroup API "
        f"({names.POD_GROUP_API_VERSION} {names.POD_GROUP_PLURAL}: Kubernetes 1.37 or newer with the "
        "GenericWorkload feature gate on and that API version enabled); no worker pods were created "
        "(Auto runs the job without a PodGroup)"
    )
    return f.terminal(FAILED, GANG_SCHEDULING_UNAVAILABLE, message)


def gang_waits(pods: Sequence[WorkerPod], replicas: int) -> str:
    """Why a gang waits, as the scheduler says: how many of its workers it found room for, and the reason of
    each worker it found none for; "" unless the scheduler said the gang cannot be placed whole."""
    waiting = [p for p in pods if not p.started and not p.deleting]
    placed = [p.gang_placed for p in waiting if p.gang_placed is not None]
    if not placed:
        return ""
    group = next((p.pod_group for p in waiting if p.pod_group), "")
    misfits = "; ".join(f"{p.name}: {p.waiting}" for p in waiting if p.gang_placed is None and p.waiting)
    text = (
        f"the scheduler places the {replicas} workers all at once or none (PodGroup {group}) and finds "
        f"room for {max(placed)} of them"
    )
    return f"{text} ({misfits})" if misfits else text
