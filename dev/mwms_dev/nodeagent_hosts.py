"""Pure: the /etc/hosts a pod of the local node agent sees (our stand-in for cluster DNS).

There is no DNS server in the local cluster, so every name a pod could resolve through CoreDNS is written
into its hosts file: pod FQDNs `<hostname>.<subdomain>.<ns>.svc.cluster.local` and shorter forms, Service
names to the IPs of the pods they select (ready or not, like a headless Service with
`publishNotReadyAddresses`), and `kubernetes` to the API server. glibc's `files` backend ignores the
search list, so the short forms a pod would get through `search` domains are listed explicitly, but only
for its own namespace.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

CLUSTER_DOMAIN = "cluster.local"


@dataclass(frozen=True)
class PodEntry:
    namespace: str
    name: str
    ip: str
    hostname: str = ""  # spec.hostname
    subdomain: str = ""  # spec.subdomain
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ServiceEntry:
    namespace: str
    name: str
    selector: Mapping[str, str] = field(default_factory=dict)  # empty: selects no pods (as in Kubernetes)


def pod_names(pod: PodEntry, own_namespace: str) -> list[str]:
    """The DNS names of a pod with both hostname and subdomain set; none otherwise (as in CoreDNS)."""
    if not (pod.hostname and pod.subdomain):
        return []
    base = f"{pod.hostname}.{pod.subdomain}.{pod.namespace}"
    names = [f"{base}.svc.{CLUSTER_DOMAIN}", f"{base}.svc", base]
    if pod.namespace == own_namespace:
        names.append(f"{pod.hostname}.{pod.subdomain}")
    return names


def service_names(name: str, namespace: str, own_namespace: str) -> list[str]:
    base = f"{name}.{namespace}"
    names = [f"{base}.svc.{CLUSTER_DOMAIN}", f"{base}.svc", base]
    if namespace == own_namespace:
        names.append(name)
    return names


def selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def name_table(
    namespace: str, pods: Iterable[PodEntry], services: Iterable[ServiceEntry], api_host: str
) -> dict[str, list[str]]:
    """IP -> names, as seen from a pod in `namespace`. `pods`: the cluster's live pods that have an IP."""
    pods = sorted(pods, key=lambda p: (p.namespace, p.name))
    table: dict[str, list[str]] = {}

    def add(ip: str, names: Iterable[str]) -> None:
        bucket = table.setdefault(ip, [])
        bucket.extend(n for n in names if n not in bucket)

    for pod in pods:
        add(pod.ip, pod_names(pod, namespace))
    add(api_host, [*service_names("kubernetes", "default", namespace), "kubernetes"])
    for svc in sorted(services, key=lambda s: (s.namespace, s.name)):
        names = service_names(svc.name, svc.namespace, namespace)
        for pod in pods:
            if pod.namespace == svc.namespace and selects(svc.selector, pod.labels):
                add(pod.ip, names)
    return table


def render_hosts(own: PodEntry, table: Mapping[str, list[str]]) -> str:
    """The hosts file of pod `own` from its namespace's table; its own address (and short name) first."""
    own_names = [*pod_names(own, own.namespace)]
    own_names += [n for n in table.get(own.ip, []) if n not in own_names]
    short = own.hostname or own.name
    if short not in own_names:
        own_names.append(short)
    lines = [
        "# Written by the mwms node agent (local stand-in for kubelet and cluster DNS).",
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        f"{own.ip}\t{' '.join(own_names)}",
    ]
    for ip in sorted(table, key=_ip_key):
        if ip != own.ip and table[ip]:
            lines.append(f"{ip}\t{' '.join(table[ip])}")
    return "\n".join(lines) + "\n"


def hosts_file(
    *, own: PodEntry, pods: Iterable[PodEntry], services: Iterable[ServiceEntry], api_host: str
) -> str:
    """The whole hosts file for pod `own`."""
    return render_hosts(own, name_table(own.namespace, pods, services, api_host))


def _ip_key(ip: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in ip.split("."))
    except ValueError:
        return (1 << 16,)


def resolv_conf() -> str:
    """No DNS server exists here: point at loopback so a name missing from /etc/hosts fails at once."""
    return "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"
