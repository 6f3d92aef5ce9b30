"""The one TrainJob factory of every tier: `trainjob(name, replicas, ...)` returns the dict a user would
apply, apiVersion and kind from the contract, so a test says only what matters to it.

Every keyword that is not one of the factory's own is a field of `spec` (image, port, trainer, code, mlflow,
checkpoint, runPolicy, template). The factory's own: `namespace`, `labels` and `metadata` (more metadata
fields, e.g. the uid a stored object has), `status`, and the trainer container's `container` (its fields)
and `env` (a name -> value mapping, or a list of EnvVar dicts). Given either, the trainer container is put
first in `spec.template.spec.containers`; `container`'s fields are applied after `env`, so they win.
Everything given is copied: a test's constants are never shared with the dict it sends.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from mwms_contract.names import API_VERSION, CONTAINER_NAME, KIND

Env = Mapping[str, str] | Sequence[Mapping[str, Any]]


def env_list(env: Env) -> list[dict[str, Any]]:
    """A container's `env`: a name -> value mapping becomes EnvVars; a list of EnvVars is copied."""
    if isinstance(env, Mapping):
        return [{"name": name, "value": value} for name, value in env.items()]
    return [dict(copy.deepcopy(var)) for var in env]


def trainer_container(container: Mapping[str, Any] | None = None, env: Env | None = None) -> dict[str, Any]:
    """The `trainer` container: its name, then `env`, then `container`'s fields (which win)."""
    built: dict[str, Any] = {"name": CONTAINER_NAME}
    if env is not None:
        built["env"] = env_list(env)
    built.update(copy.deepcopy(dict(container or {})))
    return built


def trainjob(
    name: str,
    replicas: int | None = 2,
    *,
    namespace: str | None = None,
    labels: Mapping[str, str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    container: Mapping[str, Any] | None = None,
    env: Env | None = None,
    status: Mapping[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A TrainJob named `name` with `replicas` workers (None leaves spec.replicas out, for schema tests)."""
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    if labels is not None:
        meta["labels"] = dict(labels)
    meta.update(copy.deepcopy(dict(metadata or {})))
    body_spec: dict[str, Any] = {} if replicas is None else {"replicas": replicas}
    body_spec.update(copy.deepcopy(spec))
    if container is not None or env is not None:
        pod = body_spec.setdefault("template", {}).setdefault("spec", {})
        others = pod.get("containers", [])
        if any(c.get("name") == CONTAINER_NAME for c in others):
            raise ValueError(f"the {CONTAINER_NAME!r} container is given twice: in template and as container")
        pod["containers"] = [trainer_container(container, env), *others]
    body: dict[str, Any] = {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta, "spec": body_spec}
    if status is not None:
        body["status"] = copy.deepcopy(dict(status))
    return body
