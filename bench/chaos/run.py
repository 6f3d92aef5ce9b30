"""Fault experiments against the local control plane; results to bench/results/chaos.json and the table in
docs/reliability.md.

    .venv/bin/python bench/chaos/run.py [--trials 20] [--operator-kills 10] [--short]
        [--worker standin|trainer] [--subnet-index 6] [--seed 1]
        [--experiments worker-kill,chief-kill,operator-kill,mlflow-hung,mlflow-absent,node-lost]

It starts its own LocalCluster with a real kubelet node (the project's images from build/images/ loaded; a
second real node, node-2, with the trainer image when node-lost runs), a real `mlflow server` (sqlite, one
worker) on the pod bridge, and `python -m mwms_operator` logged in as its ServiceAccount with the RBAC from
manifests/ (the same harness as the operator's integration tests). Workers are the real trainer (`python -m
mwms_trainer` from the image name; TensorFlow, 2 workers, a few epochs of breast_cancer) or the stand-in
worker (tests/kit/mwms_kit/standin_worker.py: no TensorFlow; on real nodes `python -c <its source>` in the
trainer image). --short: stand-in, 1 trial each, 3 operator kills, no node-lost experiment (what CI runs, as
tests/integration/operator/test_operator_chaos_short.py). Needs root (bridge, network namespaces); real
nodes run one cluster per machine: wrap the run in `flock /tmp/mwms-node.lock`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
RESULTS = REPO / "bench" / "results" / "chaos.json"
DOC = REPO / "docs" / "reliability.md"
ALL = ("worker-kill", "chief-kill", "operator-kill", "mlflow-hung", "mlflow-absent", "node-lost")


def load(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


experiments = load("mwms_chaos_experiments", HERE / "experiments.py")
# tests/support: the operator as the integration tests run it (its ServiceAccount's token, RBAC enforced).
sys.path.insert(0, str(REPO / "tests"))
from mwms_kit import operator_harness as harness  # noqa: E402


class Kubectl:
    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig

    def __call__(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120) -> Any:
        import subprocess

        result = subprocess.run(
            ["kubectl", f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {result.stderr}")
        return result

    def json(self, *args: str) -> dict[str, Any]:
        return json.loads(self(*args, "-o", "json").stdout)


def start_operator(kubectl: Kubectl, cluster: Any, workdir: Path) -> Any:
    kubectl("apply", "-f", str(REPO / "manifests" / "crd.yaml"))
    experiments.wait(lambda: kubectl("get", "trainjobs", "-A", check=False).returncode == 0, 60, "CRD served")
    if kubectl("get", "namespace", "mwms-system", check=False).returncode != 0:
        kubectl("create", "namespace", "mwms-system")
    kubectl("apply", "-f", str(REPO / "manifests" / "rbac.yaml"))
    experiments.wait(
        lambda: kubectl("get", "sa", "mwms-operator", "-n", "mwms-system", check=False).returncode == 0,
        60,
        "SA",
    )
    kubeconfig = harness.service_account_kubeconfig(kubectl, cluster, workdir / "operator.kubeconfig")
    operator = harness.OperatorProcess(kubeconfig, workdir / "operator.log")
    operator.start()
    return operator


def run_trials(name: str, trials: int, trial: Any) -> dict[str, Any]:
    results = []
    for i in range(trials):
        started = time.monotonic()
        try:
            result = trial()
        except Exception as error:  # noqa: BLE001 (a trial that breaks is a failed trial, recorded)
            result = {"ok": False, "error": f"{type(error).__name__}: {error}"}
        result["trial"] = i
        result.setdefault("seconds_total", round(time.monotonic() - started, 1))
        print(
            f"{name} {i + 1}/{trials}: {'ok' if result.get('ok') else 'FAILED'} {json.dumps(result)}",
            flush=True,
        )
        results.append(result)
    return {"trials": len(results), "passed": sum(1 for r in results if r.get("ok")), "results": results}


def judge_accuracy(data: dict[str, Any], reference: dict[str, Any], tolerance: float = 0.01) -> None:
    """A disturbed fit must end within `tolerance` of the undisturbed one's held-out accuracy."""
    expected = reference.get("metrics", {}).get("val_accuracy")
    for r in data["results"]:
        got = r.get("metrics", {}).get("val_accuracy")
        if expected is None or got is None:
            continue
        r["val_accuracy_diff"] = round(abs(got - expected), 6)
        r["ok"] = bool(r.get("ok")) and r["val_accuracy_diff"] <= tolerance
    data["passed"] = sum(1 for r in data["results"] if r.get("ok"))


def summarize(name: str, data: dict[str, Any]) -> dict[str, Any]:
    results = data["results"]
    times = [r["seconds_total"] for r in results if r.get("ok") and "seconds_total" in r]
    summary: dict[str, Any] = {
        "passed": f"{data['passed']}/{data['trials']}",
        "median_seconds": round(statistics.median(times), 1) if times else None,
        "duplicate_pods": sum(1 for r in results if r.get("pod_duplicates")),
    }
    runs = [r.get("mlflow_runs") for r in results if r.get("mlflow_runs") is not None]
    if runs:
        summary["mlflow_runs_per_job"] = sorted(set(runs))
    restarts = [r.get("restarts") for r in results if r.get("restarts") is not None]
    if restarts:
        summary["restarts"] = sorted(set(restarts))
    if name in ("worker-kill", "chief-kill"):
        summary["kills_landed"] = sum(1 for r in results if r.get("kill_landed"))
        diffs = [r["val_accuracy_diff"] for r in results if "val_accuracy_diff" in r]
        if diffs:
            summary["max_val_accuracy_diff"] = max(diffs)
    return summary


PREAMBLE = """
Produced by `bench/chaos/run.py` (results: `bench/results/chaos.json`); rerun it to refresh this file.
Every trial runs on the local control plane (real kube-apiserver, controller-manager, scheduler, real
kubelet nodes; older results: a node agent), with the operator logged in as its ServiceAccount and a real
`mlflow server`. Faults are real: SIGKILL of a worker process, of the operator, of a whole node; a
tracking server that hangs or is not there. Pods are observed through a watch (every version), so a pod
created twice for the same worker of the same group would be counted.
"""
NODE_NOTE = """
Two real nodes; the job runs on node-1, whose kubelet, containerd, shims and pods are SIGKILLed at once.
The controller manager runs with its defaults (the launcher sets no node-lifecycle flags): a Node whose
kubelet stops posting status turns `Unknown` after `--node-monitor-grace-period` (50 s); its pods are
then evicted by the `node.kubernetes.io/unreachable:NoExecute` taint after their toleration (300 s by
default; the experiment's pods tolerate 5 s). An evicted pod on a dead node stays Terminating until a
kubelet confirms it, so the operator, which waits for the old group to be gone before recreating it
(`WaitingForOldPods`), waits too. The experiment then does what an administrator does for a machine that
will not come back (Kubernetes' non-graceful node shutdown): taint it
`node.kubernetes.io/out-of-service=nodeshutdown:NoExecute`; the pod garbage collector (every 20 s)
force-deletes the pods, and the operator recreates the group on node-2. Each trial is a run of its own
(node-1 stays dead): `bench/results/chaos_node_lost_real_nodes.json`, compared with the node agent's
numbers in docs/benchmarks.md.
"""
NOTES = {
    "worker-kill": "SIGKILL of a random worker at a random moment (checkpoint on a PVC): whole group "
    "restarted, Succeeded, one MLflow run",
    "chief-kill": "SIGKILL of worker 0 (the chief) at a random moment: same expectations",
    "operator-kill": "SIGKILL of the operator at a random moment of a job that also restarts its group once "
    "(exit 75), restarted after 0-3 s: no pod created twice, restarts exactly 1, status complete",
    "mlflow-hung": "tracking server hung (SIGSTOP) at the start, back after the first group restart: exit 75 "
    "after bounded retries, then Succeeded with exactly one run",
    "mlflow-absent": "no tracking server (closed port), backoffLimit 1: Failed (BackoffLimitExceeded) naming "
    "exit 75, no run",
    "node-lost": "SIGKILL of a real node (kubelet, containerd, pods) under a stand-in job (pods tolerate "
    "unreachable for 5 s), node tainted out-of-service after the eviction: group recreated on node-2, "
    "Succeeded",
}


# docs/reliability.md below this marker is written by hand (failure modes and what a user sees): kept as is.
HAND_WRITTEN = (
    "<!-- Written by hand from here on; bench/chaos/run.py keeps it when it rewrites the part above. -->"
)


def hand_written_part(doc: str) -> str:
    """The hand-written tail of the document, marker included; empty when there is none."""
    at = doc.find(HAND_WRITTEN)
    return doc[at:] if at >= 0 else ""


def write_doc(result: dict[str, Any]) -> None:
    lines = [
        "# Reliability: fault experiments",
        "",
        *PREAMBLE.strip().splitlines(),
        "",
        f"Command: `{result['command']}`  ",
        f"Workers: {result['workers']}; measured {result['measured_at']} on {result['machine']['cpus']} CPUs "
        f"(load average at the start {result['machine']['loadavg_start'][0]:.1f}).",
        "",
        "| Experiment | What is checked | Passed | Median s | Duplicate pods | MLflow runs per job "
        "| Restarts |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, data in result["experiments"].items():
        s = data["summary"]
        lines.append(
            f"| {name} | {NOTES[name]} | {s['passed']} | {s['median_seconds']} | {s['duplicate_pods']} | "
            f"{s.get('mlflow_runs_per_job', '-')} | {s.get('restarts', '-')} |"
        )
    reference = result.get("reference")
    if reference:
        lines += [
            "",
            f"Undisturbed reference run (same job, no fault): {json.dumps(reference.get('metrics', {}))}.",
        ]
        for name in ("worker-kill", "chief-kill"):
            s = result["experiments"].get(name, {}).get("summary", {})
            if "max_val_accuracy_diff" in s:
                tag = "mwms.dev/resumed-from-epoch"
                resumed = [
                    f"{r.get('kill_after_epoch')}→{r.get('run_tags', {}).get(tag, '-')}"
                    for r in result["experiments"][name]["results"]
                ]
                lines.append(
                    f"{name}: killed after epoch → resumed from epoch (run tag): {', '.join(resumed)}."
                )
                lines.append(
                    f"{name}: kills that landed {s['kills_landed']}; largest held-out accuracy difference "
                    f"to the undisturbed run {s['max_val_accuracy_diff']:.4f} (a trial passes within 0.01)."
                )
    node = result["experiments"].get("node-lost")
    if node:
        lines += [
            "",
            "## A lost node",
            "",
            *NODE_NOTE.strip().splitlines(),
            "",
        ]
        for r in node["results"]:
            keys = ("node_not_ready_after_s", "pods_evicted_after_s", "out_of_service_after_s",
                    "group_recreated_after_s", "finished_after_s", "recreated_on", "phase_while_node_lost",
                    "finished", "restarts", "error")  # fmt: skip
            lines.append(
                "- trial " + str(r["trial"]) + ": " + ", ".join(f"{k} {r[k]}" for k in keys if k in r)
            )
    failures = [
        (name, r) for name, data in result["experiments"].items() for r in data["results"] if not r.get("ok")
    ]
    if failures:
        lines += ["", "## Failed trials", ""]
        for name, r in failures:
            lines.append(f"- {name} trial {r['trial']}: {json.dumps(r)[:600]}")
    DOC.parent.mkdir(parents=True, exist_ok=True)
    kept = hand_written_part(DOC.read_text()) if DOC.exists() else ""
    DOC.write_text("\n".join(lines) + "\n" + ("\n" + kept if kept else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--operator-kills", type=int, default=10)
    parser.add_argument("--short", action="store_true")
    parser.add_argument("--worker", choices=("standin", "trainer"), default="trainer")
    parser.add_argument("--experiments", default=",".join(ALL))
    parser.add_argument("--subnet-index", type=int, default=6)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=40, help="epochs of the real trainer's fit")
    parser.add_argument(
        "--merge", action="store_true", help="keep the other experiments' results already in the results file"
    )
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--no-doc", action="store_true", help="do not rewrite docs/reliability.md")
    parser.add_argument("--doc-only", action="store_true", help="rewrite docs/reliability.md from --results")
    args = parser.parse_args()
    if args.doc_only:
        write_doc(json.loads(args.results.read_text()))
        return
    chosen = [e.strip() for e in args.experiments.split(",") if e.strip()]
    unknown = set(chosen) - set(ALL)
    if unknown:
        parser.error(f"unknown experiments: {', '.join(sorted(unknown))} (known: {', '.join(ALL)})")
    if args.short:
        chosen = [e for e in chosen if e != "node-lost"]  # minutes long
    if args.short:
        args.worker, args.trials, args.operator_kills = "standin", 1, 3

    from mwms_dev.cluster import LocalCluster, free_port
    from mwms_dev.devcluster import project_images

    loadavg_start = os.getloadavg()
    result: dict[str, Any] = {"experiments": {}}
    with tempfile.TemporaryDirectory(prefix="mwms-chaos-") as tmp:
        workdir = Path(tmp)
        cluster = LocalCluster(name="chaos", state_dir=workdir / "cluster", subnet_index=args.subnet_index)
        cluster.start()
        operator = mlflow = None
        try:
            node = cluster.start_kubelet_node(images=project_images())
            if "node-lost" in chosen:
                trainer = [p for p in project_images() if "trainer" in p.name]
                cluster.start_kubelet_node("node-2", images=trainer)
            from mwms_kit.standin import standin_container  # tests/ is on sys.path (above)

            image = next(name for name in node.images() if "/mwms-trainer:" in name)
            standin = standin_container(image)
            kubectl = Kubectl(cluster.kubeconfig)
            operator = start_operator(kubectl, cluster, workdir)
            mlflow = experiments.MlflowServer(cluster.pod_api_host, free_port(), workdir / "mlflow")
            mlflow.start()
            lab = experiments.Lab(
                kubectl, operator, cluster, None if args.worker == "trainer" else standin,
                random.Random(args.seed), mlflow, args.epochs, standin=standin,
            )  # fmt: skip
            if args.worker == "trainer" and {"worker-kill", "chief-kill"} & set(chosen):
                result["reference"] = experiments.undisturbed(lab)
                print("reference:", json.dumps(result["reference"]), flush=True)
            plan = {
                "worker-kill": (args.trials, lambda: experiments.worker_kill(lab)),
                "chief-kill": (args.trials, lambda: experiments.worker_kill(lab, chief=True)),
                "operator-kill": (args.operator_kills, lambda: experiments.operator_kill(lab)),
                "mlflow-hung": (max(1, args.trials // 5), lambda: experiments.mlflow_hung_at_start(lab)),
                "mlflow-absent": (1, lambda: experiments.mlflow_absent(lab)),
                "node-lost": (1, lambda: experiments.node_lost(lab)),
            }
            for name in chosen:
                trials, trial = plan[name]
                data = run_trials(name, trials, trial)
                if name in ("worker-kill", "chief-kill") and "reference" in result:
                    judge_accuracy(data, result["reference"])
                data["summary"] = summarize(name, data)
                result["experiments"][name] = data
        finally:
            if mlflow is not None:
                mlflow.stop()
            if operator is not None:
                operator.stop()
                log = operator.log()
                result["operator_log_tracebacks"] = log.count("Traceback")
                result["operator_log_forbidden"] = sum(
                    1 for line in log.splitlines() if "forbidden: User" in line
                )
            # Seconds from each real node's start to images loaded, Node Ready, DNS ready.
            result["node_timings"] = {n: node.timings for n, node in cluster.kubelet_nodes.items()}
            cluster.stop()
    result.update(
        command="python bench/chaos/run.py " + " ".join(sys.argv[1:]),
        workers="stand-in worker (no TensorFlow)"
        if args.worker == "standin"
        else "real trainer (TensorFlow)",
        seed=args.seed,
        machine={
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "loadavg_start": loadavg_start,
            "loadavg_end": os.getloadavg(),
        },
        measured_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )
    if args.merge and args.results.exists():
        previous = json.loads(args.results.read_text())
        result["experiments"] = {**previous.get("experiments", {}), **result["experiments"]}
        result.setdefault("reference", previous.get("reference"))
        result["command"] = f"{previous.get('command')}; then {result['command']}"
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(result, indent=2) + "\n")
    if not args.no_doc:
        write_doc(result)
    print(json.dumps({k: v["summary"] for k, v in result["experiments"].items()}, indent=2))


if __name__ == "__main__":
    main()
