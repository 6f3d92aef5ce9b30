"""No raw status key outside the contract: the operator and the client write and read a TrainJob's status
through mwms_contract.status, where each key is spelled once.

A key of the status (taken from the contract's own field-to-key maps, so this list cannot drift) used as a
key in operator or client source fails: `x["key"]`, `x.get("key")`, `{"key": ...}`, `dict(key=...)`,
`x.update(key=...)`. Other objects whose keys are spelled the same (a Pod's status, an Event, MLflow's
replies) are allowed only in the modules that read them, listed in OTHER_OBJECTS with what they are.
"""

from __future__ import annotations

import ast
from pathlib import Path

from static_support import REPO

from mwms_contract import status

SOURCES = (REPO / "operator" / "mwms_operator", REPO / "client" / "mwms")
KEYS = frozenset().union(
    *(
        keys.values()
        for keys in (
            status.STATUS_KEYS,
            status.CONDITION_KEYS,
            status.COUNT_KEYS,
            status.RUN_KEYS,
            status.PROGRESS_KEYS,
        )
    )
)
# A Pod's status (and its containers' statuses).
POD = frozenset({"phase", "conditions", "type", "status", "reason", "message", "ready"})
EVENT = frozenset({"type", "reason", "message"})  # a core/v1 Event
OTHER_OBJECTS: dict[str, frozenset[str]] = {
    "operator/mwms_operator/render/pod.py": frozenset({"type"}),  # the pod's seccompProfile
    "operator/mwms_operator/observe/pod_states.py": POD,
    "operator/mwms_operator/kube/events.py": EVENT,
    # A Kueue Workload's status: the Finished condition the operator applies to it.
    "operator/mwms_operator/render/kueue_workload.py": frozenset(
        {"status", "conditions", "type", "reason", "message", "lastTransitionTime"}
    ),
    "operator/mwms_operator/telemetry/log_format.py": frozenset({"message"}),  # a JSON log record
    "operator/mwms_operator/kube/client.py": frozenset({"status", "message"}),  # the patch's body; an Event's
    "operator/mwms_operator/kube/refusals.py": frozenset({"message"}),  # a Status reply (ApiError.of)
    "operator/mwms_operator/mlflow/rest.py": frozenset({"status"}),  # MLflow's run info and update
    "operator/mwms_operator/mlflow/progress.py": frozenset({"metrics"}),  # MLflow's run data
    "operator/mwms_operator/mlflow/runwatch.py": frozenset({"epochs"}),  # spec.trainer.epochs
    # The TrainJob's .status, kept as the API server gave it: a decision's patch is compared with it.
    "operator/mwms_operator/observe/state.py": frozenset({"status"}),
    "client/mwms/describe.py": POD | EVENT | {"metrics"},  # MLflow's metric history
    "client/mwms/follow.py": POD,
    "client/mwms/kube.py": frozenset({"type", "message", "reason"}),  # a watch event; a Status reply
    "client/mwms/submit.py": frozenset({"mlflow"}),  # spec.mlflow
    "client/mwms/logs.py": frozenset({"mlflow", "trackingUri"}),  # spec.mlflow.trackingUri
    "client/mwms/tfjob.py": frozenset({"mlflow"}),  # the converted TrainJob's spec.mlflow
    "client/mwms/jobs.py": frozenset({"status", "message"}),  # the chief pod's termination message
    "client/mwms/output.py": frozenset({"phase"}),  # `mwms runs -o json`'s own fields
}


def keys_used(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, key) of each string used as a mapping's key."""
    found: list[tuple[int, str]] = []

    def text(node: ast.AST | None) -> None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.append((node.lineno, node.value))

    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            text(node.slice)
        elif isinstance(node, ast.Dict):
            for key in node.keys:
                text(key)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("get", "pop", "setdefault") and node.args:
                text(node.args[0])
            if node.func.attr == "update":
                found += [(node.lineno, k.arg) for k in node.keywords if k.arg]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
            found += [(node.lineno, k.arg) for k in node.keywords if k.arg]
    return found


def raw_keys(path: Path) -> list[str]:
    name = path.relative_to(REPO).as_posix()
    allowed = OTHER_OBJECTS.get(name, frozenset())
    tree = ast.parse(path.read_text(), str(path))
    return [f"{name}:{line}: {key!r}" for line, key in keys_used(tree) if key in KEYS - allowed]


def test_the_key_list_comes_from_the_contract():
    assert {"phase", "restarts", "runId", "lastTransitionTime", "updateTime", "replicaStatuses"} <= KEYS


def test_the_check_finds_each_use_of_a_raw_key():
    source = (
        'status.get("restarts")\nb["stalledSince"] = 1\nx.update(restarts=1)\n{"runId": 1}\ndict(phase=1)'
    )
    found = sorted(key for _, key in keys_used(ast.parse(source)))
    assert found == ["phase", "restarts", "restarts", "runId", "stalledSince"]


def test_no_raw_status_key_outside_the_contract():
    found = [hit for root in SOURCES for path in sorted(root.rglob("*.py")) for hit in raw_keys(path)]
    assert not found, "status keys spelled outside mwms_contract.status:\n" + "\n".join(found)
