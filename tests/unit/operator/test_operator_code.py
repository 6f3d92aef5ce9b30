"""spec.code: parsed with field-named errors, mounted read-only into the `trainer` container, and the
entrypoint passed in the environment; a job without it keeps the built-in fit."""

import pytest

from mwms_contract import names
from mwms_contract.trainjob import CodeSpec, SpecError
from mwms_kit.trainjobs import trainjob
from mwms_operator.render.pod import build_worker_pod
from mwms_operator.render.spec import parse_trainjob

CODE = {"configMap": "train-code", "entrypoint": "train.py", "args": ["--epochs", "3"]}
VOLUME_CODE = {"volume": {"persistentVolumeClaim": {"claimName": "big-code"}}, "entrypoint": "pkg.train:main"}


def pod_of(spec, index=0):
    return build_worker_pod(
        spec,
        job_name="mnist",
        namespace="team-a",
        uid="u",
        index=index,
        hosts=["a:1", "b:1"],
        restart_count=0,
    )


def trainer_container(pod):
    return next(c for c in pod["spec"]["containers"] if c["name"] == names.CONTAINER_NAME)


def test_code_is_parsed(make_trainjob, config):
    body = make_trainjob(
        code={**CODE, "items": [{"key": "pkg__m.py", "path": "pkg/m.py"}], "requirements": "req.txt"}
    )
    assert parse_trainjob(body, config.spec_defaults()).code == CodeSpec(
        config_map="train-code",
        entrypoint="train.py",
        args=("--epochs", "3"),
        items=(("pkg__m.py", "pkg/m.py"),),
        requirements="req.txt",
    )


def test_without_code_the_builtin_fit_runs(make_trainjob, config):
    pod = pod_of(parse_trainjob(make_trainjob(), config.spec_defaults()))
    env = {e["name"] for e in trainer_container(pod)["env"]}
    assert names.ENV_CODE_ENTRYPOINT not in env
    # Only the rendezvous state's own volume (every worker has it): no code volume.
    assert [v["name"] for v in pod["spec"]["volumes"]] == ["mwms-rendezvous"]


def test_the_configmap_is_mounted_read_only_and_the_entrypoint_passed(make_trainjob, config):
    pod = pod_of(
        parse_trainjob(make_trainjob(code={**CODE, "requirements": "req.txt"}), config.spec_defaults())
    )
    container = trainer_container(pod)
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env[names.ENV_CODE_DIR] == "/mwms/code"
    assert env[names.ENV_CODE_ENTRYPOINT] == "train.py"
    assert env[names.ENV_CODE_ARGS] == '["--epochs","3"]'
    assert env[names.ENV_CODE_REQUIREMENTS] == "req.txt"
    assert names.ENV_CODE_SOURCE not in env  # configMap is the default
    assert {"name": "mwms-code", "mountPath": "/mwms/code", "readOnly": True} in container["volumeMounts"]
    assert {"name": "mwms-code", "configMap": {"name": "train-code", "optional": True}} in pod["spec"][
        "volumes"
    ]


def test_a_code_volume_is_mounted_read_only_where_the_configmap_would_be(make_trainjob, config):
    spec = parse_trainjob(make_trainjob(code=VOLUME_CODE), config.spec_defaults())
    assert spec.code == CodeSpec(entrypoint="pkg.train:main", volume=VOLUME_CODE["volume"])
    pod = pod_of(spec)
    container = trainer_container(pod)
    assert {"name": "mwms-code", "mountPath": "/mwms/code", "readOnly": True} in container["volumeMounts"]
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == "mwms-code"]
    assert volume == {"name": "mwms-code", "persistentVolumeClaim": {"claimName": "big-code"}}
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env[names.ENV_CODE_DIR] == "/mwms/code"
    assert env[names.ENV_CODE_ENTRYPOINT] == "pkg.train:main"
    assert env[names.ENV_CODE_SOURCE] == "volume"  # so an empty volume is named, not the ConfigMap


def test_items_go_to_the_volume(make_trainjob, config):
    code = {**CODE, "items": [{"key": "pkg__m.py", "path": "pkg/m.py"}]}
    pod = pod_of(parse_trainjob(make_trainjob(code=code), config.spec_defaults()))
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == "mwms-code"]
    assert volume["configMap"]["items"] == [{"key": "pkg__m.py", "path": "pkg/m.py"}]


def test_code_and_checkpoint_both_mount(make_trainjob, config):
    body = make_trainjob(code=CODE, checkpoint={"hostPath": {"path": "/tmp/ck"}})
    mounts = trainer_container(pod_of(parse_trainjob(body, config.spec_defaults())))["volumeMounts"]
    assert [m["mountPath"] for m in mounts] == ["/mwms/checkpoint", "/mwms/code", "/mwms/rendezvous"]


@pytest.mark.parametrize(
    ("code", "field"),
    [
        ({"entrypoint": "train.py"}, "spec.code"),  # neither configMap nor volume
        ({**VOLUME_CODE, "configMap": "c"}, "spec.code"),  # both
        ({**VOLUME_CODE, "items": [{"key": "k", "path": "k.py"}]}, "spec.code.items"),
        ({**VOLUME_CODE, "volume": {"emptyDir": {}}}, "spec.code.volume.emptyDir"),
        ({**VOLUME_CODE, "volume": {}}, "spec.code.volume"),
        ({**VOLUME_CODE, "volume": "pvc"}, "spec.code.volume"),
        ({"configMap": "Bad_Name", "entrypoint": "train.py"}, "spec.code.configMap"),
        ({"configMap": "c"}, "spec.code.entrypoint"),
        ({"configMap": "c", "entrypoint": "train"}, "spec.code.entrypoint"),
        ({"configMap": "c", "entrypoint": "/abs/train.py"}, "spec.code.entrypoint"),
        ({"configMap": "c", "entrypoint": "../train.py"}, "spec.code.entrypoint"),
        ({"configMap": "c", "entrypoint": "train.py", "args": [1]}, "spec.code.args"),
        (
            {"configMap": "c", "entrypoint": "m:f", "items": [{"key": "k", "path": "../x"}]},
            "spec.code.items[0].path",
        ),
        ({"configMap": "c", "entrypoint": "m:f", "requirements": "/etc/r.txt"}, "spec.code.requirements"),
        ("train.py", "spec.code"),
    ],
)
def test_bad_code_names_the_field(make_trainjob, config, code, field):
    with pytest.raises(SpecError) as error:
        parse_trainjob(make_trainjob(code=code), config.spec_defaults())
    assert error.value.field == field


def test_module_function_entrypoints_are_accepted(make_trainjob, config):
    assert parse_trainjob(
        make_trainjob(code={"configMap": "c", "entrypoint": "pkg.mod:train"}), config.spec_defaults()
    ).code


def test_code_and_trainer_are_exclusive(make_trainjob, config):
    with pytest.raises(SpecError) as error:
        parse_trainjob(make_trainjob(code=CODE, trainer={"epochs": 3}), config.spec_defaults())
    assert error.value.field == "spec.code"


def test_user_env_may_not_set_the_code_variables(make_trainjob, config):
    template = {
        "spec": {"containers": [{"name": "trainer", "env": [{"name": "MWMS_CODE_ENTRYPOINT", "value": "x"}]}]}
    }
    with pytest.raises(SpecError, match="MWMS_CODE_ENTRYPOINT is set by the operator"):
        parse_trainjob(make_trainjob(code=CODE, template=template), config.spec_defaults())


def test_a_worker_that_finds_no_code_fails_the_job_as_invalid_spec():
    # The trainer's exit 2 for spec.code (no ConfigMap, no entrypoint in it) is a spec error; other exit-2
    # messages (the built-in fit's settings) stay WorkerFailed.
    from datetime import UTC, datetime

    from mwms_operator.decide.job_status import JobMeta
    from mwms_operator.decide.policy import decide
    from mwms_operator.observe.pod_states import WorkerPod
    from mwms_operator.settings import OperatorConfig

    spec = parse_trainjob(trainjob("j", 1, code=CODE), OperatorConfig().spec_defaults())
    now = datetime(2026, 1, 1, tzinfo=UTC)
    first = decide(JobMeta("j", "ns", "u"), spec, [], service_exists=False, now=now)

    def reason(message):
        pods = [WorkerPod("j-worker-0", 0, 0, "Failed", exit_code=2, message=message)]
        done = decide(
            JobMeta("j", "ns", "u"), spec, pods, service_exists=True, now=now, previous=first.status
        )
        (failed,) = [c for c in done.status["conditions"] if c["type"] == "Failed"]
        return failed["reason"], failed["message"]

    missing = "invalid configuration: spec.code.configMap: the code directory /mwms/code is empty"
    assert reason(missing) == ("InvalidSpec", f"worker j-worker-0 exited with code 2: {missing}")
    assert reason("invalid configuration: epochs: must be >= 1")[0] == "WorkerFailed"
