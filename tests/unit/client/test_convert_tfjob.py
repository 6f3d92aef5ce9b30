"""`mwms convert` and mwms.convert_tfjob: TFJobs (training-operator's own examples, the peer bench's, and one
per thing that does not carry over, under tests/data/tfjob/) as TrainJobs, each loss named, the command's
files, streams and exit codes."""

import copy
import io
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mwms import ConvertError, cli, convert_tfjob
from mwms_contract import names

DATA = Path(__file__).resolve().parents[2] / "data" / "tfjob"
CONVERTED = DATA / "converted"
LOSSES = {doc["metadata"]["name"]: doc for doc in yaml.safe_load_all((DATA / "losses.yaml").read_text())}
RESTART = "spec.tfReplicaSpecs.Worker.restartPolicy"
CONTAINER = "spec.tfReplicaSpecs.Worker.template.spec.containers[0]"
# Each input whose conversion is kept under converted/ (its path there the same), and what it loses.
GOLDEN = {
    "training-operator/dist-mnist.yaml": ["spec.tfReplicaSpecs.PS"],
    "training-operator/multi-worker.yaml": [],
    "training-operator/mnist-with-summaries.yaml": [],
    "training-operator/simple.yaml": [RESTART],
    "peer-bench/peer-bench.yaml": [RESTART] * 3,
    "peer-bench/scale.yaml": [RESTART] * 3,
    "carried.yaml": [],
}
# losses.yaml: each TFJob's name -> the one field it must be refused for.
LOST = {
    "ps": "spec.tfReplicaSpecs.PS",
    "evaluator": "spec.tfReplicaSpecs.Evaluator",
    "chief-template-differs": "spec.tfReplicaSpecs.Chief.template",
    "chief-restart-policy-differs": "spec.tfReplicaSpecs.Chief.restartPolicy",
    "on-failure": RESTART,
    "always": RESTART,
    "success-policy": "spec.successPolicy",
    "dynamic-worker": "spec.enableDynamicWorker",
    "min-available": "spec.runPolicy.schedulingPolicy.minAvailable",
    "min-resources": "spec.runPolicy.schedulingPolicy.minResources",
    "schedule-timeout": "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds",
    "queue-differs": "spec.runPolicy.schedulingPolicy.queue",
    "priority-differs": "spec.runPolicy.schedulingPolicy.priorityClass",
    "reserved-env": f"{CONTAINER}.env[0]",
    "tracking-uri-from-secret": f"{CONTAINER}.env[0]",
    "selector-on-replica-type": "spec.tfReplicaSpecs.Worker.template.spec.topologySpreadConstraints[0]"
    ".labelSelector.matchExpressions[0].key",
}


def docs(relative: str) -> list[dict]:
    return list(yaml.safe_load_all((DATA / relative).read_text()))


def carried(name: str) -> dict:
    return next(doc for doc in docs("carried.yaml") if doc["metadata"]["name"] == name)


def mwms(*argv: str, stdin: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    old = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        code = cli.main(["convert", *argv], out, err)
    finally:
        sys.stdin = old
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("relative", GOLDEN)
def test_each_example_converts_to_its_kept_trainjobs_losing_only_what_it_names(relative, tmp_path):
    """The conversions under converted/ were read through by hand; a change to one must be deliberate."""
    written = tmp_path / "out.yaml"
    code, _, err = mwms(str(DATA / relative), "--allow-loss", "-o", str(written))
    assert code == 0, err
    assert list(yaml.safe_load_all(written.read_text())) == docs(f"converted/{relative}")
    assert [line.split(": ")[2] for line in err.splitlines() if ": lost: " in line] == GOLDEN[relative]


@pytest.mark.parametrize("case", LOST)
def test_each_thing_that_cannot_carry_over_is_named_with_its_field(case):
    conversion = convert_tfjob(LOSSES[case])
    assert [loss.path for loss in conversion.losses] == [LOST[case]]


def test_every_case_of_the_losses_file_is_tested():
    assert set(LOSSES) == set(LOST)


def test_the_chief_is_worker_0_of_one_group_with_the_workers():
    for doc, replicas in ((carried("full"), 4), (carried("master"), 3), (carried("chief-only"), 1)):
        conversion = convert_tfjob(doc)
        assert conversion.trainjob["spec"]["replicas"] == replicas
        assert any("is worker 0" in note.message for note in conversion.notes)
    (dist_mnist,) = docs("training-operator/dist-mnist.yaml")  # Chief 1, PS 1, Worker 2
    assert convert_tfjob(dist_mnist).trainjob["spec"]["replicas"] == 3


def test_run_policy_managed_by_carries_over_as_spec_managed_by():
    """MultiKueue runs a TrainJob as it ran the TFJob; training-operator's own name is the operator's."""
    conversion = convert_tfjob(carried("multikueue"))
    assert conversion.trainjob["spec"]["managedBy"] == names.MULTIKUEUE_CONTROLLER_NAME
    assert conversion.losses == []
    assert any(note.path == "spec.runPolicy.managedBy" for note in conversion.notes)
    own = copy.deepcopy(carried("multikueue"))
    own["spec"]["runPolicy"]["managedBy"] = "kubeflow.org/training-operator"
    assert "managedBy" not in convert_tfjob(own).trainjob["spec"]


def test_the_pod_template_carries_over_with_the_tensorflow_container_as_the_trainer():
    tfjob = carried("full")
    source = tfjob["spec"]["tfReplicaSpecs"]["Worker"]["template"]
    template = convert_tfjob(tfjob).trainjob["spec"]["template"]
    assert template["metadata"] == source["metadata"]
    for key in ("serviceAccountName", "imagePullSecrets", "nodeSelector", "tolerations", "volumes"):
        assert template["spec"][key] == source["spec"][key]
    assert template["spec"]["initContainers"] == source["spec"]["initContainers"]
    trainer, shipper = template["spec"]["containers"]
    tensorflow = source["spec"]["containers"][0]
    assert trainer["name"] == names.CONTAINER_NAME and shipper == source["spec"]["containers"][1]
    for key in ("image", "command", "args", "resources", "volumeMounts", "envFrom"):
        assert trainer[key] == tensorflow[key]


def test_tf_config_goes_and_mlflows_variables_become_spec_mlflow():
    conversion = convert_tfjob(carried("full"))
    spec = conversion.trainjob["spec"]
    assert spec["template"]["spec"]["containers"][0]["env"] == [
        {"name": "TF_CPP_MIN_LOG_LEVEL", "value": "2"}
    ]
    assert spec["mlflow"] == {"trackingUri": "http://mlflow.team-a:5000", "experiment": "resnet"}
    assert any(note.message.startswith("TF_CONFIG dropped") for note in conversion.notes)


def test_the_tfjob_port_becomes_spec_port():
    spec = convert_tfjob(carried("full")).trainjob["spec"]
    assert spec["port"] == 2223 and "ports" not in spec["template"]["spec"]["containers"][0]
    assert "port" not in convert_tfjob(carried("master")).trainjob["spec"]  # 2222, the default of both


def test_run_policy_and_scheduling_policy_carry_over():
    tfjob = carried("full")
    job = convert_tfjob(tfjob).trainjob
    given = tfjob["spec"]["runPolicy"]
    assert job["spec"]["runPolicy"] == {k: v for k, v in given.items() if k != "schedulingPolicy"}
    assert job["metadata"]["labels"][names.LABEL_KUEUE_QUEUE] == "team-a"
    assert job["spec"]["template"]["spec"]["priorityClassName"] == "high"
    assert job["metadata"]["annotations"] == {"owner": "vision@example.com"}  # not kubectl's last-applied


def test_a_kueue_label_on_the_tfjob_is_the_trainjobs_queue():
    tfjob = copy.deepcopy(LOSSES["queue-differs"])
    del tfjob["spec"]["runPolicy"]
    conversion = convert_tfjob(tfjob)
    assert conversion.trainjob["metadata"]["labels"] == {names.LABEL_KUEUE_QUEUE: "team-a"}
    assert conversion.losses == []


def test_clean_pod_policy_keeps_training_operators_default_none():
    assert convert_tfjob(carried("master")).trainjob["spec"]["runPolicy"]["cleanPodPolicy"] == "None"


@pytest.mark.parametrize(
    ("policy", "backoff", "limit"),
    [("Never", None, 0), ("Never", 6, 0), ("ExitCode", 6, 6), ("ExitCode", None, None), ("OnFailure", 6, 6)],
)
def test_the_restart_policy_sets_the_backoff_limit(policy, backoff, limit):
    """Never restarts nothing in a TFJob, so none here; otherwise the TFJob's limit, unset as ours."""
    tfjob = carried("master")
    for replica in tfjob["spec"]["tfReplicaSpecs"].values():
        replica["restartPolicy"] = policy
    if backoff is not None:
        tfjob["spec"]["runPolicy"] = {"backoffLimit": backoff}
    assert convert_tfjob(tfjob).trainjob["spec"]["runPolicy"].get("backoffLimit") == limit


def test_a_selector_on_the_tfjobs_job_name_selects_the_trainjobs_pods():
    job = convert_tfjob(carried("full")).trainjob
    term = job["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    selector = term["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]["labelSelector"]
    assert selector == {"matchLabels": {names.LABEL_JOB_NAME: "full"}}


def test_the_image_runs_as_its_own_user_unless_the_tfjob_said_otherwise():
    container = convert_tfjob(carried("master")).trainjob["spec"]["template"]["spec"]["containers"][0]
    assert container["securityContext"] == {}
    tfjob = carried("master")
    own = {"runAsUser": 1000}
    tfjob["spec"]["tfReplicaSpecs"]["worker"]["template"]["spec"]["containers"][0]["securityContext"] = own
    container = convert_tfjob(tfjob).trainjob["spec"]["template"]["spec"]["containers"][0]
    assert container["securityContext"] == own


def test_a_field_no_tfjob_v1_has_is_named():
    tfjob = carried("master")
    tfjob["spec"]["tfReplicaSpecs"]["worker"]["elasticPolicy"] = {"maxReplicas": 4}
    tfjob["spec"]["runPolicy"] = {"retries": 2}
    paths = [loss.path for loss in convert_tfjob(tfjob).losses]
    assert paths == ["spec.tfReplicaSpecs.worker.elasticPolicy", "spec.runPolicy.retries"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda t: t.update(apiVersion="kubeflow.org/v1beta2"), "apiVersion"),
        (lambda t: t["metadata"].update(name="a" * 53), "metadata.name"),
        (lambda t: t["metadata"].update(name="7up"), "metadata.name"),
        (lambda t: t["spec"]["tfReplicaSpecs"].update(Launcher={}), "spec.tfReplicaSpecs.Launcher"),
        (lambda t: t["spec"]["tfReplicaSpecs"].update(Chief={}), "spec.tfReplicaSpecs"),
        (
            lambda t: t["spec"]["tfReplicaSpecs"]["master"].update(replicas=2),
            "spec.tfReplicaSpecs.master.replicas",
        ),
        (
            lambda t: t["spec"]["tfReplicaSpecs"]["worker"].update(restartPolicy="Sometimes"),
            "spec.tfReplicaSpecs.worker.restartPolicy",
        ),
        (
            lambda t: [r.update(replicas=0) for r in t["spec"]["tfReplicaSpecs"].values()],
            "spec.tfReplicaSpecs",
        ),
        (lambda t: t["spec"]["tfReplicaSpecs"]["worker"].update(replicas=300), "spec.replicas"),
        (
            lambda t: t["spec"].update(runPolicy={"activeDeadlineSeconds": 0}),
            "spec.runPolicy.activeDeadlineSeconds",
        ),
    ],
)
def test_what_cannot_be_converted_is_an_error_naming_the_field(change, field):
    tfjob = carried("master")
    change(tfjob)
    with pytest.raises(ConvertError) as error:
        convert_tfjob(tfjob)
    assert error.value.field == field


@pytest.mark.parametrize(
    ("containers", "field"),
    [
        ([{"name": "main", "image": "x"}], "spec.tfReplicaSpecs.worker.template.spec.containers"),
        ([{"name": "tensorflow"}], "spec.tfReplicaSpecs.worker.template.spec.containers[0].image"),
        (
            [{"name": "tensorflow", "image": "x"}, {"name": "trainer", "image": "y"}],
            "spec.tfReplicaSpecs.worker.template.spec.containers",
        ),
    ],
)
def test_the_tensorflow_container_must_be_there_and_its_new_name_free(containers, field):
    tfjob = carried("master")
    del tfjob["spec"]["tfReplicaSpecs"]["master"]
    tfjob["spec"]["tfReplicaSpecs"]["worker"]["template"] = {"spec": {"containers": containers}}
    with pytest.raises(ConvertError) as error:
        convert_tfjob(tfjob)
    assert error.value.field == field


# -- the command ---------------------------------------------------------------------------------------------


def test_a_loss_writes_nothing_and_exits_1_naming_each_field_on_a_line_of_its_own(tmp_path):
    written = tmp_path / "out.yaml"
    code, out, err = mwms(str(DATA / "losses.yaml"), "-o", str(written))
    assert code == 1 and out == "" and not written.exists()
    lost = [line for line in err.splitlines() if ": lost: " in line]
    assert [line.split(": lost: ")[1].split(": ")[0] for line in lost] == list(LOST.values())
    assert lost[0].startswith("tfjob/ps: lost: spec.tfReplicaSpecs.PS: 1 parameter server")
    assert err.splitlines()[-1].startswith(f"mwms convert: {len(LOST)} fields do not carry over")


def test_allow_loss_writes_every_trainjob_and_still_names_the_losses():
    code, out, err = mwms(str(DATA / "losses.yaml"), "--allow-loss")
    assert code == 0
    assert [job["metadata"]["name"] for job in yaml.safe_load_all(out)] == list(LOST)
    assert err.count(": lost: ") == len(LOST)


def test_a_tfjob_that_carries_over_goes_to_stdout_with_its_notes_on_stderr():
    code, out, err = mwms(str(DATA / "training-operator" / "multi-worker.yaml"))
    assert code == 0 and yaml.safe_load(out)["kind"] == names.KIND
    assert "tfjob/multi-worker: note: spec.tfReplicaSpecs.Worker.restartPolicy: Never" in err


def test_stdin_a_list_and_other_documents_pass_through():
    tfjob, pvc = (
        carried("master"),
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "d"}},
    )
    listed = {"apiVersion": "kubeflow.org/v1", "kind": "TFJobList", "items": [tfjob]}
    code, out, err = mwms("-", stdin=yaml.safe_dump_all([listed, pvc]))
    assert code == 0, err
    converted, passed = yaml.safe_load_all(out)
    assert converted["kind"] == "List" and converted["items"][0]["kind"] == names.KIND and passed == pvc


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("a: [", "mwms convert: while parsing"),
        ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n", "mwms convert: stdin: no TFJob"),
        ("- just\n- a list\n", "mwms convert: stdin: document 1: not an object but list"),
        (
            "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: t}\nspec: {}\n",
            "mwms convert: tfjob/t: spec.tfReplicaSpecs: is required",
        ),
    ],
)
def test_input_that_is_no_tfjob_exits_1_saying_why(text, said):
    code, out, err = mwms("-", stdin=text)
    assert code == 1 and out == "" and err.startswith(said)


def test_a_missing_file_exits_1_naming_it(tmp_path):
    code, _, err = mwms(str(tmp_path / "nope.yaml"))
    assert code == 1 and err == f"mwms convert: {tmp_path / 'nope.yaml'}: No such file or directory\n"


def test_the_command_is_listed_and_reads_a_pipe():
    shown = subprocess.run(
        [sys.executable, "-m", "mwms.cli", "--help"], capture_output=True, text=True, check=True
    )
    assert "convert" in shown.stdout
    piped = subprocess.run(
        [sys.executable, "-m", "mwms.cli", "convert", "-"],
        input=(DATA / "training-operator" / "mnist-with-summaries.yaml").read_text(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert piped.returncode == 0 and yaml.safe_load(piped.stdout)["metadata"]["name"] == "mnist"
