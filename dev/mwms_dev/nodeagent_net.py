"""A pod's network for the local node agent: its own network namespace with one veth end on the bridge.

Every `ip` call gets an argument list (no shell); names are generated here, never taken from a pod spec.
"""

from __future__ import annotations

import ipaddress
import subprocess
from pathlib import Path

NETNS_DIR = Path("/run/netns")


class SandboxError(RuntimeError):
    pass


def netns_name(bridge: str, node: str, uid: str) -> str:
    """`<bridge>-<node>-<pod uid>`: the bridge keeps clusters apart, the node name keeps agents apart."""
    return f"{netns_prefix(bridge, node)}{uid}"


def netns_prefix(bridge: str, node: str) -> str:
    return f"{bridge}-{node[:40]}-"


def veth_name(ip: str) -> str:
    """`mw` + the address in hex: unique across clusters (their subnets differ) and within IFNAMSIZ."""
    return f"mw{int(ipaddress.ip_address(ip)):08x}"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise SandboxError(f"`ip {' '.join(args)}` failed: {result.stderr.strip()}")
    return result


def create(*, netns: str, ip: str, prefix_len: int, bridge: str, gateway: str) -> None:
    """netns + veth pair (host end on the bridge, `eth0` inside) + address + lo + default route."""
    veth = veth_name(ip)
    delete(netns=netns, ip=ip)  # leftovers of a crashed run
    try:
        _ip("netns", "add", netns)
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns)
        _ip("link", "set", veth, "master", bridge, "up")
        _ip("-n", netns, "addr", "add", f"{ip}/{prefix_len}", "dev", "eth0")
        _ip("-n", netns, "link", "set", "eth0", "up")
        _ip("-n", netns, "link", "set", "lo", "up")
        _ip("-n", netns, "route", "add", "default", "via", gateway)
    except (SandboxError, subprocess.TimeoutExpired):
        delete(netns=netns, ip=ip)
        raise


def delete(*, netns: str, ip: str | None) -> None:
    """Idempotent. Deleting the namespace destroys eth0 and with it the host end of the veth pair."""
    if (NETNS_DIR / netns).exists():
        _ip("netns", "delete", netns, check=False)
    if ip is not None and Path("/sys/class/net", veth_name(ip)).exists():
        _ip("link", "delete", veth_name(ip), check=False)


def leftovers(bridge: str, node: str) -> list[str]:
    """Network namespaces of this node agent left from an earlier run."""
    prefix = netns_prefix(bridge, node)
    if not NETNS_DIR.is_dir():
        return []
    return sorted(p.name for p in NETNS_DIR.iterdir() if p.name.startswith(prefix))


def pids(netns: str) -> list[int]:
    """Processes inside a network namespace."""
    result = _ip("netns", "pids", netns, check=False)
    return [int(p) for p in result.stdout.split() if p.isdigit()]


def remove_all(bridge: str) -> None:
    """Every sandbox of every node agent on `bridge` (for the launcher's stop, after the pods are killed)."""
    if NETNS_DIR.is_dir():
        for p in NETNS_DIR.iterdir():
            if p.name.startswith(f"{bridge}-"):
                delete(netns=p.name, ip=None)
