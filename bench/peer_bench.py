"""mwms-operator and Kubeflow's training-operator side by side: both at once on one local API server.

    .venv/bin/python bench/peer_bench.py [--subnet-index 7] [--runs 30] [--burst 200] [--present 1000]
        [--unrelated 5000] [--label peer] [--operator-src DIR]
        [--stages latency,delete,burst,present,unrelated]

The peer is training-operator v1.8.1 (TFJob), built from its Go module by
hack/build/build-training-operator.sh (cached under ~/.cache/mwms/peer/<version>/). One LocalCluster without a
node: pods are created, never run, so what is measured is each operator and the API server. Both operators run
for the whole bench with their default settings, logged in as the cluster admin. Stages, each operator in
turn:

1. create one 4-worker job → its pods and Service(s) have arrived at a client watching them, p50/p95 (--runs,
   interleaved: the operator that goes first alternates). Ours makes 4 pods + 1 headless Service;
   training-operator 4 pods + 4 Services.
2. create, 0.05 s later delete, until the job and its pods are gone, p50/p95 (--runs, interleaved).
3. --burst 2-worker jobs created at once → all have pods (and Services); RSS with them; their namespace's
   delete, and the operator's CPU time meanwhile (one operator's burst at a time, so neither holds the
   other's pods; after a warm-up namespace delete, so neither is the first; --burst-rounds, alternating
   which operator goes first; the target compares the mean namespace delete).
4. --present suspended jobs of each kind present together: RSS, and CPU share over a 60 s idle window.
5. --unrelated pods that belong to neither (Pending forever): RSS of each before and after.

RSS idle (after one warm-up job each) is always measured; --stages runs only the named stages (default: all),
e.g. `--stages present,unrelated` for the memory and CPU measures, which a loaded machine disturbs less than
the timings.

Jobs are created with the Python client (no `kubectl` start-up in the timings). training-operator runs
without its validating webhook configuration (the API server does not call it; its cert rotator still makes
the serving cert, which this script copies to the path it reads, as a Secret volume would). Results go to
bench/results/peer.json under --label, with `uptime` at start and end (other work on the machine slows
everything down). Needs root (the control plane's pod bridge).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes
import kubernetes.watch
from operator_bench import cpu_seconds, kubectl, rss_mib, summary, wait  # bench/, same folder

from mwms_dev.cluster import LocalCluster, free_port

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results" / "peer.json"
PEER_VERSION = os.environ.get("TRAINING_OPERATOR_VERSION", "v1.8.1")
# Fixed in training-operator's pkg/cert: where its webhook server reads the cert its rotator writes to the
# Secret (in a cluster, a Secret volume mounted there).
PEER_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")
PEER_SECRET = ("kubeflow", "training-operator-webhook-cert")
IMAGE = "registry.invalid/never-pulled:1"  # no node: nothing is pulled
STAGES = ("latency", "delete", "burst", "present", "unrelated")


def turns(kinds: dict[str, Kind], run: int) -> list[str]:
    """The operators in the order of this run: the one that goes first alternates."""
    return list(kinds) if run % 2 == 0 else list(reversed(kinds))


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def progress(**measured: object) -> None:
    print(json.dumps(measured, default=str), flush=True)


class Kind:
    """One operator's job kind: how to make a job, and how to tell that the operator has acted on it."""

    def __init__(self, api: kubernetes.client.ApiClient, name: str) -> None:
        self.core = kubernetes.client.CoreV1Api(api)
        self.custom = kubernetes.client.CustomObjectsApi(api)
        self.name = name

    group = version = plural = label = ""
    services_per_job: Callable[[int], int]

    def body(self, name: str, replicas: int, suspend: bool) -> dict:
        raise NotImplementedError

    def suspended(self, job: dict) -> bool:
        raise NotImplementedError

    def create(self, namespace: str, name: str, replicas: int, suspend: bool = False) -> None:
        self.custom.create_namespaced_custom_object(
            self.group, self.version, namespace, self.plural, self.body(name, replicas, suspend)
        )

    def create_many(self, namespace: str, names: list[str], replicas: int, suspend: bool = False) -> None:
        """In 8 threads, as a burst of clients would; the API server, not this script, is the limit."""
        chunks = [names[i::8] for i in range(8)]
        errors: list[BaseException] = []

        def run(chunk: list[str]) -> None:
            try:
                for name in chunk:
                    self.create(namespace, name, replicas, suspend)
            except BaseException as error:  # noqa: BLE001 - reported below
                errors.append(error)

        threads = [threading.Thread(target=run, args=(c,)) for c in chunks]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]

    def delete(self, namespace: str, name: str) -> None:
        self.custom.delete_namespaced_custom_object(self.group, self.version, namespace, self.plural, name)

    def counts(self, namespace: str, selector: str) -> tuple[dict[str, int], dict[str, int]]:
        """(pods, services) per job name, for objects carrying this kind's job-name label."""
        pods: dict[str, int] = {}
        services: dict[str, int] = {}
        for pod in self.core.list_namespaced_pod(namespace, label_selector=selector).items:
            job = pod.metadata.labels[self.label]
            pods[job] = pods.get(job, 0) + 1
        for svc in self.core.list_namespaced_service(namespace, label_selector=selector).items:
            job = svc.metadata.labels[self.label]
            services[job] = services.get(job, 0) + 1
        return pods, services

    def ready(self, namespace: str, replicas: int, name: str | None = None) -> set[str]:
        """Jobs whose pods and Service(s) all exist."""
        selector = f"{self.label}={name}" if name else self.label
        pods, services = self.counts(namespace, selector)
        want = self.services_per_job(replicas)
        return {j for j, n in pods.items() if n == replicas and services.get(j, 0) >= want}

    def gone(self, namespace: str, name: str) -> bool:
        try:
            self.custom.get_namespaced_custom_object(self.group, self.version, namespace, self.plural, name)
        except kubernetes.client.ApiException as error:
            if error.status != 404:
                raise
        else:
            return False
        return not self.core.list_namespaced_pod(namespace, label_selector=f"{self.label}={name}").items

    def suspended_count(self, namespace: str) -> int:
        items = self.custom.list_namespaced_custom_object(self.group, self.version, namespace, self.plural)
        return sum(self.suspended(j) for j in items["items"])


class TrainJobs(Kind):
    group, version, plural, label = "mwms.dev", "v1alpha1", "trainjobs", "mwms.dev/job-name"

    @staticmethod
    def services_per_job(replicas: int) -> int:
        return 1  # one headless Service per job

    def body(self, name: str, replicas: int, suspend: bool) -> dict:
        return {
            "apiVersion": "mwms.dev/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": name},
            "spec": {
                "replicas": replicas,
                "runPolicy": {"suspend": suspend, "startupTimeoutSeconds": 3600},
            },
        }

    def suspended(self, job: dict) -> bool:
        return job.get("status", {}).get("phase") == "Suspended"


class TFJobs(Kind):
    group, version, plural, label = "kubeflow.org", "v1", "tfjobs", "training.kubeflow.org/job-name"

    @staticmethod
    def services_per_job(replicas: int) -> int:
        return replicas  # one Service per pod

    def body(self, name: str, replicas: int, suspend: bool) -> dict:
        return {
            "apiVersion": "kubeflow.org/v1",
            "kind": "TFJob",
            "metadata": {"name": name},
            "spec": {
                "runPolicy": {"suspend": suspend},
                "tfReplicaSpecs": {
                    "Worker": {
                        "replicas": replicas,
                        "restartPolicy": "OnFailure",
                        "template": {"spec": {"containers": [{"name": "tensorflow", "image": IMAGE}]}},
                    }
                },
            },
        }

    def suspended(self, job: dict) -> bool:
        return any(
            c.get("type") == "Suspended" and c.get("status") == "True"
            for c in job.get("status", {}).get("conditions") or []
        )


class Arrivals:
    """When each pod and Service of a kind's jobs first reached this client, over a watch of its namespace.
    A poll (two lists, their JSON parsed into the client's models) takes tens of milliseconds on this machine,
    and longer for our larger pods, so it could not resolve a 0.08 s target; a watch stamps each object as it
    arrives, for both operators alike."""

    def __init__(self, core: kubernetes.client.CoreV1Api, namespace: str, label: str) -> None:
        self.label = label
        self.first_seen: dict[tuple[str, str], dict[str, float]] = {}  # (resource, job) -> name -> time
        self.changed = threading.Condition()
        self.responses = [
            list_call(
                namespace, label_selector=label, watch=True, _preload_content=False, timeout_seconds=3600
            )
            for list_call in (core.list_namespaced_pod, core.list_namespaced_service)
        ]
        for resource, response in zip(("pods", "services"), self.responses, strict=True):
            threading.Thread(target=self._read, args=(resource, response), daemon=True).start()

    def _read(self, resource: str, response: Any) -> None:
        with contextlib.suppress(Exception):  # the stream closed at the end of the bench
            for line in kubernetes.watch.watch.iter_resp_lines(response):
                arrived = time.monotonic()
                event = json.loads(line)
                meta = event["object"]["metadata"]
                if event["type"] != "ADDED":
                    continue
                with self.changed:
                    seen = self.first_seen.setdefault((resource, meta["labels"][self.label]), {})
                    seen.setdefault(meta["name"], arrived)
                    self.changed.notify_all()

    def ready_at(self, job: str, pods: int, services: int, timeout: float) -> float:
        """The moment the last of the job's pods and Services arrived."""

        def times() -> list[float] | None:
            got_pods = self.first_seen.get(("pods", job), {})
            got_services = self.first_seen.get(("services", job), {})
            if len(got_pods) < pods or len(got_services) < services:
                return None
            return [*got_pods.values(), *got_services.values()]

        with self.changed:
            found = self.changed.wait_for(times, timeout)
        if not found:
            raise TimeoutError(f"{job}: pods and Services")
        return max(found)

    def close(self) -> None:
        for response in self.responses:
            response.shutdown()  # not close(): that waits for the reading thread's lock, which a read holds


def unrelated_pods(api: kubernetes.client.CoreV1Api, namespace: str, count: int) -> None:
    def pod(i: int) -> dict:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"other-{i}", "labels": {"app": "unrelated"}},
            "spec": {"containers": [{"name": "c", "image": IMAGE}]},
        }

    def run(indices: range) -> None:
        for i in indices:
            api.create_namespaced_pod(namespace, pod(i))

    threads = [threading.Thread(target=run, args=(range(k, count, 8),)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def copy_peer_cert(core: kubernetes.client.CoreV1Api, stop: threading.Event) -> None:
    """Do what the kubelet's Secret volume does in a cluster: put the rotator's cert where the webhook
    server reads it."""
    while not stop.wait(0.5):
        try:
            data = core.read_namespaced_secret(PEER_SECRET[1], PEER_SECRET[0]).data or {}
        except kubernetes.client.ApiException:
            continue
        if "tls.crt" in data and "tls.key" in data:
            PEER_CERT_DIR.mkdir(parents=True, exist_ok=True)
            for name in ("tls.crt", "tls.key"):
                (PEER_CERT_DIR / name).write_bytes(base64.b64decode(data[name]))
            return


def build_peer() -> Path:
    """The install directory of training-operator PEER_VERSION (bin/, crds/), built on first use."""
    return Path(
        subprocess.run(
            ["bash", str(REPO / "hack" / "build" / "build-training-operator.sh")],
            check=True,
            capture_output=True,
            text=True,
            env={**os.environ, "TRAINING_OPERATOR_VERSION": PEER_VERSION},
        ).stdout.strip()
    )


def peer_argv(peer_dir: Path, metrics_port: int, probe_port: int) -> list[str]:
    """training-operator with the TFJob controller only, its defaults otherwise, on local ports."""
    return [
        str(peer_dir / "bin" / "training-operator.v1"),
        "--enable-scheme=tfjob",
        f"--metrics-bind-address=127.0.0.1:{metrics_port}",
        f"--health-probe-bind-address=127.0.0.1:{probe_port}",
        f"--webhook-server-port={free_port()}",
        "--zap-log-level=" + os.environ.get("MWMS_BENCH_PEER_LOG_LEVEL", "error"),
    ]


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def burst_of(
    kind: Kind, kubeconfig: Path, jobs: int, namespace: str, operator: subprocess.Popen
) -> dict[str, float]:
    """`jobs` 2-worker jobs created at once → all have pods and Service(s); RSS with them; their namespace
    deleted, with the operator's CPU time meanwhile."""
    kubectl(kubeconfig, "create", "namespace", namespace)
    started = time.monotonic()
    kind.create_many(namespace, [f"burst-{i}" for i in range(jobs)], 2)
    created = time.monotonic() - started
    wait(lambda: len(kind.ready(namespace, 2)) == jobs, 900, f"{namespace} burst", 0.25)
    done = time.monotonic() - started
    time.sleep(10)
    rss = rss_mib(operator.pid)
    cpu_before, started = cpu_seconds(operator.pid), time.monotonic()
    kubectl(kubeconfig, "delete", "namespace", namespace, "--wait=true", "--timeout=900s")
    return {
        "create_calls_seconds": round(created, 2),
        "create_to_all_pods_and_services_seconds": round(done, 2),
        "rss_mib_with_them": round(rss, 1),
        "namespace_delete_seconds": round(time.monotonic() - started, 2),
        "operator_cpu_seconds_during_namespace_delete": round(cpu_seconds(operator.pid) - cpu_before, 2),
    }


def both_rss(ours: subprocess.Popen, peer: subprocess.Popen) -> dict[str, float]:
    return {"mwms": round(rss_mib(ours.pid), 1), "peer": round(rss_mib(peer.pid), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--subnet-index", type=int, default=int(os.environ.get("MWMS_BENCH_SUBNET_INDEX", "7"))
    )
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--burst", type=int, default=200)
    parser.add_argument("--burst-rounds", type=int, default=2, help="ours first, then theirs first, ...")
    parser.add_argument("--present", type=int, default=1000)
    parser.add_argument("--unrelated", type=int, default=5000)
    parser.add_argument("--cpu-window", type=float, default=60.0)
    parser.add_argument("--label", default="peer", help="the key of this run in the results file")
    parser.add_argument(
        "--operator-src",
        type=Path,
        default=REPO / "operator",
        help="another checkout's operator/ (before/after)",
    )
    parser.add_argument(
        "--stages",
        default=",".join(STAGES),
        help=f"comma-separated, any of {', '.join(STAGES)} (default: all)",
    )
    args = parser.parse_args()
    stages = set(args.stages.split(","))
    if not stages <= set(STAGES):
        parser.error(f"--stages: unknown {', '.join(sorted(stages - set(STAGES)))}")

    peer_dir = build_peer()
    result: dict[str, Any] = {
        "what": "mwms-operator and training-operator "
        + PEER_VERSION
        + " (TFJob) at once on one local API server; no node (pods are created, not run)",
        "settings": "both with their defaults (training-operator: client 20 requests/s, 1 worker thread; "
        "mwms-operator: log level WARNING), both as cluster admin; jobs created with the Python client",
        "stages": [stage for stage in STAGES if stage in stages],
        "operator_source": str(args.operator_src),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "uptime_start": uptime()},
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    stop_cert = threading.Event()
    logs = Path(tempfile.mkdtemp(prefix="mwms-peerbench-logs-"))  # kept if the run fails
    with tempfile.TemporaryDirectory(prefix="mwms-peerbench-") as tmp:
        state = Path(tmp) / "cluster"
        cluster = LocalCluster(name="peerbench", state_dir=state, subnet_index=args.subnet_index).start()
        procs: list[subprocess.Popen] = []
        try:
            kubeconfig = cluster.kubeconfig
            kubectl(kubeconfig, "apply", "-f", str(REPO / "manifests" / "crd.yaml"))
            kubectl(kubeconfig, "create", "-f", str(peer_dir / "crds" / "kubeflow.org_tfjobs.yaml"))
            for resource in ("trainjobs", "tfjobs"):
                wait(
                    lambda r=resource: (
                        subprocess.run(
                            ["kubectl", f"--kubeconfig={kubeconfig}", "get", r, "-A"], capture_output=True
                        ).returncode
                        == 0
                    ),
                    60,
                    f"{resource} served",
                    0.2,
                )
            kubectl(kubeconfig, "create", "namespace", PEER_SECRET[0])
            kubectl(kubeconfig, "create", "secret", "generic", PEER_SECRET[1], "-n", PEER_SECRET[0])

            ours = subprocess.Popen(
                [sys.executable, "-m", "mwms_operator"],
                env={
                    **os.environ,
                    "KUBECONFIG": str(kubeconfig),
                    "MWMS_METRICS_PORT": str(free_port()),
                    "MWMS_HEALTH_PORT": str(free_port()),
                    "MWMS_LOG_LEVEL": "WARNING",
                    "PYTHONPATH": os.pathsep.join([str(args.operator_src), os.environ.get("PYTHONPATH", "")]),
                },
                cwd=REPO,
                stdout=open(logs / "mwms-operator.log", "wb"),  # noqa: SIM115 - lives as long as it
                stderr=subprocess.STDOUT,
            )
            procs.append(ours)
            probe = free_port()
            peer = subprocess.Popen(
                peer_argv(peer_dir, free_port(), probe),
                env={**os.environ, "KUBECONFIG": str(kubeconfig)},
                cwd=tmp,
                stdout=open(logs / "training-operator.log", "wb"),  # noqa: SIM115
                stderr=subprocess.STDOUT,
            )
            procs.append(peer)
            api = kubernetes.config.new_client_from_config(str(kubeconfig))
            core = kubernetes.client.CoreV1Api(api)
            threading.Thread(target=copy_peer_cert, args=(core, stop_cert), daemon=True).start()
            wait(lambda: http_ok(f"http://127.0.0.1:{probe}/readyz"), 180, "training-operator ready", 0.5)
            kinds = {"mwms": TrainJobs(api, "mwms"), "peer": TFJobs(api, "peer")}

            # Warm-up (not counted): each operator's first job after its start.
            # A namespace per operator: both name their pods <job>-worker-<i>.
            lat = {key: f"latency-{key}" for key in kinds}
            for key, kind in kinds.items():
                kubectl(kubeconfig, "create", "namespace", lat[key])
                kind.create(lat[key], "warmup", 4)
                wait(lambda k=kind, n=lat[key]: "warmup" in k.ready(n, 4, "warmup"), 120, f"{key} warm-up")
                kind.delete(lat[key], "warmup")
            time.sleep(5)
            result["rss_mib_idle"] = idle = both_rss(ours, peer)
            progress(rss_mib_idle=idle)

            if "latency" in stages:
                # 1. create → pods + Service(s) arrive at a watching client, interleaved.
                latencies: dict[str, list[float]] = {"mwms": [], "peer": []}
                arrivals = {key: Arrivals(core, lat[key], kind.label) for key, kind in kinds.items()}
                time.sleep(1)  # the watches are established
                for run in range(args.runs):
                    for key in turns(kinds, run):
                        kind, name = kinds[key], f"lat-{run}"
                        started = time.monotonic()
                        kind.create(lat[key], name, 4)
                        ready = arrivals[key].ready_at(name, 4, kind.services_per_job(4), 120)
                        latencies[key].append(ready - started)
                        time.sleep(0.5)  # the operator's follow-up (status, events) is not the next one's
                for watch in arrivals.values():
                    watch.close()
                result["create_to_4_pods_and_services_seconds"] = {
                    k: summary(v) for k, v in latencies.items()
                }
                result["create_latency_measured_by"] = "a watch of pods and Services (arrival at the client)"
                progress(latency=result["create_to_4_pods_and_services_seconds"])
                for key, kind in kinds.items():
                    for run in range(args.runs):
                        kind.delete(lat[key], f"lat-{run}")
                # The garbage collector deletes their pods (and Services) a while after: the next stage's
                # deletes must not queue behind that.
                for key, kind in kinds.items():
                    wait(
                        lambda k=kind, ns=lat[key]: not k.counts(ns, k.label)[0],
                        300,
                        f"{key} latency jobs gone",
                    )
                time.sleep(5)

            if "delete" in stages:
                # 2. delete right after create, until the job and its pods are gone, interleaved.
                deletes: dict[str, list[float]] = {"mwms": [], "peer": []}
                for run in range(args.runs):
                    for key in turns(kinds, run):
                        kind, name = kinds[key], f"del-{run}"
                        kind.create(lat[key], name, 4)
                        time.sleep(0.05)
                        started = time.monotonic()
                        kind.delete(lat[key], name)
                        wait(lambda k=kind, n=name, ns=lat[key]: k.gone(ns, n), 180, f"{key} {name} gone")
                        deletes[key].append(time.monotonic() - started)
                        if deletes[key][-1] > 2:
                            progress(slow_delete={key: name, "seconds": round(deletes[key][-1], 2)})
                result["delete_right_after_create_until_job_and_pods_gone_seconds"] = {
                    k: summary(v) for k, v in deletes.items()
                }
                progress(delete=result["delete_right_after_create_until_job_and_pods_gone_seconds"])

            if "burst" in stages:
                # 3. a burst per operator, one at a time. First a namespace of one job each is deleted, so
                # that neither operator's namespace is the first the namespace controller deletes.
                kubectl(kubeconfig, "create", "namespace", "burst-warmup")
                for kind in kinds.values():
                    kind.create("burst-warmup", f"warmup-{kind.name}", 2)
                kubectl(kubeconfig, "delete", "namespace", "burst-warmup", "--wait=true", "--timeout=300s")
                result["burst"] = {"jobs": args.burst, "replicas_each": 2, "rounds": args.burst_rounds}
                runs: dict[str, list[dict[str, float]]] = {key: [] for key in kinds}
                for round_ in range(args.burst_rounds):  # ours first, then theirs first, ...
                    for key in turns(kinds, round_):
                        operator = ours if key == "mwms" else peer
                        runs[key].append(
                            burst_of(kinds[key], kubeconfig, args.burst, f"burst-{key}-{round_}", operator)
                        )
                        progress(burst={key: runs[key][-1]})
                for key, measured in runs.items():
                    result["burst"][key] = {
                        **{field: [run[field] for run in measured] for field in measured[0]},
                        "namespace_delete_mean_seconds": round(
                            sum(run["namespace_delete_seconds"] for run in measured) / len(measured), 2
                        ),
                    }

            if "present" in stages:
                # 4. many suspended jobs of both kinds present.
                result["present"] = {
                    "jobs_each": args.present,
                    "state": "suspended (no pods), all reconciled",
                }
                started = time.monotonic()
                for key, kind in kinds.items():
                    kubectl(kubeconfig, "create", "namespace", f"many-{key}")
                    kind.create_many(
                        f"many-{key}", [f"many-{i}" for i in range(args.present)], 2, suspend=True
                    )
                for key, kind in kinds.items():
                    wait(
                        lambda k=kind, n=f"many-{key}": k.suspended_count(n) == args.present,
                        900,
                        f"{key} all suspended",
                        2,
                    )
                result["present"]["create_to_all_reconciled_seconds"] = round(time.monotonic() - started, 1)
                time.sleep(10)
                before = {"mwms": cpu_seconds(ours.pid), "peer": cpu_seconds(peer.pid)}
                time.sleep(args.cpu_window)
                after = {"mwms": cpu_seconds(ours.pid), "peer": cpu_seconds(peer.pid)}
                result["present"]["cpu_window_seconds"] = args.cpu_window
                result["present"]["cpu_share_of_one_core"] = {
                    k: round((after[k] - before[k]) / args.cpu_window, 4) for k in kinds
                }
                result["present"]["rss_mib"] = both_rss(ours, peer)
                progress(present=result["present"])
                started = time.monotonic()
                for key in kinds:
                    kubectl(kubeconfig, "delete", "namespace", f"many-{key}", "--wait=false")
                for key in kinds:
                    kubectl(kubeconfig, "wait", "--for=delete", f"namespace/many-{key}", "--timeout=900s")
                result["present"]["both_namespaces_deleted_seconds"] = round(time.monotonic() - started, 1)

            if "unrelated" in stages:
                # 5. pods that belong to neither.
                time.sleep(10)
                rss_before = both_rss(ours, peer)
                kubectl(kubeconfig, "create", "namespace", "unrelated")
                started = time.monotonic()
                unrelated_pods(core, "unrelated", args.unrelated)
                created = time.monotonic() - started
                time.sleep(20)
                rss_after = both_rss(ours, peer)
                result["unrelated_pods"] = {
                    "pods": args.unrelated,
                    "create_seconds": round(created, 1),
                    "rss_mib_before": rss_before,
                    "rss_mib_with_them": rss_after,
                    "ratio_to_idle": {k: round(rss_after[k] / idle[k], 2) for k in kinds},
                }
                progress(unrelated_pods=result["unrelated_pods"])
            result["targets"] = targets(result)
            shutil.rmtree(logs)
        finally:
            stop_cert.set()
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
            cluster.stop()
            for name in ("tls.crt", "tls.key"):
                (PEER_CERT_DIR / name).unlink(missing_ok=True)
            result["machine"]["uptime_end"] = uptime()
            result["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            save(args.label, result)
            if logs.exists():
                print(f"operator logs kept in {logs}", file=sys.stderr)
    print(json.dumps(result, indent=2))


def targets(result: dict[str, Any]) -> dict[str, Any]:
    """Issue 11's targets of the stages that ran, each with the measured values and whether it is met."""
    found: dict[str, Any] = {}
    if "create_to_4_pods_and_services_seconds" in result:
        lat = result["create_to_4_pods_and_services_seconds"]
        found["create_p50_at_most_0.08_s_and_ahead_of_peer"] = {
            "mwms": lat["mwms"]["p50"],
            "peer": lat["peer"]["p50"],
            "met": lat["mwms"]["p50"] <= 0.08 and lat["mwms"]["p50"] < lat["peer"]["p50"],
        }
    if "delete_right_after_create_until_job_and_pods_gone_seconds" in result:
        dele = result["delete_right_after_create_until_job_and_pods_gone_seconds"]
        found["delete_p95_at_most_1_s"] = {"mwms": dele["mwms"]["p95"], "met": dele["mwms"]["p95"] <= 1.0}
    if "burst" in result:
        ours_ns = result["burst"]["mwms"]["namespace_delete_mean_seconds"]
        peer_ns = result["burst"]["peer"]["namespace_delete_mean_seconds"]
        found["namespace_of_200_deleted_no_slower_than_peer"] = {
            "mwms": ours_ns,
            "peer": peer_ns,
            "met": ours_ns <= peer_ns,
        }
    if "present" in result:
        present = result["present"]
        cpu = present["cpu_share_of_one_core"]["mwms"]
        found["rss_at_most_100_mib_with_1000_jobs"] = {
            "mwms": present["rss_mib"]["mwms"],
            "met": present["rss_mib"]["mwms"] <= 100,
        }
        found["cpu_at_most_0.02_core_with_1000_idle_jobs"] = {"mwms": cpu, "met": cpu <= 0.02}
    if "unrelated_pods" in result:
        ratio = result["unrelated_pods"]["ratio_to_idle"]["mwms"]
        found["rss_at_most_1.2x_idle_with_5000_unrelated_pods"] = {"mwms": ratio, "met": ratio <= 1.2}
    return found


def save(label: str, result: dict[str, Any]) -> None:
    previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    runs = previous.get("runs", {})
    runs[label] = result
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"runs": runs}, indent=2) + "\n")


if __name__ == "__main__":
    main()
