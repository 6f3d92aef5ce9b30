"""Fault experiments on real kubelet nodes, one function each, one dict per trial in a namespace of its own:
SIGKILL of a worker, of the chief, of the operator (back 0-3 s later), of a whole node; a tracking server
that hangs (SIGSTOP) or is not there. One pod watch (watch.PodWatcher) sees every pod, so a worker with two
pods alive at once is counted. The `chaos` scenario runs them in full, the integration tier's
test_operator_chaos_short.py short, with stand-in workers."""

from __future__ import annotations

import json
import os
import random
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes

from mwms_bench.measure import since, wait
from mwms_bench.watch import PodWatcher
from mwms_contract import names
from mwms_dev.chain import runs_of_job
from mwms_dev.cluster import free_port
from mwms_kit.mlflow_server import MlflowServer
from mwms_kit.trainjobs import trainjob

Result = dict[str, Any]
RESUME_TAGS = ("mwms.dev/restart-count", "mwms.dev/resumed-from-epoch")


@dataclass
class FaultLab:
    """What an experiment needs: kubectl (admin: `kubectl(*args, input=, check=)`), the operator (start(),
    kill()), the cluster, the workers' container fields (None: the real trainer, `python -m mwms_trainer`),
    a seeded random.Random, the MLflow server, and the stand-in's fields for the operator-only experiments."""

    kubectl: Any
    operator: Any
    cluster: Any
    worker: dict[str, Any] | None
    rng: random.Random
    mlflow: MlflowServer | None = None
    trainer_epochs: int = 3
    standin: dict[str, Any] | None = None
    namespace_prefix: str = ""  # a test shard's: its operators watch only namespaces with it
    reference: dict[str, Any] | None = None  # `undisturbed`'s result: a killed fit must end within 0.01 of it

    def __post_init__(self) -> None:
        self.standin = self.standin or self.worker
        api = kubernetes.config.new_client_from_config(str(self.cluster.kubeconfig))
        self.core, self.custom = kubernetes.client.CoreV1Api(api), kubernetes.client.CustomObjectsApi(api)
        self.watcher = PodWatcher(self.core).start()


class Trial:
    """One trial's namespace (deleted at its end) and its job."""

    def __init__(self, lab: FaultLab, prefix: str, job: str) -> None:
        self.lab, self.job = lab, job
        self.ns = f"{lab.namespace_prefix}{prefix}-{uuid.uuid4().hex[:6]}"
        lab.kubectl("create", "namespace", self.ns)
        account = lambda: lab.kubectl("get", "sa", "default", "-n", self.ns, check=False).returncode == 0  # noqa: E731
        wait(account, 60, f"{self.ns}'s ServiceAccount")
        self.started = time.monotonic()

    def __enter__(self) -> Trial:
        return self

    def __exit__(self, *exc: object) -> None:
        kubectl = self.lab.kubectl
        kubectl("delete", "trainjobs", "--all", "-n", self.ns, "--wait=true", "--timeout=60s", check=False)
        kubectl("delete", "namespace", self.ns, "--wait=false", check=False)

    def checkpoint(self) -> dict[str, Any]:
        """A PVC (ReadWriteOnce: all of a job's pods share one node) and the spec.checkpoint mounting it."""
        storage = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
        claim = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "ckpt"},
            "spec": storage,
        }
        self.lab.kubectl("apply", "-n", self.ns, "-f", "-", input=json.dumps(claim))
        return {"persistentVolumeClaim": {"claimName": "ckpt"}}

    def apply(self, replicas: int, *, env: dict | None = None, standin: bool = False, uri: str | None = None,
              pod: dict | None = None, **spec: Any) -> dict[str, Any]:  # fmt: skip
        """The job of the lab's workers (the stand-in's with `standin`; `uri`: its tracking server), applied;
        its stored object."""
        fields = self.lab.standin if standin else self.lab.worker
        spec["runPolicy"] = {"cleanPodPolicy": "None", "backoffLimit": 5, **spec.get("runPolicy", {})}
        spec["trainer"] = {"epochs": self.lab.trainer_epochs}
        if fields is None:  # small and quick on 2 cores; the global batch splits evenly
            spec["trainer"] |= {"dataset": "breast_cancer", "seed": 42, "globalBatchSize": 32}
        if uri:
            spec["mlflow"] = {"trackingUri": uri, "experiment": f"chaos-{self.job}"}
        template = {"spec": pod or {}}
        body = trainjob(self.job, replicas, container=fields or {}, env=env or {}, template=template, **spec)
        self.lab.kubectl("apply", "-n", self.ns, "-f", "-", input=json.dumps(body))
        return self.get()

    def get(self) -> dict[str, Any]:
        get = self.lab.custom.get_namespaced_custom_object
        return get(names.GROUP, names.VERSION, self.ns, names.PLURAL, self.job)

    def pods(self, restart: int | None = None) -> list[Any]:
        selector = f"{names.LABEL_JOB_NAME}={self.job}"
        pods = self.lab.core.list_namespaced_pod(self.ns, label_selector=selector).items
        return [p for p in pods if restart is None or p.metadata.labels[names.LABEL_RESTART] == str(restart)]

    def running(self, replicas: int) -> bool:
        alive = [p for p in self.pods(restart=0) if not p.metadata.deletion_timestamp]
        return [p.status.phase for p in alive] == ["Running"] * replicas

    def finished(self, timeout: float) -> dict[str, Any]:
        def ended() -> dict[str, Any] | None:
            job = self.get()
            return job if job.get("status", {}).get("phase") in ("Succeeded", "Failed") else None

        return wait(ended, timeout, f"{self.ns}/{self.job} to finish", 0.5)

    def runs(self, uid: str) -> list[dict[str, Any]]:
        return [] if self.lab.mlflow is None else runs_of_job(self.lab.mlflow.url, uid)

    def outcome(self, job: dict[str, Any]) -> dict[str, Any]:
        """The job's end as its status and the pod watch tell it."""
        status = job.get("status", {})
        conditions = {c["type"]: c for c in status.get("conditions", [])}
        failed = conditions.get("Failed", {}) if conditions.get("Failed", {}).get("status") == "True" else {}
        complete = bool(status.get("startTime")) and conditions.get("Created", {}).get("status") == "True"
        complete = complete and (status.get("phase") != "Succeeded" or bool(status.get("completionTime")))
        out = {"phase": status.get("phase"), "restarts": status.get("restarts"), "status_complete": complete}
        out |= {"failed_reason": failed.get("reason"), "failed_message": failed.get("message")}
        most = max(self.lab.watcher.most_alive(self.ns).values(), default=0)
        out |= {"pod_duplicates": self.lab.watcher.duplicates(self.ns), "max_active_pods": most}
        return out | {"seconds_total": round(time.monotonic() - self.started, 1)}

    def chief_metrics(self) -> dict[str, Any]:
        """The metrics in the chief's termination message."""
        try:
            pod = self.lab.core.read_namespaced_pod(f"{self.job}-worker-0", self.ns)
            return json.loads(pod.status.container_statuses[0].state.terminated.message).get("metrics", {})
        except (kubernetes.client.ApiException, AttributeError, IndexError, TypeError, ValueError):
            return {}


def worker_pid(job_uid: str, index: int) -> int | None:
    """The pid of the job's worker `index`: the process whose environment holds the job's uid and whose
    TF_CONFIG names that index."""
    marker = f"MWMS_JOB_UID={job_uid}".encode()
    for entry in Path("/proc").iterdir():
        try:
            environ = (entry / "environ").read_bytes().split(b"\0") if entry.name.isdigit() else []
        except OSError:
            continue
        config = next((v[len(b"TF_CONFIG=") :] for v in environ if v.startswith(b"TF_CONFIG=")), None)
        if marker in environ and config and json.loads(config)["task"]["index"] == index:
            return int(entry.name)
    return None


def whole(result: dict[str, Any], replicas: int) -> bool:
    """No worker with two pods alive at once, never more pods of the job alive than replicas."""
    return not result["pod_duplicates"] and result["max_active_pods"] <= replicas


def epochs_done(trial: Trial, uid: str) -> int:
    """Finished epochs of the job's run (its highest metric step + 1)."""
    try:
        steps = [m.get("step", 0) for r in trial.runs(uid) for m in r["data"].get("metrics", [])]
    except OSError:
        return 0
    return max(steps) + 1 if steps else 0


def worker_kill(lab: FaultLab, *, chief: bool = False, replicas: int = 2, timeout: float = 600) -> Result:
    """SIGKILL one worker (random, or the chief) at a random moment once the group runs, checkpoint on a PVC.
    Expect: the whole group restarted, Succeeded, one MLflow run (when a server is up)."""
    with Trial(lab, "chaos-chief" if chief else "chaos-worker", "victim") as trial:
        env = {} if lab.worker is None else {"STANDIN_SLEEP_SECONDS": "8"}
        tracking = lab.mlflow.url if lab.mlflow else None
        if tracking and lab.worker is not None:
            env |= {"STANDIN_MLFLOW": "1", "STANDIN_EPOCH_SECONDS": "0.2"}
        job = trial.apply(replicas, env=env, uri=tracking, checkpoint=trial.checkpoint())
        uid = job["metadata"]["uid"]
        wait(lambda: trial.running(replicas), 300, "the group running")
        index, kill_epoch = 0 if chief else lab.rng.randrange(replicas), None
        if lab.worker is None and lab.mlflow is not None:  # mid-fit: each finished epoch is a metric step
            kill_epoch = lab.rng.randint(2, max(2, lab.trainer_epochs * 2 // 3))
            wait(lambda: epochs_done(trial, uid) >= kill_epoch, 300, f"epoch {kill_epoch} in MLflow", 0.1)
        else:
            time.sleep(lab.rng.uniform(0.5, 6))
        delay, pid = time.monotonic() - trial.started, worker_pid(uid, index)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        result = trial.outcome(trial.finished(timeout))
        tags = {t["key"]: t["value"] for r in trial.runs(uid)[:1] for t in r["data"].get("tags", [])}
        result |= {"killed_worker": index, "kill_delay_s": round(delay, 2), "kill_after_epoch": kill_epoch}
        result |= {"kill_landed": pid is not None, "seconds_to_finish_after_kill": since(killed_at, 1)}
        result |= {"mlflow_runs": len(trial.runs(uid)) if lab.mlflow else None}
        result |= {"metrics": trial.chief_metrics()}
        result["run_tags"] = {k: v for k, v in tags.items() if k in RESUME_TAGS}
        restarted = not result["kill_landed"] or (result["restarts"] or 0) >= 1
        ok = result["phase"] == "Succeeded" and whole(result, replicas) and restarted
        expected, got = ((r or {}).get("metrics", {}).get("val_accuracy") for r in (lab.reference, result))
        if expected is not None and got is not None:
            result["val_accuracy_diff"] = round(abs(got - expected), 6)
            ok = ok and result["val_accuracy_diff"] <= 0.01
        return result | {"ok": ok and result["mlflow_runs"] in (None, 1)}


def undisturbed(lab: FaultLab, replicas: int = 2, timeout: float = 600) -> Result:
    """The same job without a fault: the reference for the accuracy after a kill."""
    with Trial(lab, "chaos-ref", "reference") as trial:
        trial.apply(replicas, uri=lab.mlflow.url if lab.mlflow else None, checkpoint=trial.checkpoint())
        result = trial.outcome(trial.finished(timeout)) | {"metrics": trial.chief_metrics()}
        return result | {"ok": result["phase"] == "Succeeded" and result["restarts"] == 0}


def operator_kill(lab: FaultLab, *, replicas: int = 3, timeout: float = 300) -> Result:
    """SIGKILL the operator at a random moment of a job whose group restarts once (worker 1 exits 75 once,
    remembered on the checkpoint PVC), start it again after a random pause. Expect: no pod created twice,
    restarts exactly 1, Succeeded, its status complete."""
    with Trial(lab, "chaos-operator", "steady") as trial:
        env = {"STANDIN_SLEEP_SECONDS": "4", "STANDIN_FAIL_INDEX": "1", "STANDIN_EXIT_CODE": "75"}
        env["STANDIN_FAIL_ONCE_FILE"] = "/mwms/checkpoint/failed-once"
        delay, pause = lab.rng.uniform(0, 8), lab.rng.uniform(0, 3)  # the job lives ~8-10 s
        trial.apply(replicas, env=env, standin=True, checkpoint=trial.checkpoint())
        time.sleep(delay)
        phase_at_kill = trial.get().get("status", {}).get("phase")
        lab.operator.kill()
        time.sleep(pause)
        lab.operator.start()
        result = trial.outcome(trial.finished(timeout))
        result |= {"kill_delay_s": round(delay, 2), "operator_down_s": round(pause, 2)}
        result |= {"phase_at_kill": phase_at_kill}
        ok = result["phase"] == "Succeeded" and result["restarts"] == 1 and whole(result, replicas)
        return result | {"ok": ok and result["status_complete"]}


def mlflow_hung(lab: FaultLab, replicas: int = 2, timeout: float = 600) -> Result:
    """The tracking server hangs (SIGSTOP) as the job starts and comes back once the group restarted.
    Expect: the chief gives up (exit 75) after bounded retries, the group restarts, Succeeded, one run."""
    assert lab.mlflow is not None and lab.mlflow.process is not None
    env = {} if lab.worker is None else {"STANDIN_MLFLOW": "1", "STANDIN_EPOCH_SECONDS": "0.2"}
    with Trial(lab, "chaos-mlflow", "tracked") as trial:
        os.killpg(lab.mlflow.process.pid, signal.SIGSTOP)
        try:
            policy, claim = {"backoffLimit": 6}, trial.checkpoint()
            job = trial.apply(replicas, env=env, uri=lab.mlflow.url, checkpoint=claim, runPolicy=policy)
            status, ended = lambda: trial.get().get("status", {}), ("Succeeded", "Failed")
            wait(lambda: (s := status()).get("restarts") or s.get("phase") in ended, timeout, "a restart")
            down_for = since(trial.started, 1)
        finally:
            os.killpg(lab.mlflow.process.pid, signal.SIGCONT)
        result = trial.outcome(trial.finished(timeout))
        selector = f"involvedObject.name={trial.job}"
        events = lab.core.list_namespaced_event(trial.ns, field_selector=selector).items
        told = sorted(
            (e.metadata.creation_timestamp, e.message) for e in events if e.reason == "GroupRestarting"
        )
        first = told[0][1] if told else ""
        result |= {"mlflow_down_s": down_for, "first_restart_message": first}
        result["mlflow_runs"] = len(trial.runs(job["metadata"]["uid"]))
        restarted = (result["restarts"] or 0) >= 1 and not result["pod_duplicates"] and "75" in first
        return result | {"ok": result["phase"] == "Succeeded" and restarted and result["mlflow_runs"] == 1}


def mlflow_absent(lab: FaultLab, replicas: int = 2, timeout: float = 600) -> Result:
    """No tracking server (a closed port), backoffLimit 1: bounded retries, exit 75, one restart, then
    Failed with a message that says why."""
    env = {} if lab.worker is None else {"STANDIN_MLFLOW": "1"}
    with Trial(lab, "chaos-nomlflow", "untracked") as trial:
        uri = f"http://{lab.cluster.pod_api_host}:{free_port()}"
        trial.apply(replicas, env=env, uri=uri, runPolicy={"backoffLimit": 1})
        result = trial.outcome(trial.finished(timeout))
        said = "code 75" in (result["failed_message"] or "")
        why = result["failed_reason"] == "BackoffLimitExceeded" and said
        return result | {"ok": result["phase"] == "Failed" and why and result["restarts"] == 1}


def node_lost(lab: FaultLab, replicas: int = 2, timeout: float = 420) -> Result:
    """node-1's kubelet, containerd, shims and pods SIGKILLed at once under a running stand-in job (node-2
    cordoned until the group runs; the pods tolerate unreachable for 5 s). The evicted pods stay Terminating
    until the node is declared gone: the experiment taints it out-of-service, as an administrator would
    (non-graceful node shutdown). Expect: the group recreated on node-2, Succeeded, one restart."""
    keys = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
    tolerations = [
        {"key": k, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5} for k in keys
    ]
    env = {"STANDIN_SLEEP_SECONDS": "600", "STANDIN_SLEEP_IN_RESTART": "0"}
    result: dict[str, Any] = {}
    with Trial(lab, "chaos-node", "stranded") as trial:
        lab.kubectl("cordon", "node-2")
        try:
            trial.apply(replicas, env=env, standin=True, pod={"tolerations": tolerations})
            wait(lambda: trial.running(replicas), 300, "the group running on node-1")
        finally:
            lab.kubectl("uncordon", "node-2")
        lab.cluster.kubelet_nodes["node-1"].kill()
        killed = time.monotonic()

        def after(key: str, found: Any) -> Any:
            result[key] = round(time.monotonic() - killed, 1)
            return found

        def ready() -> str:
            return next(c.status for c in lab.core.read_node("node-1").status.conditions if c.type == "Ready")

        def new_group() -> list[str] | None:
            nodes = [p.spec.node_name for p in trial.pods(restart=1) if p.spec.node_name]
            return nodes if len(nodes) == replicas else None

        try:
            after("node_not_ready_after_s", wait(lambda: ready() != "True", 180, "node-1 to leave Ready"))
            evicted = lambda: any(p.metadata.deletion_timestamp for p in trial.pods())  # noqa: E731
            after("pods_evicted_after_s", wait(evicted, 180, "the pods evicted"))
            result["phase_while_node_lost"] = trial.get().get("status", {}).get("phase")
            lab.kubectl("taint", "node", "node-1", "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute")
            after("out_of_service_after_s", None)
            nodes = after("group_recreated_after_s", wait(new_group, timeout, "the group recreated"))
            job = after("finished_after_s", trial.finished(timeout))
        except TimeoutError as error:
            return result | {"ok": False, "error": str(error)}
        result |= trial.outcome(job) | {"recreated_on": sorted(set(nodes))}
        moved = result["recreated_on"] == ["node-2"] and not result["pod_duplicates"]
        return result | {"ok": result["phase"] == "Succeeded" and result["restarts"] == 1 and moved}
