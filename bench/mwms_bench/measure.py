"""What every scenario measures with: waits, percentiles, a process's memory and CPU, samples taken over time
on a thread, and Prometheus text read into numbers."""

from __future__ import annotations

import contextlib
import os
import ssl
import statistics
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]  # (name, sorted labels) -> value


def wait(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.25) -> Any:
    """Poll `predicate` until it returns something true, which is returned; TimeoutError names `what`."""
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} (after {timeout:.0f} s)")
        time.sleep(interval)
    return result


def since(started: float, digits: int = 2) -> float:
    """Seconds since `started` (a time.monotonic() value), rounded."""
    return round(time.monotonic() - started, digits)


def summary(values: list[float], digits: int = 3) -> dict[str, float]:
    """How many, p50, p95 and max of `values`."""
    if not values:
        return {"n": 0}
    p95 = sorted(values)[round(0.95 * (len(values) - 1))]
    out = {"n": len(values), "p50": round(statistics.median(values), digits)}
    return out | {"p95": round(p95, digits), "max": round(max(values), digits)}


def slope_per_minute(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) samples, per minute: a leak shows as a slope."""
    n = len(samples)
    mean_t = sum(t for t, _ in samples) / max(n, 1)
    mean_v = sum(v for _, v in samples) / max(n, 1)
    var = sum((t - mean_t) ** 2 for t, _ in samples)
    covar = sum((t - mean_t) * (v - mean_v) for t, v in samples)
    return round(60 * covar / var, 3) if var else 0.0


def machine_busy_seconds(stat: str | None = None) -> float:
    """CPU seconds every core of the machine has spent busy since boot (/proc/stat's first line, all but idle
    and iowait): the difference over a command is the work it made, whoever ran it (root's node included)."""
    fields = [int(f) for f in (stat or Path("/proc/stat").read_text()).splitlines()[0].split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def command_label(argv: list[str]) -> str:
    """What a process is, in a word or two: the program, or for Python the module (-m) or the script."""
    if not argv:
        return "?"
    program = Path(argv[0]).name
    if not program.startswith("python"):
        return program
    args = [a for a in argv[1:] if a not in ("-u", "-B", "-E", "-s", "-I")]
    if args[:1] == ["-m"] and len(args) > 1:
        return f"python -m {args[1]}"
    if args and not args[0].startswith("-"):
        return f"python {Path(args[0]).name}"
    return f"python {args[0]}" if args else "python"


class CpuByCommand:
    """Every process's CPU seconds by command_label, read from /proc each `interval` seconds: a process is
    counted as of its last reading, so one that lives less than `interval` is missed."""

    def __init__(self, interval: float = 2.0) -> None:
        self.seen: dict[tuple[int, int], tuple[str, float]] = {}  # (pid, start tick) -> (label, CPU s)
        self.before: dict[tuple[int, int], float] = {}
        self.poller = Poller(self.read_all, interval)

    def start(self) -> CpuByCommand:
        """From now: what the processes running now have spent so far is not counted."""
        self.read_all()
        self.before = {key: seconds for key, (_, seconds) in self.seen.items()}
        self.poller.start()
        return self

    def stop(self) -> CpuByCommand:
        self.poller.stop()
        self.read_all()
        return self

    def read_all(self) -> None:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = _stat_fields(int(entry.name))
                key = (int(entry.name), int(fields[19]))  # a pid with its start time: never reused
                label = self.seen[key][0] if key in self.seen else command_label(self.argv(entry))
                self.seen[key] = (label, _cpu(fields))

    @staticmethod
    def argv(entry: Path) -> list[str]:
        return [a.decode(errors="replace") for a in (entry / "cmdline").read_bytes().split(b"\0") if a]

    def minutes(self, top: int = 15, digits: int = 1) -> dict[str, float]:
        """The `top` labels by CPU minutes, the rest summed as "other"."""
        totals: dict[str, float] = {}
        for key, (label, seconds) in self.seen.items():
            totals[label] = totals.get(label, 0.0) + (seconds - self.before.get(key, 0.0)) / 60
        ranked = sorted(totals.items(), key=lambda item: -item[1])
        out = {label: round(minutes, digits) for label, minutes in ranked[:top]}
        return out | {"other": round(sum(minutes for _, minutes in ranked[top:]), digits)}


# --- a process ----------------------------------------------------------------------------------------


def _status_mib(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError(f"no {field} for pid {pid}")


def rss_mib(pid: int) -> float:
    return _status_mib(pid, "VmRSS")


def peak_rss_mib(pid: int) -> float | None:
    """The process's high-water RSS (VmHWM); None once it is gone."""
    with contextlib.suppress(OSError, RuntimeError):
        return _status_mib(pid, "VmHWM")
    return None


def _stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the command name (which may hold spaces): [0] is the state."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _cpu(fields: list[str]) -> float:
    """User and system CPU seconds of _stat_fields."""
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    return round(_cpu(_stat_fields(pid)), 2)


def smaps(pid: int) -> dict[str, float]:
    """Rss, its anonymous part and the file-backed rest, in MiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        key, value = line.split(":", 1)
        fields[key] = int(value.split()[0]) / 1024
    rss, anon = fields["Rss"], fields["Anonymous"]
    return {"rss_mib": round(rss, 1), "anon_mib": round(anon, 1), "file_mib": round(rss - anon, 1)}


class Poller:
    """Calls `read` every `interval` seconds on a thread until stopped, keeping (monotonic time, result) of
    each call that did not raise (a replica gone, an API server away: a gap in the record)."""

    def __init__(self, read: Callable[[], Any], interval: float = 0.25) -> None:
        self.read, self.interval = read, interval
        self.records: list[tuple[float, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Poller:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            with contextlib.suppress(Exception):
                self.records.append((now, self.read()))
            self._stop.wait(self.interval)

    def stop(self) -> list[tuple[float, Any]]:
        self._stop.set()
        self._thread.join()
        return self.records


# --- Prometheus text ------------------------------------------------------------------------------------


def samples(text: str, prefix: str = "") -> Samples:
    """The samples whose name starts with `prefix`."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith(prefix):
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def scrape(url: str, prefix: str = "", context: ssl.SSLContext | None = None) -> Samples:
    with urllib.request.urlopen(url, timeout=30, context=context) as response:
        return samples(response.read().decode(), prefix)


def delta(before: Mapping[Any, float], after: Mapping[Any, float]) -> dict[Any, float]:
    """What grew between two scrapes (or groupings of them)."""
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0)}


def grouped(found: Samples, name: str, *labels: str) -> dict[tuple[str, ...], float]:
    """`name`'s samples summed by the values of `labels`."""
    out: dict[tuple[str, ...], float] = {}
    for (sample, pairs), value in found.items():
        if sample == name:
            key = tuple(dict(pairs).get(label, "") for label in labels)
            out[key] = out.get(key, 0.0) + value
    return out


def histogram(found: Samples, name: str) -> dict[str, Any]:
    """Count, mean and the bucket bounds holding the 50th, 95th and 99th percentile of histogram `name`,
    summed over its other labels."""
    count = sum(grouped(found, f"{name}_count").values())
    total = sum(grouped(found, f"{name}_sum").values())
    buckets = sorted((float(le), n) for (le,), n in grouped(found, f"{name}_bucket", "le").items())

    def bound(q: float) -> float | None:
        return next((le for le, n in buckets if count and n >= q * count), None)

    out = {"count": int(count), "mean_s": round(total / count, 4) if count else None}
    return out | {f"p{round(q * 100)}_le_s": bound(q) for q in (0.5, 0.95, 0.99)}
