"""`mwms local FILE.yaml`: a TrainJob manifest run as local worker processes, each with the env the
operator would give its pod (mwms_contract.trainjob.trainer_env), pointed at local ports and files.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import yaml

from mwms_contract import names, termination
from mwms_contract.trainjob import SpecError, TrainJobSpec, parse, trainer_env

DEFAULT_WORKDIR = ".mwms"
LOCAL = "local"  # the spec's default image and tracking URI: neither is used here
GRACE_SECONDS = 30  # how long the chief may outlive a failed peer before it is stopped


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def prepare_sqlite_store(workdir: Path, experiment: str) -> str:
    """Create the sqlite store and the experiment (artifacts beside it) once, before the workers start:
    several processes initialising one sqlite file at once crash."""
    import mlflow  # only for a sqlite store: --tracking-uri needs none here

    workdir.mkdir(parents=True, exist_ok=True)
    uri = f"sqlite:///{(workdir / 'mlflow.db').resolve()}"
    client = mlflow.MlflowClient(uri)
    if client.get_experiment_by_name(experiment) is None:
        client.create_experiment(experiment, artifact_location=(workdir / "mlartifacts").resolve().as_uri())
    return uri


def worker_envs(
    spec: TrainJobSpec,
    *,
    job_name: str,
    namespace: str,
    uid: str,
    tracking_uri: str,
    job_dir: Path,
    ports: Sequence[int] | None = None,
    restart_count: int = 0,
    base: Mapping[str, str] | None = None,
) -> list[dict[str, str]]:
    """One environment per worker: the operator's (same function), pointed at local files and ports."""
    ports = list(ports) if ports is not None else free_ports(spec.replicas)
    hosts = [f"127.0.0.1:{p}" for p in ports]
    envs = []
    for index in range(spec.replicas):
        env = dict(os.environ if base is None else base)
        env.update(
            trainer_env(
                spec,
                job_name=job_name,
                namespace=namespace,
                uid=uid,
                index=index,
                hosts=hosts,
                restart_count=restart_count,
            )
        )
        env[names.ENV_TRACKING_URI] = tracking_uri
        env[names.ENV_TERMINATION_LOG] = str(job_dir / f"worker-{index}.termination")
        if names.ENV_CHECKPOINT_STORE in env:  # a pod's own emptyDir: nothing shared between workers
            env[names.ENV_CHECKPOINT_DIR] = str(job_dir / f"worker-{index}-checkpoint")
        elif names.ENV_CHECKPOINT_DIR in env:  # the volume every worker mounts
            env[names.ENV_CHECKPOINT_DIR] = str(job_dir / "checkpoint")
        envs.append(env)
    return envs


def spawn(cmd: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        list(cmd),
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # Ctrl-C reaches us only; we stop the workers ourselves
    )


def start_workers(envs: Sequence[Mapping[str, str]], job_dir: Path) -> list[subprocess.Popen[str]]:
    job_dir.mkdir(parents=True, exist_ok=True)
    return [spawn([sys.executable, "-m", "mwms_trainer"], env) for env in envs]


def _pump(index: int, stream: IO[str], log_path: Path, show: IO[str] | None, show_all: bool) -> None:
    """Every line to the worker's log file; to `show` all of them, or the chief's epochs and any errors."""
    with open(log_path, "w", encoding="utf-8") as log:
        for line in stream:
            log.write(line)
            log.flush()
            if show is not None and (
                show_all
                or (index == 0 and " epoch " in line)
                or " ERROR " in line
                or line.startswith("Traceback")
            ):
                show.write(f"[worker-{index}] {line}")
                show.flush()


def wait_workers(
    procs: Sequence[subprocess.Popen[str]], job_dir: Path, show: IO[str] | None = None, show_all: bool = False
) -> list[int]:
    """Wait for the group; a chief that outlives a failed peer by GRACE_SECONDS is stopped."""
    pumps = [
        threading.Thread(
            target=_pump, args=(i, p.stdout, job_dir / f"worker-{i}.log", show, show_all), daemon=True
        )
        for i, p in enumerate(procs)
    ]
    for t in pumps:
        t.start()
    failed_at: float | None = None
    try:
        while any(p.poll() is None for p in procs):
            if failed_at is None and any(p.returncode not in (None, 0) for p in procs):
                failed_at = time.monotonic()
            if failed_at is not None and time.monotonic() - failed_at > GRACE_SECONDS:
                stop_workers(procs)
            time.sleep(0.2)
    finally:
        stop_workers(procs)
        for t in pumps:
            t.join(timeout=5)
    return [p.returncode for p in procs]


def stop_workers(procs: Sequence[subprocess.Popen[str]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()  # a worker blocked in the strategy constructor ignores SIGTERM
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=10)


def read_termination(job_dir: Path, index: int) -> str:
    path = job_dir / f"worker-{index}.termination"
    return path.read_text(encoding="utf-8") if path.exists() else ""


def load_manifest(path: Path) -> dict[str, Any]:
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    except (OSError, yaml.YAMLError) as e:
        raise SpecError(str(path), f"cannot read the manifest: {e}") from None
    jobs = [d for d in docs if isinstance(d, dict) and d.get("kind") == names.KIND]
    if len(jobs) != 1:
        raise SpecError("kind", f"{path} must hold exactly one {names.KIND}, found {len(jobs)}")
    body = jobs[0]
    if body.get("apiVersion") != names.API_VERSION:
        raise SpecError("apiVersion", f"must be {names.API_VERSION}, got {body.get('apiVersion')!r}")
    name = (body.get("metadata") or {}).get("name")
    if not isinstance(name, str) or not name:
        raise SpecError("metadata.name", "is required")
    return body


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="mwms local", description="Run a TrainJob manifest as local workers."
    )
    parser.add_argument("manifest", type=Path, help="a TrainJob YAML file (what you would kubectl apply)")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: a sqlite store in --workdir)")
    parser.add_argument("--json", action="store_true", help="print a JSON summary as the last stdout line")
    parser.add_argument("--workdir", type=Path, default=Path(DEFAULT_WORKDIR), help="default: ./.mwms")
    args = parser.parse_args(argv)

    try:
        body = load_manifest(args.manifest)
        # Local workers run this checkout's trainer with --tracking-uri (or a sqlite store), whatever the
        # manifest's image and tracking URI say; the defaults only have to be valid.
        spec = parse(body, tracking_uri=LOCAL, image=LOCAL)
    except SpecError as e:
        print(f"mwms local: invalid TrainJob: {e}", file=sys.stderr)
        return names.EXIT_INVALID_CONFIG
    if spec.code is not None:
        print(
            "mwms local: spec.code names a ConfigMap or volume, which exists only in a cluster; run your "
            "script here as it is (MirroredStrategyRunner(num_slots=N).run(train) starts N local workers)",
            file=sys.stderr,
        )
        return names.EXIT_INVALID_CONFIG
    name = body["metadata"]["name"]
    namespace = body["metadata"].get("namespace") or "default"
    uid = str(uuid.uuid4())
    job_dir = (args.workdir / "jobs" / f"{name}-{uid[:8]}").resolve()
    progress = sys.stderr if args.json else sys.stdout
    tracking_uri = args.tracking_uri or prepare_sqlite_store(args.workdir, spec.experiment)
    envs = worker_envs(
        spec, job_name=name, namespace=namespace, uid=uid, tracking_uri=tracking_uri, job_dir=job_dir
    )
    print(
        f"mwms local: {name}: {spec.replicas} worker(s), MLflow {tracking_uri}, logs in {job_dir}",
        file=progress,
    )
    procs = start_workers(envs, job_dir)
    try:
        codes = wait_workers(procs, job_dir, show=progress)
    except KeyboardInterrupt:
        stop_workers(procs)
        return 130
    chief = codes[0]
    message = read_termination(job_dir, 0)
    summary = termination.summary(message)
    if summary is None:
        summary = {"error": message or f"the chief exited {chief}"}
    summary.update(
        {"replicas": spec.replicas, "exitCodes": codes, "trackingUri": tracking_uri, "logs": str(job_dir)}
    )
    if chief == 0:
        print(f"mwms local: {name} succeeded: {json.dumps(summary.get('metrics', {}))}", file=progress)
    else:
        print(f"mwms local: {name} failed (exit codes {codes}): {summary.get('error')}", file=progress)
    if args.json:
        print(json.dumps(summary), flush=True)
    return 128 - chief if chief < 0 else chief  # killed by a signal: the shell's (and the kubelet's) 128+N


if __name__ == "__main__":
    sys.exit(main())
