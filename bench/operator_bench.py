"""The operator against the local control plane: how fast TrainJobs get their pods, and what it costs.

    .venv/bin/python bench/operator_bench.py [--subnet-index 3] [--runs 20] [--burst 200] [--present 1000]
        [--unrelated 5000] [--label after] [--operator-src DIR]

1. p50/p95 from `kubectl apply` of a 4-worker TrainJob to its Service and all 4 pods existing (--runs).
2. p50/p95 of deleting a TrainJob right after creating it, until it and its pods are gone (--runs).
3. Wall time from one `kubectl apply` of --burst 2-worker TrainJobs to all of them having Service and pods;
   operator RSS with them present; then the time to delete their namespace.
4. Operator RSS (and CPU share) with --present TrainJobs present (suspended, so no pods), once every one
   of them has been reconciled.
5. Operator RSS with --unrelated pods present that are not ours (no node: they stay Pending, which is all a
   watch costs).
It starts its own LocalCluster without a node (pods are created, not run: creation is measured) and
`python -m mwms_operator` with its default settings; --operator-src runs another checkout's operator/ (e.g.
the previous release, for a before/after). Results go to bench/results/operator.json under --label, with
the load average (other work on the machine slows everything down). Needs root.
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


def unrelated_pod(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "unrelated"}},
        "spec": {"containers": [{"name": "c", "image": "registry.invalid/pause:1"}]},
    }


def gone(api: Api, namespace: str, name: str) -> bool:
    try:
        api.custom.get_namespaced_custom_object("mwms.dev", "v1alpha1", namespace, "trainjobs", name)
    except kubernetes.client.ApiException as error:
        if error.status != 404:
            raise
    else:
        return False
    return not api.core.list_namespaced_pod(namespace, label_selector=f"mwms.dev/job-name={name}").items


def summary(values: list[float]) -> dict:
    return {
        "runs": len(values),
        "p50": round(statistics.median(values), 3),
        "p95": round(percentile(values, 0.95), 3),
        "max": round(max(values), 3),
    }


def progress(**measured: object) -> None:
    """Each stage's numbers as soon as they exist, so a run cut short still says what it measured."""
    print(json.dumps(measured, default=str), flush=True)


def settled_rss(pid: int, seconds: float = 10) -> float:
    time.sleep(seconds)
    return rss_mib(pid)


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
    parser.add_argument("--unrelated", type=int, default=5000)
    parser.add_argument("--label", default="after", help="the key of this run in the results file")
    parser.add_argument("--operator-src", type=Path, default=REPO / "operator")
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
                "PYTHONPATH": os.pathsep.join([str(args.operator_src), os.environ.get("PYTHONPATH", "")]),
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
            progress(idle_rss_mib=baseline_rss)

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

            # 2. Delete right after create (the operator is busy creating its pods), until all is gone.
            deletes = []
            for run in range(args.runs):
                name = f"del-{run}"
                apply(kubeconfig, "latency", [trainjob(name, 4)])
                time.sleep(0.05)
                started = time.monotonic()
                api.custom.delete_namespaced_custom_object(
                    "mwms.dev", "v1alpha1", "latency", "trainjobs", name
                )
                wait(lambda name=name: gone(api, "latency", name), 180, f"{name} gone")
                deletes.append(time.monotonic() - started)

            # 2. A burst of jobs in one apply.
            kubectl(kubeconfig, "create", "namespace", "burst")
            jobs = [trainjob(f"burst-{i}", 2) for i in range(args.burst)]
            started = time.monotonic()
            apply(kubeconfig, "burst", jobs)
            applied = time.monotonic() - started
            wait(lambda: len(api.ready_jobs("burst", 2)) == args.burst, 900, "burst pods", 0.25)
            burst_seconds = time.monotonic() - started
            burst_rss = settled_rss(operator.pid)
            progress(
                burst_s=burst_seconds,
                burst_rss_mib=burst_rss,
                latency=summary(latencies),
                delete=summary(deletes),
            )
            started = time.monotonic()
            kubectl(kubeconfig, "delete", "namespace", "burst", "--wait=true", "--timeout=600s")
            namespace_delete_seconds = time.monotonic() - started
            progress(namespace_delete_s=namespace_delete_seconds)

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
            progress(present_rss_mib=present_rss, cpu_share=cpu_share)
            kubectl(kubeconfig, "delete", "namespace", "many", "--wait=true", "--timeout=900s")
            quiet_rss = settled_rss(operator.pid)

            # 5. Pods that are not ours.
            kubectl(kubeconfig, "create", "namespace", "unrelated")
            for start in range(0, args.unrelated, 500):
                chunk = range(start, min(start + 500, args.unrelated))
                apply(kubeconfig, "unrelated", [unrelated_pod(f"other-{i}") for i in chunk])
            unrelated_rss = settled_rss(operator.pid, 20)
            progress(unrelated_rss_mib=unrelated_rss)
        finally:
            if operator is not None:
                operator.terminate()
                operator.wait(timeout=60)
            cluster.stop()

    result = {
        "what": "mwms-operator against the local control plane (no node: pod creation is measured)",
        "operator_source": str(args.operator_src),
        "operator_settings": "defaults, log level WARNING",
        "apply_to_service_and_4_pods_seconds": summary(latencies),
        "delete_right_after_create_until_job_and_pods_gone_seconds": summary(deletes),
        "burst": {
            "trainjobs": args.burst,
            "replicas_each": 2,
            "kubectl_apply_seconds": round(applied, 2),
            "apply_to_all_pods_and_services_seconds": round(burst_seconds, 2),
            "operator_rss_mib_with_them_present": round(burst_rss, 1),
            "namespace_delete_seconds": round(namespace_delete_seconds, 2),
        },
        "present": {
            "trainjobs": args.present,
            "state": "suspended (no pods), every one reconciled",
            "operator_rss_mib": round(present_rss, 1),
            "operator_rss_mib_idle_baseline": round(baseline_rss, 1),
            "operator_cpu_share_of_one_core": round(cpu_share, 3),
            "operator_rss_mib_after_their_namespace_is_deleted": round(quiet_rss, 1),
        },
        "unrelated_pods": {
            "pods": args.unrelated,
            "operator_rss_mib": round(unrelated_rss, 1),
            "ratio_to_idle_baseline": round(unrelated_rss / baseline_rss, 2),
        },
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "loadavg": os.getloadavg()},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    runs = previous.get("runs", {}) if isinstance(previous.get("runs"), dict) else {}
    runs[args.label] = result
    RESULTS.write_text(json.dumps({"runs": runs}, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
