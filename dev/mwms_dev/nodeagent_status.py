"""Pure: pod status as a kubelet writes it, from what the local node agent knows about its one container."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

MAX_MESSAGE_BYTES = 4096  # the kubelet's limit for a termination message
TERMINAL = ("Succeeded", "Failed")


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def termination_message(data: bytes) -> str:
    """The file at terminationMessagePath as the kubelet reports it: its last 4 KiB, as text."""
    return data[-MAX_MESSAGE_BYTES:].decode("utf-8", errors="replace")


def after_exit(restart_policy: str, exit_code: int) -> str:
    """What follows a container exit: "restart", "Succeeded" or "Failed"."""
    if restart_policy == "Always" or (restart_policy == "OnFailure" and exit_code != 0):
        return "restart"
    return "Succeeded" if exit_code == 0 else "Failed"


def backoff_seconds(restarts: int, base: float, cap: float = 300.0) -> float:
    """The kubelet's crash-loop back-off: base, 2*base, 4*base, ... up to cap."""
    return min(cap, base * (2 ** max(0, restarts)))


def exit_reason(exit_code: int) -> str:
    return "Completed" if exit_code == 0 else "Error"


@dataclass(frozen=True)
class ContainerView:
    """One container as the agent sees it; `state` is exactly one of waiting/running/terminated."""

    name: str
    image: str
    state: Mapping[str, Any]  # e.g. {"running": {"startedAt": ...}}
    restart_count: int = 0
    last_state: Mapping[str, Any] | None = None
    ready: bool = True  # the readiness probe's verdict (no probe: ready while running)

    @property
    def is_ready(self) -> bool:
        return "running" in self.state and self.ready

    def as_status(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "image": self.image,
            "imageID": "",
            "containerID": "",
            "state": dict(self.state),
            "lastState": dict(self.last_state or {}),
            "ready": self.is_ready,
            "started": "running" in self.state,
            "restartCount": self.restart_count,
        }


def conditions(
    previous: Sequence[Mapping[str, Any]], *, ready: bool, completed: bool, now: str, initialized: bool = True
) -> list[dict[str, Any]]:
    """PodScheduled/Initialized/ContainersReady/Ready, keeping transition times of unchanged ones and any
    condition another component owns (e.g. DisruptionTarget)."""
    wanted = {
        "PodScheduled": True,
        "Initialized": initialized,
        "ContainersReady": ready,
        "Ready": ready,
    }
    by_type = {c.get("type"): c for c in previous}
    result = []
    for ctype, value in wanted.items():
        status = "True" if value else "False"
        old = by_type.get(ctype)
        cond: dict[str, Any] = {"type": ctype, "status": status, "lastProbeTime": None}
        if old is not None and old.get("status") == status:
            cond["lastTransitionTime"] = old.get("lastTransitionTime") or now
        else:
            cond["lastTransitionTime"] = now
        if not value and ctype in ("ContainersReady", "Ready"):
            cond["reason"] = "PodCompleted" if completed else "ContainersNotReady"
        if not value and ctype == "Initialized":
            cond["reason"] = "ContainersNotInitialized"
        result.append(cond)
    result.extend(dict(c) for c in previous if c.get("type") not in wanted)
    return result


def pod_status(
    previous: Mapping[str, Any],
    *,
    phase: str,
    pod_ip: str | None,
    host_ip: str,
    start_time: str,
    container: ContainerView,
    now: str,
    init_containers: Sequence[ContainerView] = (),
    initialized: bool = True,
    reason: str | None = None,
    message: str | None = None,
) -> dict[str, Any]:
    """The whole status the agent owns, for a JSON merge patch (lists replace, so they are complete)."""
    ready = phase == "Running" and container.is_ready
    status: dict[str, Any] = {
        "phase": phase,
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "startTime": start_time,
        "conditions": conditions(
            previous.get("conditions") or [],
            ready=ready,
            completed=phase in TERMINAL,
            now=now,
            initialized=initialized,
        ),
        "containerStatuses": [container.as_status()],
        "initContainerStatuses": [c.as_status() for c in init_containers] or None,
        "reason": reason,
        "message": message,
    }
    if pod_ip:
        status["podIP"] = pod_ip
        status["podIPs"] = [{"ip": pod_ip}]
    return status
