"""Pure: a worker Pod as a plain dict: spec.template merged with what MWMS needs (the trainer's environment,
TF_CONFIG among it, is mwms_contract.trainjob.trainer_env, which `mwms local` uses too)."""

from __future__ import annotations

import copy
from typing import Any

from mwms_contract import names
from mwms_contract.trainjob import CodeSpec, TrainJobSpec, trainer_env
from mwms_operator.render.labels import owner_reference, worker_labels

CHECKPOINT_VOLUME = "mwms-checkpoint"
CODE_VOLUME = "mwms-code"
RENDEZVOUS_VOLUME = "mwms-rendezvous"
# Ready once the worker has joined its group (the probe's output names why not yet); only where our trainer
# writes the rendezvous state (runs_trainer_entrypoint).
READINESS_PROBE = {
    "exec": {"command": list(names.RENDEZVOUS_PROBE_COMMAND)},
    "periodSeconds": 5,
    "timeoutSeconds": 5,
}
# For a `trainer` container without a securityContext of its own: what Pod Security `restricted` asks for.
# (The trainer image runs as a non-root user.) A template that sets one keeps exactly its own.
RESTRICTED_SECURITY_CONTEXT = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def runs_trainer_entrypoint(container: dict[str, Any], image: str) -> bool:
    """The container runs `python -m mwms_trainer` (which writes the rendezvous state the probe reads)."""
    # Ours: the job's image with no command (its ENTRYPOINT is python -m mwms_trainer), or that command.
    command = [str(part) for part in container.get("command") or []]
    if not command:
        return container.get("image", image) == image
    return command[0].rsplit("/", 1)[-1].startswith("python") and command[1:3] == ["-m", "mwms_trainer"]


def code_volume(code: CodeSpec) -> dict[str, Any]:
    """spec.code's files as a volume (mounted read-only). A ConfigMap is optional, so a missing one does not
    leave the pod waiting forever: the trainer then exits 2 naming spec.code.configMap (a permanent failure).
    spec.code.volume is the user's own volume source, as given."""
    if code.volume is not None:
        return {"name": CODE_VOLUME, **copy.deepcopy(dict(code.volume))}
    source: dict[str, Any] = {"name": code.config_map, "optional": True}
    if code.items:
        source["items"] = [{"key": key, "path": path} for key, path in code.items]
    return {"name": CODE_VOLUME, "configMap": source}


def _trainer_container(containers: list[dict[str, Any]]) -> dict[str, Any]:
    for container in containers:
        if container.get("name") == names.CONTAINER_NAME:
            return container
    container = {"name": names.CONTAINER_NAME}
    containers.insert(0, container)
    return container


def build_worker_pod(
    spec: TrainJobSpec,
    *,
    job_name: str,
    namespace: str,
    uid: str,
    index: int,
    hosts: list[str],
    restart_count: int,
    pod_group: str | None = None,
) -> dict[str, Any]:
    """spec.template merged with what MWMS needs; the operator's labels and settings win. `pod_group`: the
    PodGroup the worker is scheduled with, all or nothing with its peers."""
    template = copy.deepcopy(dict(spec.template))
    meta = template.get("metadata") or {}
    pod_spec = template.get("spec") or {}
    name = names.pod_name(job_name, index)

    labels = dict(meta.get("labels") or {})
    labels.update(worker_labels(job_name, uid, index, restart_count))
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": labels,
        "ownerReferences": [owner_reference(job_name, uid)],
    }
    if meta.get("annotations"):
        metadata["annotations"] = dict(meta["annotations"])
    if spec.queue_name:
        # One Kueue pod group per (re)start: Kueue admits all the group's workers or none (MWMS needs all).
        # Not retriable in group: a lost worker ends the group (and frees its quota); the operator's
        # whole-group restart is a new group, admitted anew.
        labels[names.LABEL_KUEUE_QUEUE] = spec.queue_name
        labels[names.LABEL_KUEUE_POD_GROUP] = f"{job_name}-{restart_count}"
        annotations = metadata.setdefault("annotations", {})
        annotations[names.ANNOTATION_KUEUE_POD_GROUP_TOTAL] = str(spec.replicas)
        annotations[names.ANNOTATION_KUEUE_RETRIABLE_IN_GROUP] = "false"

    containers = list(pod_spec.get("containers") or [])
    container = _trainer_container(containers)
    container.setdefault("image", spec.image)
    reserved = trainer_env(
        spec,
        job_name=job_name,
        namespace=namespace,
        uid=uid,
        index=index,
        hosts=hosts,
        restart_count=restart_count,
    )
    # A worker in a pod waits for its peers as long as it takes: a peer may be pulling a multi-GB image for
    # longer than startupTimeoutSeconds, which must not cost a counted restart. The operator sees the pods
    # and ends a group that is stuck (startupTimeoutSeconds while some worker runs and not all have joined,
    # not counting image pulls; ContainerError).
    reserved[names.ENV_PEER_WAIT] = "0"
    # Ours first, so user variables may refer to them with $(NAME).
    container["env"] = [{"name": k, "value": v} for k, v in reserved.items()] + list(
        container.get("env") or []
    )
    ports = list(container.get("ports") or [])
    if not any(p.get("containerPort") == spec.port for p in ports):
        ports.append({"name": names.PORT_NAME, "containerPort": spec.port, "protocol": "TCP"})
    container["ports"] = ports
    container.setdefault("securityContext", copy.deepcopy(RESTRICTED_SECURITY_CONTEXT))
    container.setdefault("terminationMessagePath", names.TERMINATION_MESSAGE_PATH)
    # A worker that dies before writing its message still tells us why (the tail of its log).
    container.setdefault("terminationMessagePolicy", "FallbackToLogsOnError")

    volumes = list(pod_spec.get("volumes") or [])
    if spec.checkpoint is not None:
        # A store's checkpoint passes through an emptyDir, the chief's copy: the root filesystem may be
        # read-only.
        source = spec.checkpoint.volume if spec.checkpoint.volume is not None else {"emptyDir": {}}
        volumes.append({"name": CHECKPOINT_VOLUME, **copy.deepcopy(dict(source))})
        mounts = list(container.get("volumeMounts") or [])
        mounts.append({"name": CHECKPOINT_VOLUME, "mountPath": names.CHECKPOINT_MOUNT_PATH})
        container["volumeMounts"] = mounts
    if spec.code is not None:
        volumes.append(code_volume(spec.code))
        mounts = list(container.get("volumeMounts") or [])
        mounts.append({"name": CODE_VOLUME, "mountPath": names.CODE_MOUNT_PATH, "readOnly": True})
        container["volumeMounts"] = mounts

    # The rendezvous state lives in a volume of its own: the root filesystem may be read-only.
    volumes.append({"name": RENDEZVOUS_VOLUME, "emptyDir": {}})
    mounts = list(container.get("volumeMounts") or [])
    mounts.append({"name": RENDEZVOUS_VOLUME, "mountPath": names.RENDEZVOUS_MOUNT_PATH})
    container["volumeMounts"] = mounts
    if runs_trainer_entrypoint(container, spec.image):  # else its own probe, or none: Ready once it runs
        container.setdefault("readinessProbe", copy.deepcopy(READINESS_PROBE))

    pod_spec = {
        **pod_spec,
        "containers": containers,
        "restartPolicy": "Never",
        "hostname": name,
        "subdomain": job_name,
    }
    pod_spec["volumes"] = volumes
    if spec.checkpoint is not None and spec.checkpoint.termination_grace_period_seconds is not None:
        pod_spec["terminationGracePeriodSeconds"] = spec.checkpoint.termination_grace_period_seconds
    if pod_group is not None:
        pod_spec["schedulingGroup"] = {"podGroupName": pod_group}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}
