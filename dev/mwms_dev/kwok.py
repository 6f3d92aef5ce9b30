"""KWOK ("Kubernetes WithOut Kubelet", built from its Go module by hack/build/build-kwok.sh) beside a
LocalCluster: fake nodes, and fake pod lifecycles on them, against the real API server, scheduler and
controller manager.

    cluster = LocalCluster(state_dir=..., subnet_index=21).start()  # no real node needed
    kwok = Kwok(cluster.kubeconfig, state_dir / "kwok").start()
    kwok.add_nodes(fake_nodes(100, cpu="32", memory="256Gi", pods=110, gpus=8, zones=3))
    ... TrainJobs whose pod template carries the annotations of bench/kwok-stages/ (WorkerScript) ...
    kwok.stop()

KWOK runs as a local process with the admin kubeconfig and manages only the nodes annotated
FAKE_NODE_ANNOTATION. Nodes get Ready and keep a Lease through KWOK's own node Stages (copied from its
module into the cache); pods follow ours (bench/kwok-stages/*.yaml, each saying what it simulates).
"""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes
import yaml

from mwms_dev.builds import built
from mwms_dev.node_context import free_port
from mwms_dev.procs import stop_process

REPO = Path(__file__).resolve().parents[2]
VERSION = "v0.8.0"
STAGES_DIR = REPO / "bench" / "kwok-stages"
# KWOK's own node Stages, in the module's kustomize/stage/ copied to <cache>/stage by hack/build/build-kwok.sh
NODE_STAGES = ("node/fast/node-initialize.yaml", "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml")
FAKE_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
ZONE_LABEL = "topology.kubernetes.io/zone"
# Pod annotations read by our Stages (bench/kwok-stages/): what the simulated worker does.
START_DELAY = "kwok.mwms.dev/start-delay"
RUN_FOR = "kwok.mwms.dev/run-for"
EXIT_CODE = "kwok.mwms.dev/exit-code"
MESSAGE = "kwok.mwms.dev/message"
LOSE = "kwok.mwms.dev/lose"
POD_CIDR = "10.128.0.1/12"  # room for a million fake pod IPs; nothing routes to them


class KwokError(RuntimeError):
    pass


def build(version: str = VERSION) -> Path:
    """The cache directory holding bin/kwok and stage/ (built on first use)."""
    return built("build-kwok.sh", env={"KWOK_VERSION": version})


@dataclass(frozen=True)
class WorkerScript:
    """What every simulated worker of a job does: start after `start_delay`, run `run_for` (None: until
    deleted), then exit with `exit_code` and leave `message` (None: the Stage's default, "{}")."""

    run_for: str | None = "10s"
    exit_code: int = 0
    message: str | None = None
    start_delay: str | None = None

    def annotations(self) -> dict[str, str]:
        out = {EXIT_CODE: str(self.exit_code)}
        if self.run_for is not None:
            out[RUN_FOR] = self.run_for
        if self.message is not None:
            out[MESSAGE] = self.message
        if self.start_delay is not None:
            out[START_DELAY] = self.start_delay
        return out


def fake_node(
    name: str, *, cpu: str = "32", memory: str = "256Gi", pods: int = 110, gpus: int = 0, zone: str = "zone-a"
) -> dict[str, Any]:
    """A Node object as a kubelet would register it, for KWOK to manage (its annotation says so)."""
    capacity = {"cpu": cpu, "memory": memory, "pods": str(pods)}
    if gpus:
        capacity["nvidia.com/gpu"] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {FAKE_NODE_ANNOTATION[0]: FAKE_NODE_ANNOTATION[1]},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                ZONE_LABEL: zone,
            },
        },
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }


def fake_nodes(count: int, *, zones: int = 3, prefix: str = "kwok-node", **resources: Any) -> list[dict]:
    """`count` fake nodes spread round-robin over `zones` zones (zone-a, zone-b, ...)."""
    return [
        fake_node(f"{prefix}-{i}", zone=f"zone-{chr(ord('a') + i % zones)}", **resources)
        for i in range(count)
    ]


def stage_documents(home: Path, stages_dir: Path = STAGES_DIR) -> list[dict[str, Any]]:
    """KWOK's node Stages from its module, then ours for pods."""
    paths = [home / "stage" / rel for rel in NODE_STAGES] + sorted(stages_dir.glob("*.yaml"))
    docs = [doc for path in paths for doc in yaml.safe_load_all(path.read_text()) if doc]
    if not any(doc["spec"]["resourceRef"]["kind"] == "Pod" for doc in docs):
        raise KwokError(f"no pod Stage in {stages_dir}")
    return docs


def configuration(server_address: str) -> dict[str, Any]:
    return {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        "metadata": {"name": "mwms"},
        "options": {
            "cidr": POD_CIDR,
            "nodeIP": "10.127.0.1",
            "manageNodesWithAnnotationSelector": "=".join(FAKE_NODE_ANNOTATION),
            "nodeLeaseDurationSeconds": 40,
            # KWOK defaults these only in its built-in configuration, not in one read from a file
            "podPlayStageParallelism": 8,
            "nodePlayStageParallelism": 4,
            "nodeLeaseParallelism": 4,
            "podsOnNodeSyncParallelism": 1,
            "enablePodsOnNodeSyncListPager": True,
            "enablePodsOnNodeSyncStreamWatch": False,
            "serverAddress": server_address,
        },
    }


class Kwok:
    """One KWOK controller process; `api` is an admin client of the cluster (nodes are created with it)."""

    def __init__(
        self, kubeconfig: Path, state_dir: Path, home: Path | None = None, stages_dir: Path = STAGES_DIR
    ) -> None:
        self.kubeconfig, self.state_dir, self.stages_dir = kubeconfig, state_dir, stages_dir
        self.home = home or build()
        self.process: subprocess.Popen[bytes] | None = None
        self.port = free_port()
        self.log_path = state_dir / "kwok.log"
        self.api = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(str(kubeconfig)))

    def start(self, timeout: float = 60) -> Kwok:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        config = self.state_dir / "kwok.yaml"
        docs = [configuration(f"127.0.0.1:{self.port}"), *stage_documents(self.home, self.stages_dir)]
        config.write_text(yaml.safe_dump_all(docs))
        argv = [str(self.home / "bin" / "kwok"), f"--kubeconfig={self.kubeconfig}", f"--config={config}"]
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self._wait(lambda: self._healthy(), timeout, "KWOK healthy")
        return self

    def _healthy(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise KwokError(f"KWOK exited with {self.process.returncode}:\n{self.log_tail()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def add_nodes(
        self, nodes: Iterable[dict[str, Any]], timeout: float = 300, parallel: int = 8
    ) -> list[str]:
        """Create the nodes (in `parallel` threads) and wait until every one is Ready."""
        nodes = list(nodes)
        with ThreadPoolExecutor(parallel) as pool:
            list(pool.map(lambda node: self.api.create_node(node), nodes))
        names = {node["metadata"]["name"] for node in nodes}
        self._wait(lambda: names <= self.ready_nodes(), timeout, f"{len(names)} fake nodes Ready", 0.5)
        return sorted(names)

    def ready_nodes(self) -> set[str]:
        ready = set()
        for node in self._nodes():
            conditions = {c.type: c.status for c in node.status.conditions or ()}
            if conditions.get("Ready") == "True":
                ready.add(node.metadata.name)
        return ready

    def _nodes(self) -> Iterator[Any]:
        yield from self.api.list_node(label_selector="type=kwok").items

    def delete_nodes(self) -> None:
        self.api.delete_collection_node(label_selector="type=kwok")

    def lose(self, namespace: str, pod: str, exit_code: int = 75) -> None:
        """Make one running simulated worker exit at once with `exit_code` (Stage mwms-pod-lost)."""
        self.api.patch_namespaced_pod(pod, namespace, {"metadata": {"annotations": {LOSE: str(exit_code)}}})

    def _wait(self, predicate: Any, timeout: float, what: str, interval: float = 0.1) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise KwokError(f"timed out after {timeout:.0f}s waiting for {what}:\n{self.log_tail()}")
            time.sleep(interval)

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, 10)
        self.process = None

    def __enter__(self) -> Kwok:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
