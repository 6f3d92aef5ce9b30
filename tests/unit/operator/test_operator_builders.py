"""Builders against golden YAML in tests/data/operator/ (MWMS_UPDATE_GOLDEN=1 rewrites; review the diff)."""

import json
import os
from pathlib import Path

import pytest
import yaml

from mwms_contract import names
from mwms_contract.tf_config import worker_hosts
from mwms_contract.trainjob import SpecError, trainer_env
from mwms_operator.render.pod import READINESS_PROBE, build_worker_pod
from mwms_operator.render.service import build_service
from mwms_operator.render.spec import parse_trainjob

GOLDEN = Path(__file__).resolve().parents[2] / "data" / "operator"
UID = "0b7e9a57-1c4b-4f7e-9d43-6c1f2b9c0e11"

FULL = dict(
    image="me/trainer:2",
    trainer={"dataset": "breast_cancer", "epochs": 20, "globalBatchSize": 96, "seed": 42},
    mlflow={"experiment": "cancer", "registeredModelName": "cancer-model"},
    checkpoint={"persistentVolumeClaim": {"claimName": "mnist-ckpt"}},
    template={
        "metadata": {"labels": {"team": "a", "mwms.dev/job-name": "spoofed"}, "annotations": {"note": "x"}},
        "spec": {
            "serviceAccountName": "trainer",
            "restartPolicy": "Always",
            "nodeSelector": {"pool": "cpu"},
            "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
            "imagePullSecrets": [{"name": "regcred"}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
            "containers": [
                {"name": "sidecar", "image": "busybox", "command": ["sleep", "infinity"]},
                {
                    "name": "trainer",
                    "resources": {"limits": {"cpu": "1", "memory": "2Gi"}},
                    "env": [{"name": "EXTRA", "value": "$(MWMS_JOB_NAME)-x"}],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                },
            ],
        },
    },
)


def check_golden(name: str, obj: dict) -> None:
    path = GOLDEN / name
    if os.environ.get("MWMS_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(obj, sort_keys=True))
    assert obj == yaml.safe_load(path.read_text()), f"{name} differs from the golden file"


def build(make_trainjob, config, index, restart_count=0, **spec):
    body = make_trainjob(**spec)
    parsed = parse_trainjob(body, config.spec_defaults())
    hosts = worker_hosts("mnist", "team-a", parsed.replicas, parsed.port, config.cluster_domain)
    return parsed, build_worker_pod(
        parsed,
        job_name="mnist",
        namespace="team-a",
        uid=UID,
        index=index,
        hosts=hosts,
        restart_count=restart_count,
    )


def test_minimal_chief_pod(make_trainjob, config):
    _, pod = build(make_trainjob, config, 0)
    check_golden("pod-minimal-worker-0.yaml", pod)


def test_full_template_worker_pod(make_trainjob, config):
    _, pod = build(make_trainjob, config, 2, restart_count=1, **FULL)
    check_golden("pod-full-worker-2.yaml", pod)


def test_service(make_trainjob, config):
    parsed = parse_trainjob(make_trainjob(port=3333), config.spec_defaults())
    check_golden("service.yaml", build_service(parsed, job_name="mnist", namespace="team-a", uid=UID))


def env_of(pod):
    (container,) = [c for c in pod["spec"]["containers"] if c["name"] == "trainer"]
    return {e["name"]: e.get("value") for e in container["env"]}


@pytest.mark.parametrize("index", [0, 1, 2])
def test_each_pod_gets_its_own_task_index_and_the_same_cluster(make_trainjob, config, index):
    _, pod = build(make_trainjob, config, index)
    tf = json.loads(env_of(pod)["TF_CONFIG"])
    assert tf["task"] == {"type": "worker", "index": index}
    assert tf["cluster"]["worker"] == [f"mnist-worker-{i}.mnist.team-a.svc:2222" for i in range(3)]
    assert pod["metadata"]["labels"][names.LABEL_ROLE] == ("chief" if index == 0 else "worker")
    assert pod["spec"]["hostname"] == f"mnist-worker-{index}" and pod["spec"]["subdomain"] == "mnist"


def test_operator_settings_win_over_the_template(make_trainjob, config):
    _, pod = build(make_trainjob, config, 1, **FULL)
    assert pod["metadata"]["labels"]["mwms.dev/job-name"] == "mnist"
    assert pod["spec"]["restartPolicy"] == "Never"


def test_tf_config_goes_into_the_trainer_container_only(make_trainjob, config):
    _, pod = build(make_trainjob, config, 0, **FULL)
    sidecar = pod["spec"]["containers"][0]
    assert sidecar["name"] == "sidecar" and "env" not in sidecar


def test_trainer_env_lists_every_reserved_variable_that_applies(make_trainjob, config):
    parsed = parse_trainjob(make_trainjob(**FULL), config.spec_defaults())
    hosts = worker_hosts("mnist", "team-a", 3, 2222, "")
    env = trainer_env(
        parsed, job_name="mnist", namespace="team-a", uid=UID, index=1, hosts=hosts, restart_count=2
    )
    code_env = {n for n in names.RESERVED_ENV if n.startswith("MWMS_CODE_")}  # spec.code's: not in FULL
    # A checkpoint store's (FULL's checkpoint is a volume): see the test below.
    store_env = {names.ENV_CHECKPOINT_STORE, names.ENV_CHECKPOINT_EVERY_STEPS}
    # MWMS_PEER_WAIT_SECONDS is only in pods (the golden pods have it): a hand-started group keeps a limit.
    assert set(env) == names.RESERVED_ENV - code_env - store_env - {names.ENV_PEER_WAIT}
    assert env["MWMS_RESTART_COUNT"] == "2"
    assert json.loads(env["MWMS_TRAINER_CONFIG"]) == FULL["trainer"]
    assert env["MWMS_CHECKPOINT_DIR"] == "/mwms/checkpoint"
    minimal = trainer_env(
        parse_trainjob(make_trainjob(), config.spec_defaults()),
        job_name="mnist",
        namespace="team-a",
        uid=UID,
        index=0,
        hosts=hosts,
        restart_count=0,
    )
    optional = (
        {"MWMS_CHECKPOINT_DIR", "MWMS_REGISTERED_MODEL_NAME", names.ENV_PEER_WAIT} | code_env | store_env
    )
    assert set(names.RESERVED_ENV) - set(minimal) == optional
    assert json.loads(minimal["MWMS_TRAINER_CONFIG"]) == {}


@pytest.mark.parametrize("store", ["run", "s3://bucket/checkpoints"])
def test_a_checkpoint_store_gives_each_pod_an_empty_dir_the_store_and_the_grace_period(
    make_trainjob, config, store
):
    checkpoint = {"store": store, "everySteps": 50, "terminationGracePeriodSeconds": 90}
    _, pod = build(make_trainjob, config, 1, checkpoint=checkpoint)
    env = env_of(pod)
    assert env[names.ENV_CHECKPOINT_STORE] == store
    assert env[names.ENV_CHECKPOINT_EVERY_STEPS] == "50"
    assert env[names.ENV_CHECKPOINT_DIR] == names.CHECKPOINT_MOUNT_PATH
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == "mwms-checkpoint"]
    assert volume == {"name": "mwms-checkpoint", "emptyDir": {}}  # the chief's copy, not shared
    assert pod["spec"]["terminationGracePeriodSeconds"] == 90


def test_a_checkpoint_volume_keeps_its_pods_as_before_and_sets_the_grace_period_only_when_given(
    make_trainjob, config
):
    _, pod = build(make_trainjob, config, 0, checkpoint={"hostPath": {"path": "/ckpt"}})
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == "mwms-checkpoint"]
    assert volume == {"name": "mwms-checkpoint", "hostPath": {"path": "/ckpt"}}
    assert "terminationGracePeriodSeconds" not in pod["spec"]
    assert names.ENV_CHECKPOINT_STORE not in env_of(pod)
    template = {"spec": {"terminationGracePeriodSeconds": 45}}
    _, pod = build(make_trainjob, config, 0, checkpoint={"hostPath": {"path": "/ckpt"}}, template=template)
    assert pod["spec"]["terminationGracePeriodSeconds"] == 45  # the template's, as before


def test_the_trainer_container_passes_restricted_pod_security_unless_the_template_says_otherwise(
    make_trainjob, config
):
    _, pod = build(make_trainjob, config, 0)
    assert pod["spec"]["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    own = {"spec": {"containers": [{"name": "trainer", "securityContext": {"runAsUser": 1000}}]}}
    _, pod = build(make_trainjob, config, 0, template=own)
    assert pod["spec"]["containers"][0]["securityContext"] == {"runAsUser": 1000}


def test_builders_do_not_change_the_spec(make_trainjob, config):
    parsed, _ = build(make_trainjob, config, 0, **FULL)
    assert parsed.template == FULL["template"]


def test_a_queue_label_makes_the_workers_one_kueue_pod_group_per_restart(make_trainjob, config):
    body = make_trainjob(replicas=4, labels={"kueue.x-k8s.io/queue-name": "team-queue"})
    parsed = parse_trainjob(body, config.spec_defaults())
    hosts = worker_hosts("mnist", "team-a", 4, parsed.port, "")
    pods = [
        build_worker_pod(parsed, job_name="mnist", namespace="team-a", uid=UID, index=i, hosts=hosts,
                         restart_count=2)
        for i in range(4)
    ]  # fmt: skip
    for pod in pods:
        labels, annotations = pod["metadata"]["labels"], pod["metadata"]["annotations"]
        assert labels["kueue.x-k8s.io/queue-name"] == "team-queue"
        assert (
            labels["kueue.x-k8s.io/pod-group-name"] == "mnist-2"
        )  # a new group for each whole-group restart
        assert annotations["kueue.x-k8s.io/pod-group-total-count"] == "4"
        assert annotations["kueue.x-k8s.io/retriable-in-group"] == "false"
    # Without the label, nothing of Kueue's.
    _, plain = build(make_trainjob, config, 0)
    assert not [
        k for k in {**plain["metadata"]["labels"], **plain["metadata"].get("annotations", {})} if "kueue" in k
    ]


def test_a_job_admitted_through_a_workload_of_its_own_makes_no_pod_group(make_trainjob, config):
    """MultiKueue's copy of a job on a worker cluster keeps the queue label and names the Workload that
    admitted it: its workers are that Workload's, not a pod group Kueue would queue a second time."""
    labels = {"kueue.x-k8s.io/queue-name": "team-queue", "kueue.x-k8s.io/prebuilt-workload-name": "w-1"}
    parsed, pod = build(make_trainjob, config, 0, labels=labels)
    assert parsed.queue_name is None
    assert not [
        k for k in {**pod["metadata"]["labels"], **pod["metadata"].get("annotations", {})} if "kueue" in k
    ]


def test_a_queue_label_that_is_not_a_string_names_the_field(make_trainjob, config):
    body = make_trainjob(labels={"kueue.x-k8s.io/queue-name": ""})
    with pytest.raises(SpecError, match="metadata.labels.kueue.x-k8s.io/queue-name"):
        parse_trainjob(body, config.spec_defaults())


OWN_PROBE = {"httpGet": {"path": "/ready", "port": 8080}}


@pytest.mark.parametrize(
    ("container", "probe"),
    [
        ({}, READINESS_PROBE),  # the trainer image's ENTRYPOINT: python -m mwms_trainer
        ({"command": ["python", "-m", "mwms_trainer"]}, READINESS_PROBE),
        ({"command": ["/usr/local/bin/python3", "-m", "mwms_trainer"], "args": ["--x"]}, READINESS_PROBE),
        ({"image": "me/trainer:2"}, READINESS_PROBE),  # spec.image's own: an image built FROM the trainer's
        ({"command": ["python", "-c", "print(1)"]}, None),  # our image, another program
        ({"command": ["sleep", "60"]}, None),
        ({"image": "busybox"}, None),  # another image's own command
        ({"command": ["sleep", "60"], "readinessProbe": OWN_PROBE}, OWN_PROBE),
        ({"readinessProbe": OWN_PROBE}, OWN_PROBE),
    ],
    ids=[
        "default",
        "module",
        "module-path",
        "job-image",
        "python-c",
        "other",
        "other-image",
        "own",
        "own-default",
    ],
)
def test_the_rendezvous_probe_goes_only_on_a_container_that_runs_the_trainer(
    make_trainjob, config, container, probe
):
    """A template whose `trainer` runs something else would never become Ready with it (StartupTimeout):
    it keeps its own probe, or none (Ready once it runs)."""
    template = {"spec": {"containers": [{"name": "trainer", **container}]}}
    _, pod = build(make_trainjob, config, 0, image="me/trainer:2", template=template)
    (trainer,) = pod["spec"]["containers"]
    assert trainer.get("readinessProbe") == probe
