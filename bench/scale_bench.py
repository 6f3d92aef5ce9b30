"""The operator at cluster scale, simulated: KWOK fakes the nodes and the pod lifecycle (bench/scale/stages/),
the API server, etcd, scheduler and controller manager are real, the operator is ours, as a local process.

    .venv/bin/python bench/scale_bench.py [--pods 1000] [--nodes 100] [--replicas 4] [--subnet-index 21]
        [--churn-rate 2] [--churn-seconds 60] [--fit 15s] [--label NAME] [--operator training-operator]

--operator training-operator runs Kubeflow's training-operator v1.8.1 (TFJob) through the same stages in
place of ours, one operator at a time (bench/scale/peer.py; what each stage asks of an operator:
bench/scale/operators.py); its entry's label ends in -training-operator.

Stages, in one cluster, each in its own namespace:
1. create burst: pods/replicas jobs created at once (8 client threads). Per job: create -> all its pods
   exist (the operator's time), -> all bound (the scheduler's), -> all Running (KWOK's), p50/p95/max; then
   to all Succeeded after --fit, and the namespace's deletion.
2. API cost: the operator's own requests (mwms_api_requests_total by verb and resource; training-operator's
   rest_client_requests_total by method and code) per job lifecycle of stage 1, and the API server's
   apiserver_request_total over the same time (every client: the metric has no user label).
3. steady churn: --churn-rate jobs a second for --churn-seconds, each Succeeding after --fit and deleted
   by its TTL; jobs reconciled a second, work-queue latency and depth (mwms_workqueue_*; the peer's
   controller-runtime workqueue_*), all jobs gone at the end.
4. failure storm: pods/replicas running jobs, then one worker of 10% of them lost at once (exit 75): time to
   each group's restart all Running (the operator's first counted restart is immediate, as the peer's; the
   peer creates the lost worker's pod alone again), restarts counted against backoffLimit, duplicate workers.
5. footprint: operator RSS and CPU after each stage.
Results go to bench/results/scale.json under --label (default `<pods>p-<nodes>n-<replicas>r`; a run of some
--stages keeps the others' earlier figures, each stage dated in measured_at), and bench/results/scale.png
plots the burst's figures against the number of pods, training-operator's beside ours. Needs root and
`make kwok`.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import platform
import random
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from mwms_dev.kwok import WorkerScript
from mwms_dev.scripts import load_script

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "scale.json"
PLOT = HERE / "results" / "scale.png"


def _load(name: str) -> Any:
    """bench/scale/<name>.py (bench/ is no package)."""
    return load_script(f"mwms_scale_{name}", HERE / "scale" / f"{name}.py")


run, plots, operators = _load("run"), _load("plot"), _load("operators")

WRITES = ("create", "update", "patch", "delete", "deletecollection", "post", "put")
STAGE_KEYS = ("burst", "api", "churn", "storm")  # an entry's figures by stage
DEFAULT_LABEL = "{pods}p-{nodes}n-{replicas}r"
PEER_SUFFIX = "-training-operator"  # the default label of a run of training-operator in place of ours
BESIDE_SUFFIX = "-beside-training-operator"  # the --label of ours run right after it, for the plot


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "p50": round(statistics.median(values), 3),
        "p95": round(percentile(values, 0.95), 3),
        "max": round(max(values), 3),
    }


def progress(**measured: Any) -> None:
    print(json.dumps(measured, default=str), flush=True)


def create_all(env: Any, ops: Any, namespace: str, jobs: list[dict]) -> dict[str, float]:
    """Create every job from 8 threads; name -> when its create request was sent (monotonic)."""
    sent: dict[str, float] = {}

    def create(job: dict) -> None:
        sent[job["metadata"]["name"]] = time.monotonic()
        ops.create(env, namespace, job)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, jobs))
    return sent


def phases(env: Any, namespace: str) -> dict[str, str]:
    return {name: status.get("phase", "") for name, status in env.jobs(namespace).items()}


def failed_jobs(env: Any, namespace: str) -> dict[str, str]:
    """job -> the reason and message of its Failed condition (its phase alone for training-operator's), for
    the jobs that ended Failed: a burst must report them, not wait for ever for their groups to run."""
    out = {}
    for name, status in env.jobs(namespace).items():
        if status.get("phase") == "Failed":
            why = next((c for c in status.get("conditions") or [] if c.get("type") == "Failed"), {})
            out[name] = f"{why.get('reason', 'Failed')}: {str(why.get('message', ''))[:160]}"
    return out


def answers_summary(counts: dict[tuple[str, str], float]) -> dict[str, Any]:
    """What the API server answered the operator other than 2xx, and each call's mean latency (where the
    operator measures it: training-operator does not)."""
    calls: dict[str, float] = {}
    for (call, code), n in counts.items():
        if code != "seconds":
            calls[call] = calls.get(call, 0.0) + n
    failed = {f"{call} {code}": int(n) for (call, code), n in counts.items() if code[0] not in "2s"}
    latency = {
        call: round(counts[(call, "seconds")] / n, 3)
        for call, n in calls.items()
        if (call, "seconds") in counts
    }
    return {"not_2xx": dict(sorted(failed.items())), "mean_latency_s": dict(sorted(latency.items()))}


def per_job(counts: dict[tuple[str, str], float], jobs: int) -> dict[str, Any]:
    by = {f"{verb} {resource}": round(n / jobs, 2) for (verb, resource), n in sorted(counts.items()) if n}
    writes = sum(n for (verb, _), n in counts.items() if verb.lower() in WRITES)
    return {"total": round(sum(counts.values()) / jobs, 2), "writes": round(writes / jobs, 2), "by": by}


def delete_namespace(env: Any, namespace: str, timeout: float) -> float | None:
    """Seconds to delete the namespace and all in it; None if it took longer than `timeout`."""
    started = time.monotonic()
    try:
        env.kubectl("delete", "namespace", namespace, "--wait=true", f"--timeout={int(timeout)}s")
    except RuntimeError as error:
        progress(namespace_delete_timed_out=namespace, error=str(error)[-300:])
        return None
    return round(time.monotonic() - started, 2)


def stage_burst(env: Any, ops: Any, a: argparse.Namespace, count: int, timeout: float) -> dict[str, Any]:
    ns = env.namespace("burst")
    jobs = [ops.job(f"b-{i}", a.replicas, WorkerScript(run_for=a.fit)) for i in range(count)]
    ours, theirs, cpu = ops.requests(env), env.apiserver_requests(), env.footprint()["cpu_s"]
    answers = ops.answers(env)
    started = time.monotonic()
    sent = create_all(env, ops, ns, jobs)
    created_s = time.monotonic() - started
    failed: dict[str, str] = {}  # job -> why, for jobs that ended Failed (no group will run)
    looked = [0.0]

    def all_running_or_failed() -> bool:
        groups = env.watcher.running(ns, a.replicas)
        if len(set(groups) | set(failed)) < count and time.monotonic() - looked[0] >= 10:
            looked[0] = time.monotonic()
            failed.update(failed_jobs(env, ns))  # a list of every job: every 10 s at most
        return len(set(groups) | set(failed)) == count

    run.wait(all_running_or_failed, timeout, "burst Running or Failed", 0.5)
    running = env.watcher.running(ns, a.replicas)
    all_running_s = time.monotonic() - started
    footprint_running = env.footprint()
    operator, scheduler, kwok, bound, up = [], [], [], [], []
    for job, records in running.items():
        t0 = sent[job]
        pods_at = max(r.added for r in records)
        bound_at = max(r.bound for r in records)
        running_at = max(r.running for r in records)
        operator.append(pods_at - t0)
        scheduler.append(bound_at - pods_at)
        kwok.append(running_at - bound_at)
        bound.append(bound_at - t0)
        up.append(running_at - t0)
    run.wait(lambda: set(phases(env, ns).values()) <= {"Succeeded", "Failed"}, timeout, "burst ended", 1)
    failed.update(failed_jobs(env, ns))
    done_s = time.monotonic() - started
    time.sleep(2)  # the last status writes of the last jobs
    api = {
        "operator_per_job": per_job(run.delta(ours, ops.requests(env)), count),
        "operator_counted_by": ops.api_source,
        "apiserver_per_job_all_clients": per_job(run.delta(theirs, env.apiserver_requests()), count),
        "operator_answers": answers_summary(run.delta(answers, ops.answers(env))),
    }
    result = {
        "jobs": count,
        "create_requests_s": round(created_s, 2),
        "to_pods_created_operator": summary(operator),
        "pods_created_to_bound_scheduler": summary(scheduler),
        "bound_to_running_kwok": summary(kwok),
        "to_all_bound": summary(bound),
        "to_all_running": summary(up),
        "all_running_s": round(all_running_s, 2),
        "all_succeeded_s": round(done_s, 2),
        "duplicates": len(env.watcher.duplicates(ns)),
        "failed": {"jobs": len(failed), "why": dict(collections.Counter(failed.values()).most_common(5))},
        "footprint_all_running": footprint_running,
        "operator_cpu_s": round(env.footprint()["cpu_s"] - cpu, 2),
    }
    return {"burst": result, "api": api}


def stage_churn(env: Any, ops: Any, a: argparse.Namespace, timeout: float) -> dict[str, Any]:
    ns = env.namespace("churn")
    before, cpu = env.operator_metrics(ops.metrics_prefix), env.footprint()["cpu_s"]
    depths: list[float] = []
    started = time.monotonic()
    created = 0
    while (elapsed := time.monotonic() - started) < a.churn_seconds:
        due = int(elapsed * a.churn_rate) + 1
        jobs = [
            ops.job(f"c-{i}", a.replicas, WorkerScript(run_for=a.fit), ttl=5) for i in range(created, due)
        ]
        if jobs:
            create_all(env, ops, ns, jobs)
            created = due
        depths.append(ops.depth(env))
        time.sleep(max(0.0, (created / a.churn_rate) - (time.monotonic() - started)))
    window = time.monotonic() - started
    stats = ops.queue_stats(before, env.operator_metrics(ops.metrics_prefix))
    run.wait(lambda: not env.jobs(ns), timeout, "churn jobs deleted by their TTL", 1)
    drained_s = time.monotonic() - started
    third = max(1, len(depths) // 3)
    return {
        "rate_per_s": a.churn_rate,
        "seconds": round(window, 1),
        "jobs": created,
        "reconciles_per_s": round(stats["reconciles"] / window, 1),
        "queue_latency": stats,
        "depth_first_third_mean": round(statistics.mean(depths[:third]), 1),
        "depth_last_third_mean": round(statistics.mean(depths[-third:]), 1),
        "depth_max": max(depths),
        "all_gone_after_s": round(drained_s, 1),
        "duplicates": len(env.watcher.duplicates(ns)),
        "operator_cpu_s": round(env.footprint()["cpu_s"] - cpu, 2),
        "footprint": env.footprint(),
    }


def stage_storm(env: Any, ops: Any, a: argparse.Namespace, count: int, timeout: float) -> dict[str, Any]:
    ns = env.namespace("storm")
    jobs = [ops.job(f"s-{i}", a.replicas, WorkerScript(run_for=None), backoff_limit=2) for i in range(count)]
    create_all(env, ops, ns, jobs)
    running = run.wait(
        lambda: (g := env.watcher.running(ns, a.replicas)) and len(g) == count and g,
        timeout,
        "storm Running",
        0.5,
    )
    victims = random.Random(0).sample(sorted(running), max(1, count // 10))
    pods = {job: f"{job}-worker-{random.Random(job).randrange(a.replicas)}" for job in victims}
    cpu = env.footprint()["cpu_s"]
    started = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda job: env.kwok.lose(ns, pods[job]), victims))
    size = ops.restarted_size(a.replicas)  # the pods a lost worker's job creates again
    restarted = run.wait(
        lambda: (g := env.watcher.running(ns, size, "1")) and set(victims) <= set(g) and g,
        timeout,
        "storm restarts Running",
        0.5,
    )
    lost_at = started
    times = [max(r.running for r in restarted[job]) - lost_at for job in victims]
    # The statuses follow the pods by a reconcile: judge them once every job says Running again (or after
    # 60 s, reporting what they say then)
    with contextlib.suppress(TimeoutError):
        run.wait(lambda: set(phases(env, ns).values()) == {"Running"}, 60, "storm statuses Running", 1)
    settled_s = time.monotonic() - started
    restarts = ops.restarts(env, ns)
    wrong_size = ops.wrong_size(env, ns, a.replicas)
    miscounted = {j: n for j, n in restarts.items() if n != (1 if j in victims else 0)}
    told = {  # what the operator's Events say of two such jobs: which worker of which group failed, and how
        job: env.kubectl(
            "get",
            "events",
            "-n",
            ns,
            f"--field-selector=involvedObject.name={job}",
            "-o",
            "jsonpath={range .items[*]}{.reason}: {.message}{'\\n'}{end}",
        ).splitlines()
        for job in sorted(miscounted)[:2]
    }
    return {
        "jobs": count,
        "lost": len(victims),
        "pods_created_again_per_loss": size,
        "to_restart_running": summary(times),
        "restarts_counted_ok": not miscounted,
        "restarts_miscounted": dict(sorted(miscounted.items())[:10]),
        "miscounted_events": told,
        "statuses_settled_s": round(settled_s, 1),
        "phases": dict(collections.Counter(phases(env, ns).values())),
        "groups_not_replicas": wrong_size,
        "duplicates": len(env.watcher.duplicates(ns)),
        "operator_cpu_s": round(env.footprint()["cpu_s"] - cpu, 2),
        "footprint": env.footprint(),
        "namespace_delete_s": delete_namespace(env, ns, timeout),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=1000, help="worker pods a stage (jobs = pods / replicas)")
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--replicas", type=int, default=4, help="workers per job")
    parser.add_argument("--fit", default="15s", help="how long a simulated fit runs (a Go duration)")
    parser.add_argument("--churn-rate", type=float, default=2.0, help="jobs created a second")
    parser.add_argument("--churn-seconds", type=float, default=60.0)
    parser.add_argument("--stages", default="burst,churn,storm")
    parser.add_argument(
        "--subnet-index", type=int, default=int(os.environ.get("MWMS_BENCH_SUBNET_INDEX", "21"))
    )
    parser.add_argument("--operator", choices=sorted(operators.OPERATORS), default="mwms")
    parser.add_argument("--label", default="", help=f"default {DEFAULT_LABEL}, + {PEER_SUFFIX} for the peer")
    a = parser.parse_args()
    ops = operators.OPERATORS[a.operator]
    label = a.label or DEFAULT_LABEL.format(pods=a.pods, nodes=a.nodes, replicas=a.replicas) + (
        "" if a.operator == "mwms" else PEER_SUFFIX
    )
    count = a.pods // a.replicas
    timeout = 300 + a.pods * 0.5
    stages = a.stages.split(",")
    out: dict[str, Any] = {
        "params": {"pods": a.pods, "nodes": a.nodes, "replicas": a.replicas, "jobs": count, "fit": a.fit},
        "operator": {"name": ops.name, "what": ops.what},
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_before": os.getloadavg(),
        },
    }
    resources = {"cpu": "32", "memory": "256Gi", "pods": 110, "gpus": 8}
    with (
        tempfile.TemporaryDirectory(prefix="mwms-scale-") as tmp,
        ops.env(
            state_dir=Path(tmp), subnet_index=a.subnet_index, nodes=a.nodes, node_resources=resources
        ) as env,
    ):
        out["setup"] = env.timings | {"idle": env.footprint()}
        progress(setup=out["setup"])
        if "burst" in stages:
            out.update(stage_burst(env, ops, a, count, timeout))
            save(label, out, partial=True)
            out["burst"]["namespace_delete_s"] = delete_namespace(env, "burst", timeout)
            progress(burst_namespace_delete_s=out["burst"]["namespace_delete_s"])
        if "churn" in stages:
            out["churn"] = stage_churn(env, ops, a, timeout)
            save(label, out, partial=True)
        if "storm" in stages:
            out["storm"] = stage_storm(env, ops, a, count, timeout)
        out["footprint_end"] = env.footprint()
    out["machine"]["load_after"] = os.getloadavg()
    save(label, out, partial=False)


def save(label: str, out: dict[str, Any], *, partial: bool) -> None:
    """Write (or rewrite) this run's entry after each stage, so a run cut short keeps what it measured."""
    out["partial"] = partial
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    out["measured_at"] = {stage: now for stage in STAGE_KEYS if stage in out} | out.get("measured_at", {})
    progress(**{k: v for k, v in out.items() if k not in ("params", "machine")})
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    earlier = results.get(label, {})  # a run of some stages keeps the others' figures, with their date
    for stage in STAGE_KEYS:
        if stage not in out and stage in earlier:
            out[stage], out["measured_at"][stage] = earlier[stage], earlier.get("measured_at", {}).get(stage)
    results[label] = out
    # the sizes' own runs, not a comparison's (another --label); ours, and training-operator's beside them
    sizes = {
        suffix: {k: v for k, v in results.items() if k == DEFAULT_LABEL.format(**v["params"]) + suffix}
        for suffix in ("", PEER_SUFFIX, BESIDE_SUFFIX)
    }
    ours, peer, beside = ({k: v for k, v in runs.items() if "api" in v} for runs in sizes.values())
    out["plot"] = plots.plot(ours, PLOT, peer, beside) or str(PLOT.relative_to(HERE.parent))
    RESULTS.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    progress(written=str(RESULTS), plot=out["plot"])


if __name__ == "__main__":
    main()
