"""What a worker's system metrics read from its container's cgroup (v2 and v1) and network namespace, and
when sampling is on (mwms_trainer.system_metrics); their way into the real MLflow run is in
tests/tf/test_worker_logs.py, and inside real containers in tests/node/test_node_chain.py."""

from __future__ import annotations

from pathlib import Path

from mwms_contract import names
from mwms_trainer import system_metrics
from mwms_trainer.system_metrics import Cgroup, Sampler

JOB_ENV = {
    names.ENV_TRACKING_URI: "http://mlflow:5000",
    names.ENV_JOB_UID: "u",
    names.ENV_TF_CONFIG: '{"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}}',
    names.ENV_EXPERIMENT_NAME: "e",
}


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def v2(root: Path, usage_usec: int, current: int) -> Path:
    return write(
        root,
        {
            "cgroup.controllers": "cpu memory io",
            "cpu.stat": f"usage_usec {usage_usec}\nuser_usec 1\n",
            "cpu.max": "200000 100000",
            "memory.current": str(current),
            "memory.stat": "anon 5\ninactive_file 100000000\n",
            "memory.max": "1000000000",
            "memory.peak": "800000000",
            "io.stat": "8:0 rbytes=1000000 wbytes=3000000 rios=1\n8:16 rbytes=1000000 wbytes=0\n",
        },
    )


def test_cgroup_v2_counters(tmp_path):
    cgroup = Cgroup(v2(tmp_path, usage_usec=2_500_000, current=600_000_000))
    assert cgroup.cpu_seconds() == 2.5
    assert cgroup.memory_bytes() == 500_000_000  # the working set: less the inactive file cache
    assert cgroup.memory_limit_bytes() == 1_000_000_000
    assert cgroup.memory_peak_bytes() == 800_000_000
    assert cgroup.disk_bytes() == (2_000_000, 3_000_000)


def test_cgroup_v1_counters(tmp_path):
    cgroup = Cgroup(
        write(
            tmp_path,
            {
                "cpu,cpuacct/cpuacct.usage": "3000000000",
                "memory/memory.usage_in_bytes": "400000000",
                "memory/memory.stat": "cache 9\ntotal_inactive_file 100000000\n",
                "memory/memory.limit_in_bytes": str(2**63 - 4096),  # v1's "no limit"
                "memory/memory.max_usage_in_bytes": "900000000",
                "blkio/blkio.throttle.io_service_bytes": "8:0 Read 7000000\n8:0 Write 1000000\nTotal 1\n",
            },
        )
    )
    assert cgroup.cpu_seconds() == 3.0
    assert cgroup.memory_bytes() == 300_000_000
    assert cgroup.memory_limit_bytes() is None
    assert cgroup.memory_peak_bytes() == 900_000_000
    assert cgroup.disk_bytes() == (7_000_000, 1_000_000)


def test_a_missing_cgroup_reads_nothing(tmp_path):
    cgroup = Cgroup(tmp_path)
    assert (cgroup.cpu_seconds(), cgroup.memory_bytes(), cgroup.disk_bytes()) == (None, None, None)


def test_network_counts_every_interface_but_loopback(tmp_path):
    dev = tmp_path / "dev"
    dev.write_text(
        "Inter-|   Receive      |  Transmit\n"
        " face |bytes packets errs drop fifo frame compressed multicast|bytes packets\n"
        "    lo: 900 1 0 0 0 0 0 0 900 1 0 0 0 0 0 0\n"
        "  eth0: 1000 2 0 0 0 0 0 0 3000 4 0 0 0 0 0 0\n"
        "  eth1: 500 2 0 0 0 0 0 0 100 4 0 0 0 0 0 0\n"
    )
    assert system_metrics.network_bytes(dev) == (1500, 3100)


def test_a_sample_is_the_workers_use_since_the_last_one(tmp_path):
    root = v2(tmp_path, usage_usec=1_000_000, current=300_000_000)
    now = [100.0]
    sampler = Sampler(Cgroup(root), clock=lambda: now[0])
    v2(root, usage_usec=4_000_000, current=600_000_000)  # 3 CPU-seconds in the next 2 s
    write(root, {"io.stat": "8:0 rbytes=3000000 wbytes=3500000\n8:16 rbytes=1000000 wbytes=0\n"})
    now[0] = 102.0
    sample = sampler.sample()
    assert sample["cpu_usage_cores"] == 1.5
    assert sample["cpu_utilization_percentage"] == 75.0  # of the container's 2-CPU limit
    assert sample["system_memory_usage_megabytes"] == 500.0
    assert sample["system_memory_usage_percentage"] == 50.0
    assert sample["system_memory_peak_megabytes"] == 800.0
    assert (sample["disk_read_megabytes"], sample["disk_write_megabytes"]) == (2.0, 0.5)


def test_sampling_is_on_for_a_jobs_worker_at_the_specs_period():
    assert system_metrics.period_of({**JOB_ENV, names.ENV_SYSTEM_METRICS_SECONDS: "15"}) == 15
    assert system_metrics.period_of({**JOB_ENV, names.ENV_SYSTEM_METRICS_SECONDS: "0"}) == 0  # turned off
    assert system_metrics.period_of(JOB_ENV) == 0  # not asked for
    outside_a_job = {k: v for k, v in JOB_ENV.items() if k != names.ENV_JOB_UID}
    assert system_metrics.period_of({**outside_a_job, names.ENV_SYSTEM_METRICS_SECONDS: "15"}) == 0
    assert system_metrics.reporter({**JOB_ENV, names.ENV_SYSTEM_METRICS_SECONDS: "0"}) is None


def test_each_worker_logs_under_its_own_node_id():
    reporter = system_metrics.Reporter({**JOB_ENV, names.ENV_SYSTEM_METRICS_SECONDS: "5"}, 5.0)
    assert reporter.node_id == "worker-1"
