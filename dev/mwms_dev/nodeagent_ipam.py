"""Pod IP addresses on the cluster bridge: a pure picker plus one reservation file per address.

Reservations live in /run/mwms-ipam/<bridge>/<ip> (created with O_EXCL, so two node agents on one bridge
never hand out the same address). A reservation whose network namespace no longer exists is stale (left by
a crashed agent or an old cluster on the same bridge) and is taken over.
"""

from __future__ import annotations

import ipaddress
import os
import time
from collections.abc import Callable, Container
from pathlib import Path

IPAM_ROOT = Path("/run/mwms-ipam")
STALE_AFTER_SECONDS = 60.0  # an agent creates the netns right after reserving; younger files are never stale


class AddressesExhausted(RuntimeError):
    pass


def next_free(subnet: str, gateway: str, used: Container[str], after: str | None = None) -> str:
    """The first host address of `subnet` after `after` (wrapping around), neither the gateway nor used.

    Round-robin rather than lowest-free, so an address just released (whose old pod may still be named in
    some status or hosts file) is not handed out again at once.
    """
    net = ipaddress.ip_network(subnet)
    gw = ipaddress.ip_address(gateway)
    first, last = int(net.network_address) + 1, int(net.broadcast_address) - 1
    if last < first:
        raise AddressesExhausted(f"subnet {subnet} has no host addresses")
    start = int(ipaddress.ip_address(after)) + 1 if after else first
    if not first <= start <= last:
        start = first
    size = last - first + 1
    for offset in range(size):
        candidate = first + (start - first + offset) % size
        ip = str(ipaddress.ip_address(candidate))
        if candidate != int(gw) and ip not in used:
            return ip
    raise AddressesExhausted(f"no free address left in {subnet}")


class Ipam:
    def __init__(
        self,
        bridge: str,
        subnet: str,
        gateway: str,
        *,
        root: Path = IPAM_ROOT,
        netns_exists: Callable[[str], bool] | None = None,
    ) -> None:
        self.subnet, self.gateway = subnet, gateway
        self.dir = root / bridge
        self.dir.mkdir(parents=True, exist_ok=True)
        self._netns_exists = netns_exists or (lambda name: Path("/run/netns", name).exists())
        self._last: str | None = None

    def reserve(self, owner_netns: str) -> str:
        """Reserve a free address for the pod whose network namespace will be `owner_netns`."""
        tried: set[str] = set()
        while True:
            used = {p.name for p in self.dir.iterdir()} | tried
            ip = next_free(self.subnet, self.gateway, used, self._last)
            tried.add(ip)
            if self._create(ip, owner_netns):
                self._last = ip
                return ip
            # Lost a race with another agent; try the next one.

    def release(self, ip: str, owner_netns: str) -> None:
        path = self.dir / ip
        try:
            if path.read_text() == owner_netns:
                path.unlink()
        except FileNotFoundError:
            pass

    def reclaim_stale(self, force_prefix: str | None = None) -> int:
        """Drop reservations whose network namespace is gone, and all of owners named `force_prefix*` (this
        agent's, from an earlier run). Returns how many."""
        count = 0
        now = time.time()
        for path in list(self.dir.iterdir()):
            try:
                owner = path.read_text()
                stale = now - path.stat().st_mtime > STALE_AFTER_SECONDS and not self._netns_exists(owner)
                if stale or (force_prefix and owner.startswith(force_prefix)):
                    path.unlink()
                    count += 1
            except FileNotFoundError:
                continue
        return count

    def _create(self, ip: str, owner: str) -> bool:
        try:
            fd = os.open(self.dir / ip, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            f.write(owner)
        return True
