"""What the scale bench's stages (bench/scale_bench.py) ask of the operator under test, for ours and for
training-operator v1.8.1 (bench/scale/peer.py): its job manifest and how to create one, its own count of API
requests, its work-queue metrics, and how a lost worker's restart shows in its pods and statuses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mwms_contract import names
from mwms_dev.kwok import WorkerScript
from mwms_dev.scripts import load_script

run = load_script("mwms_scale_run", Path(__file__).with_name("run.py"))
peer = load_script("mwms_scale_peer", Path(__file__).with_name("peer.py"))


def delta(before: dict, after: dict) -> dict:
    return run.delta(before, after)


class Ours:
    """mwms-operator: TrainJobs, its mwms_api_* and mwms_workqueue_* metrics; a lost worker restarts its
    group."""

    name = "mwms"
    what = (
        "mwms-operator (TrainJob), as a local process, 8 reconcile workers, 32 API threads, log level WARNING"
    )
    env = run.ScaleEnv
    group, version, plural = names.GROUP, names.VERSION, names.PLURAL
    metrics_prefix = "mwms_"
    queue = "mwms_workqueue_queue_duration_seconds"  # _count, _sum, _bucket
    reconciles = "mwms_reconcile_duration_seconds_count"
    depth_metric = "mwms_workqueue_depth"
    requests_metric, requests_by = "mwms_api_requests_total", ("verb", "resource")
    api_source = "its own mwms_api_requests_total, by verb and resource"

    def job(self, name: str, replicas: int, script: WorkerScript, **policy: Any) -> dict[str, Any]:
        return run.trainjob(name, replicas, script, **policy)

    def create(self, env: Any, namespace: str, job: dict) -> None:
        env.custom.create_namespaced_custom_object(self.group, self.version, namespace, self.plural, job)

    def requests(self, env: Any) -> dict[tuple[str, str], float]:
        """The values of the two labels `requests_by` -> requests the operator made so far."""
        first, second = self.requests_by
        out: dict[tuple[str, str], float] = {}
        for (_, labels), value in env.operator_metrics(self.requests_metric).items():
            label = dict(labels)
            key = (label.get(first, ""), label.get(second, ""))
            out[key] = out.get(key, 0.0) + value
        return out

    def answers(self, env: Any) -> dict[tuple[str, str], float]:
        """(call, answer) -> requests, (call, "seconds") -> their summed latency; call: "verb resource"."""
        out: dict[tuple[str, str], float] = {}
        for (name, labels), value in env.operator_metrics("mwms_api_request").items():
            label = dict(labels)
            call = f"{label.get('verb', '')} {label.get('resource', '')}"
            if name == "mwms_api_requests_total":
                out[(call, label.get("code", ""))] = out.get((call, label.get("code", "")), 0.0) + value
            elif name == "mwms_api_request_duration_seconds_sum":
                out[(call, "seconds")] = value
        return out

    def queue_stats(self, before: dict, after: dict) -> dict[str, Any]:
        d = delta(before, after)
        count = sum(v for (n, _), v in d.items() if n == f"{self.queue}_count")
        total = sum(v for (n, _), v in d.items() if n == f"{self.queue}_sum")
        buckets: dict[float, float] = {}
        for (n, labels), v in d.items():
            if n == f"{self.queue}_bucket":
                le = float(dict(labels)["le"])
                buckets[le] = buckets.get(le, 0.0) + v
        p95 = next((le for le, v in sorted(buckets.items()) if count and v >= 0.95 * count), None)
        reconciles = sum(v for (n, _), v in d.items() if n == self.reconciles)
        return {
            "queued": int(count),
            "mean_s": round(total / count, 4) if count else None,
            "p95_bucket_le_s": p95,
            "reconciles": int(reconciles),
        }

    def depth(self, env: Any) -> float:
        return sum(env.operator_metrics(self.depth_metric).values())

    def restarted_size(self, replicas: int) -> int:
        """Pods of a job created again after one worker is lost: ours restarts the whole group."""
        return replicas

    def restarts(self, env: Any, namespace: str) -> dict[str, int]:
        return {name: s.get("restarts", 0) for name, s in env.jobs(namespace).items()}

    def wrong_size(self, env: Any, namespace: str, replicas: int) -> list[str]:
        """`job/group` of each group without exactly `replicas` worker indices."""
        workers = env.watcher.workers(namespace)
        return [f"{job}/{g}" for (_, job, g), indices in workers.items() if len(indices) != replicas]


class Peer(Ours):
    """training-operator v1.8.1: TFJobs, client-go's rest_client_requests_total and controller-runtime's
    workqueue_* metrics, a lost worker's pod is created again alone."""

    name = "training-operator"
    what = (
        f"Kubeflow training-operator {peer.peer_bench.PEER_VERSION} (TFJob only), as a local process, its "
        "defaults: 1 controller thread, client 20 requests/s (burst 30), log level error"
    )
    env = peer.PeerScaleEnv
    group, version, plural = peer.GROUP, peer.API_VERSION, peer.PLURAL
    metrics_prefix = ""
    queue = "workqueue_queue_duration_seconds"
    reconciles = "controller_runtime_reconcile_total"
    depth_metric = "workqueue_depth"
    # one client-go for all its requests, events included
    requests_metric, requests_by = "rest_client_requests_total", ("method", "code")
    api_source = "its own rest_client_requests_total (client-go), by method and code: no resource label"

    def job(self, name: str, replicas: int, script: WorkerScript, **policy: Any) -> dict[str, Any]:
        return peer.tfjob(name, replicas, script, **policy)

    def answers(self, env: Any) -> dict[tuple[str, str], float]:
        """(method, code) -> requests; controller-runtime 0.17 keeps no request latency."""
        return self.requests(env)

    def restarted_size(self, replicas: int) -> int:
        return 1  # the lost worker's pod alone, under its old name

    def restarts(self, env: Any, namespace: str) -> dict[str, int]:
        """Pods created again per job (its status keeps no count): pods beyond the first of each name."""
        out = dict.fromkeys(env.jobs(namespace), 0)
        for (_, job, group), records in env.watcher.groups(namespace).items():
            if group != "0":
                out[job] = out.get(job, 0) + len(records)
        return out

    def wrong_size(self, env: Any, namespace: str, replicas: int) -> list[str]:
        """Each job without exactly `replicas` worker indices over all its pods."""
        indices: dict[str, set[str]] = {}
        for (_, job, _), workers in env.watcher.workers(namespace).items():
            indices.setdefault(job, set()).update(workers)
        return [job for job, found in indices.items() if len(found) != replicas]


OPERATORS = {"mwms": Ours(), "training-operator": Peer()}
