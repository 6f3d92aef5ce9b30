"""The CI-sized load run (the full one is `python -m mwms_bench load`): many TrainJobs
applied in one go all reach Succeeded, each with exactly its own pods, and the operator stays up without an
unhandled error. Outcomes only; timings belong to the bench."""

from __future__ import annotations

from mwms_contract.names import LABEL_JOB_NAME

JOBS = 30


def test_many_jobs_applied_at_once_all_succeed(operator, make_standin, kubectl, namespace, wait_for):
    names = [f"load-{i}" for i in range(JOBS)]
    log_before = len(operator.log())
    jobs = [make_standin(name, 2, runPolicy={"cleanPodPolicy": "None"}) for name in names]
    kubectl.apply(jobs, "-n", namespace)

    def phases() -> dict[str, str]:
        items = kubectl.json("get", "trainjobs", "-n", namespace)["items"]
        return {job["metadata"]["name"]: (job.get("status") or {}).get("phase") for job in items}

    def finished() -> dict[str, str] | None:
        now = phases()
        return now if all(now.get(n) in ("Succeeded", "Failed") for n in names) else None

    done = wait_for(
        finished,
        timeout=600,
        interval=3,
        what=f"{JOBS} TrainJobs to finish",
    )
    assert set(done.values()) == {"Succeeded"}, {n: p for n, p in done.items() if p != "Succeeded"}

    pods = kubectl.json("get", "pods", "-n", namespace)["items"]
    by_job: dict[str, list[str]] = {}
    for pod in pods:
        by_job.setdefault(pod["metadata"]["labels"][LABEL_JOB_NAME], []).append(pod["metadata"]["name"])
    assert {job: sorted(p) for job, p in by_job.items()} == {
        name: [f"{name}-worker-0", f"{name}-worker-1"] for name in names
    }
    assert operator.process is not None and operator.process.poll() is None, "the operator died"
    assert "Traceback" not in operator.log()[log_before:]
