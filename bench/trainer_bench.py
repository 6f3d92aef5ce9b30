"""Trainer cost on this machine, for 1, 2 and 4 local workers (real `python -m mwms_trainer` processes).

For each model and group size: seconds from process start to the end of the chief's first optimizer step
(imports, data, MLflow run, rendezvous, strategy, model, first tf.function trace) and to the end of its first
epoch, steady samples/s of the whole group on the synthetic set (epochs after the first), and peak RSS (VmHWM)
of each worker; per model, N-worker samples/s over 1-worker samples/s at the same global batch. Startup is
set against a bare `import tensorflow` in the same run: one process alone, and N at once (the same share of
the cores as N workers), each from process start; the load average is kept beside every figure.
Results go under `--label` in bench/results/trainer.json (other labels are kept), so a `before` run of older
code (`--code DIR`: a checkout whose trainer/ and operator/ the workers import instead) and an `after` run
sit side by side.
Usage: nice -n 10 .venv/bin/python bench/trainer_bench.py [--label after] [--models bench 1m] [--workers 1 2]
       [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from mwms_operator.render.spec import parse_trainjob
from mwms_operator.settings import OperatorConfig
from mwms_trainer import local

RESULTS = Path(__file__).resolve().parent / "results" / "trainer.json"
MODELS = {"bench": [64, 32], "1m": [1024, 1024]}  # hidden units; "1m": 1.07M weights with 20 features


def peak_rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def run_group(envs: list[dict[str, str]], job_dir: Path) -> tuple[list[int], list[float]]:
    """Start the workers, wait for them all; (exit codes, peak RSS MiB of each, sampled every 0.2 s)."""
    procs = local.start_workers(envs, job_dir)
    codes: list[int] = []
    waiter = threading.Thread(target=lambda: codes.extend(local.wait_workers(procs, job_dir)))
    waiter.start()
    peaks = [0.0] * len(procs)
    while waiter.is_alive():
        for i, p in enumerate(procs):
            rss = peak_rss_mib(p.pid)
            if rss is not None:
                peaks[i] = max(peaks[i], rss)
        time.sleep(0.2)
    waiter.join()
    return codes, peaks


def bare_imports(processes: int) -> dict[str, object]:
    """Seconds from process start to a finished bare `import tensorflow`, for `processes` started at once:
    the slowest (a group starts when its last worker is ready)."""
    load = os.getloadavg()[0]
    started = time.monotonic()
    procs = [
        subprocess.Popen([sys.executable, "-c", "import tensorflow"], stderr=subprocess.DEVNULL)
        for _ in range(processes)
    ]
    ended = []
    for p in procs:
        if p.wait() != 0:
            raise RuntimeError(f"a bare import tensorflow exited {p.returncode}")
        ended.append(time.monotonic())
    return {"processes": processes, "seconds": round(max(ended) - started, 2), "loadavg_1m_before": load}


def measure(
    workers: int, hidden: list[int], epochs: int, samples: int, batch: int, root: Path, code: Path | None
) -> dict[str, object]:
    trainer = {
        "dataset": "synthetic", "syntheticSamples": samples, "syntheticFeatures": 20,
        "epochs": epochs, "globalBatchSize": batch, "hiddenUnits": hidden,
    }  # fmt: skip
    name = f"bench-{workers}-{'-'.join(map(str, hidden))}"
    spec = parse_trainjob(
        {"metadata": {"name": name}, "spec": {"replicas": workers, "trainer": trainer}},
        OperatorConfig().spec_defaults(),
    )
    uri = local.prepare_sqlite_store(root, name)
    job_dir = root / name
    envs = local.worker_envs(
        spec, job_name=name, namespace="bench", uid=str(uuid.uuid4()), tracking_uri=uri, job_dir=job_dir
    )
    if code is not None:
        for env in envs:
            env["PYTHONPATH"] = f"{code / 'trainer'}:{code / 'operator'}"
    load = os.getloadavg()[0]
    started = time.time()
    codes, peaks = run_group(envs, job_dir)
    if any(codes):
        raise RuntimeError(f"{workers} workers failed: {codes}; logs in {job_dir}")
    chief_log = (job_dir / "worker-0.log").read_text()
    first_step = re.search(r"first step done at unix time ([\d.]+)(?:, after (\d+) step)?", chief_log)
    if first_step is None:
        raise RuntimeError(f"no first-step line in the chief's log {job_dir / 'worker-0.log'}")
    # Older code logs no epoch line: its "first step" line came at the end of the first epoch.
    first_epoch = re.search(r"first epoch done at unix time ([\d.]+)", chief_log) or first_step
    epoch_seconds = [float(s) for s in re.findall(r"worker 0 epoch \d+/\d+ .*seconds=([\d.]+)", chief_log)]
    train_rows = int(samples * 0.7)  # testSize 0.3
    rows_per_epoch = train_rows // batch * batch
    steady = statistics.median(epoch_seconds[1:]) if len(epoch_seconds) > 1 else epoch_seconds[0]
    return {
        "workers": workers,
        "hiddenUnits": hidden,
        "seconds_to_first_step": round(float(first_step.group(1)) - started, 2),
        "steps_in_first_step": int(first_step.group(2) or 0) or None,  # None: older code, a whole epoch
        "seconds_to_first_epoch": round(float(first_epoch.group(1)) - started, 2),
        "loadavg_1m_before": load,
        "steady_samples_per_second": round(rows_per_epoch / steady, 1),
        "steady_step_ms": round(1000 * steady / (rows_per_epoch // batch), 2),
        "epoch_seconds": epoch_seconds,
        "peak_rss_mib_per_worker": [round(p, 1) for p in peaks],
    }


def ratios(results: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per model: N-worker samples/s over 1-worker samples/s (1.0 would be free distribution)."""
    out: dict[str, dict[str, float]] = {}
    for name, hidden in MODELS.items():
        rates = {r["workers"]: r["steady_samples_per_second"] for r in results if r["hiddenUnits"] == hidden}
        if 1 in rates:
            out[name] = {f"{n}w/1w": round(rate / rates[1], 3) for n, rate in rates.items() if n != 1}
    return out


def startup(results: list[dict[str, Any]], imports: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per model and group size, medians over the repeats: seconds to the first step and to the end of the
    first epoch, and the first step over one bare import and over N bare imports at once (target P3)."""

    def median_import(n: int) -> float:
        return round(statistics.median(i["seconds"] for i in imports if i["processes"] == n), 2)

    out: dict[str, dict[str, float]] = {}
    for name, hidden in MODELS.items():
        for n in sorted({r["workers"] for r in results if r["hiddenUnits"] == hidden}):
            runs = [r for r in results if r["hiddenUnits"] == hidden and r["workers"] == n]
            first_step = round(statistics.median(r["seconds_to_first_step"] for r in runs), 2)
            out[f"{name} {n}w"] = {
                "first_step_s": first_step,
                "first_epoch_s": round(statistics.median(r["seconds_to_first_epoch"] for r in runs), 2),
                "bare_import_s": median_import(1),
                "bare_imports_at_once_s": median_import(n),
                "first_step_over_bare_import": round(first_step / median_import(1), 2),
                "first_step_over_bare_imports_at_once": round(first_step / median_import(n), 2),
            }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", default="after")
    parser.add_argument("--code", type=Path, help="a checkout whose trainer/operator code the workers run")
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=sorted(MODELS))
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--samples", type=int, default=50000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=1, help="rounds of every measurement, interleaved")
    args = parser.parse_args()
    load_at_start = os.getloadavg()
    results = []
    imports: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="mwms-trainer-bench-") as tmp:
        for _ in range(args.repeats):
            for n in sorted({1, *args.workers}):
                imports.append(bare_imports(n))
                print(json.dumps({"bare_import": imports[-1]}), flush=True)
            for model in args.models:
                for n in args.workers:
                    hidden = MODELS[model]
                    result = measure(n, hidden, args.epochs, args.samples, args.batch, Path(tmp), args.code)
                    print(json.dumps(result), flush=True)
                    results.append(result)
    previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    runs = previous.get("runs", {})
    runs[args.label] = {
        "settings": {**vars(args), "code": str(args.code) if args.code else "this checkout"},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "loadavg_at_start": load_at_start,
        "loadavg_at_end": os.getloadavg(),
        "ratios": ratios(results),
        "startup": startup(results, imports),
        "bare_imports": imports,
        "results": results,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "what": "python -m mwms_trainer on one machine: synthetic set (20 features), sqlite MLflow",
        "models": {name: {"hiddenUnits": hidden} for name, hidden in MODELS.items()},
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "note": "every worker runs on this one machine; the load averages show what else shared it",
        "runs": runs,
    }
    RESULTS.write_text(json.dumps(document, indent=2) + "\n")
    print(json.dumps(runs[args.label]["ratios"]))
    print(json.dumps(runs[args.label]["startup"], indent=1))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
