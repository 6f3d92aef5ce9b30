"""`chaos`: the fault experiments of mwms_bench.faults in full, on a real kubelet node (a second for
node-lost), with a real `mlflow server` on the pod bridge and the operator as its ServiceAccount; the
workers are the real trainer or the stand-in. Run it under flock /tmp/mwms-node.lock."""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mwms_bench import faults
from mwms_bench.lab import Lab
from mwms_bench.scenarios import Figures, Scenario
from mwms_kit.mlflow_server import MlflowServer
from mwms_kit.standin import standin_container, trainer_image

ALL = ("worker-kill", "chief-kill", "operator-kill", "mlflow-hung", "mlflow-absent", "node-lost")


def trials(name: str, count: int, trial: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    results = []
    for i in range(count):
        started = time.monotonic()
        try:
            result = trial()
        except Exception as error:  # a trial that breaks is a failed trial, recorded
            result = {"ok": False, "error": f"{type(error).__name__}: {error}"}
        result.setdefault("seconds_total", round(time.monotonic() - started, 1))
        print(f"{name} {i + 1}/{count}: {'ok' if result.get('ok') else 'FAILED'} {result}", flush=True)
        results.append(result | {"trial": i})
    return {"trials": len(results), "passed": sum(bool(r.get("ok")) for r in results), "results": results}


def summarize(data: dict[str, Any]) -> dict[str, Any]:
    results = data["results"]
    times = [r["seconds_total"] for r in results if r.get("ok")]
    out: dict[str, Any] = {"passed": f"{data['passed']}/{data['trials']}"}
    out["median_seconds"] = round(statistics.median(times), 1) if times else None
    out["duplicate_pods"] = sum(bool(r.get("pod_duplicates")) for r in results)
    if diffs := [r["val_accuracy_diff"] for r in results if "val_accuracy_diff" in r]:
        out["max_val_accuracy_diff"] = max(diffs)
    return out


def run(a: argparse.Namespace, figures: Figures) -> None:
    chosen = a.experiments.split(",")
    if unknown := set(chosen) - set(ALL):
        raise ValueError(f"--experiments: unknown {sorted(unknown)}")
    info = {"MWMS_LOG_LEVEL": "INFO"}
    figures["workers"] = "the real trainer" if a.worker == "trainer" else "the stand-in worker"
    nodes = 1 + ("node-lost" in chosen)
    with (
        tempfile.TemporaryDirectory(prefix="mwms-bench-") as tmp,
        Lab(Path(tmp), a.subnet_index, real_nodes=nodes, as_service_account=True, operator_env=info) as lab,
    ):
        standin = standin_container(trainer_image(lab.cluster.kubelet_nodes["node-1"].images()))
        host = lab.cluster.pod_api_host  # where pods and this process both reach it
        with MlflowServer(Path(tmp) / "mlflow", host=host, allowed_hosts=[host]) as mlflow:
            worker = None if a.worker == "trainer" else standin
            rng = random.Random(a.seed)
            fl = faults.FaultLab(
                lab.kubectl, lab.operator, lab.cluster, worker, rng, mlflow, a.epochs, standin
            )
            kills = {"worker-kill", "chief-kill"} & set(chosen)
            if worker is None and kills:
                figures["reference"] = fl.reference = faults.undisturbed(fl)
            plan = {
                "worker-kill": (a.trials, lambda: faults.worker_kill(fl)),
                "chief-kill": (a.trials, lambda: faults.worker_kill(fl, chief=True)),
                "operator-kill": (a.operator_kills, lambda: faults.operator_kill(fl)),
                "mlflow-hung": (max(1, a.trials // 5), lambda: faults.mlflow_hung(fl)),
                "mlflow-absent": (1, lambda: faults.mlflow_absent(fl)),
                "node-lost": (1, lambda: faults.node_lost(fl)),
            }
            figures["experiments"] = {}
            for name in chosen:
                data = figures["experiments"][name] = trials(name, *plan[name])
                data["summary"] = summarize(data)
            fl.watcher.stop()
        log = lab.operator.log()
        figures["operator_log_tracebacks"] = log.count("Traceback")
        figures["operator_log_forbidden"] = sum("forbidden: User" in line for line in log.splitlines())
        figures["node_timings"] = {name: node.timings for name, node in lab.cluster.kubelet_nodes.items()}


HELP = "fault experiments: kills of workers, the operator, a node; MLflow hung or absent"
OPTIONS = {"experiments": (",".join(ALL), "of " + ",".join(ALL)), "trials": 20, "operator_kills": 10}
OPTIONS |= {"worker": ("trainer", "trainer or standin"), "epochs": (40, "the real trainer's"), "seed": 1}
SCENARIOS = [Scenario("chaos", HELP, run, OPTIONS)]
