"""Who runs a TrainJob, read from its body before anything else is parsed: spec.managedBy names the
controller (absent: this operator), and MultiKueue's copy of a job on a worker cluster names the Kueue
Workload it is admitted through."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mwms_contract import names


def manager_of(body: Mapping[str, Any]) -> str:
    """Which controller runs this TrainJob: its spec.managedBy, or this operator's name when it has none.
    Read before anything else is parsed: a job another controller runs is never judged by this operator."""
    spec = body.get("spec")
    managed_by = spec.get("managedBy") if isinstance(spec, Mapping) else None
    return names.CONTROLLER_NAME if managed_by is None else str(managed_by)


def own_workload(body: Mapping[str, Any]) -> str | None:
    """The Kueue Workload this TrainJob is admitted through, named by its label
    kueue.x-k8s.io/prebuilt-workload-name (MultiKueue's copy of a job on a worker cluster); else None."""
    metadata = body.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
    name = labels.get(names.LABEL_KUEUE_PREBUILT_WORKLOAD) if isinstance(labels, Mapping) else None
    return str(name) if name else None
