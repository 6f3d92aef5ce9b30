"""The TrainJob: a body parsed into a typed, defaulted object (defaults are applied here, once), and the
environment each of its workers gets. The operator's pods and `mwms local` both use these, so the two cannot
drift.

The CRD schema rejects most bad input at the API server; these checks repeat the ones that matter, so a body
that never went through the API server (local mode, tests) fails with the same clear, field-named error.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mwms_contract import names
from mwms_contract.checkpoint_spec import CheckpointSpec, parse_checkpoint
from mwms_contract.ownership import own_workload
from mwms_contract.spec_values import MAX_SECONDS, SpecError
from mwms_contract.spec_values import integer as _int
from mwms_contract.spec_values import list_of_objects as _list_of_objects
from mwms_contract.spec_values import mapping as _mapping
from mwms_contract.spec_values import optional_integer as _optional_int
from mwms_contract.spec_values import string as _str
from mwms_contract.spec_values import volume_source as _volume_source
from mwms_contract.tf_config import tf_config

MAX_REPLICAS = 256
CLEAN_POD_POLICIES = ("Running", "All", "None")
DEFAULT_BACKOFF_LIMIT = 3
DEFAULT_CLEAN_POD_POLICY = "Running"
DEFAULT_STARTUP_TIMEOUT_SECONDS = 300
# How long a container may fail to start for a reason that can heal (an image pull, a Secret created later)
# before the job fails with ContainerError: long enough for a registry hiccup, short enough to be told.
DEFAULT_CONTAINER_ERROR_GRACE_SECONDS = 120
# spec.code.entrypoint: `package.module:function`, or a relative path to a script.
ENTRYPOINT_FUNCTION = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*", re.ASCII)
CONFIGMAP_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
URI_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")  # spec.trainer.dataPath: a URI, not a path
# spec.managedBy: a domain-prefixed path (`kueue.x-k8s.io/multikueue`), at most 63 characters, as batch/v1
# Job's managedBy; the CRD says the same.
MANAGED_BY_MAX_LENGTH = 63
MANAGED_BY = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9/._~%!$&'()*+,;=:-]+",
    re.ASCII,
)


@dataclass(frozen=True)
class CodeSpec:
    """spec.code: run the user's files (a ConfigMap, or a volume for big code) instead of the built-in fit."""

    entrypoint: str  # "module:function" or "path/to/script.py"
    config_map: str | None = None  # exactly one of config_map and volume
    volume: Mapping[str, Any] | None = None  # a pod volume source: one of VOLUME_SOURCES
    args: tuple[str, ...] = ()
    items: tuple[tuple[str, str], ...] = ()  # (ConfigMap key, relative path); empty: every key as is
    requirements: str | None = None  # a pip requirements file in the code directory


@dataclass(frozen=True)
class TrainJobSpec:
    replicas: int
    image: str
    tracking_uri: str
    experiment: str
    trainer: Mapping[str, Any] = field(default_factory=dict)  # camelCase, passed on as MWMS_TRAINER_CONFIG
    template: Mapping[str, Any] = field(default_factory=dict)  # a PodTemplateSpec
    registered_model_name: str | None = None
    port: int = names.DEFAULT_PORT
    checkpoint: CheckpointSpec | None = None
    backoff_limit: int = DEFAULT_BACKOFF_LIMIT
    active_deadline_seconds: int | None = None
    ttl_seconds_after_finished: int | None = None
    clean_pod_policy: str = DEFAULT_CLEAN_POD_POLICY
    suspend: bool = False
    startup_timeout_seconds: int = DEFAULT_STARTUP_TIMEOUT_SECONDS
    container_error_grace_seconds: int = DEFAULT_CONTAINER_ERROR_GRACE_SECONDS
    # The TrainJob's kueue.x-k8s.io/queue-name label: its workers become one Kueue pod group in that queue
    # (not where the job has a Workload of its own: own_workload).
    queue_name: str | None = None
    code: CodeSpec | None = None
    gang: str = names.DEFAULT_GANG  # spec.scheduling.gang: one of names.GANG_MODES
    # spec.mlflow.systemMetrics: every worker's system metrics into the run this often; 0: off.
    system_metrics_seconds: int = names.DEFAULT_SYSTEM_METRICS_SECONDS
    managed_by: str = names.CONTROLLER_NAME  # spec.managedBy; any other value: not this operator's job


def _check_template(template: Mapping[str, Any]) -> None:
    """The shapes the pod builder relies on (spec.template.spec is passed through, untyped, by the CRD),
    and no reserved variable in the `trainer` container's env."""
    metadata = _mapping(template.get("metadata"), "spec.template.metadata")
    for key in ("labels", "annotations"):
        for label, value in _mapping(metadata.get(key), f"spec.template.metadata.{key}").items():
            if not isinstance(value, str):
                raise SpecError(f"spec.template.metadata.{key}.{label}", "must be a string")
    pod = _mapping(template.get("spec"), "spec.template.spec")
    _list_of_objects(pod.get("volumes"), "spec.template.spec.volumes")
    for i, container in enumerate(_list_of_objects(pod.get("containers"), "spec.template.spec.containers")):
        if container.get("name") != names.CONTAINER_NAME:
            continue
        path = f"spec.template.spec.containers[{i}]"
        for key in ("ports", "volumeMounts"):
            _list_of_objects(container.get(key), f"{path}.{key}")
        for j, var in enumerate(_list_of_objects(container.get("env"), f"{path}.env")):
            name = var.get("name")
            if not isinstance(name, str):
                raise SpecError(f"{path}.env[{j}].name", f"must be a string, got {name!r}")
            if name in names.RESERVED_ENV:
                raise SpecError(
                    f"{path}.env[{j}].name",
                    f"{name} is set by the operator for the {names.CONTAINER_NAME!r} container and may "
                    f"not be set in the template (reserved: {', '.join(sorted(names.RESERVED_ENV))})",
                )


def _relative_path(value: Any, path: str) -> str:
    text = _str(value, path)
    if text.startswith("/") or ".." in text.split("/"):
        raise SpecError(path, f"must be a relative path without '..', got {text!r}")
    return text


def _code(value: Any) -> CodeSpec | None:
    if value is None:
        return None
    code = _mapping(value, "spec.code")
    if ("configMap" in code) == ("volume" in code):
        raise SpecError("spec.code", "must set exactly one of configMap, volume")
    config_map = None
    if "configMap" in code:
        config_map = _str(code["configMap"], "spec.code.configMap")
        if len(config_map) > 253 or not CONFIGMAP_NAME.fullmatch(config_map):
            raise SpecError("spec.code.configMap", f"must be the name of a ConfigMap, got {config_map!r}")
    elif "items" in code:
        raise SpecError("spec.code.items", "selects ConfigMap keys: it needs spec.code.configMap")
    entrypoint = _str(code.get("entrypoint"), "spec.code.entrypoint")
    if not ENTRYPOINT_FUNCTION.fullmatch(entrypoint):
        if not entrypoint.endswith(".py"):
            raise SpecError(
                "spec.code.entrypoint",
                f"must be module:function or a path to a .py script, got {entrypoint!r}",
            )
        _relative_path(entrypoint, "spec.code.entrypoint")
    args = code.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise SpecError("spec.code.args", f"must be a list of strings, got {args!r}")
    items = []
    for i, item in enumerate(_list_of_objects(code.get("items"), "spec.code.items")):
        key = _str(item.get("key"), f"spec.code.items[{i}].key")
        items.append((key, _relative_path(item.get("path"), f"spec.code.items[{i}].path")))
    requirements = code.get("requirements")
    return CodeSpec(
        config_map=config_map,
        volume=_volume_source(code.get("volume"), "spec.code.volume"),
        entrypoint=entrypoint,
        args=tuple(args),
        items=tuple(items),
        requirements=None if requirements is None else _relative_path(requirements, "spec.code.requirements"),
    )


def _system_metrics(value: Any) -> int:
    """spec.mlflow.systemMetrics ({enabled, periodSeconds}) as the sampling period; 0 when turned off."""
    given = _mapping(value, "spec.mlflow.systemMetrics")
    enabled = given.get("enabled", True)
    if not isinstance(enabled, bool):
        raise SpecError("spec.mlflow.systemMetrics.enabled", f"must be true or false, got {enabled!r}")
    period = _int(
        given.get("periodSeconds", names.DEFAULT_SYSTEM_METRICS_SECONDS),
        "spec.mlflow.systemMetrics.periodSeconds",
        minimum=1,
        maximum=3600,
    )
    return period if enabled else 0


def _check_data_path(data_path: object) -> None:
    """Refuse a dataPath URI the trainer cannot read (the trainer's own check, mwms_trainer.objectstore, says
    the same), so the job fails as InvalidSpec before any pod starts."""
    scheme = URI_SCHEME.match(data_path) if isinstance(data_path, str) else None
    if scheme and scheme.group(1).lower() not in names.DATA_PATH_SCHEMES:
        supported = ", ".join(f"{s}://" for s in names.DATA_PATH_SCHEMES)
        raise SpecError(
            "spec.trainer.dataPath",
            f"{scheme.group(1)}:// is not supported; use a path inside the worker (a volume from "
            f"spec.template) or one of: {supported}",
        )


def _managed_by(value: Any) -> str:
    text = _str(value, "spec.managedBy")
    if len(text) > MANAGED_BY_MAX_LENGTH or not MANAGED_BY.fullmatch(text):
        raise SpecError(
            "spec.managedBy",
            f"must be a domain-prefixed path of at most {MANAGED_BY_MAX_LENGTH} characters (such as "
            f"{names.MULTIKUEUE_CONTROLLER_NAME}), got {text!r}",
        )
    return text


def parse(body: Mapping[str, Any], *, tracking_uri: str, image: str) -> TrainJobSpec:
    """Parse a TrainJob (the whole object, or at least its `spec`) and apply every default once; tracking_uri
    and image are the defaults of spec.mlflow.trackingUri and spec.image (the operator's settings)."""
    spec = _mapping(body.get("spec"), "spec")
    metadata = _mapping(body.get("metadata"), "metadata")
    name = metadata.get("name")
    queue = _mapping(metadata.get("labels"), "metadata.labels").get(names.LABEL_KUEUE_QUEUE)
    if own_workload(body) is not None:
        queue = None  # admitted through a Workload of its own: its workers form no pod group (queued twice)

    if "replicas" not in spec:
        raise SpecError("spec.replicas", "is required")
    replicas = _int(spec["replicas"], "spec.replicas", minimum=1, maximum=MAX_REPLICAS)

    trainer = dict(_mapping(spec.get("trainer"), "spec.trainer"))
    batch = trainer.get("globalBatchSize")
    if isinstance(batch, int) and not isinstance(batch, bool) and batch % replicas:
        raise SpecError(
            "spec.trainer.globalBatchSize",
            f"must be a multiple of spec.replicas ({replicas}) (equal slices per worker), got {batch}",
        )

    _check_data_path(trainer.get("dataPath"))

    code = _code(spec.get("code"))
    if code is not None and "trainer" in spec:
        raise SpecError(
            "spec.code",
            "spec.code and spec.trainer are exclusive: spec.trainer configures the built-in fit, "
            "spec.code runs your own",
        )

    mlflow = _mapping(spec.get("mlflow"), "spec.mlflow")
    tracking_uri = mlflow.get("trackingUri", tracking_uri)
    # One experiment per TrainJob name by default, so reruns of a job land side by side.
    experiment = mlflow.get("experiment", name or "Default")
    registered = mlflow.get("registeredModelName")
    system_metrics = _system_metrics(mlflow.get("systemMetrics"))

    template = copy.deepcopy(dict(_mapping(spec.get("template"), "spec.template")))
    _check_template(template)

    run_policy = _mapping(spec.get("runPolicy"), "spec.runPolicy")
    clean = run_policy.get("cleanPodPolicy", DEFAULT_CLEAN_POD_POLICY)
    if clean not in CLEAN_POD_POLICIES:
        raise SpecError("spec.runPolicy.cleanPodPolicy", f"must be one of {', '.join(CLEAN_POD_POLICIES)}")
    suspend = run_policy.get("suspend", False)
    if not isinstance(suspend, bool):
        raise SpecError("spec.runPolicy.suspend", f"must be true or false, got {suspend!r}")
    gang = _mapping(spec.get("scheduling"), "spec.scheduling").get("gang", names.DEFAULT_GANG)
    if gang not in names.GANG_MODES:
        raise SpecError("spec.scheduling.gang", f"must be one of {', '.join(names.GANG_MODES)}, got {gang!r}")

    return TrainJobSpec(
        replicas=replicas,
        image=_str(spec.get("image", image), "spec.image"),
        tracking_uri=_str(tracking_uri, "spec.mlflow.trackingUri"),
        experiment=_str(experiment, "spec.mlflow.experiment"),
        trainer=trainer,
        template=template,
        registered_model_name=None
        if registered is None
        else _str(registered, "spec.mlflow.registeredModelName"),
        port=_int(spec.get("port", names.DEFAULT_PORT), "spec.port", minimum=1, maximum=65535),
        checkpoint=parse_checkpoint(spec.get("checkpoint"), code is not None, template),
        backoff_limit=_int(
            run_policy.get("backoffLimit", DEFAULT_BACKOFF_LIMIT),
            "spec.runPolicy.backoffLimit",
            minimum=0,
            maximum=1000,
        ),
        active_deadline_seconds=_optional_int(
            run_policy.get("activeDeadlineSeconds"),
            "spec.runPolicy.activeDeadlineSeconds",
            minimum=1,
            maximum=MAX_SECONDS,
        ),
        ttl_seconds_after_finished=_optional_int(
            run_policy.get("ttlSecondsAfterFinished"),
            "spec.runPolicy.ttlSecondsAfterFinished",
            minimum=0,
            maximum=MAX_SECONDS,
        ),
        clean_pod_policy=clean,
        suspend=suspend,
        gang=gang,
        code=code,
        system_metrics_seconds=system_metrics,
        queue_name=None if queue is None else _str(queue, f"metadata.labels.{names.LABEL_KUEUE_QUEUE}"),
        managed_by=_managed_by(spec.get("managedBy", names.CONTROLLER_NAME)),
        startup_timeout_seconds=_int(
            run_policy.get("startupTimeoutSeconds", DEFAULT_STARTUP_TIMEOUT_SECONDS),
            "spec.runPolicy.startupTimeoutSeconds",
            minimum=1,
            maximum=MAX_SECONDS,
        ),
        container_error_grace_seconds=_int(
            run_policy.get("containerErrorGraceSeconds", DEFAULT_CONTAINER_ERROR_GRACE_SECONDS),
            "spec.runPolicy.containerErrorGraceSeconds",
            minimum=0,
            maximum=MAX_SECONDS,
        ),
    )


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def trainer_env(
    spec: TrainJobSpec,
    *,
    job_name: str,
    namespace: str,
    uid: str,
    index: int,
    hosts: list[str],
    restart_count: int,
) -> dict[str, str]:
    """Every reserved variable that applies to worker `index` (pods and local mode both use this)."""
    env = {
        names.ENV_TF_CONFIG: _compact(tf_config(hosts, index)),
        names.ENV_JOB_NAME: job_name,
        names.ENV_JOB_NAMESPACE: namespace,
        names.ENV_JOB_UID: uid,
        names.ENV_RESTART_COUNT: str(restart_count),
        names.ENV_TRAINER_CONFIG: _compact(dict(spec.trainer)),
        names.ENV_TRACKING_URI: spec.tracking_uri,
        names.ENV_EXPERIMENT_NAME: spec.experiment,
        names.ENV_STARTUP_TIMEOUT: str(spec.startup_timeout_seconds),
        names.ENV_SYSTEM_METRICS_SECONDS: str(spec.system_metrics_seconds),
    }
    if spec.registered_model_name:
        env[names.ENV_REGISTERED_MODEL_NAME] = spec.registered_model_name
    if spec.checkpoint is not None:
        env[names.ENV_CHECKPOINT_DIR] = names.CHECKPOINT_MOUNT_PATH
        if spec.checkpoint.store is not None:
            env[names.ENV_CHECKPOINT_STORE] = spec.checkpoint.store
        if spec.checkpoint.every_steps is not None:
            env[names.ENV_CHECKPOINT_EVERY_STEPS] = str(spec.checkpoint.every_steps)
    if spec.code is not None:
        env[names.ENV_CODE_DIR] = names.CODE_MOUNT_PATH
        env[names.ENV_CODE_ENTRYPOINT] = spec.code.entrypoint
        env[names.ENV_CODE_ARGS] = _compact(list(spec.code.args))
        if spec.code.requirements:
            env[names.ENV_CODE_REQUIREMENTS] = spec.code.requirements
        if spec.code.volume is not None:
            env[names.ENV_CODE_SOURCE] = "volume"
    return env
