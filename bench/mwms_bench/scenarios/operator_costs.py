"""`operator`: our operator on a local control plane without nodes (pods are created, never run), alone or,
with --peer, beside training-operator, both on one API server. Stages (--stages):
- latency: create one 4-worker job -> its pods and Service(s) reach a watching client (--runs; with --peer
  interleaved, who goes first alternating); delete: create, delete 0.05 s later, until all is gone;
- burst: --burst 2-worker jobs at once -> all pods and Services; RSS; the namespace's deletion and the
  operator's CPU meanwhile (one operator at a time, --burst-rounds, alternating);
- present: --present suspended jobs each: RSS, its slope and the CPU share over --cpu-window seconds;
- unrelated: --unrelated pods of neither (Pending for ever): RSS before and after.
`load`: on a real kubelet node, the operator as its ServiceAccount: --jobs 2-worker jobs at once, each
worker the trainer image's `true`: time to all ended, creation -> completion per job, RSS throughout, the
operator's own histograms; then --present suspended jobs (the `present` stage). At most 50 jobs (a kubelet
takes 110 pods); run it under flock /tmp/mwms-node.lock."""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import kubernetes

from mwms_bench import measure
from mwms_bench.lab import Lab
from mwms_bench.measure import cpu_seconds, rss_mib, since, summary, wait
from mwms_bench.operators import NEVER_PULLED, OPERATORS, Ours
from mwms_bench.scenarios import Figures, Scenario
from mwms_kit.trainjobs import trainjob

STAGES = ("latency", "delete", "burst", "present", "unrelated")


class Arrivals:
    """When each pod and Service of a kind's jobs in one namespace first reached this client, from a watch:
    a poll (two lists parsed into models) takes tens of milliseconds, too coarse for the create target."""

    def __init__(self, lab: Lab, namespace: str, kind: Ours) -> None:
        self.label = kind.job_label
        self.seen: dict[tuple[str, str], dict[str, float]] = {}  # (resource, job) -> name -> time
        self.changed = threading.Condition()
        self.responses = []
        for resource in ("pod", "service"):
            call = getattr(lab.core, f"list_namespaced_{resource}")
            response = call(namespace, label_selector=self.label, watch=True, _preload_content=False)
            self.responses.append(response)
            threading.Thread(target=self._read, args=(resource, response), daemon=True).start()
        time.sleep(1)  # the watches are established

    def _read(self, resource: str, response: Any) -> None:
        with contextlib.suppress(Exception):  # the stream is closed at the end
            for line in kubernetes.watch.watch.iter_resp_lines(response):
                arrived, event = time.monotonic(), json.loads(line)
                meta = event["object"]["metadata"]
                if event["type"] == "ADDED":
                    with self.changed:
                        job = self.seen.setdefault((resource, meta["labels"][self.label]), {})
                        job.setdefault(meta["name"], arrived)
                        self.changed.notify_all()

    def wait(self, jobs: list[str], pods: int, services: int, timeout: float) -> float:
        """When the last of these jobs' pods and Services arrived."""

        def times() -> list[float] | None:
            got = [(self.seen.get(("pod", j), {}), self.seen.get(("service", j), {})) for j in jobs]
            enough = all(len(p) >= pods and len(s) >= services for p, s in got)
            return [t for p, s in got for t in (*p.values(), *s.values())] if enough else None

        with self.changed:
            found = self.changed.wait_for(times, timeout)
        if not found:
            raise TimeoutError(f"{jobs[:3]}: pods and Services")
        return max(found)

    def close(self) -> None:
        for response in self.responses:
            response.shutdown()  # not close(): that waits for the reading thread's lock


@dataclass
class Side:
    """One operator under test: its key in the figures, job kind, process, and latency jobs' namespace."""

    key: str
    kind: Ours
    replica: Any
    namespace: str

    @property
    def pid(self) -> int:
        return self.replica.process.pid

    def gone(self, lab: Lab, name: str) -> bool:
        pods = lab.core.list_namespaced_pod(self.namespace, label_selector=f"{self.kind.job_label}={name}")
        return not pods.items and name not in lab.jobs(self.namespace, self.kind)


def in_turns(sides: list[Side], run: int) -> list[Side]:
    """The operators in this run's order: the one that goes first alternates."""
    return sides if run % 2 == 0 else sides[::-1]


def stage_latency(lab: Lab, sides: list[Side], runs: int) -> dict[str, Any]:
    arrivals = {side.key: Arrivals(lab, side.namespace, side.kind) for side in sides}
    latencies: dict[str, list[float]] = {side.key: [] for side in sides}
    for run in range(-1, runs):  # run -1: each operator's first job after its start, a warm-up
        for side in in_turns(sides, run):
            name, services = f"lat-{run}", (4 if side.kind.service_a_pod else 1)
            started = time.monotonic()
            lab.create(side.kind, side.namespace, [side.kind.job(name, 4)])
            arrived = arrivals[side.key].wait([name], 4, services, 120) - started
            latencies[side.key] += [arrived] if run >= 0 else []
            time.sleep(0.5)  # the operator's follow-up (status, Events) is not the next job's
    listed = lab.core.list_namespaced_pod
    for side in sides:  # the garbage collector deletes their pods a while after; the next stage must not wait
        arrivals[side.key].close()
        lab.kubectl("delete", side.kind.plural, "--all", "-n", side.namespace, "--wait=false")
        wait(lambda s=side: not listed(s.namespace, label_selector=s.kind.job_label).items, 300, "pods gone")
    return {key: summary(values) for key, values in latencies.items()}


def stage_delete(lab: Lab, sides: list[Side], runs: int) -> dict[str, Any]:
    deletes: dict[str, list[float]] = {side.key: [] for side in sides}
    delete = lab.custom.delete_namespaced_custom_object
    for run in range(runs):
        for side in in_turns(sides, run):
            kind, name = side.kind, f"del-{run}"
            lab.create(kind, side.namespace, [kind.job(name, 4)])
            time.sleep(0.05)
            started = time.monotonic()
            delete(kind.group, kind.version, side.namespace, kind.plural, name)
            wait(lambda s=side, n=name: s.gone(lab, n), 180, f"{side.key} {name} gone", 0.02)
            deletes[side.key].append(time.monotonic() - started)
    return {key: summary(values) for key, values in deletes.items()}


def one_burst(lab: Lab, side: Side, jobs: int, namespace: str) -> dict[str, float | None]:
    ns = lab.namespace(namespace)
    arrivals = Arrivals(lab, ns, side.kind)
    names = [f"burst-{i}" for i in range(jobs)]
    started = time.monotonic()
    lab.create(side.kind, ns, [side.kind.job(name, 2) for name in names])
    created = since(started)
    done = arrivals.wait(names, 2, (2 if side.kind.service_a_pod else 1), 900) - started
    arrivals.close()
    time.sleep(10)
    rss, cpu = rss_mib(side.pid), cpu_seconds(side.pid)
    out = {"create_calls_seconds": created, "create_to_all_pods_and_services_seconds": round(done, 2)}
    out |= {"rss_mib_with_them": rss, "namespace_delete_seconds": lab.delete_namespace(ns)}
    return out | {"operator_cpu_seconds_during_namespace_delete": round(cpu_seconds(side.pid) - cpu, 2)}


def stage_burst(lab: Lab, sides: list[Side], jobs: int, rounds: int) -> dict[str, Any]:
    warmup = lab.namespace("burst-warmup")  # so that neither's is the namespace controller's first delete
    for side in sides:
        lab.create(side.kind, warmup, [side.kind.job(f"warmup-{side.key}", 2)])
    lab.delete_namespace(warmup)
    runs: dict[str, list[dict[str, Any]]] = {side.key: [] for side in sides}
    for round_ in range(rounds):
        for side in in_turns(sides, round_):
            runs[side.key].append(one_burst(lab, side, jobs, f"burst-{side.key}-{round_}"))
    out: dict[str, Any] = {"jobs": jobs, "replicas_each": 2, "rounds": rounds}
    for key, measured in runs.items():
        deletes = [r["namespace_delete_seconds"] or 0 for r in measured]
        out[key] = {f: [r[f] for r in measured] for f in measured[0]}
        out[key]["namespace_delete_mean_seconds"] = round(sum(deletes) / len(deletes), 2)
    return out


def stage_present(lab: Lab, sides: list[Side], jobs: int, cpu_window: float) -> dict[str, Any]:
    out: dict[str, Any] = {"jobs_each": jobs, "state": "suspended (no pods), all reconciled"}
    started = time.monotonic()
    for side in sides:
        ns = lab.namespace(f"many-{side.key}")
        lab.create(side.kind, ns, [side.kind.job(f"many-{i}", 2, suspend=True) for i in range(jobs)])
    phases = lambda s: list(lab.phases(f"many-{s.key}", s.kind).values())  # noqa: E731
    for side in sides:
        wait(lambda s=side: phases(s).count("Suspended") == jobs, 900, f"{side.key}: all suspended", 2)
    out["create_to_all_reconciled_seconds"] = since(started, 1)
    time.sleep(10)
    before = {side.key: cpu_seconds(side.pid) for side in sides}
    samplers = {side.key: measure.Poller(lambda p=side.pid: rss_mib(p), 5).start() for side in sides}
    time.sleep(cpu_window)  # a leak shows as a slope of the RSS
    share = {s.key: round((cpu_seconds(s.pid) - before[s.key]) / cpu_window, 4) for s in sides}
    slopes = {key: measure.slope_per_minute(sampler.stop()) for key, sampler in samplers.items()}
    out |= {"cpu_window_seconds": cpu_window, "cpu_share_of_one_core": share, "rss_slope_mib_per_min": slopes}
    out["rss_mib"] = {side.key: rss_mib(side.pid) for side in sides}
    out["namespace_deleted_seconds"] = {side.key: lab.delete_namespace(f"many-{side.key}") for side in sides}
    return out


def stage_unrelated(lab: Lab, sides: list[Side], pods: int, idle: dict[str, float]) -> dict[str, Any]:
    time.sleep(10)
    before, ns = {side.key: rss_mib(side.pid) for side in sides}, lab.namespace("unrelated")
    started = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: lab.core.create_namespaced_pod(ns, unrelated_pod(i)), range(pods)))
    created = since(started, 1)
    time.sleep(20)
    after = {side.key: rss_mib(side.pid) for side in sides}
    out = {"pods": pods, "create_seconds": created, "rss_mib_before": before, "rss_mib_with_them": after}
    return out | {"ratio_to_idle": {key: round(after[key] / idle[key], 2) for key in after}}


def unrelated_pod(i: int) -> dict[str, Any]:
    meta = {"name": f"other-{i}", "labels": {"app": "unrelated"}}
    spec = {"containers": [{"name": "c", "image": NEVER_PULLED}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def run(args: argparse.Namespace, figures: Figures) -> None:
    stages = args.stages.split(",")
    with (
        tempfile.TemporaryDirectory(prefix="mwms-bench-") as tmp,
        Lab(Path(tmp), args.subnet_index, peer=args.peer, operator_src=args.operator_src) as lab,
    ):
        keys = {"mwms": OPERATORS["mwms"]} | ({"peer": OPERATORS["training-operator"]} if args.peer else {})
        sides = [
            Side(key, kind, replica, lab.namespace(f"latency-{key}"))
            for (key, kind), replica in zip(keys.items(), lab.replicas, strict=True)
        ]
        figures["operators"] = [side.kind.what for side in sides]
        time.sleep(5)
        figures["rss_mib_idle"] = idle = {side.key: rss_mib(side.pid) for side in sides}
        latencies = stage_latency(lab, sides, args.runs if "latency" in stages else 0)  # with a warm-up
        figures["create_to_4_pods_and_services_seconds"] = latencies
        if "delete" in stages:
            deletes = stage_delete(lab, sides, args.runs)
            figures["delete_right_after_create_until_job_and_pods_gone_seconds"] = deletes
        if "burst" in stages:
            figures["burst"] = stage_burst(lab, sides, args.burst, args.burst_rounds)
        if "present" in stages:
            figures["present"] = stage_present(lab, sides, args.present, args.cpu_window)
        if "unrelated" in stages:
            figures["unrelated_pods"] = stage_unrelated(lab, sides, args.unrelated, idle)


def seconds_between(start: str, end: str) -> float:
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()  # "Z": Python 3.11+


def cheap_job(name: str, suspend: bool = False) -> dict:
    policy = {"suspend": suspend, "startupTimeoutSeconds": 3600}
    return trainjob(name, 2, container={"command": ["true"]}, runPolicy=policy)


def load(a: argparse.Namespace, figures: Figures) -> None:
    info = {"MWMS_LOG_LEVEL": "INFO"}
    with (
        tempfile.TemporaryDirectory(prefix="mwms-bench-") as tmp,
        Lab(Path(tmp), a.subnet_index, real_nodes=1, as_service_account=True, operator_env=info) as lab,
    ):
        pid, kind = lab.operator.process.pid, lab.kind
        time.sleep(5)
        figures["operator_idle_rss_mib"] = measure.rss_mib(pid)
        ns = lab.namespace("burst")
        sampler, cpu = measure.Poller(lambda: measure.rss_mib(pid), 2).start(), measure.cpu_seconds(pid)
        started = time.monotonic()
        lab.create(kind, ns, [cheap_job(f"run-{i}") for i in range(a.jobs)])
        ended = lambda: [p for p in lab.phases(ns).values() if p in ("Succeeded", "Failed")]  # noqa: E731
        measure.wait(lambda: len(ended()) == a.jobs, 1800, "every job ended", 2)
        burst_s, rss = measure.since(started, 1), [v for _, v in sampler.stop()]
        jobs = lab.custom.list_namespaced_custom_object(kind.group, kind.version, ns, kind.plural)["items"]
        times = [(j["metadata"]["creationTimestamp"], j["status"].get("completionTime")) for j in jobs]
        found, phases = lab.metrics(), collections.Counter(j["status"]["phase"] for j in jobs)
        out = {"trainjobs": a.jobs, "replicas_each": 2, "phases": dict(phases)}
        out["creation_to_completion_seconds"] = measure.summary([seconds_between(*t) for t in times if t[1]])
        out |= {"apply_to_all_finished_seconds": burst_s, "operator_rss_mib": {"max": max(rss)}}
        out["operator_cpu_seconds"] = round(measure.cpu_seconds(pid) - cpu, 1)
        out["reconcile_duration"] = measure.histogram(found, "mwms_reconcile_duration_seconds")
        pods_created = measure.histogram(found, "mwms_trainjobs_pod_creation_duration_seconds")
        figures["burst"] = out | {"creation_to_all_pods_created": pods_created}
        lab.delete_namespace(ns)
        figures["present"] = stage_present(lab, [Side("mwms", kind, lab.operator, "")], a.present, a.soak)
        figures["operator_alive_at_end"] = lab.operator.process.poll() is None
        figures["operator_log_tracebacks"] = lab.operator.log().count("Traceback")


HELP = "create/delete latency, a burst, jobs and pods present; --peer: beside the peer"
OPTIONS = {"peer": (False, "training-operator beside ours"), "stages": (",".join(STAGES), "of the default")}
OPTIONS |= {"runs": 30, "burst": 200, "burst_rounds": 2, "present": 1000, "unrelated": 5000}
OPTIONS["cpu_window"] = (60.0, "seconds of the present stage's CPU share")
OPTIONS["operator_src"] = (Path, "another checkout's operator/: a before/after")
LOAD = {"jobs": 40, "present": 200, "soak": (60.0, "seconds of RSS samples with the present jobs")}
SCENARIOS = [
    Scenario("operator", HELP, run, OPTIONS),
    Scenario("load", "jobs that run to the end on a real node; memory over time", load, LOAD),
]
