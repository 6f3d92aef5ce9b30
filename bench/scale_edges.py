"""The scale bench's edges (issue 32), on the same KWOK cluster as bench/scale_bench.py (ScaleEnv):

    .venv/bin/python bench/scale_edges.py [--edges restart,leader] [--pods 1000] [--nodes 100] [--replicas 4]
        [--fit 15s] [--subnet-index 23]

Each edge is a create burst of pods/replicas jobs (as scale_bench's stage 1), run once plainly (the
baseline) and once with the edge in it, in a cluster of its own:
- restart: one operator; the API server is stopped (SIGTERM) and started again on the same etcd once the
  operator has created half the burst's pods. The operator's recovery from its own metrics, sampled every
  0.25 s: seconds from the API server's readiness to its first watch event, its first listed object (a
  re-list: kopf lists everything again when a watch cannot resume, e.g. 410 Gone) and its first pod created.
- leader: two replicas electing a leader on a Lease (MWMS_LEADER_ELECTION); the leader is killed (SIGKILL:
  no release) at half the pods. Takeover from the Lease as polled, and the new leader's first pod. A replica
  that exits is started again after 1 s, as its pod's container would be (bench/scale/replicas.py).
For every burst: nothing lost or doubled (every job Succeeded, no restart, exactly workers 0..replicas-1 in
one group, no duplicate workers; edges.verdict), the burst's times against its baseline, and watch events
received per job by resource and type (the operator's mwms_watch_events_total).
Results: bench/results/scale_edges.json under --label (each edge dated, with the machine's load). Needs root
and `make kwok`.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import kubernetes
import urllib3

from mwms_contract import names
from mwms_dev.kwok import WorkerScript
from mwms_dev.scripts import load_script

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "scale_edges.json"
bench = load_script("mwms_scale_bench", HERE / "scale_bench.py")
run, edges = bench.run, bench._load("edges")

ELECTION = {"MWMS_LEADER_ELECTION": "true", "MWMS_LEADER_ELECTION_NAMESPACE": "default"}
LEASE = "mwms-operator-leader"
RETRYABLE = (429, 500, 502, 503, 504)


def create_all(env: Any, namespace: str, jobs: list[dict], sent: dict[str, float]) -> None:
    """As scale_bench's, but each create is tried again while the API server is away (up to 120 s); a 409
    means an earlier try was created though its answer was lost."""

    def create(job: dict) -> None:
        sent[job["metadata"]["name"]] = time.monotonic()
        deadline = time.monotonic() + 120
        while True:
            try:
                env.custom.create_namespaced_custom_object(
                    names.GROUP, names.VERSION, namespace, names.PLURAL, job
                )
                return
            except kubernetes.client.ApiException as error:
                if error.status == 409:
                    return
                if error.status not in RETRYABLE or time.monotonic() > deadline:
                    raise
            except (urllib3.exceptions.HTTPError, OSError):
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.5)

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, jobs))


def settle(predicate: Any, timeout: float, what: str) -> Any:
    """run.wait, but a timeout is a finding (what was lost shows in the verdict), not the end of the run."""
    try:
        return run.wait(predicate, timeout, what, 0.5)
    except TimeoutError as error:
        bench.progress(timed_out=str(error))
        return None


def operator_log(env: Any) -> list[str]:
    """The lines of every replica's log (operator.log, operator-2.log)."""
    return [
        line for log in sorted(env.state_dir.glob("operator*.log")) for line in log.read_text().splitlines()
    ]


def pods_in(env: Any, namespace: str) -> int:
    return sum(len(records) for records in env.watcher.groups(namespace).values())


def seen_counts(env: Any, namespace: str) -> tuple[int, int, int, int]:
    """Pods of `namespace` the bench's watch has seen created, bound, Running (or ended), ended."""
    records = [r for rs in env.watcher.groups(namespace).values() for r in rs]
    return (
        len(records),
        sum(r.bound is not None for r in records),
        sum(r.running is not None for r in records),
        sum(r.ended is not None for r in records),
    )


def watch_vs_api(env: Any, namespace: str) -> dict[str, Any]:
    """After a wait that timed out: the pods as the API server lists them against the bench's watch (did the
    watch miss events, or did the pods not run?)."""
    pods = env.core.list_namespaced_pod(namespace).items
    phases: dict[str, int] = {}
    for pod in pods:
        phases[pod.status.phase] = phases.get(pod.status.phase, 0) + 1
    with env.watcher.lock:
        records = dict(env.watcher.pods)
    missed = [
        pod.metadata.name
        for pod in pods
        if pod.status.phase != "Pending"
        and (pod.metadata.uid not in records or not records[pod.metadata.uid].running)
    ]
    return {"api_phases": phases, "running_the_watch_missed": len(missed), "examples": missed[:5]}


def burst(env: Any, a: argparse.Namespace, name: str, port: Any, edge: Any = None) -> dict[str, Any]:
    """One create burst in namespace `name`; `edge()` runs once half its pods exist. `port()`: the metrics
    port of the replica that leads (asked again after the edge)."""
    ns = env.namespace(name)
    count = a.pods // a.replicas
    jobs = [run.trainjob(f"{name}-{i}", a.replicas, WorkerScript(run_for=a.fit)) for i in range(count)]
    first_port = port()
    before = edges.scrape(first_port)
    log_before = len(operator_log(env))
    sent: dict[str, float] = {}
    started = time.monotonic()
    creator = threading.Thread(target=create_all, args=(env, ns, jobs, sent), daemon=True)
    creator.start()
    timeline = edges.Poller(lambda: seen_counts(env, ns), interval=2.0).start()
    out: dict[str, Any] = {"jobs": count}
    if edge is not None:
        half = count * a.replicas // 2
        settle(lambda: pods_in(env, ns) >= half, a.timeout, f"{half} pods")
        out["edge"] = edge() | {"at_s": round(time.monotonic() - started, 2)}
    creator.join()
    out["create_requests_s"] = round(time.monotonic() - started, 2)
    running = settle(
        lambda: (g := env.watcher.running(ns, a.replicas)) and len(g) == count and g, a.timeout, "Running"
    )
    out["all_running_s"] = round(time.monotonic() - started, 2) if running else None
    if not running:
        out["not_running"] = watch_vs_api(env, ns)
    if running:
        out["to_pods_created"] = bench.summary(
            [max(r.added for r in rs) - sent[j] for j, rs in running.items()]
        )
        out["to_all_running"] = bench.summary(
            [max(r.running for r in rs) - sent[j] for j, rs in running.items()]
        )
    done = settle(lambda: set(bench.phases(env, ns).values()) == {"Succeeded"}, a.timeout, "Succeeded")
    out["all_succeeded_s"] = round(time.monotonic() - started, 2) if done else None
    time.sleep(2)  # the last status writes and their watch events
    out["seen_created_bound_running_ended"] = [[round(t - started), *c] for t, c in timeline.stop()]
    last_port = port()  # another replica's after a takeover: its counts are all of this burst
    out["watch_events_per_job"] = edges.per_job(
        before if last_port == first_port else {}, edges.scrape(last_port), count
    )
    out["verdict"] = edges.verdict(
        [job["metadata"]["name"] for job in jobs],
        env.jobs(ns),
        env.watcher.workers(ns),
        env.watcher.duplicates(ns),
        env.watcher.most_alive(ns),
        a.replicas,
    )
    lines = operator_log(env)[log_before:]
    out["operator_log"] = {"lines": len(lines), "first": [line[:300] for line in lines[:5]]}
    out["namespace_delete_s"] = bench.delete_namespace(env, ns, a.timeout)
    bench.progress(**{name: out})
    return out


def edge_restart(env: Any, a: argparse.Namespace) -> dict[str, Any]:
    port = lambda: env.metrics_port  # noqa: E731
    baseline = burst(env, a, "plain", port)
    sampler = edges.Poller(lambda: edges.scrape(env.metrics_port)).start()
    times: dict[str, float] = {}

    def restart() -> dict[str, Any]:
        times["down"] = time.monotonic()
        ready_s = env.cluster.restart_apiserver()
        times["ready"] = time.monotonic()
        return {
            "stopped_in_s": round(times["ready"] - times["down"] - ready_s, 2),  # SIGKILL after 10 s
            "apiserver_stop_to_ready_s": round(times["ready"] - times["down"], 2),
            "start_to_ready_s": round(ready_s, 2),
        }

    kwok_before = len(env.kwok.log_path.read_text(errors="replace").splitlines())
    with_edge = burst(env, a, "restart", port, restart)
    samples = sampler.stop()
    kwok_lines = env.kwok.log_path.read_text(errors="replace").splitlines()[kwok_before:]
    with_edge["kwok_log"] = {"lines": len(kwok_lines), "first": [line[:300] for line in kwok_lines[:8]]}
    with_edge["recovery"] = edges.recovery(samples, times["down"], times["ready"])
    return {"baseline": baseline, "with_restart": with_edge}


def edge_leader(env: Any, a: argparse.Namespace) -> dict[str, Any]:
    replicas = bench._load("replicas").Replicas(env, 2)
    coordination = kubernetes.client.CoordinationV1Api(env.core.api_client)
    try:

        def lease() -> Any:
            raw = coordination.read_namespaced_lease(LEASE, "default", _preload_content=False)
            return edges.lease_seen(json.loads(raw.data)["spec"])  # the MicroTimes as written

        def holder() -> Any:
            identity = lease().holder
            return replicas.by_pid(int(identity.rsplit("_", 1)[1])) if identity else None

        def leading_port() -> int:
            try:
                slot = holder()
                return slot.port if slot is not None and edges.scrape(slot.port).get("leader") == 1 else 0
            except (OSError, kubernetes.client.ApiException):  # the killed leader, until another holds it
                return 0

        def standby_up() -> bool:
            try:
                return any(edges.scrape(slot.port).get("leader") == 0 for slot in replicas.slots)
            except OSError:
                return False

        run.wait(leading_port, 120, "a leader that reconciles", 0.5)
        run.wait(standby_up, 120, "a standby", 0.5)
        baseline = burst(env, a, "plain", leading_port)
        polls = edges.Poller(lease).start()
        samplers = [edges.Poller(lambda p=slot.port: edges.scrape(p)).start() for slot in replicas.slots]
        killed: dict[str, Any] = {}

        def kill() -> dict[str, Any]:
            slot = holder()
            killed["identity"], killed["slot"] = lease().holder, replicas.slots.index(slot)
            killed["at"] = time.monotonic()
            replicas.kill(slot)
            return {"killed": killed["identity"]}

        with_edge = burst(env, a, "leader", lambda: run.wait(leading_port, a.timeout, "a leader", 0.5), kill)
        records = polls.stop()
        sampled = [poller.stop() for poller in samplers]
        taken = edges.takeover(records, killed["at"], killed["identity"])
        if taken["taken"]:
            new = replicas.slots.index(replicas.by_pid(int(taken["new_holder"].rsplit("_", 1)[1])))
            first_pod = edges.first_rise(sampled[new], "pods_created", killed["at"])
            first_listed = edges.first_rise(sampled[new], "listed_objects", killed["at"])
            taken |= {
                "kill_to_first_listed_object_s": round(first_listed - killed["at"], 2)
                if first_listed
                else None,
                "kill_to_first_pod_created_s": round(first_pod - killed["at"], 2) if first_pod else None,
            }
        with_edge["takeover"] = taken
        # besides the kill: a replica that exited (1: a leader that lost its Lease) and was started again
        with_edge["replica_exits"] = [
            [round(t - killed["at"], 1), slot, code] for t, slot, code in replicas.exits
        ]
        return {"baseline": baseline, "with_leader_kill": with_edge}
    finally:
        replicas.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edges", default="restart,leader")
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--fit", default="15s")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds for each wait of a burst")
    parser.add_argument(
        "--subnet-index", type=int, default=int(os.environ.get("MWMS_BENCH_SUBNET_INDEX", "23"))
    )
    parser.add_argument("--label", default="")
    a = parser.parse_args()
    label = a.label or bench.DEFAULT_LABEL.format(pods=a.pods, nodes=a.nodes, replicas=a.replicas)
    resources = {"cpu": "32", "memory": "256Gi", "pods": 110, "gpus": 8}
    runs = {"restart": (edge_restart, {}), "leader": (edge_leader, ELECTION)}
    for name in a.edges.split(","):
        measure, operator_env = runs[name]
        entry: dict[str, Any] = {"load_before": os.getloadavg(), "started_at": now()}
        with (
            tempfile.TemporaryDirectory(prefix="mwms-scale-edges-") as tmp,
            run.ScaleEnv(
                state_dir=Path(tmp),
                subnet_index=a.subnet_index,
                nodes=a.nodes,
                node_resources=resources,
                operator_env=operator_env,
            ) as env,
        ):
            entry["setup"] = env.timings
            try:
                entry |= measure(env, a)
            except Exception as error:  # saved with what it says: a run cut short is a finding too
                entry["error"] = repr(error)[:2000]
        entry |= {"load_after": os.getloadavg(), "measured_at": now()}
        save(label, name, entry, a)


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def save(label: str, edge: str, entry: dict[str, Any], a: argparse.Namespace) -> None:
    """Each edge's entry as it ends; another edge's earlier entry stays, with its own date."""
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    size = results.setdefault(label, {})
    size["params"] = {"pods": a.pods, "nodes": a.nodes, "replicas": a.replicas, "fit": a.fit}
    size["machine"] = {"cpus": os.cpu_count()}
    size[edge] = entry
    RESULTS.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    bench.progress(written=str(RESULTS), edge=edge)


if __name__ == "__main__":
    main()
