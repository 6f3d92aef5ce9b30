"""The operator's memory with running jobs and their pods, on a bare control plane (no scheduler, no node).

    .venv/bin/python bench/rss_bench.py [--subnet-index 16] [--jobs 250] [--replicas 4] [--label NAME]
        [--env KEY=VALUE ...] [--tracemalloc out.pickle] [--operator-src DIR]

An API server and etcd only (no controller manager, no scheduler, no node, no KWOK): this script plays the
scheduler and the kubelet. It creates --jobs TrainJobs of --replicas workers, binds each pod the operator
makes to a node name and writes it the statuses a kubelet would (containers being created, then Running,
the trainer container running and ready, a pod IP), then waits until every job says Running and samples the
operator's RSS, its anonymous and file-backed parts (/proc/<pid>/smaps_rollup) and where the anonymous part
lies (heap, thread arenas, stacks, the rest), over --settle seconds (the operator's 60 s resync, which gives
free heap memory back, falls inside it). --env sets the operator's environment (e.g.
MALLOC_ARENA_MAX=2) for a before/after on one harness. --tracemalloc also writes a tracemalloc snapshot of
the operator taken at the end (the tracing itself costs memory: its RSS is not comparable to a plain run's),
and beside it (<file>.stats) Python's allocator statistics and the gc's; with RSS_BENCH_FRAMES=0 in this
script's environment only those, without tracing (RSS comparable); RSS_BENCH_FRAMES=N keeps N frames.
Needs no lock but its subnet index; results go to bench/results/rss.json under --label, with the load.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import kubernetes
from operator_bench import cpu_seconds, kubectl, trainjob, wait  # bench/, same folder

from mwms_contract import names
from mwms_dev.cluster import LocalCluster, free_port

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results" / "rss.json"
NAMESPACE = "rss"
NODE = "rss-node"
# Run the operator with tracemalloc on; write a snapshot when the trigger file appears.
TRACED = """
import os, runpy, sys, threading, time, tracemalloc
frames = int(os.environ.get("RSS_BENCH_FRAMES", "1"))
if frames:
    tracemalloc.start(frames)
def dump():
    trigger, out = os.environ["RSS_BENCH_TRIGGER"], os.environ["RSS_BENCH_SNAPSHOT"]
    while not os.path.exists(trigger):
        time.sleep(0.5)
    with open(out + ".stats", "w") as stats:
        saved = os.dup(2)
        os.dup2(stats.fileno(), 2)
        sys._debugmallocstats()
        os.dup2(saved, 2)
        import gc
        print("gc:", gc.get_stats(), gc.get_count(), file=stats)
        if frames:
            print("traced current, peak:", tracemalloc.get_traced_memory(), file=stats)
    if frames:
        tracemalloc.take_snapshot().dump(trigger + ".snapshot")
        os.rename(trigger + ".snapshot", out)
    else:
        open(out, "w").close()
threading.Thread(target=dump, daemon=True).start()
sys.argv = ["mwms_operator"]
runpy.run_module("mwms_operator", run_name="__main__", alter_sys=True)
"""


class BareCluster(LocalCluster):
    """API server and etcd only: nothing schedules, runs or garbage-collects a pod but this script."""

    def _start_controllers(self, *_: Any) -> None:
        return None


def smaps(pid: int) -> dict[str, float]:
    """Rss, Anonymous and the file-backed rest of it, in MiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        key, value = line.split(":", 1)
        fields[key] = int(value.split()[0]) / 1024
    return {
        "rss_mib": round(fields["Rss"], 1),
        "anon_mib": round(fields["Anonymous"], 1),
        "file_mib": round(fields["Rss"] - fields["Anonymous"], 1),
    }


def anon_parts(pid: int) -> dict[str, float]:
    """Where the anonymous memory lies, in MiB of RSS: the main heap (brk), glibc's per-thread arenas (a
    read-write part of a 64 MiB reservation, the rest of it unmapped), thread stacks (8 MiB below a guard
    page) and the rest (Python's own 1 MiB arenas, large allocations, libraries' buffers)."""
    maps: list[tuple[int, str, str, float]] = []  # (size KiB, perms, name, Rss MiB)
    size = perms = name = ""
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split()
        if "-" in head[0] and len(head) >= 5 and ":" not in head[0]:
            low, high = (int(x, 16) for x in head[0].split("-"))
            size, perms, name = (high - low) // 1024, head[1], head[5] if len(head) > 5 else ""
        elif head[0] == "Rss:":
            maps.append((int(size), perms, name, int(head[1]) / 1024))
    parts = {"heap": 0.0, "thread_arenas": 0.0, "stacks": 0.0, "other_anon": 0.0}
    for i, (kib, mode, where, rss) in enumerate(maps):
        if where == "[heap]":
            parts["heap"] += rss
        elif where or not mode.startswith("rw"):
            continue
        elif i + 1 < len(maps) and maps[i + 1][1] == "---p" and kib + maps[i + 1][0] == 65536:
            parts["thread_arenas"] += rss
        elif kib in (8192, 8188) and i > 0 and maps[i - 1][1] == "---p":
            parts["stacks"] += rss
        else:
            parts["other_anon"] += rss
    return {k: round(v, 1) for k, v in parts.items()}


def run_status(pod: dict[str, Any], ip: str, now: str) -> dict[str, Any]:
    """What a kubelet reports of a running pod whose trainer container is ready."""
    containers = [c["name"] for c in pod["spec"]["containers"]]
    conditions = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
    return {
        "phase": "Running",
        "hostIP": "10.216.0.2",
        "hostIPs": [{"ip": "10.216.0.2"}],
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "startTime": now,
        "qosClass": "BestEffort",
        "conditions": [
            {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": now}
            for t in conditions
        ],
        "containerStatuses": [
            {
                "name": name,
                "ready": True,
                "started": True,
                "restartCount": 0,
                "image": "registry.invalid/trainer:1",
                "imageID": "registry.invalid/trainer@sha256:" + "0" * 64,
                "containerID": f"containerd://{i:064x}",
                "state": {"running": {"startedAt": now}},
                "lastState": {},
            }
            for i, name in enumerate(containers)
        ],
    }


def creating_status(pod: dict[str, Any], now: str) -> dict[str, Any]:
    """A bound pod whose containers are being created, as a kubelet first reports it."""
    return {
        "phase": "Pending",
        "hostIP": "10.216.0.2",
        "hostIPs": [{"ip": "10.216.0.2"}],
        "startTime": now,
        "qosClass": "BestEffort",
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": now},
            {"type": "Initialized", "status": "True", "lastProbeTime": None, "lastTransitionTime": now},
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "lastTransitionTime": now},
        ],
        "containerStatuses": [
            {
                "name": c["name"],
                "ready": False,
                "started": False,
                "restartCount": 0,
                "image": c.get("image", ""),
                "imageID": "",
                "state": {"waiting": {"reason": "ContainerCreating"}},
                "lastState": {},
            }
            for c in pod["spec"]["containers"]
        ],
    }


def play_kubelet(core: kubernetes.client.CoreV1Api, stop: threading.Event, ran: set[str]) -> None:
    """Like a scheduler and a kubelet (as KWOK does): bind each pod of ours, report its containers being
    created, then running and ready; 8 threads, as many pods at a time as a burst of nodes would."""
    selector = names.LABEL_JOB_NAME
    pool = concurrent.futures.ThreadPoolExecutor(8)

    def start(pod: Any, ip: str) -> None:
        name = pod.metadata.name
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": NODE},
        }
        core.create_namespaced_pod_binding(name, NAMESPACE, binding, _preload_content=False)
        raw = core.api_client.sanitize_for_serialization(pod)
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        core.patch_namespaced_pod_status(name, NAMESPACE, {"status": creating_status(raw, now)})
        core.patch_namespaced_pod_status(name, NAMESPACE, {"status": run_status(raw, ip, now)})

    while not stop.is_set():
        pods = core.list_namespaced_pod(NAMESPACE, label_selector=selector).items
        todo = [p for p in pods if p.metadata.name not in ran]
        ips = [f"10.216.{1 + (len(ran) + i) // 250}.{1 + (len(ran) + i) % 250}" for i in range(len(todo))]
        for done in pool.map(start, todo, ips):
            del done
        ran.update(p.metadata.name for p in todo)
        if not todo:
            stop.wait(1)
    pool.shutdown()


def create_jobs(custom: kubernetes.client.CustomObjectsApi, jobs: int, replicas: int) -> None:
    """In 8 threads, as a burst of clients would."""
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for done in pool.map(
            lambda i: custom.create_namespaced_custom_object(
                "mwms.dev", "v1alpha1", NAMESPACE, "trainjobs", trainjob(f"j{i:04d}", replicas)
            ),
            range(jobs),
        ):
            del done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subnet-index", type=int, default=16)
    parser.add_argument("--jobs", type=int, default=250)
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--settle", type=float, default=90.0, help="seconds of RSS samples once all run")
    parser.add_argument("--label", default="", help="the key of this run in the results file")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for the operator")
    parser.add_argument("--tracemalloc", type=Path, help="write the operator's tracemalloc snapshot here")
    parser.add_argument("--operator-src", type=Path, default=REPO / "operator")
    args = parser.parse_args()
    extra = dict(item.split("=", 1) for item in args.env)
    if args.tracemalloc:
        args.tracemalloc.unlink(missing_ok=True)  # the run waits for it to appear
    result: dict[str, Any] = {
        "what": f"{args.jobs} TrainJobs of {args.replicas} workers, all Running (pods bound and given a "
        "running status by this script), on an API server and etcd without scheduler or node",
        "env": extra,
        "operator_source": str(args.operator_src),
        "load_start": os.getloadavg(),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    with tempfile.TemporaryDirectory(prefix="mwms-rssbench-") as tmp:
        cluster = BareCluster(
            name="rssbench", state_dir=Path(tmp) / "cluster", subnet_index=args.subnet_index
        )
        cluster.start()
        stop = threading.Event()
        operator = None
        try:
            kubeconfig = cluster.kubeconfig
            kubectl(kubeconfig, "apply", "-f", str(REPO / "manifests" / "crd.yaml"))
            kubectl(kubeconfig, "create", "namespace", NAMESPACE)
            # The controller manager would make it; pods are refused without it.
            kubectl(kubeconfig, "create", "serviceaccount", "default", "-n", NAMESPACE)
            api = kubernetes.config.new_client_from_config(str(kubeconfig))
            core, custom = kubernetes.client.CoreV1Api(api), kubernetes.client.CustomObjectsApi(api)
            wait(lambda: _served(kubeconfig), 60, "CRD served", 0.2)
            trigger = Path(tmp) / "dump"
            env = {
                **os.environ,
                "KUBECONFIG": str(kubeconfig),
                "MWMS_METRICS_PORT": str(free_port()),
                "MWMS_HEALTH_PORT": str(free_port()),
                "MWMS_LOG_LEVEL": "WARNING",
                # As the scale bench: no tracking server, so no job asks one for its progress.
                "MWMS_TRACKING_URI": "file:///nonexistent/rss-bench-mlruns",
                **extra,
                "PYTHONPATH": os.pathsep.join([str(args.operator_src), os.environ.get("PYTHONPATH", "")]),
                "RSS_BENCH_TRIGGER": str(trigger),
                "RSS_BENCH_SNAPSHOT": str(args.tracemalloc or ""),
            }
            argv = ["-c", TRACED] if args.tracemalloc else ["-m", "mwms_operator"]
            with open(Path(tmp) / "operator.log", "wb") as log:
                operator = subprocess.Popen(
                    [sys.executable, *argv], env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT
                )
            time.sleep(10)
            result["idle"] = smaps(operator.pid)
            result["idle_anon_parts"] = anon_parts(operator.pid)
            started = time.monotonic()
            cpu0 = cpu_seconds(operator.pid)
            ran: set[str] = set()
            kubelet = threading.Thread(target=play_kubelet, args=(core, stop, ran), daemon=True)
            kubelet.start()
            create_jobs(custom, args.jobs, args.replicas)
            wait(lambda: _running(custom) >= args.jobs, 600, "every job Running", 2)
            result["all_running_s"] = round(time.monotonic() - started, 1)
            result["pods_run"] = len(ran)
            samples = []
            end = time.monotonic() + args.settle
            while time.monotonic() < end and operator.poll() is None:
                samples.append(smaps(operator.pid))
                if len(samples) == 1:
                    result["all_running_anon_parts"] = anon_parts(operator.pid)
                time.sleep(5)
            # As the scale bench's footprint_all_running; then after --settle (a resync's trim inside it).
            result["all_running"] = samples[0]
            result["settled"] = samples[-1]
            result["settled_anon_parts"] = anon_parts(operator.pid)
            result["max_rss_mib"] = max(s["rss_mib"] for s in samples)
            result["cpu_s"] = round(cpu_seconds(operator.pid) - cpu0, 1)
            result["threads"] = len(os.listdir(f"/proc/{operator.pid}/task"))
            if args.tracemalloc:
                trigger.touch()
                wait(lambda: args.tracemalloc.exists(), 120, "tracemalloc snapshot", 0.5)
        finally:
            stop.set()
            if operator is not None:
                operator.terminate()
                operator.wait(30)
            cluster.stop()
    result["load_end"] = os.getloadavg()
    print(json.dumps(result, indent=1))
    if args.label:
        saved = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        saved[args.label] = result
        RESULTS.write_text(json.dumps(saved, indent=1) + "\n")


def _served(kubeconfig: Path) -> bool:
    argv = ["kubectl", f"--kubeconfig={kubeconfig}", "get", "trainjobs", "-A"]
    return subprocess.run(argv, capture_output=True).returncode == 0


def _running(custom: kubernetes.client.CustomObjectsApi) -> int:
    jobs = custom.list_namespaced_custom_object("mwms.dev", "v1alpha1", NAMESPACE, "trainjobs")["items"]
    return sum((j.get("status") or {}).get("phase") == "Running" for j in jobs)


if __name__ == "__main__":
    main()
