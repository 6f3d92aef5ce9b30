"""The `mwms` command: local mode, submitting your script, the local control plane, and the demo.

Each subcommand imports its implementation lazily, so `mwms local` never loads the control-plane code and
`mwms dev-cluster` never loads TensorFlow.
"""

from __future__ import annotations

import argparse
import sys


def _local(argv: list[str]) -> int:
    from mwms_trainer.local import main as local_main

    return local_main(argv)


def _submit(argv: list[str]) -> int:
    from mwms_trainer.submit import main as submit_main

    return submit_main(argv)


def _dev_cluster(argv: list[str]) -> int:
    from mwms_dev.devcluster import main as dev_cluster_main

    return dev_cluster_main(argv)


def _demo(argv: list[str]) -> int:
    from mwms_dev.demo import main as demo_main

    return demo_main(argv)


COMMANDS = {
    "local": (_local, "run a TrainJob manifest as local worker processes (no Kubernetes)"),
    "submit": (_submit, "run your training script as a TrainJob (packs it into a ConfigMap the job owns)"),
    "dev-cluster": (_dev_cluster, "start or stop the local Kubernetes control plane and node agent"),
    "demo": (_demo, "local control plane + Helm chart + the seed TrainJob with 4 workers, end to end"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(
        prog="mwms", description="TensorFlow multi-worker training on Kubernetes."
    )
    parser.add_argument(
        "command", choices=sorted(COMMANDS), help="; ".join(f"{k}: {v[1]}" for k, v in COMMANDS.items())
    )
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0 if argv else 2
    args, rest = parser.parse_known_args(argv[:1])
    run, _ = COMMANDS[args.command]
    return run(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
