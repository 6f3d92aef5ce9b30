"""The real kubelet node: start, pod start, pod delete, the seed TrainJob.

    .venv/bin/python bench/node_bench.py [--subnet-index 30] [--pods 5] [--no-chain]
    .venv/bin/python bench/node_bench.py --only-delete  # node start, worker delete: into the results

Starts its own clusters (needs root, hack/build/build-node.sh's parts, `make images` for the chain parts) and
stops them afterwards. Measured on the real node: control plane + node start to Node Ready and to CoreDNS
ready (images loaded first), pod create → Ready with the image already in containerd (busybox, then the
trainer image), `kubectl delete pod` of a running trainer worker → gone, and the seed TrainJob (4 workers)
from `kubectl apply` to Succeeded. The trainer measured is the one in build/images/mwms-trainer.oci.tar (its
image id is recorded). Results: bench/results/node.json (its `node_agent` figures are from the retired node
agent)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "node.json"
sys.path.insert(0, str(REPO / "dev"))

from mwms_dev.chain import Chain  # noqa: E402
from mwms_dev.cluster import LocalCluster  # noqa: E402
from mwms_dev.demo import tools_bin  # noqa: E402
from mwms_dev.devcluster import project_images  # noqa: E402
from mwms_dev.node_addons import real_node_chart_values  # noqa: E402

BASE_VALUES = ["mlflow.enabled=true", "mlflow.extraAllowedHosts={10.*}"]


class Kubectl:
    def __init__(self, binary: str, kubeconfig: Path):
        self.binary, self.kubeconfig = binary, kubeconfig

    def __call__(self, *args: str, input: str | None = None, timeout: float = 300) -> str:
        done = subprocess.run(
            [self.binary, f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr}")
        return done.stdout

    def json(self, *args: str) -> dict:
        return json.loads(self(*args, "-o", "json"))


def timed_pod_start(kubectl: Kubectl, namespace: str, name: str, image: str, command: list[str]) -> float:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {"name": "c", "image": image, "imagePullPolicy": "IfNotPresent", "command": command}
            ],
        },
    }
    started = time.monotonic()
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pod))
    kubectl("wait", "--for=condition=Ready", f"pod/{name}", "-n", namespace, "--timeout=120s")
    seconds = time.monotonic() - started
    kubectl("delete", "pod", name, "-n", namespace, "--wait=false")
    return round(seconds, 2)


def seed_job_seconds(chain: Chain) -> float:
    started = time.monotonic()
    name = chain.apply_sample()
    chain.wait_succeeded(name)
    seconds = time.monotonic() - started
    chain.delete_job(name)
    return round(seconds, 1)


def running_worker_delete_seconds(chain: Chain, kubectl: Kubectl, settle: float) -> dict:
    """A 2-worker TrainJob; once both workers run (and `settle` seconds more, so the trainer is past its
    imports), `kubectl delete pod` one worker and time until the pod object is gone."""
    chain.sample = REPO / "manifests" / "samples" / "minimal.yaml"
    name = chain.apply_sample()
    ns = chain.job_namespace
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        pods = kubectl.json("get", "pods", "-n", ns, "-l", f"mwms.dev/job-name={name}")["items"]
        if len(pods) == 2 and all((p.get("status") or {}).get("phase") == "Running" for p in pods):
            break
        time.sleep(1)
    else:
        raise RuntimeError(f"the workers of {name} never ran")
    time.sleep(settle)
    victim = f"{name}-worker-1"
    started = time.monotonic()
    kubectl("delete", "pod", victim, "-n", ns, "--wait=true", "--timeout=120s", timeout=180)
    seconds = round(time.monotonic() - started, 2)
    kubectl("delete", "trainjob", name, "-n", ns, "--wait=true", "--timeout=180s", timeout=240)
    chain.sample = REPO / "manifests" / "samples" / "seed-breast-cancer.yaml"
    return {"seconds": seconds, "settle_seconds": settle, "pod": victim}


def image_id(archive: Path) -> str:
    import tarfile

    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        assert member is not None
        index = json.load(member)
    return index["manifests"][0]["digest"]


def bench_real_node(args: argparse.Namespace, bins: Path) -> dict:
    images = project_images()
    result: dict = {"images": [p.name for p in images]}
    # The state dir goes afterwards (the cluster stops first): a real node's dir holds its pods' files.
    with (
        tempfile.TemporaryDirectory(prefix="mwms-node-bench-") as state,
        LocalCluster(name="bench-node", state_dir=state, subnet_index=args.subnet_index) as cluster,
    ):
        started = time.monotonic()
        node = cluster.start_kubelet_node(images=images)
        result["control_plane_ready_seconds"] = round(cluster.timings["ready"], 2)
        result["node"] = {k: round(v, 2) for k, v in node.timings.items()}
        result["node"]["start_kubelet_node_seconds"] = round(time.monotonic() - started, 2)
        kubectl = Kubectl(str(bins / "kubectl"), cluster.kubeconfig)
        kubectl("create", "namespace", "bench")
        time.sleep(2)  # the ServiceAccount controller makes `default`
        busybox = node.parts.image_names["busybox"]
        if not args.only_delete:
            runs = [
                timed_pod_start(kubectl, "bench", f"bb-{i}", busybox, ["sleep", "3600"])
                for i in range(args.pods)
            ]
            result["pod_start_busybox_seconds"] = {"median": statistics.median(runs), "runs": runs}
        loaded = node.images()
        trainer = next((n for n in loaded if "/mwms-trainer:" in n), None)
        if trainer and not args.only_delete:
            runs = [
                timed_pod_start(
                    kubectl, "bench", f"tr-{i}", trainer, ["python", "-c", "import time; time.sleep(3600)"]
                )
                for i in range(args.pods)
            ]
            result["pod_start_trainer_image_seconds"] = {"median": statistics.median(runs), "runs": runs}
            result["trainer_image"] = {
                "name": trainer,
                "manifest": image_id(REPO / "build/images/mwms-trainer.oci.tar"),
            }
        if args.chain and trainer:
            chain = Chain(
                kubeconfig=cluster.kubeconfig,
                helm=str(bins / "helm"),
                kubectl=str(bins / "kubectl"),
                job_namespace="bench",
                helm_values=BASE_VALUES + real_node_chart_values(loaded),
            )
            chain.install_chart()
            result["delete_running_worker"] = running_worker_delete_seconds(
                chain, kubectl, settle=args.settle
            )
            if trainer:
                result["delete_running_worker"]["trainer_manifest"] = image_id(
                    REPO / "build/images/mwms-trainer.oci.tar"
                )
            if not args.only_delete:
                result["seed_apply_to_succeeded_seconds"] = seed_job_seconds(chain)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subnet-index", type=int, default=30)
    parser.add_argument("--pods", type=int, default=5, help="pods started one after the other, per image")
    parser.add_argument("--settle", type=float, default=15.0, help="seconds a worker runs before its delete")
    parser.add_argument("--no-chain", dest="chain", action="store_false", help="skip the TrainJob parts")
    parser.add_argument(
        "--only-delete",
        action="store_true",
        help="real node start and the worker delete alone, into the existing results",
    )
    args = parser.parse_args()
    bins = tools_bin()
    results: dict = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpus": os.cpu_count(),
        "load_average_before": list(os.getloadavg()),
    }
    if args.only_delete:
        load_before = list(os.getloadavg())
        partial = bench_real_node(args, bins)
        now = results["date"]
        results = json.loads(RESULTS.read_text())
        results["real_node"].update(
            {
                "delete_running_worker": {"date": now, **partial["delete_running_worker"]},
                "node_image_store_kept": {"date": now, **partial["node"]},
            }
        )
        results["real_node"]["delete_running_worker"]["load_average_before"] = load_before
    else:
        results["real_node"] = bench_real_node(args, bins)
    results["load_average_after"] = list(os.getloadavg())
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
