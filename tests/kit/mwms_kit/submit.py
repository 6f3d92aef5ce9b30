"""Bring-your-own-code helpers shared by the integration tier
(tests/integration/operator/test_operator_submit.py) and the real-node tier (tests/node/test_node_submit.py):
the user scripts of tests/data/submit, the `mwms` command as users run it, and what to read back from a
TrainJob."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

DATA = Path(__file__).resolve().parents[2] / "data" / "submit"
SEED_SCRIPT = DATA / "seed_train.py"  # the seed's train(), ported to a script
FAILING_SCRIPT = DATA / "failing.py"
FAILING_LINE = """KeyError: "label column 'diagnosis' not found" (failing.py, line 5)"""
CHIEFS_METRICS = {"loss", "accuracy", "val_loss", "val_accuracy"}  # what the seed's train() returns


def run_mwms(
    kubeconfig: str | os.PathLike[str], namespace: str, *args: str, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """`mwms <command> --namespace N <args>` in a subprocess, as a user runs it against that cluster."""
    return subprocess.run(
        [sys.executable, "-m", "mwms.cli", *args[:1], "--namespace", namespace, *args[1:]],
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def user_module(name: str = "seed_function") -> ModuleType:
    """tests/data/submit/<name>.py imported as a user's own module, so its source travels with the pickled
    function as it would from a user's project."""
    import importlib

    sys.path.insert(0, str(DATA))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(DATA))


def run_seed_function(namespace: str, kubeconfig: Path) -> Any:
    """The seed's train() submitted from Python as a notebook would (2 workers, 2 epochs): the chief's return
    value. TF_CONFIG must not be set in this process (it would mean "run here, as a worker")."""
    from mwms import Cluster, MirroredStrategyRunner

    runner = MirroredStrategyRunner(
        num_slots=2,
        use_custom_strategy=True,
        use_gpu=False,  # the default asks a GPU per slot (as spark-tensorflow-distributor): the node has none
        cluster=Cluster(namespace=namespace, kubeconfig=str(kubeconfig)),
    )
    return runner.run(user_module().train, epochs=2)


def jobs_in(kubectl: Any, namespace: str) -> list[dict[str, Any]]:
    return kubectl.json("get", "trainjobs", "-n", namespace)["items"]


def printed_result(stdout: str) -> dict[str, Any]:
    """The chief's return value as `mwms submit --follow` prints it (`Result: {json}`)."""
    import json

    return json.loads(stdout.split("Result: ", 1)[1].splitlines()[0])
