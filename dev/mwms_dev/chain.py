"""The whole chain, one path for every cluster: Helm chart → operator → TrainJob → workers → one MLflow run.

The end-to-end test, `mwms demo` and the kind workflow all run these same steps against a kubeconfig, so what
users run and what CI tests cannot drift. Each step raises `ChainError` naming the step that failed, with the
evidence (command output, object status, operator log) a person needs to see why.

    python -m mwms_dev.chain --kubeconfig ~/.kube/config --mlflow-url http://localhost:5000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mwms_contract.names import API_VERSION, LABEL_JOB_NAME, MLFLOW_TAG_JOB_UID, PLURAL
from mwms_contract.status import TrainJobStatus

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "mwms-operator"
SEED_SAMPLE = REPO / "manifests" / "samples" / "seed-breast-cancer.yaml"


class ChainError(RuntimeError):
    """A step of the chain failed; the message starts with the step's name."""


@dataclass
class Chain:
    kubeconfig: Path
    helm: str = "helm"
    kubectl: str = "kubectl"
    release: str = "mwms"
    operator_namespace: str = "mwms-system"
    job_namespace: str = "default"
    sample: Path = SEED_SAMPLE
    helm_values: Sequence[str] = ()  # extra `--set` arguments
    timeout_s: int = 900
    log: Callable[[str], None] = field(default=lambda line: print(line, file=sys.stderr, flush=True))

    # -- plumbing ------------------------------------------------------------------------------------------
    def run(self, step: str, args: Sequence[str], *, stdin: str | None = None, timeout: float = 300) -> str:
        """Runs a command against this cluster; ChainError naming `step` if it fails."""
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        try:
            done = subprocess.run(
                list(args), input=stdin, capture_output=True, text=True, env=env, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise ChainError(f"{step}: `{' '.join(args)}` did not finish in {timeout:.0f}s") from exc
        if done.returncode != 0:
            raise ChainError(
                f"{step}: `{' '.join(args)}` exited {done.returncode}:\n{done.stderr or done.stdout}"
            )
        return done.stdout

    def kubectl_json(self, step: str, *args: str) -> dict:
        return json.loads(self.run(step, [self.kubectl, *args, "-o", "json"]))

    # -- steps ---------------------------------------------------------------------------------------------
    def install_chart(self) -> None:
        self.log(f"[install] helm install {self.release} into {self.operator_namespace}")
        args = [
            self.helm,
            "upgrade",
            "--install",
            self.release,
            str(CHART),
            "--namespace",
            self.operator_namespace,
            "--create-namespace",
            "--wait",
            "--timeout",
            "5m",
        ]
        for value in self.helm_values:
            args += ["--set", value]
        self.run("install", args, timeout=360)

    def apply_sample(self) -> str:
        body = self.run(
            "apply", [self.kubectl, "apply", "-n", self.job_namespace, "-f", str(self.sample), "-o", "json"]
        )
        items = json.loads(body)
        items = items.get("items", [items])
        jobs = [item for item in items if item.get("kind") == "TrainJob"]
        if len(jobs) != 1:
            raise ChainError(f"apply: expected one TrainJob in {self.sample}, found {len(jobs)}")
        name = jobs[0]["metadata"]["name"]
        self.log(f"[apply] trainjob/{name} in {self.job_namespace}")
        return name

    def wait_succeeded(self, name: str) -> dict:
        self.log(f"[wait] kubectl wait --for=condition=Succeeded trainjob/{name} (up to {self.timeout_s}s)")
        deadline = time.monotonic() + self.timeout_s
        last_phase = None
        while time.monotonic() < deadline:
            job = self.kubectl_json(
                "wait", "get", f"{PLURAL}.{API_VERSION.split('/')[0]}", name, "-n", self.job_namespace
            )
            status = TrainJobStatus.of(job)
            phase = status.phase
            if phase != last_phase:
                progress = status.progress.to_dict() if status.progress else {}
                self.log(f"[wait] phase {phase} {json.dumps(progress)}")
                last_phase = phase
            if phase == "Failed":
                conditions = [c.to_dict() for c in status.conditions]
                raise ChainError(f"wait: trainjob/{name} Failed: {json.dumps(conditions, indent=1)}")
            if status.holds("Succeeded"):
                # The same check users run, so the documented command is proven too.
                self.run(
                    "wait",
                    [
                        self.kubectl,
                        "wait",
                        "--for=condition=Succeeded",
                        f"trainjob/{name}",
                        "-n",
                        self.job_namespace,
                        "--timeout=10s",
                    ],
                )
                return job
            time.sleep(3)
        raise ChainError(f"wait: trainjob/{name} not Succeeded after {self.timeout_s}s (phase {last_phase})")

    def mlflow_pod_url(self) -> str:
        """The bundled MLflow server at its pod IP: reachable from the host of the local control plane."""
        pods = self.kubectl_json(
            "mlflow",
            "get",
            "pods",
            "-n",
            self.operator_namespace,
            "-l",
            "app.kubernetes.io/component=tracking",
        )["items"]
        ips = [p["status"]["podIP"] for p in pods if (p.get("status") or {}).get("podIP")]
        if not ips:
            raise ChainError(f"mlflow: no running MLflow pod in {self.operator_namespace}")
        return f"http://{ips[0]}:5000"

    def delete_job(self, name: str) -> None:
        self.log(f"[delete] trainjob/{name}: its pods and Service must go")
        self.run(
            "delete",
            [
                self.kubectl,
                "delete",
                "trainjob",
                name,
                "-n",
                self.job_namespace,
                "--wait=true",
                "--timeout=120s",
            ],
        )
        selector = f"{LABEL_JOB_NAME}={name}"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            pods = self.kubectl_json("delete", "get", "pods", "-n", self.job_namespace, "-l", selector)[
                "items"
            ]
            services = self.kubectl_json(
                "delete",
                "get",
                "services",
                "-n",
                self.job_namespace,
                "--field-selector",
                f"metadata.name={name}",
            )["items"]
            if not pods and not services:
                return
            time.sleep(2)
        raise ChainError(
            f"delete: pods {[p['metadata']['name'] for p in pods]} / services "
            f"{[s['metadata']['name'] for s in services]} of trainjob/{name} still exist"
        )

    def uninstall(self) -> None:
        self.log(f"[uninstall] helm uninstall {self.release}")
        self.run(
            "uninstall",
            [
                self.helm,
                "uninstall",
                self.release,
                "--namespace",
                self.operator_namespace,
                "--wait",
                "--timeout",
                "3m",
            ],
            timeout=240,
        )
        selector = f"app.kubernetes.io/instance={self.release}"
        left = []
        for kind in (
            "deployments",
            "pods",
            "services",
            "serviceaccounts",
            "configmaps",
            "roles",
            "rolebindings",
        ):
            items = self.kubectl_json("uninstall", "get", kind, "-n", self.operator_namespace, "-l", selector)
            left += [
                f"{kind}/{i['metadata']['name']}"
                for i in items["items"]
                if not i["metadata"].get("deletionTimestamp")
            ]
        for kind in ("clusterroles", "clusterrolebindings"):
            items = self.kubectl_json("uninstall", "get", kind, "-l", selector)
            left += [f"{kind}/{i['metadata']['name']}" for i in items["items"]]
        if left:
            raise ChainError(f"uninstall: left behind {left}")


# -- MLflow checks (REST API, as users and the kind workflow do) ---------------------------------------------
def mlflow_get(base_url: str, path: str, params: dict | None = None, timeout: float = 10) -> dict:
    url = f"{base_url.rstrip('/')}/api/2.0/mlflow/{path}"
    if params:
        url += "?" + urllib.parse.urlencode(params, doseq=True)
    with urllib.request.urlopen(url, timeout=timeout) as reply:
        return json.load(reply)


def mlflow_post(base_url: str, path: str, body: dict, timeout: float = 10) -> dict:
    request = urllib.request.Request(
        f"{base_url.rstrip('/')}/api/2.0/mlflow/{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        return json.load(reply)


def runs_of_job(base_url: str, job_uid: str) -> list[dict]:
    """Every run in every experiment tagged with the job's uid: the chain wants exactly one."""
    experiments = mlflow_post(base_url, "experiments/search", {"max_results": 1000}).get("experiments", [])
    body = {
        "experiment_ids": [e["experiment_id"] for e in experiments],
        "filter": f"tags.`{MLFLOW_TAG_JOB_UID}` = '{job_uid}'",
        "max_results": 100,
    }
    return mlflow_post(base_url, "runs/search", body).get("runs", [])


def logged_models_of_run(base_url: str, experiment_id: str, run_id: str) -> list[dict]:
    body = {"experiment_ids": [experiment_id], "filter": f"source_run_id = '{run_id}'", "max_results": 100}
    return mlflow_post(base_url, "logged-models/search", body).get("models", [])


def check_mlflow(base_url: str, job: dict) -> dict:
    """One run tagged with the job's uid, with params and per-epoch metrics, and one logged model."""
    uid = job["metadata"]["uid"]
    status_mlflow = TrainJobStatus.of(job).mlflow
    if status_mlflow is None or not status_mlflow.run_id or not status_mlflow.model_uri:
        shown = status_mlflow.to_dict() if status_mlflow else None
        raise ChainError(f"mlflow: status.mlflow lacks runId/modelUri: {shown}")
    try:
        runs = runs_of_job(base_url, uid)
    except (urllib.error.URLError, OSError) as exc:
        raise ChainError(f"mlflow: cannot search runs at {base_url}: {exc}") from exc
    if len(runs) != 1:
        raise ChainError(f"mlflow: expected one run tagged {MLFLOW_TAG_JOB_UID}={uid}, found {len(runs)}")
    run = runs[0]
    run_id = run["info"]["run_id"]
    if run_id != status_mlflow.run_id:
        raise ChainError(f"mlflow: status.mlflow.runId {status_mlflow.run_id} is not the run {run_id}")
    params = {p["key"]: p["value"] for p in run["data"].get("params", [])}
    metrics = {m["key"]: m["value"] for m in run["data"].get("metrics", [])}
    history = mlflow_get(base_url, "metrics/get-history", {"run_id": run_id, "metric_key": "loss"})
    models = logged_models_of_run(base_url, run["info"]["experiment_id"], run_id)
    if len(models) != 1:
        raise ChainError(f"mlflow: expected one logged model for run {run_id}, found {len(models)}")
    return {
        "runId": run_id,
        "experimentId": run["info"]["experiment_id"],
        "modelUri": status_mlflow.model_uri,
        "params": params,
        "metrics": metrics,
        "lossHistory": [m["value"] for m in history.get("metrics", [])],
    }


def score_model(base_url: str, model_uri: str, trainer_settings: dict) -> float:
    """Held-out accuracy of the logged model, loaded back through MLflow as users load it.

    The split is rebuilt from the job's own `spec.trainer` with the trainer's code, and the model is fed raw,
    unscaled rows: the scaler must be part of the model."""
    import mlflow

    from mwms_trainer.input.exact import load_split
    from mwms_trainer.tfenv import tensorflow
    from mwms_trainer.trainer_config import parse_trainer_config

    tensorflow()  # the trainer's TensorFlow setup (tf-keras, quiet C++ logs) before MLflow imports it
    split = load_split(parse_trainer_config(json.dumps(trainer_settings)))
    mlflow.set_tracking_uri(base_url)
    model = mlflow.pyfunc.load_model(model_uri)
    scores = np.asarray(model.predict(split.x_test)).reshape(-1)
    return float(np.mean((scores > 0.5) == (split.y_test > 0.5)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mwms_dev.chain", description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--mlflow-url", required=True, help="where this machine reaches the MLflow server")
    parser.add_argument("--helm", default="helm")
    parser.add_argument("--kubectl", default="kubectl")
    parser.add_argument("--sample", type=Path, default=SEED_SAMPLE)
    parser.add_argument("--set", dest="values", action="append", default=[], help="extra helm --set value")
    parser.add_argument("--skip-install", action="store_true", help="the chart is already installed")
    parser.add_argument("--timeout", type=int, default=900)
    args = parser.parse_args(argv)
    chain = Chain(
        kubeconfig=args.kubeconfig,
        helm=args.helm,
        kubectl=args.kubectl,
        sample=args.sample,
        helm_values=args.values,
        timeout_s=args.timeout,
    )
    try:
        if not args.skip_install:
            chain.install_chart()
        name = chain.apply_sample()
        job = chain.wait_succeeded(name)
        result = check_mlflow(args.mlflow_url, job)
        result["heldOutAccuracy"] = score_model(
            args.mlflow_url, result["modelUri"], job["spec"].get("trainer", {})
        )
    except ChainError as exc:
        print(f"chain failed at {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
