"""The local node agent: a stand-in for kubelet + container runtime. Test-side infrastructure.

Not product code and not a kubelet: it exists so that tests and the Docker-free demo can run pods against a
real control plane (see mwms_dev.cluster) on a machine without a container runtime or registry.

    python -m mwms_dev.nodeagent --kubeconfig K --node-name N --cpu 4 --memory 16Gi --pods 250 \
        --bridge mwbr0 --gateway 10.200.0.1 --subnet 10.200.0.0/16 --state-dir DIR \
        --api-host 10.200.0.1 --api-port PORT --ca-file CA

What it does, as a kubelet would:
- registers Node N with the given capacity, keeps it Ready (Lease in kube-node-lease and the Ready condition,
  every --heartbeat-seconds); on exit leaves the Node as it is;
- runs every pod bound to N as local processes (`python -m mwms_dev.podexec`, no shell): each pod in its own
  network namespace with an address from --subnet on --bridge, /etc/hosts standing in for cluster DNS
  (nodeagent_hosts), its ServiceAccount token and volumes bind-mounted in a private mount namespace;
- writes pod status (phase, IPs, conditions, containerStatuses with termination messages, restartCount with
  back-off under restartPolicy Always/OnFailure); readiness and liveness probes (httpGet, tcpSocket, exec),
  a failed attempt posting the kubelet's `Unhealthy` event with its output (a repeat is not posted again);
  an image reference the kubelet could not parse leaves the pod Pending, waiting with InvalidImageName;
- provisions a PersistentVolume pre-bound to each pending claim (so the scheduler can place its pods);
- on deletion sends SIGTERM to the container's process group, SIGKILL after the grace period, tears the
  sandbox down and deletes the pod with grace period 0;
- keeps each container's stdout+stderr at <state-dir>/pods/<namespace>/<pod>/<container>.log (the previous
  run's at <container>.previous.log), also after the pod is gone, and serves them to `kubectl logs`.
What it does not: one container per pod (plus init containers, not sidecars), no startup probes, no resource
limits, no exec/attach/port-forward, Services resolve to pod IPs (no kube-proxy), no image users (a pod
without runAsUser runs as root).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import ipaddress
import json
import logging
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import urllib3

from mwms_dev import nodeagent_net as net
from mwms_dev.nodeagent_hosts import PodEntry, ServiceEntry, name_table, render_hosts, resolv_conf
from mwms_dev.nodeagent_ipam import Ipam
from mwms_dev.nodeagent_kube import ApiError, Kube
from mwms_dev.nodeagent_logs import LogServer
from mwms_dev.nodeagent_probe import Probe, ProbeError, Prober, parse_probe
from mwms_dev.nodeagent_spec import (
    ConfigNotReady,
    PodSpecError,
    base_env,
    container_argv,
    container_env,
    container_mounts,
    invalid_image_name,
    projected_items,
    run_as,
    termination_message_path,
)
from mwms_dev.nodeagent_status import (
    TERMINAL,
    ContainerView,
    after_exit,
    backoff_seconds,
    exit_reason,
    now_iso,
    pod_status,
    termination_message,
)

log = logging.getLogger("mwms_dev.nodeagent")

KUBELET_VERSION = "v1.37.2-mwms-nodeagent"
START_ERROR_EXIT = 128
CHECKOUT = Path(__file__).resolve().parents[2]  # the repository: editable installs import from it


@dataclass(frozen=True)
class AgentConfig:
    kubeconfig: str
    node_name: str
    cpu: str
    memory: str
    pods: int
    bridge: str
    gateway: str
    subnet: str
    state_dir: Path
    api_host: str
    api_port: int
    ca_file: Path
    python: str = sys.executable
    kill_pods_on_exit: bool = True
    heartbeat_seconds: float = 10.0
    resync_seconds: int = 30
    restart_backoff_seconds: float = 10.0
    parallel_starts: int = 8
    shutdown_grace_seconds: float = 15.0
    serve_logs: bool = True

    @property
    def prefix_len(self) -> int:
        return ipaddress.ip_network(self.subnet).prefixlen


def _grace_seconds(pod: dict[str, Any]) -> float:
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    for value in (meta.get("deletionGracePeriodSeconds"), spec.get("terminationGracePeriodSeconds")):
        if value is not None:
            return float(value)
    return 30.0


def _killpg(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


class PodWorker(threading.Thread):
    """One pod, from sandbox to teardown. The only thread that starts, waits for and reports its container."""

    def __init__(self, agent: NodeAgent, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        super().__init__(name=f"pod-{meta['namespace']}/{meta['name']}", daemon=True)
        self.agent, self.cfg, self.kube = agent, agent.cfg, agent.kube
        self.pod = pod
        self.uid, self.namespace, self.pod_name = meta["uid"], meta["namespace"], meta["name"]
        self.netns = net.netns_name(self.cfg.bridge, self.cfg.node_name, self.uid)
        self.dir = self.cfg.state_dir / "sandboxes" / self.uid
        self.log_dir = self.cfg.state_dir / "pods" / self.namespace / self.pod_name
        self.ip: str | None = None
        self.sandbox_ready = False
        self.hosts_written: str | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.deleting = False  # the pod is being deleted (or the agent is stopping)
        self.delete_from_api = True  # false when the agent stops: the kubelet never deletes pods on exit
        self.finished = False  # the container will not run again (terminal phase or deleting)
        self.done = threading.Event()
        self.start_time = (pod.get("status") or {}).get("startTime") or now_iso()
        self.restart_count = 0
        self.last_state: dict[str, Any] | None = None
        self.kill_timer: threading.Timer | None = None
        self.deleted_exit: dict[str, Any] | None = None  # how the container ended when the pod was deleted
        self.ready = True  # the readiness probe's verdict for the running container
        self.report_lock = threading.Lock()  # the worker and its probers both report
        self.current: tuple[str, dict[str, Any], str | None, str | None] | None = None
        self.init_views: list[ContainerView] = []
        self.initialized = True

    # --- called from other threads ---------------------------------------------------------------

    def update(self, pod: dict[str, Any]) -> None:
        self.pod = pod
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            self.stop(_grace_seconds(pod))

    def stop(self, grace: float, *, delete_from_api: bool = True) -> None:
        """SIGTERM now, SIGKILL after `grace` seconds; the worker then tears down (and deletes the pod)."""
        with self.lock:
            if not delete_from_api:
                self.delete_from_api = False
            if self.deleting:
                return
            self.deleting = True
            proc = self.proc
        self.wake.set()
        if proc is not None and proc.poll() is None:
            log.info("pod %s/%s: SIGTERM, SIGKILL after %.0fs", self.namespace, self.pod_name, grace)
            _killpg(proc.pid, signal.SIGTERM)
            self.kill_timer = threading.Timer(grace, _killpg, args=(proc.pid, signal.SIGKILL))
            self.kill_timer.daemon = True
            self.kill_timer.start()

    # --- the worker thread -------------------------------------------------------------------------

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # a bug or an unexpected error fails this pod, never the agent
            log.exception("pod %s/%s: unexpected error", self.namespace, self.pod_name)
            if not self.deleting:
                self._report_failed("AgentError", f"node agent error: {exc}")
        finally:
            self._teardown()
            self.finished = True
            if self.deleting and self.delete_from_api:
                self._report_deleted()
                try:
                    self.kube.delete_pod_now(self.namespace, self.pod_name, self.uid)
                except Exception as exc:  # noqa: BLE001 - the next resync retries the delete
                    log.warning("pod %s/%s: delete failed: %s", self.namespace, self.pod_name, exc)
            self.done.set()
            self.agent.hosts_changed()

    def _run(self) -> None:
        spec = self.pod["spec"]
        container = spec["containers"][0]
        self.container_name, self.image = container.get("name", ""), container.get("image", "")
        init_containers = spec.get("initContainers") or []
        self.init_views = [
            ContainerView(
                name=c.get("name", ""),
                image=c.get("image", ""),
                state={"waiting": {"reason": "PodInitializing"}},
            )
            for c in init_containers
        ]
        self.initialized = not init_containers
        policy = spec.get("restartPolicy", "Always")
        if len(spec.get("containers") or []) != 1:
            self._report_failed(
                "CreateContainerError",
                "spec.containers: the local node agent runs exactly one container per pod",
            )
            return
        sidecars = [i for i, c in enumerate(init_containers) if c.get("restartPolicy") == "Always"]
        if sidecars:
            self._report_failed(
                "CreateContainerError",
                f"spec.initContainers[{sidecars[0]}].restartPolicy: sidecar containers are not supported "
                "by the local node agent",
            )
            return
        for c in [*init_containers, spec["containers"][0]]:
            problem = invalid_image_name(c.get("image") or "")
            if problem:
                # As the kubelet: the pod stays Pending with this waiting reason until it is deleted.
                self._report("Pending", {"waiting": {"reason": "InvalidImageName", "message": problem}})
                self.wake.wait()
                return
        previous = self._previous_run()
        if previous is not None:
            # A container of this pod ran under an earlier agent and is gone with it: count it as an exit.
            if policy == "Never":
                self._report_failed("ContainerLost", "the node agent restarted and the container is gone")
                return
            self.restart_count = previous + 1
            self.initialized = True  # the kubelet does not rerun init containers of an initialized pod
        waiting = "PodInitializing" if init_containers and not self.initialized else "ContainerCreating"
        self._report("Pending", {"waiting": {"reason": waiting}})
        try:
            with self.agent.start_slots:
                if self.deleting:
                    return
                self._create_sandbox()
        except (net.SandboxError, OSError, subprocess.SubprocessError) as exc:
            self._report_failed("SandboxError", f"cannot create the pod sandbox: {exc}")
            return
        if not self.initialized and not self._run_init_containers(init_containers, policy):
            return
        self.initialized = True
        while not self.deleting:
            terminated = self._attempt(
                container, "spec.containers[0]", on_start=lambda running: self._report("Running", running)
            )
            if terminated is None:
                return
            outcome = after_exit(policy, terminated["exitCode"])
            if outcome != "restart":
                self._report(outcome, {"terminated": terminated})
                return
            delay = backoff_seconds(self.restart_count, self.cfg.restart_backoff_seconds)
            self.last_state = {"terminated": terminated}
            crash_loop = f"back-off {delay:.0f}s restarting failed container={self.container_name}"
            self._report("Running", {"waiting": {"reason": "CrashLoopBackOff", "message": crash_loop}})
            if self.wake.wait(delay):
                return  # deleting
            self.restart_count += 1

    def _run_init_containers(self, init_containers: list[dict[str, Any]], policy: str) -> bool:
        """Each to success, in order, as the kubelet does; False if the pod failed or is going away."""
        pending = {"waiting": {"reason": "PodInitializing"}}
        for i, ic in enumerate(init_containers):
            restarts = 0
            while True:

                def started(running: dict[str, Any], i: int = i, restarts: int = restarts) -> None:
                    self.init_views[i] = replace(self.init_views[i], state=running, restart_count=restarts)
                    self._report("Pending", pending)

                terminated = self._attempt(ic, f"spec.initContainers[{i}]", on_start=started)
                if terminated is None:
                    return False
                self.init_views[i] = replace(self.init_views[i], state={"terminated": terminated})
                if terminated["exitCode"] == 0:
                    break
                if policy == "Never":
                    reason = f"Init:{terminated['reason']}"
                    self._report("Failed", pending, reason=reason, message=terminated.get("message"))
                    return False
                delay = backoff_seconds(restarts, self.cfg.restart_backoff_seconds)
                self.init_views[i] = replace(
                    self.init_views[i],
                    state={"waiting": {"reason": "CrashLoopBackOff"}},
                    last_state={"terminated": terminated},
                )
                self._report("Pending", pending)
                if self.wake.wait(delay):
                    return False
                restarts += 1
        return True

    def _attempt(
        self, container: dict[str, Any], field: str, on_start: Callable[[dict[str, Any]], None]
    ) -> dict[str, Any] | None:
        """Prepare (retrying what may appear later), run to exit: state.terminated, or None if the pod failed
        to prepare (reported) or is going away."""
        while not self.deleting:
            try:
                prepared = self._prepare(container, field)
            except PodSpecError as exc:
                self._report_failed(exc.reason, str(exc))
                return None
            except (ConfigNotReady, ApiError, OSError, urllib3.exceptions.HTTPError) as exc:
                # Missing ConfigMap/Secret/ServiceAccount or an API hiccup: the kubelet retries these.
                waiting = {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}}
                self._report("Pending", waiting)
                self.wake.wait(backoff_seconds(0, self.cfg.restart_backoff_seconds / 5, 10))
                continue
            exit_code, started_at, finished_at, start_error = self._run_container(prepared, on_start)
            if exit_code is None:
                return None
            message = start_error or self._termination_message(prepared)
            terminated = {
                "exitCode": exit_code,
                "reason": "StartError" if start_error else exit_reason(exit_code),
                "startedAt": started_at,
                "finishedAt": finished_at,
            }
            if message:
                terminated["message"] = message
            if self.deleting:
                self.deleted_exit = terminated  # the last status says it (_report_deleted)
                return None
            return terminated
        return None

    def _previous_run(self) -> int | None:
        for cs in (self.pod.get("status") or {}).get("containerStatuses") or []:
            if (
                cs.get("state", {}).get("running")
                or cs.get("state", {}).get("terminated")
                or cs.get("restartCount")
            ):
                return int(cs.get("restartCount") or 0)
        return None

    def _create_sandbox(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.ip = self.agent.ipam.reserve(self.netns)
        net.create(
            netns=self.netns,
            ip=self.ip,
            prefix_len=self.cfg.prefix_len,
            bridge=self.cfg.bridge,
            gateway=self.cfg.gateway,
        )
        (self.dir / "resolv.conf").write_text(resolv_conf())
        self.sandbox_ready = True
        self.write_hosts(self.agent.hosts_for(self))
        self.agent.hosts_changed()

    def write_hosts(self, content: str) -> None:
        """In place (same inode): the running container has this very file bind-mounted at /etc/hosts."""
        if content == self.hosts_written:
            return
        fd = os.open(self.dir / "hosts", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, content.encode())
        finally:
            os.close(fd)
        self.hosts_written = content

    def _prepare(self, container: dict[str, Any], field: str) -> dict[str, Any]:
        """Write volumes, resolve argv/env, write the podexec plan. Raises PodSpecError, ConfigNotReady."""
        pod, cfg = self.pod, self.cfg
        spec = pod["spec"]
        name = container.get("name", "")
        uid, gid, groups = run_as(pod, container)
        env = container_env(
            pod,
            container,
            base=base_env(
                pod,
                venv_bin=str(Path(cfg.python).parent),
                api_host=cfg.api_host,
                api_port=cfg.api_port,
                run_as_root=uid in (None, 0),
            ),
            pod_ip=self.ip or "",
            host_ip=cfg.gateway,
            lookup=self._lookup,
            field=f"{field}",
        )
        argv = container_argv(container, env, cfg.python, field)
        probes: dict[str, Probe | None] = {}
        for kind in ("readinessProbe", "livenessProbe"):
            try:
                probes[kind] = (
                    parse_probe(container[kind], container.get("ports") or [], f"{field}.{kind}")
                    if container.get(kind)
                    else None
                )
            except ProbeError as exc:
                raise PodSpecError(f"{field}.{kind}", str(exc)) from exc
        mounts = container_mounts(
            pod, container, pod_dir=str(self.dir), state_dir=str(cfg.state_dir), field=field
        )
        self._write_volumes(uid, gid)
        term_file = self.dir / f"{name}.termination-log"
        term_file.write_bytes(b"")
        start_error = self.dir / f"{name}.start-error"
        start_error.write_bytes(b"")
        for path in (term_file, start_error):
            self._chown(path, uid, gid)
        plan_mounts = [
            {"source": str(self.dir / "hosts"), "target": "/etc/hosts", "isFile": True},
            {"source": str(self.dir / "resolv.conf"), "target": "/etc/resolv.conf", "isFile": True},
            {"source": str(term_file), "target": termination_message_path(container, field), "isFile": True},
        ]
        for m in mounts:
            plan_mounts.append({"source": m.source, "target": m.target, "readOnly": m.read_only})
        plan = {
            "netns": str(net.NETNS_DIR / self.netns),
            "hostname": (spec.get("hostname") or self.pod_name)[:63],
            "mounts": plan_mounts,
            "argv": argv,
            "env": env,
            "cwd": container.get("workingDir") or "/",
            "uid": uid,
            "gid": gid,
            "groups": groups,
            "startErrorFile": str(start_error),
            # What stands in for the image: the checkout (editable sources), the venv and the interpreter it
            # links to. podexec keeps them reachable for any runAsUser and under any volume mounted over them.
            "exposePaths": sorted(
                {
                    str(CHECKOUT),
                    str(Path(cfg.python).parent.parent),
                    str(Path(os.path.realpath(cfg.python)).parent.parent),
                }
            ),
        }
        plan_file = self.dir / f"{name}.plan.json"
        plan_file.write_text(json.dumps(plan, indent=1))
        return {
            "name": name,
            "file": str(plan_file),
            "plan": plan,
            "probes": probes,
            "term_file": term_file,
            "start_error_file": start_error,
        }

    def _write_volumes(self, uid: int | None, gid: int | None) -> None:
        pod = self.pod
        for i, volume in enumerate(pod["spec"].get("volumes") or []):
            field = f"spec.volumes[{i}]"
            name = volume.get("name", "")
            if "emptyDir" in volume:
                path = self.dir / "volumes" / name
                path.mkdir(parents=True, exist_ok=True)
                self._chown(path, uid, gid)
            elif "hostPath" in volume:
                host_path = Path((volume["hostPath"] or {}).get("path", ""))
                kind = (volume["hostPath"] or {}).get("type") or ""
                if kind in ("", "DirectoryOrCreate") and not host_path.exists():
                    host_path.mkdir(parents=True, exist_ok=True)
                elif kind == "FileOrCreate" and not host_path.exists():
                    host_path.parent.mkdir(parents=True, exist_ok=True)
                    host_path.touch()
                elif not host_path.exists():
                    raise PodSpecError(f"{field}.hostPath.path", f"{host_path} does not exist (type {kind})")
            elif "persistentVolumeClaim" in volume:
                claim = (volume["persistentVolumeClaim"] or {}).get("claimName", "")
                path = self.cfg.state_dir / "pvc" / self.namespace / claim
                path.mkdir(parents=True, exist_ok=True)
                self._chown(path, uid, gid)
            elif any(k in volume for k in ("projected", "configMap", "secret", "downwardAPI")):
                files = projected_items(
                    volume,
                    pod=pod,
                    pod_ip=self.ip or "",
                    host_ip=self.cfg.gateway,
                    lookup=self._lookup,
                    token=self._token,
                    field=field,
                )
                root = self.dir / "volumes" / name
                root.mkdir(parents=True, exist_ok=True)
                for rel, text in files.items():
                    target = root / rel
                    target.parent.mkdir(parents=True, exist_ok=True)
                    tmp = target.with_name(f".{target.name}.tmp")
                    tmp.write_text(text)
                    self._chown(tmp, uid, gid)
                    os.replace(tmp, target)  # the directory is what is mounted, so a rename is seen inside

    def _lookup(self, kind: str, namespace: str, name: str) -> dict[str, str] | None:
        data = self.kube.object_data(kind, namespace, name)
        if data is None and kind == "configmap" and name == "kube-root-ca.crt":
            # Published by the controller-manager shortly after a namespace appears; the CA is ours anyway.
            return {"ca.crt": self.cfg.ca_file.read_text()}
        return data

    def _token(self, audience: str | None, seconds: int) -> str:
        sa = self.pod["spec"].get("serviceAccountName") or "default"
        try:
            return self.kube.request_token(self.namespace, sa, self.pod_name, self.uid, audience, seconds)
        except ApiError as exc:
            if exc.status == 404:
                raise ConfigNotReady(f"serviceaccount {sa!r} not found") from exc
            raise

    @staticmethod
    def _chown(path: Path, uid: int | None, gid: int | None) -> None:
        if uid is not None or gid is not None:
            os.chown(path, -1 if uid is None else uid, -1 if gid is None else gid)

    def _run_container(
        self, prepared: dict[str, Any], on_start: Callable[[dict[str, Any]], None]
    ) -> tuple[int | None, str, str, str]:
        """Start, report (on_start), wait: (exit code or None, startedAt, finishedAt, start error)."""
        name = prepared["name"]
        log_file = self.log_dir / f"{name}.log"
        if log_file.exists() and log_file.stat().st_size:
            os.replace(log_file, self.log_dir / f"{name}.previous.log")
        with self.lock:
            if self.deleting:
                return None, "", "", ""
            with open(log_file, "ab") as out:
                self.proc = subprocess.Popen(
                    [self.cfg.python, "-m", "mwms_dev.podexec", prepared["file"]],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                )
        started_at = now_iso()
        log.info(
            "pod %s/%s: started pid %d (restart %d)",
            self.namespace,
            self.pod_name,
            self.proc.pid,
            self.restart_count,
        )
        running = {"running": {"startedAt": started_at}}
        probes = prepared["probes"]
        self.ready = probes["readinessProbe"] is None
        on_start(running)
        probers = self._start_probers(prepared)
        code = self.proc.wait()
        for prober in probers:
            prober.stopped.set()
        _killpg(self.proc.pid, signal.SIGKILL)  # what the container left behind goes with it
        finished_at = now_iso()
        start_error = prepared["start_error_file"].read_text(errors="replace").strip()
        exit_code = code if code >= 0 else 128 - code  # killed by signal N: 128+N, as a runtime reports it
        log.info("pod %s/%s: container %s exited with %d", self.namespace, self.pod_name, name, exit_code)
        return exit_code, started_at, finished_at, start_error

    def _start_probers(self, prepared: dict[str, Any]) -> list[Prober]:
        probes, proc = prepared["probes"], self.proc
        probe_plan = self.dir / f"{prepared['name']}.probe-plan.json"

        def run_exec(command: list[str], timeout: float) -> tuple[int, str]:
            probe_plan.write_text(json.dumps({**prepared["plan"], "argv": command}))
            argv = [self.cfg.python, "-m", "mwms_dev.podexec", str(probe_plan)]
            done = subprocess.run(argv, capture_output=True, timeout=timeout + 5)
            return done.returncode, (done.stdout + done.stderr).decode(errors="replace")

        said: dict[str, str] = {}  # the last Unhealthy message per probe: a repeat is not posted again

        def failed(kind: str, output: str) -> None:
            message = f"{kind} probe failed: {output}"
            if said.get(kind) == message:
                return
            said[kind] = message
            try:
                self.kube.post_pod_event(
                    self.pod, reason="Unhealthy", message=message, node=self.cfg.node_name, now=now_iso()
                )
            except (ApiError, OSError, urllib3.exceptions.HTTPError) as exc:
                log.info("pod %s/%s: Unhealthy event not posted: %s", self.namespace, self.pod_name, exc)

        def readiness_changed(ok: bool) -> None:
            log.info("pod %s/%s: readiness probe says %s", self.namespace, self.pod_name, ok)
            self.ready = ok
            self._refresh()

        def liveness_changed(ok: bool) -> None:
            if not ok and proc is not None and proc.poll() is None:
                grace = _grace_seconds(self.pod)
                log.info(
                    "pod %s/%s: liveness probe failed, restarting the container",
                    self.namespace,
                    self.pod_name,
                )
                _killpg(proc.pid, signal.SIGTERM)
                timer = threading.Timer(grace, _killpg, args=(proc.pid, signal.SIGKILL))
                timer.daemon = True
                timer.start()

        probers = []
        for kind, initial, on_change, said_as in (
            ("readinessProbe", False, readiness_changed, "Readiness"),
            ("livenessProbe", True, liveness_changed, "Liveness"),
        ):
            if probes[kind] is not None:
                prober = Prober(
                    probes[kind],
                    initial=initial,
                    pod_ip=self.ip or "",
                    run_exec=run_exec,
                    on_change=on_change,
                    on_failure=functools.partial(failed, said_as),
                    name=f"{kind}-{self.namespace}/{self.pod_name}",
                )
                prober.start()
                probers.append(prober)
        return probers

    @staticmethod
    def _termination_message(prepared: dict[str, Any]) -> str:
        try:
            return termination_message(prepared["term_file"].read_bytes())
        except OSError:
            return ""

    def _report(
        self, phase: str, state: dict[str, Any], reason: str | None = None, message: str | None = None
    ) -> None:
        with self.report_lock:
            self.current = (phase, state, reason, message)
            self._send()

    def _report_deleted(self) -> None:
        """As the kubelet does, a deleted pod's last status is a terminal phase (Succeeded only if its
        container exited 0): a controller that holds a finalizer on the pod waits for it (Kueue ends a pod
        group, frees its quota and lets the pods go only once every pod is Succeeded or Failed)."""
        with self.report_lock:
            if self.current is not None and self.current[0] in TERMINAL:
                return
            if not hasattr(self, "container_name"):
                container = (self.pod["spec"].get("containers") or [{}])[0]
                self.container_name, self.image = container.get("name", ""), container.get("image", "")
            terminated = self.deleted_exit or {
                "exitCode": 137,
                "reason": "ContainerStatusUnknown",
                "message": "the container was not running when the pod was deleted",
                "finishedAt": now_iso(),
            }
            phase = "Succeeded" if terminated["exitCode"] == 0 else "Failed"
            self.current = (phase, {"terminated": terminated}, None, None)
            self._send(final=True)

    def _refresh(self) -> None:
        """Report the current state again (the readiness verdict changed)."""
        with self.report_lock:
            if self.current is not None:
                self._send()

    def _send(self, *, final: bool = False) -> None:
        assert self.current is not None
        phase, state, reason, message = self.current
        if self.deleting and not final:
            return
        view = ContainerView(
            ready=self.ready,
            name=self.container_name,
            image=self.image,
            state=state,
            restart_count=self.restart_count,
            last_state=self.last_state,
        )
        status = pod_status(
            self.pod.get("status") or {},
            phase=phase,
            pod_ip=self.ip,
            host_ip=self.cfg.gateway,
            start_time=self.start_time,
            container=view,
            init_containers=self.init_views,
            initialized=self.initialized,
            now=now_iso(),
            reason=reason,
            message=message,
        )
        try:
            self.pod = self.kube.patch_pod_status(self.namespace, self.pod_name, status)
        except ApiError as exc:
            if exc.status == 404:
                if not final:
                    self.stop(0)
            else:
                log.warning("pod %s/%s: status update failed: %s", self.namespace, self.pod_name, exc)
        except Exception as exc:  # noqa: BLE001 - the API server may be briefly unreachable
            log.warning("pod %s/%s: status update failed: %s", self.namespace, self.pod_name, exc)

    def _report_failed(self, reason: str, message: str) -> None:
        log.warning("pod %s/%s: %s: %s", self.namespace, self.pod_name, reason, message)
        if not hasattr(self, "container_name"):
            container = (self.pod["spec"].get("containers") or [{}])[0]
            self.container_name, self.image = container.get("name", ""), container.get("image", "")
        now = now_iso()
        terminated = {
            "exitCode": START_ERROR_EXIT,
            "reason": reason,
            "message": message[:4096],
            "startedAt": None,
            "finishedAt": now,
        }
        self._report("Failed", {"terminated": terminated}, reason=reason, message=message[:4096])

    def _teardown(self) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            _killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if self.kill_timer is not None:
            self.kill_timer.cancel()  # the group is gone; its id must not be signalled once reused
        self.sandbox_ready = False
        try:
            net.delete(netns=self.netns, ip=self.ip)
        except Exception as exc:  # noqa: BLE001
            log.warning("pod %s/%s: sandbox teardown: %s", self.namespace, self.pod_name, exc)
        if self.ip is not None:
            self.agent.ipam.release(self.ip, self.netns)
        shutil.rmtree(self.dir, ignore_errors=True)


class NodeAgent:
    def __init__(self, cfg: AgentConfig, kube: Kube) -> None:
        self.cfg, self.kube = cfg, kube
        self.ipam = Ipam(cfg.bridge, cfg.subnet, cfg.gateway)
        self.start_slots = threading.BoundedSemaphore(cfg.parallel_starts)
        self.lock = threading.Lock()
        self.pods: dict[str, dict[str, Any]] = {}  # uid -> pod, every namespace and node (for hosts files)
        self.services: dict[tuple[str, str], dict[str, Any]] = {}
        self.workers: dict[str, PodWorker] = {}
        self.stopping = threading.Event()
        self._hosts_dirty = threading.Event()
        self._deleter = ThreadPoolExecutor(max_workers=4, thread_name_prefix="delete")
        self._deleting: set[str] = set()
        self._node_conditions: list[dict[str, Any]] = []
        self.log_port = 0

    # --- node ----------------------------------------------------------------------------------------

    def register_node(self) -> None:
        cfg = self.cfg
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": cfg.node_name,
                "labels": {
                    "kubernetes.io/hostname": cfg.node_name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": {"x86_64": "amd64", "aarch64": "arm64"}.get(
                        platform.machine(), "amd64"
                    ),
                },
            },
        }
        try:
            self.kube.request("POST", "/api/v1/nodes", body=node)
            log.info("registered node %s", cfg.node_name)
        except ApiError as exc:
            if exc.status != 409:
                raise
        self.heartbeat()

    def node_status(self) -> dict[str, Any]:
        cfg, now = self.cfg, now_iso()
        resources = {
            "cpu": cfg.cpu,
            "memory": cfg.memory,
            "pods": str(cfg.pods),
            "ephemeral-storage": "100Gi",
        }
        conditions = [
            {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
            {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure"},
            {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID"},
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "mwms node agent is posting ready status",
            },
        ]
        previous = {c["type"]: c for c in self._node_conditions}
        for c in conditions:
            old = previous.get(c["type"]) or {}
            same = old.get("status") == c["status"] and old.get("lastTransitionTime")
            c["lastTransitionTime"] = old["lastTransitionTime"] if same else now
            c["lastHeartbeatTime"] = now
        uname = os.uname()
        return {
            "capacity": resources,
            "allocatable": resources,
            "conditions": conditions,
            # InternalIP only: the API server would try a Hostname address first, and no DNS knows it.
            "addresses": [{"type": "InternalIP", "address": cfg.gateway}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.log_port}},
            "nodeInfo": {
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
                "kernelVersion": uname.release,
                "osImage": "mwms local node agent",
                "containerRuntimeVersion": "mwms-podexec://0.1",
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), "amd64"),
            },
        }

    def heartbeat(self) -> None:
        cfg = self.cfg
        node = self.kube.request(
            "PATCH",
            f"/api/v1/nodes/{cfg.node_name}/status",
            body={"status": self.node_status()},
            content_type="application/merge-patch+json",
        )
        self._node_conditions = (node.get("status") or {}).get("conditions") or []
        renew = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        lease_path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{cfg.node_name}"
        spec = {"holderIdentity": cfg.node_name, "leaseDurationSeconds": 40, "renewTime": renew}
        try:
            self.kube.request(
                "PATCH", lease_path, body={"spec": spec}, content_type="application/merge-patch+json"
            )
        except ApiError as exc:
            if exc.status != 404:
                raise
            lease = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": cfg.node_name,
                    "namespace": "kube-node-lease",
                    "ownerReferences": [
                        {
                            "apiVersion": "v1",
                            "kind": "Node",
                            "name": cfg.node_name,
                            "uid": node["metadata"]["uid"],
                        }
                    ],
                },
                "spec": spec,
            }
            self.kube.request(
                "POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", body=lease
            )

    def _heartbeat_loop(self) -> None:
        while not self.stopping.wait(self.cfg.heartbeat_seconds):
            try:
                self.heartbeat()
            except Exception as exc:  # noqa: BLE001 - retried on the next beat
                log.warning("node heartbeat failed: %s", exc)

    # --- pods ----------------------------------------------------------------------------------------

    def _pods_snapshot(self, items: list[dict[str, Any]]) -> None:
        seen = {p["metadata"]["uid"] for p in items}
        with self.lock:
            vanished = [uid for uid in self.pods if uid not in seen]
            self.pods = {p["metadata"]["uid"]: p for p in items}
        for uid in vanished:
            self._pod_gone(uid)
        for pod in items:
            self._reconcile(pod)
        # Workers whose pod vanished while no watch was running.
        for uid in [u for u in list(self.workers) if u not in seen]:
            self._pod_gone(uid)
        self.hosts_changed()

    def _pod_event(self, kind: str, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        if kind == "DELETED":
            with self.lock:
                self.pods.pop(uid, None)
            self._pod_gone(uid)
        else:
            with self.lock:
                self.pods[uid] = pod
            self._reconcile(pod)
        self.hosts_changed()

    def _reconcile(self, pod: dict[str, Any]) -> None:
        if (pod.get("spec") or {}).get("nodeName") != self.cfg.node_name or self.stopping.is_set():
            return
        meta = pod["metadata"]
        uid = meta["uid"]
        worker = self.workers.get(uid)
        if worker is not None:
            if worker.done.is_set():
                if meta.get("deletionTimestamp"):
                    self._delete_later(pod)
            else:
                worker.update(pod)
            return
        if (pod.get("status") or {}).get("phase") in TERMINAL or meta.get("deletionTimestamp"):
            # Finished under an earlier agent, or deleted before it ever ran here: nothing to stop.
            if meta.get("deletionTimestamp"):
                self._delete_later(pod)
            return
        worker = PodWorker(self, pod)
        self.workers[uid] = worker
        worker.start()

    def _delete_later(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        if meta["uid"] in self._deleting:
            return
        self._deleting.add(meta["uid"])

        def delete() -> None:
            try:
                self.kube.delete_pod_now(meta["namespace"], meta["name"], meta["uid"])
            except Exception as exc:  # noqa: BLE001 - the next resync retries
                log.warning("pod %s/%s: delete failed: %s", meta["namespace"], meta["name"], exc)
                self._deleting.discard(meta["uid"])

        self._deleter.submit(delete)

    def _pod_gone(self, uid: str) -> None:
        worker = self.workers.get(uid)
        if worker is None:
            self._deleting.discard(uid)
            return
        if not worker.done.is_set():
            worker.stop(0)  # deleted without a grace period (force): kill at once
            return
        self.workers.pop(uid, None)
        self._deleting.discard(uid)

    # --- hosts files ---------------------------------------------------------------------------------

    def hosts_changed(self) -> None:
        self._hosts_dirty.set()

    def _entries(self) -> tuple[list[PodEntry], list[ServiceEntry]]:
        local_ips = {uid: w.ip for uid, w in list(self.workers.items()) if w.sandbox_ready and w.ip}
        with self.lock:
            pods = list(self.pods.values())
            services = list(self.services.values())
        entries = []
        for pod in pods:
            meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
            if meta.get("deletionTimestamp") or status.get("phase") in TERMINAL:
                continue
            ip = local_ips.get(meta["uid"]) or (
                status.get("podIP") if spec.get("nodeName") != self.cfg.node_name else None
            )
            if ip:
                entries.append(
                    PodEntry(
                        namespace=meta["namespace"],
                        name=meta["name"],
                        ip=ip,
                        hostname=spec.get("hostname") or "",
                        subdomain=spec.get("subdomain") or "",
                        labels=meta.get("labels") or {},
                    )
                )
        svc_entries = [
            ServiceEntry(
                namespace=s["metadata"]["namespace"],
                name=s["metadata"]["name"],
                selector=(s.get("spec") or {}).get("selector") or {},
            )
            for s in services
            if (s.get("spec") or {}).get("type") != "ExternalName"
        ]
        return entries, svc_entries

    def hosts_for(self, worker: PodWorker) -> str:
        entries, services = self._entries()
        own = self._own_entry(worker, entries)
        return render_hosts(own, name_table(worker.namespace, entries, services, self.cfg.api_host))

    def _own_entry(self, worker: PodWorker, entries: list[PodEntry]) -> PodEntry:
        for e in entries:
            if e.namespace == worker.namespace and e.name == worker.pod_name and e.ip == worker.ip:
                return e
        spec = worker.pod.get("spec") or {}
        return PodEntry(
            namespace=worker.namespace,
            name=worker.pod_name,
            ip=worker.ip or "",
            hostname=spec.get("hostname") or "",
            subdomain=spec.get("subdomain") or "",
        )

    def _hosts_loop(self) -> None:
        while not self.stopping.is_set():
            self._hosts_dirty.wait(5)
            if self.stopping.wait(0.1):  # gather a burst of changes into one rewrite
                return
            self._hosts_dirty.clear()
            try:
                entries, services = self._entries()
                tables: dict[str, dict[str, list[str]]] = {}
                for worker in list(self.workers.values()):
                    if not worker.sandbox_ready:
                        continue
                    if worker.namespace not in tables:
                        tables[worker.namespace] = name_table(
                            worker.namespace, entries, services, self.cfg.api_host
                        )
                    worker.write_hosts(
                        render_hosts(self._own_entry(worker, entries), tables[worker.namespace])
                    )
            except Exception:  # noqa: BLE001
                log.exception("hosts update failed")

    # --- watches -------------------------------------------------------------------------------------

    def _services_snapshot(self, items: list[dict[str, Any]]) -> None:
        with self.lock:
            self.services = {(s["metadata"]["namespace"], s["metadata"]["name"]): s for s in items}
        self.hosts_changed()

    def _service_event(self, kind: str, svc: dict[str, Any]) -> None:
        key = (svc["metadata"]["namespace"], svc["metadata"]["name"])
        with self.lock:
            if kind == "DELETED":
                self.services.pop(key, None)
            else:
                self.services[key] = svc
        self.hosts_changed()

    def _informer(self, path: str, on_snapshot: Any, on_event: Any) -> None:
        """List, then watch until the server closes the watch (every resync period), then list again: a missed
        event is repaired by the next list."""
        while not self.stopping.is_set():
            try:
                items, rv = self.kube.list(path)
                on_snapshot(items)
                for event in self.kube.watch(path, rv, self.cfg.resync_seconds):
                    if self.stopping.is_set():
                        return
                    kind = event.get("type")
                    if kind == "ERROR":
                        break  # e.g. 410 Gone: list again
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        on_event(kind, event["object"])
            except Exception as exc:  # noqa: BLE001 - the API server may restart; keep trying
                log.warning("watch %s: %s", path, exc)
                self.stopping.wait(1)

    # --- volumes: a stand-in provisioner, so the scheduler sees claims bound ---------------------------

    def _claims_snapshot(self, items: list[dict[str, Any]]) -> None:
        for claim in items:
            self._claim_event("ADDED", claim)

    def _claim_event(self, kind: str, claim: dict[str, Any]) -> None:
        meta, spec = claim["metadata"], claim.get("spec") or {}
        pv_name = f"mwms-{meta['uid']}"
        if kind == "DELETED":
            self._deleter.submit(self._delete_volume, pv_name)
            return
        if spec.get("volumeName") or meta.get("deletionTimestamp"):
            return
        if (claim.get("status") or {}).get("phase") not in (None, "Pending"):
            return
        self._deleter.submit(self._create_volume, claim, pv_name)

    def _create_volume(self, claim: dict[str, Any], pv_name: str) -> None:
        """A PersistentVolume pre-bound to the claim (the PV controller completes the binding). Pods reach the
        claim's data at <state-dir>/pvc/<namespace>/<claim>, whatever node agent runs them."""
        meta, spec = claim["metadata"], claim.get("spec") or {}
        path = self.cfg.state_dir / "pvc" / meta["namespace"] / meta["name"]
        pv = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": pv_name, "labels": {"mwms.dev/provisioned-by": "nodeagent"}},
            "spec": {
                "capacity": {
                    "storage": ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")
                },
                "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                "volumeMode": spec.get("volumeMode") or "Filesystem",
                "storageClassName": spec.get("storageClassName") or "",
                "persistentVolumeReclaimPolicy": "Retain",
                "hostPath": {"path": str(path), "type": "DirectoryOrCreate"},
                "claimRef": {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "namespace": meta["namespace"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                },
            },
        }
        try:
            path.mkdir(parents=True, exist_ok=True)
            self.kube.request("POST", "/api/v1/persistentvolumes", body=pv)
            log.info("provisioned %s for claim %s/%s", pv_name, meta["namespace"], meta["name"])
        except ApiError as exc:
            if exc.status != 409:
                log.warning("claim %s/%s: cannot provision: %s", meta["namespace"], meta["name"], exc)
        except Exception as exc:  # noqa: BLE001 - the next resync retries
            log.warning("claim %s/%s: cannot provision: %s", meta["namespace"], meta["name"], exc)

    def _delete_volume(self, pv_name: str) -> None:
        try:
            self.kube.request("DELETE", f"/api/v1/persistentvolumes/{pv_name}")
        except ApiError as exc:
            if exc.status != 404:
                log.warning("cannot delete %s: %s", pv_name, exc)
        except Exception as exc:  # noqa: BLE001
            log.warning("cannot delete %s: %s", pv_name, exc)

    # --- lifecycle -----------------------------------------------------------------------------------

    def cleanup_leftovers(self) -> None:
        """Sandboxes of this node left by an agent that died without cleaning up."""
        for netns in net.leftovers(self.cfg.bridge, self.cfg.node_name):
            # Their containers cannot be adopted (we keep no runtime state): kill them; the pods' restart
            # policies decide what happens next (see PodWorker._previous_run).
            log.info("removing leftover sandbox %s", netns)
            for pid in net.pids(netns):
                _killpg(pid, signal.SIGKILL)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            net.delete(netns=netns, ip=None)
        self.ipam.reclaim_stale(force_prefix=net.netns_prefix(self.cfg.bridge, self.cfg.node_name))

    def running(self, namespace: str, pod: str) -> bool:
        """Whether a container of this pod is running now (a `kubectl logs -f` follows it until it exits)."""
        for w in list(self.workers.values()):
            if (
                w.namespace == namespace
                and w.pod_name == pod
                and w.proc is not None
                and w.proc.poll() is None
            ):
                return True
        return False

    def start_log_server(self) -> None:
        from mwms_dev import pki  # cryptography: only needed here

        ca = pki.new_ca(f"mwms-nodeagent-{self.cfg.node_name}")
        serving = pki.serving_cert(ca, self.cfg.node_name, (self.cfg.node_name,), (self.cfg.gateway,))
        tls_dir = self.cfg.state_dir / "nodeagent" / self.cfg.node_name
        tls_dir.mkdir(parents=True, exist_ok=True)
        cert, key = tls_dir / "kubelet.crt", tls_dir / "kubelet.key"
        cert.write_bytes(serving.cert_pem)
        key.touch(mode=0o600)
        key.write_bytes(serving.key_pem)
        server = LogServer(self.cfg.gateway, self.cfg.state_dir, self.running, cert, key)
        server.start()
        self.log_port = server.port
        log.info("serving container logs on https://%s:%d", self.cfg.gateway, server.port)

    def run(self) -> None:
        self.cleanup_leftovers()
        if self.cfg.serve_logs:
            self.start_log_server()
        self.register_node()
        threads = [
            threading.Thread(
                target=self._informer,
                name="pods",
                daemon=True,
                args=("/api/v1/pods", self._pods_snapshot, self._pod_event),
            ),
            threading.Thread(
                target=self._informer,
                name="services",
                daemon=True,
                args=("/api/v1/services", self._services_snapshot, self._service_event),
            ),
            threading.Thread(
                target=self._informer,
                name="claims",
                daemon=True,
                args=("/api/v1/persistentvolumeclaims", self._claims_snapshot, self._claim_event),
            ),
            threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True),
            threading.Thread(target=self._hosts_loop, name="hosts", daemon=True),
        ]
        for t in threads:
            t.start()
        log.info(
            "node agent %s ready (bridge %s, subnet %s)", self.cfg.node_name, self.cfg.bridge, self.cfg.subnet
        )
        while not self.stopping.wait(1):
            pass
        self.shutdown()

    def shutdown(self) -> None:
        workers = [w for w in list(self.workers.values()) if not w.done.is_set()]
        if not self.cfg.kill_pods_on_exit:
            log.info("leaving %d pods running", len(workers))
            return
        log.info("stopping %d pods", len(workers))
        for w in workers:
            w.stop(min(_grace_seconds(w.pod), self.cfg.shutdown_grace_seconds), delete_from_api=False)
        deadline = time.monotonic() + self.cfg.shutdown_grace_seconds + 10
        for w in workers:
            w.done.wait(max(0.0, deadline - time.monotonic()))
        self._deleter.shutdown(wait=False, cancel_futures=True)


def parse_args(argv: list[str]) -> AgentConfig:
    p = argparse.ArgumentParser(prog="python -m mwms_dev.nodeagent", description=__doc__.split("\n\n")[0])
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--node-name", required=True)
    p.add_argument("--cpu", default="4")
    p.add_argument("--memory", default="16Gi")
    p.add_argument("--pods", type=int, default=250)
    p.add_argument("--bridge", required=True)
    p.add_argument("--gateway", required=True)
    p.add_argument("--subnet", required=True)
    p.add_argument("--state-dir", required=True, type=Path)
    p.add_argument("--api-host", required=True, help="where pods reach the API server (the bridge gateway)")
    p.add_argument("--api-port", required=True, type=int)
    p.add_argument("--ca-file", required=True, type=Path, help="the cluster CA, mounted into pods as ca.crt")
    p.add_argument("--python", default=sys.executable, help="the venv python that local entrypoints run with")
    p.add_argument("--kill-pods-on-exit", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--heartbeat-seconds", type=float, default=10.0)
    p.add_argument("--resync-seconds", type=int, default=30)
    p.add_argument(
        "--restart-backoff-seconds",
        type=float,
        default=10.0,
        help="first crash-loop back-off (doubles up to 300 s, as in the kubelet)",
    )
    p.add_argument("--parallel-starts", type=int, default=8, help="pod sandboxes set up at once")
    p.add_argument("--shutdown-grace-seconds", type=float, default=15.0)
    p.add_argument(
        "--serve-logs",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="serve /containerLogs on the gateway IP, for `kubectl logs`",
    )
    p.add_argument("--log-level", default="INFO")
    a = p.parse_args(argv)
    logging.basicConfig(
        level=a.log_level.upper(), format="%(asctime)s %(levelname)s %(threadName)s %(message)s"
    )
    return AgentConfig(
        kubeconfig=a.kubeconfig,
        node_name=a.node_name,
        cpu=a.cpu,
        memory=a.memory,
        pods=a.pods,
        bridge=a.bridge,
        gateway=a.gateway,
        subnet=a.subnet,
        state_dir=a.state_dir.resolve(),
        api_host=a.api_host,
        api_port=a.api_port,
        ca_file=a.ca_file.resolve(),
        python=a.python,
        kill_pods_on_exit=a.kill_pods_on_exit,
        heartbeat_seconds=a.heartbeat_seconds,
        resync_seconds=a.resync_seconds,
        restart_backoff_seconds=a.restart_backoff_seconds,
        parallel_starts=a.parallel_starts,
        shutdown_grace_seconds=a.shutdown_grace_seconds,
        serve_logs=a.serve_logs,
    )


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(sys.argv[1:] if argv is None else argv)
    if os.geteuid() != 0:
        print("the node agent needs root (network namespaces, bind mounts)", file=sys.stderr)
        return 2
    agent = NodeAgent(cfg, Kube(cfg.kubeconfig))
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: agent.stopping.set())
    try:
        agent.run()
    except Exception:
        log.exception("node agent failed")
        agent.stopping.set()
        agent.shutdown()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
