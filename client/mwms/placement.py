"""What a job asks of the cluster (resources, env, labels, queue, placement, deadline, retries) and where each
goes in the TrainJob: `mwms submit --cpu/--gpu/...`, `Client.submit(cpu=..., gpu=...)` and
`MirroredStrategyRunner(use_gpu=...)` build one `Placement` and apply it to the body (pure functions).

    spec.template (a PodTemplateSpec)   --template FILE, then: resources, env (the `trainer` container),
                                        nodeSelector, tolerations; labels on the worker pods too
    metadata.labels (the TrainJob)      --label, --queue (kueue.x-k8s.io/queue-name)
    spec.runPolicy                      --deadline (activeDeadlineSeconds), --backoff-limit (backoffLimit)
"""

from __future__ import annotations

import copy
import importlib.metadata
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mwms.kube import SubmitError
from mwms_contract import names

NVIDIA_GPU = "nvidia.com/gpu"
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# The trainer image's CUDA build is tagged `<version>-gpu` (tensorflow[and-cuda], NVIDIA only).
GPU_TAG_SUFFIX = "-gpu"
DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str | int | float) -> int:
    """Whole seconds of 90, "90s", "15m", "2h", "1d" or "1h30m"; ValueError otherwise."""
    if isinstance(text, bool):
        raise ValueError(f"{text!r} is not a duration")
    if isinstance(text, int | float):
        total = float(text)
    else:
        parts = re.findall(r"(\d+(?:\.\d+)?)([smhd]?)", text.strip())
        if not parts or "".join(n + u for n, u in parts) != text.strip():
            raise ValueError(f"{text!r} is not a duration (90, 90s, 15m, 2h, 1h30m)")
        total = sum(float(n) * DURATION_UNITS[u or "s"] for n, u in parts)
    if total < 1 or total != int(total):
        raise ValueError(f"{text!r} is not a whole number of seconds, at least 1")
    return int(total)


def key_value(text: str, what: str) -> tuple[str, str]:
    """`K=V` (the value may hold `=`); ValueError naming `what` otherwise."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"{what} {text!r} is not KEY=VALUE")
    return key, value


def toleration(text: str) -> dict[str, str]:
    """kubectl taint's syntax: KEY[=VALUE]:EFFECT (Equal, or Exists without a value); `KEY:` or `KEY` alone
    tolerates every effect."""
    spec, _, effect = text.rpartition(":") if ":" in text else (text, "", "")
    key, sep, value = spec.partition("=")
    if not key or (effect and effect not in TAINT_EFFECTS):
        effects = ", ".join(TAINT_EFFECTS)
        raise ValueError(f"toleration {text!r} is not KEY[=VALUE]:EFFECT (effect: {effects})")
    out = {"key": key, "operator": "Equal" if sep else "Exists"}
    if sep:
        out["value"] = value
    if effect:
        out["effect"] = effect
    return out


def gpu_image(version: str | None = None) -> str:
    """The default trainer image's CUDA variant at this client's version (the operator's default follows the
    same version)."""
    return f"{names.TRAINER_IMAGE}:{version or importlib.metadata.version('mwms')}{GPU_TAG_SUFFIX}"


def read_template(path: Path) -> dict[str, Any]:
    """A PodTemplateSpec ({metadata, spec}) from YAML; a `kind: PodTemplate` (its `template`) or a bare
    PodSpec ({containers: ...}) is taken too."""
    import yaml

    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise SubmitError(f"--template {path}: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise SubmitError(f"--template {path}: not YAML ({e})") from None
    if not isinstance(loaded, Mapping):
        raise SubmitError(f"--template {path}: not a pod template (a mapping with metadata and spec)")
    if loaded.get("kind") == "PodTemplate":
        loaded = loaded.get("template") or {}
    elif "spec" not in loaded and "containers" in loaded:
        loaded = {"spec": loaded}
    unknown = sorted(set(loaded) - {"metadata", "spec"})
    if unknown:
        raise SubmitError(f"--template {path}: a PodTemplateSpec has metadata and spec, not {unknown[0]}")
    return dict(loaded)


@dataclass(frozen=True)
class Placement:
    """What the job asks for; None / empty leaves the operator's (or the template's) default."""

    cpu: str | None = None  # a Kubernetes quantity per worker: "4", "500m"
    memory: str | None = None  # "16Gi"
    gpu: int | None = None  # GPUs per worker
    gpu_resource: str = NVIDIA_GPU
    env: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    queue: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: Sequence[Mapping[str, str]] = ()
    deadline: int | None = None  # seconds
    backoff_limit: int | None = None
    template: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        reserved = sorted(set(self.env) & names.RESERVED_ENV)
        container = trainer_container(dict(self.template), create=False) or {}
        reserved += sorted(
            v.get("name") for v in container.get("env") or [] if v.get("name") in names.RESERVED_ENV
        )
        if reserved:
            raise SubmitError(
                f"env {', '.join(reserved)}: set by the operator for every worker, it may not be set "
                f"(reserved: {', '.join(sorted(names.RESERVED_ENV))})"
            )
        if self.gpu is not None and (isinstance(self.gpu, bool) or self.gpu < 0):
            raise SubmitError(f"gpu must be a whole number of GPUs per worker, got {self.gpu!r}")
        if self.backoff_limit is not None and self.backoff_limit < 0:
            raise SubmitError(f"backoff_limit must be at least 0, got {self.backoff_limit}")

    def image(self, image: str | None) -> str | None:
        """The image to ask for: the given one, else the CUDA variant when NVIDIA GPUs are asked for, else
        None (the operator's)."""
        if image or not self.gpu or self.gpu_resource != NVIDIA_GPU:
            return image
        return gpu_image()

    def apply(self, body: dict[str, Any]) -> dict[str, Any]:
        """The TrainJob `body` with this placement in it (a new dict)."""
        job = copy.deepcopy(body)
        spec = job.setdefault("spec", {})
        template = copy.deepcopy(dict(self.template))
        added = trainer_container(template, create=False) is None
        pod = template.setdefault("spec", {})
        container = trainer_container(template, create=True)
        assert container is not None
        resources = container.setdefault("resources", {})
        for resource, quantity in (("cpu", self.cpu), ("memory", self.memory), (self.gpu_resource, self.gpu)):
            if quantity is not None:  # requests and limits, as Kubeflow's resources_per_node
                resources.setdefault("requests", {})[resource] = str(quantity)
                resources.setdefault("limits", {})[resource] = str(quantity)
        if not resources:
            del container["resources"]
        env = [v for v in container.get("env") or [] if v.get("name") not in self.env]
        env += [{"name": k, "value": v} for k, v in self.env.items()]
        if env:
            container["env"] = env
        if self.node_selector:
            pod["nodeSelector"] = {**(pod.get("nodeSelector") or {}), **self.node_selector}
        if self.tolerations:
            pod["tolerations"] = [*(pod.get("tolerations") or []), *map(dict, self.tolerations)]
        if self.labels:
            meta = template.setdefault("metadata", {})
            meta["labels"] = {**(meta.get("labels") or {}), **self.labels}
        if added and container == {"name": names.CONTAINER_NAME}:  # nothing asked of it
            pod["containers"].remove(container)
            if not pod["containers"]:
                del pod["containers"]
        if not pod:
            del template["spec"]
        if template:
            spec["template"] = template
        job_labels = {**self.labels, **({names.LABEL_KUEUE_QUEUE: self.queue} if self.queue else {})}
        if job_labels:
            meta = job.setdefault("metadata", {})
            meta["labels"] = {**(meta.get("labels") or {}), **job_labels}
        run_policy = {
            key: value
            for key, value in (("activeDeadlineSeconds", self.deadline), ("backoffLimit", self.backoff_limit))
            if value is not None
        }
        if run_policy:
            spec["runPolicy"] = {**(spec.get("runPolicy") or {}), **run_policy}
        return job


def trainer_container(template: dict[str, Any], create: bool) -> dict[str, Any] | None:
    """The worker container (named `trainer`) of a pod template, added when absent and `create`."""
    pod = template.setdefault("spec", {}) if create else template.get("spec") or {}
    containers = pod.setdefault("containers", []) if create else pod.get("containers") or []
    found = next((c for c in containers if c.get("name") == names.CONTAINER_NAME), None)
    if found is None and create:
        found = {"name": names.CONTAINER_NAME}
        containers.append(found)
    return found
