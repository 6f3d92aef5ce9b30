"""The trainer, as real `python -m mwms_trainer` processes on this machine (no cluster; sqlite MLflow).
`trainer`: per model and group size: process start -> the chief's first step (also over bare
`import tensorflow`s started as many at once), steady samples/s of the group, each worker's peak RSS,
N-worker over 1-worker samples/s; --code runs another checkout's trainer/. `trainer-sigterm`: SIGTERM ->
exit of a worker that is PID 1 of its PID namespace, by phase. `data-scale`: a parquet directory larger than
memory, one epoch of 2 workers with `sharding: files` (--s3: also from a local S3 server). `checkpoint`: what
a checkpoint store costs: each save within an epoch, SIGTERM to the group's exit, a resumed group's first
step."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from mwms_bench.measure import peak_rss_mib, since
from mwms_bench.scenarios import Figures, Scenario
from mwms_kit import pid_namespace
from mwms_operator.render.spec import parse_trainjob
from mwms_operator.settings import OperatorConfig
from mwms_trainer import local

MODELS = {"bench": [64, 32], "1m": [1024, 1024]}  # hidden units; "1m": 1.07M weights with 20 features


def local_job(root: Path, name: str, replicas: int, trainer: dict, **spec: Any) -> tuple[list[dict], Path]:
    """The workers' environments of a TrainJob run locally, and its folder (logs, termination files)."""
    body = {"metadata": {"name": name}, "spec": {"replicas": replicas, "trainer": trainer, **spec}}
    job_dir, uri = root / f"{name}-{uuid.uuid4().hex[:6]}", local.prepare_sqlite_store(root, name)
    settings = {"job_name": name, "namespace": "bench", "uid": str(uuid.uuid4()), "job_dir": job_dir}
    return local.worker_envs(
        parse_trainjob(body, OperatorConfig().spec_defaults()), tracking_uri=uri, **settings
    ), job_dir


def run_group(envs: list[dict], job_dir: Path) -> list[float]:
    """Start the workers and wait for them all; each one's peak RSS in MiB (sampled every 0.2 s)."""
    procs = local.start_workers(envs, job_dir)
    codes: list[int] = []
    waiter = threading.Thread(target=lambda: codes.extend(local.wait_workers(procs, job_dir)))
    waiter.start()
    peaks = [0.0] * len(procs)
    while waiter.is_alive():
        peaks = [max(peak, peak_rss_mib(p.pid) or 0.0) for peak, p in zip(peaks, procs, strict=True)]
        time.sleep(0.2)
    if any(codes):
        raise RuntimeError(f"workers exited {codes}: logs in {job_dir}")
    return [round(peak, 1) for peak in peaks]


def chief_log(job_dir: Path, pattern: str) -> list[str]:
    return re.findall(pattern, (job_dir / "worker-0.log").read_text())


def bare_imports(processes: int) -> float:
    """Seconds from start to the last of `processes` bare `import tensorflow` started at once."""
    started = time.monotonic()
    argv = [sys.executable, "-c", "import tensorflow"]
    if any(p.wait() for p in [subprocess.Popen(argv) for _ in range(processes)]):
        raise RuntimeError("a bare import tensorflow failed")
    return since(started)


def one_group(root: Path, a: argparse.Namespace, model: str, workers: int) -> dict[str, Any]:
    trainer = {"dataset": "synthetic", "syntheticSamples": a.samples, "syntheticFeatures": 20}
    trainer |= {"epochs": a.epochs, "globalBatchSize": a.batch, "hiddenUnits": MODELS[model]}
    envs, job_dir = local_job(root, f"bench-{model}-{workers}", workers, trainer)
    for env in envs if a.code else []:
        env["PYTHONPATH"] = f"{a.code / 'trainer'}:{a.code / 'operator'}"
    started = time.time()
    peaks = run_group(envs, job_dir)
    (first_step,) = chief_log(job_dir, r"first step done at unix time ([\d.]+)")
    epochs = [float(s) for s in chief_log(job_dir, r"worker 0 epoch \d+/\d+ .*seconds=([\d.]+)")]
    rows = int(a.samples * 0.7) // a.batch * a.batch  # testSize 0.3
    out = {"model": model, "workers": workers, "seconds_to_first_step": round(float(first_step) - started, 2)}
    out |= {"steady_samples_per_second": round(rows / statistics.median(epochs[1:] or epochs), 1)}
    return out | {"epoch_seconds": epochs, "peak_rss_mib_per_worker": peaks, "loadavg_1m": os.getloadavg()[0]}


def trainer(a: argparse.Namespace, figures: Figures) -> None:
    imports: dict[int, list[float]] = {n: [] for n in sorted({1, *a.workers})}
    results: list[dict[str, Any]] = figures.setdefault("results", [])
    with tempfile.TemporaryDirectory(prefix="mwms-bench-") as tmp:
        for _ in range(a.repeats):
            for n in imports:
                imports[n].append(bare_imports(n))
            results += [one_group(Path(tmp), a, model, n) for model in a.models for n in a.workers]
    bare = figures["bare_imports_s"] = {str(n): round(statistics.median(v), 2) for n, v in imports.items()}
    figures["ratios"], figures["startup"] = {}, {}
    for model in a.models:
        runs = {n: [r for r in results if r["model"] == model and r["workers"] == n] for n in a.workers}
        rate = {n: statistics.median(r["steady_samples_per_second"] for r in rs) for n, rs in runs.items()}
        ratios = {f"{n}w/1w": round(rate[n] / rate[1], 3) for n in rate if n > 1 and 1 in rate}
        figures["ratios"][model] = ratios
        for n, rs in runs.items():
            step = round(statistics.median(r["seconds_to_first_step"] for r in rs), 2)
            startup = {"first_step_s": step, "first_step_over_bare_import": round(step / bare["1"], 2)}
            startup["first_step_over_bare_imports_at_once"] = round(step / bare[str(n)], 2)
            figures["startup"][f"{model} {n}w"] = startup


# phase -> (workers, trainer settings, the log line after which the worker is in that phase)
PHASES = {
    "waiting_for_peer": (2, {"epochs": 1}, "waiting for 1 peer(s)"),
    "in_strategy_constructor": (2, {"epochs": 1}, "registering with MultiWorkerMirroredStrategy()"),
    "mid_fit": (1, {"dataset": "synthetic", "syntheticSamples": 50000, "epochs": 200}, "epoch 2/200"),
}


def one_sigterm(root: Path, phase: str) -> dict[str, Any]:
    """Worker 0 alone, as PID 1 of its own PID namespace (as in a container); in the strategy constructor
    its peer is a socket that accepts but never registers."""
    replicas, settings, ready = PHASES[phase]
    name, policy = f"sigterm-{phase.replace('_', '-')}", {"startupTimeoutSeconds": 600}
    envs, job_dir = local_job(root, name, replicas, settings, runPolicy=policy)
    job_dir.mkdir(parents=True)
    log_path, fake_peer = job_dir / "worker-0.log", socket.socket()
    if phase == "in_strategy_constructor":
        peer = json.loads(envs[0]["TF_CONFIG"])["cluster"]["worker"][1]
        fake_peer.bind(("127.0.0.1", int(peer.rsplit(":", 1)[1])))
        fake_peer.listen(8)
    with log_path.open("ab") as log:
        proc = pid_namespace.start_as_pid1([sys.executable, "-m", "mwms_trainer"], envs[0], log)
    try:
        while ready not in log_path.read_text(errors="replace"):
            if proc.poll() is not None:
                raise RuntimeError(f"{phase}: exited {proc.returncode}; see {log_path}")
            time.sleep(0.05)
        time.sleep(1)
        sent = time.monotonic()
        os.kill(pid_namespace.pid1_of(proc), signal.SIGTERM)
        code, seconds = proc.wait(timeout=60), since(sent, 3)
    finally:
        proc.kill()
        proc.wait()
        fake_peer.close()
    escalated = "sent SIGKILL" in log_path.read_text(errors="replace")
    return {"phase": phase, "exit_code": code, "seconds": seconds, "escalated_to_sigkill": escalated}


def sigterm(a: argparse.Namespace, figures: Figures) -> None:
    with tempfile.TemporaryDirectory(prefix="mwms-bench-") as tmp:
        figures["results"] = [one_sigterm(Path(tmp), phase) for _ in range(a.repeat) for phase in PHASES]
    seconds = {phase: [r["seconds"] for r in figures["results"] if r["phase"] == phase] for phase in PHASES}
    figures["max_seconds_by_phase"] = {phase: max(values) for phase, values in seconds.items()}


def write_table(directory: Path, gib: float, files: int, features: int = 32) -> int:
    """`files` uncompressed parquet part files of about `gib` GiB in all (float32 features, int8 label)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir()
    rows = int(gib * 2**30 / (features * 4 + 4) / files)
    weights = np.random.default_rng(0).normal(size=features).astype(np.float32)
    for part in range(files):
        rng = np.random.default_rng([0, part])
        x = rng.normal(size=(rows, features)).astype(np.float32)
        label = (x @ weights + rng.normal(scale=0.5, size=rows) > 0).astype(np.int8)
        table = pa.table({f"f{j}": x[:, j] for j in range(features)} | {"label": label})
        path = directory / f"part-{part:05d}.parquet"
        pq.write_table(table, path, row_group_size=131072, compression="none", use_dictionary=False)
    (directory / "_SUCCESS").write_text("")
    return rows * files


def train(root: Path, data: str, a: argparse.Namespace, name: str) -> dict[str, Any]:
    trainer = {"dataset": "parquet", "dataPath": data, "sharding": "files", "testSize": a.test_size}
    trainer |= {"epochs": 1, "globalBatchSize": a.batch, "learningRate": 0.01}
    envs, job_dir = local_job(root, name, a.workers, trainer)
    started = time.monotonic()
    peaks = run_group(envs, job_dir)
    ((rows, steps),) = chief_log(job_dir, r"(\d+) training rows on \d+ workers, (\d+) steps per epoch")
    (epoch,) = chief_log(job_dir, r"worker 0 epoch 1/1 .*seconds=([\d.]+)")
    metrics = json.loads((job_dir / "worker-0.termination").read_text())["metrics"]
    out = {"training_rows": int(rows), "steps": int(steps), "rows_trained": int(steps) * a.batch}
    out |= {"epoch_seconds": float(epoch), "rows_per_second": round(int(steps) * a.batch / float(epoch), 1)}
    out |= {"wall_seconds_start_to_exit": since(started, 1), "peak_rss_mib_per_worker": peaks}
    return out | {"held_out_accuracy": metrics["val_accuracy"], "loss": metrics["loss"]}


def data_scale(a: argparse.Namespace, figures: Figures) -> None:
    free, need = shutil.disk_usage(tempfile.gettempdir()).free / 2**30, a.gib * 1.2 + 5
    if free < need:
        raise RuntimeError(f"{tempfile.gettempdir()} has {free:.1f} GiB free; this needs {need:.1f}")
    with tempfile.TemporaryDirectory(prefix="mwms-bench-") as tmp:
        table, started = Path(tmp) / "table.parquet", time.monotonic()
        rows = write_table(table, a.gib, a.files)
        gib = round(sum(f.stat().st_size for f in table.iterdir()) / 2**30, 2)
        figures["data"] = {"rows": rows, "files": a.files, "gib_on_disk": gib}
        figures["seconds_to_write_data"] = since(started, 1)
        figures["result"] = train(Path(tmp), str(table), a, "data-scale")
        if a.s3:
            from mwms_kit.s3_server import BUCKET, S3Server

            with S3Server(Path(tmp) / "s3") as s3:
                started = time.monotonic()
                uri = s3.upload(table, f"{BUCKET}/table.parquet")
                uploaded = since(started, 1)
                os.environ.update(s3.env)  # the workers' environment is this process's
                from_s3 = train(Path(tmp), uri + "/", a, "data-scale-s3")
                figures["result_s3"] = from_s3 | {"seconds_to_upload": uploaded}


SAVE = re.compile(
    r"checkpoint saved at epoch (\d+) step \d+ in ([\d.]+) s \(save ([\d.]+) s, publish ([\d.]+) s\)"
)
FIRST_STEP = r"first step done at unix time ([\d.]+)"


def stored_group(
    envs: list[dict], job_dir: Path, stop_in_epoch: int | None
) -> tuple[float, float, list[int]]:
    """Start a group; with `stop_in_epoch`, SIGTERM it once the chief has saved within that epoch. (Seconds
    from start to the chief's first step, from SIGTERM to the last exit or 0, the exit codes.)"""
    started, procs = time.time(), local.start_workers(envs, job_dir)
    codes: list[int] = []
    waiter = threading.Thread(target=lambda: codes.extend(local.wait_workers(procs, job_dir)))
    waiter.start()
    log, stopped = job_dir / "worker-0.log", 0.0
    while stop_in_epoch is not None and waiter.is_alive():
        text = log.read_text(errors="replace") if log.exists() else ""
        if any(int(e) == stop_in_epoch for e, *_ in SAVE.findall(text)):
            sent = time.monotonic()
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
            waiter.join()
            stopped = since(sent, 3)
        time.sleep(0.05)
    waiter.join()
    return float(chief_log(job_dir, FIRST_STEP)[-1]) - started, stopped, codes


def one_store(root: Path, a: argparse.Namespace, store: str) -> dict[str, Any]:
    """2 workers saving every `every_steps` into `store`, SIGTERMed within epoch 2, then resumed."""
    trainer = {
        "dataset": "synthetic",
        "syntheticSamples": a.samples,
        "epochs": 3,
        "hiddenUnits": MODELS[a.model],
    }
    body = {"metadata": {"name": "checkpoint"}, "spec": {"replicas": 2, "trainer": trainer}}
    body["spec"]["checkpoint"] = {"store": store, "everySteps": a.every_steps}
    spec = parse_trainjob(body, OperatorConfig().spec_defaults())
    job_dir = root / f"checkpoint-{uuid.uuid4().hex[:6]}"
    settings = {"job_name": "checkpoint", "namespace": "bench", "uid": str(uuid.uuid4()), "job_dir": job_dir}
    settings["tracking_uri"] = local.prepare_sqlite_store(root, "checkpoint")
    fresh, stop, codes = stored_group(local.worker_envs(spec, **settings), job_dir, stop_in_epoch=2)
    if codes != [75, 75]:
        raise RuntimeError(f"the stopped group exited {codes}: logs in {job_dir}")
    saves = [tuple(map(float, found[1:])) for found in SAVE.findall((job_dir / "worker-0.log").read_text())]
    for index in range(2):  # new pods: nothing on their disks
        shutil.rmtree(job_dir / f"worker-{index}-checkpoint", ignore_errors=True)
    resumed, _, codes = stored_group(local.worker_envs(spec, restart_count=1, **settings), job_dir, None)
    if codes != [0, 0]:
        raise RuntimeError(f"the resumed group exited {codes}: logs in {job_dir}")
    (taken,) = chief_log(job_dir, r"worker 0 resumes at .*, the chief's state taken in ([\d.]+) s")
    periodic = saves[:-1]  # the last one is the save on SIGTERM
    return {
        "store": store.split(":")[0],
        "saves": len(periodic),
        "save_seconds": {
            "median": statistics.median(s[0] for s in periodic),
            "max": max(s[0] for s in periodic),
        },
        "publish_seconds_median": statistics.median(s[2] for s in periodic),
        "sigterm_to_exit_seconds": stop,
        "first_step_seconds": {"fresh": round(fresh, 2), "resumed": round(resumed, 2)},
        "state_taken_seconds": float(taken),
    }


def checkpoint(a: argparse.Namespace, figures: Figures) -> None:
    with tempfile.TemporaryDirectory(prefix="mwms-bench-") as tmp:
        figures["run"] = one_store(Path(tmp), a, "run")
        if a.s3:
            from mwms_kit.s3_server import BUCKET, S3Server

            with S3Server(Path(tmp) / "s3") as s3:
                os.environ.update(s3.env)  # the workers' environment is this process's
                figures["s3"] = one_store(Path(tmp), a, f"s3://{BUCKET}/checkpoints")


TRAINER = {"models": sorted(MODELS), "workers": [1, 2, 4], "epochs": 4, "samples": 20000, "batch": 256}
TRAINER |= {"repeats": (1, "rounds of every measurement"), "code": (Path, "a checkout: its trainer/")}
DATA = {"gib": 3.0, "files": 24, "workers": 2, "batch": 16384, "test_size": (0.04, "1 of 24 files held out")}
DATA["s3"] = (False, "also from a local S3 server (`make versitygw`)")
CHECKPOINT = {"model": "bench", "samples": 20000, "every_steps": 20, "s3": DATA["s3"]}
SCENARIOS = [
    Scenario("trainer", "local workers: first step, samples/s, RSS", trainer, TRAINER),
    Scenario("trainer-sigterm", "SIGTERM to exit of a worker as PID 1", sigterm, {"repeat": 1}),
    Scenario("data-scale", "a parquet table larger than memory", data_scale, DATA),
    Scenario("checkpoint", "a checkpoint store's save, stop and resume", checkpoint, CHECKPOINT),
]
