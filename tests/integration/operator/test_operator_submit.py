"""Bring your own code: `mwms submit` and `MirroredStrategyRunner(cluster=...)` on the real control plane,
with the operator as its ServiceAccount, real TensorFlow workers on the real node and a real MLflow
server. One multi-worker job at a time (2 workers), the others with 1."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from mwms_kit.submit import (
    CHIEFS_METRICS,
    FAILING_LINE,
    FAILING_SCRIPT,
    SEED_SCRIPT,
    jobs_in,
    printed_result,
    run_mwms,
    run_seed_function,
    user_module,
)
from mwms_kit.trainjobs import trainjob
from mwms_kit.waits import condition, wait_condition


@pytest.fixture(scope="module")
def operator_env(mlflow_uri: str) -> dict[str, str]:
    return {"MWMS_TRACKING_URI": mlflow_uri}


@pytest.fixture
def mwms(cluster: Any, namespace: str) -> Callable[..., Any]:
    """`mwms(*args)`: the installed CLI against the cluster, in the test's namespace."""
    return lambda *args, timeout=600: run_mwms(cluster.kubeconfig, namespace, *args, timeout=timeout)


def mlflow_runs(mlflow_uri: str, experiment: str) -> tuple[list[Any], list[Any]]:
    import mlflow

    client = mlflow.MlflowClient(mlflow_uri)
    found = client.get_experiment_by_name(experiment)
    assert found is not None, f"no experiment {experiment}"
    runs = client.search_runs([found.experiment_id])
    mlflow.set_tracking_uri(mlflow_uri)
    models = mlflow.search_logged_models(experiment_ids=[found.experiment_id], output_format="list")
    return runs, models


def test_submitted_seed_script_gives_one_run_one_model_and_the_chiefs_value(
    operator, mlflow_uri, mwms, kubectl, namespace, wait_for
):
    done = mwms(
        "submit", str(SEED_SCRIPT), "--replicas", "2", "--experiment", "submitted-seed",
        "--follow", "--", "--epochs", "3",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    out = done.stdout
    (job,) = jobs_in(kubectl, namespace)
    name = job["metadata"]["name"]
    assert job["spec"]["code"]["entrypoint"] == "seed_train.py"
    run_id = job["status"]["mlflow"]["runId"]
    assert f"MLflow run ID: {run_id}" in out
    assert f"Model URI: {job['status']['mlflow']['modelUri']}" in out
    # Progress (plain lines: not a terminal), the phases, and the chief's own log lines.
    assert f"{name}: Running" in out and f"{name}: Succeeded" in out
    assert "[worker-0]" in out and "worker 0 epoch 3" in out
    assert set(printed_result(out)) >= CHIEFS_METRICS  # the chief's return value

    runs, models = mlflow_runs(mlflow_uri, "submitted-seed")
    assert [r.info.run_id for r in runs] == [run_id]
    assert runs[0].data.tags["mwms.dev/job-uid"] == job["metadata"]["uid"]
    assert [m.name for m in models] == ["mymodel"]

    # The ConfigMap is the job's: deleting the job deletes it.
    configmap = kubectl.json("get", "configmap", f"{name}-code", "-n", namespace)
    assert configmap["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    kubectl("delete", "trainjob", name, "-n", namespace)
    wait_for(
        lambda: kubectl("get", "configmap", f"{name}-code", "-n", namespace, check=False).returncode != 0,
        timeout=120,
        what="the code ConfigMap to be garbage-collected with its job",
    )


@pytest.mark.parametrize(
    ("configmap_verbs", "left_behind"),
    [("create,get,delete", False), ("create,get", True)],
    ids=["taken-back", "named-to-delete"],
)
def test_a_refused_owner_reference_takes_back_the_job_and_its_code(
    crd, kubectl, namespace, account_kubeconfig, tmp_path, wait_for, configmap_verbs, left_behind
):
    """A user who may create ConfigMaps and TrainJobs but not patch ConfigMaps: the job is created, making it
    the ConfigMap's owner is refused. Nothing may stay behind (a job without its code's owner, code readable
    in the namespace and owned by nothing), or the message names what to delete."""
    kubectl("create", "serviceaccount", "submitter", "-n", namespace)
    kubectl("create", "role", "code", f"--verb={configmap_verbs}", "--resource=configmaps", "-n", namespace)
    kubectl(
        "create", "role", "jobs", "--verb=create,get,delete", "--resource=trainjobs.mwms.dev", "-n", namespace
    )
    for role in ("code", "jobs"):
        account = f"--serviceaccount={namespace}:submitter"
        kubectl("create", "rolebinding", role, f"--role={role}", account, "-n", namespace)
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")

    done = run_mwms(
        account_kubeconfig("submitter", namespace), namespace, "submit", str(script), "--name", "cut"
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "refused making TrainJob cut the owner of ConfigMap cut-code" in done.stderr, done.stderr
    wait_for(lambda: jobs_in(kubectl, namespace) == [], timeout=60, what="the refused TrainJob to be gone")
    configmaps = [c["metadata"]["name"] for c in kubectl.json("get", "configmaps", "-n", namespace)["items"]]
    assert ("cut-code" in configmaps) == left_behind
    assert (f"kubectl delete configmap cut-code -n {namespace}" in done.stderr) == left_behind


def test_a_failing_script_fails_at_once_with_its_traceback_line(operator, mwms, kubectl, namespace):
    done = mwms("submit", str(FAILING_SCRIPT), "--replicas", "1", "--follow")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    (job,) = jobs_in(kubectl, namespace)
    failed = condition(job, "Failed")
    assert failed.reason == "WorkerFailed"
    assert "exited with code 1" in failed.message
    assert FAILING_LINE in failed.message
    assert job["status"]["restarts"] == 0  # a user error is not retried
    assert f"Failed: {failed.message}" in done.stdout


def test_a_syntax_error_names_file_and_line(operator, cluster, kubectl, namespace, tmp_path):
    """From Python this time: Client().submit(script) and .wait() give the Failed job and its message."""
    from mwms import Client

    script = tmp_path / "broken.py"
    script.write_text("import os\ndef train(:\n    pass\n")
    client = Client(namespace=namespace, kubeconfig=cluster.kubeconfig)
    submitted = client.submit(script, name="broken")
    assert (submitted.name, submitted.namespace, submitted.phase) == ("broken", namespace, "Pending")
    done = client.wait("broken", timeout=300)
    assert done.phase == "Failed" and not done.succeeded
    assert "SyntaxError" in done.message and "(broken.py, line 2)" in done.message
    (job,) = jobs_in(kubectl, namespace)
    assert condition(job, "Failed").message == done.message
    assert job["status"]["restarts"] == 0 == done.restarts


def test_a_missing_configmap_fails_naming_the_field(operator, kubectl, namespace):
    job = trainjob("nocode", 1, code={"configMap": "not-there", "entrypoint": "train:main"})
    kubectl.apply(job, "-n", namespace)
    wait_condition(kubectl, namespace, "nocode", "Failed", timeout=300)
    job = kubectl.json("get", "trainjob", "nocode", "-n", namespace)
    failed = condition(job, "Failed")
    assert failed.reason == "InvalidSpec"
    assert "exited with code 2" in failed.message and "spec.code.configMap" in failed.message
    assert job["status"]["restarts"] == 0


@pytest.mark.parametrize(
    ("code", "field", "words"),
    [
        ({"configMap": "c"}, "spec.code.entrypoint", "Required value"),
        ({"configMap": "c", "entrypoint": "../up.py"}, "spec.code.entrypoint", "module:function"),
        ({"configMap": "Not_A_Name", "entrypoint": "m:f"}, "spec.code.configMap", "should match"),
        ({"entrypoint": "m:f"}, "spec.code", "exactly one of configMap, volume"),
        (
            {"configMap": "c", "volume": {"hostPath": {"path": "/c"}}, "entrypoint": "m:f"},
            "spec.code",
            "exactly one of configMap, volume",
        ),
        ({"volume": {}, "entrypoint": "m:f"}, "spec.code.volume", "exactly one of persistentVolumeClaim"),
        (
            {
                "volume": {"nfs": {"server": "s", "path": "/c"}},
                "entrypoint": "m:f",
                "items": [{"key": "k", "path": "k"}],
            },
            "spec.code",
            "it needs spec.code.configMap",
        ),
    ],
)
def test_the_api_server_refuses_bad_code_naming_the_field(crd, kubectl, namespace, code, field, words):
    body = trainjob("bad", 1, code=code)
    refused = kubectl.apply(body, "-n", namespace, "--dry-run=server", check=False)
    assert refused.returncode != 0
    assert field in refused.stderr and words in refused.stderr, refused.stderr


def test_code_and_trainer_together_are_refused(crd, kubectl, namespace):
    body = trainjob("both", 1, trainer={"epochs": 1}, code={"configMap": "c", "entrypoint": "m:f"})
    refused = kubectl.apply(body, "-n", namespace, "--dry-run=server", check=False)
    assert refused.returncode != 0 and "spec.code and spec.trainer are exclusive" in refused.stderr


def test_a_function_from_python_returns_the_chiefs_value(
    operator, mlflow_uri, cluster, namespace, kubectl, monkeypatch
):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    result = run_seed_function(namespace, cluster.kubeconfig)
    assert set(result) >= CHIEFS_METRICS
    (job,) = jobs_in(kubectl, namespace)
    assert job["spec"]["code"]["entrypoint"] == "mwms_trainer.usercode:run_pickled"
    runs, models = mlflow_runs(mlflow_uri, job["metadata"]["name"])
    assert len(runs) == 1 and [m.name for m in models] == ["mymodel"]


def test_a_100_kb_result_comes_back_whole_and_a_too_big_one_fails_saying_so(
    operator, mlflow_uri, cluster, namespace, monkeypatch
):
    """Above what the chief's termination message holds, the value goes through an artifact of the job's run
    and the caller reads it back (at the chief's tracking URI); above 1 MiB the job fails saying so."""
    from mwms import Cluster, MirroredStrategyRunner

    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    runner = MirroredStrategyRunner(
        num_slots=1,
        use_custom_strategy=True,
        use_gpu=False,  # the default asks a GPU per slot (as spark-tensorflow-distributor): the node has none
        cluster=Cluster(namespace=namespace, kubeconfig=str(cluster.kubeconfig)),
    )
    train = user_module("big_result").train
    assert runner.run(train, size=100_000) == ["x" * 98] * 1000
    with pytest.raises(
        RuntimeError, match=r"return value is \d+ bytes as JSON, above the 1048576 bytes \(1 MiB\)"
    ):
        runner.run(train, size=2_000_000)


def test_code_from_a_volume_runs_like_a_configmap(operator, kubectl, namespace, tmp_path):
    """spec.code.volume: code a ConfigMap cannot hold (over 1 MiB, in a package directory) from the user's
    own volume, mounted read-only where the ConfigMap would be. A hostPath here; a ReadOnlyMany PVC in a
    real cluster."""
    code = tmp_path / "code"
    (code / "pkg").mkdir(parents=True)
    (code / "pkg" / "__init__.py").write_text("")
    (code / "pkg" / "vocabulary.txt").write_text("w\n" * 1_000_000)  # 2 MB
    (code / "pkg" / "job.py").write_text(
        "from pathlib import Path\n\n"
        "def main():\n"
        "    return {'words': len((Path(__file__).parent / 'vocabulary.txt').read_text().split())}\n"
    )
    job = trainjob(
        "fromvolume",
        1,
        code={"volume": {"hostPath": {"path": str(code), "type": "Directory"}}, "entrypoint": "pkg.job:main"},
    )
    kubectl.apply(job, "-n", namespace)
    wait_condition(kubectl, namespace, "fromvolume", "Succeeded", timeout=300)
    pod = kubectl.json("get", "pod", "fromvolume-worker-0", "-n", namespace)
    (status,) = pod["status"]["containerStatuses"]
    assert json.loads(status["state"]["terminated"]["message"])["result"] == {"words": 1_000_000}


def test_each_verb_of_the_command_and_the_sdk_on_a_job(
    operator, mwms, cluster, kubectl, namespace, make_standin
):
    """list, get, logs (-f), wait, runs and delete, from `mwms` and from Client, on one real TrainJob (the
    stand-in worker: no TensorFlow), read back against what the API server holds."""
    from mwms import Client, NotFound

    kubectl.apply(make_standin("verbs", 1, env={"STANDIN_SLEEP_SECONDS": "2"}), "-n", namespace)
    client = Client(namespace=namespace, kubeconfig=str(cluster.kubeconfig))
    streamed = mwms("logs", "verbs", "-f")  # from the start (or the end) of the chief's log to its end
    assert streamed.returncode == 0, streamed.stderr
    assert "standin: run id" in streamed.stdout

    waited = mwms("wait", "verbs", "--timeout", "5m")
    assert (waited.returncode, waited.stdout) == (0, "trainjob/verbs Succeeded\n"), waited.stderr
    job = client.wait("verbs", timeout=300)
    stored = kubectl.json("get", "trainjob", "verbs", "-n", namespace)
    run_id = stored["status"]["mlflow"]["runId"]
    assert (job.phase, job.mlflow.run_id, job.uid) == ("Succeeded", run_id, stored["metadata"]["uid"])
    assert {c.type for c in job.conditions} >= {"Created", "Succeeded"}

    assert [j.name for j in client.list()] == ["verbs"]
    assert (namespace, "verbs") in {(j.namespace, j.name) for j in client.list(all_namespaces=True)}
    assert mwms("list", "-o", "name").stdout == "trainjob.mwms.dev/verbs\n"
    table = mwms("list").stdout.splitlines()
    assert table[0].split()[:3] == ["NAME", "REPLICAS", "PHASE"] and table[1].split()[:3] == [
        "verbs",
        "1",
        "Succeeded",
    ]
    got = mwms("get", "verbs", "-o", "json")
    assert got.returncode == 0 and json.loads(got.stdout)["metadata"]["uid"] == stored["metadata"]["uid"]
    assert client.get("verbs") == job

    runs = mwms("runs", "verbs", "-o", "json")
    assert json.loads(runs.stdout)["runId"] == run_id == client.runs("verbs").run_id
    assert client.runs("verbs").model_uri == stored["status"]["mlflow"].get("modelUri")
    logged = mwms("logs", "verbs")
    assert logged.returncode == 0 and f"standin: run id {run_id}" in logged.stdout
    assert (
        f"standin: run id {run_id}" in list(client.logs("verbs")) == list(client.logs("verbs", follow=True))
    )

    deleted = client.delete("verbs")
    assert deleted.name == "verbs" and deleted.succeeded
    with pytest.raises(NotFound, match="verbs: not found"):
        client.get("verbs")
    gone = mwms("get", "verbs")
    assert gone.returncode == 1 and "TrainJob verbs: not found in namespace" in gone.stderr
    again = mwms("delete", "verbs")
    assert again.returncode == 1 and "not found" in again.stderr


def test_wait_exits_1_for_a_failed_job_and_after_its_timeout(
    operator, mwms, cluster, kubectl, namespace, make_standin
):
    from mwms import Client

    failing = make_standin("fails", 1, env={"STANDIN_FAIL_INDEX": "0", "STANDIN_EXIT_CODE": "1"})
    kubectl.apply(failing, "-n", namespace)
    kubectl.apply(make_standin("slow", 1, env={"STANDIN_SLEEP_SECONDS": "3600"}), "-n", namespace)
    failed = mwms("wait", "fails", "--timeout", "5m")
    assert failed.returncode == 1 and failed.stdout == "trainjob/fails Failed\n"
    assert "mwms wait: trainjob/fails failed: " in failed.stderr and "exited with code 1" in failed.stderr
    timed_out = mwms("wait", "slow", "--timeout", "1s")
    assert timed_out.returncode == 1 and f"TrainJob {namespace}/slow is still" in timed_out.stderr
    with pytest.raises(TimeoutError, match="after 1s"):
        Client(namespace=namespace, kubeconfig=str(cluster.kubeconfig)).wait("slow", timeout=1)
    deleted = mwms("delete", "slow", "fails")
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout == 'trainjob.mwms.dev "slow" deleted\ntrainjob.mwms.dev "fails" deleted\n'
