"""What users run, on the real node, with the images `make images` built from our Dockerfiles: the Helm chart
(operator image, bundled MLflow from the trainer image) in a namespace enforcing Pod Security `restricted`;
the seed TrainJob's 4 trainer containers, in a `restricted` namespace too, find each other through CoreDNS and
MLflow through its Service, and give exactly one run and one model; a worker and then the chief SIGKILLed
inside containerd mid-fit each restart the whole group once, which resumes from its checkpoint into the same
single run; suspend removes the workers and resume brings them back to finish. The chart is installed once
for the tier (tests/node/conftest.py); test_node_uninstall.py uninstalls a release of its own. The chain steps
are mwms_dev.chain's, as in `make demo` and the kind workflow."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from mwms_contract import names
from mwms_dev.chain import check_mlflow, runs_of_job, score_model
from mwms_kit.trainjobs import trainjob
from mwms_trainer.kept import KEPT_DIR
from mwms_trainer.mlflow_run import TAG_RESUMED_FROM_EPOCH
from node.node_support import follow_log, phase_is, running_container, status_of, wait_for_job

# Loading the trainer image (~1 GB) and the chart come first, on 2 shared cores: more than the default 600 s.
pytestmark = pytest.mark.timeout(1500)

REPO = Path(__file__).resolve().parents[2]
MINIMAL_SAMPLE = REPO / "manifests" / "samples" / "minimal.yaml"
JOB_LABEL = "mwms.dev/job-name"


def job_pods(kubectl, namespace: str, name: str) -> list[dict]:
    return kubectl.json("get", "pods", "-n", namespace, "-l", f"{JOB_LABEL}={name}")["items"]


def test_seed_job_in_a_restricted_namespace_gives_one_run_and_one_model(
    node_kubectl, node_namespace, node_chain, operator_log
):
    node_kubectl.restrict(node_namespace)  # every worker pod must pass Pod Security `restricted`
    chain = node_chain
    chain.job_namespace, chain.sample = (
        node_namespace,
        REPO / "manifests" / "samples" / "seed-breast-cancer.yaml",
    )
    try:
        name = chain.apply_sample()
        job = chain.wait_succeeded(name)
        url = chain.mlflow_pod_url()
        result = check_mlflow(url, job)
        params, metrics = result["params"], result["metrics"]
        # The bundled server runs without MLflow's job runner (8 more processes: ~1.8 GiB of its 2 GiB limit).
        tracking = ["-n", chain.operator_namespace, "-l", "app.kubernetes.io/component=tracking"]
        served = node_kubectl("logs", *tracking, "--tail=-1").stdout
        assert "Uvicorn running" in served and "mlflow.server.jobs" not in served, served[-3000:]
        assert params.get("replicas") == "4", params
        assert len(result["lossHistory"]) == int(params["epochs"]), "one loss point per epoch"
        # The model MLflow holds is the one the run's metrics describe: it scores its logged val_accuracy.
        accuracy = score_model(url, result["modelUri"], job["spec"].get("trainer", {}))
        assert accuracy >= 0.95
        assert accuracy == pytest.approx(metrics["val_accuracy"], abs=1e-6)
        # The workers ran as containers of our trainer image on the real node. cleanPodPolicy Running (the
        # default) deletes workers still finishing when the chief has succeeded, so the chief's pod is kept,
        # the others only if they were done first.
        pods = job_pods(node_kubectl, node_namespace, name)
        assert f"{name}-worker-0" in {pod["metadata"]["name"] for pod in pods}
        for pod in pods:
            (status,) = pod["status"]["containerStatuses"]
            assert status["containerID"].startswith("containerd://") and "/mwms-trainer:" in status["image"]
            # Each worker that ended on its own logged its container's use under its node id (a last sample
            # at its end): a TensorFlow worker peaks at hundreds of MB, read from its container's cgroup.
            if status["state"].get("terminated", {}).get("exitCode") == 0:
                node_id = "worker-" + pod["metadata"]["labels"][names.LABEL_REPLICA_INDEX]
                assert metrics[f"system/{node_id}/system_memory_peak_megabytes"] > 100, sorted(metrics)
                assert f"system/{node_id}/cpu_usage_cores" in metrics
        chain.delete_job(name)
    except Exception:
        print(operator_log())
        raise


def kill_in_containerd(real_node, container_id: str) -> None:
    """SIGKILL a worker's process through containerd, as the OOM killer or a crash would end it."""
    real_node.ctr("tasks", "kill", "--signal", "SIGKILL", container_id)


EPOCHS = 8  # the chief is killed once the second attempt (from epoch 2 or 3) saves: epochs to spare
RESUMED = "resumes from the checkpoint"
SAVED = "checkpoint saved at epoch"  # the chief's line once a checkpoint is saved and published
EPOCH_DONE = re.compile(rf"^worker \d+ epoch \d+/{EPOCHS} ", re.MULTILINE)


def training_job(name: str, checkpoint_dir: Path) -> dict:
    # 10000 synthetic rows: epochs of a few seconds each, so a kill seen after one epoch lands mid-fit.
    return trainjob(
        name,
        2,
        trainer={"dataset": "synthetic", "syntheticSamples": 10000, "seed": 42, "epochs": EPOCHS},
        mlflow={"experiment": name},
        checkpoint={"hostPath": {"path": str(checkpoint_dir), "type": "Directory"}},
        runPolicy={"backoffLimit": 3},
    )


def test_killed_worker_then_killed_chief_restart_the_group_which_resumes_into_one_run(
    real_node, node_kubectl, node_namespace, node_chain, operator_log, tmp_path
):
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    checkpoint.chmod(0o777)  # the trainer runs as 65532; a hostPath is the host's directory as it is
    name = "kills"
    node_kubectl.apply(training_job(name, checkpoint), "-n", node_namespace)
    seen: list[str] = []  # what each kill saw, printed if the test fails
    try:
        # Worker 1 once epoch 2 is logged (epoch 1's checkpoint is saved before epoch 2 runs, epoch 2's after
        # its line); then the chief (worker 0) once the restarted group has resumed and saved a checkpoint of
        # its own. The resumed attempt's log is told apart by its resume line.
        kills = (
            (f"{name}-worker-1", lambda log: f"worker 1 epoch 2/{EPOCHS} " in log),
            (f"{name}-worker-0", lambda log: SAVED in log.partition(RESUMED)[2]),
        )
        for restarts, (victim, mid_fit) in enumerate(kills, start=1):
            # The container id is read before the epoch line it waits for, so the kill follows that line at
            # once: late enough, the kill would land after the fit and test nothing.
            container = running_container(node_kubectl, node_namespace, victim, restarts - 1, 600)
            what = f"attempt {restarts}: an epoch"
            log = follow_log(node_kubectl, node_namespace, victim, mid_fit, 600, what)
            kill_in_containerd(real_node, container)
            files = files_of(checkpoint)
            seen.append(f"killed {victim}: {progress_lines(log)}; checkpoints then: {files}")
            fitted = [f for f in files if f"/{KEPT_DIR}/" in f]  # where the chief keeps the fitted model
            assert not fitted, f"the kill of {victim} landed after the fit ended: {fitted}"
            wait_for_job(
                node_kubectl,
                node_namespace,
                name,
                lambda j, r=restarts: status_of(j).get("restarts", 0) >= r,
                180,
                f"group restart {restarts}",
            )
        job = wait_for_job(node_kubectl, node_namespace, name, phase_is("Succeeded"), 600, "Succeeded")
        assert job["status"]["restarts"] == 2
        (run,) = runs_of_job(node_chain.mlflow_pod_url(), job["metadata"]["uid"])
        tags = {tag["key"]: tag["value"] for tag in run["data"].get("tags", [])}
        # The last attempt went on from the checkpoint of the second, not from the start.
        assert 2 <= int(tags[TAG_RESUMED_FROM_EPOCH]) < EPOCHS, tags.get(TAG_RESUMED_FROM_EPOCH)
    except Exception:
        print(operator_log())
        last = node_kubectl("logs", f"{name}-worker-0", "-n", node_namespace, check=False).stdout
        print("\n".join([*seen, f"last chief: {progress_lines(last)}; checkpoints: {files_of(checkpoint)}"]))
        raise


def progress_lines(log: str) -> list[str]:
    """A worker log's resume, checkpoint and epoch lines: which epoch each attempt started at and reached."""
    kept = (RESUMED, SAVED)
    return [line[:80] for line in log.splitlines() if any(k in line for k in kept) or EPOCH_DONE.match(line)]


def files_of(directory: Path) -> list[str]:
    """The checkpoint files on the host, with their sizes and modification times. The trainer removes its
    workers' temporary copies meanwhile: os.walk skips a directory that went, and a file that went is left
    out."""
    found = []
    for parent, _, file_names in os.walk(directory):  # os.walk ignores a directory removed under it
        for name in sorted(file_names):
            path = Path(parent, name)
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue
            found.append(f"{path.relative_to(directory)} {stat.st_size} {stat.st_mtime:.1f}")
    return sorted(found)


def set_suspend(kubectl, namespace: str, name: str, suspend: bool) -> None:
    patch = json.dumps({"spec": {"runPolicy": {"suspend": suspend}}})
    kubectl("patch", "trainjob", name, "-n", namespace, "--type=merge", "-p", patch)


def test_suspend_removes_the_workers_and_resume_finishes_the_job(
    node_kubectl, node_namespace, node_chain, operator_log
):
    chain = node_chain
    chain.job_namespace, chain.sample = node_namespace, MINIMAL_SAMPLE
    name = chain.apply_sample()
    try:
        wait_for_job(node_kubectl, node_namespace, name, phase_is("Running"), 300, "Running")
        set_suspend(node_kubectl, node_namespace, name, True)
        wait_for_job(
            node_kubectl,
            node_namespace,
            name,
            lambda j: phase_is("Suspended")(j) and not job_pods(node_kubectl, node_namespace, name),
            180,
            "Suspended, no pods",
        )
        set_suspend(node_kubectl, node_namespace, name, False)
        job = chain.wait_succeeded(name)
        assert len(runs_of_job(chain.mlflow_pod_url(), job["metadata"]["uid"])) == 1
    except Exception:
        print(operator_log())
        raise
