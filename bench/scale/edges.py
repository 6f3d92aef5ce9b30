"""What bench/scale_edges.py judges and measures, apart from the cluster: whether a burst lost or doubled
anything (`verdict`), how soon the operator came back after the API server did (`recovery`, from its metrics
sampled over time), and how soon a standby took the leader's Lease (`takeover`, from the Lease as polled).
Pure functions on records; `Sampler` and `LeasePoller` make those records on threads of their own."""

from __future__ import annotations

import contextlib
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

Sample = tuple[float, dict[str, float]]  # (monotonic time, figure -> value) of one scrape


def verdict(
    expected: Iterable[str],
    statuses: Mapping[str, Mapping[str, Any]],
    workers: Mapping[tuple[str, str, str], set[str]],
    duplicates: Mapping[str, int],
    most_alive: Mapping[str, int],
    replicas: int,
    phase: str = "Succeeded",
) -> dict[str, Any]:
    """Did each expected job end in `phase` without a restart, with exactly workers 0..replicas-1 in its one
    group (restart "0"), never two pods of one worker at once and never more than `replicas` pods alive?
    Each list names the jobs (or job/group, job/group/index) that broke a rule; `ok` if none did."""
    expected = sorted(expected)
    indices = {str(i) for i in range(replicas)}
    groups: dict[str, set[str]] = {}
    for _, job, group in workers:
        groups.setdefault(job, set()).add(group)
    problems = {
        "lost": [job for job in expected if job not in statuses],
        "not_" + phase.lower(): [job for job in expected if (statuses.get(job) or {}).get("phase") != phase],
        "restarted": [job for job in expected if (statuses.get(job) or {}).get("restarts", 0)],
        "without_pods": [job for job in expected if job not in groups],
        "extra_groups": sorted(f"{job}/{g}" for job, gs in groups.items() for g in gs if g != "0"),
        "wrong_workers": sorted(f"{job}/{g}" for (_, job, g), seen in workers.items() if seen != indices),
        "duplicate_workers": sorted(duplicates),
        "over_replicas": sorted(job for job, most in most_alive.items() if most > replicas),
        "unexpected_jobs": sorted(set(statuses) - set(expected)),
    }
    return {"jobs": len(expected), "ok": not any(problems.values()), **problems}


def first_rise(samples: list[Sample], key: str, after: float) -> float | None:
    """When `key` first stood higher than at the last sample at or before `after`."""
    base = next((values.get(key, 0.0) for t, values in reversed(samples) if t <= after), None)
    if base is None:
        return None
    return next((t for t, values in samples if t > after and values.get(key, 0.0) > base), None)


def value_at(samples: list[Sample], key: str, when: float) -> float:
    """`key` at the last sample at or before `when` (the first sample's if none is that early)."""
    earlier = [values for t, values in samples if t <= when] or [samples[0][1]]
    return earlier[-1].get(key, 0.0)


def resumed(samples: list[Sample], key: str, after: float, gap: float = 2.0) -> float | None:
    """When `key` rose after `after`, once it had stood still for `gap` seconds or more (the outage: events
    already in flight when the API server was stopped, or a pause between two samples, are not its return)."""
    level: float | None = None
    since = 0.0
    for t, values in samples:
        value = values.get(key, 0.0)
        if level is not None and value > level and t > after and t - since >= gap:
            return t
        if value != level:
            level, since = value, t
    return None


def recovery(samples: list[Sample], down_at: float, ready_at: float) -> dict[str, Any]:
    """From the operator's figures sampled across an API server restart (stopped at `down_at`, /readyz again
    at `ready_at`): seconds from the stop until its first failed request, until its watch events came again,
    its first listed object (a re-list: a watch that could not resume) and its pods were created again (the
    API server answers before /readyz); what failed and was queued again meanwhile."""

    def since_stop(when: float | None) -> float | None:
        return round(when - down_at, 2) if when is not None else None

    def during(key: str) -> int:
        return int(value_at(samples, key, ready_at) - value_at(samples, key, down_at))

    end = samples[-1][0]
    listed = value_at(samples, "listed_objects", end) - value_at(samples, "listed_objects", down_at)
    return {
        "stop_to_readyz_s": round(ready_at - down_at, 2),
        "to_first_failed_request_s": since_stop(first_rise(samples, "failed_requests", down_at)),
        "to_watch_events_again_s": since_stop(resumed(samples, "watch_events", down_at)),
        "to_first_listed_object_s": since_stop(resumed(samples, "listed_objects", down_at)),
        "to_pods_created_again_s": since_stop(resumed(samples, "pods_created", down_at)),
        "objects_relisted": int(listed),
        "failed_requests_while_down": during("failed_requests"),
        "requeued_while_down": during("retries"),
    }


def figures(text: str) -> dict[str, float]:
    """The operator's /metrics reduced to what `recovery` and the per-job counts read."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = s.labels
            if s.name == "mwms_watch_events_total":
                kind = "listed_objects" if labels["type"] == "LIST" else "watch_events"
                out[kind] = out.get(kind, 0.0) + s.value
                key = f"watch {labels['resource']} {labels['type']}"
                out[key] = out.get(key, 0.0) + s.value
            elif s.name == "mwms_api_requests_total":
                code = labels["code"]
                if labels["verb"] == "create" and labels["resource"] == "pods" and code.startswith("2"):
                    out["pods_created"] = out.get("pods_created", 0.0) + s.value
                if not code.startswith(("2", "4")):  # no answer, or the API server's 5xx
                    out["failed_requests"] = out.get("failed_requests", 0.0) + s.value
            elif s.name == "mwms_workqueue_retries_total":
                out["retries"] = out.get("retries", 0.0) + s.value
            elif s.name == "mwms_leader_election_master_status":
                out["leader"] = s.value
    return out


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return figures(response.read().decode())


def per_job(before: Mapping[str, float], after: Mapping[str, float], jobs: int) -> dict[str, float]:
    """Watch events per job by `resource type` (LIST: a listed object), from two scrapes."""
    keys = sorted(k for k in after if k.startswith("watch "))
    out = {k[6:]: round((after[k] - before.get(k, 0.0)) / jobs, 2) for k in keys}
    return {k: v for k, v in out.items() if v} | {
        "all": round(sum(after[k] - before.get(k, 0.0) for k in keys) / jobs, 2)
    }


class Poller:
    """Calls `read` every `interval` seconds on a thread until stopped, keeping (time, result) of each call
    that did not raise (a dead replica, an API server away)."""

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
            with contextlib.suppress(Exception):  # a poll that failed is only a gap in the record
                self.records.append((now, self.read()))
            self._stop.wait(self.interval)

    def stop(self) -> list[tuple[float, Any]]:
        self._stop.set()
        self._thread.join()
        return self.records


@dataclass(frozen=True)
class LeaseSeen:
    holder: str
    transitions: int
    acquire: str  # the Lease's own MicroTime strings, written by the replicas
    renew: str


def lease_seen(spec: Mapping[str, Any]) -> LeaseSeen:
    return LeaseSeen(
        spec.get("holderIdentity") or "",
        int(spec.get("leaseTransitions") or 0),
        str(spec.get("acquireTime") or ""),
        str(spec.get("renewTime") or ""),
    )


def micro_time(value: str) -> float:
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()


def takeover(records: list[tuple[float, LeaseSeen]], killed_at: float, old: str) -> dict[str, Any]:
    """From the Lease as polled (monotonic time, what it said): who took it from `old` after `killed_at`,
    seconds from the kill until the poll first saw that, and from the old holder's last renewal to the new
    holder's acquireTime by the Lease's own times (both written on this machine's clock)."""
    last_old = next((seen for t, seen in reversed(records) if seen.holder == old and t <= killed_at), None)
    new = next(((t, s) for t, s in records if t >= killed_at and s.holder and s.holder != old), None)
    if new is None:
        return {"taken": False}
    t, seen = new
    lease_gap = micro_time(seen.acquire) - micro_time(last_old.renew) if last_old and last_old.renew else None
    return {
        "taken": True,
        "new_holder": seen.holder,
        "kill_to_seen_taken_s": round(t - killed_at, 2),
        "last_renewal_to_acquire_s": round(lease_gap, 2) if lease_gap is not None else None,
        "transitions": seen.transitions - (last_old.transitions if last_old else 0),
    }
