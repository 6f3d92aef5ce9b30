"""Readiness and liveness probes for the local node agent, as the kubelet runs them.

httpGet and tcpSocket probes go from the node (the agent) to the pod's IP over the bridge; exec probes run
the command through podexec with the container's own plan (same netns, mounts and user).
"""

from __future__ import annotations

import http.client
import logging
import socket
import subprocess
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("mwms_dev.nodeagent")


@dataclass(frozen=True)
class Probe:
    kind: str  # "httpGet" | "tcpSocket" | "exec"
    port: int = 0
    path: str = "/"
    scheme: str = "HTTP"
    command: tuple[str, ...] = ()
    initial_delay: float = 0.0
    period: float = 10.0
    timeout: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3


class ProbeError(ValueError):
    pass


def parse_probe(probe: Mapping[str, Any], ports: list[Mapping[str, Any]], field: str) -> Probe:
    """A probe spec with defaults applied and a named port resolved against the container's ports."""
    timing: dict[str, Any] = {
        "initial_delay": float(probe.get("initialDelaySeconds") or 0),
        "period": float(probe.get("periodSeconds") or 10),
        "timeout": float(probe.get("timeoutSeconds") or 1),
        "success_threshold": int(probe.get("successThreshold") or 1),
        "failure_threshold": int(probe.get("failureThreshold") or 3),
    }
    if "exec" in probe:
        command = tuple(str(c) for c in (probe["exec"] or {}).get("command") or [])
        if not command:
            raise ProbeError(f"{field}.exec.command: empty")
        return Probe(kind="exec", command=command, **timing)
    for kind in ("httpGet", "tcpSocket"):
        if kind in probe:
            action = probe[kind] or {}
            port = resolve_port(action.get("port"), ports, f"{field}.{kind}.port")
            return Probe(
                kind=kind,
                port=port,
                path=action.get("path") or "/",
                scheme=(action.get("scheme") or "HTTP").upper(),
                **timing,
            )
    raise ProbeError(f"{field}: only httpGet, tcpSocket and exec probes are supported, got {sorted(probe)}")


def resolve_port(port: Any, ports: list[Mapping[str, Any]], field: str) -> int:
    if isinstance(port, int) or (isinstance(port, str) and port.isdigit()):
        return int(port)
    for p in ports:
        if p.get("name") == port:
            return int(p["containerPort"])
    raise ProbeError(f"{field}: no container port named {port!r}")


class Thresholds:
    """Consecutive successes/failures -> the probe's verdict, starting from `initial`."""

    def __init__(self, probe: Probe, initial: bool) -> None:
        self.probe, self.ok = probe, initial
        self._successes = self._failures = 0

    def record(self, success: bool) -> bool:
        if success:
            self._successes, self._failures = self._successes + 1, 0
            if self._successes >= self.probe.success_threshold:
                self.ok = True
        else:
            self._failures, self._successes = self._failures + 1, 0
            if self._failures >= self.probe.failure_threshold:
                self.ok = False
        return self.ok


def check(
    probe: Probe, pod_ip: str, run_exec: Callable[[list[str], float], tuple[int, str]]
) -> tuple[bool, str]:
    """One probe attempt: whether it passed, and what the kubelet would say when it did not (an exec
    probe's output)."""
    try:
        if probe.kind == "tcpSocket":
            with socket.create_connection((pod_ip, probe.port), timeout=probe.timeout):
                return True, ""
        if probe.kind == "httpGet":
            cls = http.client.HTTPSConnection if probe.scheme == "HTTPS" else http.client.HTTPConnection
            kwargs: dict[str, Any] = {"timeout": probe.timeout}
            if probe.scheme == "HTTPS":
                import ssl

                kwargs["context"] = ssl._create_unverified_context()  # the kubelet does not verify either
            conn = cls(pod_ip, probe.port, **kwargs)
            try:
                conn.request("GET", probe.path, headers={"User-Agent": "kube-probe/1.37"})
                status = conn.getresponse().status
                return 200 <= status < 400, f"HTTP probe failed with statuscode: {status}"
            finally:
                conn.close()
        code, output = run_exec(list(probe.command), probe.timeout)
        return code == 0, output
    except (OSError, http.client.HTTPException, subprocess.SubprocessError) as error:
        return False, str(error)


class Prober(threading.Thread):
    """Probes one running container until `stopped` is set; calls `on_change(ok)` when the verdict flips and
    `on_failure(output)` after each failed attempt (the kubelet's `Unhealthy` event)."""

    def __init__(
        self,
        probe: Probe,
        *,
        initial: bool,
        pod_ip: str,
        run_exec: Callable[[list[str], float], tuple[int, str]],
        on_change: Callable[[bool], None],
        on_failure: Callable[[str], None],
        name: str,
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.probe, self.pod_ip, self.run_exec, self.on_change = probe, pod_ip, run_exec, on_change
        self.on_failure = on_failure
        self.thresholds = Thresholds(probe, initial)
        self.stopped = threading.Event()

    def run(self) -> None:
        if self.stopped.wait(self.probe.initial_delay):
            return
        while not self.stopped.is_set():
            before = self.thresholds.ok
            ok, output = check(self.probe, self.pod_ip, self.run_exec)
            after = self.thresholds.record(ok)
            if self.stopped.is_set():
                return
            if not ok:
                self.on_failure(output)
            if after != before:
                self.on_change(after)
            if self.stopped.wait(self.probe.period):
                return
