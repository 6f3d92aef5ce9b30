"""Kubeflow's training-operator (TFJob) in the scale bench in place of ours (bench/scale_bench.py --operator
training-operator): the same control plane, KWOK nodes and Stages (bench/scale/stages/), one operator at a
time. Its build, CRD and webhook cert come from bench/peer_bench.py.

A TFJob of the same shape as the bench's TrainJobs: `replicas` Workers asking for the same resources, whose
pod template carries the KWOK annotations the Stages read (WorkerScript: fit time, exit code) and the
app.kubernetes.io/managed-by label they select on (here `training-operator`). Restart policy OnFailure, as
bench/peer_bench.py uses: training-operator v1.8.1 deletes a Failed pod of such a replica and creates it again
under the same name (a kubelet would restart its container; KWOK's pods do not), so the storm's exit code 75
restarts the lost worker there too, that worker alone, where ours restarts its whole group.

The pod watch follows training.kubeflow.org/job-name and /replica-index; a restart is a new uid of the same
pod name (watch.Keys with no restart label). A TFJob's phase is the furthest of its true conditions: Failed,
Succeeded, Restarting, Running, then Created (read as ours' Pending)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from mwms_dev.cluster import free_port
from mwms_dev.kwok import WorkerScript
from mwms_dev.scripts import load_script

BENCH = Path(__file__).resolve().parents[1]


run = load_script("mwms_scale_run", Path(__file__).with_name("run.py"))
if str(BENCH) not in sys.path:  # peer_bench imports its neighbours in bench/ by name
    sys.path.insert(0, str(BENCH))
import peer_bench  # noqa: E402

GROUP, API_VERSION, PLURAL, KIND = "kubeflow.org", "v1", "tfjobs", "TFJob"
JOB_NAME = "training.kubeflow.org/job-name"
REPLICA_INDEX = "training.kubeflow.org/replica-index"
MANAGED_BY = ("app.kubernetes.io/managed-by", "training-operator")  # what our KWOK Stages select on
CONTAINER = "tensorflow"  # the TFJob controller reads a pod's exit code from this container only
IMAGE = peer_bench.IMAGE  # never pulled: KWOK runs no container
KEYS = run.watch.Keys(selector=JOB_NAME, job=JOB_NAME, index=REPLICA_INDEX, restart=None)
# condition -> phase, the first true one in this order (a finished job may still say Running=True for a while)
PHASES = (
    ("Failed", "Failed"),
    ("Succeeded", "Succeeded"),
    ("Restarting", "Restarting"),
    ("Running", "Running"),
    ("Suspended", "Suspended"),
    ("Created", "Pending"),
)


def tfjob(
    name: str,
    replicas: int,
    script: WorkerScript,
    *,
    backoff_limit: int | None = None,
    ttl: int | None = None,
    cpu: str = "1",
    memory: str = "2Gi",
    gpus: int = 0,
) -> dict[str, Any]:
    """A TFJob of `replicas` Workers following `script` on fake nodes: run.trainjob's shape."""
    requests, run_policy = run.worker_requests_and_policy(backoff_limit, ttl, cpu, memory, gpus)
    container = {"name": CONTAINER, "image": IMAGE, "resources": {"requests": requests}}
    return {
        "apiVersion": f"{GROUP}/{API_VERSION}",
        "kind": KIND,
        "metadata": {"name": name},
        "spec": {
            "runPolicy": run_policy,
            "tfReplicaSpecs": {
                "Worker": {
                    "replicas": replicas,
                    "restartPolicy": "OnFailure",
                    "template": {
                        "metadata": {
                            "labels": dict([MANAGED_BY]),
                            "annotations": script.annotations(),
                        },
                        "spec": {"containers": [container]},
                    },
                }
            },
        },
    }


def phase(status: dict[str, Any]) -> str:
    """The phase ours would say for a TFJob's status ("" before its first condition)."""
    true = {c.get("type") for c in status.get("conditions") or () if c.get("status") == "True"}
    return next((ours for condition, ours in PHASES if condition in true), "")


class PeerScaleEnv(run.ScaleEnv):
    """run.ScaleEnv with training-operator (TFJob only, its defaults) where ours would run."""

    watch_keys = KEYS

    def install_crd(self) -> None:
        self.peer_dir = peer_bench.build_peer()
        self.kubectl("create", "-f", str(self.peer_dir / "crds" / "kubeflow.org_tfjobs.yaml"))
        run.wait(self._served, 60, f"{PLURAL} served", 0.2)  # (a `kubectl wait` may find no conditions yet)
        namespace, secret = peer_bench.PEER_SECRET
        self.kubectl("create", "namespace", namespace)
        self.kubectl("create", "secret", "generic", secret, "-n", namespace)

    def _served(self) -> bool:
        try:
            self.custom.list_cluster_custom_object(GROUP, API_VERSION, PLURAL)
        except run.kubernetes.client.ApiException:
            return False
        return True

    def start_operator(self) -> subprocess.Popen[bytes]:
        self.probe_port = free_port()
        self.stop_cert = threading.Event()
        threading.Thread(
            target=peer_bench.copy_peer_cert, args=(self.core, self.stop_cert), daemon=True
        ).start()
        return subprocess.Popen(
            peer_bench.peer_argv(self.peer_dir, self.metrics_port, self.probe_port),
            env={**os.environ, "KUBECONFIG": str(self.cluster.kubeconfig)},
            cwd=self.state_dir,
            stdout=self.operator_log,
            stderr=subprocess.STDOUT,
        )

    def _operator_up(self) -> bool:
        """Its controllers start once its webhook cert is in place: ready, not only its metrics."""
        return super()._operator_up() and peer_bench.http_ok(f"http://127.0.0.1:{self.probe_port}/readyz")

    def jobs(self, namespace: str) -> dict[str, dict[str, Any]]:
        """name -> status, with the `phase` ours would say."""
        items = self.custom.list_namespaced_custom_object(GROUP, API_VERSION, namespace, PLURAL)["items"]
        out = {}
        for job in items:
            status = job.get("status") or {}
            out[job["metadata"]["name"]] = {**status, "phase": phase(status)}
        return out

    def __exit__(self, *exc: object) -> None:
        if getattr(self, "stop_cert", None) is not None:
            self.stop_cert.set()
        try:
            super().__exit__(*exc)
        finally:
            for name in ("tls.crt", "tls.key"):
                (peer_bench.PEER_CERT_DIR / name).unlink(missing_ok=True)
