"""Pure: the pod template of a TFJob's workers as a TrainJob's spec.template (mwms.tfjob converts the rest).

training-operator's `tensorflow` container becomes the `trainer` container; what the operator sets itself
(TF_CONFIG, the port, the pods' names and restart policy) leaves the template, MLflow's variables become
spec.mlflow, and selectors on training-operator's pod labels are named."""

from __future__ import annotations

import copy
from typing import Any

from mwms.conversion import Conversion, ConvertError, mapping, objects
from mwms_contract import names

TF_CONTAINER = "tensorflow"  # training-operator's TensorFlow container (TF_CONFIG goes into it alone)
TF_PORT_NAME = "tfjob-port"
OWN_LABELS = "training.kubeflow.org/"  # the labels training-operator puts on its pods
JOB_NAME_LABEL = OWN_LABELS + "job-name"
MLFLOW_ENV = {names.ENV_TRACKING_URI: "trackingUri", names.ENV_EXPERIMENT_NAME: "experiment"}


def label_key(key: Any, path: str, found: Conversion) -> Any:
    """A label key in a selector: training-operator's job-name becomes ours; its other labels are lost."""
    if key == JOB_NAME_LABEL:
        found.note(path, f"{JOB_NAME_LABEL} is {names.LABEL_JOB_NAME} on a TrainJob's pods (the same value)")
        return names.LABEL_JOB_NAME
    if isinstance(key, str) and key.startswith(OWN_LABELS):
        found.lose(
            path, f"{key} is training-operator's pod label: no TrainJob pod has it, so this matches none"
        )
    return key


def selectors(node: Any, path: str, found: Conversion) -> None:
    """Rewrites the label selectors under node (affinity, topologySpreadConstraints) in place."""
    if isinstance(node, list):
        for i, item in enumerate(node):
            selectors(item, f"{path}[{i}]", found)
        return
    if not isinstance(node, dict):
        return
    for key, value in list(node.items()):
        here = f"{path}.{key}"
        if key == "matchLabels" and isinstance(value, dict):
            node[key] = {label_key(k, f"{here}[{k}]", found): v for k, v in value.items()}
        elif key == "matchExpressions" and isinstance(value, list):
            for i, expression in enumerate(value):
                if isinstance(expression, dict) and "key" in expression:
                    expression["key"] = label_key(expression["key"], f"{here}[{i}].key", found)
        elif key in ("matchLabelKeys", "mismatchLabelKeys") and isinstance(value, list):
            node[key] = [label_key(k, f"{here}[{i}]", found) for i, k in enumerate(value)]
        else:
            selectors(value, here, found)


def env(container: dict[str, Any], path: str, found: Conversion) -> dict[str, str]:
    """Takes what the operator sets out of the container's env; MLflow's plain values become spec.mlflow."""
    mlflow: dict[str, str] = {}
    kept = []
    for j, var in enumerate(objects(container.get("env"), f"{path}.env")):
        name, here = var.get("name"), f"{path}.env[{j}]"
        if name == names.ENV_TF_CONFIG:
            found.note(here, "TF_CONFIG dropped: the operator sets each worker's")
        elif name in MLFLOW_ENV and isinstance(var.get("value"), str) and var["value"]:
            mlflow[MLFLOW_ENV[name]] = var["value"]
            found.note(
                here, f"{name} carried as spec.mlflow.{MLFLOW_ENV[name]}, which the operator sets it from"
            )
        elif name in MLFLOW_ENV:
            found.lose(
                here, f"{name} dropped: the operator sets it from spec.mlflow.{MLFLOW_ENV[name]}, a value"
            )
        elif name in names.RESERVED_ENV:
            found.lose(here, f"{name} dropped: the operator sets it")
        else:
            kept.append(var)
    if kept:
        container["env"] = kept
    else:
        container.pop("env", None)
    if container.get("envFrom"):
        found.note(
            f"{path}.envFrom",
            "carried; TF_CONFIG, MWMS_* or MLflow's variables in it are overridden by the operator's "
            "(set the MLflow server and experiment in spec.mlflow)",
        )
    return mlflow


def tf_port(container: dict[str, Any], path: str) -> Any:
    """The TFJob's port (its `tfjob-port` entry, which goes: the operator declares its own), or None."""
    ports = objects(container.get("ports"), f"{path}.ports")
    tf = [p for p in ports if p.get("name") == TF_PORT_NAME]
    rest = [p for p in ports if p.get("name") != TF_PORT_NAME]
    if rest:
        container["ports"] = rest
    else:
        container.pop("ports", None)
    port = tf[0].get("containerPort") if tf else None
    return None if port == names.DEFAULT_PORT else port


def template(
    source: Any, path: str, job_name: str, found: Conversion
) -> tuple[dict[str, Any], Any, dict[str, str]]:
    """spec.template from the template at `path`, the TrainJob's port (None: the default) and spec.mlflow."""
    source = mapping(source, path)
    meta = mapping(source.get("metadata"), f"{path}.metadata")
    pod = copy.deepcopy(dict(mapping(source.get("spec"), f"{path}.spec")))
    pod.pop(
        "restartPolicy", None
    )  # training-operator overrides it with the replica's; the operator with Never
    for key in ("hostname", "subdomain"):
        if pod.pop(key, None) is not None:
            found.note(f"{path}.spec.{key}", f"dropped: worker i is {job_name}-worker-i.{job_name}")
    containers = objects(pod.get("containers"), f"{path}.spec.containers")
    index = next((i for i, c in enumerate(containers) if c.get("name") == TF_CONTAINER), None)
    if index is None:
        raise ConvertError(
            f"{path}.spec.containers", f"has no container named {TF_CONTAINER} (a TFJob needs one)"
        )
    if any(c.get("name") == names.CONTAINER_NAME for c in containers):
        taken = f"has a container named {names.CONTAINER_NAME}, the TrainJob's name for {TF_CONTAINER}"
        raise ConvertError(f"{path}.spec.containers", f"{taken}: rename that one")
    here = f"{path}.spec.containers[{index}]"
    container = containers[index]
    if not container.get("image"):
        raise ConvertError(f"{here}.image", "is required (by training-operator too)")
    container["name"] = names.CONTAINER_NAME
    mlflow = env(container, here, found)
    port = tf_port(container, here)
    if "securityContext" not in container:
        # As it ran under training-operator: as the image's own user. Without one the operator would run it
        # non-root (Pod Security restricted), which an image built to run as root cannot start under.
        container["securityContext"] = {}
        found.note(
            f"{here}.securityContext",
            "none: set to {} so the image runs as its own user, as under training-operator (without one the "
            "operator applies Pod Security restricted: non-root); set one to harden it",
        )
    for key in ("affinity", "topologySpreadConstraints"):
        if key in pod:
            selectors(pod[key], f"{path}.spec.{key}", found)
    out: dict[str, Any] = {}
    for key in ("labels", "annotations"):
        if meta.get(key):
            out.setdefault("metadata", {})[key] = dict(meta[key])
    out["spec"] = pod
    return out, port, mlflow
