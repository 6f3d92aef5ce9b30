"""A TrainJob read, patched and waited on through kubectl, typed by the contract: its conditions are
mwms_contract.status.Condition, their types mwms_contract.conditions' names. `kubectl` is the tests'
`Kubectl` (tests/conftest.py) or anything called as `kubectl(*args, timeout=...)` with `.json(*args)`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from mwms_contract.status import Condition, TrainJobStatus


def get_job(kubectl: Any, namespace: str, name: str) -> dict[str, Any]:
    return kubectl.json("get", "trainjob", name, "-n", namespace)


def condition(job: Mapping[str, Any], type_: str) -> Condition | None:
    """The job's condition of this type, or None while it has none."""
    return TrainJobStatus.of(job).condition(type_)


def postmortem_kept(job: Mapping[str, Any], group: int) -> bool:
    """Whether the job says (PostmortemKept) that the post-mortem of this group is in its run."""
    found = condition(job, "PostmortemKept")
    return found is not None and found.true and f"of group {group} " in found.message


def wait_condition(kubectl: Any, namespace: str, name: str, type_: str, timeout: int = 180) -> dict[str, Any]:
    """Wait (`kubectl wait`) until the job's `type_` condition is True; the job then."""
    kubectl(
        "wait", f"--for=condition={type_}", f"trainjob/{name}", "-n", namespace, f"--timeout={timeout}s",
        timeout=timeout + 10,
    )  # fmt: skip
    return get_job(kubectl, namespace, name)


def patch_spec(kubectl: Any, namespace: str, name: str, spec: Mapping[str, Any], check: bool = True) -> Any:
    """Change the job's spec with a JSON merge patch (`kubectl patch --type=merge`); kubectl's result."""
    patch = json.dumps({"spec": spec})
    return kubectl("patch", "trainjob", name, "-n", namespace, "--type=merge", "-p", patch, check=check)


def pods_of(kubectl: Any, namespace: str, name: str) -> list[dict[str, Any]]:
    return kubectl.json("get", "pods", "-n", namespace, "-l", f"mwms.dev/job-name={name}")["items"]


def events_of(kubectl: Any, namespace: str, name: str, reason: str = "") -> list[tuple[str, str, str]]:
    """The job's events as (type, reason, message), of one reason if given."""
    selector = f"involvedObject.kind=TrainJob,involvedObject.name={name}" + (
        f",reason={reason}" if reason else ""
    )
    items = kubectl.json("get", "events", "-n", namespace, "--field-selector", selector)["items"]
    return [(e["type"], e["reason"], e["message"]) for e in items]
