"""`mwms demo`: the seed TrainJob end to end on this machine, no Docker needed.

Brings up the local control plane (real kube-apiserver, etcd, controller-manager, scheduler) with one real
kubelet node (containerd, kube-proxy, CoreDNS, a default StorageClass) running the images users deploy
(build/images/, `make images`), installs the Helm chart with the bundled MLflow server on its PVC, applies
manifests/samples/seed-breast-cancer.yaml (4 workers), waits for Succeeded, and prints the one MLflow run,
its held-out accuracy and how to look at it. The steps are mwms_dev.chain's, the same the tests and the kind
workflow run. `--dev`: the real node's operator and workers run this checkout's code (mwms_dev.devmode).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path

import yaml

from mwms_dev.chain import REPO, SEED_SAMPLE, Chain, ChainError, check_mlflow, score_model
from mwms_dev.cluster import ClusterError, LocalCluster
from mwms_dev.devcluster import project_images
from mwms_dev.devmode import NOTE, dev_mode_values, privileged_namespaces, tools_bin, with_dev_template
from mwms_dev.node_addons import real_node_chart_values
from mwms_dev.node_parts import NodeError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mwms demo", description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=Path, default=SEED_SAMPLE, help="the TrainJob manifest to run")
    parser.add_argument(
        "--subnet-index", type=int, default=9, help="bridge mwbr<N>, pods on 10.<200+N>.0.0/16"
    )
    parser.add_argument("--keep", action="store_true", help="keep the cluster running until Ctrl-C")
    parser.add_argument(
        "--dev",
        action="store_true",
        help="the operator and workers run this checkout's code (hostPath, privileged namespaces)",
    )
    args = parser.parse_args(argv)

    bins = tools_bin()
    try:
        with LocalCluster(name="demo", subnet_index=args.subnet_index) as cluster:
            values = ["mlflow.enabled=true", "mlflow.extraAllowedHosts={10.*}"]
            images = project_images()
            if not images:
                raise ClusterError("no images in build/images: run `make images` first")
            node = cluster.start_kubelet_node(images=images)
            values += real_node_chart_values(node.images())
            if args.dev:
                values += dev_mode_values()
                sample = cluster.state_dir / "dev-sample.json"
                sample.write_text(json.dumps(with_dev_template(yaml.safe_load(args.sample.read_text()))))
                args.sample = sample
            print(f"control plane up: export KUBECONFIG={cluster.kubeconfig}", file=sys.stderr, flush=True)
            chain = Chain(
                kubeconfig=cluster.kubeconfig,
                helm=str(bins / "helm"),
                kubectl=str(bins / "kubectl"),
                sample=args.sample,
                helm_values=values,
            )
            if args.dev:
                privileged_namespaces(chain)
                print(NOTE.format(checkout=REPO, namespace=chain.operator_namespace), file=sys.stderr)
            chain.install_chart()
            name = chain.apply_sample()
            job = chain.wait_succeeded(name)
            url = chain.mlflow_pod_url()
            result = check_mlflow(url, job)
            accuracy = score_model(url, result["modelUri"], job["spec"].get("trainer", {}))
            # The run as MLflow holds it; the per-epoch loss is in the UI, here only how many epochs it has.
            shown = {k: v for k, v in result.items() if k != "lossHistory"}
            shown.update(epochsLogged=len(result["lossHistory"]), heldOutAccuracy=accuracy)
            print(json.dumps(shown, indent=2))
            print(
                f"\ntrainjob/{name} Succeeded: one MLflow run {result['runId']},"
                f" one model {result['modelUri']},"
                f" held-out accuracy {accuracy:.4f}.",
                flush=True,
            )
            if args.keep:
                print(
                    f"MLflow UI: {url}/#/experiments/{result['experimentId']}/runs/{result['runId']}\n"
                    f"kubectl --kubeconfig {cluster.kubeconfig} get trainjobs -A\n"
                    "The cluster keeps running; Ctrl-C stops it.",
                    flush=True,
                )
                stop = threading.Event()
                signal.signal(signal.SIGINT, lambda *_: stop.set())
                signal.signal(signal.SIGTERM, lambda *_: stop.set())
                stop.wait()
            else:
                print(
                    "The cluster stops now; `.venv/bin/mwms demo --keep` keeps it up to look around "
                    "(MLflow UI, kubectl).",
                    flush=True,
                )
        return 0
    except (ChainError, ClusterError, NodeError, ValueError) as exc:
        print(f"mwms demo failed: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
