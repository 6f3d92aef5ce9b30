"""The `mwms` command's output formats and exit codes (what scripts rely on), without a cluster."""

import datetime
import io
import json
import subprocess
import sys

import pytest
import yaml

from mwms import cli, jobs
from mwms import output as printing
from mwms_kit.trainjobs import trainjob

NOW = datetime.datetime(2026, 1, 2, 12, 0, 0, tzinfo=datetime.UTC)


def listed(name, phase="Running", **status):
    """A 2-worker TrainJob as `kubectl get` lists it: stored 12 minutes before NOW, with a status."""
    created = {"creationTimestamp": "2026-01-02T11:48:00Z"}
    return trainjob(name, 2, namespace="team-a", metadata=created, status={"phase": phase, **status})


FAILED = listed(
    "b",
    "Failed",
    restarts=1,
    conditions=[
        {"type": "Failed", "status": "True", "reason": "WorkerFailed", "message": "worker 1 exited 1\nat"}
    ],
)
RUNNING = listed(
    "a",
    mlflow={"runId": "r1"},
    progress={
        "epoch": 3,
        "epochs": 6,
        "metrics": {"loss": 0.5},
        "runId": "r1",
        "progressPercentage": 50,
        "estimatedRemainingSeconds": 200,
    },
)


@pytest.mark.parametrize(
    ("created", "shown"),
    [("2026-01-02T11:59:15Z", "45s"), ("2026-01-02T11:48:00Z", "12m"), ("2026-01-02T09:00:00Z", "3h"),
     ("2025-12-30T12:00:00Z", "3d"), (None, "<unknown>")],
)  # fmt: skip
def test_age_reads_as_kubectls(created, shown):
    assert printing.age(created, NOW) == shown


def test_the_typed_job_carries_phase_conditions_run_and_progress():
    job = jobs.job_from(RUNNING)
    assert (job.name, job.namespace, job.phase, job.replicas) == ("a", "team-a", "Running", 2)
    assert job.mlflow == jobs.Run(run_id="r1")
    assert job.progress == jobs.Progress(3, 6, {"loss": 0.5}, percentage=50, remaining_seconds=200)
    failed = jobs.job_from(FAILED)
    assert failed.done and not failed.succeeded and failed.message.startswith("worker 1 exited 1")
    assert failed.conditions[0].reason == "WorkerFailed"


def test_the_table_and_its_wide_columns():
    listed = [jobs.job_from(RUNNING), jobs.job_from(FAILED)]
    assert printing.job_rows(listed, wide=False, all_namespaces=False, now=NOW).splitlines() == [
        "NAME   REPLICAS   PHASE     RESTARTS   RUN ID   AGE",
        "a      2          Running   0          r1       12m",
        "b      2          Failed    1          <none>   12m",
    ]
    wide = printing.job_rows(listed, wide=True, all_namespaces=True, now=NOW).splitlines()
    assert wide[0].split() == [
        "NAMESPACE", "NAME", "REPLICAS", "PHASE", "RESTARTS", "RUN", "ID", "AGE", "EPOCH", "PROGRESS", "TIME",
        "LEFT", "MODEL", "URI", "MESSAGE",
    ]  # fmt: skip
    assert wide[1].split()[-4:] == ["3/6", "50%", "3m20s", "<none>"]
    assert wide[2].split()[8:11] == ["<none>"] * 3
    assert len(wide) == 3 and wide[2].endswith("worker 1 exited 1")  # one row: the message's first line
    # `mwms get` shows the progress too (`list` only with -o wide).
    got = printing.job_rows(listed, wide=False, all_namespaces=False, now=NOW, progress=True).splitlines()
    assert got[0].split()[-4:] == ["EPOCH", "PROGRESS", "TIME", "LEFT"]
    assert got[1].split()[-3:] == ["3/6", "50%", "3m20s"]


def test_describe_shows_the_progress_and_the_tracking_server():
    from mwms import describe

    job = jobs.job_from(
        {
            **RUNNING,
            "status": {**RUNNING["status"], "mlflow": {"runId": "r1", "trackingUri": "http://m.ns.svc:5000"}},
        }
    )
    text = describe.render(describe.Description(job), NOW)
    assert "  Tracking URI: http://m.ns.svc:5000" in text
    assert "  Progress:     epoch 3/6 (50%), 3m20s left loss=0.5000" in text


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_json_and_yaml_give_the_object_for_one_name_and_a_list_otherwise(output):
    load = json.loads if output == "json" else yaml.safe_load
    one, many = io.StringIO(), io.StringIO()
    printing.show_jobs([jobs.job_from(RUNNING)], output, one, single=True)
    printing.show_jobs([jobs.job_from(RUNNING), jobs.job_from(FAILED)], output, many)
    assert load(one.getvalue()) == RUNNING
    assert load(many.getvalue()) == {"apiVersion": "v1", "kind": "List", "items": [RUNNING, FAILED]}


def test_name_output_and_an_empty_list():
    names, empty = io.StringIO(), io.StringIO()
    printing.show_jobs([jobs.job_from(RUNNING)], "name", names)
    printing.show_jobs([], None, empty)
    assert names.getvalue() == "trainjob.mwms.dev/a\n" and empty.getvalue() == "No TrainJobs found.\n"


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("90s", 90), ("15m", 900), ("2h", 7200)])
def test_durations(text, seconds):
    assert cli.seconds(text) == seconds


@pytest.mark.parametrize("verb", ["list", "get x", "logs x", "wait x", "delete x", "runs"])
def test_an_unusable_kubeconfig_is_exit_1_naming_it(verb, tmp_path):
    err = io.StringIO()
    nowhere = str(tmp_path / "no-such-kubeconfig")
    assert cli.main([*verb.split(), "--kubeconfig", nowhere], err=err) == 1
    assert (
        err.getvalue().startswith(f"mwms {verb.split()[0]}: no usable kubeconfig")
        and nowhere in err.getvalue()
    )


@pytest.mark.parametrize(
    "argv", [[], ["frobnicate"], ["wait", "x", "--timeout", "soon"], ["list", "-o", "xml"], ["get"]]
)
def test_a_bad_command_line_is_exit_2(argv):
    with pytest.raises(SystemExit) as exited:
        cli.main(argv, out=io.StringIO(), err=io.StringIO())
    assert exited.value.code == 2


def test_nothing_submitted_is_exit_2(tmp_path):
    err = io.StringIO()
    assert cli.main(["submit", str(tmp_path / "missing.py")], err=err) == 2
    assert "missing.py: no such file" in err.getvalue()


def test_the_dev_packages_commands_appear_where_it_is_installed():
    """This venv has mwms-operator's dev package: its entry points add dev-cluster and demo."""
    shown = subprocess.run(
        [sys.executable, "-m", "mwms.cli", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "dev-cluster" in shown and "demo" in shown and "mwms-operator's command" in shown
    for verb in ("submit", "list", "get", "logs", "wait", "delete", "runs", "local"):
        assert verb in shown


def test_the_client_and_its_command_import_nothing_of_the_trainer_operator_or_dev_cluster():
    loaded = subprocess.run(
        [sys.executable, "-c", "from mwms import Client, MirroredStrategyRunner; import mwms.cli\n"
         "mwms.cli.parser(mwms.cli.installed_plugins())\n"
         "import sys; print(' '.join(sys.modules))"],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout.split()  # fmt: skip
    assert {"mwms_trainer", "mwms_operator", "mwms_dev", "tensorflow", "kopf", "mlflow"}.isdisjoint(loaded)


def test_local_runs_the_trainers_local_mode_in_its_own_process_where_the_trainer_is_installed():
    shown = subprocess.run(
        [sys.executable, "-m", "mwms.cli", "local", "--help"], capture_output=True, text=True, check=False
    )
    assert shown.returncode == 0 and shown.stdout.startswith("usage: mwms local"), shown.stderr
