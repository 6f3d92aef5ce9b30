"""The one lab every cluster scenario runs in: a local control plane (mwms_dev.cluster.LocalCluster) with
KWOK's fake nodes or real kubelet nodes (or none: pods are created, never run), the CRD and RBAC from
manifests/, `ours` replicas of our operator (leader election when more than one) and, with `peer`,
Kubeflow's training-operator beside them. Only KWOK fakes a kubelet."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
import urllib3

from mwms_bench import measure
from mwms_bench.operators import OPERATORS, PEER_SECRET, Ours, PeerProcess, build_peer
from mwms_bench.watch import PodWatcher
from mwms_dev.cluster import LocalCluster
from mwms_dev.devcluster import project_images
from mwms_dev.kwok import Kwok, fake_nodes
from mwms_kit import operator_harness

REPO = Path(__file__).resolve().parents[2]
# Our operator with its defaults (an empty value is the default), quiet, and no tracking server to ask: the
# labs have none, and a job's end would otherwise add a Warning Event and a status write.
DEFAULTS = {"MWMS_RECONCILE_INTERVAL_SECONDS": "", "MWMS_PROGRESS_INTERVAL_SECONDS": ""}
DEFAULTS |= {"MWMS_LOG_LEVEL": "WARNING", "MWMS_TRACKING_URI": "file:///nonexistent/bench-mlruns"}
ELECTION = {"MWMS_LEADER_ELECTION": "true", "MWMS_LEADER_ELECTION_NAMESPACE": "mwms-system"}
PINNED = Path(sys.executable).with_name("kubectl")  # hack/build/tools.sh's
KUBECTL = str(PINNED) if PINNED.exists() else "kubectl"
NODE_RESOURCES = {"cpu": "32", "memory": "256Gi", "pods": 110, "gpus": 8}


class Kubectl:
    """kubectl as the cluster's admin: `kubectl(*args)` -> CompletedProcess (raises unless `check=False`)."""

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig

    def __call__(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 900) -> Any:
        argv = [KUBECTL, f"--kubeconfig={self.kubeconfig}", *args]
        done = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr}")
        return done


@dataclass
class Lab:
    state_dir: Path
    subnet_index: int
    kwok_nodes: int = 0
    real_nodes: int = 0  # 1, or 2 (the second with the trainer image only)
    ours: int = 1  # replicas of our operator
    manifests: bool = True  # the CRD and RBAC of manifests/ (False: a chart installs them)
    peer: bool = False
    as_service_account: bool = False  # ours logs in as its ServiceAccount, with the RBAC of manifests/
    keep_replicas: bool = False  # a replica that exits is started again after 1 s, as a Deployment's pod
    operator_env: dict[str, str] = field(default_factory=dict)
    operator_src: Path | None = None  # another checkout's operator/ (a before/after)
    timings: dict[str, float] = field(default_factory=dict)

    def __enter__(self) -> Lab:
        started = time.monotonic()
        self.cluster = LocalCluster("bench", self.state_dir / "cluster", subnet_index=self.subnet_index)
        self.kwok: Kwok | None = None
        self.watcher: PodWatcher | None = None
        self.replicas: list[Any] = []
        self.exits: list[tuple[float, int, int | None]] = []  # (monotonic, replica, exit code)
        self._stop = threading.Event()
        self.cluster.start()
        try:
            self._start(started)
        except BaseException:
            self.__exit__()
            raise
        return self

    def _start(self, started: float) -> None:
        self.kubectl = Kubectl(self.cluster.kubeconfig)
        api = kubernetes.config.new_client_from_config(str(self.cluster.kubeconfig))
        self.core, self.custom = kubernetes.client.CoreV1Api(api), kubernetes.client.CustomObjectsApi(api)
        self.kind = OPERATORS["training-operator" if self.peer and not self.ours else "mwms"]
        if self.manifests:
            self.kubectl("apply", "-f", str(REPO / "manifests" / "crd.yaml"))
            operator_harness.apply_operator_rbac(self.kubectl)
        if self.peer:
            self.peer_dir = build_peer()
            self.kubectl("create", "-f", str(self.peer_dir / "crds" / "kubeflow.org_tfjobs.yaml"))
            self.kubectl("create", "namespace", PEER_SECRET[0])
            self.kubectl("create", "secret", "generic", PEER_SECRET[1], "-n", PEER_SECRET[0])
        for kind in [OPERATORS["mwms"]] * self.manifests + [OPERATORS["training-operator"]] * self.peer:
            crd = f"crd/{kind.plural}.{kind.group}"
            self.kubectl("wait", "--for=condition=Established", "--timeout=60s", crd)
        if self.kwok_nodes:
            self.kwok = Kwok(self.cluster.kubeconfig, self.state_dir / "kwok").start()
            self.kwok.add_nodes(fake_nodes(self.kwok_nodes, **NODE_RESOURCES))
        images = project_images() if self.real_nodes else []
        trainer = next((p for p in images if "trainer" in p.name), None)
        for i in range(self.real_nodes):  # the second node with the trainer image only
            self.cluster.start_kubelet_node(f"node-{i + 1}", images if not i else [trainer])
        self.timings["nodes_ready_s"] = measure.since(started)
        self._start_operators()
        if self.kwok_nodes:
            self.watcher = PodWatcher(self.core, self.kind.keys).start()
        self.timings["ready_s"] = measure.since(started)

    def _start_operators(self) -> None:
        kubeconfig = self.cluster.kubeconfig
        if self.as_service_account:
            path = self.state_dir / "operator.kubeconfig"
            kubeconfig = operator_harness.service_account_kubeconfig(self.kubectl, self.cluster, path)
        env = DEFAULTS | (ELECTION if self.ours > 1 else {}) | self.operator_env
        if self.operator_src is not None:
            env["PYTHONPATH"] = str(self.operator_src)
        for i in range(self.ours):
            log = self.state_dir / f"operator-{i + 1}.log"
            self.replicas.append(operator_harness.OperatorProcess(kubeconfig, log, env))
        if self.peer:
            log = self.state_dir / "training-operator.log"
            self.replicas.append(PeerProcess(self.peer_dir, self.cluster.kubeconfig, self.core, log))
        for replica in self.replicas:
            replica.start()
        for replica in self.replicas:  # ours answers on its metrics port (an exit fails it); the peer: ready
            if isinstance(replica, PeerProcess):
                measure.wait(replica.ready, 180, "the peer ready", 0.5)
            else:
                replica.metrics_text(180)
        if self.keep_replicas:
            threading.Thread(target=self._keep, daemon=True).start()

    def _keep(self) -> None:
        while not self._stop.wait(0.2):
            for i, replica in enumerate(self.replicas):
                if replica.process is None or replica.process.poll() is not None:  # exited, or killed
                    self.exits.append((time.monotonic(), i, replica.process and replica.process.returncode))
                    if self._stop.wait(1.0):
                        return
                    replica.start()

    @property
    def operator(self) -> Any:
        """The first replica: ours, or the peer when it runs in ours' place."""
        return self.replicas[0]

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self.watcher is not None:
            self.watcher.stop()
        for replica in self.replicas:
            replica.stop()
        if self.kwok is not None:
            self.kwok.stop()
        self.cluster.stop()

    # --- what scenarios use -------------------------------------------------------------------------

    def namespace(self, name: str) -> str:
        """A new namespace, once it has its `default` ServiceAccount: pods are refused until then."""
        self.kubectl("create", "namespace", name)
        accounts = self.core.list_namespaced_service_account
        default = lambda: accounts(name, field_selector="metadata.name=default").items  # noqa: E731
        measure.wait(default, 60, f"{name}'s ServiceAccount", 0.2)
        return name

    def create(self, kind: Ours, namespace: str, jobs: list[dict[str, Any]]) -> dict[str, float]:
        """Create every job from 8 threads, as a burst of clients would; name -> when it was sent. A create
        is tried again for up to 120 s while the API server is away (a 409 then means an earlier try was
        created though its answer was lost)."""
        sent: dict[str, float] = {}

        def one(job: dict[str, Any]) -> None:
            first = sent[job["metadata"]["name"]] = time.monotonic()
            create = self.custom.create_namespaced_custom_object
            while True:
                try:
                    create(kind.group, kind.version, namespace, kind.plural, job)
                    return
                except kubernetes.client.ApiException as error:
                    if error.status == 409 and time.monotonic() > first + 1:
                        return
                    if error.status not in (429, 500, 502, 503, 504) or time.monotonic() > first + 120:
                        raise
                except (urllib3.exceptions.HTTPError, OSError):
                    if time.monotonic() > first + 120:
                        raise
                time.sleep(0.5)

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(one, jobs))
        return sent

    def jobs(self, namespace: str, kind: Ours | None = None) -> dict[str, dict[str, Any]]:
        """name -> status, with the `phase` ours would say."""
        kind = kind or self.kind
        items = self.custom.list_namespaced_custom_object(kind.group, kind.version, namespace, kind.plural)
        out = {}
        for job in items["items"]:
            status = job.get("status") or {}
            out[job["metadata"]["name"]] = {**status, "phase": kind.phase(status)}
        return out

    def phases(self, namespace: str, kind: Ours | None = None) -> dict[str, str]:
        return {name: status["phase"] for name, status in self.jobs(namespace, kind).items()}

    def delete_namespace(self, namespace: str, timeout: float = 900) -> float | None:
        """Seconds to delete the namespace and all in it; None if it took longer than `timeout`."""
        started = time.monotonic()
        done = self.kubectl("delete", "namespace", namespace, f"--timeout={int(timeout)}s", check=False)
        return measure.since(started) if done.returncode == 0 else None

    def metrics(self, replica: Any = None, prefix: str = "") -> measure.Samples:
        replica = replica or self.operator
        return measure.scrape(f"http://127.0.0.1:{replica.metrics_port}/metrics", prefix)

    def apiserver_requests(self) -> dict[tuple[str, ...], float]:
        """apiserver_request_total by (verb, resource), every client's (the metric has no user label)."""
        url, tls = f"{self.cluster.server}/metrics", self.cluster.node_context.admin_tls()
        found = measure.scrape(url, "apiserver_request_total", tls)
        return measure.grouped(found, "apiserver_request_total", "verb", "resource")

    def footprint(self, replica: Any = None) -> dict[str, float]:
        """RSS and CPU of a replica (by default the first one alive: a killed one is started again later)."""
        alive = [r for r in self.replicas if r.process is not None and r.process.poll() is None]
        pid = (replica or (alive or self.replicas)[0]).process.pid
        return {"rss_mib": measure.rss_mib(pid), "cpu_s": measure.cpu_seconds(pid), "pid": pid}
