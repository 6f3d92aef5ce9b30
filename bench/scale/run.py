"""The scale bench's machinery, shared by bench/scale_bench.py and its smoke test (tests/scale/): a
LocalCluster without a real node, KWOK's fake nodes (mwms_dev.kwok), the operator as a local process,
TrainJobs whose simulated workers follow bench/scale/stages/, and a pod watcher that records when each pod
was created, bound and Running and catches duplicate workers. It measures and reports; it asserts nothing."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
import urllib3
from prometheus_client.parser import text_string_to_metric_families

from mwms_contract import names
from mwms_dev.cluster import LocalCluster, free_port
from mwms_dev.kwok import Kwok, WorkerScript, fake_nodes

REPO = Path(__file__).resolve().parents[2]
GROUP_KEY = tuple[str, str, str]  # (namespace, job, restart)


def trainjob(
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
    """A TrainJob whose workers follow `script` on fake nodes, each asking for cpu/memory (and GPUs)."""
    requests: dict[str, str] = {"cpu": cpu, "memory": memory}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    run_policy: dict[str, Any] = {}
    if backoff_limit is not None:
        run_policy["backoffLimit"] = backoff_limit
    if ttl is not None:
        run_policy["ttlSecondsAfterFinished"] = ttl
    return {
        "apiVersion": f"{names.GROUP}/{names.VERSION}",
        "kind": names.KIND,
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "runPolicy": run_policy,
            "template": {
                "metadata": {"annotations": script.annotations()},
                "spec": {"containers": [{"name": names.CONTAINER_NAME, "resources": {"requests": requests}}]},
            },
        },
    }


@dataclass
class PodRecord:
    namespace: str
    job: str
    restart: str
    index: str
    added: float
    bound: float | None = None
    running: float | None = None
    ended: float | None = None
    deleting: float | None = None  # a deletion was asked for (deletionTimestamp) or the pod is gone


class PodWatcher:
    """One watch on the operator's pods in every namespace, on its own thread: when each pod (by uid) was
    first seen, bound to a node and Running, as this process received the events."""

    def __init__(self, core: Any) -> None:
        self.core = core
        self.pods: dict[str, PodRecord] = {}
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> PodWatcher:
        """Lists before returning, so no pod the caller creates next can end before the watch sees it."""
        self._version = self._relist(f"{names.LABEL_MANAGED_BY}={names.MANAGED_BY}")
        self._thread.start()
        return self

    def _run(self) -> None:
        selector = f"{names.LABEL_MANAGED_BY}={names.MANAGED_BY}"
        version = self._version
        while not self._stop.is_set():
            watch = kubernetes.watch.Watch()
            try:
                for event in watch.stream(
                    self.core.list_pod_for_all_namespaces,
                    label_selector=selector,
                    resource_version=version,
                    timeout_seconds=30,
                    allow_watch_bookmarks=True,
                ):
                    if event["type"] == "ERROR":  # 410 Gone: the version is too old to watch from
                        version = self._relist(selector)
                        break
                    pod = event["object"]
                    if isinstance(pod, dict):  # undecoded (a BOOKMARK, at times)
                        version = pod["metadata"]["resourceVersion"]
                        continue
                    version = pod.metadata.resource_version
                    if event["type"] != "BOOKMARK":  # a decoded BOOKMARK has metadata only
                        self._seen(pod, time.monotonic(), gone=event["type"] == "DELETED")
                    if self._stop.is_set():
                        break
            except kubernetes.client.ApiException as error:
                if error.status == 410:
                    version = self._relist(selector)
                else:  # e.g. 429 "storage is (re)initializing" from a fresh API server: try again shortly
                    self._stop.wait(1)
            except (urllib3.exceptions.HTTPError, OSError) as error:
                if self._stop.is_set():
                    return  # the cluster is going away
                # A dropped connection: watch again from the last version seen (a dead watch would leave
                # the bench waiting for pods it can no longer see)
                print(f"pod watch: {error!r}; watching again", file=sys.stderr, flush=True)
                self._stop.wait(1)

    def _relist(self, selector: str) -> str:
        """List and record (at the start, and after a 410 Gone, when events were missed: a pod first seen
        then is recorded late); the version to watch from."""
        listed = self.core.list_pod_for_all_namespaces(label_selector=selector)
        for pod in listed.items:
            self._seen(pod, time.monotonic())
        return str(listed.metadata.resource_version)

    def _seen(self, pod: Any, now: float, gone: bool = False) -> None:
        labels = pod.metadata.labels or {}
        with self.lock:
            record = self.pods.get(pod.metadata.uid)
            if record is None:
                record = self.pods[pod.metadata.uid] = PodRecord(
                    pod.metadata.namespace,
                    labels.get(names.LABEL_JOB_NAME, ""),
                    labels.get(names.LABEL_RESTART, "0"),
                    labels.get(names.LABEL_REPLICA_INDEX, ""),
                    now,
                )
            if record.bound is None and pod.spec.node_name:
                record.bound = now
            phase = pod.status.phase if pod.status else None
            if record.running is None and phase in ("Running", "Succeeded", "Failed"):
                record.running = now
            if record.ended is None and phase in ("Succeeded", "Failed"):
                record.ended = now
            if record.deleting is None and (gone or pod.metadata.deletion_timestamp):
                record.deleting = now

    def stop(self) -> None:
        self._stop.set()

    def groups(self, namespace: str | None = None) -> dict[GROUP_KEY, list[PodRecord]]:
        out: dict[GROUP_KEY, list[PodRecord]] = defaultdict(list)
        with self.lock:
            for record in self.pods.values():
                if namespace is None or record.namespace == namespace:
                    out[(record.namespace, record.job, record.restart)].append(record)
        return out

    def duplicates(self, namespace: str | None = None) -> dict[str, int]:
        """Workers of the same job, group and index alive at the same time (a second created before the first
        was being deleted): `job/restart/index` -> how many overlapped. A worker created again after the
        first was deleted is no duplicate: the operator deletes a batch it could create only in part (a
        refused or failed create) and creates it whole again, before any worker ran its fit."""
        by_worker: dict[str, list[PodRecord]] = defaultdict(list)
        for (_, job, restart), records in self.groups(namespace).items():
            for record in records:
                by_worker[f"{job}/{restart}/{record.index}"].append(record)
        out = {}
        for key, records in by_worker.items():
            records.sort(key=lambda r: r.added)
            overlapping = sum(
                1
                for earlier, later in zip(records, records[1:], strict=False)
                if earlier.deleting is None or later.added < earlier.deleting
            )
            if overlapping:
                out[key] = overlapping + 1
        return out

    def running(self, namespace: str, replicas: int, restart: str = "0") -> dict[str, list[PodRecord]]:
        """job -> its group `restart`'s pods, for the groups whose every worker has been seen Running. A pod
        deleted before it ran is left out: the operator deleted a batch it could create only in part and
        created the group whole again (its replacement is the worker's pod)."""
        out = {}
        for (_, job, group), records in self.groups(namespace).items():
            live = [r for r in records if r.running is not None or r.deleting is None]
            if group == restart and len(live) >= replicas and all(r.running for r in live):
                out[job] = live
        return out

    def workers(self, namespace: str | None = None) -> dict[GROUP_KEY, set[str]]:
        """The worker indices each group had (every index once, however often it was created)."""
        return {key: {r.index for r in records} for key, records in self.groups(namespace).items()}


def metric_samples(text: str, prefix: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, sorted labels) -> value, for the samples whose name starts with `prefix`."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith(prefix):
                out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def delta(before: dict, after: dict) -> dict:
    return {key: after[key] - before.get(key, 0.0) for key in after if after[key] - before.get(key, 0.0)}


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} (after {timeout:.0f}s)")
        time.sleep(interval)
    return result


@dataclass
class ScaleEnv:
    """Control plane + KWOK with `nodes` fake nodes + the operator. Use as a context manager."""

    state_dir: Path
    subnet_index: int
    nodes: int
    node_resources: dict[str, Any] = field(default_factory=dict)
    operator_env: dict[str, str] = field(default_factory=dict)
    operator_src: Path = REPO / "operator"
    timings: dict[str, float] = field(default_factory=dict)

    def __enter__(self) -> ScaleEnv:
        started = time.monotonic()
        self.cluster = LocalCluster(
            name="scale", state_dir=self.state_dir / "cluster", subnet_index=self.subnet_index
        )
        self.cluster.start()
        self.kwok: Kwok | None = None
        self.operator: subprocess.Popen[bytes] | None = None
        self.watcher: PodWatcher | None = None
        try:
            self._start(started)
        except BaseException:
            self.__exit__()
            raise
        return self

    def _start(self, started: float) -> None:
        client = kubernetes.config.new_client_from_config(str(self.cluster.kubeconfig))
        self.core = kubernetes.client.CoreV1Api(client)
        self.custom = kubernetes.client.CustomObjectsApi(client)
        self.kubectl("apply", "-f", str(REPO / "manifests" / "crd.yaml"))
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/trainjobs.mwms.dev")
        self.kwok = Kwok(self.cluster.kubeconfig, self.state_dir / "kwok").start()
        self.kwok.add_nodes(fake_nodes(self.nodes, **self.node_resources))
        self.timings["nodes_ready_s"] = round(time.monotonic() - started, 1)
        self.metrics_port = free_port()
        env = {
            **os.environ,
            "KUBECONFIG": str(self.cluster.kubeconfig),
            "MWMS_METRICS_PORT": str(self.metrics_port),
            "MWMS_HEALTH_PORT": str(free_port()),
            "MWMS_LOG_LEVEL": "WARNING",
            "PYTHONPATH": os.pathsep.join([str(self.operator_src), os.environ.get("PYTHONPATH", "")]),
            **self.operator_env,
        }
        self.operator_log = (self.state_dir / "operator.log").open("wb")
        self.operator = subprocess.Popen(
            [sys.executable, "-m", "mwms_operator"],
            env=env,
            cwd=REPO,
            stdout=self.operator_log,
            stderr=subprocess.STDOUT,
        )
        wait(self._operator_up, 120, "the operator's metrics endpoint", 0.5)
        self.watcher = PodWatcher(self.core).start()
        self.timings["ready_s"] = round(time.monotonic() - started, 1)

    def _operator_up(self) -> bool:
        assert self.operator is not None
        if self.operator.poll() is not None:
            raise RuntimeError(
                f"the operator exited with {self.operator.returncode}:\n{self.operator_log_tail()}"
            )
        try:
            self.operator_metrics()
        except OSError:
            return False
        return True

    def operator_log_tail(self, lines: int = 40) -> str:
        text = (self.state_dir / "operator.log").read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def __exit__(self, *exc: object) -> None:
        if self.watcher is not None:
            self.watcher.stop()
        if self.operator is not None and self.operator.poll() is None:
            self.operator.terminate()
            try:
                self.operator.wait(15)
            except subprocess.TimeoutExpired:
                self.operator.kill()
                self.operator.wait()
        if self.kwok is not None:
            self.kwok.stop()
        self.cluster.stop()

    def kubectl(self, *args: str, input: str | None = None) -> str:
        result = subprocess.run(
            ["kubectl", f"--kubeconfig={self.cluster.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=900,
        )
        if result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {result.stderr}")
        return result.stdout

    def apply(self, namespace: str, jobs: Iterable[dict[str, Any]]) -> None:
        """All jobs in one `kubectl apply` (one request each, as fast as kubectl sends them)."""
        items = list(jobs)
        self.kubectl(
            "apply",
            "-n",
            namespace,
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
        )

    def namespace(self, name: str) -> str:
        """A new namespace, once it has its `default` ServiceAccount: pods are refused (403) until then."""
        self.kubectl("create", "namespace", name)
        accounts = self.core.list_namespaced_service_account
        wait(lambda: accounts(name, field_selector="metadata.name=default").items, 60, f"{name}'s SA", 0.2)
        return name

    def jobs(self, namespace: str) -> dict[str, dict[str, Any]]:
        items = self.custom.list_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, names.PLURAL
        )["items"]
        return {job["metadata"]["name"]: job.get("status") or {} for job in items}

    def operator_metrics(self, prefix: str = "mwms_") -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as response:
            return metric_samples(response.read().decode(), prefix)

    def apiserver_requests(self) -> dict:
        """apiserver_request_total by (verb, resource), every client's (the metric has no user label)."""
        context: ssl.SSLContext = self.cluster.node_context.admin_tls()
        with urllib.request.urlopen(
            f"{self.cluster.server}/metrics", context=context, timeout=30
        ) as response:
            samples = metric_samples(response.read().decode(), "apiserver_request_total")
        out: dict[tuple[str, str], float] = defaultdict(float)
        for (_, labels), value in samples.items():
            label = dict(labels)
            out[(label.get("verb", ""), label.get("resource", ""))] += value
        return dict(out)

    def footprint(self) -> dict[str, float]:
        assert self.operator is not None
        return {
            "rss_mib": round(rss_mib(self.operator.pid), 1),
            "cpu_s": round(cpu_seconds(self.operator.pid), 2),
        }
