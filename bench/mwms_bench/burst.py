"""A create burst on KWOK's nodes, the measure the scale scenarios share, and the judgements on what it
recorded. `create_burst`: jobs created at once from 8 threads, then per job create -> all its pods exist
(the operator's part), -> all bound (the scheduler's), -> all Running (KWOK's), to the end; the operator's
API requests per job; whether anything was lost or doubled (`verdict`). `edge()` runs once half the pods
exist. On records alone: `verdict`, `recovery` (the operator after its API server came back, from its
metrics sampled over time) and `takeover` (a standby taking the leader's Lease, as polled)."""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mwms_bench import measure
from mwms_bench.lab import Lab
from mwms_dev.kwok import WorkerScript

WRITES = ("create", "update", "patch", "delete", "deletecollection", "post", "put")

Sample = tuple[float, dict[str, float]]  # (monotonic time, figure -> value) of one scrape
RECOVERED = {"watch_events": "to_watch_events_again_s", "listed_objects": "to_first_listed_object_s"}
RECOVERED["pods_created"] = "to_pods_created_again_s"


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
    group, never two pods of one worker at once and never more than `replicas` pods alive? Each list names
    the jobs (job/group, job/group/index) that broke a rule; `ok` if none did."""
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


def operator_figures(found: measure.Samples) -> dict[str, float]:
    """Our operator's metrics reduced to what `recovery` and the watch-event counts read."""
    out: dict[str, float] = collections.Counter()
    for (name, pairs), value in found.items():
        labels = dict(pairs)
        if name == "mwms_watch_events_total":
            out["listed_objects" if labels["type"] == "LIST" else "watch_events"] += value
            out[f"watch {labels['resource']} {labels['type']}"] += value
        elif name == "mwms_api_requests_total":
            created = (labels["verb"], labels["resource"], labels["code"][0]) == ("create", "pods", "2")
            out["pods_created"] += value if created else 0
            out["failed_requests"] += value if labels["code"][0] not in "24" else 0  # no answer, or a 5xx
        elif name == "mwms_leader_election_master_status":
            out["leader"] = value
    return dict(out)


def watch_events_per_job(grown: Mapping[str, float], jobs: int) -> dict[str, float]:
    """Watch events per job by `resource type` (LIST: a listed object), from the figures a burst grew."""
    out = {k[6:]: round(v / jobs, 2) for k, v in sorted(grown.items()) if k.startswith("watch ") and v}
    return out | {"all": round(sum(out.values()), 2)}


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
    """When `key` rose after `after`, once it had stood still for `gap` seconds or more (events already in
    flight when the API server stopped, or a pause between two samples, are not its return)."""
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
    at `ready_at`): seconds from the stop until its watch events, a re-list and its pod creates came back;
    the objects it listed again, and its requests that failed meanwhile."""
    out: dict[str, Any] = {"stop_to_readyz_s": round(ready_at - down_at, 2)}
    for key, figure in RECOVERED.items():
        back = resumed(samples, key, down_at)
        out[figure] = round(back - down_at, 2) if back is not None else None

    def grew(key: str, since: float, until: float) -> int:
        return int(value_at(samples, key, until) - value_at(samples, key, since))

    out["objects_relisted"] = grew("listed_objects", down_at, samples[-1][0])
    return out | {"failed_requests_while_down": grew("failed_requests", down_at, ready_at)}


@dataclass(frozen=True)
class LeaseSeen:
    holder: str
    transitions: int
    acquire: str  # the Lease's own MicroTime strings, written by the replicas
    renew: str


def lease_seen(spec: Mapping[str, Any]) -> LeaseSeen:
    holder, transitions = spec.get("holderIdentity") or "", int(spec.get("leaseTransitions") or 0)
    acquired, renewed = str(spec.get("acquireTime") or ""), str(spec.get("renewTime") or "")
    return LeaseSeen(holder, transitions, acquired, renewed)


def micro_time(value: str) -> float:
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()


def takeover(records: list[tuple[float, LeaseSeen]], killed_at: float, old: str) -> dict[str, Any]:
    """From the Lease as polled: who took it from `old` after `killed_at`, seconds from the kill until a poll
    saw that, and from the old holder's last renewal to the new holder's acquireTime by the Lease's times."""
    last_old = next((seen for t, seen in reversed(records) if seen.holder == old and t <= killed_at), None)
    new = next(((t, s) for t, s in records if t >= killed_at and s.holder and s.holder != old), None)
    if new is None:
        return {"taken": False}
    t, seen = new
    gap = micro_time(seen.acquire) - micro_time(last_old.renew) if last_old and last_old.renew else None
    out = {"taken": True, "new_holder": seen.holder, "kill_to_seen_taken_s": round(t - killed_at, 2)}
    out["last_renewal_to_acquire_s"] = round(gap, 2) if gap is not None else None
    return out | {"transitions": seen.transitions - (last_old.transitions if last_old else 0)}


def settle(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    """measure.wait, but a timeout is a finding (printed; what was lost shows in the verdict), not an end."""
    try:
        return measure.wait(predicate, timeout, what, 0.5)
    except TimeoutError as error:
        print(f"timed out: {error}", flush=True)
        return None


def counters(lab: Lab) -> dict[int, measure.Samples]:
    """Each live replica's metrics, by pid (a replica started again counts from zero)."""
    out = {}
    for replica in lab.replicas:
        with contextlib.suppress(OSError, AttributeError):  # not answering, or killed
            out[replica.process.pid] = lab.metrics(replica)
    return out


def growth(before: dict[int, measure.Samples], after: dict[int, measure.Samples]) -> measure.Samples:
    """What every replica counted between the two scrapes, summed."""
    out: collections.Counter = collections.Counter()
    for pid, found in after.items():
        out.update(measure.delta(before.get(pid, {}), found))
    return dict(out)


def per_job(counts: dict[tuple[str, ...], float], jobs: int) -> dict[str, Any]:
    by = {" ".join(key): round(n / jobs, 2) for key, n in sorted(counts.items()) if n}
    writes = sum(n for key, n in counts.items() if key[0].lower() in WRITES)
    return {"total": round(sum(counts.values()) / jobs, 2), "writes": round(writes / jobs, 2), "by": by}


def failed_jobs(lab: Lab, namespace: str) -> dict[str, str]:
    """job -> its Failed condition's reason and message (its phase alone for the peer's)."""
    out = {}
    for name, status in lab.jobs(namespace).items():
        if status["phase"] == "Failed":
            why = next((c for c in status.get("conditions") or [] if c.get("type") == "Failed"), {})
            out[name] = f"{why.get('reason', 'Failed')}: {str(why.get('message', ''))[:160]}"
    return out


Edge = Callable[[], dict[str, Any]]


def create_burst(
    lab: Lab, namespace: str, count: int, replicas: int, fit: str, timeout: float, edge: Edge | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The burst's figures and its API cost."""
    kind, watcher = lab.kind, lab.watcher
    assert watcher is not None
    ns = lab.namespace(namespace)
    jobs = [kind.job(f"{namespace}-{i}", replicas, WorkerScript(run_for=fit)) for i in range(count)]
    before, theirs, cpu = counters(lab), lab.apiserver_requests(), lab.footprint()
    sent: dict[str, float] = {}
    started = time.monotonic()
    creator = threading.Thread(target=lambda: sent.update(lab.create(kind, ns, jobs)), daemon=True)
    creator.start()
    out: dict[str, Any] = {"jobs": count}
    if edge is not None:
        pods = lambda: sum(len(rs) for rs in watcher.groups(ns).values())  # noqa: E731
        settle(lambda: pods() >= count * replicas // 2, timeout, "half the pods")
        out["edge"] = edge() | {"at_s": measure.since(started)}
    creator.join()
    out["create_requests_s"] = measure.since(started)
    failed: dict[str, str] = {}
    looked = [0.0]  # when every job was last listed

    def all_running_or_failed() -> bool:
        groups = watcher.running(ns, replicas)
        if len(set(groups) | set(failed)) < count and time.monotonic() - looked[0] >= 10:
            looked[0] = time.monotonic()  # a list of every job: every 10 s at most
            failed.update(failed_jobs(lab, ns))
        return len(set(groups) | set(failed)) == count

    settle(all_running_or_failed, timeout, "every group Running (or its job Failed)")
    out |= {"all_running_s": measure.since(started), "footprint_all_running": lab.footprint()}
    split: dict[str, list[float]] = collections.defaultdict(list)
    for job, records in watcher.running(ns, replicas).items():
        added, bound, running = (max(getattr(r, t) for r in records) for t in ("added", "bound", "running"))
        split["to_pods_created_operator"].append(added - sent[job])
        split["pods_created_to_bound_scheduler"].append(bound - added)
        split["bound_to_running_kwok"].append(running - bound)
        split["to_all_bound"].append(bound - sent[job])
        split["to_all_running"].append(running - sent[job])
    out |= {key: measure.summary(values) for key, values in split.items()}
    ended = settle(lambda: set(lab.phases(ns).values()) <= {"Succeeded", "Failed"}, timeout, "the end")
    out["all_succeeded_s"] = measure.since(started) if ended else None
    time.sleep(2)  # the last status writes of the last jobs
    failed.update(failed_jobs(lab, ns))
    out["failed"] = {"jobs": len(failed), "why": dict(collections.Counter(failed.values()).most_common(5))}
    end = lab.footprint()  # another process after an exit: its CPU is not comparable
    cpu_used = round(end["cpu_s"] - cpu["cpu_s"], 2) if end["pid"] == cpu["pid"] else None
    out |= {"duplicates": len(watcher.duplicates(ns)), "operator_cpu_s": cpu_used}
    names, seen = [j["metadata"]["name"] for j in jobs], (watcher.workers(ns), watcher.duplicates(ns))
    out["verdict"] = verdict(names, lab.jobs(ns), *seen, watcher.most_alive(ns), replicas)
    grown = growth(before, counters(lab))
    if kind.name == "mwms":
        out["watch_events_per_job"] = watch_events_per_job(operator_figures(grown), count)
    api = {"operator_per_job": per_job(kind.requests(grown), count), "operator_counted_by": kind.api_source}
    api["apiserver_per_job_all_clients"] = per_job(measure.delta(theirs, lab.apiserver_requests()), count)
    return out, api
