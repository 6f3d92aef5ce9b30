"""The pod network of one local cluster: a Linux bridge `mwbr<index>` with gateway 10.<200+index>.0.1/16.

The real node's CNI bridge plugin plugs one veth per pod into it; pods reach the API server at the gateway IP.
Only project-made addresses are used: this bridge subnet and loopback.
"""

from __future__ import annotations

import ipaddress
import subprocess
from dataclasses import dataclass

MAX_INDEX = 55  # 10.255.0.0/16 is the last subnet of the scheme


class NetworkError(RuntimeError):
    pass


@dataclass(frozen=True)
class PodNetwork:
    bridge: str  # interface name, e.g. mwbr1
    gateway: str  # e.g. 10.201.0.1 (on the bridge; the host side)
    subnet: str  # e.g. 10.201.0.0/16
    service_cidr: str = "10.96.0.0/16"

    @property
    def prefix_len(self) -> int:
        return ipaddress.ip_network(self.subnet).prefixlen

    @property
    def kubernetes_service_ip(self) -> str:
        """The first Service IP, which the API server gives its own `kubernetes` Service."""
        return str(ipaddress.ip_network(self.service_cidr).network_address + 1)


def pod_network(index: int) -> PodNetwork:
    if not isinstance(index, int) or not 0 <= index <= MAX_INDEX:
        raise ValueError(f"subnet_index must be an integer from 0 to {MAX_INDEX}, got {index!r}")
    octet = 200 + index
    return PodNetwork(bridge=f"mwbr{index}", gateway=f"10.{octet}.0.1", subnet=f"10.{octet}.0.0/16")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise NetworkError(f"`ip {' '.join(args)}` failed: {result.stderr.strip()}")
    return result


def bridge_exists(net: PodNetwork) -> bool:
    return _ip("link", "show", "dev", net.bridge, check=False).returncode == 0


def attached_interfaces(net: PodNetwork) -> list[str]:
    """Host-side veth ends still plugged into the bridge."""
    result = _ip("-o", "link", "show", "master", net.bridge, check=False)
    names = []
    for line in result.stdout.splitlines():
        # "12: veth1234@if3: <...>" -> "veth1234"
        name = line.split(":", 2)[1].strip().split("@", 1)[0]
        if name:
            names.append(name)
    return names


def delete_bridge(net: PodNetwork) -> None:
    """Remove the bridge and any veth left on it (e.g. by a crashed run). Idempotent."""
    if not bridge_exists(net):
        return
    for name in attached_interfaces(net):
        # Deleting one end of a veth pair deletes both; it may already be gone with its pod's netns.
        _ip("link", "delete", "dev", name, check=False)
    result = _ip("link", "delete", "dev", net.bridge, check=False)
    if result.returncode != 0 and bridge_exists(net):
        raise NetworkError(f"cannot delete bridge {net.bridge}: {result.stderr.strip()}")


def create_bridge(net: PodNetwork) -> None:
    """Create the bridge fresh, with the gateway address, and bring it up. Leftovers are removed first."""
    delete_bridge(net)
    _ip("link", "add", "name", net.bridge, "type", "bridge")
    try:
        _ip("addr", "add", f"{net.gateway}/{net.prefix_len}", "dev", net.bridge)
        _ip("link", "set", "dev", net.bridge, "up")
    except NetworkError:
        delete_bridge(net)
        raise
