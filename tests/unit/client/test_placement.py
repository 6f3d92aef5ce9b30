"""Resources and placement: each `mwms submit` flag, Client.submit keyword and MirroredStrategyRunner argument
lands where the TrainJob CRD takes it (table tests over the built TrainJob, `--dry-run -o yaml`)."""

import io

import pytest
import yaml

from mwms import cli, placement
from mwms.kube import SubmitError
from mwms.runner import MirroredStrategyRunner
from mwms.sdk import placement_of
from mwms_contract import names
from mwms_kit.fake_job_client import FakeJobClient, client_on

GPU_IMAGE = placement.gpu_image()


def dry_run(tmp_path, *flags):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["submit", str(script), "--name", "j", "--dry-run", "-o", "yaml", *flags], out, err)
    assert code == 0, err.getvalue()
    return yaml.safe_load(out.getvalue())


def trainer(job):
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["name"] == names.CONTAINER_NAME
    return container


CASES = [
    (["--cpu", "4"], lambda j: trainer(j)["resources"] == {"requests": {"cpu": "4"}, "limits": {"cpu": "4"}}),
    (["--memory", "16Gi"], lambda j: trainer(j)["resources"]["limits"] == {"memory": "16Gi"}),
    (["--gpu", "2"], lambda j: trainer(j)["resources"]["limits"] == {"nvidia.com/gpu": "2"}),
    (["--gpu", "1"], lambda j: j["spec"]["image"] == GPU_IMAGE and GPU_IMAGE.endswith("-gpu")),
    (["--gpu", "1", "--image", "mine:1"], lambda j: j["spec"]["image"] == "mine:1"),
    (["--gpu", "1", "--gpu-resource", "amd.com/gpu"],
     lambda j: trainer(j)["resources"]["limits"] == {"amd.com/gpu": "1"} and "image" not in j["spec"]),
    (["--env", "A=1", "--env", "B=x=y"],
     lambda j: trainer(j)["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "x=y"}]),
    (["--label", "team=a"], lambda j: j["metadata"]["labels"] == {"team": "a"}
     and j["spec"]["template"]["metadata"]["labels"] == {"team": "a"}),
    (["--queue", "gpus"], lambda j: j["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "gpus"}
     and "template" not in j["spec"]),
    (["--node-selector", "pool=gpu"],
     lambda j: j["spec"]["template"]["spec"] == {"nodeSelector": {"pool": "gpu"}}),
    (["--toleration", "gpu=yes:NoSchedule", "--toleration", "spot:NoExecute", "--toleration", "any"],
     lambda j: j["spec"]["template"]["spec"]["tolerations"] == [
         {"key": "gpu", "operator": "Equal", "value": "yes", "effect": "NoSchedule"},
         {"key": "spot", "operator": "Exists", "effect": "NoExecute"},
         {"key": "any", "operator": "Exists"}]),
    (["--deadline", "2h"], lambda j: j["spec"]["runPolicy"] == {"activeDeadlineSeconds": 7200}),
    (["--deadline", "1h30m"], lambda j: j["spec"]["runPolicy"] == {"activeDeadlineSeconds": 5400}),
    (["--backoff-limit", "0"], lambda j: j["spec"]["runPolicy"] == {"backoffLimit": 0}),
    ([], lambda j: set(j["spec"]) == {"replicas", "code"} and "labels" not in j["metadata"]),
]  # fmt: skip


@pytest.mark.parametrize(("flags", "holds"), CASES, ids=[" ".join(f) or "none" for f, _ in CASES])
def test_each_flag_lands_where_the_crd_takes_it(tmp_path, flags, holds):
    assert holds(dry_run(tmp_path, *flags))


def test_a_template_file_is_the_base_the_flags_merge_over(tmp_path):
    template = tmp_path / "pod.yaml"
    template.write_text(
        yaml.safe_dump(
            {
                "metadata": {"annotations": {"a": "b"}},
                "spec": {
                    "serviceAccountName": "trainer",
                    "nodeSelector": {"zone": "z1"},
                    "containers": [
                        {"name": "trainer", "env": [{"name": "A", "value": "old"}], "volumeMounts": []},
                        {"name": "sidecar", "image": "s"},
                    ],
                },
            }
        )
    )
    job = dry_run(
        tmp_path, "--template", str(template), "--env", "A=new", "--node-selector", "pool=p", "--cpu", "1"
    )
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "trainer" and job["spec"]["template"]["metadata"]["annotations"]
    assert pod["nodeSelector"] == {"zone": "z1", "pool": "p"}
    assert pod["containers"][0]["env"] == [{"name": "A", "value": "new"}]
    assert pod["containers"][0]["resources"]["requests"] == {"cpu": "1"}
    assert pod["containers"][1] == {"name": "sidecar", "image": "s"}


@pytest.mark.parametrize("reserved", ["TF_CONFIG", "MWMS_JOB_NAME", "MLFLOW_TRACKING_URI"])
def test_reserved_env_is_refused_naming_it(tmp_path, reserved):
    script = tmp_path / "t.py"
    script.write_text("")
    err = io.StringIO()
    assert (
        cli.main(
            ["submit", str(script), "--dry-run", "-o", "yaml", "--env", f"{reserved}=1"], io.StringIO(), err
        )
        == 2
    )
    assert f"env {reserved}: set by the operator" in err.getvalue()
    pod = tmp_path / "pod.yaml"
    pod.write_text(
        yaml.safe_dump({"spec": {"containers": [{"name": "trainer", "env": [{"name": reserved}]}]}})
    )
    with pytest.raises(SubmitError, match=reserved):
        placement_of(template=pod)


@pytest.mark.parametrize(
    "flags",
    [["--env", "NOEQUALS"], ["--toleration", "k=v:Sometimes"], ["--deadline", "soon"], ["--deadline", "0"],
     ["--gpu", "-1"], ["--backoff-limit", "x"], ["--label", "=v"], ["-o", "wide", "--dry-run"]],
)  # fmt: skip
def test_a_bad_flag_is_a_usage_error(tmp_path, flags, capsys):
    script = tmp_path / "t.py"
    script.write_text("")
    with pytest.raises(SystemExit) as exited:
        cli.main(["submit", str(script), *flags], io.StringIO(), io.StringIO())
    assert exited.value.code == 2


def test_the_sdk_takes_the_same_keywords_and_kubectls_syntax():
    asked = placement_of(
        cpu="2",
        gpu=1,
        env={"A": "1"},
        tolerations=["gpu:NoSchedule"],
        deadline="90m",
        queue="q",
        labels={"a": "b"},
    )
    job = asked.apply({"metadata": {"name": "j"}, "spec": {"replicas": 1}})
    assert job["spec"]["runPolicy"] == {"activeDeadlineSeconds": 5400}
    assert job["spec"]["template"]["spec"]["tolerations"] == [
        {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert job["metadata"]["labels"] == {"a": "b", "kueue.x-k8s.io/queue-name": "q"}
    with pytest.raises(TypeError, match="'cpus'"):
        placement_of(cpus="2")


def test_the_runner_asks_one_gpu_per_slot_by_default_as_spark_tensorflow_distributor():
    assert MirroredStrategyRunner(num_slots=2).placement == {"gpu": 1}
    assert MirroredStrategyRunner(use_gpu=False).placement == {}
    amd = MirroredStrategyRunner(gpu_resource_name="amd.com/gpu", memory="8Gi").placement
    assert amd == {"gpu": 1, "gpu_resource": "amd.com/gpu", "memory": "8Gi"}
    asked = placement_of(**MirroredStrategyRunner().placement)
    assert asked.image(None) == GPU_IMAGE and asked.image("mine:1") == "mine:1"
    with pytest.raises(SubmitError, match="TF_CONFIG"):
        MirroredStrategyRunner(env={"TF_CONFIG": "{}"})


def pending_then_deleted() -> FakeJobClient:
    """A job the scheduler cannot place, then deleted by its user (Failed, to end the follow)."""
    message = "waiting for 1 of 1 workers to run (j-worker-0: Unschedulable: 0/1 nodes are available: 1 "
    message += "Insufficient nvidia.com/gpu)"
    pending = {"phase": "Pending", "conditions": [{"type": "Running", "status": "False", "message": message}]}
    states = iter([pending, pending, {"phase": "Failed", "conditions": []}])
    return FakeJobClient(
        job=lambda: {"metadata": {"name": "j"}, "spec": {"replicas": 1}, "status": next(states)}
    )


def test_following_a_job_no_node_can_place_says_why_once():
    from mwms.follow import Follower

    out = io.StringIO()
    Follower(pending_then_deleted(), "j", out, tty=False, poll=0).follow()
    lines = out.getvalue().splitlines()
    assert lines[0] == "j: Pending" and "Insufficient nvidia.com/gpu" in lines[1]
    assert sum("Insufficient" in line for line in lines) == 1 and lines[-1] == "j: Failed"


def test_client_submit_dry_run_builds_the_trainjob_and_creates_nothing(tmp_path):
    from mwms.kube import Cluster

    api = FakeJobClient()
    client = client_on(api)
    client.cluster = Cluster()
    script = tmp_path / "train.py"
    script.write_text("")
    job = client.submit(script, name="j", replicas=2, gpu=1, queue="q", dry_run=True)
    assert (job.name, job.namespace, job.replicas) == ("j", "team-a", 2)
    assert job.raw["spec"]["image"] == GPU_IMAGE
    assert job.raw["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "q"}
    assert api.calls == [], "a dry run asks the API server nothing"
