"""The two operators a scenario can run: ours (TrainJob) and Kubeflow's training-operator v1.8.1 (TFJob,
built by hack/build/build-training-operator.sh). For each: its job manifest (with KWOK's worker annotations
given a `WorkerScript`), its phases and pod labels, the metrics of its API requests and work queue, and how a
lost worker's restart shows (ours restarts the group, the peer the worker's pod).
`PeerProcess` runs the peer."""

from __future__ import annotations

import base64
import os
import re
import subprocess
import threading
import urllib.request
from pathlib import Path
from typing import Any

import kubernetes

from mwms_bench import measure, watch
from mwms_contract import names
from mwms_dev.builds import built
from mwms_dev.cluster import free_port
from mwms_dev.kwok import WorkerScript
from mwms_dev.procs import stop_process
from mwms_kit.trainjobs import trainjob

REPO = Path(__file__).resolve().parents[2]
BUILD_PEER = REPO / "hack" / "build" / "build-training-operator.sh"
# TRAINING_OPERATOR_VERSION, else the build script's default (the one Renovate bumps)
PEER_VERSION = (
    os.environ.get("TRAINING_OPERATOR_VERSION")
    or re.findall(r"TRAINING_OPERATOR_VERSION:-(v[0-9.]+)", BUILD_PEER.read_text())[0]
)
# Where training-operator's webhook server reads the cert its rotator writes to this Secret (in a cluster, a
# Secret volume is mounted there).
PEER_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")
PEER_SECRET = ("kubeflow", "training-operator-webhook-cert")
NEVER_PULLED = "registry.invalid/never-pulled:1"  # no node pulls it: KWOK runs no container
REQUESTS = {"requests": {"cpu": "1", "memory": "2Gi"}}  # what each simulated worker asks for
Counts = dict[tuple[str, ...], float]
Job = dict[str, Any]
Watcher = watch.PodWatcher


def run_policy(suspend: bool = False, backoff_limit: int | None = None, ttl: int | None = None) -> Job:
    policy: dict[str, Any] = {"suspend": True} if suspend else {}
    policy |= {"backoffLimit": backoff_limit} if backoff_limit is not None else {}
    return policy | ({"ttlSecondsAfterFinished": ttl} if ttl is not None else {})


class Ours:
    name = "mwms"
    what = "mwms-operator (TrainJob), as a local process, its defaults, log level WARNING"
    group, version, plural = names.GROUP, names.VERSION, names.PLURAL
    job_label, keys = names.LABEL_JOB_NAME, watch.OURS
    metrics_prefix, depth = "mwms_", "mwms_workqueue_depth"
    queue, reconciles = "mwms_workqueue_queue_duration_seconds", "mwms_reconcile_duration_seconds_count"
    requests_metric, requests_by = "mwms_api_requests_total", ("verb", "resource", "code")
    api_source = "its own mwms_api_requests_total, by verb, resource and answer"
    service_a_pod = False  # one headless Service a job

    def job(self, name: str, replicas: int, script: WorkerScript | None = None, **policy: Any) -> Job:
        """A TrainJob (`policy`: run_policy's); on KWOK's nodes its workers follow `script`."""
        # KWOK on shared cores marks a bound pod Running minutes late where a kubelet takes seconds
        spec: Job = {"runPolicy": {"startupTimeoutSeconds": 3600, "containerErrorGraceSeconds": 1800}}
        spec["runPolicy"] |= run_policy(**policy)
        if script is not None:
            spec["template"] = {"metadata": {"annotations": script.annotations()}}
            spec["container"] = {"resources": REQUESTS}
        return trainjob(name, replicas, **spec)

    def phase(self, status: dict[str, Any]) -> str:
        return status.get("phase", "")

    def requests(self, found: measure.Samples) -> Counts:
        """The operator's own API requests so far, by the labels of `requests_by`."""
        return measure.grouped(found, self.requests_metric, *self.requests_by)

    def queue_stats(self, before: measure.Samples, after: measure.Samples) -> dict[str, Any]:
        grown = measure.delta(before, after)
        queued, reconciles = measure.histogram(grown, self.queue), measure.grouped(grown, self.reconciles)
        out = {"queued": queued["count"], "mean_s": queued["mean_s"], "p95_bucket_le_s": queued["p95_le_s"]}
        return out | {"reconciles": int(sum(reconciles.values()))}

    def restarted_size(self, replicas: int) -> int:
        return replicas  # the whole group is created again

    def restarts(self, statuses: dict[str, dict], watcher: Watcher, namespace: str) -> dict[str, int]:
        return {job: status.get("restarts", 0) for job, status in statuses.items()}

    def wrong_size(self, watcher: Watcher, namespace: str, replicas: int) -> list[str]:
        """`job/group` of each group without exactly `replicas` worker indices."""
        return [f"{j}/{g}" for (_, j, g), seen in watcher.workers(namespace).items() if len(seen) != replicas]


class Peer(Ours):
    name = "training-operator"
    what = f"Kubeflow training-operator {PEER_VERSION} (TFJob only), as a local process, its defaults"
    group, version, plural = "kubeflow.org", "v1", "tfjobs"
    job_label = "training.kubeflow.org/job-name"
    keys = watch.Keys(job_label, job_label, "training.kubeflow.org/replica-index", None)
    metrics_prefix, depth = "", "workqueue_depth"
    queue, reconciles = "workqueue_queue_duration_seconds", "controller_runtime_reconcile_total"
    requests_metric, requests_by = "rest_client_requests_total", ("method", "code")  # one client-go for all
    api_source = "its own rest_client_requests_total (client-go), by method and code: no resource label"
    service_a_pod = True
    # condition -> the phase ours would say, the first true one in this order
    PHASES = (("Failed", "Failed"), ("Succeeded", "Succeeded"), ("Restarting", "Restarting"))
    PHASES += (("Running", "Running"), ("Suspended", "Suspended"), ("Created", "Pending"))

    def job(self, name: str, replicas: int, script: WorkerScript | None = None, **policy: Any) -> Job:
        """A TFJob of the TrainJob's shape. Restart policy OnFailure: v1.8.1 creates a Failed worker's pod
        again under its name (under ExitCode, the lost worker's exit 75 would fail the job). The label
        managed-by=training-operator is what our KWOK Stages select on."""
        container: dict[str, Any] = {"name": "tensorflow", "image": NEVER_PULLED}  # its exit code is read
        template: dict[str, Any] = {"spec": {"containers": [container]}}
        if script is not None:
            container["resources"] = REQUESTS
            labels = {names.LABEL_MANAGED_BY: "training-operator"}
            template["metadata"] = {"labels": labels, "annotations": script.annotations()}
        worker = {"replicas": replicas, "restartPolicy": "OnFailure", "template": template}
        spec = {"runPolicy": run_policy(**policy), "tfReplicaSpecs": {"Worker": worker}}
        head = {"apiVersion": f"{self.group}/{self.version}", "kind": "TFJob", "metadata": {"name": name}}
        return head | {"spec": spec}

    def phase(self, status: dict[str, Any]) -> str:
        """The phase ours would say for a TFJob's status ("" before its first condition)."""
        true = {c.get("type") for c in status.get("conditions") or () if c.get("status") == "True"}
        return next((ours for condition, ours in self.PHASES if condition in true), "")

    def restarted_size(self, replicas: int) -> int:
        return 1  # the lost worker's pod alone, under its old name

    def restarts(self, statuses: dict[str, dict], watcher: Watcher, namespace: str) -> dict[str, int]:
        """Pods created again per job (a TFJob's status keeps no count)."""
        out = dict.fromkeys(statuses, 0)
        for (_, job, group), records in watcher.groups(namespace).items():
            out[job] = out.get(job, 0) + (len(records) if group != "0" else 0)
        return out

    def wrong_size(self, watcher: Watcher, namespace: str, replicas: int) -> list[str]:
        indices: dict[str, set[str]] = {}
        for (_, job, _), seen in watcher.workers(namespace).items():
            indices.setdefault(job, set()).update(seen)
        return [job for job, found in indices.items() if len(found) != replicas]


OPERATORS = {"mwms": Ours(), "training-operator": Peer()}


def build_peer() -> Path:
    """The install folder of training-operator (bin/, crds/), built on first use."""
    return built(BUILD_PEER.name, env={"TRAINING_OPERATOR_VERSION": PEER_VERSION})


class PeerProcess:
    """training-operator with its TFJob controller only, its defaults otherwise, on local ports, without its
    validating webhook configuration (the API server does not call it). As a Secret volume would, a thread
    copies the cert its rotator writes to the path its webhook server reads."""

    def __init__(self, peer_dir: Path, kubeconfig: Path, core: Any, log_path: Path) -> None:
        self.peer_dir, self.kubeconfig, self.core, self.log_path = peer_dir, kubeconfig, core, log_path
        self.metrics_port, self.probe_port = free_port(), free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self._stop_cert = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._copy_cert, daemon=True).start()
        argv = [str(self.peer_dir / "bin" / "training-operator.v1"), "--enable-scheme=tfjob"]
        argv += ["--zap-log-level=error", f"--webhook-server-port={free_port()}"]
        argv += [f"--metrics-bind-address=127.0.0.1:{self.metrics_port}"]
        argv += [f"--health-probe-bind-address=127.0.0.1:{self.probe_port}"]
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(argv, env=env, cwd=self.log_path.parent, stdout=log, stderr=log)

    def ready(self) -> bool:
        """Its controllers start once its webhook cert is in place."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.probe_port}/readyz", timeout=2) as answer:
                return answer.status == 200
        except OSError:
            return False

    def _copy_cert(self) -> None:
        while not self._stop_cert.wait(0.5):
            try:
                data = self.core.read_namespaced_secret(PEER_SECRET[1], PEER_SECRET[0]).data or {}
            except kubernetes.client.ApiException:
                continue
            if "tls.crt" in data and "tls.key" in data:
                PEER_CERT_DIR.mkdir(parents=True, exist_ok=True)
                for name in ("tls.crt", "tls.key"):
                    (PEER_CERT_DIR / name).write_bytes(base64.b64decode(data[name]))
                return

    def stop(self) -> None:
        self._stop_cert.set()
        if self.process is not None:
            stop_process(self.process, 30)
        for name in ("tls.crt", "tls.key"):
            (PEER_CERT_DIR / name).unlink(missing_ok=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")
