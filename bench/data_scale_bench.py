"""Data larger than memory: a ~3 GB synthetic parquet directory trained by 2 workers with `sharding: files`.

Writes a Spark-style directory of parquet part files under a temporary directory (deleted afterwards; the
free space is checked first), trains one epoch with 2 local `python -m mwms_trainer` workers and a large
global batch, and records each worker's peak RSS (VmHWM; the target is < 2 GiB), the training rows/s of the
epoch and the wall times into bench/results/data_scale.json.
--s3: the same table also from a local S3 server (the Versity S3 Gateway, mwms_kit/s3_server.py; `make
versitygw`) as `dataPath: s3://...`, measured right after local disk, both into
bench/results/data_scale_s3.json.
Usage: nice -n 10 .venv/bin/python bench/data_scale_bench.py [--gib 3] [--files 24] [--workers 2] [--s3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
from trainer_bench import run_group  # bench/, same folder

from mwms_operator.render.spec import parse_trainjob
from mwms_operator.settings import OperatorConfig
from mwms_trainer import local

RESULTS = Path(__file__).resolve().parent / "results" / "data_scale.json"
S3_RESULTS = RESULTS.with_name("data_scale_s3.json")
TESTS = Path(__file__).resolve().parents[1] / "tests"  # the tests' S3 server harness
FEATURES = 32
ROW_BYTES = FEATURES * 4 + 4  # float32 features; parquet stores the int8 label in 4 bytes


def write_table(directory: Path, gib: float, files: int, seed: int = 0) -> tuple[int, int]:
    """`files` parquet part files of about gib GiB in all; returns (rows, bytes on disk)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir()
    rows_per_file = int(gib * 2**30 / ROW_BYTES / files)
    weights = np.random.default_rng(seed).normal(size=FEATURES).astype(np.float32)
    for part in range(files):
        rng = np.random.default_rng([seed, part])
        x = rng.normal(size=(rows_per_file, FEATURES)).astype(np.float32)
        label = (x @ weights + rng.normal(scale=0.5, size=rows_per_file) > 0).astype(np.int8)
        columns = {f"f{j}": x[:, j] for j in range(FEATURES)} | {"label": label}
        del x
        path = directory / f"part-{part:05d}.parquet"
        pq.write_table(
            pa.table(columns), path, row_group_size=131072, compression="none", use_dictionary=False
        )
    (directory / "_SUCCESS").write_text("")
    size = sum(f.stat().st_size for f in directory.iterdir())
    return rows_per_file * files, size


def train(
    root: Path, data: Path | str, workers: int, batch: int, test_size: float, name: str = "data-scale"
) -> dict[str, object]:
    trainer = {
        "dataset": "parquet", "dataPath": str(data), "sharding": "files", "testSize": test_size,
        "epochs": 1, "globalBatchSize": batch, "learningRate": 0.01,
    }  # fmt: skip
    spec = parse_trainjob(
        {"metadata": {"name": name}, "spec": {"replicas": workers, "trainer": trainer}},
        OperatorConfig().spec_defaults(),
    )
    uri = local.prepare_sqlite_store(root, name)
    job_dir = root / name
    envs = local.worker_envs(
        spec, job_name=name, namespace="bench", uid=str(uuid.uuid4()), tracking_uri=uri, job_dir=job_dir
    )
    started = time.time()
    codes, peaks = run_group(envs, job_dir)
    wall = time.time() - started
    if any(codes):
        raise RuntimeError(f"workers failed: {codes}; logs in {job_dir}")
    chief_log = (job_dir / "worker-0.log").read_text()
    steps = int(re.search(r"(\d+) training rows on \d+ workers, (\d+) steps per epoch", chief_log).group(2))
    train_rows = int(re.search(r"(\d+) training rows on \d+ workers", chief_log).group(1))
    epoch_seconds = float(re.search(r"worker 0 epoch 1/1 .*seconds=([\d.]+)", chief_log).group(1))
    summary = json.loads((job_dir / "worker-0.termination").read_text())
    return {
        "workers": workers,
        "global_batch": batch,
        "training_rows": train_rows,
        "steps": steps,
        "rows_trained": steps * batch,
        "epoch_seconds": epoch_seconds,
        "rows_per_second": round(steps * batch / epoch_seconds, 1),
        "wall_seconds_start_to_exit": round(wall, 1),
        "peak_rss_mib_per_worker": [round(p, 1) for p in peaks],
        "held_out_accuracy": summary["metrics"]["val_accuracy"],
        "loss": summary["metrics"]["loss"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=3.0)
    parser.add_argument("--files", type=int, default=24)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=16384)
    parser.add_argument("--test-size", type=float, default=0.04)  # 1 of 24 files held out
    parser.add_argument("--s3", action="store_true", help="also from a local S3 server (data_scale_s3.json)")
    args = parser.parse_args()
    tmp_root = Path(tempfile.gettempdir())
    free = shutil.disk_usage(tmp_root).free / 2**30
    if free < args.gib * 1.2 + 5:
        raise SystemExit(f"{tmp_root} has {free:.1f} GiB free; this needs {args.gib * 1.2 + 5:.1f} GiB")
    load_at_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="mwms-data-scale-") as tmp:
        began = time.time()
        rows, size = write_table(Path(tmp) / "table.parquet", args.gib, args.files)
        written = time.time() - began
        gib_on_disk = round(size / 2**30, 2)
        print(f"wrote {rows} rows, {gib_on_disk} GiB in {args.files} files in {written:.0f} s", flush=True)
        result = train(Path(tmp), Path(tmp) / "table.parquet", args.workers, args.batch, args.test_size)
        if args.s3:
            from_s3 = train_from_s3(Path(tmp), args)
    document = {
        "what": "sharding files: a synthetic parquet directory (float32 features, int8 label, uncompressed), "
        "one epoch, local python -m mwms_trainer workers, sqlite MLflow",
        "settings": vars(args),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "loadavg_at_start": load_at_start,
        "loadavg_at_end": os.getloadavg(),
        "data": {"rows": rows, "features": FEATURES, "files": args.files, "gib_on_disk": gib_on_disk},
        "seconds_to_write_data": round(written, 1),
        "result": result,
    }
    target = RESULTS
    if args.s3:  # both sources, measured one after the other on the same data
        document["what"] = f"{document['what']}; result: from local disk, result_s3: from a local S3 server"
        document["result_s3"] = from_s3
        target = S3_RESULTS
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(document, indent=2) + "\n")
    print(json.dumps(document, indent=2))
    print(f"wrote {target}")


def train_from_s3(tmp: Path, args: argparse.Namespace) -> dict[str, object]:
    """Upload the table to a local S3 server and train from `s3://` with the workers' AWS variables."""
    import sys

    sys.path.insert(0, str(TESTS))
    from mwms_kit.s3_server import BUCKET, S3Server

    with S3Server(tmp / "s3") as s3:
        began = time.time()
        uri = s3.upload(tmp / "table.parquet", f"{BUCKET}/table.parquet")
        uploaded = round(time.time() - began, 1)
        print(f"uploaded to {uri} in {uploaded} s", flush=True)
        os.environ.update(s3.env)  # the workers' environment is this process's (local.worker_envs)
        result = train(tmp, uri + "/", args.workers, args.batch, args.test_size, name="data-scale-s3")
        return {**result, "seconds_to_upload": uploaded}


if __name__ == "__main__":
    main()
