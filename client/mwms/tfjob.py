"""Pure: a Kubeflow TFJob (kubeflow.org/v1, training-operator's) as a TrainJob, naming what does not carry
over (mwms.conversion). `mwms convert` and `mwms.convert_tfjob` use it; docs/migration.md has the mapping.

The Chief (or Master) and the Workers become one group, the chief worker 0; PS and Evaluator replicas do
not carry over. The pod template is mwms.tfjob_pod's; the restart policy, runPolicy and schedulingPolicy
are here."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import mwms.tfjob_pod as tfjob_pod
from mwms.conversion import Conversion, ConvertError, mapping
from mwms_contract import names
from mwms_contract.trainjob import DEFAULT_BACKOFF_LIMIT, SpecError, parse

API_VERSION = "kubeflow.org/v1"
KIND = "TFJob"
CHIEF, MASTER, WORKER, PS, EVALUATOR = "Chief", "Master", "Worker", "PS", "Evaluator"
REPLICA_TYPES = {t.lower(): t for t in (CHIEF, MASTER, WORKER, PS, EVALUATOR)}  # case-insensitive there too
RESTART_POLICIES = ("Never", "OnFailure", "Always", "ExitCode")
TRAINING_OPERATOR = "kubeflow.org/training-operator"  # runPolicy.managedBy naming training-operator itself
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
NAME = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")  # the CRD's metadata.name: <name>-worker-255 a DNS label
MAX_NAME = 52
SPEC_FIELDS = {"runPolicy", "successPolicy", "tfReplicaSpecs", "enableDynamicWorker"}
REPLICA_FIELDS = {"replicas", "template", "restartPolicy"}
RUN_POLICY_FIELDS = {
    "cleanPodPolicy",
    "ttlSecondsAfterFinished",
    "activeDeadlineSeconds",
    "backoffLimit",
    "schedulingPolicy",
    "suspend",
    "managedBy",
}
SCHEDULING_FIELDS = {"minAvailable", "queue", "minResources", "priorityClass", "scheduleTimeoutSeconds"}
DROPPED_REPLICAS = {
    PS: "parameter server(s) not carried: a TrainJob runs MultiWorkerMirroredStrategy workers only "
    "(code written for ParameterServerStrategy must move to MultiWorkerMirroredStrategy)",
    EVALUATOR: "evaluator(s) not carried: a TrainJob has training workers only (evaluate on the chief, "
    "or in a job of its own)",
}
RETRIED = "exit 75 or >= 128 or a lost pod"  # what a TrainJob restarts its group after


@dataclass(frozen=True)
class Group:
    """The TFJob's Chief (or Master) and Workers as the TrainJob's one group of workers."""

    replicas: int
    path: str  # the replica spec whose template and restartPolicy every worker gets
    template: Any
    restart_policy: str


def _unknown(given: Mapping[str, Any], known: set[str], path: str, found: Conversion) -> None:
    for key in sorted(set(given) - known, key=str):
        found.lose(f"{path}.{key}", "not a field of TFJob v1: not carried")


def _metadata(meta: Mapping[str, Any]) -> dict[str, Any]:
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ConvertError("metadata.name", "is required")
    if len(name) > MAX_NAME or not NAME.fullmatch(name):
        raise ConvertError(
            "metadata.name",
            f"{name!r} cannot name a TrainJob: at most {MAX_NAME} characters, lower case letters, digits and "
            "'-', starting with a letter (its pods are <name>-worker-<i>); rename the TFJob",
        )
    out: dict[str, Any] = {"name": name}
    if meta.get("namespace"):
        out["namespace"] = meta["namespace"]
    annotations = dict(mapping(meta.get("annotations"), "metadata.annotations"))
    annotations.pop(LAST_APPLIED, None)  # kubectl's record of the TFJob, not of the TrainJob
    out["labels"] = dict(mapping(meta.get("labels"), "metadata.labels"))
    out["annotations"] = annotations  # both dropped at the end when empty
    return out


def _replica_specs(spec: Mapping[str, Any]) -> dict[str, tuple[str, Mapping[str, Any]]]:
    """Replica type (training-operator's spelling) -> (its path, its spec)."""
    given = mapping(spec.get("tfReplicaSpecs"), "spec.tfReplicaSpecs")
    if not given:
        raise ConvertError("spec.tfReplicaSpecs", "is required")
    specs: dict[str, tuple[str, Mapping[str, Any]]] = {}
    for key, value in given.items():
        path = f"spec.tfReplicaSpecs.{key}"
        kind = REPLICA_TYPES.get(str(key).lower())
        if kind is None:
            raise ConvertError(path, f"not a TFJob replica type ({', '.join(REPLICA_TYPES.values())})")
        if kind in specs:
            raise ConvertError(path, f"{kind} is given twice")
        specs[kind] = (path, mapping(value, path))
    if CHIEF in specs and MASTER in specs:
        raise ConvertError("spec.tfReplicaSpecs", "has both Chief and Master (training-operator refuses it)")
    return specs


def _count(replica: Mapping[str, Any], path: str) -> int:
    value = replica.get("replicas", 1)  # training-operator's default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConvertError(f"{path}.replicas", f"must be a whole number, got {value!r}")
    return value


def _restart_policy(replica: Mapping[str, Any], path: str) -> str:
    policy = replica.get("restartPolicy") or "Never"  # training-operator's default for TFJob
    if policy not in RESTART_POLICIES:
        raise ConvertError(f"{path}.restartPolicy", f"must be one of {', '.join(RESTART_POLICIES)}")
    return str(policy)


def _differences(a: Any, b: Any, path: str = "") -> Iterator[str]:
    """The paths at which a and b differ."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in sorted(set(a) | set(b), key=str):
            yield from _differences(a.get(key), b.get(key), f"{path}.{key}" if path else str(key))
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            yield from _differences(x, y, f"{path}[{i}]")
    elif a != b:
        yield path or "."


def _chief(
    chief: tuple[str, str, Mapping[str, Any]], worker: Group | None, name: str, found: Conversion
) -> None:
    """The chief as worker 0; with Workers, what of its own it cannot keep."""
    kind, path, replica = chief
    found.note(
        path,
        f"the {kind} is worker 0 (pod {name}-worker-0, TF_CONFIG task worker 0) and Worker i is worker i+1: "
        "code that looks for task type chief must take worker 0 for it, as TensorFlow does without a chief",
    )
    if worker is None:
        return
    differ = list(_differences(replica.get("template"), worker.template))
    if differ:
        shown = ", ".join(differ[:3]) + (f" and {len(differ) - 3} more" if len(differ) > 3 else "")
        found.lose(
            f"{path}.template",
            f"differs from Worker's (at {shown}): a TrainJob has one template for all workers, Worker's",
        )
    policy = _restart_policy(replica, path)
    if policy != worker.restart_policy:
        found.lose(
            f"{path}.restartPolicy",
            f"{policy} where Worker's is {worker.restart_policy}: a TrainJob has one restart rule, Worker's",
        )


def _group(spec: Mapping[str, Any], name: str, found: Conversion) -> Group:
    """Chief and Workers as one group, the chief worker 0; PS and Evaluator named as lost."""
    specs = _replica_specs(spec)
    for kind, text in DROPPED_REPLICAS.items():
        if kind in specs and (count := _count(specs[kind][1], specs[kind][0])):
            found.lose(specs[kind][0], f"{count} {text}")
    chief, workers = None, None
    for kind in (CHIEF, MASTER, WORKER):
        if kind not in specs:
            continue
        path, replica = specs[kind]
        _unknown(replica, REPLICA_FIELDS, path, found)
        count = _count(replica, path)
        if kind != WORKER and count > 1:
            raise ConvertError(f"{path}.replicas", f"TensorFlow has one chief: must be 0 or 1, got {count}")
        if count and kind == WORKER:
            workers = Group(count, path, replica.get("template"), _restart_policy(replica, path))
        elif count:
            chief = (kind, path, replica)
    if chief is not None:
        _chief(chief, workers, name, found)
    if workers is not None:
        return Group(
            workers.replicas + (chief is not None), workers.path, workers.template, workers.restart_policy
        )
    if chief is None:
        raise ConvertError("spec.tfReplicaSpecs", "has no Chief, Master or Worker replica: nothing to train")
    _, path, replica = chief
    return Group(1, path, replica.get("template"), _restart_policy(replica, path))


def _backoff_limit(given: Any, group: Group, found: Conversion) -> Any:
    """runPolicy.backoffLimit for the group's restartPolicy (None: the TrainJob's default)."""
    path = f"{group.path}.restartPolicy"
    policy = group.restart_policy
    if policy == "Never":
        found.note(
            path,
            "Never: backoffLimit 0, so the first failure fails the TrainJob as it did the TFJob (a "
            "disruption such as an eviction still restarts the whole group, uncounted); raise "
            f"spec.runPolicy.backoffLimit for whole-group restarts after {RETRIED}",
        )
        if given:
            found.note(
                "spec.runPolicy.backoffLimit", f"{given} not carried: no Never replica restarts in a TFJob"
            )
        return 0
    if policy == "ExitCode":
        found.note(
            path,
            "ExitCode: a TrainJob's rule too (exit 1-127 fails it, >= 128 restarts), but it also restarts "
            "after exit 75 (EX_TEMPFAIL), and restarts the whole group, not one pod "
            "(MultiWorkerMirroredStrategy cannot go on with one new worker)",
        )
    else:
        after = "any exit" if policy == "Always" else "any non-zero exit"
        found.lose(
            path,
            f"{policy} restarts a worker after {after}; a TrainJob restarts its whole group only after "
            f"{RETRIED}, and fails after any other exit",
        )
    if given is None:
        found.note(
            "spec.runPolicy.backoffLimit",
            f"unset: training-operator restarts without limit, a TrainJob {DEFAULT_BACKOFF_LIMIT} times",
        )
    return given


def _scheduling(policy: Mapping[str, Any], replicas: int, job: dict[str, Any], found: Conversion) -> None:
    """schedulingPolicy: its queue as the Kueue label, its priority class on the pods; the rest named lost."""
    path = "spec.runPolicy.schedulingPolicy"
    labels, pod = job["metadata"]["labels"], job["spec"]["template"]["spec"]
    _unknown(policy, SCHEDULING_FIELDS, path, found)
    queue, kueue = policy.get("queue"), names.LABEL_KUEUE_QUEUE
    if queue and labels.get(kueue) in (None, queue):
        if kueue not in labels:
            found.note(
                f"{path}.queue",
                f"carried as the label {kueue}: a TrainJob queues through Kueue (a LocalQueue of that name "
                "must exist), where training-operator gave it to a gang scheduler's PodGroup",
            )
        labels[kueue] = queue
    elif queue:
        found.lose(f"{path}.queue", f"{queue}: the TFJob's label {kueue} ({labels[kueue]}) is the only queue")
    least = policy.get("minAvailable")
    if least is not None and least != replicas:
        found.lose(
            f"{path}.minAvailable",
            f"{least}: a TrainJob's {replicas} workers start all or none (with Kueue, one pod group)",
        )
    priority = policy.get("priorityClass")
    if priority and pod.get("priorityClassName") in (None, priority):
        pod["priorityClassName"] = priority
        found.note(f"{path}.priorityClass", "carried as the pods' priorityClassName (Kueue reads it there)")
    elif priority:
        found.lose(f"{path}.priorityClass", f"{priority}: the template's priorityClassName is the pods' one")
    for key in ("minResources", "scheduleTimeoutSeconds"):
        if policy.get(key) is not None:
            found.lose(f"{path}.{key}", "a gang scheduler's PodGroup setting: a TrainJob makes no PodGroup")


def _run_policy(policy: Mapping[str, Any], group: Group, found: Conversion) -> dict[str, Any]:
    path = "spec.runPolicy"
    _unknown(policy, RUN_POLICY_FIELDS, path, found)
    # training-operator's default for a TFJob is None (keep every pod); a TrainJob's is Running.
    out: dict[str, Any] = {"cleanPodPolicy": policy.get("cleanPodPolicy") or "None"}
    backoff = _backoff_limit(policy.get("backoffLimit"), group, found)
    if backoff is not None:
        out["backoffLimit"] = backoff
    for key in ("activeDeadlineSeconds", "ttlSecondsAfterFinished", "suspend"):
        if policy.get(key) is not None:
            out[key] = policy[key]
    return out


def _managed_by(policy: Mapping[str, Any], found: Conversion) -> str | None:
    """runPolicy.managedBy as the TrainJob's spec.managedBy; training-operator's own name means this
    operator, the TrainJob's default."""
    managed = policy.get("managedBy")
    if managed in (None, "", TRAINING_OPERATOR):
        return None
    found.note(
        "spec.runPolicy.managedBy",
        f"carried as spec.managedBy: {managed} runs the TrainJob (MultiKueue: on a worker cluster, with the "
        "status copied back), and the operator creates nothing for it here",
    )
    return str(managed)


def convert_tfjob(tfjob: Mapping[str, Any]) -> Conversion:
    """The TrainJob for a TFJob (a parsed manifest), with its losses and notes; ConvertError if it cannot be
    converted (the field named)."""
    if tfjob.get("kind") != KIND:
        raise ConvertError("kind", f"must be {KIND}, got {tfjob.get('kind')!r}")
    if tfjob.get("apiVersion") != API_VERSION:
        raise ConvertError(
            "apiVersion", f"must be {API_VERSION} (training-operator v1), got {tfjob.get('apiVersion')!r}"
        )
    found = Conversion()
    metadata = _metadata(mapping(tfjob.get("metadata"), "metadata"))
    spec = mapping(tfjob.get("spec"), "spec")
    _unknown(spec, SPEC_FIELDS, "spec", found)
    if spec.get("successPolicy") not in (None, ""):
        found.lose("spec.successPolicy", f"{spec['successPolicy']}: a TrainJob succeeds when worker 0 does")
    if spec.get("enableDynamicWorker"):
        found.lose(
            "spec.enableDynamicWorker", "a TrainJob's group is fixed: MultiWorkerMirroredStrategy cannot grow"
        )
    group = _group(spec, metadata["name"], found)
    template, port, mlflow = tfjob_pod.template(
        group.template, f"{group.path}.template", metadata["name"], found
    )
    policy = mapping(spec.get("runPolicy"), "spec.runPolicy")
    body: dict[str, Any] = {"replicas": group.replicas}
    if port is not None:
        body["port"] = port
    if mlflow:
        body["mlflow"] = mlflow
    body.update(template=template, runPolicy=_run_policy(policy, group, found))
    managed = _managed_by(policy, found)
    if managed is not None:
        body["managedBy"] = managed
    job = {"apiVersion": names.API_VERSION, "kind": names.KIND, "metadata": metadata, "spec": body}
    scheduling = mapping(policy.get("schedulingPolicy"), "spec.runPolicy.schedulingPolicy")
    _scheduling(scheduling, group.replicas, job, found)
    for key in ("labels", "annotations"):
        if not metadata[key]:
            del metadata[key]
    try:
        parse(job, tracking_uri="http://mlflow:5000", image=names.TRAINER_IMAGE)
    except SpecError as error:
        raise ConvertError(error.field, f"in the TrainJob: {error.message}") from None
    found.trainjob = job
    return found
