"""The integration tier split in shards that run side by side on one shared cluster (hack/ci/run-tests.py).

Why: the tier mostly waits on pods and API servers, and one real node runs per machine (kube-proxy's nftables
tables have fixed names), so the shards' pytest processes share one cluster instead of each starting its own.

How they keep out of each other's way:
- `MWMS_TEST_CLUSTER` names the JSON file the shared cluster's owner wrote (`python -m mwms_kit.shards
  serve`): the tier's `cluster` fixture attaches to it instead of starting one (AttachedCluster).
- `MWMS_TEST_SHARD` (`a`, `b` or `c`) puts every namespace a test makes under `<shard>-` (namespace_name) and
  every operator the test kit starts on those namespaces only (`MWMS_WATCH_NAMESPACES=<shard>-*`, unless the
  test sets its own), so no shard's operators touch another's TrainJobs.
- Each module goes to one shard (assign: longest first by the weights below, each to the lighter shard). A
  module marked `exclusive` (it changes what every job shares: it deletes the CRD) runs alone afterwards.
Without those variables (plain `pytest tests/integration`) nothing changes: one cluster, cluster-wide
operators.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import threading
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

SHARDS = ("a", "b", "c")
# Each module's relative weight (its seconds in a warm run; build/test-results/integration-*.xml has each
# run's times). A module missing here weighs DEFAULT_WEIGHT; a stale weight only unbalances the shards.
WEIGHTS = {
    "operator/test_operator_chaos_short.py": 259,
    "operator/test_operator_jobs.py": 230,
    "operator/test_operator_outcomes.py": 157,
    "operator/test_operator_submit.py": 121,
    "operator/test_operator_refusals.py": 104,
    "operator/test_operator_kueue.py": 98,
    "operator/test_operator_lifecycle.py": 89,
    "operator/test_operator_tracking.py": 86,
    "operator/test_operator_leader.py": 85,
    "operator/test_operator_worker_logs.py": 70,
    "operator/test_client_install.py": 67,
    "operator/test_operator_object_storage.py": 56,
    "operator/test_operator_rbac_modes.py": 50,
    "operator/test_operator_hostile.py": 44,
    "operator/test_operator_load_short.py": 44,
    "operator/test_operator_security.py": 32,
    "operator/test_operator_startup.py": 27,
    "client/test_client_api_server.py": 24,
    "operator/test_client_never_hangs.py": 16,
    "controlplane/test_controlplane.py": 14,
    "monitoring/test_monitoring_live.py": 14,
    "operator/test_client_on_the_node.py": 11,
    "operator/test_operator_namespaces.py": 9,
    "operator/test_operator_crd.py": 7,
}
DEFAULT_WEIGHT = 60


def current_shard() -> str:
    """This process's shard, or "" when the tier runs whole."""
    shard = os.environ.get("MWMS_TEST_SHARD", "").strip()
    if shard and shard not in SHARDS:
        raise ValueError(f"MWMS_TEST_SHARD={shard!r}: one of {', '.join(SHARDS)}, or unset")
    return shard


def namespace_prefix() -> str:
    """What every namespace this shard makes starts with ("" when the tier runs whole)."""
    shard = current_shard()
    return f"{shard}-" if shard else ""


def namespace_name(prefix: str) -> str:
    """A fresh namespace name, under this shard's prefix when sharded."""
    return f"{namespace_prefix()}{prefix}-{uuid.uuid4().hex[:10]}"


# A test's own extra cluster goes on the session's subnet index + this, one bridge per shard (the node tier
# takes +20, the README test +30, the scale smoke test +5).
SPARE_SUBNET_OFFSETS = {"": 10, "a": 10, "b": 15, "c": 25}


def spare_subnet_offset() -> int:
    """Where this shard's spare cluster goes, relative to the session's subnet index."""
    return SPARE_SUBNET_OFFSETS[current_shard()]


def watched_namespaces() -> str | None:
    """What an operator of this shard watches (a glob of its namespaces), or None: all of them."""
    prefix = namespace_prefix()
    return f"{prefix}*" if prefix else None


def assign(modules: list[str]) -> dict[str, str]:
    """module -> shard: longest first, each to the shard with the least work so far (ties: name order)."""
    load = dict.fromkeys(SHARDS, 0)
    shards = {}
    for module in sorted(modules, key=lambda m: (-WEIGHTS.get(m, DEFAULT_WEIGHT), m)):
        shard = min(SHARDS, key=lambda s: (load[s], s))
        shards[module] = shard
        load[shard] += WEIGHTS.get(module, DEFAULT_WEIGHT)
    return shards


@dataclass
class AttachedCluster:
    """The shared cluster as the tests see it: what LocalCluster offers them, read from the owner's file."""

    kubeconfig: Path
    server: str
    ca_file: Path
    pod_api_host: str
    pod_api_port: int
    images: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, path: str | Path) -> AttachedCluster:
        raw = json.loads(Path(path).read_text())
        return cls(
            Path(raw["kubeconfig"]), raw["server"], Path(raw["ca_file"]), raw["pod_api_host"],
            raw["pod_api_port"], raw["images"],
        )  # fmt: skip


def serve(state_dir: Path, subnet_index: int, ready_file: Path) -> int:
    """Run the shared cluster (a control plane and one real node with build/images/ loaded), write
    `ready_file` once it is up, and stop it all on SIGTERM or SIGINT."""
    from mwms_dev.cluster import LocalCluster
    from mwms_dev.devcluster import project_images

    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    cluster = LocalCluster(name="test", state_dir=state_dir, subnet_index=subnet_index)
    with cluster:
        node = cluster.start_kubelet_node(images=project_images())
        attached = AttachedCluster(
            cluster.kubeconfig, cluster.server, cluster.ca_file, cluster.pod_api_host, cluster.pod_api_port,
            node.images(),
        )  # fmt: skip
        ready_file.write_text(json.dumps(asdict(attached), default=str))  # Paths as strings
        print(f"shared cluster ready: {ready_file}", file=sys.stderr, flush=True)
        stopping.wait()
    shutil.rmtree(cluster.state_dir / "nodes", ignore_errors=True)  # unpacked images, pods' files: GBs
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the integration tier's shared cluster, until SIGTERM")
    parser.add_argument("action", choices=["serve"])
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--subnet-index", type=int, required=True)
    parser.add_argument("--ready-file", type=Path, required=True)
    args = parser.parse_args(argv)
    return serve(args.state_dir, args.subnet_index, args.ready_file)


if __name__ == "__main__":
    sys.exit(main())
