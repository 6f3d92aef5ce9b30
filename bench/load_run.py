"""Load on the operator with pods that really run: what bench/operator_bench.py does not cover.

    .venv/bin/python bench/load_run.py [--jobs 40] [--present 1000] [--soak 180] [--subnet-index 6]

1. --jobs 2-worker TrainJobs applied at once on one real kubelet node, every pod with a cheap command (the
   trainer image's `true`, no shell), so the chief exits 0 at once: all must reach Succeeded. Recorded: wall
   time to all Succeeded, per-job creation -> completionTime, operator RSS sampled throughout, and the
   operator's own reconcile latency and creation -> all-pods-created histograms from its /metrics.
2. --present TrainJobs present (suspended: no pods), then operator RSS sampled every 5 s for --soak
   seconds once all are reconciled: a memory leak shows as a slope.
The kubelet takes at most 110 pods, so --jobs 50 at most; run it under `flock /tmp/mwms-node.lock` (one
real node per machine). Figures in bench/results/load.json from before 2026-12-05 came from the retired
node agent (200 jobs).
bench/operator_bench.py measures pod *creation* (apply -> pods, burst without any node, RSS with N
present once); this script adds the run to the end state and RSS over time. The operator runs with its
default settings, logged in as its ServiceAccount (RBAC from manifests/). Results: bench/results/load.json
and the "Load" section of docs/benchmarks.md. Needs root.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import kubernetes
from operator_bench import apply, cpu_seconds, kubectl, percentile, rss_mib, wait  # bench/, same folder

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "load.json"
DOC = REPO / "docs" / "benchmarks.md"
SECTION_START, SECTION_END = "<!-- load_run.py: begin -->", "<!-- load_run.py: end -->"
# tests/support: the operator harness, as the integration tests run the operator (its ServiceAccount's token).
sys.path.insert(0, str(REPO / "tests"))


class Kubectl:
    """The call shape the harness expects (kubectl(*args, check=) -> CompletedProcess)."""

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            ["kubectl", f"--kubeconfig={self.kubeconfig}", *args], capture_output=True, text=True, timeout=120
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {result.stderr}")
        return result


def cheap_job(name: str, *, suspend: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "mwms.dev/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {
            "replicas": 2,
            "template": {"spec": {"containers": [{"name": "trainer", "command": ["true"]}]}},
            "runPolicy": {"suspend": suspend, "startupTimeoutSeconds": 3600},
        },
    }


class RssSampler:
    def __init__(self, pid: int, interval: float) -> None:
        self.pid, self.interval = pid, interval
        self.started = time.monotonic()
        self.samples: list[tuple[float, float]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            self.samples.append((round(time.monotonic() - self.started, 1), round(rss_mib(self.pid), 1)))
            self.stop.wait(self.interval)

    def close(self) -> list[tuple[float, float]]:
        self.stop.set()
        self.thread.join(timeout=10)
        return self.samples


def histogram(metrics: str, name: str) -> dict[str, Any]:
    """Count, mean and bucket-bound quantiles of a Prometheus histogram from the text format."""
    buckets = [
        (float(le), float(count))
        for le, count in re.findall(rf'^{name}_bucket{{le="([^"]+)"}} (\S+)$', metrics, re.MULTILINE)
    ]
    total = float(re.search(rf"^{name}_count (\S+)$", metrics, re.MULTILINE).group(1))
    summed = float(re.search(rf"^{name}_sum (\S+)$", metrics, re.MULTILINE).group(1))

    def quantile(q: float) -> float | None:
        for bound, count in sorted(buckets):
            if count >= q * total:
                return bound
        return None

    return {
        "count": int(total),
        "mean_s": round(summed / total, 4) if total else None,
        "p50_le_s": quantile(0.5),
        "p95_le_s": quantile(0.95),
        "p99_le_s": quantile(0.99),
    }


def slope_mib_per_min(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of RSS over time."""
    n = len(samples)
    if n < 2:
        return 0.0
    mean_t = sum(t for t, _ in samples) / n
    mean_r = sum(r for _, r in samples) / n
    var = sum((t - mean_t) ** 2 for t, _ in samples)
    return round(60 * sum((t - mean_t) * (r - mean_r) for t, r in samples) / var, 3) if var else 0.0


def seconds_between(start: str, end: str) -> float:
    from datetime import datetime

    def parse(text: str) -> datetime:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))

    return (parse(end) - parse(start)).total_seconds()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--present", type=int, default=1000)
    parser.add_argument("--soak", type=float, default=180, help="seconds of RSS sampling with --present jobs")
    parser.add_argument(
        "--subnet-index", type=int, default=int(os.environ.get("MWMS_BENCH_SUBNET_INDEX", "6"))
    )
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--no-doc", action="store_true")
    args = parser.parse_args()

    from mwms_dev.cluster import LocalCluster, free_port
    from mwms_dev.devcluster import project_images
    from mwms_kit import operator_harness as harness

    loadavg_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="mwms-load-") as tmp:
        workdir = Path(tmp)
        cluster = LocalCluster(name="load", state_dir=workdir / "cluster", subnet_index=args.subnet_index)
        cluster.start()
        operator = None
        try:
            cluster.start_kubelet_node(images=project_images())
            kubeconfig = cluster.kubeconfig
            kubectl(kubeconfig, "apply", "-f", str(REPO / "manifests" / "crd.yaml"))
            kubectl(kubeconfig, "create", "namespace", "mwms-system")
            kubectl(kubeconfig, "apply", "-f", str(REPO / "manifests" / "rbac.yaml"))
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
            sa_config = harness.service_account_kubeconfig(
                Kubectl(kubeconfig), cluster, workdir / "sa.kubeconfig"
            )
            metrics_port = free_port()
            env = {
                **os.environ,
                "KUBECONFIG": str(sa_config),
                "MWMS_METRICS_PORT": str(metrics_port),
                "MWMS_HEALTH_PORT": str(free_port()),
            }
            env.pop("KUBERNETES_SERVICE_HOST", None)
            log = (workdir / "operator.log").open("wb")
            operator = subprocess.Popen(
                [sys.executable, "-m", "mwms_operator"],
                env=env,
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            api_client = kubernetes.config.new_client_from_config(str(kubeconfig))
            custom = kubernetes.client.CustomObjectsApi(api_client)

            def jobs(namespace: str) -> list[dict[str, Any]]:
                return custom.list_namespaced_custom_object("mwms.dev", "v1alpha1", namespace, "trainjobs")[
                    "items"
                ]

            time.sleep(5)
            idle_rss = rss_mib(operator.pid)

            # 1. A burst of jobs that run to the end.
            kubectl(kubeconfig, "create", "namespace", "burst")
            sampler = RssSampler(operator.pid, 2)
            cpu_before = cpu_seconds(operator.pid)
            started = time.monotonic()
            apply(kubeconfig, "burst", [cheap_job(f"run-{i}") for i in range(args.jobs)])
            applied_s = time.monotonic() - started

            def all_finished() -> list[dict[str, Any]] | None:
                items = jobs("burst")
                done = [j for j in items if j.get("status", {}).get("phase") in ("Succeeded", "Failed")]
                return items if len(done) == args.jobs else None

            finished = wait(all_finished, 1800, "all burst jobs finished", 2)
            burst_s = time.monotonic() - started
            burst_cpu = cpu_seconds(operator.pid) - cpu_before
            burst_rss = sampler.close()
            phases: dict[str, int] = {}
            for job in finished:
                phases[job["status"]["phase"]] = phases.get(job["status"]["phase"], 0) + 1
            to_done = [
                seconds_between(j["metadata"]["creationTimestamp"], j["status"]["completionTime"])
                for j in finished
                if j["status"].get("completionTime")
            ]
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as response:
                metrics = response.read().decode()
            reconcile = histogram(metrics, "mwms_reconcile_duration_seconds")
            pods_created = histogram(metrics, "mwms_trainjobs_pod_creation_duration_seconds")
            kubectl(kubeconfig, "delete", "namespace", "burst", "--wait=true", "--timeout=900s")

            # 2. Many jobs present, RSS over time.
            kubectl(kubeconfig, "create", "namespace", "many")
            rss_before_present = rss_mib(operator.pid)
            started = time.monotonic()
            for start in range(0, args.present, 250):
                chunk = range(start, min(start + 250, args.present))
                apply(kubeconfig, "many", [cheap_job(f"many-{i}", suspend=True) for i in chunk])
            wait(
                lambda: (
                    sum(1 for j in jobs("many") if j.get("status", {}).get("phase") == "Suspended")
                    == args.present
                ),
                1800,
                "all present jobs reconciled",
                2,
            )
            reconciled_s = time.monotonic() - started
            soak = RssSampler(operator.pid, 5)
            cpu_before = cpu_seconds(operator.pid)
            time.sleep(args.soak)
            soak_cpu_share = (cpu_seconds(operator.pid) - cpu_before) / args.soak
            soak_rss = soak.close()
            operator_alive = operator.poll() is None
            operator_log = (workdir / "operator.log").read_text(errors="replace")
        finally:
            if operator is not None:
                operator.terminate()
                try:
                    operator.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    operator.kill()
            cluster.stop()

    rss_values = [r for _, r in soak_rss]
    result = {
        "what": "operator load, pods run by a real node (`true` as the worker command, 2 workers per job)",
        "command": "python bench/load_run.py " + " ".join(sys.argv[1:]),
        "operator_settings": "defaults (log level INFO), as its ServiceAccount",
        "operator_idle_rss_mib": round(idle_rss, 1),
        "burst": {
            "trainjobs": args.jobs,
            "replicas_each": 2,
            "phases": phases,
            "kubectl_apply_seconds": round(applied_s, 2),
            "apply_to_all_finished_seconds": round(burst_s, 1),
            "creation_to_completion_seconds": {
                "p50": percentile(to_done, 0.5),
                "p95": percentile(to_done, 0.95),
                "max": max(to_done),
            }
            if to_done
            else None,
            "operator_cpu_seconds": round(burst_cpu, 1),
            "operator_rss_mib": {"max": max(r for _, r in burst_rss), "end": burst_rss[-1][1]},
            "operator_rss_samples_t_s_mib": burst_rss[:: max(1, len(burst_rss) // 60)],
            "reconcile_duration": reconcile,
            "creation_to_all_pods_created": pods_created,
        },
        "present": {
            "trainjobs": args.present,
            "state": "suspended (no pods)",
            "apply_to_all_reconciled_seconds": round(reconciled_s, 1),
            "operator_rss_mib_before": round(rss_before_present, 1),
            "soak_seconds": args.soak,
            "operator_rss_mib": {"first": rss_values[0], "max": max(rss_values), "last": rss_values[-1]},
            "operator_rss_slope_mib_per_min": slope_mib_per_min(soak_rss),
            "operator_rss_samples_t_s_mib": soak_rss,
            "operator_cpu_share_of_one_core": round(soak_cpu_share, 3),
        },
        "operator_alive_at_end": operator_alive,
        "operator_log_tracebacks": operator_log.count("Traceback"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "loadavg_start": loadavg_start,
            "loadavg_end": os.getloadavg(),
        },
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(result, indent=2) + "\n")
    if not args.no_doc:
        write_doc(result)
    print(json.dumps({k: v for k, v in result.items() if k not in ("burst", "present")}, indent=2))
    print(json.dumps({k: result["burst"][k] for k in ("phases", "apply_to_all_finished_seconds")}))


def write_doc(r: dict[str, Any]) -> None:
    b, p = r["burst"], r["present"]
    rec, pods = b["reconcile_duration"], b["creation_to_all_pods_created"]
    done = b["creation_to_completion_seconds"] or {}
    section = f"""{SECTION_START}
## Load: jobs that run to the end, and memory over time

Produced by `bench/load_run.py` (results: `bench/results/load.json`; command `{r["command"]}`), measured
{r["measured_at"]} on {r["machine"]["cpus"]} CPUs (load average {r["machine"]["loadavg_start"][0]:.1f} at the
start: other work on the machine slows everything down). The operator runs with its defaults, logged in as its
ServiceAccount; one real kubelet node runs every pod (the worker command is `true`, so this measures the operator and
the control plane, not training).

| Measure | Value |
|---|---|
| TrainJobs applied at once (2 workers each) | {b["trainjobs"]} |
| End states | {", ".join(f"{k}: {v}" for k, v in sorted(b["phases"].items()))} |
| `kubectl apply` of them all (one command; client-side apply, one round trip per object) | {b["kubectl_apply_seconds"]} s |
| Apply start → all finished (wall) | {b["apply_to_all_finished_seconds"]} s |
| Per job, creation → completionTime (p50 / p95 / max) | {done.get("p50")} / {done.get("p95")} / {done.get("max")} s |
| Reconcile latency (operator histogram: mean; p50 / p95 bucket bound) | {rec["mean_s"]} s; ≤ {rec["p50_le_s"]} / ≤ {rec["p95_le_s"]} s over {rec["count"]} reconciles |
| Creation → all pods created (operator histogram: p50 / p95 bucket bound) | ≤ {pods["p50_le_s"]} / ≤ {pods["p95_le_s"]} s |
| Operator RSS idle → max during the burst | {r["operator_idle_rss_mib"]} → {b["operator_rss_mib"]["max"]} MiB |
| Operator CPU for the burst | {b["operator_cpu_seconds"]} s |
| TrainJobs present (suspended) | {p["trainjobs"]} (all reconciled {p["apply_to_all_reconciled_seconds"]} s after the first apply) |
| Operator RSS over {p["soak_seconds"]:.0f} s with them (first / max / last) | {p["operator_rss_mib"]["first"]} / {p["operator_rss_mib"]["max"]} / {p["operator_rss_mib"]["last"]} MiB |
| RSS trend over the soak (least-squares slope; a short soak, read as an upper bound) | {p["operator_rss_slope_mib_per_min"]} MiB/min |
| Operator CPU with them, idle | {p["operator_cpu_share_of_one_core"]} of one core |
| Operator alive at the end; tracebacks in its log | {r["operator_alive_at_end"]}; {r["operator_log_tracebacks"]} |
{SECTION_END}"""  # noqa: E501 (a table row per line reads best)
    DOC.parent.mkdir(parents=True, exist_ok=True)
    text = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    if SECTION_START in text:
        head, rest = text.split(SECTION_START, 1)
        text = head + section + rest.split(SECTION_END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    DOC.write_text(text)


if __name__ == "__main__":
    main()
