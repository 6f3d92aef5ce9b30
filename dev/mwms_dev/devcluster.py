"""`mwms dev-cluster up|down`: the local control plane and node agents for trying things by hand.

`up` runs in the foreground until Ctrl-C or SIGTERM, then stops everything it started. `down` removes what
a run that crashed left behind on a subnet index (processes, bridge); it refuses while a cluster is live.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from mwms_dev.cluster import ClusterError, LocalCluster


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mwms dev-cluster", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["up", "down"])
    parser.add_argument(
        "--subnet-index", type=int, default=0, help="bridge mwbr<N>, pods on 10.<200+N>.0.0/16"
    )
    parser.add_argument("--state-dir", type=Path, help="default: .mwms/dev<N> under the current directory")
    parser.add_argument("--nodes", type=int, default=1, help="node agents to start (node-1, node-2, ...)")
    parser.add_argument("--cpu", default="4", help="CPU capacity of each node")
    parser.add_argument("--memory", default="16Gi", help="memory capacity of each node")
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
            for i in range(1, args.nodes + 1):
                cluster.start_node_agent(node_name=f"node-{i}", cpu=args.cpu, memory=args.memory)
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
    except (ClusterError, ValueError) as exc:
        print(f"mwms dev-cluster: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
