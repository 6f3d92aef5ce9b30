"""`mwms submit`'s resource and placement flags (mwms.placement says where each goes in the TrainJob)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mwms.placement as rules
import mwms.submit as packing
from mwms.placement import NVIDIA_GPU
from mwms.sdk import placement_of


def _typed(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    def check(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    check.__name__ = parse.__name__  # argparse names the type in its message
    return check


def _pair(what: str) -> Callable[[str], tuple[str, str]]:
    def pair(text: str) -> tuple[str, str]:
        return rules.key_value(text, what)

    return _typed(pair)


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(f"{text!r} is below 0")
    return value


def add(submit: argparse.ArgumentParser) -> None:
    """The flags, in their own group of `mwms submit --help`."""
    group = submit.add_argument_group("resources and placement (per worker; see docs/submit.md)")
    group.add_argument("--cpu", help="CPU request and limit of each worker: 4, 500m")
    group.add_argument("--memory", help="memory request and limit of each worker: 16Gi")
    group.add_argument(
        "--gpu",
        type=_typed(_count),
        metavar="N",
        help=f"GPUs per worker ({NVIDIA_GPU}: the trainer's CUDA image <version>-gpu unless --image)",
    )
    group.add_argument(
        "--gpu-resource", default=NVIDIA_GPU, help=f"the GPU's resource name (default {NVIDIA_GPU})"
    )
    group.add_argument(
        "--env",
        action="append",
        type=_pair("--env"),
        default=[],
        metavar="K=V",
        help="an environment variable of the trainer container (repeatable; TF_CONFIG, MWMS_* and the "
        "operator's MLFLOW_* are refused)",
    )
    group.add_argument(
        "--label",
        action="append",
        type=_pair("--label"),
        default=[],
        metavar="K=V",
        help="a label of the TrainJob and its worker pods (repeatable; `mwms list -l K=V` selects it)",
    )
    group.add_argument("--queue", help="Kueue's LocalQueue (the kueue.x-k8s.io/queue-name label)")
    group.add_argument(
        "--node-selector",
        action="append",
        type=_pair("--node-selector"),
        default=[],
        metavar="K=V",
        help="run only on nodes with this label (repeatable)",
    )
    group.add_argument(
        "--toleration",
        action="append",
        type=_typed(rules.toleration),
        default=[],
        metavar="KEY[=VALUE]:EFFECT",
        help="tolerate a taint, in kubectl taint's syntax (repeatable)",
    )
    group.add_argument(
        "--deadline",
        type=_typed(rules.duration),
        help="fail the job after it ran this long: 3600, 90m, 2h (runPolicy.activeDeadlineSeconds)",
    )
    group.add_argument(
        "--backoff-limit",
        type=_typed(_count),
        metavar="N",
        help="restarts of the group allowed before the job fails (runPolicy.backoffLimit; default 3)",
    )
    group.add_argument(
        "--template",
        type=Path,
        metavar="FILE",
        help="a pod template (PodTemplateSpec YAML) for everything else: volumes, affinity, "
        "serviceAccountName...; the flags above are merged over it",
    )
    submit.add_argument(
        "--output",
        "-o",
        choices=("json", "yaml"),
        help="with --dry-run: print the TrainJob it would create instead of the files",
    )


def keywords(args: argparse.Namespace) -> dict[str, Any]:
    """The flags as Client.submit's keywords (those not given left out)."""
    asked = {
        "cpu": args.cpu,
        "memory": args.memory,
        "gpu": args.gpu,
        "gpu_resource": args.gpu_resource,
        "env": dict(args.env),
        "labels": dict(args.label),
        "queue": args.queue,
        "node_selector": dict(args.node_selector),
        "tolerations": list(args.toleration),
        "deadline": args.deadline,
        "backoff_limit": args.backoff_limit,
        "template": args.template,
    }
    return {key: value for key, value in asked.items() if value not in (None, {}, [])}


def dry_run_trainjob(args: argparse.Namespace, code: packing.Code, asked: dict[str, Any]) -> dict[str, Any]:
    """`submit --dry-run -o yaml|json`: the TrainJob it would create (not its code ConfigMap); no cluster."""
    placement = placement_of(**asked)
    name = args.name or packing.job_name(args.script.name)
    body = packing.trainjob(
        name,
        code,
        replicas=args.replicas,
        args=args.args,
        experiment=args.experiment,
        image=placement.image(args.image),
        placement=placement,
    )
    return body
