"""The scale bench's plot (bench/scale/plot.py) draws one row per job size, so runs of 4 and of 16 workers a
job are never joined into one line. On results made by hand, no cluster."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

from mwms_kit import modules


def run(pods: int, replicas: int) -> dict[str, Any]:
    timings = {"p95": 10.0}
    return {
        "params": {"pods": pods, "replicas": replicas},
        "burst": {
            "to_all_bound": timings,
            "to_all_running": timings,
            "to_pods_created_operator": timings,
            "pods_created_to_bound_scheduler": timings,
            "footprint_all_running": {"rss_mib": 100.0},
            "operator_cpu_s": 5.0,
            "jobs": pods // replicas,
        },
        "api": {"operator_per_job": {"total": 20.0, "writes": 11.0}},
    }


def png_height(path: Path) -> int:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", header[16:24])[1]


def test_each_job_size_gets_its_own_row(tmp_path):
    plot = modules.load("mwms_scale_plot", "bench/scale/plot.py")
    one, two = tmp_path / "one.png", tmp_path / "two.png"
    assert plot.plot({"a": run(1000, 4), "b": run(5000, 4)}, one) is None
    assert plot.plot({"a": run(1000, 4), "b": run(1000, 16)}, two, peer={"c": run(1000, 16)}) is None
    assert png_height(two) == 2 * png_height(one)
