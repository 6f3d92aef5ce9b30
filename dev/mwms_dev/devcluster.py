"""`mwms dev-cluster up|down`: the local control plane and one real node (one per machine) to try things on.

`up` runs in the foreground until Ctrl-C or SIGTERM, then stops everything it started. Its node is a real one:
kubelet, containerd, kube-proxy, CoreDNS and a default StorageClass (hack/build/build-node.sh), with the
project's images from build/images/ (`make images`) loaded into it; one node only (one real node runs per
machine). `up --dev` also installs the Helm chart with its operator running this checkout's code
(mwms_dev.devmode). `down` removes what a run that crashed
left behind on a subnet index (processes, containers, mounts, cgroups, nftables tables, bridge); it refuses
while a cluster is live.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from mwms_dev.chain import ChainError
from mwms_dev.cluster import REPO_ROOT, ClusterError, LocalCluster
from mwms_dev.devmode import install_dev_chart
from mwms_dev.node_parts import NodeError

PROJECT_IMAGES = REPO_ROOT / "build" / "images"


def project_images() -> list[Path]:
    """The OCI archives `make images` wrote (none before it ran)."""
    return sorted(PROJECT_IMAGES.glob("*.oci.tar"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mwms dev-cluster", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["up", "down"])
    parser.add_argument(
        "--subnet-index", type=int, default=0, help="bridge mwbr<N>, pods on 10.<200+N>.0.0/16"
    )
    parser.add_argument("--state-dir", type=Path, help="default: .mwms/dev<N> under the current directory")
    parser.add_argument(
        "--image",
        type=Path,
        action="append",
        help="OCI archive to load into the real node (default: build/images/*.oci.tar)",
    )
    parser.add_argument(
        "--dev",
        action="store_true",
        help="install the chart, its operator and workers on this checkout's code (privileged namespaces)",
    )
    args = parser.parse_args(argv)
    name = f"dev{args.subnet_index}"
    try:
        cluster = LocalCluster(name=name, state_dir=args.state_dir, subnet_index=args.subnet_index)
        if args.action == "down":
            cluster.clean()
            print(f"subnet index {args.subnet_index}: nothing left running", file=sys.stderr)
            return 0
        stopping = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stopping.set())
        signal.signal(signal.SIGINT, lambda *_: stopping.set())
        with cluster:
            images = args.image if args.image is not None else project_images()
            node = cluster.start_kubelet_node(images=images)
            print(
                f"real node {node.node_name} Ready in {node.timings['node_ready']:.1f}s, images: "
                f"{', '.join(p.name for p in images) or 'none (make images)'}",
                file=sys.stderr,
            )
            if args.dev:
                install_dev_chart(cluster.kubeconfig, node.images())
            print(f"export KUBECONFIG={cluster.kubeconfig}", flush=True)
            print(
                f"API ready in {cluster.timings['api_ready']:.1f}s at {cluster.server} "
                f"(pods: {cluster.pod_api_host}:{cluster.pod_api_port}); "
                f"logs in {cluster.logs_dir}; Ctrl-C stops it",
                file=sys.stderr,
                flush=True,
            )
            stopping.wait()
        return 0
    except (ClusterError, ChainError, NodeError, ValueError) as exc:
        print(f"mwms dev-cluster: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
