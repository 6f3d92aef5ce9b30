"""TF_CONFIG -> who am I, how many workers, am I the chief (no TensorFlow).

With no `chief` task worker 0 is the chief (TensorFlow's own rule); a `chief` task, if present, ranks first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from mwms_trainer.errors import ConfigError

SETTING = "TF_CONFIG"
ROLES = ("chief", "worker")


@dataclass(frozen=True)
class Cluster:
    hosts: tuple[str, ...]  # every worker's host:port in rank order (chief first); () when TF_CONFIG is unset
    rank: int  # this process's position in `hosts`

    @property
    def num_workers(self) -> int:
        return max(1, len(self.hosts))

    @property
    def is_chief(self) -> bool:
        return self.rank == 0

    @property
    def is_distributed(self) -> bool:
        return len(self.hosts) > 1

    @property
    def peers(self) -> tuple[str, ...]:
        return tuple(h for i, h in enumerate(self.hosts) if i != self.rank)

    @property
    def own_address(self) -> str | None:
        return self.hosts[self.rank] if self.hosts else None


def split_host_port(address: str, setting: str = SETTING) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(setting, f"{address!r} is not host:port")
    return host.strip("[]"), int(port)


def from_tf_config(raw: str | None) -> Cluster:
    """Parse TF_CONFIG (None or empty: a single local worker)."""
    if raw is None or not raw.strip():
        return Cluster(hosts=(), rank=0)
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ConfigError(SETTING, f"is not valid JSON ({e.msg} at position {e.pos})") from None
    if not isinstance(doc, dict):
        raise ConfigError(SETTING, "must be a JSON object with 'cluster' and 'task'")
    cluster, task = doc.get("cluster"), doc.get("task")
    if not isinstance(cluster, dict) or not cluster:
        raise ConfigError(f"{SETTING}.cluster", 'must be an object like {"worker": ["host:port", ...]}')
    unknown = sorted(set(cluster) - set(ROLES))
    if unknown:
        raise ConfigError(
            f"{SETTING}.cluster.{unknown[0]}", f"unsupported task type; use {' or '.join(ROLES)}"
        )
    hosts: list[str] = []
    offsets: dict[str, int] = {}
    for role in ROLES:
        members = cluster.get(role, [])
        if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
            raise ConfigError(f"{SETTING}.cluster.{role}", "must be a list of host:port strings")
        if role == "chief" and len(members) > 1:
            raise ConfigError(f"{SETTING}.cluster.chief", "may hold one task at most")
        for member in members:
            split_host_port(member, f"{SETTING}.cluster.{role}")
        offsets[role] = len(hosts)
        hosts.extend(members)
    if not hosts:
        raise ConfigError(f"{SETTING}.cluster", "lists no workers")
    if len(set(hosts)) != len(hosts):
        raise ConfigError(f"{SETTING}.cluster", "lists the same host:port twice")
    if not isinstance(task, dict):
        raise ConfigError(f"{SETTING}.task", 'must be an object like {"type": "worker", "index": 0}')
    task_type, index = task.get("type"), task.get("index")
    if task_type not in ROLES or not cluster.get(task_type):
        raise ConfigError(f"{SETTING}.task.type", f"must name a task type of the cluster, got {task_type!r}")
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(cluster[task_type]):
        raise ConfigError(
            f"{SETTING}.task.index",
            f"must be an integer in [0, {len(cluster[task_type]) - 1}], got {index!r}",
        )
    return Cluster(hosts=tuple(hosts), rank=offsets[task_type] + index)
