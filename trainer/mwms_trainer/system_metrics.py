"""Each worker's CPU, memory, network, disk (and GPU through NVML, where present) in the job's one MLflow run,
under the worker's own node id (system/worker-K/...), as MLflow names system metrics. Sampled by the
supervising parent (pid1.py) from the container's cgroup, so the numbers are the worker's, not the node's;
never opens a run of its own and never changes how the worker ends.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from mwms_contract import names
from mwms_trainer import cpus, worker_log
from mwms_trainer.cluster_spec import from_tf_config

CGROUP_ROOT = Path("/sys/fs/cgroup")
MEGABYTE = 1e6
FINAL_SAMPLE_SECONDS = 5.0


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _keyed(text: str | None) -> dict[str, int]:
    """'key value' lines (cpu.stat, memory.stat) as a dict."""
    pairs = (line.split() for line in (text or "").splitlines())
    return {p[0]: int(p[1]) for p in pairs if len(p) == 2 and p[1].isdigit()}


class Cgroup:
    """The container's own counters, cgroup v2 first, else v1's controllers (cpuacct, memory, blkio)."""

    def __init__(self, root: Path = CGROUP_ROOT) -> None:
        self.root = root
        self.v2 = (root / "cgroup.controllers").exists()

    def _v1(self, controller: str, name: str) -> str | None:
        for folder in (controller, "cpu,cpuacct" if controller == "cpuacct" else controller):
            text = _read(self.root / folder / name)
            if text is not None:
                return text
        return None

    def cpu_seconds(self) -> float | None:
        if self.v2:
            usec = _keyed(_read(self.root / "cpu.stat")).get("usage_usec")
            return None if usec is None else usec / 1e6
        nsec = self._v1("cpuacct", "cpuacct.usage")
        return None if nsec is None or not nsec.isdigit() else int(nsec) / 1e9

    def memory_bytes(self) -> int | None:
        """The working set (usage less inactive file cache): what the kubelet and the OOM killer count."""
        if self.v2:
            usage, stat = _read(self.root / "memory.current"), _keyed(_read(self.root / "memory.stat"))
            inactive = stat.get("inactive_file", 0)
        else:
            usage = self._v1("memory", "memory.usage_in_bytes")
            stat = _keyed(self._v1("memory", "memory.stat"))
            inactive = stat.get("total_inactive_file", 0)
        return None if usage is None or not usage.isdigit() else max(int(usage) - inactive, 0)

    def memory_peak_bytes(self) -> int | None:
        """The kernel's high-water mark of the container's memory (page cache included): a spike between two
        samples, or the one that got it OOM-killed, still shows."""
        v1 = "memory.max_usage_in_bytes"
        text = _read(self.root / "memory.peak") if self.v2 else self._v1("memory", v1)
        return int(text) if text and text.isdigit() else None

    def memory_limit_bytes(self) -> int | None:
        text = _read(self.root / "memory.max") if self.v2 else self._v1("memory", "memory.limit_in_bytes")
        # v1 writes "no limit" as a number near 2**63.
        return int(text) if text and text.isdigit() and int(text) < 2**60 else None

    def disk_bytes(self) -> tuple[int, int] | None:
        """Bytes read and written by the container's processes (block I/O), since it started."""
        read = written = 0
        if self.v2:
            text = _read(self.root / "io.stat")
            if text is None:
                return None
            for line in text.splitlines():
                fields = dict(f.split("=", 1) for f in line.split()[1:] if "=" in f)
                read += int(fields.get("rbytes", 0))
                written += int(fields.get("wbytes", 0))
            return read, written
        text = self._v1("blkio", "blkio.throttle.io_service_bytes")
        if text is None:
            return None
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[2].isdigit():
                read += int(parts[2]) if parts[1] == "Read" else 0
                written += int(parts[2]) if parts[1] == "Write" else 0
        return read, written


def network_bytes(path: Path = Path("/proc/net/dev")) -> tuple[int, int] | None:
    """Bytes received and sent on every interface but loopback (the pod's own network namespace)."""
    text = _read(path)
    if text is None:
        return None
    received = sent = 0
    for line in text.splitlines()[2:]:
        interface, _, counters = line.partition(":")
        fields = counters.split()
        if interface.strip() != "lo" and len(fields) >= 9:
            received, sent = received + int(fields[0]), sent + int(fields[8])
    return received, sent


def _memory_total() -> int | None:
    for line in (_read(Path("/proc/meminfo")) or "").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return None


def gpu_metrics() -> dict[str, float]:
    """Per-GPU utilization and memory through NVML; nothing where no NVIDIA library or GPU is present."""
    try:
        import pynvml  # type: ignore[import-not-found]  # the GPU image's nvidia-ml-py

        pynvml.nvmlInit()
    except Exception:
        return {}
    found: dict[str, float] = {}
    for i in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(i)
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        found[f"gpu_{i}_utilization_percentage"] = float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        found[f"gpu_{i}_memory_usage_megabytes"] = round(memory.used / MEGABYTE, 1)
        found[f"gpu_{i}_memory_usage_percentage"] = round(memory.used / memory.total * 100, 1)
    return found


class Sampler:
    """One sample: what the worker used since the previous one (CPU) or since it started (network, disk)."""

    def __init__(self, cgroup: Cgroup, clock: Callable[[], float] = time.monotonic) -> None:
        self.cgroup, self.clock = cgroup, clock
        self.cores = cpus.cgroup_cpu_limit(cgroup.root) or float(os.cpu_count() or 1)
        self.memory_limit = cgroup.memory_limit_bytes() or _memory_total()
        self.start_network, self.start_disk = network_bytes(), cgroup.disk_bytes()
        self.last = (self.clock(), cgroup.cpu_seconds())

    def sample(self) -> dict[str, float]:
        metrics: dict[str, float] = {}
        now, cpu = self.clock(), self.cgroup.cpu_seconds()
        then, cpu_then = self.last
        self.last = (now, cpu)
        if cpu is not None and cpu_then is not None and now > then:
            used = (cpu - cpu_then) / (now - then)
            metrics["cpu_usage_cores"] = round(used, 3)
            metrics["cpu_utilization_percentage"] = round(used / self.cores * 100, 1)
        memory = self.cgroup.memory_bytes()
        if memory is not None:
            metrics["system_memory_usage_megabytes"] = round(memory / MEGABYTE, 1)
            if self.memory_limit:
                metrics["system_memory_usage_percentage"] = round(memory / self.memory_limit * 100, 1)
        peak = self.cgroup.memory_peak_bytes()
        if peak is not None:
            metrics["system_memory_peak_megabytes"] = round(peak / MEGABYTE, 1)
        network = network_bytes()
        if network is not None and self.start_network is not None:
            metrics["network_receive_megabytes"] = round((network[0] - self.start_network[0]) / MEGABYTE, 3)
            metrics["network_transmit_megabytes"] = round((network[1] - self.start_network[1]) / MEGABYTE, 3)
        disk = self.cgroup.disk_bytes()
        if disk is not None and self.start_disk is not None:
            metrics["disk_read_megabytes"] = round((disk[0] - self.start_disk[0]) / MEGABYTE, 3)
            metrics["disk_write_megabytes"] = round((disk[1] - self.start_disk[1]) / MEGABYTE, 3)
        metrics.update(gpu_metrics())
        return metrics


def period_of(environ: Mapping[str, str]) -> float:
    """spec.mlflow.systemMetrics.periodSeconds (0: off); off outside a job (no tracking server or job uid)."""
    if not worker_log.wanted({**environ, names.ENV_LOG_CAP: "1"}):
        return 0.0
    text = environ.get(names.ENV_SYSTEM_METRICS_SECONDS, "").strip()
    try:
        return max(float(text), 0.0) if text else 0.0
    except ValueError:
        return 0.0


class Reporter:
    """Samples every `period` seconds from start() to stop() and logs each sample into the job's run (found
    by its uid tag, as the worker log is) at step 0, 1, ...; a failed write is said on stderr, then retried
    with the next sample."""

    def __init__(self, environ: Mapping[str, str], period: float, cgroup: Cgroup | None = None) -> None:
        self.environ = dict(environ)
        self.period = period
        self.node_id = names.system_metrics_node_id(from_tf_config(environ.get(names.ENV_TF_CONFIG)).rank)
        self.sampler = Sampler(cgroup or Cgroup())
        self.run_id: str | None = None
        self.step = 0
        self.failing = False
        self._stopped = threading.Event()
        self._final = True
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="system-metrics", daemon=True)
        self._thread.start()

    def stop(self, final: bool = True) -> None:
        """Stop sampling; `final`: log one last sample (what the worker used up to its end) first. A worker
        stopped by a signal skips it: its seconds go to its log's upload (worker_log.py)."""
        self._final = final
        self._stopped.set()
        if final and self._thread is not None:
            self._thread.join(FINAL_SAMPLE_SECONDS)

    def _loop(self) -> None:
        while not self._stopped.wait(self.period):
            self.report()
        if self._final:
            self.report()

    def report(self) -> None:
        metrics = self.sampler.sample()
        try:
            if self.run_id is None:
                self.run_id, self.step = self._find_run()
            self._log(metrics)
            self.step += 1
            self.failing = False
        except LookupError:  # the chief has not opened the run yet
            pass
        except Exception as e:  # MLflow away: training goes on; said once a streak
            if not self.failing:
                print(f"mwms: could not log this worker's system metrics to MLflow: {e}", file=sys.stderr)
            self.failing = True

    def _find_run(self) -> tuple[str, int]:
        """The job's run and the step after this worker's last one there (a restarted group goes on)."""
        until = time.monotonic() + 5
        run_id = worker_log.find_run(self.environ, delays=(), until=until)["run_id"]
        run = worker_log.call(self.environ, until, "GET", f"/api/2.0/mlflow/runs/get?run_id={run_id}")
        prefix = f"{names.SYSTEM_METRICS_PREFIX}{self.node_id}/"
        logged = run["run"]["data"].get("metrics", [])
        steps = [int(m.get("step", 0)) for m in logged if m["key"].startswith(prefix)]
        return run_id, max(steps, default=-1) + 1

    def _log(self, metrics: Mapping[str, float]) -> None:
        millis = int(time.time() * 1000)
        prefix = f"{names.SYSTEM_METRICS_PREFIX}{self.node_id}/"
        batch = {
            "run_id": self.run_id,
            "metrics": [
                {"key": prefix + key, "value": value, "timestamp": millis, "step": self.step}
                for key, value in metrics.items()
            ],
        }
        body = json.dumps(batch).encode()
        until = time.monotonic() + 5
        worker_log.call(self.environ, until, "POST", "/api/2.0/mlflow/runs/log-batch", body)


def reporter(environ: Mapping[str, str]) -> Reporter | None:
    period = period_of(environ)
    return Reporter(environ, period) if period > 0 else None
