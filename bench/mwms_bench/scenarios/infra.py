"""What the lab and a real node cost. `controlplane`: the control plane's cold build (from the
build-times.jsonl hack/build/build-control-plane.sh keeps), warm starts to /readyz (target <= 15 s) and
/healthz.
`images`: `make images` cold (empty image cache) and warm, and each image's compressed and unpacked layers.
`budget`: the wall time of one command (`-- make demo`), every cache empty with --cold, and the machine's
busy CPU over it (busy core-minutes ÷ cores is the floor no schedule of that work on these cores can beat).
`node`: a real kubelet node's start to Ready and CoreDNS ready; pod create -> Ready, image loaded (busybox,
the trainer); with the chart: `kubectl delete pod` of a running worker -> gone, the seed job -> Succeeded.
Run it under flock /tmp/mwms-node.lock (one real node per machine)."""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from mwms_bench import measure
from mwms_bench.lab import REPO, Lab
from mwms_bench.scenarios import Figures, Scenario
from mwms_dev.chain import Chain
from mwms_dev.cluster import BINARIES, LocalCluster, find_bin_dir
from mwms_dev.demo import tools_bin
from mwms_dev.node_addons import real_node_chart_values
from mwms_kit.standin import trainer_image

MIB = 1024 * 1024


def controlplane(a: argparse.Namespace, figures: Figures) -> None:
    bin_dir = find_bin_dir()
    log = bin_dir.parent / "build-times.jsonl"
    entries = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    covered: set[str] = set()
    used = []
    for entry in reversed(entries):  # the newest builds that together built every binary
        used.append(entry)
        covered |= set(entry["built"].split())
        if covered >= set(BINARIES):
            break
    figures["cold_build"] = {"seconds": sum(e["seconds"] for e in used), "complete": covered >= set(BINARIES)}
    keys = ("api_ready_seconds", "controllers_ready_seconds", "stop_seconds")
    timings: dict[str, list[float]] = {key: [] for key in keys}
    for _ in range(a.runs):
        with tempfile.TemporaryDirectory(prefix="mwms-bench-") as state:
            cluster = LocalCluster(name="bench", state_dir=state, subnet_index=a.subnet_index)
            try:
                cluster.start()
            finally:
                started = time.monotonic()
                cluster.stop()
            timings["stop_seconds"].append(measure.since(started))
            timings["api_ready_seconds"].append(round(cluster.timings["api_ready"], 2))
            timings["controllers_ready_seconds"].append(round(cluster.timings["ready"], 2))
    warm = {key: {"median": round(statistics.median(v), 2), "runs": v} for key, v in timings.items()}
    figures |= {"warm_start": warm, "within_target": warm["api_ready_seconds"]["median"] <= 15}


def build_images(cache: Path) -> float:
    started = time.monotonic()
    env = {**os.environ, "MWMS_IMAGES_CACHE": str(cache)}
    subprocess.run(["bash", "hack/build/build-images.sh"], cwd=REPO, check=True, env=env)
    return measure.since(started, 1)


def sizes(archive: Path) -> dict[str, Any]:
    with tarfile.open(archive) as tar:
        blob = lambda digest: tar.extractfile(f"blobs/sha256/{digest.split(':')[1]}")  # noqa: E731
        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
        layers = json.load(blob(index["manifests"][0]["digest"]))["layers"]  # type: ignore[arg-type]
        unpacked = 0
        for layer in layers:
            with gzip.open(blob(layer["digest"])) as stream:  # type: ignore[arg-type]
                while chunk := stream.read(MIB):
                    unpacked += len(chunk)
    compressed = round(sum(layer["size"] for layer in layers) / MIB, 1)
    out = {"archive_mib": round(archive.stat().st_size / MIB, 1), "layers_compressed_mib": compressed}
    return out | {"layers_unpacked_mib": round(unpacked / MIB, 1), "layers": len(layers)}


def images(a: argparse.Namespace, figures: Figures) -> None:
    pip_cache = Path(os.environ.get("PIP_CACHE_DIR", Path.home() / ".cache" / "pip"))
    figures["pip_download_cache"] = "warm" if pip_cache.is_dir() and any(pip_cache.iterdir()) else "cold"
    if a.skip_cold:
        cache = Path(os.environ.get("MWMS_IMAGES_CACHE", Path.home() / ".cache" / "mwms" / "images"))
        figures["warm_seconds"] = build_images(cache)
    else:
        cache = Path(tempfile.mkdtemp(prefix="mwms-images-cold-"))
        try:
            figures["cold_seconds"] = build_images(cache)
            figures["warm_seconds"] = build_images(cache)
        finally:
            storage = ["--root", str(cache / "storage"), "--runroot", str(cache / "run")]
            subprocess.run(["buildah", *storage, "rm", "--all"], capture_output=True)
            subprocess.run(["umount", "-R", str(cache / "storage" / "overlay")], capture_output=True)
            shutil.rmtree(cache, ignore_errors=True)
    archives = sorted((REPO / "build" / "images").glob("*.oci.tar"))
    figures["images"] = {p.name.removesuffix(".oci.tar"): sizes(p) for p in archives}


def budget(a: argparse.Namespace, figures: Figures) -> None:
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not a.name or not command:
        raise ValueError("budget: --name NAME -- COMMAND")
    env = {**os.environ, **({"MWMS_CACHE": tempfile.mkdtemp(prefix="mwms-cold-cache-")} if a.cold else {})}
    started, busy = time.monotonic(), measure.machine_busy_seconds()
    by_command = measure.CpuByCommand().start()
    code = subprocess.run(command, cwd=REPO, env=env).returncode
    figures["busy_core_minutes_by_command"] = by_command.stop().minutes()
    minutes = round((time.monotonic() - started) / 60, 1)
    figures |= {"name": a.name, "minutes": minutes, "exit_code": code, "cold": a.cold}
    # No schedule of the same work on these cores can end before busy / cores: the wall time's floor.
    busy_minutes = (measure.machine_busy_seconds() - busy) / 60
    cores = os.cpu_count() or 1
    figures |= {"busy_core_minutes": round(busy_minutes, 1), "floor_minutes": round(busy_minutes / cores, 1)}
    if a.target_minutes:
        figures["met"] = code == 0 and minutes <= a.target_minutes


def pod_start(lab: Lab, name: str, image: str, command: list[str]) -> float:
    """Seconds from `kubectl apply` of a pod to its Ready."""
    container = {"name": "c", "image": image, "imagePullPolicy": "IfNotPresent", "command": command}
    spec = {"terminationGracePeriodSeconds": 1, "containers": [container]}
    started = time.monotonic()
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
    lab.kubectl("apply", "-n", "bench", "-f", "-", input=json.dumps(pod))
    lab.kubectl("wait", "--for=condition=Ready", f"pod/{name}", "-n", "bench", "--timeout=120s")
    seconds = measure.since(started)
    lab.kubectl("delete", "pod", name, "-n", "bench", "--wait=false")
    return seconds


def worker_delete(lab: Lab, chain: Chain, settle: float) -> dict[str, float | str]:
    """Once both workers of a 2-worker job run (and `settle` seconds more: the trainer is past its imports),
    `kubectl delete pod` one worker: seconds until the pod is gone."""
    chain.sample = REPO / "manifests" / "samples" / "minimal.yaml"
    name = chain.apply_sample()
    pods = lab.core.list_namespaced_pod
    phases = lambda: [p.status.phase for p in pods("bench", label_selector=f"mwms.dev/job-name={name}").items]  # noqa: E731
    measure.wait(lambda: phases() == ["Running"] * 2, 300, "both workers run", 1)
    time.sleep(settle)
    started = time.monotonic()
    lab.kubectl("delete", "pod", f"{name}-worker-1", "-n", "bench", "--wait=true", "--timeout=120s")
    seconds = measure.since(started)
    chain.delete_job(name)
    return {"seconds": seconds, "settle_seconds": settle, "pod": f"{name}-worker-1"}


def node(a: argparse.Namespace, figures: Figures) -> None:
    with (
        tempfile.TemporaryDirectory(prefix="mwms-bench-") as tmp,
        Lab(Path(tmp), a.subnet_index, real_nodes=1, ours=0, manifests=False) as lab,
    ):
        node = lab.cluster.kubelet_nodes["node-1"]
        figures["control_plane_ready_seconds"] = round(lab.cluster.timings["ready"], 2)
        figures["node"] = {k: round(v, 2) for k, v in node.timings.items()}
        lab.namespace("bench")
        busybox, trainer = node.parts.image_names["busybox"], trainer_image(node.images())
        runs = [pod_start(lab, f"bb-{i}", busybox, ["sleep", "3600"]) for i in range(a.pods)]
        figures["pod_start_busybox_seconds"] = {"median": statistics.median(runs), "runs": runs}
        sleep = ["python", "-c", "import time; time.sleep(3600)"]
        runs = [pod_start(lab, f"tr-{i}", trainer, sleep) for i in range(a.pods)]
        figures["pod_start_trainer_image_seconds"] = {"median": statistics.median(runs), "runs": runs}
        with tarfile.open(REPO / "build" / "images" / "mwms-trainer.oci.tar") as archive:
            index = json.load(archive.extractfile("index.json"))  # type: ignore[arg-type]
        figures["trainer_image"] = {"name": trainer, "manifest": index["manifests"][0]["digest"]}
        if not a.no_chain:
            bins, values = tools_bin(), ["mlflow.enabled=true", "mlflow.extraAllowedHosts={10.*}"]
            values += real_node_chart_values(node.images())
            tools = {"helm": str(bins / "helm"), "kubectl": str(bins / "kubectl")}
            chain = Chain(lab.cluster.kubeconfig, job_namespace="bench", helm_values=values, **tools)
            chain.install_chart()
            figures["delete_running_worker"] = worker_delete(lab, chain, a.settle)
            chain.sample = REPO / "manifests" / "samples" / "seed-breast-cancer.yaml"
            started = time.monotonic()
            name = chain.apply_sample()
            chain.wait_succeeded(name)
            figures["seed_apply_to_succeeded_seconds"] = measure.since(started, 1)


BUDGET = {"name": ("", "what is timed: make demo, .ci/run"), "target_minutes": 0.0, "command": [""]}
BUDGET["cold"] = (False, "every cache empty: MWMS_CACHE in a new folder")
NODE = {"pods": (3, "started one after the other, per image"), "settle": (15.0, "a worker's run, s")}
NODE["no_chain"] = (False, "no chart, no TrainJob")
SCENARIOS = [
    Scenario("controlplane", "the control plane's cold build and warm starts", controlplane, {"runs": 3}),
    Scenario("images", "`make images` cold and warm; the images' sizes", images, {"skip_cold": False}),
    Scenario("budget", "the wall time of one command: -- COMMAND", budget, BUDGET),
    Scenario("node", "a real node: start, pods' start, a worker's delete, the seed job", node, NODE),
]
