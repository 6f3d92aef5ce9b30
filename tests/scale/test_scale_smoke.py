"""The scale bench's smoke version (`python -m mwms_bench scale` is the full one): 1,000 simulated workers on
100 KWOK nodes beside a control plane with no real node, the operator's whole lifecycle on them at once. Every
job must end as its workers' script dictates (success, a permanent failure, retries up to backoffLimit,
removal by TTL, a lost worker's group restart) with every worker index of each group, never two pods of one
worker at once, nor more pods of a job than replicas. Outcomes only; timings belong to the bench. The pod
watch's counting is checked on its own in tests/unit/bench/test_bench_pods.py."""

from __future__ import annotations

from typing import Any

import pytest

from mwms_bench.lab import Lab
from mwms_bench.measure import wait
from mwms_dev.kwok import WorkerScript, build

# func_only: the fixture may wait on a cold KWOK build in `make test`'s background (hack/build/build-kwok.sh's
# lock), bounded by mwms_dev.kwok.build's own timeout; the test itself takes ~1 minute, 2 at load ~14.
pytestmark = [pytest.mark.waits_for_build, pytest.mark.timeout(600, func_only=True)]

REPLICAS = 4
NODES = 100
# class -> number of 4-worker jobs: 250 jobs, 1,000 workers
CLASSES = {"ok": 100, "fail": 40, "retry": 30, "ttl": 40, "lose": 40}
FAILURE = "failed: simulated: the loss went to NaN"
# A `lose` job's restarts allowed: one for its loss and one more, so a second restart shows in its count
# (asserted below) rather than as a Failed job.
LOSE_BACKOFF_LIMIT = 2


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, cluster_platform: None, subnet_index: int) -> Any:
    # (tests/conftest.py's fixtures, not an import of it: in a session that also runs tests/unit, the module
    # named `conftest` may be another folder's)
    build()  # before the control plane starts: a cold build in the background may take minutes
    # The integration tier's cluster runs beside this lane on the session's index (+10, +20, +30 are its
    # spare, node and README clusters): +5 is free.
    with Lab(tmp_path_factory.mktemp("scale"), subnet_index + 5, kwok_nodes=NODES) as scale:
        yield scale


def test_a_thousand_simulated_workers_end_as_their_scripts_dictate(env: Any) -> None:
    scale = env
    scripts = {
        "ok": (WorkerScript(run_for="3s"), {}),
        "fail": (WorkerScript(run_for="3s", exit_code=1, message=FAILURE), {}),
        "retry": (
            WorkerScript(run_for="2s", exit_code=75, message="retryable: simulated"),
            {"backoff_limit": 1},
        ),
        "ttl": (WorkerScript(run_for="3s"), {"ttl": 2}),
        "lose": (WorkerScript(run_for=None), {"backoff_limit": LOSE_BACKOFF_LIMIT}),
    }
    ns = scale.namespace("smoke")
    jobs = [
        scale.kind.job(f"{kind}-{i}", REPLICAS, script, **policy)
        for kind, (script, policy) in scripts.items()
        for i in range(CLASSES[kind])
    ]
    scale.create(scale.kind, ns, jobs)

    def groups_running(restart: str) -> set[str]:
        return set(scale.watcher.running(ns, REPLICAS, restart))

    losers = {f"lose-{i}" for i in range(CLASSES["lose"])}
    wait(lambda: losers <= groups_running("0"), 300, "the `lose` jobs' workers Running", 0.5)
    for i, job in enumerate(sorted(losers)):
        scale.kwok.lose(ns, f"{job}-worker-{i % REPLICAS}")

    last: dict[str, dict] = {}  # the statuses the last look saw, named if the wait times out

    def settled() -> dict[str, dict] | None:
        # The groups, then the statuses: the operator writes `Restarting` before it creates a new group, so
        # a `Running` read after the new group was seen running is the new group's.
        # A group after the loss: the first, or a later one if KWOK's late deletes hit the first (below)
        after_loss = (groups_running(str(r)) for r in range(1, LOSE_BACKOFF_LIMIT + 1))
        restarted = losers <= set().union(*after_loss)
        jobs = scale.jobs(ns)
        last.clear()
        last.update(jobs)
        ended = all(
            jobs.get(name, {}).get("phase") in ("Succeeded", "Failed")
            for kind in ("ok", "fail", "retry")
            for name in (f"{kind}-{i}" for i in range(CLASSES[kind]))
        )
        ttl_gone = not any(name.startswith("ttl-") for name in jobs)
        running = restarted and all(jobs.get(name, {}).get("phase") == "Running" for name in losers)
        return jobs if ended and ttl_gone and running else None

    try:
        jobs = wait(settled, 300, "every job to end as its script dictates", 1)
    except TimeoutError as exc:
        phases = {name: (s.get("phase"), s.get("restarts")) for name, s in sorted(last.items())}
        raise AssertionError(f"{exc}; phase and restarts of each job: {phases}") from exc
    assert scale.operator.process.poll() is None, scale.operator.log()[-3000:]

    def of(kind: str) -> dict[str, dict]:
        return {name: status for name, status in jobs.items() if name.startswith(f"{kind}-")}

    assert {s["phase"] for s in of("ok").values()} == {"Succeeded"}
    assert {s["restarts"] for s in of("ok").values()} == {0}
    assert {s["phase"] for s in of("fail").values()} == {"Failed"}
    for status in of("fail").values():
        failed = next(c for c in status["conditions"] if c["type"] == "Failed")
        assert failed["status"] == "True" and FAILURE in failed["message"], failed
    assert {s["phase"] for s in of("retry").values()} == {"Failed"}
    assert {s["restarts"] for s in of("retry").values()} == {1}  # backoffLimit 1: one restart, then Failed
    for status in of("retry").values():
        failed = next(c for c in status["conditions"] if c["type"] == "Failed")
        assert failed["reason"] == "BackoffLimitExceeded", failed
    assert not of("ttl")  # deleted once their TTL ran out
    assert {s["phase"] for s in of("lose").values()} == {"Running"}
    # Exactly one restart per loss. (Unpatched, KWOK v0.8.0 deletes a terminating pod by name, and a late
    # delete hit the lost pod's successor of the same name: a second loss. hack/build/build-kwok.sh patches
    # its deletes to carry the pod's UID, as a kubelet's do.)
    assert {s["restarts"] for s in of("lose").values()} == {1}, of("lose")

    groups = scale.watcher.workers(ns)
    assert scale.watcher.duplicates(ns) == {}  # never two pods of one worker at once
    most = scale.watcher.most_alive(ns)
    assert {job: n for job, n in most.items() if n > REPLICAS} == {}  # nor more pods of a job than replicas
    wrong = {f"{job}/{group}": sorted(i) for (_, job, group), i in groups.items() if len(i) != REPLICAS}
    assert wrong == {}
    seen = {(job, group) for (_, job, group) in groups}
    for kind, count in CLASSES.items():
        for i in range(count):
            assert (f"{kind}-{i}", "0") in seen
    for i in range(CLASSES["retry"]):
        assert (f"retry-{i}", "1") in seen
    # The operator never asked for a pod that existed: a reconcile knows its own creates before the watch
    # reports them (observe/state.py's expectations), so a burst of 250 jobs costs no 409 on a create.
    conflicts = {
        labels: value
        for (name, labels), value in scale.metrics(prefix="mwms_").items()
        if name == "mwms_api_requests_total" and ("code", "409") in labels and ("verb", "create") in labels
    }
    assert conflicts == {}
