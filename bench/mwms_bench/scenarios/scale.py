"""`scale`: the operator at cluster scale on KWOK's fake nodes (bench/kwok-stages/ say what each pod does),
with a real API server, etcd, scheduler and controller manager; ours or, with --peer, training-operator in
its place. Stages (--stages, in order, in one cluster):
- burst: pods / jobs-of jobs at once (burst.create_burst); churn: --churn-rate jobs a second for
  --churn-seconds, each deleted by its TTL: reconciles a second, work-queue wait and depth;
- storm: every job running, one worker of 10% of them lost at once (exit 75): each group's restart;
- rss: the operator's memory with every job Running, over --settle seconds;
- restart, leader (the edges): a burst plainly, then with the API server restarted (SIGTERM, the same etcd)
  or the leader of two replicas SIGKILLed once half its pods exist: the operator's recovery from its
  metrics, the takeover from the Lease. A replica that exits is started again after 1 s.
`leader-failover`: two replicas and one TrainJob, no nodes: the leader killed (SIGKILL) or stopped
(SIGTERM), --runs times each: seconds until the next leader's first reconcile."""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import random
import signal
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import kubernetes

from mwms_bench import burst, measure
from mwms_bench.burst import create_burst, settle
from mwms_bench.lab import Lab
from mwms_bench.measure import cpu_seconds
from mwms_bench.results import now
from mwms_bench.scenarios import Figures, Scenario
from mwms_dev.kwok import WorkerScript
from mwms_kit.operator_harness import OPERATOR_NAMESPACE

LEASE = "mwms-operator-leader"


def stage_rss(lab: Lab, a: argparse.Namespace, figures: Figures) -> None:
    """Where the operator's memory goes (smaps: anonymous and file-backed) with every job Running."""
    pid, count, forever = lab.operator.process.pid, a.pods // a.jobs_of, WorkerScript(run_for=None)
    ns, out, cpu = lab.namespace("rss"), {"idle": measure.smaps(pid)}, cpu_seconds(pid)
    started = time.monotonic()
    lab.create(lab.kind, ns, [lab.kind.job(f"r-{i}", a.jobs_of, forever) for i in range(count)])
    measure.wait(lambda: list(lab.phases(ns).values()).count("Running") >= count, a.timeout, "Running", 2)
    out["all_running_s"], samples, end = measure.since(started, 1), [], time.monotonic() + a.settle
    while time.monotonic() < end:
        samples.append(measure.smaps(pid))
        time.sleep(5)
    out |= {
        "all_running": samples[0],
        "settled": samples[-1],
        "max_rss_mib": max(x["rss_mib"] for x in samples),
    }
    out |= {"cpu_s": round(cpu_seconds(pid) - cpu, 1), "threads": len(os.listdir(f"/proc/{pid}/task"))}
    figures["rss"] = out | {"namespace_delete_s": lab.delete_namespace(ns, a.timeout)}


def stage_burst(lab: Lab, a: argparse.Namespace, figures: Figures) -> None:
    count = a.pods // a.jobs_of
    figures["burst"], figures["api"] = create_burst(lab, "b", count, a.jobs_of, a.fit, a.timeout)
    figures["burst"]["namespace_delete_s"] = lab.delete_namespace("b", a.timeout)


def stage_churn(lab: Lab, a: argparse.Namespace, figures: Figures) -> None:
    kind, ns, script = lab.kind, lab.namespace("churn"), WorkerScript(run_for=a.fit)
    before, cpu = lab.metrics(prefix=kind.metrics_prefix), lab.footprint()["cpu_s"]
    depths: list[float] = []
    started, created = time.monotonic(), 0
    while (elapsed := time.monotonic() - started) < a.churn_seconds:
        due = int(elapsed * a.churn_rate) + 1
        lab.create(kind, ns, [kind.job(f"c-{i}", a.jobs_of, script, ttl=5) for i in range(created, due)])
        created = due
        depths.append(sum(measure.grouped(lab.metrics(prefix=kind.depth), kind.depth).values()))
        time.sleep(max(0.0, created / a.churn_rate - (time.monotonic() - started)))
    window = time.monotonic() - started
    stats = kind.queue_stats(before, lab.metrics(prefix=kind.metrics_prefix))
    settle(lambda: not lab.jobs(ns), a.timeout, "churn jobs deleted by their TTL")
    third = max(1, len(depths) // 3)
    out = {"rate_per_s": a.churn_rate, "seconds": round(window, 1), "jobs": created, "queue_latency": stats}
    out |= {"reconciles_per_s": round(stats["reconciles"] / window, 1), "depth_max": max(depths)}
    out |= {"depth_first_third_mean": round(statistics.mean(depths[:third]), 1)}
    out |= {"depth_last_third_mean": round(statistics.mean(depths[-third:]), 1)}
    out |= {"all_gone_after_s": measure.since(started, 1), "duplicates": len(lab.watcher.duplicates(ns))}
    figures["churn"] = out | cpu_and_memory(lab, cpu)


def cpu_and_memory(lab: Lab, cpu_before: float) -> dict[str, Any]:
    """The operator's CPU-seconds since `cpu_before`, and its footprint now."""
    return {"operator_cpu_s": round(lab.footprint()["cpu_s"] - cpu_before, 2), "footprint": lab.footprint()}


def stage_storm(lab: Lab, a: argparse.Namespace, figures: Figures) -> None:
    kind, watcher, ns, count = lab.kind, lab.watcher, lab.namespace("storm"), a.pods // a.jobs_of
    jobs = [kind.job(f"s-{i}", a.jobs_of, WorkerScript(run_for=None), backoff_limit=2) for i in range(count)]
    lab.create(kind, ns, jobs)
    all_running = lambda: len(g := watcher.running(ns, a.jobs_of)) == count and g  # noqa: E731
    running = measure.wait(all_running, a.timeout, "every group Running")
    victims = random.Random(0).sample(sorted(running), max(1, count // 10))
    pods = {job: f"{job}-worker-{random.Random(job).randrange(a.jobs_of)}" for job in victims}
    cpu, started = lab.footprint()["cpu_s"], time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda job: lab.kwok.lose(ns, pods[job]), victims))
    size = kind.restarted_size(a.jobs_of)  # the pods a lost worker's job creates again
    back = lambda: set(victims) <= set(g := watcher.running(ns, size, "1")) and g  # noqa: E731
    restarted = measure.wait(back, a.timeout, "the restarted groups Running")
    times = [max(r.running for r in records) - started for records in restarted.values()]
    with contextlib.suppress(TimeoutError):  # the statuses follow the pods by a reconcile
        measure.wait(lambda: set(lab.phases(ns).values()) == {"Running"}, 60, "statuses Running", 1)
    settled_s, statuses = measure.since(started, 1), lab.jobs(ns)
    miscounted = {j: n for j, n in kind.restarts(statuses, watcher, ns).items() if n != int(j in victims)}
    out = {"jobs": count, "lost": len(victims), "pods_created_again_per_loss": size}
    out |= {"to_restart_running": measure.summary(times), "restarts_counted_ok": not miscounted}
    out |= {"restarts_miscounted": dict(sorted(miscounted.items())[:10]), "statuses_settled_s": settled_s}
    out |= {"duplicates": len(watcher.duplicates(ns))}
    out |= {"phases": dict(collections.Counter(s["phase"] for s in statuses.values()))}
    out |= {"groups_not_replicas": kind.wrong_size(watcher, ns, a.jobs_of)} | cpu_and_memory(lab, cpu)
    figures["storm"] = out | {"namespace_delete_s": lab.delete_namespace(ns, a.timeout)}


def scraped(lab: Lab, replica: Any) -> dict[str, float]:
    """A replica's figures (burst.operator_figures); {} while it does not answer."""
    with contextlib.suppress(OSError, AttributeError):
        return burst.operator_figures(lab.metrics(replica, "mwms_"))
    return {}


def summed(lab: Lab) -> dict[str, float]:
    """Every replica's figures added up: with two, the leader may exit across the restart and change."""
    return dict(sum((collections.Counter(scraped(lab, r)) for r in lab.replicas), collections.Counter()))


def stage_restart(lab: Lab, a: argparse.Namespace, figures: Figures) -> None:
    count = a.pods // a.jobs_of
    baseline, _ = create_burst(lab, "plain", count, a.jobs_of, a.fit, a.timeout)
    lab.delete_namespace("plain", a.timeout)
    sampler = measure.Poller(lambda: summed(lab)).start()
    times: dict[str, float] = {}

    def restart() -> dict[str, Any]:
        times["down"] = time.monotonic()
        ready_s = lab.cluster.restart_apiserver()
        times["ready"] = time.monotonic()
        return {"stop_to_ready_s": round(times["ready"] - times["down"], 2), "start_to_ready_s": ready_s}

    with_edge, _ = create_burst(lab, "restart", count, a.jobs_of, a.fit, a.timeout, restart)
    with_edge["recovery"] = burst.recovery(sampler.stop(), times["down"], times["ready"])
    with_edge["replica_exits"] = [[round(t - times["down"], 1), i, code] for t, i, code in lab.exits]
    with_edge["namespace_delete_s"] = lab.delete_namespace("restart", a.timeout)
    figures["restart"] = {"baseline": baseline, "with_restart": with_edge}


class Leases:
    """The leader's Lease, and the replica holding it (its identity ends in the holder's pid)."""

    def __init__(self, lab: Lab) -> None:
        self.lab, self.api = lab, kubernetes.client.CoordinationV1Api(lab.core.api_client)

    def seen(self) -> burst.LeaseSeen:
        raw = self.api.read_namespaced_lease(LEASE, OPERATOR_NAMESPACE, _preload_content=False)
        return burst.lease_seen(json.loads(raw.data)["spec"])  # its MicroTimes as written

    def replica(self, identity: str) -> int | None:
        pid = int(identity.rsplit("_", 1)[1]) if identity else -1
        return next((i for i, r in enumerate(self.lab.replicas) if r.process and r.process.pid == pid), None)

    def leading(self) -> int | None:
        """The replica that holds the Lease and says it leads (none while a killed one still holds it)."""
        with contextlib.suppress(kubernetes.client.ApiException):
            index = self.replica(self.seen().holder)
            says = index is not None and scraped(self.lab, self.lab.replicas[index]).get("leader")
            return index if says else None
        return None


def stage_leader(lab: Lab, a: argparse.Namespace, figures: Figures) -> None:
    count, leases = a.pods // a.jobs_of, Leases(lab)
    measure.wait(lambda: leases.leading() is not None, 120, "a leader", 0.5)
    baseline, _ = create_burst(lab, "plain", count, a.jobs_of, a.fit, a.timeout)
    lab.delete_namespace("plain", a.timeout)
    polls = measure.Poller(leases.seen).start()
    samplers = [measure.Poller(lambda r=r: scraped(lab, r)).start() for r in lab.replicas]
    killed: dict[str, Any] = {}

    def kill() -> dict[str, Any]:
        killed["identity"] = leases.seen().holder
        index = leases.replica(killed["identity"])
        assert index is not None, killed
        killed["at"] = time.monotonic()
        lab.replicas[index].kill()  # SIGKILL: the Lease is not released
        return {"killed": killed["identity"]}

    with_edge, _ = create_burst(lab, "leader", count, a.jobs_of, a.fit, a.timeout, kill)
    taken = burst.takeover(polls.stop(), killed["at"], killed["identity"])
    sampled = [sampler.stop() for sampler in samplers]
    if taken["taken"] and (new := leases.replica(taken["new_holder"])) is not None:
        for key, what in (("pods_created", "pod_created"), ("listed_objects", "listed_object")):
            rise = burst.first_rise(sampled[new], key, killed["at"])
            taken[f"kill_to_first_{what}_s"] = round(rise - killed["at"], 2) if rise else None
    with_edge["takeover"] = taken
    with_edge["replica_exits"] = [[round(t - killed["at"], 1), i, code] for t, i, code in lab.exits]
    with_edge["namespace_delete_s"] = lab.delete_namespace("leader", a.timeout)
    figures["leader"] = {"baseline": baseline, "with_leader_kill": with_edge}


def reconciles(lab: Lab, replica: Any) -> float:
    """The reconciles a replica counted (-1 while it does not answer)."""
    with contextlib.suppress(OSError, AttributeError):
        return sum(measure.grouped(lab.metrics(replica), "mwms_reconcile_duration_seconds_count").values())
    return -1.0


def one_failover(lab: Lab, how: signal.Signals) -> float:
    """Signal the leader once it has reconciled and the other replica stands by; seconds until a replica
    other than the signalled process reconciles (the first after its start, or more than before)."""

    def leader() -> Any:
        roles = {scraped(lab, r).get("leader"): r for r in lab.replicas}
        return roles[1.0] if {0.0, 1.0} <= set(roles) and reconciles(lab, roles[1.0]) > 0 else None

    signalled = measure.wait(leader, 180, "a leader that reconciled and a standby", 0.5)
    counts, started = {r.process.pid: reconciles(lab, r) for r in lab.replicas}, time.monotonic()
    signalled.process.send_signal(how)
    gone = signalled.process.pid

    def next_reconcile() -> bool:
        live = [r for r in lab.replicas if r.process and r.process.pid != gone]
        return any(reconciles(lab, r) > counts.get(r.process.pid, 0) for r in live)

    measure.wait(next_reconcile, 120, "the next leader's first reconcile", 0.05)
    return time.monotonic() - started


def failover(a: argparse.Namespace, figures: Figures) -> None:
    with (
        tempfile.TemporaryDirectory(prefix="mwms-bench-") as tmp,
        Lab(Path(tmp), a.subnet_index, ours=2, keep_replicas=True) as lab,
    ):
        lab.create(lab.kind, lab.namespace("failover"), [lab.kind.job("bench", 2)])
        for how, key in ((signal.SIGKILL, "killed"), (signal.SIGTERM, "stopped")):
            seconds = [one_failover(lab, how) for _ in range(a.runs)]
            summary = {"runs": len(seconds), "median_s": round(statistics.median(seconds), 2)}
            summary |= {"max_s": round(max(seconds), 2), "all_s": [round(s, 2) for s in seconds]}
            figures[f"leader_{key}_to_first_reconcile"] = summary


STAGES = {"burst": stage_burst, "churn": stage_churn, "storm": stage_storm, "rss": stage_rss}
STAGES |= {"restart": stage_restart, "leader": stage_leader}


def run(a: argparse.Namespace, figures: Figures) -> None:
    a.timeout = a.timeout or 300 + a.pods * 0.5
    stages = a.stages.split(",")
    if unknown := set(stages) - set(STAGES):
        raise ValueError(f"--stages: unknown {sorted(unknown)}")
    leader = "leader" in stages  # two replicas electing a leader, each started again when it exits
    ours, env = 0 if a.peer else 1 + leader, dict(item.split("=", 1) for item in a.env)
    settings = {"operator_env": env, "operator_src": a.operator_src, "keep_replicas": leader}
    with (
        tempfile.TemporaryDirectory(prefix="mwms-bench-") as tmp,
        Lab(Path(tmp), a.subnet_index, kwok_nodes=a.nodes, ours=ours, peer=a.peer, **settings) as lab,
    ):
        figures["operator"] = lab.kind.what
        figures["setup"] = lab.timings | {"idle": lab.footprint()}
        for stage in stages:
            STAGES[stage](lab, a, figures)
            figures.setdefault("measured_at", {})[stage] = now()
        figures["footprint_end"] = lab.footprint()


OPTIONS = {"pods": (1000, "worker pods a stage"), "nodes": 100, "jobs_of": (4, "workers a job")}
OPTIONS["peer"] = (False, "training-operator in ours' place")
OPTIONS |= {"fit": ("15s", "a simulated fit's time"), "stages": ("burst,churn,storm", ",".join(STAGES))}
OPTIONS |= {"churn_rate": 2.0, "churn_seconds": 60.0, "timeout": (0.0, "of each wait; 0: 300 + pods / 2")}
OPTIONS |= {"settle": (90.0, "rss: seconds of samples"), "env": ([], "KEY=VALUE for the operator")}
OPTIONS["operator_src"] = (Path, "another checkout's operator/: a before/after")
HELP = "two replicas: losing the leader -> the next one's first reconcile"
SCENARIOS = [
    Scenario("scale", "the operator on KWOK's nodes: a burst, churn, a storm, edges", run, OPTIONS),
    Scenario("leader-failover", HELP, failover, {"runs": (5, "of each signal")}),
]
