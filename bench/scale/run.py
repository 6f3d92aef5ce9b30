"""The scale bench's machinery, shared by bench/scale_bench.py and its smoke test (tests/scale/): a
LocalCluster without a real node, KWOK's fake nodes (mwms_dev.kwok), the operator as a local process,
TrainJobs whose simulated workers follow bench/scale/stages/, and a pod watcher (watch.py) that records when
each pod was created, bound and Running and catches duplicate workers. It measures and reports; it asserts
nothing."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import kubernetes
from prometheus_client.parser import text_string_to_metric_families

from mwms_contract import names
from mwms_dev.cluster import LocalCluster, free_port
from mwms_dev.kwok import Kwok, WorkerScript, fake_nodes
from mwms_dev.procs import stop_process
from mwms_dev.scripts import load_script

watch = load_script("mwms_scale_watch", Path(__file__).with_name("watch.py"))
PodWatcher = watch.PodWatcher

REPO = Path(__file__).resolve().parents[2]


def worker_requests_and_policy(
    backoff_limit: int | None, ttl: int | None, cpu: str, memory: str, gpus: int
) -> tuple[dict[str, str], dict[str, Any]]:
    """A worker's resource requests and the job's runPolicy, the same for a TrainJob and a TFJob."""
    requests: dict[str, str] = {"cpu": cpu, "memory": memory}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    run_policy: dict[str, Any] = {}
    if backoff_limit is not None:
        run_policy["backoffLimit"] = backoff_limit
    if ttl is not None:
        run_policy["ttlSecondsAfterFinished"] = ttl
    return requests, run_policy


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
    requests, run_policy = worker_requests_and_policy(backoff_limit, ttl, cpu, memory, gpus)
    # KWOK on shared cores marks a bound pod Running minutes late at 20k pods (a kubelet reports its
    # containers within seconds): at the default 120 s those pods' jobs failed with ContainerError
    run_policy["containerErrorGraceSeconds"] = 1800
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
    watch_keys = watch.OURS  # which pods the watch follows, and how they group (class-wide)

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
        self.install_crd()
        self.kwok = Kwok(self.cluster.kubeconfig, self.state_dir / "kwok").start()
        self.kwok.add_nodes(fake_nodes(self.nodes, **self.node_resources))
        self.timings["nodes_ready_s"] = round(time.monotonic() - started, 1)
        self.metrics_port = free_port()
        self.operator_log = (self.state_dir / "operator.log").open("wb")
        self.operator = self.start_operator()
        wait(self._operator_up, 120, "the operator's metrics endpoint", 0.5)
        self.watcher = PodWatcher(self.core, self.watch_keys).start()
        self.timings["ready_s"] = round(time.monotonic() - started, 1)

    def install_crd(self) -> None:
        self.kubectl("apply", "-f", str(REPO / "manifests" / "crd.yaml"))
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/trainjobs.mwms.dev")

    def start_operator(self) -> subprocess.Popen[bytes]:
        """The operator as a local process, its metrics on self.metrics_port, its output in operator.log (a
        subclass starts another operator: bench/scale/peer.py)."""
        return self.spawn_operator(self.metrics_port, self.operator_log)

    def spawn_operator(self, metrics_port: int, log: IO[bytes]) -> subprocess.Popen[bytes]:
        """Our operator as a local process with the bench's environment, its metrics on `metrics_port`, its
        output to `log` (bench/scale/replicas.py starts its extra replicas with it too)."""
        env = {
            **os.environ,
            "KUBECONFIG": str(self.cluster.kubeconfig),
            "MWMS_METRICS_PORT": str(metrics_port),
            "MWMS_HEALTH_PORT": str(free_port()),
            "MWMS_LOG_LEVEL": "WARNING",
            # The simulated workers log to no tracking server: without this, each job's end asks the default
            # (http://mlflow:5000, absent here) for its run and adds a Warning Event and a status write a
            # deployment with its MLflow would not have.
            "MWMS_TRACKING_URI": "file:///nonexistent/scale-bench-mlruns",
            "PYTHONPATH": os.pathsep.join([str(self.operator_src), os.environ.get("PYTHONPATH", "")]),
            **self.operator_env,
        }
        return subprocess.Popen(
            [sys.executable, "-m", "mwms_operator"], env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT
        )

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
        if self.operator is not None:
            stop_process(self.operator, 15)
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
