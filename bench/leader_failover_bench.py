"""Two operator replicas against the local control plane: how long from losing the leader to the first
reconcile by the new one.

    .venv/bin/python bench/leader_failover_bench.py [--subnet-index 3] [--runs 5] [--label after]

Each run starts two `python -m mwms_operator` processes with leader election on (the defaults: a 15 s lease,
10 s renew deadline, 2 s retry period), with one TrainJob present, and waits until the leader has reconciled
it. Then:
1. kill -9 the leader (a node lost): seconds until the standby's first reconcile (its
   mwms_reconcile_duration_seconds_count leaves 0). Bound: the lease duration plus a retry period plus kopf's
   start, since the standby must let the Lease expire on its own clock.
2. the same with SIGTERM (a rolling update, a drain): the leader gives the Lease up as it exits.
It starts its own LocalCluster without a node (the pods are created, not run: the operator is what is
measured). Results go to bench/results/leader_failover.json under --label, with the load average (other work
on the machine slows everything down). Needs root.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from mwms_dev.cluster import LocalCluster, free_port

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results" / "leader_failover.json"
NAMESPACE = "mwms-system"
LEASE = "mwms-operator-leader"


def kubectl(kubeconfig: Path, *args: str, check: bool = True) -> str:
    result = subprocess.run(
        ["kubectl", f"--kubeconfig={kubeconfig}", *args], capture_output=True, text=True, timeout=120
    )
    if check and result.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {result.stderr}")
    return result.stdout


def wait(predicate, timeout: float, what: str, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(interval)
    raise RuntimeError(f"timed out after {timeout}s waiting for {what}")


class Replica:
    def __init__(self, kubeconfig: Path, log: Path) -> None:
        self.metrics_port = free_port()
        env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "MWMS_METRICS_PORT": str(self.metrics_port),
            "MWMS_HEALTH_PORT": str(free_port()),
            "MWMS_LEADER_ELECTION": "true",
            "MWMS_LEADER_ELECTION_NAMESPACE": NAMESPACE,
        }
        env.pop("KUBERNETES_SERVICE_HOST", None)
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "mwms_operator"],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=REPO,
            )

    def metric(self, name: str) -> float | None:
        try:
            url = f"http://127.0.0.1:{self.metrics_port}/metrics"
            text = urllib.request.urlopen(url, timeout=2).read().decode()
        except OSError:
            return None
        return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " "))

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)


def one_takeover(kubeconfig: Path, log: Path, how: signal.Signals) -> float:
    kubectl(kubeconfig, "delete", "lease", LEASE, "-n", NAMESPACE, "--ignore-not-found")
    replicas = [Replica(kubeconfig, log), Replica(kubeconfig, log)]
    try:
        leader = wait(
            lambda: next((r for r in replicas if r.metric("mwms_leader_election_master_status") == 1), None),
            120,
            "a leader",
        )
        (standby,) = [r for r in replicas if r is not leader]
        wait(lambda: standby.metric("mwms_leader_election_master_status") == 0, 60, "the standby's metrics")
        wait(lambda: (leader.metric("mwms_reconcile_duration_seconds_count") or 0) > 0, 60, "a reconcile")
        started = time.monotonic()
        leader.process.send_signal(how)
        wait(
            lambda: (standby.metric("mwms_reconcile_duration_seconds_count") or 0) > 0,
            120,
            "the standby's first reconcile",
        )
        return time.monotonic() - started
    finally:
        for replica in replicas:
            replica.stop()


def summary(values: list[float]) -> dict:
    return {
        "runs": len(values),
        "median_s": round(statistics.median(values), 2),
        "max_s": round(max(values), 2),
        "all_s": [round(v, 2) for v in values],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--subnet-index", type=int, default=int(os.environ.get("MWMS_BENCH_SUBNET_INDEX", "3"))
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--label", default="after", help="the key of this run in the results file")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="mwms-leaderbench-") as tmp:
        log = Path(tmp) / "operators.log"
        cluster = LocalCluster(
            name="leaderbench", state_dir=Path(tmp) / "cluster", subnet_index=args.subnet_index
        )
        cluster.start()
        try:
            kubeconfig = cluster.kubeconfig
            kubectl(kubeconfig, "apply", "-f", str(REPO / "manifests" / "crd.yaml"))
            kubectl(kubeconfig, "create", "namespace", NAMESPACE)
            job = {
                "apiVersion": "mwms.dev/v1alpha1",
                "kind": "TrainJob",
                "metadata": {"name": "bench", "namespace": "default"},
                "spec": {"replicas": 2, "runPolicy": {"startupTimeoutSeconds": 3600}},
            }
            wait(
                lambda: subprocess.run(
                    ["kubectl", f"--kubeconfig={kubeconfig}", "apply", "-f", "-"],
                    input=json.dumps(job), capture_output=True, text=True,
                ).returncode == 0,
                60,
                "the CRD to be served",
                0.5,
            )  # fmt: skip
            killed = [one_takeover(kubeconfig, log, signal.SIGKILL) for _ in range(args.runs)]
            print(f"kill -9: {summary(killed)}", flush=True)
            stopped = [one_takeover(kubeconfig, log, signal.SIGTERM) for _ in range(args.runs)]
            print(f"SIGTERM: {summary(stopped)}", flush=True)
        except BaseException:
            print(log.read_text(errors="replace")[-5000:], file=sys.stderr)
            raise
        finally:
            cluster.stop()

    result = {
        "settings": {"lease_duration_s": 15, "renew_deadline_s": 10, "retry_period_s": 2},
        "leader_killed_to_first_reconcile": summary(killed),
        "leader_stopped_to_first_reconcile": summary(stopped),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "loadavg": os.getloadavg()},
    }
    previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    previous[args.label] = result
    RESULTS.write_text(json.dumps(previous, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
