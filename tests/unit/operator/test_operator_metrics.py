"""The operator's Prometheus metrics as served: by namespace, with succeeded/failed counters counted once,
failures by their reason, jobs a queue holds apart, the build, the work queues and the API requests."""

import asyncio

from prometheus_client import REGISTRY, generate_latest

from mwms_contract.conditions import FAILED, STARTUP_TIMEOUT, WORKER_FAILED
from mwms_operator import __version__
from mwms_operator.kube.workqueue import WorkQueue
from mwms_operator.observe.pod_states import WorkerPod
from mwms_operator.telemetry import metrics


def sample(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def test_jobs_are_counted_by_namespace_and_phase_and_vanish_with_their_namespace():
    book = metrics.PhaseBook()
    book.set("u1", "Running", "team-a")
    book.set("u2", "Running", "team-a")
    book.set("u3", "Pending", "team-b")
    assert sample("mwms_trainjobs", namespace="team-a", phase="Running") == 2
    assert sample("mwms_trainjobs", namespace="team-a", phase="Pending") == 0
    assert sample("mwms_trainjobs", namespace="team-b", phase="Pending") == 1
    book.set("u2", "Succeeded", "team-a")
    assert sample("mwms_trainjobs", namespace="team-a", phase="Running") == 1
    book.forget("u3")
    assert sample("mwms_trainjobs", namespace="team-b", phase="Pending") is None
    assert 'mwms_trainjobs{namespace="team-a",phase="Succeeded"} 1.0' in generate_latest().decode()


def test_outcomes_and_restarts_are_counted_on_the_write_that_changed_them():
    def value(name: str) -> float:
        return sample(name, namespace="team-c") or 0.0

    def failed(reason: str) -> float:
        return sample("mwms_trainjobs_failed_total", namespace="team-c", reason=reason) or 0.0

    before = {n: value(n) for n in ("mwms_trainjobs_succeeded_total", "mwms_trainjobs_group_restarts_total")}
    failed_before = failed(STARTUP_TIMEOUT), failed(WORKER_FAILED)
    metrics.count_transitions(
        "team-c", {"phase": "Running", "restarts": 0}, {"phase": "Restarting", "restarts": 1}
    )
    metrics.count_transitions("team-c", {"phase": "Running"}, {"phase": "Succeeded"})
    metrics.count_transitions("team-c", {"phase": "Succeeded"}, {"phase": "Succeeded"})  # a rewrite: no count
    timed_out = [{"type": FAILED, "status": "True", "reason": STARTUP_TIMEOUT}]
    metrics.count_transitions("team-c", {"phase": "Pending"}, {"phase": "Failed", "conditions": timed_out})
    assert value("mwms_trainjobs_succeeded_total") - before["mwms_trainjobs_succeeded_total"] == 1
    assert (failed(STARTUP_TIMEOUT), failed(WORKER_FAILED)) == (failed_before[0] + 1, failed_before[1])
    assert value("mwms_trainjobs_group_restarts_total") - before["mwms_trainjobs_group_restarts_total"] == 1


def test_failure_reasons_are_split_between_the_platform_and_the_user_without_overlap():
    assert not set(metrics.PLATFORM_FAILURE_REASONS) & set(metrics.USER_FAILURE_REASONS)
    assert (
        STARTUP_TIMEOUT in metrics.PLATFORM_FAILURE_REASONS and WORKER_FAILED in metrics.USER_FAILURE_REASONS
    )


def test_pending_jobs_a_queue_holds_are_counted_apart():
    gated = WorkerPod("j-worker-0", 0, 0, "Pending", waiting="SchedulingGated: waiting for kueue admission")
    unschedulable = WorkerPod(
        "j-worker-0", 0, 0, "Pending", waiting="Unschedulable: 0/1 nodes", unschedulable=True
    )
    assert metrics.held_by_queue("Pending", [gated]) and not metrics.held_by_queue("Pending", [unschedulable])
    assert not metrics.held_by_queue("Running", [gated])
    book = metrics.PhaseBook()
    book.set("q1", "Pending", "team-q", queued=True)
    book.set("q2", "Pending", "team-q")
    assert sample("mwms_trainjobs", namespace="team-q", phase="Pending") == 2
    assert sample("mwms_trainjobs_queued", namespace="team-q") == 1
    book.set("q1", "Running", "team-q")  # admitted
    assert sample("mwms_trainjobs_queued", namespace="team-q") == 0
    book.forget("q1")
    book.forget("q2")
    assert sample("mwms_trainjobs_queued", namespace="team-q") is None


def test_build_info_names_the_version():
    assert sample("mwms_build_info", version=__version__) == 1


def test_work_queues_are_measured_as_client_gos():
    names = (
        "adds_total",
        "retries_total",
        "queue_duration_seconds_count",
        "work_duration_seconds_count",
        "depth",
    )

    def queue(name: str) -> tuple[float, ...]:
        return tuple(REGISTRY.get_sample_value(f"mwms_workqueue_{n}", {"name": name}) or 0.0 for n in names)

    async def main() -> None:
        done = asyncio.Event()
        tries: list[str] = []

        async def handle(key: str) -> None:
            tries.append(key)
            if len(tries) == 1:
                raise RuntimeError("first try fails")
            done.set()

        work: WorkQueue[str] = WorkQueue(handle, workers=1, name="metrics-test")
        work.add("a")
        work.add("a")  # already waiting: not added again
        assert queue("metrics-test")[-1] == 1
        work.start()
        await done.wait()
        await work.stop()

    before = queue("metrics-test")
    asyncio.run(asyncio.wait_for(main(), 10))
    after = queue("metrics-test")
    # one add, then one retry (its add after the backoff); two handlings, each waited for and timed
    assert [b - a for a, b in zip(before, after, strict=True)] == [2, 1, 2, 2, 0]
