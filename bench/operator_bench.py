"""The operator against the local control plane: how fast TrainJobs get their pods, and what it costs.

    .venv/bin/python bench/operator_bench.py [--subnet-index 3] [--runs 20] [--burst 200] [--present 1000]

1. p50/p95 from `kubectl apply` of a 4-worker TrainJob to its Service and all 4 pods existing (--runs).
2. Wall time from one `kubectl apply` of --burst 2-worker TrainJobs to all of them having Service and pods.
3. Operator RSS (and CPU share) with --present TrainJobs present (suspended, so no pods), once every one
   of them has been reconciled.
It starts its own LocalCluster without a node agent (pods are created, not run: creation is measured) and
`python -m mwms_operator` with its default settings. Results: bench/results/operator.json, with the load
average (other work on the machine slows everything down). Needs root.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import kubernetes

from mwms_dev.cluster import LocalCluster, free_port

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results" / "operator.json"


def trainjob(name: str, replicas: int, *, suspend: bool = False) -> dict:
    return {
        "apiVersion": "mwms.dev/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "runPolicy": {"suspend": suspend, "startupTimeoutSeconds": 3600}},
    }


def kubectl(kubeconfig: Path, *args: str, input: str | None = None) -> str:
    result = subprocess.run(
        ["kubectl", f"--kubeconfig={kubeconfig}", *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if result.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {result.stderr}")
    return result.stdout


def apply(kubeconfig: Path, namespace: str, jobs: list[dict]) -> None:
    kubectl(
        kubeconfig,
        "apply",
        "-n",
        namespace,
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": jobs}),
    )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Api:
    def __init__(self, kubeconfig: Path) -> None:
        client = kubernetes.config.new_client_from_config(str(kubeconfig))
        self.core = kubernetes.client.CoreV1Api(client)
        self.custom = kubernetes.client.CustomObjectsApi(client)

    def ready_jobs(self, namespace: str, replicas: int) -> set[str]:
        """Jobs whose Service and every pod exist."""
        pods: dict[str, int] = {}
        for pod in self.core.list_namespaced_pod(namespace, label_selector="mwms.dev/job-name").items:
            job = pod.metadata.labels["mwms.dev/job-name"]
            pods[job] = pods.get(job, 0) + 1
        services = {s.metadata.name for s in self.core.list_namespaced_service(namespace).items}
        return {job for job, count in pods.items() if count == replicas and job in services}

    def phases(self, namespace: str) -> list[str]:
        jobs = self.custom.list_namespaced_custom_object("mwms.dev", "v1alpha1", namespace, "trainjobs")[
            "items"
        ]
        return [j.get("status", {}).get("phase", "") for j in jobs]


def wait(predicate, timeout: float, what: str, interval: float = 0.02):
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(interval)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--subnet-index", type=int, default=int(os.environ.get("MWMS_BENCH_SUBNET_INDEX", "3"))
    )
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--burst", type=int, default=200)
    parser.add_argument("--present", type=int, default=1000)
    args = parser.parse_args()

    with (
        tempfile.TemporaryDirectory(prefix="mwms-opbench-") as tmp,
        open(Path(tmp) / "operator.log", "wb") as log,
    ):
        state = Path(tmp) / "cluster"
        cluster = LocalCluster(name="opbench", state_dir=state, subnet_index=args.subnet_index).start()
        operator = None
        try:
            kubeconfig = cluster.kubeconfig
            kubectl(kubeconfig, "apply", "-f", str(REPO / "manifests" / "crd.yaml"))
            wait(
                lambda: (
                    subprocess.run(
                        ["kubectl", f"--kubeconfig={kubeconfig}", "get", "trainjobs", "-A"],
                        capture_output=True,
                    ).returncode
                    == 0
                ),
                60,
                "CRD served",
                0.2,
            )
            env = {
                **os.environ,
                "KUBECONFIG": str(kubeconfig),
                "MWMS_METRICS_PORT": str(free_port()),
                "MWMS_HEALTH_PORT": str(free_port()),
                "MWMS_LOG_LEVEL": "WARNING",
            }
            operator = subprocess.Popen(
                [sys.executable, "-m", "mwms_operator"],
                env=env,
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            api = Api(kubeconfig)
            time.sleep(3)
            baseline_rss = rss_mib(operator.pid)

            # 1. One 4-worker job at a time.
            kubectl(kubeconfig, "create", "namespace", "latency")
            latencies = []
            for run in range(args.runs):
                name = f"lat-{run}"
                started = time.monotonic()
                apply(kubeconfig, "latency", [trainjob(name, 4)])
                wait(lambda name=name: name in api.ready_jobs("latency", 4), 120, f"{name} pods")
                latencies.append(time.monotonic() - started)
            kubectl(
                kubeconfig, "delete", "trainjobs", "--all", "-n", "latency", "--wait=true", "--timeout=300s"
            )

            # 2. A burst of jobs in one apply.
            kubectl(kubeconfig, "create", "namespace", "burst")
            jobs = [trainjob(f"burst-{i}", 2) for i in range(args.burst)]
            started = time.monotonic()
            apply(kubeconfig, "burst", jobs)
            applied = time.monotonic() - started
            wait(lambda: len(api.ready_jobs("burst", 2)) == args.burst, 900, "burst pods", 0.25)
            burst_seconds = time.monotonic() - started
            kubectl(
                kubeconfig, "delete", "trainjobs", "--all", "-n", "burst", "--wait=true", "--timeout=600s"
            )

            # 3. Many jobs present.
            kubectl(kubeconfig, "create", "namespace", "many")
            for start in range(0, args.present, 250):
                chunk = range(start, min(start + 250, args.present))
                apply(kubeconfig, "many", [trainjob(f"many-{i}", 2, suspend=True) for i in chunk])
            wait(lambda: api.phases("many").count("Suspended") == args.present, 900, "all reconciled", 1)
            time.sleep(10)  # settle: every timer has ticked a few times
            cpu_before, window = cpu_seconds(operator.pid), 30.0
            time.sleep(window)
            cpu_share = (cpu_seconds(operator.pid) - cpu_before) / window
            present_rss = rss_mib(operator.pid)
        finally:
            if operator is not None:
                operator.terminate()
                operator.wait(timeout=60)
            cluster.stop()

    result = {
        "what": "mwms-operator against the local control plane (no node agent: pod creation is measured)",
        "operator_settings": "defaults (MWMS_RECONCILE_INTERVAL_SECONDS=3), log level WARNING",
        "apply_to_service_and_4_pods_seconds": {
            "runs": args.runs,
            "p50": round(statistics.median(latencies), 3),
            "p95": round(percentile(latencies, 0.95), 3),
            "max": round(max(latencies), 3),
        },
        "burst": {
            "trainjobs": args.burst,
            "replicas_each": 2,
            "kubectl_apply_seconds": round(applied, 2),
            "apply_to_all_pods_and_services_seconds": round(burst_seconds, 2),
        },
        "present": {
            "trainjobs": args.present,
            "state": "suspended (no pods), every one reconciled",
            "operator_rss_mib": round(present_rss, 1),
            "operator_rss_mib_idle_baseline": round(baseline_rss, 1),
            "operator_cpu_share_of_one_core": round(cpu_share, 3),
        },
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "loadavg": os.getloadavg()},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
