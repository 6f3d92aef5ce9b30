"""Fault experiments on the local control plane: one function per experiment, one dict per trial.

Used by bench/chaos/run.py (full runs, results file) and by the CI wrapper
tests/integration/operator/test_operator_chaos_short.py (short runs, outcomes asserted). Each trial runs
in a namespace of its own. What a trial observes comes from a watch on the job's pods (every pod version,
so a duplicate cannot slip between two polls) and from the TrainJob's final status; faults are real:
SIGKILL of a worker's process, of the operator, of a real node; an MLflow server that hangs or is absent.

`Lab` is what an experiment needs: `kubectl` (admin; called as kubectl(*args, input=, check=) and
kubectl.json(*args)), `operator` (start(), kill(), process, log()), `cluster` (a LocalCluster), the
workers' container fields (image, command; None: the real trainer image, i.e. `python -m mwms_trainer`) and a
seeded random.Random.
"""

from __future__ import annotations

import copy
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes

from mwms_contract.names import MLFLOW_TAG_JOB_UID

GROUP, VERSION, PLURAL = "mwms.dev", "v1alpha1", "trainjobs"
JOB_LABEL = "mwms.dev/job-name"


@dataclass
class Lab:
    kubectl: Any
    operator: Any
    cluster: Any
    worker: dict[str, Any] | None  # the `trainer` container's image and command; None: the real trainer
    rng: random.Random
    mlflow: MlflowServer | None = None
    trainer_epochs: int = 3
    # The stand-in worker, for experiments about the operator alone (operator kill, lost node).
    standin: dict[str, Any] | None = None
    # Put before every namespace an experiment makes: the test suite's shard ("a-"), whose operators watch
    # only namespaces that start with it.
    namespace_prefix: str = ""

    def __post_init__(self) -> None:
        if self.standin is None:
            self.standin = self.worker
        client = kubernetes.config.new_client_from_config(str(self.cluster.kubeconfig))
        self.core = kubernetes.client.CoreV1Api(client)
        self.custom = kubernetes.client.CustomObjectsApi(client)

    @property
    def real_trainer(self) -> bool:
        return self.worker is None


# --- a real mlflow server ---------------------------------------------------------------------------------


class MlflowServer:
    """`mlflow server` (sqlite, one worker) on the pod bridge's gateway, where pods and we both reach it."""

    def __init__(self, host: str, port: int, workdir: Path) -> None:
        self.host, self.port, self.workdir = host, port, workdir
        self.uri = f"http://{host}:{port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 180) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        argv = [
            sys.executable, "-m", "mlflow", "server", "--host", self.host, "--port", str(self.port),
            "--workers", "1", "--backend-store-uri", f"sqlite:///{self.workdir}/mlflow.db",
            "--default-artifact-root", str(self.workdir / "artifacts"),
            "--allowed-hosts", f"{self.host}:{self.port},{self.host}",
        ]  # fmt: skip
        log = (self.workdir / "mlflow.log").open("ab")
        self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        wait(self.healthy, timeout, "mlflow server /health")

    def healthy(self) -> bool:
        assert self.process is not None and self.process.poll() is None, "mlflow server exited"
        try:
            with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def pause(self) -> None:
        """SIGSTOP: connections are accepted by the kernel but nothing answers (a hung server)."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGCONT)
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)
        self.process = None

    def runs_of_job(self, job_uid: str, uri: str | None = None) -> list[dict[str, Any]]:
        """Every run in every experiment tagged with the job's uid."""
        base = uri or self.uri
        experiments = call_json(f"{base}/api/2.0/mlflow/experiments/search", {"max_results": 1000})
        ids = [e["experiment_id"] for e in experiments.get("experiments", [])]
        if not ids:
            return []
        found = call_json(
            f"{base}/api/2.0/mlflow/runs/search",
            {
                "experiment_ids": ids,
                "filter": f"tags.`{MLFLOW_TAG_JOB_UID}` = '{job_uid}'",
                "max_results": 100,
            },
        )
        return found.get("runs", [])


def call_json(url: str, payload: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"{}")


# --- helpers ----------------------------------------------------------------------------------------------


def wait(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.3) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
    return result


def new_namespace(lab: Lab, prefix: str) -> str:
    name = f"{lab.namespace_prefix}{prefix}-{uuid.uuid4().hex[:6]}"
    lab.kubectl("create", "namespace", name)
    wait(
        lambda: lab.kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode == 0,
        60,
        f"serviceaccount default in {name}",
    )
    return name


def drop_namespace(lab: Lab, namespace: str) -> None:
    lab.kubectl("delete", "trainjobs", "--all", "-n", namespace, "--wait=true", "--timeout=60s", check=False)
    lab.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def checkpoint_claim(lab: Lab, namespace: str, name: str = "checkpoint") -> dict[str, Any]:
    """A PVC (bound by the node's default StorageClass; ReadWriteOnce: all of a job's pods share one node)
    and the spec.checkpoint that mounts it."""
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    lab.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(claim))
    return {"persistentVolumeClaim": {"claimName": name}}


def trainjob(
    lab: Lab,
    name: str,
    replicas: int,
    *,
    env: dict[str, str] | None = None,
    tracking_uri: str | None = None,
    checkpoint: dict[str, Any] | None = None,
    run_policy: dict[str, Any] | None = None,
    tolerations: list[dict[str, Any]] | None = None,
    node_selector: dict[str, str] | None = None,
    standin: bool = False,
) -> dict[str, Any]:
    """A TrainJob of the lab's workers (the real trainer when lab.worker is None), or of the stand-in
    worker with `standin`."""
    fields = lab.standin if standin else lab.worker
    container: dict[str, Any] = {
        "name": "trainer",
        **copy.deepcopy(fields or {}),
        "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
    }
    pod_spec: dict[str, Any] = {"containers": [container]}
    if tolerations:
        pod_spec["tolerations"] = tolerations
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    spec: dict[str, Any] = {
        "replicas": replicas,
        "template": {"spec": pod_spec},
        "runPolicy": {"cleanPodPolicy": "None", "backoffLimit": 5, **(run_policy or {})},
    }
    if fields is None:
        # Small and quick on 2 cores; the global batch splits evenly across the workers.
        spec["trainer"] = {"dataset": "breast_cancer", "seed": 42, "epochs": lab.trainer_epochs,
                           "globalBatchSize": 32}  # fmt: skip
    else:
        spec["trainer"] = {"epochs": lab.trainer_epochs}
    if tracking_uri:
        spec["mlflow"] = {"trackingUri": tracking_uri, "experiment": f"chaos-{name}"}
    if checkpoint:
        spec["checkpoint"] = checkpoint
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainJob", "metadata": {"name": name}, "spec": spec}


def apply(lab: Lab, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    lab.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(body))
    return get_job(lab, namespace, body["metadata"]["name"])


def get_job(lab: Lab, namespace: str, name: str) -> dict[str, Any]:
    return lab.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)


def condition(job: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in job.get("status", {}).get("conditions", []) if c["type"] == type_), {})


def wait_finished(lab: Lab, namespace: str, name: str, timeout: float) -> dict[str, Any]:
    def finished() -> dict[str, Any] | None:
        job = get_job(lab, namespace, name)
        return job if job.get("status", {}).get("phase") in ("Succeeded", "Failed") else None

    return wait(finished, timeout, f"{namespace}/{name} to finish", interval=0.5)


@dataclass
class PodWatch:
    """Every version of the job's pods, from a watch: which pod uids existed per (restart, index)."""

    lab: Lab
    namespace: str
    job: str
    seen: dict[tuple[int, int], set[str]] = field(default_factory=dict)
    live: dict[str, tuple[str, bool]] = field(default_factory=dict)  # uid -> (phase, deleting)
    max_active: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        selector = f"{JOB_LABEL}={self.job}"
        while not self.stop.is_set():
            watch = kubernetes.watch.Watch()
            try:
                for event in watch.stream(
                    self.lab.core.list_namespaced_pod,
                    self.namespace,
                    label_selector=selector,
                    timeout_seconds=5,
                ):
                    self._record(event["type"], event["object"])
                    if self.stop.is_set():
                        break
            except Exception:  # noqa: BLE001 (a broken watch is simply restarted)
                time.sleep(0.2)
            finally:
                watch.stop()

    def _record(self, kind: str, pod: Any) -> None:
        labels = pod.metadata.labels or {}
        key = (int(labels.get("mwms.dev/restart", "0")), int(labels.get("mwms.dev/replica-index", "-1")))
        self.seen.setdefault(key, set()).add(pod.metadata.uid)
        if kind == "DELETED":
            self.live.pop(pod.metadata.uid, None)
        else:
            self.live[pod.metadata.uid] = (
                pod.status.phase or "Pending",
                pod.metadata.deletion_timestamp is not None,
            )
        active = sum(
            1 for phase, deleting in self.live.values() if phase in ("Pending", "Running") and not deleting
        )
        self.max_active = max(self.max_active, active)

    def close(self) -> dict[str, Any]:
        self.stop.set()
        self.thread.join(timeout=15)
        duplicates = {
            f"restart {r} worker {i}": len(uids) for (r, i), uids in self.seen.items() if len(uids) > 1
        }
        return {"pod_duplicates": duplicates, "max_active_pods": self.max_active}


def running_group(lab: Lab, namespace: str, job: str, replicas: int, restart: int = 0) -> bool:
    pods = lab.core.list_namespaced_pod(namespace, label_selector=f"{JOB_LABEL}={job}").items
    return (
        sum(
            1
            for p in pods
            if p.status.phase == "Running"
            and (p.metadata.labels or {}).get("mwms.dev/restart") == str(restart)
            and p.metadata.deletion_timestamp is None
        )
        == replicas
    )


def worker_pid(job_uid: str, index: int) -> int | None:
    """The pid of worker `index` of the job: the process whose environment holds the job's uid and whose
    TF_CONFIG names that index (pods are local processes; podexec execs the container's command)."""
    marker = f"MWMS_JOB_UID={job_uid}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker not in environ:
            continue
        for item in environ:
            if item.startswith(b"TF_CONFIG="):
                task = json.loads(item[len(b"TF_CONFIG=") :])["task"]
                if task["index"] == index:
                    return int(entry.name)
    return None


def job_runs(lab: Lab, uid: str, tracking_uri: str | None = None) -> int | None:
    if lab.mlflow is None:
        return None
    return len(lab.mlflow.runs_of_job(uid, tracking_uri))


def epochs_done(lab: Lab, uid: str) -> int:
    """Finished epochs of the job's run (the highest metric step + 1; 0 before the run or its first epoch)."""
    assert lab.mlflow is not None
    try:
        runs = lab.mlflow.runs_of_job(uid)
    except OSError:
        return 0
    steps = [m.get("step", 0) for r in runs for m in r["data"].get("metrics", [])]
    return max(steps) + 1 if steps else 0


def resume_tags(lab: Lab, uid: str) -> dict[str, str]:
    """The trainer's restart bookkeeping on its run: which restart finished it, which epoch it resumed at."""
    if lab.mlflow is None:
        return {}
    runs = lab.mlflow.runs_of_job(uid)
    tags = {t["key"]: t["value"] for t in (runs[0]["data"].get("tags", []) if runs else [])}
    return {k: v for k, v in tags.items() if k in ("mwms.dev/restart-count", "mwms.dev/resumed-from-epoch")}


def chief_metrics(lab: Lab, namespace: str, job: str) -> dict[str, Any]:
    try:
        pod = lab.core.read_namespaced_pod(f"{job}-worker-0", namespace)
        message = pod.status.container_statuses[0].state.terminated.message
        return json.loads(message).get("metrics", {})
    except (kubernetes.client.exceptions.ApiException, AttributeError, IndexError, TypeError, ValueError):
        return {}


def outcome(lab: Lab, namespace: str, name: str, job: dict[str, Any], watch: PodWatch) -> dict[str, Any]:
    status = job.get("status", {})
    failed = condition(job, "Failed")
    result = {
        "phase": status.get("phase"),
        "restarts": status.get("restarts"),
        "failed_reason": failed.get("reason") if failed.get("status") == "True" else None,
        "failed_message": failed.get("message") if failed.get("status") == "True" else None,
        "status_complete": bool(
            status.get("startTime") and condition(job, "Created").get("status") == "True"
        ),
        **watch.close(),
    }
    if status.get("phase") == "Succeeded":
        result["status_complete"] = result["status_complete"] and bool(status.get("completionTime"))
    return result


# --- experiments -------------------------------------------------------------------------------------------


def worker_kill(lab: Lab, *, chief: bool = False, replicas: int = 2, timeout: float = 600) -> dict[str, Any]:
    """SIGKILL one worker (random, or the chief) at a random moment once the group runs; checkpoint on a
    PVC. Expect: whole group restarted, Succeeded, one MLflow run (when a server is up)."""
    namespace = new_namespace(lab, "chaos-chief" if chief else "chaos-worker")
    name = "victim"
    try:
        claim = checkpoint_claim(lab, namespace)
        env = {} if lab.real_trainer else {"STANDIN_SLEEP_SECONDS": "8"}
        tracking = lab.mlflow.uri if lab.mlflow else None
        if tracking and not lab.real_trainer:
            env.update(STANDIN_MLFLOW="1", STANDIN_EPOCH_SECONDS="0.2")
        watch = PodWatch(lab, namespace, name)
        started = time.monotonic()
        job = apply(
            lab, namespace, trainjob(lab, name, replicas, env=env, tracking_uri=tracking, checkpoint=claim)
        )
        wait(lambda: running_group(lab, namespace, name, replicas), 300, "the group running")
        index = 0 if chief else lab.rng.randrange(replicas)
        kill_epoch = None
        if lab.real_trainer and lab.mlflow is not None:
            # Mid-fit, at a random epoch: the chief's run shows each finished epoch as a metric step.
            kill_epoch = lab.rng.randint(2, max(2, lab.trainer_epochs * 2 // 3))
            wait(
                lambda: epochs_done(lab, job["metadata"]["uid"]) >= kill_epoch,
                300,
                f"epoch {kill_epoch} in MLflow",
                interval=0.1,
            )
            delay = time.monotonic() - started
        else:
            delay = lab.rng.uniform(0.5, 6)
            time.sleep(delay)
        pid = worker_pid(job["metadata"]["uid"], index)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        job = wait_finished(lab, namespace, name, timeout)
        finished = time.monotonic()  # before outcome(): closing the pod watch takes up to 5 s
        result = outcome(lab, namespace, name, job, watch)
        result.update(
            killed_worker=index,
            kill_delay_s=round(delay, 2),
            kill_after_epoch=kill_epoch,
            kill_landed=pid is not None,
            seconds_to_finish_after_kill=round(finished - killed_at, 1),
            seconds_total=round(finished - started, 1),
            mlflow_runs=job_runs(lab, job["metadata"]["uid"]),
            run_tags=resume_tags(lab, job["metadata"]["uid"]),
            metrics=chief_metrics(lab, namespace, name),
        )
        result["ok"] = (
            result["phase"] == "Succeeded"
            and not result["pod_duplicates"]
            and result["max_active_pods"] <= replicas
            and (not result["kill_landed"] or (result["restarts"] or 0) >= 1)
            and result["mlflow_runs"] in (None, 1)
        )
        return result
    finally:
        drop_namespace(lab, namespace)


def undisturbed(lab: Lab, replicas: int = 2, timeout: float = 600) -> dict[str, Any]:
    """The same job without a fault: the reference for the accuracy after a kill."""
    namespace = new_namespace(lab, "chaos-ref")
    try:
        claim = checkpoint_claim(lab, namespace)
        tracking = lab.mlflow.uri if lab.mlflow else None
        watch = PodWatch(lab, namespace, "reference")
        started = time.monotonic()
        apply(lab, namespace, trainjob(lab, "reference", replicas, tracking_uri=tracking, checkpoint=claim))
        job = wait_finished(lab, namespace, "reference", timeout)
        finished = time.monotonic()
        result = outcome(lab, namespace, "reference", job, watch)
        result.update(
            seconds_total=round(finished - started, 1),
            metrics=chief_metrics(lab, namespace, "reference"),
        )
        result["ok"] = result["phase"] == "Succeeded" and result["restarts"] == 0
        return result
    finally:
        drop_namespace(lab, namespace)


def operator_kill(lab: Lab, *, replicas: int = 3, timeout: float = 300) -> dict[str, Any]:
    """SIGKILL the operator at a random moment of a job's life (which includes one group restart: worker 1
    exits 75 once, remembered on the checkpoint PVC), start it again after a random pause. Expect: no pod
    created twice, restarts exactly 1 (nothing lost, nothing repeated), Succeeded."""
    namespace = new_namespace(lab, "chaos-operator")
    name = "steady"
    try:
        claim = checkpoint_claim(lab, namespace)
        env = {
            "STANDIN_SLEEP_SECONDS": "4",
            "STANDIN_FAIL_INDEX": "1",
            "STANDIN_EXIT_CODE": "75",
            "STANDIN_FAIL_ONCE_FILE": "/mwms/checkpoint/failed-once",
        }
        watch = PodWatch(lab, namespace, name)
        # The job lives ~8-10 s here (two groups of ~4 s): kill within that, pause 0-3 s.
        delay, pause = lab.rng.uniform(0, 8), lab.rng.uniform(0, 3)
        started = time.monotonic()
        apply(lab, namespace, trainjob(lab, name, replicas, env=env, checkpoint=claim, standin=True))
        time.sleep(delay)
        phase_at_kill = get_job(lab, namespace, name).get("status", {}).get("phase")
        lab.operator.kill()
        time.sleep(pause)
        lab.operator.start()
        job = wait_finished(lab, namespace, name, timeout)
        finished = time.monotonic()  # before outcome(): closing the pod watch takes up to 5 s
        result = outcome(lab, namespace, name, job, watch)
        result.update(
            kill_delay_s=round(delay, 2),
            operator_down_s=round(pause, 2),
            phase_at_kill=phase_at_kill,
            seconds_total=round(finished - started, 1),
        )
        result["ok"] = (
            result["phase"] == "Succeeded"
            and result["restarts"] == 1
            and not result["pod_duplicates"]
            and result["max_active_pods"] <= replicas
            and result["status_complete"]
        )
        return result
    finally:
        drop_namespace(lab, namespace)


def mlflow_hung_at_start(lab: Lab, replicas: int = 2, timeout: float = 600) -> dict[str, Any]:
    """The tracking server hangs (SIGSTOP) when the job starts, and comes back once the group has been
    restarted. Expect: the chief gives up (exit 75) after bounded retries, the group restarts, the job
    Succeeds with exactly one MLflow run."""
    assert lab.mlflow is not None
    namespace = new_namespace(lab, "chaos-mlflow")
    name = "tracked"
    env = {} if lab.real_trainer else {"STANDIN_MLFLOW": "1", "STANDIN_EPOCH_SECONDS": "0.2"}
    try:
        claim = checkpoint_claim(lab, namespace)
        watch = PodWatch(lab, namespace, name)
        started = time.monotonic()
        lab.mlflow.pause()
        try:
            body = trainjob(
                lab, name, replicas, env=env, tracking_uri=lab.mlflow.uri, checkpoint=claim,
                run_policy={"backoffLimit": 6},
            )  # fmt: skip
            job = apply(lab, namespace, body)
            wait(
                lambda: (
                    (get_job(lab, namespace, name).get("status", {}).get("restarts") or 0) >= 1
                    or get_job(lab, namespace, name).get("status", {}).get("phase") in ("Succeeded", "Failed")
                ),
                timeout,
                "a group restart",
            )
            down_for = time.monotonic() - started
        finally:
            lab.mlflow.resume()
        job = wait_finished(lab, namespace, name, timeout)
        finished = time.monotonic()  # before outcome(): closing the pod watch takes up to 5 s
        result = outcome(lab, namespace, name, job, watch)
        restarting = [e for e in events(lab, namespace, name) if e[1] == "GroupRestarting"]
        result.update(
            mlflow_down_s=round(down_for, 1),
            first_restart_message=restarting[0][2] if restarting else None,
            seconds_total=round(finished - started, 1),
            mlflow_runs=job_runs(lab, job["metadata"]["uid"]),
        )
        result["ok"] = (
            result["phase"] == "Succeeded"
            and (result["restarts"] or 0) >= 1
            and result["mlflow_runs"] == 1
            and "75" in (result["first_restart_message"] or "")
            and not result["pod_duplicates"]
        )
        return result
    finally:
        drop_namespace(lab, namespace)


def mlflow_absent(lab: Lab, replicas: int = 2, timeout: float = 600) -> dict[str, Any]:
    """No tracking server at all (a closed port): bounded retries, exit 75, group restarts until the
    backoff limit, then Failed with a message that says why. Never a run."""
    from mwms_dev.cluster import free_port

    namespace = new_namespace(lab, "chaos-nomlflow")
    name = "untracked"
    uri = f"http://{lab.cluster.pod_api_host}:{free_port()}"
    env = {} if lab.real_trainer else {"STANDIN_MLFLOW": "1"}
    try:
        watch = PodWatch(lab, namespace, name)
        started = time.monotonic()
        apply(
            lab,
            namespace,
            trainjob(lab, name, replicas, env=env, tracking_uri=uri, run_policy={"backoffLimit": 1}),
        )
        job = wait_finished(lab, namespace, name, timeout)
        finished = time.monotonic()  # before outcome(): closing the pod watch takes up to 5 s
        result = outcome(lab, namespace, name, job, watch)
        result.update(seconds_total=round(finished - started, 1))
        result["ok"] = (
            result["phase"] == "Failed"
            and result["failed_reason"] == "BackoffLimitExceeded"
            and "code 75" in (result["failed_message"] or "")
            and result["restarts"] == 1
        )
        return result
    finally:
        drop_namespace(lab, namespace)


def node_lost(lab: Lab, replicas: int = 2, timeout: float = 420) -> dict[str, Any]:
    """A real node dies under a running job: SIGKILL of node-1's kubelet, containerd, shims and pods at once
    (KubeletNode.kill). The group runs on node-1 (node-2 is cordoned until it does). The node lifecycle
    controller marks node-1 unknown after the controller manager's node-monitor-grace-period (default 50 s;
    the launcher does not change it) and evicts the pods after their toleration of
    node.kubernetes.io/unreachable (300 s by default; this job tolerates 5 s). A dead kubelet never confirms
    a deletion, so the evicted pods stay Terminating until someone declares the machine gone: here, as an
    administrator would (Kubernetes' non-graceful node shutdown), the taint node.kubernetes.io/out-of-service,
    after which the pod garbage collector force-deletes them. Expect: the operator recreates the whole group
    on node-2 and the job succeeds (the stand-in sleeps only in the first group)."""
    namespace = new_namespace(lab, "chaos-node")
    name = "stranded"
    tolerations = [
        {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}
        for key in ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
    ]
    env = {"STANDIN_SLEEP_SECONDS": "600", "STANDIN_SLEEP_IN_RESTART": "0"}
    lost = lab.cluster.kubelet_nodes["node-1"]
    result: dict[str, Any] = {}

    def pods() -> list[Any]:
        return lab.core.list_namespaced_pod(namespace, label_selector=f"{JOB_LABEL}={name}").items

    def node_ready() -> str:
        node = lab.core.read_node("node-1")
        return next((c.status for c in node.status.conditions if c.type == "Ready"), "?")

    try:
        watch = PodWatch(lab, namespace, name)
        lab.kubectl("cordon", "node-2")
        try:
            apply(
                lab, namespace, trainjob(lab, name, replicas, env=env, tolerations=tolerations, standin=True)
            )
            wait(lambda: running_group(lab, namespace, name, replicas), 300, "the group running on node-1")
        finally:
            lab.kubectl("uncordon", "node-2")
        lost.kill()
        killed = time.monotonic()
        wait(lambda: node_ready() != "True", 180, "node-1 to leave Ready")
        result["node_not_ready_after_s"] = round(time.monotonic() - killed, 1)
        wait(lambda: any(p.metadata.deletion_timestamp for p in pods()), 180, "the pods evicted")
        result["pods_evicted_after_s"] = round(time.monotonic() - killed, 1)
        result["phase_while_node_lost"] = get_job(lab, namespace, name).get("status", {}).get("phase")
        taint = "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"
        lab.kubectl("taint", "node", "node-1", taint)
        result["out_of_service_after_s"] = round(time.monotonic() - killed, 1)
        # Created and bound to a node: the new group may finish too fast to be seen Running.
        nodes = wait(lambda: new_group_nodes(pods(), replicas), timeout, "the group recreated")
        result["group_recreated_after_s"] = round(time.monotonic() - killed, 1)
        result["recreated_on"] = sorted(set(nodes))
        job = wait_finished(lab, namespace, name, timeout)
        result["finished_after_s"] = round(time.monotonic() - killed, 1)
        result.update(outcome(lab, namespace, name, job, watch))
        result["finished"] = result["phase"]
        result["ok"] = (
            result["phase"] == "Succeeded"
            and result["restarts"] == 1
            and result["recreated_on"] == ["node-2"]
            and not result["pod_duplicates"]
        )
        return result
    except TimeoutError as error:
        result.update(ok=False, error=str(error))
        return result
    finally:
        drop_namespace(lab, namespace)


def new_group_nodes(pods: list[Any], replicas: int, restart: int = 1) -> list[str] | None:
    """The nodes of the group `restart`'s pods once all `replicas` are bound to one, else None."""
    nodes = [
        p.spec.node_name
        for p in pods
        if (p.metadata.labels or {}).get("mwms.dev/restart") == str(restart) and p.spec.node_name
    ]
    return nodes if len(nodes) == replicas else None


def events(lab: Lab, namespace: str, name: str) -> list[tuple[str, str, str]]:
    items = lab.core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.kind=TrainJob,involvedObject.name={name}"
    ).items
    return [(e.type, e.reason, e.message) for e in sorted(items, key=lambda e: e.metadata.creation_timestamp)]
