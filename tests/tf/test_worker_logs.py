"""Every worker's log reaches the job's one MLflow run when it exits (mwms_trainer.worker_log), against a
real `mlflow server` and real worker processes: the stand-in's path (`python -m mwms_trainer.pid1 CMD`, the
same supervisor and upload as `python -m mwms_trainer`), and the real trainer running a user's script."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from tf_support import HANG_SECONDS, POISON, REPO, group, runs_of, trainjob_spec

from mwms_contract import names
from mwms_kit.pid_namespace import AVAILABLE, WHY_NOT, pid1_of, start_as_pid1

CODE = REPO / "tests" / "data" / "usercode"
SCRIPT = """
import os, sys, time
print("to stdout from worker", os.environ["WORKER"], flush=True)
print("to stderr", file=sys.stderr, flush=True)
os.write(2, b"straight to fd 2, as TensorFlow's C++ logs\\n")
sys.stdout.write("x" * int(os.environ.get("BULK", "0")))
sys.stdout.flush()
if os.environ.get("HANG"):
    print("hanging", flush=True)
    time.sleep(600)
sys.exit(int(os.environ.get("CODE", "0")))
"""


def job(name: str, replicas: int, tracking_uri: str, tmp: Path, restart: int = 0) -> list[dict[str, str]]:
    spec = trainjob_spec(name, replicas, {})
    envs = group(spec, tracking_uri, tmp, restart_count=restart).envs
    for i, env in enumerate(envs):
        env["WORKER"] = str(i)
    return envs


def open_run(client, envs) -> str:
    """The job's run, as its chief opens it: tagged with the job's uid."""
    experiment = client.create_experiment(envs[0][names.ENV_EXPERIMENT_NAME])
    tags = {names.MLFLOW_TAG_JOB_UID: envs[0][names.ENV_JOB_UID]}
    return client.create_run(experiment, tags=tags).info.run_id


def read(client, run_id: str, path: str, tmp: Path) -> str:
    return Path(client.download_artifacts(run_id, path, str(tmp))).read_text()


def standin_cmd() -> list[str]:
    return [sys.executable, "-m", "mwms_trainer.pid1", sys.executable, "-c", SCRIPT]


def test_each_worker_uploads_its_whole_log_into_the_chiefs_run_without_mlflow(
    mlflow_server, mlflow_client, tmp_path
):
    name = f"logs-{uuid.uuid4().hex[:6]}"
    envs = job(name, 2, mlflow_server.url, tmp_path / "job")
    run_id = open_run(mlflow_client, envs)
    envs[1]["CODE"] = "3"
    envs[1]["PYTHONPATH"] = os.pathsep.join([str(POISON), os.environ.get("PYTHONPATH", "")])  # no mlflow
    procs = [
        subprocess.run(standin_cmd(), env=env, capture_output=True, text=True, timeout=120) for env in envs
    ]
    assert [p.returncode for p in procs] == [0, 3]  # the worker's own exit code, upload or not
    for i, proc in enumerate(procs):
        log = read(mlflow_client, run_id, f"logs/group-0/worker-{i}.log", tmp_path / f"dl{i}")
        assert f"to stdout from worker {i}\n" in log
        assert "to stderr\n" in log
        assert "straight to fd 2, as TensorFlow's C++ logs\n" in log
        assert f"to stdout from worker {i}" in proc.stdout  # the container's log keeps everything, too
        assert f"this worker's log is in MLflow at runs:/{run_id}/logs/group-0/worker-{i}.log" in proc.stderr
    assert [r.info.run_id for r in runs_of(mlflow_client, name)] == [run_id]  # nobody opened a second run


def test_a_log_over_the_cap_is_cut_and_says_so(mlflow_server, mlflow_client, tmp_path):
    envs = job(f"cap-{uuid.uuid4().hex[:6]}", 1, mlflow_server.url, tmp_path / "job")
    run_id = open_run(mlflow_client, envs)
    env = {**envs[0], names.ENV_LOG_CAP: "4096", "BULK": "100000"}
    assert subprocess.run(standin_cmd(), env=env, capture_output=True, timeout=120).returncode == 0
    log = read(mlflow_client, run_id, "logs/group-0/worker-0.log", tmp_path / "dl")
    assert log.startswith("to stdout from worker 0\n")
    assert names.LOG_CUT_MARKER in log
    assert "more than the 4096-byte cap" in log
    assert log.endswith("x" * 3000)
    assert len(log) < 4096 + 300


@pytest.mark.skipif(not AVAILABLE, reason=WHY_NOT)
def test_a_worker_stopped_by_sigterm_as_pid1_still_uploads_its_groups_log(
    mlflow_server, mlflow_client, tmp_path, wait_for
):
    """A restart deletes the group's pods: their PID 1 gets SIGTERM. Restart 1 keeps its own folder."""
    envs = job(f"killed-{uuid.uuid4().hex[:6]}", 1, mlflow_server.url, tmp_path / "job", restart=1)
    run_id = open_run(mlflow_client, envs)
    out = tmp_path / "container.log"
    with open(out, "wb") as log:
        proc = start_as_pid1(standin_cmd(), {**envs[0], "HANG": "1"}, log)
    try:
        wait_for(lambda: "hanging" in out.read_text() or proc.poll() is not None, timeout=120, interval=0.1)
        assert proc.poll() is None, out.read_text()
        os.kill(pid1_of(proc), signal.SIGTERM)
        assert proc.wait(timeout=60) == 143
    finally:
        proc.kill()
    log = read(mlflow_client, run_id, "logs/group-1/worker-0.log", tmp_path / "dl")
    assert "to stdout from worker 0\n" in log and "hanging\n" in log


@pytest.mark.skipif(not AVAILABLE, reason=WHY_NOT)
def test_the_trainer_uploads_the_users_prints_into_the_run_its_chief_opened(
    mlflow_server, mlflow_client, tmp_path
):
    """`python -m mwms_trainer` as PID 1 (as in a pod) with spec.code: the chief opens the run itself; its
    log (the user's prints and the trainer's own lines) lands in that run once the worker has exited."""
    name = f"trainer-logs-{uuid.uuid4().hex[:6]}"
    code = {"configMap": "unused-locally", "entrypoint": "returns.py", "args": ["100"]}
    spec = trainjob_spec(name, 1, None, code=code, startup_timeout=600)
    g = group(spec, mlflow_server.url, tmp_path / "job", **{names.ENV_CODE_DIR: str(CODE)})
    g.start(as_pid1=True)
    assert g.wait(timeout=HANG_SECONDS) == {0: 0}, g.log(0)[-3000:]
    (run,) = runs_of(mlflow_client, name)
    log = read(mlflow_client, run.info.run_id, "logs/group-0/worker-0.log", tmp_path / "dl")
    assert "opened MLflow run" in log  # the trainer's own logging
    assert json.dumps(g.summary()) in log  # the summary line it prints last


BUSY = """
import os, time
end = time.monotonic() + float(os.environ["BUSY_SECONDS"])
while time.monotonic() < end:
    sum(range(10000))
"""


def test_each_worker_logs_its_system_metrics_into_the_chiefs_run_under_its_node_id(
    mlflow_server, mlflow_client, tmp_path
):
    name = f"sysmetrics-{uuid.uuid4().hex[:6]}"
    envs = job(name, 2, mlflow_server.url, tmp_path / "job")
    run_id = open_run(mlflow_client, envs)
    cmd = [sys.executable, "-m", "mwms_trainer.pid1", sys.executable, "-c", BUSY]
    for env in envs:
        env.update({names.ENV_SYSTEM_METRICS_SECONDS: "1", "BUSY_SECONDS": "3"})
    procs = [subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True) for env in envs]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    metrics = mlflow_client.get_run(run_id).data.metrics
    for worker in ("worker-0", "worker-1"):
        cpu = mlflow_client.get_metric_history(run_id, f"system/{worker}/cpu_usage_cores")
        assert len(cpu) >= 2, cpu  # sampled while it ran, and once at its end
        assert max(m.value for m in cpu) > 0.2  # the busy loop, counted from the cgroup
        assert metrics[f"system/{worker}/system_memory_usage_megabytes"] > 0
        assert f"system/{worker}/network_receive_megabytes" in metrics
    assert [r.info.run_id for r in runs_of(mlflow_client, name)] == [run_id]  # into the chief's run only


def test_system_metrics_turned_off_log_none(mlflow_server, mlflow_client, tmp_path):
    name = f"sysmetrics-off-{uuid.uuid4().hex[:6]}"
    envs = job(name, 1, mlflow_server.url, tmp_path / "job")
    run_id = open_run(mlflow_client, envs)
    envs[0][names.ENV_SYSTEM_METRICS_SECONDS] = "0"
    subprocess.run(standin_cmd(), env=envs[0], capture_output=True, timeout=120, check=True)
    assert not [key for key in mlflow_client.get_run(run_id).data.metrics if key.startswith("system/")]
