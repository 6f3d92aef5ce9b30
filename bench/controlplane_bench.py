"""Cold build and warm start of the local control plane, written to bench/results/controlplane.json.

    .venv/bin/python bench/controlplane_bench.py [--subnet-index N] [--runs 3]

Cold build: the newest entries of build-times.jsonl (appended by hack/build/build-control-plane.sh next to the
bin dir) that together built all four binaries. Warm start: LocalCluster.start() with the binaries cached,
to the API server's /readyz (the issue's target: <= 15 s) and to the controllers' /healthz; then stop().
Needs root. Other work on the machine slows it down: the load average is recorded with the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from mwms_dev.cluster import BINARIES, LocalCluster, find_bin_dir

RESULTS = Path(__file__).resolve().parent / "results" / "controlplane.json"
TARGET_API_READY_SECONDS = 15.0


def cold_build(bin_dir: Path) -> dict:
    log = bin_dir.parent / "build-times.jsonl"
    if not log.is_file():
        note = f"no {log}: binaries were not built by hack/build/build-control-plane.sh"
        return {"seconds": None, "note": note}
    entries = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    covered: set[str] = set()
    used = []
    for entry in reversed(entries):
        used.append(entry)
        covered |= set(entry["built"].split())
        if covered >= set(BINARIES):
            break
    return {
        "seconds": sum(e["seconds"] for e in used),
        "complete": covered >= set(BINARIES),
        "entries": list(reversed(used)),
    }


def warm_starts(bin_dir: Path, subnet_index: int, runs: int) -> dict:
    api_ready, ready, stop = [], [], []
    for run in range(runs):
        with tempfile.TemporaryDirectory(prefix="mwms-bench-") as state_dir:
            cluster = LocalCluster(
                name="bench", state_dir=state_dir, bin_dir=bin_dir, subnet_index=subnet_index
            )
            try:
                cluster.start()
            finally:
                began = time.monotonic()
                cluster.stop()
                stop.append(time.monotonic() - began)
            api_ready.append(cluster.timings["api_ready"])
            ready.append(cluster.timings["ready"])
            print(
                f"run {run + 1}: API ready {api_ready[-1]:.2f}s, controllers ready {ready[-1]:.2f}s, "
                f"stop {stop[-1]:.2f}s",
                file=sys.stderr,
            )

    def summary(values: list[float]) -> dict:
        return {"median": round(statistics.median(values), 2), "runs": [round(v, 2) for v in values]}

    return {
        "api_ready_seconds": summary(api_ready),
        "controllers_ready_seconds": summary(ready),
        "stop_seconds": summary(stop),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subnet-index", type=int, default=0, help="pod bridge of the bench cluster")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    bin_dir = find_bin_dir()
    load_before = os.getloadavg()
    warm = warm_starts(bin_dir, args.subnet_index, args.runs)
    result = {
        "cold_build": cold_build(bin_dir),
        "warm_start": warm,
        "target_api_ready_seconds": TARGET_API_READY_SECONDS,
        "within_target": warm["api_ready_seconds"]["median"] <= TARGET_API_READY_SECONDS,
        "machine": {
            "cpus": os.cpu_count(),
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
        },
        "bin_dir": str(bin_dir),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
