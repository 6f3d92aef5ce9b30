"""How many threads TensorFlow's pools get: MWMS_THREADS, else the container's CPU limit, else all cores.

TensorFlow sizes its pools from the node's cores, not the pod's limit; throttled threads stall collectives.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path

from mwms_trainer.errors import ConfigError

ENV_THREADS = "MWMS_THREADS"
CGROUP_ROOT = Path("/sys/fs/cgroup")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cgroup_cpu_limit(root: Path = CGROUP_ROOT) -> float | None:
    """CPUs the cgroup may use (quota / period), or None when unlimited or unknown.

    cgroup v2: `cpu.max` ("max 100000" or "200000 100000"); v1: `cpu.cfs_quota_us` (-1: unlimited) over
    `cpu.cfs_period_us`, under `cpu/` or `cpu,cpuacct/`.
    """
    v2 = _read(root / "cpu.max")
    if v2 is not None:
        max_quota, _, max_period = v2.partition(" ")
        return None if max_quota == "max" else int(max_quota) / int(max_period or 100000)
    for controller in ("cpu", "cpu,cpuacct"):
        quota = _read(root / controller / "cpu.cfs_quota_us")
        period = _read(root / controller / "cpu.cfs_period_us")
        if quota is not None and period is not None:
            return None if int(quota) < 0 else int(quota) / int(period)
    return None


def thread_count(environ: Mapping[str, str], root: Path = CGROUP_ROOT) -> int | None:
    """MWMS_THREADS, else the CPU limit rounded up; None: no limit found, TensorFlow's own sizing stands."""
    raw = environ.get(ENV_THREADS, "").strip()
    if raw:
        if not raw.isdigit() or int(raw) < 1:
            raise ConfigError(ENV_THREADS, f"must be a positive integer, got {raw!r}")
        return int(raw)
    limit = cgroup_cpu_limit(root)
    if limit is None:
        return None
    return max(1, min(math.ceil(limit), os.cpu_count() or 1))
