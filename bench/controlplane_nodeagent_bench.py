"""Many pods on one node agent: time to all Running (own netns, IP, token, status) and to all deleted.

    .venv/bin/python bench/controlplane_nodeagent_bench.py [--pods 200] [--subnet-index 2] [--kubeconfig K]

Without --kubeconfig it starts its own LocalCluster (needs root) and stops it afterwards. Each pod runs
`sleep` (cheap, so the node agent is what is measured) and gets the default ServiceAccount volume.
Results go to bench/results/nodeagent.json, with the load average (other work on the machine slows it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "nodeagent.json"


def kubectl(kubeconfig: str, *args: str, input: str | None = None) -> str:
    result = subprocess.run(
        ["kubectl", f"--kubeconfig={kubeconfig}", *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if result.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {result.stderr}")
    return result.stdout


def pod_phases(kubeconfig: str, namespace: str) -> list[str]:
    items = json.loads(kubectl(kubeconfig, "get", "pods", "-n", namespace, "-o", "json"))["items"]
    return [p.get("status", {}).get("phase", "") for p in items]


def wait(predicate, timeout: float) -> float:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"not done after {timeout}s")
        time.sleep(0.5)
    return time.monotonic() - start


def run(kubeconfig: str, pods: int) -> dict:
    namespace = f"bench-{os.getpid()}"
    kubectl(kubeconfig, "create", "namespace", namespace)
    get_sa = ["kubectl", f"--kubeconfig={kubeconfig}", "get", "serviceaccount", "default", "-n", namespace]
    wait(lambda: subprocess.run(get_sa, capture_output=True).returncode == 0, 30)
    manifest = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"p-{i}", "labels": {"bench": "1"}},
                "spec": {
                    "hostname": f"p-{i}",
                    "subdomain": "bench",
                    "terminationGracePeriodSeconds": 5,
                    "containers": [{"name": "main", "image": "none", "command": ["sleep", "3600"]}],
                },
            }
            for i in range(pods)
        ],
    }
    start = time.monotonic()
    kubectl(kubeconfig, "apply", "-n", namespace, "-f", "-", input=json.dumps(manifest))
    created = time.monotonic() - start
    running = created + wait(lambda: pod_phases(kubeconfig, namespace).count("Running") == pods, 600)
    start = time.monotonic()
    kubectl(kubeconfig, "delete", "pods", "--all", "-n", namespace, "--wait=false")
    deleted = wait(lambda: not pod_phases(kubeconfig, namespace), 600)
    kubectl(kubeconfig, "delete", "namespace", namespace, "--wait=false")
    return {
        "pods": pods,
        "apply_seconds": round(created, 1),
        "all_running_seconds": round(running, 1),
        "all_deleted_seconds": round(deleted, 1),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=200)
    parser.add_argument("--subnet-index", type=int, default=2)
    parser.add_argument(
        "--kubeconfig", help="use this running cluster (with a node agent) instead of starting one"
    )
    args = parser.parse_args(argv)
    if args.kubeconfig:
        result = run(args.kubeconfig, args.pods)
    else:
        from mwms_dev.cluster import LocalCluster

        with tempfile.TemporaryDirectory(prefix="mwms-bench-") as state:
            cluster = LocalCluster(name="bench", state_dir=state, subnet_index=args.subnet_index).start()
            try:
                cluster.start_node_agent(pods=max(250, args.pods + 10))
                result = run(str(cluster.kubeconfig), args.pods)
            finally:
                cluster.stop()
    result["load_average"] = [round(x, 2) for x in os.getloadavg()]
    result["cpus"] = os.cpu_count()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
